"""What the MathNeuro tab and ``python -m core mathneuro`` do, one function per user action, each returning a
:class:`core.runner.Result` (status text, data, tables, figures, files):

    identify_result, layer_distribution_result, effect_result, proportion_sweep_result, scale_sweep_result,
    consistency_result, drill_result          the analyses, by model reference and dataset names
    matrix_names, example_results, precompute_examples, train_demo_result

Each analysis goes through :func:`core.runner.lookup`, keyed by the model fingerprint + analysis + parameters: the
defaults for the embedded model are committed in ``assets/mathneuro/examples.json`` and answer at once (the model is
not loaded to compare its fingerprint); anything else is computed once and cached.

Datasets: any ``core.data`` dataset with math problems (``.solution``), multiple-choice records or texts, plus
``review-sentiment`` (the embedded model's synthetic non-math task, :mod:`core.mathneuro.recipe`).
Metrics: ``accuracy`` (math: exact final number; multiple choice: best option) or ``loss`` (teacher-forced
nats per token: worked solution, correct option or text); ``auto`` picks accuracy for the tasks the embedded
model was trained on and loss elsewhere (SmolLM2's accuracy is at the floor on GSM-style problems).

``progress(fraction, message)`` (:mod:`core.runner`'s convention) may raise :class:`core.errors.Cancelled`; an
intervention is applied to a private view of the shared model (:func:`core.mathneuro.intervened`), which is never
written, so concurrent requests on the same model never see it.
"""
from __future__ import annotations

import math as _math
import time
from pathlib import Path

from core.cache import CacheEntry
from core.errors import BadInputError
from core.mathneuro import analysis as A
from core.mathneuro.evaluation import token_inputs
from core.mathneuro.figures import FIGURES
from core.mathneuro.interventions import intervened, save_masks
from core.mathneuro.methods import METHODS, Statistics, get_method, select
from core.mathneuro.recipe import DEMO_NAME, SENTIMENT
from core.mathneuro.tasks import (MAX_LENGTH, check_count, limitation, load_records, metric_label,
                                  reference_levels, resolve_metric, score)
from core.mathneuro.scoring import ColumnNorms, check_factor, check_proportion, scored_linears
from core.paths import ASSETS_DIR
from core.progress import report
from core.results import Result, source_text
from core.runner import cached_entry, ExampleStore, lookup, result_key
from core.zoo.views import private_view

EXAMPLES = ExampleStore(ASSETS_DIR / "mathneuro" / "examples.json")
ANALYSES = ("layers", "effect", "proportion-sweep", "scale-sweep", "consistency", "drill")

DEFAULTS = {"model": DEMO_NAME, "math": "arithmetic-words", "nonmath": [SENTIMENT, "movie-sentiment"],
            "n": 100, "eval_n": 100, "proportion": 0.05, "method": "mathneuro", "factor": 1.1,
            "methods": list(METHODS), "proportions": [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2],
            "factors": [0.0, 0.5, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5, 2.0], "consistency_proportions": [0.01, 0.05, 0.1],
            "repeats": 3, "seed": 0}


# ---- model, statistics -------------------------------------------------------------------------------------------
def load(ref: str):
    """``core.zoo.load_model(ref)``; an empty reference or a model that is not a causal LM is a clear error."""
    from core.zoo import load_model, require_kind
    return require_kind(load_model(_ref(ref)), ("causal-lm",), "MathNeuro")


def _ref(ref) -> str:
    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick a model, e.g. mathneuro-tiny.")
    return str(ref).strip()


def _lookup(ref: str, analysis: str, params: dict, compute, check=None):
    """(data, source, key) of one analysis: a committed example, the results cache, or ``compute()``; a result is
    checked by building its view (``check``, default :func:`analysis_view`) before it is cached or served."""
    from core.zoo import fingerprint

    found = lookup(fingerprint(ref), f"mathneuro-{analysis}", params, compute, examples=EXAMPLES,
                   check=check or (lambda data: analysis_view(analysis, data)))
    return found.data, found.source, found.key


def statistics(lm, math: str, nonmath: str, n: int, method: str, progress=None) -> Statistics:
    """The method's statistics from ``n`` train samples of each dataset (cached; small: one vector per matrix)."""
    kind = get_method(method).statistics
    params = {"math": math, "nonmath": nonmath, "n": n, "kind": kind, "max_length": MAX_LENGTH}

    def compute():
        m_in = token_inputs(lm.tokenizer, load_records(math, "train", n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(nonmath, "train", n), MAX_LENGTH)
        stats = get_method(method).collect(lm.model, m_in, n_in, max_length=MAX_LENGTH,
                                           progress=progress)
        tensors, data = {}, {"kind": stats.kind}
        for side in ("math", "nonmath"):
            part = getattr(stats, side)
            if kind == "column_norms":
                data[side] = {"samples": part.samples, "tokens": part.tokens}
                tensors.update({f"{side}/{k}": v for k, v in part.sums.items()})
            else:
                data[side] = {"tokens": part.tokens}
                tensors.update({f"{side}/{k}": v for k, v in part.positive.items()})
        return CacheEntry(data, tensors)

    def fits(entry):  # statistics for exactly the model's scored matrices (by the names of their distinct weights)
        from core.mathneuro.lape import mlp_blocks

        scored = set(scored_linears(lm.model)) if kind == "column_norms" else set(mlp_blocks(lm.model))
        for side in ("math", "nonmath"):
            names = {k.split("/", 1)[1] for k in entry.tensors if k.startswith(side + "/")}
            if names != scored:
                raise ValueError(f"{side} statistics for {sorted(names ^ scored)[:3]} do not match the model")
            if kind == "column_norms" and "samples" not in entry.data[side]:
                raise ValueError(f"{side} statistics lack their sample count")

    entry, _ = cached_entry(lm.fingerprint, "mathneuro-statistics", params, compute, fits)
    parts = {}
    for side in ("math", "nonmath"):
        vecs = {k.split("/", 1)[1]: v for k, v in entry.tensors.items() if k.startswith(side + "/")}
        if kind == "column_norms":
            parts[side] = ColumnNorms(sums=vecs, samples=entry.data[side]["samples"], tokens=entry.data[side]["tokens"])
        else:
            from core.mathneuro.lape import FiringCounts
            parts[side] = FiringCounts(positive=vecs, tokens=entry.data[side]["tokens"])
    return Statistics(kind, parts["math"], parts["nonmath"])


def masks_for(lm, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0,
              progress=None):
    n = check_count(n, "The number of samples N")
    proportion = check_proportion(proportion)
    stats = statistics(lm, math, nonmath, n, method, progress)
    return select(lm.model, stats, proportion, method, seed)


def _check_methods(methods) -> list[str]:
    methods = list(methods or [])
    if not methods:
        raise BadInputError("No method chosen.", fix=f"Pick at least one of: {', '.join(METHODS)}.")
    for m in methods:
        get_method(m)
    return methods


def _check_nonmath(nonmath) -> list[str]:
    items = [nonmath] if isinstance(nonmath, str) else list(nonmath or [])
    if not items:
        raise BadInputError("No non-math dataset chosen.", fix="Pick one or two non-math datasets.")
    return items


# ---- analyses ---------------------------------------------------------------------------------------------------
def identify_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0,
                    out: str | None = None, progress=None) -> Result:
    """Identify, summarise, and optionally save the masks (safetensors, with metadata)."""
    n, proportion = check_count(n, "The number of samples N"), check_proportion(proportion)
    get_method(method)
    if out and Path(out).suffix != ".safetensors":
        raise BadInputError(f"Cannot write masks to {Path(out).name}.", fix="Use --out masks.safetensors.")
    lm = load(ref)
    t0 = time.perf_counter()
    masks = masks_for(lm, math, nonmath, n, proportion, method, seed, progress)
    summary = A.selection_summary(masks)
    result = {"model": ref, "fingerprint": lm.fingerprint, "math": math, "nonmath": nonmath, "n": n,
              "proportion": proportion, "method": method, "selected": summary["selected"], "total": summary["total"],
              "share": summary["share"], "matrices": summary["matrices"], "seconds": round(time.perf_counter() - t0, 2)}
    if out:
        path = Path(out)
        if not path.parent.exists():
            raise BadInputError(f"Folder {path.parent} does not exist.", fix="Create it or choose another path.")
        save_masks(masks, path, {"method": method, "proportion": proportion, "math": math, "nonmath": nonmath,
                                 "n": n, "model": ref, "fingerprint": lm.fingerprint})
        result["masks_file"] = str(path)
    status = (f"{method}: {result['selected']:,} of {result['total']:,} weights ({100 * result['share']:.3f}%) are "
              f"math-specific (K = {proportion:g}, N = {n}, {result['seconds']} s)")
    return Result(status, result, tables={"matrices": result["matrices"]}, stem="mathneuro-identify")


def layer_distribution_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                              progress=None, show: str = "count") -> Result:
    """Selected parameters per (layer, module) for one or two non-math datasets; ``show``: count or share."""
    proportion, n = check_proportion(proportion), check_count(n, "The number of samples N")
    get_method(method)
    nonmath, ref = _check_nonmath(nonmath), _ref(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method}

    def compute():
        lm, out = load(ref), {}
        for i, nm in enumerate(nonmath):
            masks = masks_for(lm, math, nm, n, proportion, method,
                              progress=_scaled(progress, i / len(nonmath), (i + 1) / len(nonmath)))
            rows = [r for r in A.layer_distribution(masks) if r["layer"] is not None]
            out[nm] = {"rows": rows, "selected": sum(r["selected"] for r in rows),
                       "total": sum(r["total"] for r in rows)}
        return {"params": params, "by_nonmath": out}
    return analysis_view("layers", *_lookup(ref, "layers", params, compute), show=show)


def _scaled(progress, lo, hi):
    from core.progress import scaled
    return scaled(progress, lo, hi)


def _evaluation_sets(math: str, nonmath: list[str], eval_n: int, metric: str) -> tuple[dict, dict]:
    sets, metrics = {}, {}
    for name in [math] + nonmath:
        recs = load_records(name, "test", eval_n)
        sets[name] = recs
        metrics[name] = resolve_metric(metric, name, recs[0])
    return sets, metrics


def _levels(sets: dict, metrics: dict, tokenizer) -> dict:
    """Each evaluation set's chance accuracy or uniform-guess loss (:func:`core.mathneuro.tasks.reference_levels`),
    stored with the result so the charts can mark a comparator at chance, at ceiling or beyond uniform guessing."""
    return {name: reference_levels(metrics[name], recs, tokenizer) for name, recs in sets.items()}


def effect_result(ref: str, math: str, nonmath, n: int, proportion: float, methods=None, eval_n: int = 100,
                  metric: str = "auto", mode: str = "prune", factor: float | None = None, progress=None) -> Result:
    """Math and non-math metric before and after the intervention, per method and non-math dataset."""
    proportion = check_proportion(proportion)
    nonmath, methods, ref = _check_nonmath(nonmath), _check_methods(methods or list(METHODS)), _ref(ref)
    eval_n = check_count(eval_n, "The number of evaluation items")
    if mode == "scale":
        factor = check_factor(factor)
    elif mode != "prune":
        raise BadInputError(f"Unknown intervention {mode!r}.", fix="Use prune or scale.")
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "methods": methods,
              "eval_n": eval_n, "metric": metric, "mode": mode, "factor": factor if mode == "scale" else None}

    def compute():
        lm = load(ref)
        sets, metrics = _evaluation_sets(math, nonmath, eval_n, metric)
        model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
        total = len(methods) * len(nonmath) + 1
        before = {name: score(model, tok, recs, metrics[name], name) for name, recs in sets.items()}
        report(progress, 1 / total, "evaluations")
        rows, done = [], 1
        for nm in nonmath:
            for method in methods:
                masks = masks_for(lm, math, nm, n, proportion, method)
                with intervened(model, masks, mode, factor) as view:
                    m_after = score(view, tok, sets[math], metrics[math], math)
                    n_after = score(view, tok, sets[nm], metrics[nm], nm)
                rows.append({"method": method, "label": METHODS[method].label, "nonmath": nm,
                             "selected": A.selection_summary(masks)["selected"],
                             "math_before": before[math], "math_after": m_after,
                             "nonmath_before": before[nm], "nonmath_after": n_after})
                done += 1
                report(progress, done / total, f"evaluations: {done}/{total}")
        return {"params": params, "metrics": metrics, "before": before, "rows": rows,
                "levels": _levels(sets, metrics, tok)}
    return analysis_view("effect", *_lookup(ref, "effect", params, compute))


def proportion_sweep_result(ref: str, math: str, nonmath: str, n: int, proportions=None, method: str = "mathneuro",
                            eval_n: int = 100, metric: str = "auto", progress=None) -> Result:
    """Selected count and math / non-math metric after pruning, per K."""
    proportions = [check_proportion(k, "Each proportion K") for k in (proportions or DEFAULTS["proportions"])]
    eval_n, ref = check_count(eval_n, "The number of evaluation items"), _ref(ref)
    get_method(method)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportions": proportions, "method": method,
              "eval_n": eval_n, "metric": metric}

    def compute():
        lm = load(ref)
        sets, metrics = _evaluation_sets(math, [nonmath], eval_n, metric)
        model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
        rows = [{"proportion": 0.0, "selected": 0, "share": 0.0,
                 "math": score(model, tok, sets[math], metrics[math], math),
                 "nonmath": score(model, tok, sets[nonmath], metrics[nonmath], nonmath)}]
        for i, k in enumerate(proportions):
            masks = masks_for(lm, math, nonmath, n, k, method)
            s = A.selection_summary(masks)
            with intervened(model, masks, "prune") as view:
                rows.append({"proportion": k, "selected": s["selected"], "share": s["share"],
                             "math": score(view, tok, sets[math], metrics[math], math),
                             "nonmath": score(view, tok, sets[nonmath], metrics[nonmath], nonmath)})
            report(progress, (i + 1) / len(proportions), f"proportions: {i + 1}/{len(proportions)}")
        return {"params": params, "metrics": metrics, "rows": rows, "levels": _levels(sets, metrics, tok)}
    return analysis_view("proportion-sweep", *_lookup(ref, "proportion-sweep", params, compute))


def scale_sweep_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str = "mathneuro",
                       factors=None, eval_n: int = 100, metric: str = "auto", progress=None,
                       factor: float | None = None) -> Result:
    """Math / non-math metric with the selected parameters scaled by each factor (1.0 = unchanged); ``factor``
    adds one chosen factor to ``factors`` (the default factors when None) and is reported in the status."""
    proportion = check_proportion(proportion)
    factors = [check_factor(f, "Each scale factor") for f in (factors if factors is not None else DEFAULTS["factors"])]
    if factor is not None:
        factor = check_factor(factor)
        factors = factors if factor in factors else sorted(set(factors) | {round(factor, 4)})
    if not factors:
        raise BadInputError("Give at least one scale factor.")
    eval_n, ref = check_count(eval_n, "The number of evaluation items"), _ref(ref)
    get_method(method)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method,
              "factors": factors, "eval_n": eval_n, "metric": metric}

    def compute():
        lm = load(ref)
        sets, metrics = _evaluation_sets(math, [nonmath], eval_n, metric)
        model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
        masks = masks_for(lm, math, nonmath, n, proportion, method)
        rows = []
        for i, f in enumerate(factors):
            with intervened(model, masks, "scale", f) as view:
                rows.append({"factor": f, "math": score(view, tok, sets[math], metrics[math], math),
                             "nonmath": score(view, tok, sets[nonmath], metrics[nonmath], nonmath)})
            report(progress, (i + 1) / len(factors), f"scale factors: {i + 1}/{len(factors)}")
        return {"params": params, "metrics": metrics, "rows": rows, "levels": _levels(sets, metrics, tok),
                "selected": A.selection_summary(masks)["selected"]}
    return analysis_view("scale-sweep", *_lookup(ref, "scale-sweep", params, compute), factor=factor)


def consistency_result(ref: str, math: str, nonmath: str, n: int, proportions=None, method: str = "mathneuro",
                       repeats: int = 3, seed: int = 0, progress=None) -> Result:
    """Overlap of sets found from 1..N random samples with the set found from all N, per K."""
    n, ref = check_count(n, "The number of samples N"), _ref(ref)
    repeats = check_count(repeats, "repeats")
    proportions = [check_proportion(k, "Each proportion K")
                   for k in (proportions or DEFAULTS["consistency_proportions"])]
    params = {"math": math, "nonmath": nonmath, "n": n, "proportions": proportions, "method": method,
              "repeats": repeats, "seed": seed}

    def compute():
        lm = load(ref)
        m_in = token_inputs(lm.tokenizer, load_records(math, "train", n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(nonmath, "train", n), MAX_LENGTH)
        rows = A.consistency(lm.model, m_in, n_in, None, proportions, repeats=repeats, seed=seed, method=method,
                             max_length=MAX_LENGTH, progress=progress)
        rows = [{k: (None if isinstance(v, float) and not _math.isfinite(v) else v) for k, v in r.items()}
                for r in rows]
        return {"params": params, "rows": rows}
    return analysis_view("consistency", *_lookup(ref, "consistency", params, compute))


def matrix_names(ref: str) -> list[str]:
    """Scored weight names of the model (drill-down choices)."""
    from core.mathneuro.scoring import scored_linears
    return list(scored_linears(load(ref).model))


def drill_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str = "mathneuro",
                 matrix: str | None = None, max_cells: int = 64, progress=None) -> Result:
    """One weight matrix's selected entries, pooled to at most ``max_cells`` per side, plus row/column counts."""
    proportion, n = check_proportion(proportion), check_count(n, "The number of samples N")
    get_method(method)
    names = matrix_names(ref)
    matrix = matrix or next((x for x in names if "mlp.down_proj" in x), names[0])
    if matrix not in names:
        raise BadInputError(f"The model has no scored matrix {matrix!r}.", fix=f"Use e.g. {names[0]}.")
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method,
              "matrix": matrix, "max_cells": max_cells}

    def compute():
        masks = masks_for(load(ref), math, nonmath, n, proportion, method, progress=progress)
        d = A.drill_down(masks, matrix, max_cells)
        mask = masks[matrix]
        d["row_counts"] = mask.sum(1).tolist()
        d["col_counts"] = mask.sum(0).tolist()
        return {"params": params, **d}
    data, source, key = _lookup(_ref(ref), "drill", params, compute,
                                lambda data: analysis_view("drill", {**data, "matrices": names}))
    return analysis_view("drill", {**data, "matrices": names}, source, key)


# ---- what an analysis shows ---------------------------------------------------------------------------------------
def flat_rows(analysis: str, result: dict) -> list[dict]:
    """The CSV rows of an analysis."""
    if analysis == "layers":
        return [{"nonmath": nm, **r} for nm, part in result["by_nonmath"].items() for r in part["rows"]]
    if analysis == "drill":
        return [{"row_block": i, **{f"col_{j}": v for j, v in enumerate(row)}} for i, row in enumerate(result["grid"])]
    return result["rows"]


def effect_rows(result: dict) -> list[dict]:
    """The before / after table of the pruning effect."""
    return [{"method": r["label"], "non-math dataset": r["nonmath"], "parameters pruned": r["selected"],
             "math before": round(r["math_before"], 3), "math after": round(r["math_after"], 3),
             "non-math before": round(r["nonmath_before"], 3), "non-math after": round(r["nonmath_after"], 3)}
            for r in result["rows"]]


def _status(analysis: str, res: dict, source: str, factor=None) -> str:
    p, src = res["params"], source_text(source)
    if analysis == "effect":
        parts = [f"**{metric_label(k, v)}**" for k, v in res["metrics"].items()]
        text = f"Metrics: {', '.join(parts)}; K = {100 * p['proportion']:g}%, N = {p['n']} ({src})."
        for r in (r for r in res["rows"] if r["method"] == "mathneuro"):
            text += (f" MathNeuro vs {r['nonmath']}: math {r['math_before']:.3g} → {r['math_after']:.3g}, "
                     f"non-math {r['nonmath_before']:.3g} → {r['nonmath_after']:.3g}.")
        return text + _limitations_text(res, [k for k in res["metrics"] if k != p["math"]], res.get("before", {}))
    if analysis == "layers":
        sel = ", ".join(f"{nm}: {part['selected']:,} of {part['total']:,}" for nm, part in res["by_nonmath"].items())
        return f"Layer distribution of **{p['method']}** ({src}): {sel} selected."
    if analysis == "proportion-sweep":
        return (f"Proportion sweep of **{p['method']}** against {p['nonmath']} ({src})."
                + _limitations_text(res, [p["nonmath"]], {p["nonmath"]: res["rows"][0]["nonmath"]}))
    if analysis == "scale-sweep":
        row = next((r for r in res["rows"] if factor is not None and abs(r["factor"] - factor) < 1e-9), None)
        extra = f" At x{factor:g}: math {row['math']:.3g}, non-math {row['nonmath']:.3g}." if row else ""
        return f"Scale-factor sweep of **{p['method']}** ({res['selected']:,} parameters, {src}).{extra}"
    if analysis == "consistency":
        return f"Consistency of **{p['method']}** from 1 to {p['n']} samples ({src})."
    rows, cols = res["row_counts"], res["col_counts"]
    top_r = sorted(range(len(rows)), key=lambda i: -rows[i])[:3]
    top_c = sorted(range(len(cols)), key=lambda i: -cols[i])[:3]
    return (f"**{res['name']}** {res['shape'][0]}×{res['shape'][1]} ({src}): rows with most selected entries "
            f"{', '.join(f'{i} ({rows[i]})' for i in top_r)}; columns {', '.join(f'{i} ({cols[i]})' for i in top_c)}.")


def _limitations_text(res: dict, names: list[str], before: dict) -> str:
    """' Limits: ...' for the non-math comparators that cannot show a side effect (at chance, at ceiling, loss
    beyond uniform guessing; :func:`core.mathneuro.tasks.limitation`), else ''."""
    notes = [f"{nm} {why}" for nm in names
             if (why := limitation(res["metrics"][nm], before.get(nm), (res.get("levels") or {}).get(nm)))]
    return (" Limits of the comparators: " + "; ".join(notes) + ".") if notes else ""


def analysis_view(analysis: str, data: dict, source: str = "computed", key: str | None = None, *,
                  show: str = "count", factor=None) -> Result:
    """One analysis as a Result: status text, its table (CSV), its figure, and the files the tab offers."""
    figure = FIGURES[analysis](data, value="share" if show == "share" else "count") if analysis == "layers" \
        else FIGURES[analysis](data)
    views = {"effect": effect_rows(data)} if analysis == "effect" else {}
    return Result(_status(analysis, data, source, factor), data, tables={analysis: flat_rows(analysis, data)},
                  figures={analysis: figure}, views=views, source=source, key=key, stem=f"mathneuro-{analysis}",
                  downloads=("json", "csv"))


def example_results(ref: str = DEMO_NAME, only: tuple[str, ...] | None = None) -> dict[str, Result]:
    """The committed examples of ``ref`` by analysis (only those computed with its current weights; ``only``: just
    these analyses)."""
    from core.zoo import fingerprint

    try:
        fp = fingerprint(ref)
    except BadInputError:
        return {}
    out = {}
    for e in EXAMPLES.entries():
        name = e["analysis"].removeprefix("mathneuro-")
        if e["fingerprint"] == fp and name in ANALYSES and name not in out and (only is None or name in only):
            out[name] = analysis_view(name, e["data"], "precomputed",
                                      result_key(e["fingerprint"], e["analysis"], e["params"]))
    return out


# ---- precomputed examples, the embedded model ---------------------------------------------------------------
def default_calls(ref: str = DEMO_NAME) -> list[tuple[str, object, dict]]:
    """(analysis, function, kwargs) of the tab's default view."""
    d = DEFAULTS
    first = d["nonmath"][0]
    common = {"ref": ref, "math": d["math"], "n": d["n"]}
    return [
        ("layers", layer_distribution_result, {**common, "nonmath": d["nonmath"], "proportion": d["proportion"],
                                              "method": d["method"]}),
        ("effect", effect_result, {**common, "nonmath": d["nonmath"], "proportion": d["proportion"],
                                   "methods": d["methods"], "eval_n": d["eval_n"]}),
        ("proportion-sweep", proportion_sweep_result, {**common, "nonmath": first, "proportions": d["proportions"],
                                                       "method": d["method"], "eval_n": d["eval_n"]}),
        ("scale-sweep", scale_sweep_result, {**common, "nonmath": first, "proportion": d["proportion"],
                                             "method": d["method"], "factors": d["factors"], "eval_n": d["eval_n"]}),
        ("consistency", consistency_result, {**common, "nonmath": first,
                                             "proportions": d["consistency_proportions"], "method": d["method"],
                                             "repeats": d["repeats"]}),
        ("drill", drill_result, {**common, "nonmath": first, "proportion": d["proportion"], "method": d["method"]}),
    ]


def precompute_examples(path: Path | str | None = None, ref: str = DEMO_NAME, log=print) -> Path:
    """Run the default view afresh (:func:`core.runner.recomputing`) and write the example store."""
    from core.runner import recomputing

    lm, entries = load(ref), []
    with recomputing():
        for analysis, fn, kwargs in default_calls(ref):
            t0 = time.perf_counter()
            data = fn(**kwargs).data
            entries.append({"model": ref, "fingerprint": lm.fingerprint, "analysis": f"mathneuro-{analysis}",
                            "params": data["params"], "data": data})
            log(f"{analysis}: {time.perf_counter() - t0:.1f}s")
    return ExampleStore.write(Path(path) if path is not None else EXAMPLES.path, entries)


def train_demo_result(out=None, quick: bool = False, steps: int | None = None, resume=None, log=print) -> Result:
    """Retrain the embedded model ``mathneuro-tiny`` (:func:`core.mathneuro.recipe.train_demo`)."""
    from core.mathneuro.recipe import train_demo

    if steps is not None and steps < 1:
        raise BadInputError("--steps must be at least 1.")
    r = train_demo(out, quick=quick, log=log, resume_from=resume, **({"steps": steps} if steps else {}))
    q = r["quality"]
    status = (f"saved to {r['folder']} after {r['seconds']} s: math accuracy {q['math_accuracy']:.3f}, "
              f"sentiment accuracy {q['sentiment_accuracy']:.3f} (held-out test, n = {q['n']})")
    return Result(status, r, stem="mathneuro-train")
