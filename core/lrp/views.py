"""What each MambaLRP result shows: one registry of analyses and one :func:`view`.

:data:`ANALYSES` maps an analysis name (the name its results are looked up and cached under) to an :class:`Analysis`:
its request type (which parses the raw inputs and keys the result), its compute function, and how its result is
shown (file stem, status text, tables, figures, other views). Adding an analysis is one entry here and its compute
function; :func:`core.lrp.service.analysis_result` parses, looks up and shows any of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.lrp import bias, figures, inputs
from core.lrp.evaluation import evaluate
from core.lrp.explanations import explain_image, explain_text
from core.lrp.key_token import evaluate_key_token
from core.lrp.long_range import evaluate_long_range
from core.lrp.requests import EvaluationRequest, ImageRequest, KeyTokenRequest, LongRangeRequest, TextRequest
from core.results import Result, source_text
from core.runner import Found

# MambaLRP at the papers' sizes, measured by ``python bench/lrp.py --parts real_size`` (random weights of the
# published configs, the quiet 2-core development CPU, 2 torch threads; medians, see the README):
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


def _none(data: dict) -> dict:
    return {}


@dataclass(frozen=True)
class Analysis:
    """One kind of MambaLRP result: how it is asked for, computed and shown.

    request : its request type (``parse(**raw)``, ``key()``, ``notice``; :mod:`core.lrp.requests`).
    compute : ``compute(request, progress) -> data`` (JSON-able; may raise :class:`core.errors.Cancelled`).
    stem : ``stem(data)``, the download files' name stem; ``status(data, source)`` the status paragraph.
    tables, figures, views : ``(data) -> {name: rows / figure / anything else}`` (the first table and figure are
        the result's main ones).
    """

    request: type
    compute: Callable[[Any, Any], dict]
    stem: Callable[[dict], str]
    status: Callable[[dict, str], str]
    tables: Callable[[dict], dict] = _none
    figures: Callable[[dict], dict] = _none
    views: Callable[[dict], dict] = _none


def view(name: str, found: Found) -> Result:
    """The result ``found`` of analysis ``name`` as a :class:`Result` (its source and key are ``found``'s)."""
    a, data = ANALYSES[name], found.data
    return Result(a.status(data, found.source), data, tables=a.tables(data), figures=a.figures(data),
                  views=a.views(data), source=found.source, key=found.key, stem=a.stem(data))


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


def _explanation_views(result: dict) -> dict:
    """The heatmap as HTML (texts), the per-method summary and the targets the result offers."""
    return {"html": figures.token_html(result) if result["kind"] == "text" else "", "summary": summary_rows(result),
            "targets": prediction_choices(result), "target": result["target"]}


# ---- faithfulness and conservation --------------------------------------------------------------------------------
def evaluation_rows(res: dict) -> list[dict]:
    """Per method: Delta A^F (with its standard error) and the MoRF / LeRF areas, the conservation errors, time."""
    def cells(m):
        row = {}
        if "faithfulness" in res:
            f = res["faithfulness"][m]
            row.update(delta_af=f["delta_af"], delta_af_sem=f["delta_af_sem"], area_morf=f["mean_area_morf"],
                       area_lerf=f["mean_area_lerf"])
        c = res["conservation"][m]
        return {**row, "conservation_mean_abs_error": c["mean_abs_error"],
                "conservation_mean_rel_error": c["mean_rel_error"], "explain_s": res["timing"]["explain_s"][m]}
    return _method_rows(res, cells)


def _af_text(f: dict) -> str:
    sem = f.get("delta_af_sem")
    return f"{f['delta_af']:.3f}" + (f" ± {sem:.3f}" if sem is not None else "")


def delta_af_leader_text(faith: dict, scored: list[str], best: str) -> str:
    """Who has the highest ΔA^F, said as measured: the methods whose ΔA^F is within one standard error of the best
    (the larger of the two standard errors of the mean over samples) are named as tied with it, not behind it."""
    f0 = faith[best]
    tied = [n for n in scored if n != best and faith[n].get("delta_af_sem") is not None
            and f0.get("delta_af_sem") is not None
            and f0["delta_af"] - faith[n]["delta_af"] <= max(f0["delta_af_sem"], faith[n]["delta_af_sem"])]
    head = f"Highest ΔA^F (± standard error over samples): **{figures.method_label(best)}** ({_af_text(f0)})"
    others = [n for n in scored if n != best]
    if not others or f0.get("delta_af_sem") is None or any(faith[n].get("delta_af_sem") is None for n in others):
        return head + "."  # one method, or one sample: no standard error to compare with
    if not tied:
        return head + ", ahead of the others by more than one standard error."
    return (head + ", **tied within one standard error** with "
            + ", ".join(f"{figures.method_label(n)} ({_af_text(faith[n])})" for n in tied) + ".")


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
        parts.append(delta_af_leader_text(faith, scored, best))
    if cons:
        parts.append(f"MambaLRP conservation: mean |sum − logit| = **{cons['mean_abs_error']:.2g}**.")
    return " ".join(parts)


def _evaluation_figures(res: dict) -> dict:
    faith, cons = res.get("faithfulness") or {}, res.get("conservation") or {}
    out = {}
    if faith and res["n_done"]:
        out["faithfulness"] = figures.faithfulness_figure(faith, res["fractions"])
    if cons and res["n_done"]:
        out["conservation"] = figures.conservation_figure(cons)
    return out


def _evaluation_stem(res: dict) -> str:
    return f"{'faithfulness' if res.get('faithfulness') else 'conservation'}-{_model_stem(res['model'])}"


# ---- long range -----------------------------------------------------------------------------------------------------
def long_range_rows(res: dict) -> list[dict]:
    """Per method: mean and median distance of its top-k tokens, the share in the context's first half, time."""
    def cells(m):
        s = res["methods_stats"][m]
        return {"mean_distance": s["mean_distance"], "median_distance": s["median_distance"],
                "share_beyond_half": s["share_beyond_half"], "explain_s": res["timing"]["explain_s"][m]}
    return _method_rows(res, cells)


def _long_range_figure(res: dict) -> dict:
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
    return (f"**Ground truth** (`{res['dataset']}`): a key token planted at a random position alone decides the "
            f"label; how often each method ranks it first over {res['n_done']} sequences (chance "
            f"{100 * res['chance']:.1f}%; the classifier is trained in the evaluation, "
            f"{100 * res['model']['accuracy']:.1f}% accurate)."
            + (f" Mean ± std, min and max over {res['n_seeds']} seeds (a classifier and {res['n']} fresh "
               f"sequences per seed)." if "n_seeds" in res else ""))


# ---- the registry -----------------------------------------------------------------------------------------------
ANALYSES: dict[str, Analysis] = {
    "lrp/text": Analysis(
        TextRequest, explain_text, stem=lambda res: "lrp-text", status=explanation_status,
        tables=lambda res: {"relevance": relevance_rows(res)},
        figures=lambda res: {"heatmap": figures.token_figure(res)}, views=_explanation_views),
    "lrp/image": Analysis(
        ImageRequest, explain_image, stem=lambda res: "lrp-image", status=explanation_status,
        tables=lambda res: {"relevance": relevance_rows(res)},
        figures=lambda res: {"patches": figures.image_figure(res)}, views=_explanation_views),
    "lrp-evaluation": Analysis(
        EvaluationRequest, evaluate, stem=_evaluation_stem, status=evaluation_status,
        tables=lambda res: {"methods": evaluation_rows(res)}, figures=_evaluation_figures,
        views=lambda res: {"delta": figures.delta_rows(res["faithfulness"])}
        if res.get("faithfulness") and res["n_done"] else {}),
    "lrp-long-range": Analysis(
        LongRangeRequest, evaluate_long_range, stem=lambda res: f"long-range-{_model_stem(res['model'])}",
        status=long_range_status, tables=lambda res: {"methods": long_range_rows(res)}, figures=_long_range_figure),
    "lrp-key-token": Analysis(
        KeyTokenRequest, evaluate_key_token, stem=lambda res: "key-token", status=key_token_status,
        tables=lambda res: {"methods": key_token_method_rows(res)},
        figures=lambda res: {"hit-rate": figures.key_token_figure(res)},
        views=lambda res: {"hits": key_token_rows(res), "last-token": last_token_text(res)}),
    "lrp-bias": Analysis(
        bias.BiasRequest, bias.audit, stem=lambda res: f"bias-audit-{_model_stem(res['model'])}", status=bias.status,
        tables=bias.tables, figures=lambda res: {"bias": bias.figure(res)}),
}


def train_view(data: dict) -> Result:
    """A training run (``core.lrp.recipes.train``): the model, where it went, its recipe and held-out figures."""
    return Result("\n".join(f"{k}: {v}" for k, v in data.items()), data, stem=f"train-{data['model']}")
