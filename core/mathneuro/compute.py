"""What each MathNeuro analysis computes: ``compute(request, progress) -> data`` for the entries of
:data:`core.mathneuro.views.ANALYSES`, and the model, statistics and masks they share.

The statistics an analysis identifies its sets from (small: one vector per matrix) are looked up like any result
(:func:`core.runner.lookup`, a result with tensors), so a second analysis of the same model and datasets reuses them.
An intervention is applied to a private view of the shared model (:func:`core.mathneuro.intervened`), which is never
written, so concurrent requests on the same model never see it.
"""
from __future__ import annotations

import math as _math

from core.cache import CacheEntry
from core.mathneuro.analysis import consistency as overlaps
from core.mathneuro.analysis import drill_down, layer_distribution, selection_summary
from core.mathneuro.evaluation import token_inputs
from core.mathneuro.interventions import intervened
from core.mathneuro.methods import METHODS, Statistics, get_method, select
from core.mathneuro.requests import model_ref
from core.mathneuro.scoring import ColumnNorms, scored_linears
from core.mathneuro.tasks import MAX_LENGTH, evaluation_sets, levels, load_records, score
from core.progress import item_progress, scaled
from core.runner import lookup
from core.zoo.views import private_view


# ---- model, statistics, masks ---------------------------------------------------------------------------------------
def load(ref: str):
    """``core.zoo.load_model(ref)``; an empty reference or a model that is not a causal LM is a clear error."""
    from core.zoo import load_model, require_kind
    return require_kind(load_model(model_ref(ref)), ("causal-lm",), "MathNeuro")


def statistics(lm, math: str, nonmath: str, n: int, method: str, progress=None) -> Statistics:
    """The method's statistics from ``n`` train samples of each dataset (cached; small: one vector per matrix)."""
    kind = get_method(method).statistics
    params = {"math": math, "nonmath": nonmath, "n": n, "kind": kind, "max_length": MAX_LENGTH}

    def compute():
        m_in = token_inputs(lm.tokenizer, load_records(math, "train", n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(nonmath, "train", n), MAX_LENGTH)
        stats = get_method(method).collect(lm.model, m_in, n_in, max_length=MAX_LENGTH, progress=progress)
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

    entry = lookup(lm.fingerprint, "mathneuro-statistics", params, compute, check=fits, tensors=True).data
    parts = {}
    for side in ("math", "nonmath"):
        vecs = {k.split("/", 1)[1]: v for k, v in entry.tensors.items() if k.startswith(side + "/")}
        if kind == "column_norms":
            parts[side] = ColumnNorms(sums=vecs, samples=entry.data[side]["samples"], tokens=entry.data[side]["tokens"])
        else:
            from core.mathneuro.lape import FiringCounts
            parts[side] = FiringCounts(positive=vecs, tokens=entry.data[side]["tokens"])
    return Statistics(kind, parts["math"], parts["nonmath"])


def masks_for(lm, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0, progress=None):
    """The masks ``method`` selects at ``proportion`` from the (cached) statistics of ``n`` samples."""
    return select(lm.model, statistics(lm, math, nonmath, n, method, progress), proportion, method, seed)


def matrix_names(ref: str) -> list[str]:
    """Scored weight names of the model (drill-down choices)."""
    return list(scored_linears(load(ref).model))


# ---- the analyses ---------------------------------------------------------------------------------------------------
def layers(req, progress=None) -> dict:
    """Selected parameters per (layer, module) for one or two non-math datasets."""
    lm, out, parts = load(req.ref), {}, len(req.nonmath)
    for i, nm in enumerate(req.nonmath):
        masks = masks_for(lm, req.math, nm, req.n, req.proportion, req.method,
                          progress=scaled(progress, i / parts, (i + 1) / parts))
        rows = [r for r in layer_distribution(masks) if r["layer"] is not None]
        out[nm] = {"rows": rows, "selected": sum(r["selected"] for r in rows),
                   "total": sum(r["total"] for r in rows)}
    return {"params": req.params(), "by_nonmath": out}


def effect(req, progress=None) -> dict:
    """Math and non-math metric before and after the intervention, per method and non-math dataset."""
    lm, math = load(req.ref), req.math
    sets, metrics = evaluation_sets(math, list(req.nonmath), req.eval_n, req.metric)
    model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
    step = item_progress(progress, "evaluations")
    total = len(req.methods) * len(req.nonmath) + 1
    before = {name: score(model, tok, recs, metrics[name], name) for name, recs in sets.items()}
    if step is not None:
        step(1, total)
    rows = []
    for nm in req.nonmath:
        for method in req.methods:
            masks = masks_for(lm, math, nm, req.n, req.proportion, method)
            with intervened(model, masks, req.mode, req.factor) as changed:
                m_after = score(changed, tok, sets[math], metrics[math], math)
                n_after = score(changed, tok, sets[nm], metrics[nm], nm)
            rows.append({"method": method, "label": METHODS[method].label, "nonmath": nm,
                         "selected": selection_summary(masks)["selected"],
                         "math_before": before[math], "math_after": m_after,
                         "nonmath_before": before[nm], "nonmath_after": n_after})
            if step is not None:
                step(len(rows) + 1, total)
    return {"params": req.params(), "metrics": metrics, "before": before, "rows": rows,
            "levels": levels(sets, metrics, tok)}


def proportion_sweep(req, progress=None) -> dict:
    """Selected count and math / non-math metric after pruning, per K (against the first non-math dataset)."""
    lm, math, nm = load(req.ref), req.math, req.nonmath
    sets, metrics = evaluation_sets(math, [nm], req.eval_n, req.metric)
    model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
    step = item_progress(progress, "proportions")
    rows = [{"proportion": 0.0, "selected": 0, "share": 0.0,
             "math": score(model, tok, sets[math], metrics[math], math),
             "nonmath": score(model, tok, sets[nm], metrics[nm], nm)}]
    for i, k in enumerate(req.proportions):
        masks = masks_for(lm, math, nm, req.n, k, req.method)
        s = selection_summary(masks)
        with intervened(model, masks, "prune") as changed:
            rows.append({"proportion": k, "selected": s["selected"], "share": s["share"],
                         "math": score(changed, tok, sets[math], metrics[math], math),
                         "nonmath": score(changed, tok, sets[nm], metrics[nm], nm)})
        if step is not None:
            step(i + 1, len(req.proportions))
    return {"params": req.params(), "metrics": metrics, "rows": rows, "levels": levels(sets, metrics, tok)}


def scale_sweep(req, progress=None) -> dict:
    """Math / non-math metric with the selected parameters scaled by each factor (1.0 = unchanged)."""
    lm, math, nm = load(req.ref), req.math, req.nonmath
    sets, metrics = evaluation_sets(math, [nm], req.eval_n, req.metric)
    model, tok = private_view(lm.model), lm.tokenizer  # eval flags set on a view: the model is shared
    masks = masks_for(lm, math, nm, req.n, req.proportion, req.method)
    rows, step = [], item_progress(progress, "scale factors")
    for i, f in enumerate(req.factors):
        with intervened(model, masks, "scale", f) as changed:
            rows.append({"factor": f, "math": score(changed, tok, sets[math], metrics[math], math),
                         "nonmath": score(changed, tok, sets[nm], metrics[nm], nm)})
        if step is not None:
            step(i + 1, len(req.factors))
    return {"params": req.params(), "metrics": metrics, "rows": rows, "levels": levels(sets, metrics, tok),
            "selected": selection_summary(masks)["selected"]}


def consistency(req, progress=None) -> dict:
    """Overlap of sets found from 1..N random samples with the set found from all N, per K."""
    lm = load(req.ref)
    m_in = token_inputs(lm.tokenizer, load_records(req.math, "train", req.n), MAX_LENGTH)
    n_in = token_inputs(lm.tokenizer, load_records(req.nonmath, "train", req.n), MAX_LENGTH)
    rows = overlaps(lm.model, m_in, n_in, None, req.proportions, repeats=req.repeats, seed=req.seed,
                    method=req.method, max_length=MAX_LENGTH, progress=progress)
    rows = [{k: (None if isinstance(v, float) and not _math.isfinite(v) else v) for k, v in r.items()}
            for r in rows]
    return {"params": req.params(), "rows": rows}


def drill(req, progress=None) -> dict:
    """One matrix's selected entries pooled to at most ``max_cells`` per side, row / column counts, and the model's
    matrices (the choices of the next drill-down)."""
    lm = load(req.ref)
    masks = masks_for(lm, req.math, req.nonmath, req.n, req.proportion, req.method, progress=progress)
    mask = masks[req.matrix]
    return {"params": req.params(), **drill_down(masks, req.matrix, req.max_cells),
            "row_counts": mask.sum(1).tolist(), "col_counts": mask.sum(0).tolist(),
            "matrices": list(scored_linears(lm.model))}
