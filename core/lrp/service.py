"""What the MambaLRP tab and ``python -m core lrp`` do, one function per user action, each returning a
:class:`core.runner.Result` (status text, data, tables, figures, files):

    text_result(model, text, methods, target=None, rules=None)     relevance of every token, per method
    image_result(model, image=None, sample=None, methods, ...)     relevance of every patch, per method
    target_choices(model, text=None)                               a classifier's classes / an LM's likeliest tokens
    evaluation_result(model, n, steps, methods, ...)               faithfulness (Delta A^F) and conservation
    long_range_result(model, ...), key_token_result(...)            where relevance lies; ground truth
    committed_result(item)                                         the committed evaluations (assets/lrp/evaluation)
    precompute_examples(), precompute_evaluation(...)              the files the tab opens on
    cost_note()                                                    what the text cap costs (MEASURED_COST)

``rules`` are the switches of MambaLRP's rules (the paper's ablation) as keyword arguments of
:meth:`core.lrp.LRPRules.from_toggles` (``{"ssm": False}``, ``{"gamma": 0.25, "gamma_layers": ["conv"]}``); they are
translated into an :class:`LRPRules` once, with the model's default gamma (0 for text, 0.25 for images). Explanations
go through :func:`core.runner.lookup`: a precomputed example (``assets/lrp/examples.json``) or a cached result is
returned at once, without loading the model.
"""
from __future__ import annotations

import time
from pathlib import Path

from core.errors import BadInputError
from core.lrp import evaluation as E
from core.lrp import figures as F
from core.lrp import inputs
from core.lrp.methods import METHODS, VISION_GAMMA, explain, method_names
from core.lrp.rules import GAMMA_LAYERS, LRPRules
from core.paths import ASSETS_DIR
from core.checks import check_threads
from core.progress import report, scaled
from core.results import Result, source_text
from core.runner import digest, ExampleStore, lookup

EXAMPLES = ExampleStore(ASSETS_DIR / "lrp" / "examples.json")
TEXT_MODELS = ("mamba-sentiment", "mamba-lm")
IMAGE_MODELS = ("vision-mamba-mnist",)
EVAL_MODELS = ("mamba-sentiment", "vision-mamba-mnist")
DEFAULT_METHODS = ("mambalrp", "gradient_x_input", "integrated_gradients", "mamba_attr")
MAX_TOKENS = inputs.MAX_TOKENS
MAX_TEXT_CHARS = inputs.MAX_TEXT_CHARS
# MambaLRP at the papers' sizes, measured by ``python bench/lrp.py --parts real_size`` (random weights of the
# published configs, a shared 2-core CPU, 2 torch threads; medians, see the README):
# (config, tokens) -> (seconds of explain(method="mambalrp"), that time / one no-grad forward in the same run)
# bench/lrp.py --parts real_size on the quiet 2-core development CPU, 2 threads (README, MambaLRP): seconds, forwards
MEASURED_COST = {("mamba-130m", 512): (5.59, 2.65), ("mamba-130m", 2048): (19.36, 1.93),
                 ("mamba-370m", 512): (14.81, 2.62)}
TOGGLES = ("silu", "ssm", "gate", "norm", "gamma", "gamma_layers")  # LRPRules.from_toggles' switches
TEXT_EXAMPLES = {
    "mamba-sentiment": ["A gorgeous, witty and seductive movie.",
                        "The plot is predictable and the acting is painfully flat.",
                        "It is not a bad film, but the ending is a complete mess."],
    "mamba-lm": ["He was born in the city of", "The function returns a list of",
                 "the acting is good but the story is"],
}
IMAGE_SAMPLES = (0, 1, 2, 3)  # indices into the mnist-5k test split
EVALUATION_ITEMS = {  # what the tab shows from assets/lrp/evaluation: item -> (file stem, runner, arguments)
    "mnist": ("faithfulness-vision-mamba-mnist", "evaluate", {"model_ref": "vision-mamba-mnist", "n": 100}),
    "sentiment": ("faithfulness-mamba-sentiment", "evaluate", {"model_ref": "mamba-sentiment", "n": 150}),
    "lm": ("long-range-mamba-lm", "long_range_evaluation",
           {"model_ref": "mamba-lm", "n": 40, "options": {"integrated_gradients": {"n_steps": 8}}}),
    "key-token": ("key-token", "key_token_evaluation", {"n": 100}),
}


def method_choices() -> list[tuple[str, str]]:
    """``(label, name)`` of every registered method, for checkboxes and the CLI help."""
    return [(m.label, name) for name, m in METHODS.items()]


# ---- validated requests -----------------------------------------------------------------------------------------
def _model(ref) -> str:
    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick mamba-sentiment, mamba-lm or vision-mamba-mnist.")
    return str(ref).strip()


def _toggles(rules) -> dict:
    """The rule switches that differ from the defaults, checked (the cache key); ``{}`` is MambaLRP as published."""
    rules = dict(rules or {})
    unknown = sorted(set(rules) - set(TOGGLES))
    if unknown:
        raise BadInputError(f"Unknown rule(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(TOGGLES)}.")
    LRPRules.from_toggles(**rules)  # validates gamma and the layers
    out = {k: False for k in ("silu", "ssm", "gate", "norm") if k in rules and not rules[k]}
    if rules.get("gamma") not in (None, ""):
        out["gamma"] = float(rules["gamma"])
        out["gamma_layers"] = sorted(set(rules.get("gamma_layers", GAMMA_LAYERS) or []))
    return out


def _target(target):
    if target is None or target == "":
        return None
    try:
        return int(target)
    except (TypeError, ValueError):
        raise BadInputError(f"The target must be a class index or token id, got {target!r}.") from None


def _options(method: str, rules: LRPRules) -> dict:
    return {"rules": rules} if method == "mambalrp" else dict(METHODS[method].options)


def cost_note() -> str:
    """What the text cap costs, from :data:`MEASURED_COST` (measured, not modelled), and which methods cost more."""
    ratios = [ratio for _, ratio in MEASURED_COST.values()]
    sizes = ", ".join(f"{config}-sized at {tokens} tokens {seconds:.0f} s"
                      for (config, tokens), (seconds, _) in MEASURED_COST.items())
    return (f"MambaLRP costs {min(ratios):.1f}-{max(ratios):.1f} forward passes; on a quiet 2-core CPU it took: "
            f"{sizes} (several times longer on a busy one); the embedded models well under a second. Integrated Gradients and SmoothGrad repeat a gradient "
            "per step (32, 16); MambaAttr and Attention Rollout grow with the square of the length.")


def _explain_all(loaded, methods, target, rules, progress=None, **model_inputs) -> dict:
    out = {}
    for i, name in enumerate(methods):
        label = METHODS[name].label
        step = scaled(progress, i / len(methods), (i + 1) / len(methods))  # this method's share of the bar
        report(step, 0.0, label)
        per_layer = None if step is None else (lambda fraction, message, label=label: step(fraction,
                                                                                          f"{label}: {message}"))
        t0 = time.perf_counter()
        e = explain(loaded.model, target=target, method=name, progress=per_layer, **model_inputs,
                    **_options(name, rules))
        out[name] = {"label": METHODS[name].label, "relevance": e.relevance.tolist(), "logit": e.logit,
                     "total": e.total, "absorbed": e.absorbed, "target": e.target,
                     "conservative": METHODS[name].conservative, "seconds": time.perf_counter() - t0}
    report(progress, 1.0, "done")
    return out


# ---- text -------------------------------------------------------------------------------------------------------
def text_result(model: str, text: str, methods=DEFAULT_METHODS, target=None, rules: dict | None = None,
                progress=None) -> Result:
    """Relevance of every token of ``text`` for the model's prediction (or ``target``), per method."""
    return _explanation(*_text_request(model, text, methods, target, rules, progress))


def _explanation(model: str, analysis: str, params: dict, compute) -> Result:
    from core.zoo import fingerprint

    found = lookup(fingerprint(model), analysis, params, compute, examples=EXAMPLES,
                   check=lambda data: explanation_view({**data, "model": model}))
    return explanation_view({**found.data, "model": model}, found.source, found.key)


def _text_request(model, text, methods, target, rules, progress):
    model, methods = _model(model), method_names(methods, empty_means_all=False)
    toggles, target = _toggles(rules), _target(target)
    if not isinstance(text, str) or not text.strip():
        raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
    cut = ""
    if len(text) > MAX_TEXT_CHARS:  # cut before it is hashed, stored or tokenized (which end depends on the model)
        text, cut = inputs.cut_text(inputs.load(model), text)
    params = {"text": text, "methods": methods, "target": target, "rules": toggles, "max_tokens": MAX_TOKENS,
              "options": {m: METHODS[m].options for m in methods if m != "mambalrp"}}

    def compute() -> dict:
        loaded = inputs.load(model)
        lrp_rules = LRPRules.from_toggles(**toggles)
        ids, pieces, note = inputs.tokenize(loaded, text)
        note = " ".join(part for part in (cut, note) if part)
        logits = inputs.logits(loaded, input_ids=ids)
        t = inputs.check_target(target, logits.shape[0])
        res = _explain_all(loaded, methods, t, lrp_rules, progress, input_ids=ids)
        t = next(iter(res.values()))["target"]
        labels = inputs.labels_of(loaded)
        return {"kind": "text", "model": model, "fingerprint": loaded.fingerprint, "model_kind": inputs.kind(loaded),
                "text": text, "tokens": pieces, "token_ids": ids[0].tolist(), "note": note, "target": t,
                "target_name": labels.get(t) if labels else inputs.pieces_of(loaded, [t])[0],
                "predictions": inputs.predictions(loaded, logits), "rules": toggles, "methods": res}
    return model, "lrp/text", params, compute


def target_choices(model: str, text: str | None = None, k: int = 10) -> list[tuple[str, int]]:
    """``(label, id)`` pairs: a classifier's classes; a language model's ``k`` likeliest next tokens after ``text``."""
    from core.lrp.adapters import adapter_for

    loaded = inputs.load(_model(model))
    if inputs.kind(loaded) != "lm":
        labels = inputs.labels_of(loaded)
        return [(f"{i}: {labels.get(i, str(i))}", i) for i in range(adapter_for(loaded.model).num_outputs)]
    if not text or not text.strip():
        return []
    ids, _, _ = inputs.tokenize(loaded, text)
    preds = inputs.predictions(loaded, inputs.logits(loaded, input_ids=ids), k)
    return [(inputs.target_label(p, lm=True), p["id"]) for p in preds]


# ---- images -----------------------------------------------------------------------------------------------------
def image_result(model: str = IMAGE_MODELS[0], image=None, sample: int | None = None, methods=DEFAULT_METHODS,
                 target=None, rules: dict | None = None, progress=None) -> Result:
    """Relevance of every patch for the model's prediction (or ``target``), per method; ``image`` (an upload)
    wins over ``sample`` (an mnist-5k test index)."""
    return _explanation(*_image_request(model, image, sample, methods, target, rules, progress))


def _image_request(model, image, sample, methods, target, rules, progress):
    model, methods = _model(model), method_names(methods, empty_means_all=False)
    toggles, target = _toggles(rules), _target(target)
    pixels, note, label = None, "", None
    if image is not None:
        loaded = inputs.load(model)
        if inputs.kind(loaded) != "vision":
            raise BadInputError(f"{model} is not an image model.", fix="Pick vision-mamba-mnist.")
        pixels, note = inputs.prepare_image(image, loaded.model.config.image_size)
        source = {"image": digest(pixels.round(6).tolist())}
    elif sample is not None:
        try:
            source = {"sample": int(sample)}
        except (TypeError, ValueError):
            raise BadInputError(f"Sample must be a number, got {sample!r}.") from None
    else:
        raise BadInputError("No image.", fix="Upload an image or pick a test sample.")
    params = {**source, "methods": methods, "target": target, "rules": toggles,
              "options": {m: METHODS[m].options for m in methods if m != "mambalrp"}}

    def compute() -> dict:
        import torch

        nonlocal pixels, label
        loaded = inputs.load(model)
        if inputs.kind(loaded) != "vision":
            raise BadInputError(f"{model} is not an image model.", fix="Pick vision-mamba-mnist.")
        if pixels is None:
            pixels, label = inputs.test_image(source["sample"])
        px = torch.from_numpy(pixels)[None, None]
        logits = inputs.logits(loaded, pixel_values=px)
        t = inputs.check_target(target, logits.shape[0])
        lrp_rules = LRPRules.from_toggles(**toggles, default_gamma=VISION_GAMMA)
        res = _explain_all(loaded, methods, t, lrp_rules, progress, pixel_values=px)
        t = next(iter(res.values()))["target"]
        labels = inputs.labels_of(loaded)
        return {"kind": "image", "model": model, "fingerprint": loaded.fingerprint, "image": pixels.round(4).tolist(),
                "label": label, "sample": source.get("sample"), "note": note, "target": t,
                "target_name": labels.get(t, str(t)), "predictions": inputs.predictions(loaded, logits),
                "grid": list(loaded.model.config.grid), "rules": toggles, "methods": res}
    return model, "lrp/image", params, compute


# ---- what an explanation shows ----------------------------------------------------------------------------------
def relevance_rows(result: dict) -> list[dict]:
    """One row per unit (token or patch) with every method's relevance: the CSV file."""
    names = list(result["methods"])
    if result["kind"] == "text":
        return [{"position": i, "token": tok, **{n: result["methods"][n]["relevance"][i] for n in names}}
                for i, tok in enumerate(result["tokens"])]
    h, w = result["grid"]
    return [{"row": r, "col": c, **{n: result["methods"][n]["relevance"][r][c] for n in names}}
            for r in range(h) for c in range(w)]


def summary_rows(result: dict) -> list[dict]:
    """One row per method: target, explained logit, sum of relevances, what the rest absorbed, time."""
    return [{"method": m["label"], "target": result["target_name"], "logit": round(m["logit"], 4),
             "sum of relevances": round(m["total"], 4), "absorbed (logit - sum)": round(m["absorbed"], 4),
             "time (ms)": round(1000 * m["seconds"], 1)} for m in result["methods"].values()]


def prediction_choices(result: dict) -> list[tuple[str, int]]:
    """The targets a result offers: an LM's ten likeliest next tokens, or a classifier's classes in order."""
    lm = result.get("model_kind") == "lm"
    preds = result["predictions"][:10] if lm else sorted(result["predictions"], key=lambda p: p["id"])
    return [(inputs.target_label(p, lm), p["id"]) for p in preds]


def status_text(result: dict, source: str = "computed") -> str:
    preds = result["predictions"][:3]
    top = ", ".join(f"{p['name']!r} {100 * p['probability']:.1f}%" for p in preds)
    m = result["methods"].get("mambalrp")
    cons = (f" MambaLRP: sum of relevances **{m['total']:.4f}** vs logit **{m['logit']:.4f}** "
            f"(absorbed {m['absorbed']:+.2g})." if m else "")
    src = f" ({source_text(source)})" if source != "computed" else ""
    what = "next token" if result.get("model_kind") == "lm" else "class"
    note = f"\n\n⚠️ {result['note']}" if result.get("note") else ""
    truth = f" True label: {result['label']}." if result.get("label") is not None else ""
    return (f"**{result['model']}** predicts {top}. Explaining {what} **{result['target_name']!r}** "
            f"(id {result['target']}).{truth}{cons}{src}{note}")


def explanation_view(result: dict, source: str = "computed", key: str | None = None) -> Result:
    """A text or image explanation as a Result: the heatmap (HTML and figure), the per-method summary, the targets."""
    text = result["kind"] == "text"
    figure = F.token_figure(result) if text else F.image_figure(result)
    return Result(status_text(result, source), result, tables={"relevance": relevance_rows(result)},
                  figures={"heatmap" if text else "patches": figure}, source=source, key=key,
                  stem=f"lrp-{result['kind']}",
                  views={"html": F.token_html(result) if text else "", "summary": summary_rows(result),
                         "targets": prediction_choices(result), "target": result["target"]})


def example_result(kind: str) -> Result | None:
    """The first precomputed example of ``kind`` (``text`` or ``image``), or None."""
    from core.runner import result_key

    entries = EXAMPLES.entries(f"lrp/{kind}")
    if not entries:
        return None
    e = entries[0]
    return explanation_view(e["data"], "precomputed", result_key(e["fingerprint"], e["analysis"], e["params"]))


def default_requests() -> list[tuple[str, dict]]:
    """The tab's examples: ``(kind, keyword arguments of text_result / image_result)``."""
    calls = [("text", {"model": ref, "text": text, "methods": list(DEFAULT_METHODS)})
             for ref, texts in TEXT_EXAMPLES.items() for text in texts]
    return calls + [("image", {"model": IMAGE_MODELS[0], "sample": s, "methods": list(DEFAULT_METHODS)})
                    for s in IMAGE_SAMPLES]


def precompute_examples(path: Path | str | None = None, log=print) -> Path:
    """Compute :func:`default_requests` afresh (never from the examples or the cache) and write the example store."""
    entries = []
    for kind, kwargs in default_requests():
        request = _text_request if kind == "text" else _image_request
        kw = {"text": None, "image": None, "sample": None, "target": None, "rules": None, "progress": None, **kwargs}
        args = ([kw["model"], kw["text"]] if kind == "text" else [kw["model"], kw["image"], kw["sample"]])
        model, analysis, params, compute = request(*args, kw["methods"], kw["target"], kw["rules"], None)
        data = compute()
        entries.append({"model": model, "fingerprint": data["fingerprint"], "analysis": analysis, "params": params,
                        "data": data})
        log(f"{kind} {kwargs.get('text') or kwargs.get('sample')!r}: target {data['target_name']!r}")
    return ExampleStore.write(Path(path) if path is not None else EXAMPLES.path, entries)


# ---- dataset-level evaluation ----------------------------------------------------------------------------------
def _whole(value, what: str) -> int:
    if value is None or value == "" or isinstance(value, bool):
        raise BadInputError(f"{what} must be a whole number.", fix="Enter e.g. N = 50 and K = 10.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise BadInputError(f"{what} must be a whole number, got {value!r}.", fix="Enter e.g. N = 50 and K = 10.")
    return value


def evaluation_result(model: str, n=100, steps=10, methods=None, progress=None, *, faithfulness: bool = True,
                      **options) -> Result:
    """Conservation and (unless ``faithfulness=False``) MoRF / LeRF faithfulness of the methods over ``n`` samples of
    the model's test split (:func:`core.lrp.evaluate`: committed, cached or computed). ``options``: ``dataset``,
    ``split``, ``seed``, ``target``, ``baseline``, ``options`` (per method), ``cache``."""
    n, steps = _whole(n, "N (samples)"), _whole(steps, "K (flip steps)")
    res = E.evaluate(_model(model), n=n, steps=steps, methods=method_names(methods, empty_means_all=False),
                     faithfulness=faithfulness, progress=progress, **options)
    return evaluation_view(res)


def long_range_result(model: str = "mamba-lm", n=50, methods=None, k: int = 10, progress=None, **options) -> Result:
    """Where a language model's next-token relevance lies (:func:`core.lrp.long_range_evaluation`)."""
    res = E.long_range_evaluation(_model(model), n=_whole(n, "n"), methods=methods, k=k, progress=progress, **options)
    return evaluation_view(res)


def key_token_result(n=100, methods=None, k: int = 1, progress=None, **options) -> Result:
    """How often each method finds the planted key token (:func:`core.lrp.key_token_evaluation`)."""
    return evaluation_view(E.key_token_evaluation(n=_whole(n, "n"), methods=methods, k=k, progress=progress,
                                                  **options))


def committed_result(item: str) -> Result | None:
    """A committed evaluation (``assets/lrp/evaluation``): ``mnist``, ``sentiment``, ``lm``, ``key-token`` or a
    model name; None when it is not there."""
    if not isinstance(item, str):
        return None
    res = E.precomputed().get(item)
    return evaluation_view(res) if res is not None else None


def evaluation_rows(result: dict) -> list[dict]:
    """One table row per method of any evaluation result (the CSV file and the CLI's table)."""
    rows = []
    for m in result["methods"]:
        row = {"method": m, "label": result["labels"][m]}
        if "faithfulness" in result:
            f = result["faithfulness"][m]
            row.update(delta_af=f["delta_af"], delta_af_sem=f["delta_af_sem"], area_morf=f["mean_area_morf"],
                       area_lerf=f["mean_area_lerf"])
        if "conservation" in result:
            c = result["conservation"][m]
            row.update(conservation_mean_abs_error=c["mean_abs_error"], conservation_mean_rel_error=c["mean_rel_error"])
        if "methods_stats" in result:
            s = result["methods_stats"][m]
            row.update(mean_distance=s["mean_distance"], median_distance=s["median_distance"],
                       share_beyond_half=s["share_beyond_half"])
        if "hit_rate" in result:
            row["hit_rate"] = result["hit_rate"][m]
            if "hit_rate_std" in result:  # mean over seeds, with its spread
                row.update(hit_rate_std=result["hit_rate_std"][m], hit_rate_min=result["hit_rate_min"][m],
                           hit_rate_max=result["hit_rate_max"][m], n_seeds=result["n_seeds"])
        if "timing" in result and "explain_s" in result["timing"]:
            row["explain_s"] = result["timing"]["explain_s"][m]
        rows.append(row)
    return rows


def key_token_rows(res: dict) -> list[dict]:
    """One row per method, best first: the hit rate (mean over seeds), its std (ddof 1), min and max over the
    seeds and the n behind it (results of one seed give the rate alone)."""
    col = f"key in top-{res['k']} (%)"
    rows = []
    for m, v in sorted(res["hit_rate"].items(), key=lambda kv: -kv[1]):
        row = {"method": res["labels"].get(m, m), col: round(100 * v, 1)}
        if "hit_rate_std" in res:
            row.update({"± std": round(100 * res["hit_rate_std"][m], 1), "min": round(100 * res["hit_rate_min"][m], 1),
                        "max": round(100 * res["hit_rate_max"][m], 1), "seeds": res["n_seeds"],
                        "n per seed": res["n"]})
        rows.append(row)
    return rows


def last_token_text(res: dict) -> str:
    """The last-token observation of a key-token result over seeds, as Markdown ('' when it was not measured):
    where MambaLRP misses the key it ranks the last token first, and zeroing that token moves the target logit
    more than zeroing the key (medians of |change|, the misses pooled over the seeds)."""
    lt = res.get("last_token")
    if not lt or "mambalrp" not in lt["methods"] or not lt["methods"]["mambalrp"]["misses"]:
        return ""
    m, n_seeds, pos = lt["methods"]["mambalrp"], res["n_seeds"], lt["last_position"] + 1
    shares = [x for x in m["last_first_share_of_misses_per_seed"] if x is not None]
    lines = [f"**Where MambaLRP misses the key** ({m['misses']} of {res['n_done']} sequences, "
             f"{n_seeds} seeds x {res['n']}; misses per seed {', '.join(map(str, m['misses_per_seed']))}), "
             f"its top token is the last one (position {pos} of {pos}) in **{100 * m['last_first_share_of_misses']:.0f}%**"
             f" of them ("
             + ("in every seed" if min(shares) == max(shares) else
                f"per seed {min(shares) * 100:.0f}-{max(shares) * 100:.0f}%") + ").",
             f"Zeroing that token's embedding moves the target logit by a median **{m['median_abs_change_top1_in_misses']:.2f}**, "
             f"zeroing the key by **{m['median_abs_change_key_in_misses']:.2f}** (|change|, pooled misses); the "
             f"last token moves it more in {100 * m['top1_moves_more_share_of_misses']:.0f}% of the misses.",
             f"Over all sequences: key {lt['median_abs_change_key']:.2f}, last token {lt['median_abs_change_last']:.2f} "
             f"(per-seed medians {min(lt['median_abs_change_key_per_seed']):.2f}-"
             f"{max(lt['median_abs_change_key_per_seed']):.2f} and {min(lt['median_abs_change_last_per_seed']):.2f}-"
             f"{max(lt['median_abs_change_last_per_seed']):.2f}). So the planted key is not the only token the "
             "trained model depends on: the classifier reads its label from the last token's hidden state, and a "
             "miss that names the last token is faithful to the model even though it is not the task's ground "
             "truth."]
    return "\n\n".join(lines)


def _evaluation_text(res: dict) -> str:
    faith = res.get("faithfulness") or {}
    scored = [n for n in faith if faith[n].get("delta_af") is not None]  # none when stopped before the first sample
    best = max(scored, key=lambda n: faith[n]["delta_af"]) if scored else None
    cons = (res.get("conservation") or {}).get("mambalrp")
    src = source_text(res.get("source") or ("cache" if res.get("cached") else "computed"))
    acc = f", model accuracy on them {100 * res['accuracy']:.1f}%" if res.get("accuracy") is not None else ""
    parts = [f"**{res['model']}** on {res['dataset']}/{res['split']}: {res['n_done']} samples{acc}, K = "
             f"{res['steps']} flip steps, {res['baseline']} embedding as baseline ({src})."]
    if not res.get("complete", True):
        parts.append(f"Stopped early: {res['n_done']} of {res['n']} samples.")
    if best:
        parts.append(f"Highest ΔA^F: **{F.method_label(best)}** ({faith[best]['delta_af']:.3f}).")
    if cons:
        parts.append(f"MambaLRP conservation: mean |sum − logit| = **{cons['mean_abs_error']:.2g}**.")
    return " ".join(parts)


def _stem(model) -> str:
    return Path(str(model)).name or "model"


def evaluation_view(res: dict) -> Result:
    """Any evaluation result (faithfulness + conservation, long range, key token) as a Result."""
    source = res.get("source") or ("cache" if res.get("cached") else "computed")
    key = digest(res["analysis"], res.get("fingerprint"), {k: res.get(k) for k in (
        "dataset", "split", "n", "seed", "target", "steps", "baseline", "k", "length", "methods", "method_options")},
        "faithfulness" in res) if res.get("complete", True) else None
    tables, figures, views = {"methods": evaluation_rows(res)}, {}, {}
    if res["analysis"] == "lrp-evaluation":
        faith, cons = res.get("faithfulness") or {}, res.get("conservation") or {}
        if faith and res["n_done"]:
            figures["faithfulness"] = F.faithfulness_figure(faith, res["fractions"])
            views["delta"] = F.delta_rows(faith)
        if cons and res["n_done"]:
            figures["conservation"] = F.conservation_figure(cons)
        stem = f"{'faithfulness' if faith else 'conservation'}-{_stem(res['model'])}"
        status = _evaluation_text(res)
    elif res["analysis"] == "lrp-long-range":
        distances = {m: [d for row in st["distances"] for d in row] for m, st in res["methods_stats"].items()}
        figures["long-range"] = F.long_range_figure(
            distances, res["k"], f"Long range on {res['model']}: where the {res['k']} most relevant tokens of "
            f"{res['n_done']} contexts ({res['length']} tokens) sit")
        stem = f"long-range-{_stem(res['model'])}"
        status = (f"**{res['model']}**: the {res['k']} most relevant tokens of {res['n_done']} contexts of "
                  f"{res['length']} tokens ({source_text(source)}).")
    else:
        views["hits"], views["last-token"] = key_token_rows(res), last_token_text(res)
        figures["hit-rate"] = F.key_token_figure(res)
        stem = "key-token"
        status = (f"**Ground truth** (`{res['dataset']}`): a key token planted at a random position alone decides the "
                  f"label; how often each method ranks it first over {res['n_done']} sequences (chance "
                  f"{100 * res['chance']:.1f}%; the classifier is trained in the evaluation, "
                  f"{100 * res['model']['accuracy']:.1f}% accurate)."
                  + (f" Mean ± std, min and max over {res['n_seeds']} seeds (a classifier and {res['n']} fresh "
                     f"sequences per seed)." if "n_seeds" in res else ""))
    return Result(status, res, tables=tables, figures=figures, views=views, source=source, key=key, stem=stem)


def precompute_evaluation(only=None, n: int | None = None, out=None, cache: bool = True, progress=None,
                          log=print) -> dict:
    """Recompute the committed evaluations the tab shows (``assets/lrp/evaluation``); one step, re-runnable.
    Returns ``{item: {"written", "seconds", "n_done"}}``."""
    from core.files import write_output  # atomic (core.runner.atomic_write)

    only = [x.strip() for x in only.split(",")] if isinstance(only, str) else list(only or EVALUATION_ITEMS)
    unknown = [x for x in only if x not in EVALUATION_ITEMS]
    if unknown:
        raise BadInputError(f"Unknown item(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(EVALUATION_ITEMS)}.")
    if n is not None and n < 1:
        raise BadInputError("-n must be >= 1.")
    folder = Path(out) if out else ASSETS_DIR / "lrp" / "evaluation"
    folder.mkdir(parents=True, exist_ok=True)
    summary = {}
    for item in only:
        stem, runner, kwargs = EVALUATION_ITEMS[item]
        kwargs = {**kwargs, **({"n": n} if n is not None else {})}
        t0 = time.perf_counter()
        log(f"{item}: {runner}({kwargs})")
        result = getattr(E, runner)(**kwargs, progress=progress, cache=cache)
        n_flag = f" -n {n}" if n is not None else ""
        result = {**result, "cached": False,  # the file is the result, wherever it came from
                  "command": f"python -m core lrp precompute-evaluation --only {item}{n_flag}"}
        result.pop("source", None)
        written = [str(write_output(folder / f"{stem}.json", data=result))]
        summary[item] = {"written": written, "seconds": round(time.perf_counter() - t0, 1), "n_done": result["n_done"]}
    present = [k for k in EVALUATION_ITEMS if (folder / f"{EVALUATION_ITEMS[k][0]}.json").exists()]
    write_output(folder / "index.json", data={"items": {k: f"{EVALUATION_ITEMS[k][0]}.json" for k in present},
                                              "command": "python -m core lrp precompute-evaluation"})
    return summary


# ---- training the embedded models -------------------------------------------------------------------------------
def train_result(recipe: str, seed: int = 0, quick: bool = False, out=None, init_from: str | None = None,
                 epochs: int | None = None, threads: int = 2, progress=None) -> Result:
    """Train one embedded model with its recipe (``lm``, ``sentiment``, ``vision``) into ``out`` (default
    ``assets/models/<name>``); the card records the command that reproduces it."""
    import torch

    from core.lrp import recipes

    if recipe not in recipes.RECIPES:
        raise BadInputError(f"unknown recipe {recipe!r}.", fix=f"use one of {', '.join(recipes.RECIPES)}.")
    check_threads(threads)
    if init_from is not None and recipe != "sentiment":
        raise BadInputError("--init-from applies to the sentiment recipe only.")
    overrides = {"init_from": init_from} if init_from is not None else {}
    if epochs is not None:
        if recipe == "lm" or epochs < 1:
            raise BadInputError("--epochs must be >= 1 and applies to the sentiment and vision recipes.")
        overrides["epochs"] = epochs
    torch.set_num_threads(threads)
    cfg = recipes.recipe_for(recipe, seed=seed, quick=quick, **overrides)
    _, train_fn, name = recipes.RECIPES[recipe]
    out = out or str(ASSETS_DIR / "models" / name)
    command = f"python -m core lrp train {recipe} --seed {seed}" + (" --quick" if quick else "")
    if init_from is not None:
        command += f" --init-from {init_from}"
    if epochs is not None:
        command += f" --epochs {epochs}"
    if threads != 2:  # float sums, hence the weights, depend on the thread count
        command += f" --threads {threads}"
    metrics = train_fn(cfg, out, progress=progress, recipe_command=command)
    data = {"model": name, "out": str(out), "recipe": command, **metrics}
    return Result("\n".join(f"{k}: {v}" for k, v in data.items()), data, stem=f"train-{name}")
