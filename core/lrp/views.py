"""What each MambaLRP result is and shows: :data:`ANALYSES`, entries of the one :class:`core.analyses.Analysis` type.

Each entry's name is the name its results are looked up and cached under; it holds its request type (which parses
the raw inputs and keys the result), its compute function, and how its result is shown (file stem, status text,
tables, figures, other views). :func:`core.lrp.service.analysis_result` answers any of them
(:func:`core.analyses.answer`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from core.analyses import Analysis, Shown, view_function
from core.lrp import bias, compare, figures, inputs, schemas, verdicts
from core.lrp.evaluation import evaluate
from core.lrp.explanations import explain_flow, explain_image, explain_text
from core.lrp.key_token import evaluate_key_token
from core.lrp.long_range import evaluate_long_range
from core.lrp.agreement import caveat as agreement_caveat, evaluate_agreement
from core.lrp.eval_requests import AgreementRequest, EvaluationRequest, KeyTokenRequest, LongRangeRequest
from core.lrp.requests import CompareRequest, FlowRequest, ImageRequest, TextRequest
from core.results import Result, source_text

# MambaLRP at the papers' sizes, measured by ``python bench/lrp.py --parts real_size`` (random weights of the
# published configs, the quiet 2-core development CPU, 2 torch threads; medians, see docs/mambalrp.md):
# (config, tokens) -> (seconds of explain(method="mambalrp"), that time / one no-grad forward in the same run)
MEASURED_COST = {("mamba-130m", 512): (5.59, 2.65), ("mamba-130m", 2048): (19.36, 1.93),
                 ("mamba-370m", 512): (14.81, 2.62)}


def cost_note() -> str:
    """What the text cap costs, from :data:`MEASURED_COST` (measured, not modelled), and which methods cost more."""
    ratios = [ratio for _, ratio in MEASURED_COST.values()]
    sizes = ", ".join(f"{config}-sized at {tokens} tokens {seconds:.0f} s"
                      for (config, tokens), (seconds, _) in MEASURED_COST.items())
    return (f"MambaLRP costs {min(ratios):.1f}-{max(ratios):.1f} forward passes; on a quiet 2-core CPU it took: "
            f"{sizes} (several times longer on a busy one); the embedded models well under a second. Integrated "
            "Gradients and SmoothGrad repeat a gradient per step (32, 16); MambaAttr and Attention Rollout grow with "
            "the square of the length.")


def _model_stem(model) -> str:
    return Path(str(model)).name or "model"


def _method_rows(res: dict, cells: Callable[[str], dict]) -> list[dict]:
    """One table row per method of an evaluation result (the CSV file and the CLI's table)."""
    return [{"method": m, "label": res["labels"][m], **cells(m)} for m in res["methods"]]


# ---- one explanation (text or image) ------------------------------------------------------------------------------
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


def explanation_status(result: dict, source: str = "computed") -> str:
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


def _explanation_views(result: dict, shown: Shown = None) -> dict:
    """The heatmap as HTML (texts), the per-method summary and the targets the result offers."""
    return {"html": figures.token_html(result) if result["kind"] == "text" else "", "summary": summary_rows(result),
            "targets": prediction_choices(result), "target": result["target"]}


# ---- where the relevance passes (layer by layer, by kind) --------------------------------------------------------
def flow_rows(result: dict) -> list[dict]:
    """One row per block: layer, kind, what it is, the relevance at its output and at its input (summed over tokens),
    the |relevance| it hands back and its share of all blocks' (the CSV file and the table)."""
    from core.lrp.blocks import KINDS

    total = sum(sum(abs(v) for v in b["in"]) for b in result["blocks"]) or 1.0
    return [{"layer": b["layer"], "kind": KINDS[b["kind"]][0], "block": b["label"], "module": b["name"],
             "relevance out": round(sum(b["out"]), 5), "relevance in": round(sum(b["in"]), 5),
             "|relevance| in": round(sum(abs(v) for v in b["in"]), 5),
             "share of |relevance|": round(sum(abs(v) for v in b["in"]) / total, 4)} for b in result["blocks"]]


def flow_shares(result: dict) -> dict[str, float]:
    """Per kind, its blocks' share of the |relevance| all blocks hand back to the tokens."""
    rows = figures.flow_kind_rows({"blocks": [{**b, "in": [abs(v) for v in b["in"]]} for b in result["blocks"]]})
    total = sum(sum(v) for v in rows.values()) or 1.0
    return {kind: sum(v) / total for kind, v in rows.items()}


def flow_status(result: dict, source: str = "computed") -> str:
    from core.lrp.blocks import KINDS

    shares = ", ".join(f"{KINDS[k][0]} **{100 * v:.0f}%**" for k, v in flow_shares(result).items())
    a = result["absorbed"]
    src = f" ({source_text(source)})" if source != "computed" else ""
    note = f"\n\n⚠️ {result['note']}" if result.get("note") else ""
    hybrid = "" if result["structure"] != "ssm" else " This model has no attention layers: only a hybrid splits them."
    return (f"**{result['model']}** ({result['family']}, {result['structure']}): explaining "
            f"**{result['target_name']!r}**, logit {result['logit']:.4f}. Of the |relevance| the layers hand back to "
            f"the tokens: {shares}. Conservation: token relevances {result['total']:.4f} + biases {a['bias']:.2g} + "
            f"softmaxes {a['softmax']:.2g} = logit (residual {result['residual']:.1e}).{hybrid}{src}{note}")


# ---- faithfulness and conservation --------------------------------------------------------------------------------
def evaluation_rows(res: dict) -> list[dict]:
    """Per method: Delta A^F (with its standard error) and the MoRF / LeRF areas, the conservation errors, time."""
    def cells(m):
        row = {}
        if "faithfulness" in res:
            f = res["faithfulness"][m]
            row.update(delta_af=f["delta_af"], delta_af_sem=f["delta_af_sem"], area_morf=f["mean_area_morf"],
                       area_lerf=f["mean_area_lerf"])
            for metric in verdicts.metrics_of(res):
                if metric != "delta_af":
                    row.update({metric: f[metric], f"{metric}_sem": f[f"{metric}_sem"]})
                c = comparisons[metric].get(m)  # MambaLRP minus this method, paired over the inputs (empty on its own row)
                row.update({f"mambalrp_minus_it_{metric}": c and c.delta, f"mambalrp_minus_it_{metric}_se": c and c.se,
                            f"mambalrp_minus_it_{metric}_p": c and c.p,
                            f"mambalrp_ahead_{metric}": verdicts.verdict(c) if c is not None else ""})  # "": itself
        c = res["conservation"][m]
        return {**row, "conservation_mean_abs_error": c["mean_abs_error"],
                "conservation_mean_rel_error": c["mean_rel_error"],
                "share_off_explained": c.get("mean_share_off_explained"),
                "effective_units": c.get("mean_effective_units"), "explain_s": res["timing"]["explain_s"][m]}
    comparisons = {metric: verdicts.paired_against(res, metric) for metric in verdicts.metrics_of(res)}
    return _method_rows(res, cells)


def evaluation_status(res: dict, source: str) -> str:
    faith = res.get("faithfulness") or {}
    scored = [n for n in faith if faith[n].get("delta_af") is not None]  # none when stopped before the first sample
    best = max(scored, key=lambda n: faith[n]["delta_af"]) if scored else None
    cons = (res.get("conservation") or {}).get("mambalrp")
    acc = f", model accuracy on them {100 * res['accuracy']:.1f}%" if res.get("accuracy") is not None else ""
    parts = [f"**{res['model']}** on {res['dataset']}/{res['split']}: {res['n_done']} samples{acc}, K = "
             f"{res['steps']} flip steps, {res['baseline']} embedding as baseline ({source_text(source)})."]
    if not res.get("complete", True):
        parts.append(f"Stopped early: {res['n_done']} of {res['n']} samples.")
    if best:
        parts.append(verdicts.headline(res, {m: figures.method_label(m) for m in res["methods"]}))
    if cons:
        parts.append(f"MambaLRP conservation: mean |sum − logit| = **{cons['mean_abs_error']:.2g}**.")
    if res.get("retention"):
        r = res["retention"]
        parts.append(f"π-Soft-NC / NS: every method keeps the same expected share of the input (π = "
                     f"{r['grid'][0]:g}-{r['grid'][-1]:g}, {r['draws']} masks each; {r['n_defined']} of "
                     f"{res['n_done']} inputs have a normalised score).")
    elif res.get("faithfulness"):
        redo = f": `{res['command']}` recomputes it with them" if res.get("command") else ""
        parts.append(f"π-Soft-NC / NS (equal retention) are not computed in this result{redo}.")
    return " ".join(parts)


def _evaluation_figures(res: dict, shown: Shown = None) -> dict:
    faith, cons = res.get("faithfulness") or {}, res.get("conservation") or {}
    out = {}
    if faith and res["n_done"]:
        out["faithfulness"] = figures.faithfulness_figure(faith, res["fractions"])
    if cons and res["n_done"]:
        out["conservation"] = figures.conservation_figure(cons)
    return out


def _evaluation_stem(res: dict, shown: Shown = None) -> str:
    return f"{'faithfulness' if res.get('faithfulness') else 'conservation'}-{_model_stem(res['model'])}"


# ---- long range -----------------------------------------------------------------------------------------------------
def long_range_rows(res: dict) -> list[dict]:
    """Per method: mean and median distance of its top-k tokens, the share in the context's first half, time."""
    def cells(m):
        s = res["methods_stats"][m]
        return {"mean_distance": s["mean_distance"], "median_distance": s["median_distance"],
                "share_beyond_half": s["share_beyond_half"], "explain_s": res["timing"]["explain_s"][m]}
    return _method_rows(res, cells)


def _long_range_figure(res: dict, shown: Shown = None) -> dict:
    distances = {m: [d for row in st["distances"] for d in row] for m, st in res["methods_stats"].items()}
    return {"long-range": figures.long_range_figure(
        distances, res["k"], f"Long range on {res['model']}: where the {res['k']} most relevant tokens of "
        f"{res['n_done']} contexts ({res['length']} tokens) sit")}


def long_range_status(res: dict, source: str) -> str:
    return (f"**{res['model']}**: the {res['k']} most relevant tokens of {res['n_done']} contexts of "
            f"{res['length']} tokens ({source_text(source)}).")


# ---- key-token ground truth -------------------------------------------------------------------------------------
def key_token_method_rows(res: dict) -> list[dict]:
    """Per method: the hit rate (mean over seeds, with its std, min and max and the seeds behind it)."""
    def cells(m):
        row = {"hit_rate": res["hit_rate"][m]}
        if "hit_rate_std" in res:  # mean over seeds, with its spread
            row.update(hit_rate_std=res["hit_rate_std"][m], hit_rate_min=res["hit_rate_min"][m],
                       hit_rate_max=res["hit_rate_max"][m], n_seeds=res["n_seeds"])
        return row
    return _method_rows(res, cells)


def key_token_rows(res: dict) -> list[dict]:
    """One row per method, best first: the hit rate (mean over seeds), its std (ddof 1), min and max over the
    seeds and the n behind it (results of one seed give the rate alone)."""
    col = f"key in top-{res['k']} (%)"
    per_seed = res.get("hit_rate_per_seed") or {}
    comparisons = verdicts.against(per_seed, exact=True) if len(next(iter(per_seed.values()), [])) > 1 else {}
    rows = []
    for m, v in sorted(res["hit_rate"].items(), key=lambda kv: -kv[1]):
        row = {"method": res["labels"].get(m, m), col: round(100 * v, 1)}
        if "hit_rate_std" in res:
            row.update({"± std": round(100 * res["hit_rate_std"][m], 1), "min": round(100 * res["hit_rate_min"][m], 1),
                        "max": round(100 * res["hit_rate_max"][m], 1), "seeds": res["n_seeds"],
                        "n per seed": res["n"]})
        if comparisons:  # MambaLRP minus the method, paired over the seeds (same model and sequences per seed)
            c = comparisons.get(m)
            row["MambaLRP − it (share, paired over seeds)"] = c.text() if c is not None else ""
            row["MambaLRP ahead?"] = verdicts.verdict(c) if c is not None else ""
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
             f"{max(lt['median_abs_change_last_per_seed']):.2f})."]
    if "median_abs_margin_change_top1_in_misses" in m:
        lines[-1] += (f" On the margin (target logit minus the other class's): last token "
                      f"**{m['median_abs_margin_change_top1_in_misses']:.2f}**, key "
                      f"**{m['median_abs_margin_change_key_in_misses']:.2f}** in the misses.")
    else:
        lines[-1] += (" Measured on the target logit only: this committed result predates the margin measurement "
                      "(`python -m core lrp precompute-evaluation --only key-token` records it).")
    lines.append("So, on these measurements, the planted key is not the only token the trained model depends on, and "
                 "a miss that names the last token can be faithful to the model even though it is not the task's "
                 "ground truth.")
    return "\n\n".join(lines)


def key_token_status(res: dict, source: str) -> str:
    backbone = {"mamba2": " Mamba-2", "hybrid": " Mamba-2 + attention"}.get(res.get("family", "mamba"), "")
    return (f"**Ground truth** (`{res['dataset']}`): a key token planted at a random position alone decides the "
            f"label; how often each method ranks it first over {res['n_done']} sequences (chance "
            f"{100 * res['chance']:.1f}%; the{backbone} classifier is trained in the evaluation, "
            f"{100 * res['model']['accuracy']:.1f}% accurate)."
            + (f" Mean ± std, min and max over {res['n_seeds']} seeds (a classifier and {res['n']} fresh "
               f"sequences per seed)." if "n_seeds" in res else ""))


# ---- subject-verb agreement ground truth -----------------------------------------------------------------------
def agreement_rows(res: dict) -> list[dict]:
    """One row per method (then exact chance): MRR, mean and median rank of the subject, pointing accuracy, the share
    where the subject outranks the attractor, each ± its standard error over the sentences, and MambaLRP minus the
    method paired over the same sentences with the verdict word and p; a method that does not apply says so."""
    scores = res["scores"]
    rr = verdicts.against({m: s["reciprocal_rank"] for m, s in scores.items()})
    hits = verdicts.against({m: s["pointing"] for m, s in scores.items()})

    def pm(value, se, scale=1.0, nd=3):
        return "-" if value is None else f"{scale * value:.{nd}f}" + ("" if se is None else f" ± {scale * se:.{nd}f}")

    rows = []
    for m in res["methods"]:
        label = res["labels"].get(m, m)
        if m in res["refused"]:
            rows.append({"method": label, "MRR": f"does not apply: {res['refused'][m]}"})
            continue
        s = scores[m]
        row = {"method": label, "MRR": pm(s["mrr"], s["mrr_sem"]),
               "rank of the subject (mean)": pm(s["mean_rank"], s["mean_rank_sem"], nd=2),
               "median rank": s["median_rank"], "pointing accuracy (%)": pm(s["pointing_accuracy"],
                                                                            s["pointing_accuracy_sem"], 100, 1),
               "subject above attractor (%)": pm(s["subject_above_attractor_share"], None, 100, 1)}
        for what, comparisons in (("MRR", rr), ("pointing", hits)):
            c = comparisons.get(m)
            row[f"MambaLRP − it, {what}"] = c.text() if c is not None else ""
            row[f"{what}: MambaLRP ahead?"] = verdicts.verdict(c) if c is not None else ""
        rows.append(row)
    chance = res["chance"]
    rows.append({"method": "chance (uniform random ranking, exact)", "MRR": pm(chance["mrr"], None),
                 "pointing accuracy (%)": pm(chance["pointing_accuracy"], None, 100, 1)})
    return rows


def agreement_status(res: dict, source: str) -> str:
    scores = {m: s for m, s in res["scores"].items() if s["mrr"] is not None}
    best = max(scores, key=lambda m: scores[m]["mrr"]) if scores else None
    by = ", ".join(f"{k} {100 * v['accuracy']:.0f}%" for k, v in res["agreement_by_template"].items())
    parts = [f"**{res['model']}**, subject-verb agreement: it prefers the agreeing verb on "
             f"**{100 * res['agreement_accuracy']:.1f}%** of {res['n_explainable']} generated sentences ({by}); the "
             f"{res['n_done']} it gets right are explained for that verb ({100 * (res['agreeing_plural_share'] or 0):.0f}%"
             f" with a plural subject) ({source_text(source)})."]
    if best:
        chance, pointing = res["chance"]["mrr"], scores[best]["pointing_accuracy"]
        parts.append(f"Highest MRR of the subject: **{res['labels'][best]}** {scores[best]['mrr']:.3f}"
                     + (f", pointing accuracy {100 * pointing:.1f}%" if pointing is not None else "")
                     + (f" (chance {chance:.3f} and {100 * res['chance']['pointing_accuracy']:.1f}%)."
                        if chance is not None and res["chance"]["pointing_accuracy"] is not None else "."))
    if agreement_caveat(res):
        parts.append("⚠️ " + agreement_caveat(res))
    return " ".join(parts)


# ---- the registry -----------------------------------------------------------------------------------------------
def _status(text: Callable[[dict, str], str]) -> Callable[[dict, Shown], str]:
    return lambda data, shown: text(data, shown.source)


ANALYSES: dict[str, Analysis] = {
    "lrp/text": Analysis(
        TextRequest, _status(explanation_status), explain_text, stored_as="lrp/text",
        schema=schemas.TEXT, named=True, stem="lrp-text",
        tables=lambda res, shown: {"relevance": relevance_rows(res)},
        figures=lambda res, shown: {"heatmap": figures.token_figure(res)}, views=_explanation_views),
    "lrp/image": Analysis(
        ImageRequest, _status(explanation_status), explain_image, stored_as="lrp/image",
        schema=schemas.IMAGE, named=True,
        stem="lrp-image", tables=lambda res, shown: {"relevance": relevance_rows(res)},
        figures=lambda res, shown: {"patches": figures.image_figure(res)}, views=_explanation_views),
    "lrp/flow": Analysis(
        FlowRequest, _status(flow_status), explain_flow, stored_as="lrp/flow",
        schema=schemas.FLOW, named=True, stem="lrp-flow",
        tables=lambda res, shown: {"blocks": flow_rows(res)},
        figures=lambda res, shown: {"layer-flow": figures.flow_figure(res)},
        views=lambda res, shown: {"shares": flow_shares(res)}),
    "lrp/compare": Analysis(
        CompareRequest, _status(compare.compare_status), compare.compare, stored_as="lrp/compare",
        schema=schemas.COMPARE, stem="lrp-compare",
        tables=lambda res, shown: {"words": compare.word_rows(res), "models": compare.model_rows(res)},
        figures=lambda res, shown: {"compare": compare.compare_figure(res)}),
    "lrp-evaluation": Analysis(
        EvaluationRequest, _status(evaluation_status), evaluate, stored_as="lrp-evaluation",
        schema=schemas.EVALUATION, named=True,
        stem=_evaluation_stem, tables=lambda res, shown: {"methods": evaluation_rows(res)},
        figures=_evaluation_figures,
        views=lambda res, shown: {"delta": verdicts.comparison_rows(res)}
        if res.get("faithfulness") and res["n_done"] else {}),
    "lrp-long-range": Analysis(
        LongRangeRequest, _status(long_range_status), evaluate_long_range, stored_as="lrp-long-range",
        schema=schemas.LONG_RANGE, named=True,
        stem=lambda res, shown: f"long-range-{_model_stem(res['model'])}",
        tables=lambda res, shown: {"methods": long_range_rows(res)}, figures=_long_range_figure),
    "lrp-key-token": Analysis(
        KeyTokenRequest, _status(key_token_status), evaluate_key_token, stored_as="lrp-key-token",
        schema=schemas.KEY_TOKEN, named=True,
        stem=lambda res, shown: "key-token" + (f"-{res['family']}" if res.get("family", "mamba") != "mamba" else ""),
        tables=lambda res, shown: {"methods": key_token_method_rows(res)},
        figures=lambda res, shown: {"hit-rate": figures.key_token_figure(res)},
        views=lambda res, shown: {"hits": key_token_rows(res), "last-token": last_token_text(res)}),
    "lrp-agreement": Analysis(
        AgreementRequest, _status(agreement_status), evaluate_agreement, stored_as="lrp-agreement",
        schema=schemas.AGREEMENT, named=True,
        stem=lambda res, shown: f"agreement-{_model_stem(res['model'])}",
        tables=lambda res, shown: {"methods": agreement_rows(res)},
        figures=lambda res, shown: {"agreement": figures.agreement_figure(res)}),
    "lrp-bias": Analysis(
        bias.BiasRequest, _status(bias.status), bias.audit, stored_as="lrp-bias", schema=schemas.BIAS, named=True,
        stem=lambda res, shown: f"bias-audit-{_model_stem(res['model'])}",
        tables=lambda res, shown: bias.tables(res), figures=lambda res, shown: {"bias": bias.figure(res)}),
}
view = view_function(ANALYSES)  # view(name, found, request=None, **options): what a found result shows


def train_view(data: dict) -> Result:
    """A training run (``core.lrp.recipes.train``): the model, where it went, its recipe and held-out figures."""
    return Result("\n".join(f"{k}: {v}" for k, v in data.items()), data, stem=f"train-{data['model']}")
