"""What the MathNeuro tab and ``python -m core mathneuro`` do, one function per user action, each returning a
:class:`core.results.Result` (status text, data, tables, figures, files):

    identify_result, layer_distribution_result, effect_result, proportion_sweep_result, scale_sweep_result,
    consistency_result, drill_result          the analyses, by model reference and dataset names
    matrix_choices, example_results, precompute_examples, train_demo_result

An action parses its raw inputs once into a request (:mod:`core.mathneuro.requests`: every rule, for the tab and the
CLI alike), answers it through :func:`core.runner.lookup`, keyed by the model fingerprint + analysis + the request's
parameters (the defaults for the embedded model are committed in ``assets/mathneuro/examples.json`` and answer at
once, without loading the model; anything else is computed once and cached), and shows what it found with
:func:`core.mathneuro.views.view`. The statistics an analysis identifies its sets from (small: one vector per
matrix) go the same way, as a result that carries tensors.

Datasets: any ``core.data`` dataset with math problems (``.solution``), multiple-choice records or texts, plus
``review-sentiment`` (the embedded model's synthetic non-math task, :mod:`core.mathneuro.recipe`).
Metrics: ``accuracy`` (math: exact final number; multiple choice: best option) or ``loss`` (teacher-forced
nats per token: worked solution, correct option or text); ``auto`` picks accuracy for the tasks the embedded
model was trained on and loss elsewhere (SmolLM2's accuracy is at the floor on GSM-style problems).

``progress`` (:data:`core.progress.Progress`) may raise :class:`core.errors.Cancelled`; an intervention is applied
to a private view of the shared model (:func:`core.mathneuro.intervened`), which is never written, so concurrent
requests on the same model never see it.
"""
from __future__ import annotations

import math as _math
import time
from functools import partial
from pathlib import Path

from core.cache import CacheEntry
from core.errors import BadInputError
from core.mathneuro.analysis import consistency, drill_down, layer_distribution, selection_summary
from core.mathneuro.evaluation import token_inputs
from core.mathneuro.interventions import intervened, save_masks
from core.mathneuro.methods import METHODS, Statistics, get_method, select
from core.mathneuro.recipe import DEMO_NAME
from core.mathneuro.requests import (DEFAULTS, ConsistencyRequest, DrillRequest, EffectRequest, IdentifyRequest,
                                     LayersRequest, ProportionSweepRequest, ScaleSweepRequest, default_matrix,
                                     model_ref)
from core.mathneuro.scoring import ColumnNorms, scored_linears
from core.mathneuro.tasks import MAX_LENGTH, evaluation_sets, levels, load_records, score
from core.mathneuro.views import ANALYSES, view
from core.paths import ASSETS_DIR
from core.progress import item_progress, scaled
from core.results import Result
from core.runner import ExampleStore, Found, lookup, precompute, result_key
from core.zoo.views import private_view

EXAMPLES = ExampleStore(ASSETS_DIR / "mathneuro" / "examples.json")


# ---- model, statistics, the one way an analysis is answered -------------------------------------------------------
def load(ref: str):
    """``core.zoo.load_model(ref)``; an empty reference or a model that is not a causal LM is a clear error."""
    from core.zoo import load_model, require_kind
    return require_kind(load_model(model_ref(ref)), ("causal-lm",), "MathNeuro")


def _answer(name: str, req, compute) -> Result:
    """Analysis ``name`` of request ``req``: a committed example, the results cache or ``compute()``, shown by
    :func:`core.mathneuro.views.view` (which also checks a result before it is cached or served)."""
    from core.zoo import fingerprint

    options = req.options()
    found = lookup(fingerprint(req.ref), f"mathneuro-{name}", req.params(), compute, examples=EXAMPLES,
                   check=lambda data: view(name, Found(data, "computed", ""), **options), model=req.ref)
    return view(name, found, **options)


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


# ---- the analyses: parse, compute, answer -------------------------------------------------------------------------
def identify_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0,
                    out: str | None = None, progress=None) -> Result:
    """Identify, summarise, and optionally save the masks (safetensors, with metadata)."""
    req = IdentifyRequest.parse(ref, math, nonmath, n, proportion, method, seed, out)
    lm = load(req.ref)
    t0 = time.perf_counter()
    masks = masks_for(lm, req.math, req.nonmath, req.n, req.proportion, req.method, req.seed, progress)
    summary = selection_summary(masks)
    result = {"model": req.ref, "fingerprint": lm.fingerprint, "math": req.math, "nonmath": req.nonmath, "n": req.n,
              "proportion": req.proportion, "method": req.method, "selected": summary["selected"],
              "total": summary["total"], "share": summary["share"], "matrices": summary["matrices"],
              "seconds": round(time.perf_counter() - t0, 2)}
    if req.out is not None:
        save_masks(masks, req.out, {"method": req.method, "proportion": req.proportion, "math": req.math,
                                    "nonmath": req.nonmath, "n": req.n, "model": req.ref,
                                    "fingerprint": lm.fingerprint})
        result["masks_file"] = str(req.out)
    status = (f"{req.method}: {result['selected']:,} of {result['total']:,} weights ({100 * result['share']:.3f}%) "
              f"are math-specific (K = {req.proportion:g}, N = {req.n}, {result['seconds']} s)")
    return Result(status, result, tables={"matrices": result["matrices"]}, stem="mathneuro-identify")


def layer_distribution_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                              progress=None, show: str = "count") -> Result:
    """Selected parameters per (layer, module) for one or two non-math datasets; ``show``: count or share."""
    req = LayersRequest.parse(ref, math, nonmath, n, proportion, method, show)

    def compute():
        lm, out, parts = load(req.ref), {}, len(req.nonmath)
        for i, nm in enumerate(req.nonmath):
            masks = masks_for(lm, req.math, nm, req.n, req.proportion, req.method,
                              progress=scaled(progress, i / parts, (i + 1) / parts))
            rows = [r for r in layer_distribution(masks) if r["layer"] is not None]
            out[nm] = {"rows": rows, "selected": sum(r["selected"] for r in rows),
                       "total": sum(r["total"] for r in rows)}
        return {"params": req.params(), "by_nonmath": out}
    return _answer("layers", req, compute)


def effect_result(ref: str, math: str, nonmath, n: int, proportion: float, methods=None, eval_n: int = 100,
                  metric: str = "auto", mode: str = "prune", factor: float | None = None, progress=None) -> Result:
    """Math and non-math metric before and after the intervention, per method and non-math dataset."""
    req = EffectRequest.parse(ref, math, nonmath, n, proportion, methods, eval_n, metric, mode, factor)

    def compute():
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
    return _answer("effect", req, compute)


def proportion_sweep_result(ref: str, math: str, nonmath, n: int, proportions=None, method: str = "mathneuro",
                            eval_n: int = 100, metric: str = "auto", progress=None) -> Result:
    """Selected count and math / non-math metric after pruning, per K (against the first non-math dataset)."""
    req = ProportionSweepRequest.parse(ref, math, nonmath, n, proportions, method, eval_n, metric)

    def compute():
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
    return _answer("proportion-sweep", req, compute)


def scale_sweep_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                       factors=None, eval_n: int = 100, metric: str = "auto", progress=None,
                       factor: float | None = None) -> Result:
    """Math / non-math metric with the selected parameters scaled by each factor (1.0 = unchanged); ``factor``
    adds one chosen factor to ``factors`` (the default factors when None) and is reported in the status."""
    req = ScaleSweepRequest.parse(ref, math, nonmath, n, proportion, method, factors, eval_n, metric, factor)

    def compute():
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
    return _answer("scale-sweep", req, compute)


def consistency_result(ref: str, math: str, nonmath, n: int, proportions=None, method: str = "mathneuro",
                       repeats: int = 3, seed: int = 0, progress=None) -> Result:
    """Overlap of sets found from 1..N random samples with the set found from all N, per K."""
    req = ConsistencyRequest.parse(ref, math, nonmath, n, proportions, method, repeats, seed)

    def compute():
        lm = load(req.ref)
        m_in = token_inputs(lm.tokenizer, load_records(req.math, "train", req.n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(req.nonmath, "train", req.n), MAX_LENGTH)
        rows = consistency(lm.model, m_in, n_in, None, req.proportions, repeats=req.repeats, seed=req.seed,
                           method=req.method, max_length=MAX_LENGTH, progress=progress)
        rows = [{k: (None if isinstance(v, float) and not _math.isfinite(v) else v) for k, v in r.items()}
                for r in rows]
        return {"params": req.params(), "rows": rows}
    return _answer("consistency", req, compute)


def matrix_names(ref: str) -> list[str]:
    """Scored weight names of the model (drill-down choices)."""
    return list(scored_linears(load(ref).model))


def matrix_choices(ref: str) -> tuple[list[str], str]:
    """(the model's scored weight names, the one the drill-down shows first)."""
    names = matrix_names(ref)
    return names, default_matrix(names)


def drill_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                 matrix: str | None = None, max_cells: int = 64, progress=None) -> Result:
    """One weight matrix's selected entries, pooled to at most ``max_cells`` per side, plus row/column counts (and
    the model's matrices: the choices of the next drill-down)."""
    req = DrillRequest.parse(ref, math, nonmath, n, proportion, method, matrix, max_cells, matrices=matrix_names)

    def compute():
        lm = load(req.ref)
        masks = masks_for(lm, req.math, req.nonmath, req.n, req.proportion, req.method, progress=progress)
        mask = masks[req.matrix]
        return {"params": req.params(), **drill_down(masks, req.matrix, req.max_cells),
                "row_counts": mask.sum(1).tolist(), "col_counts": mask.sum(0).tolist(),
                "matrices": list(scored_linears(lm.model))}
    return _answer("drill", req, compute)


# ---- precomputed examples, the embedded model ---------------------------------------------------------------
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
            out[name] = view(name, Found(e["data"], "precomputed", result_key(fp, e["analysis"], e["params"])))
    return out


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
    """Run the default view afresh and write what it looked up as the example store
    (:func:`core.runner.precompute`)."""
    calls = [partial(fn, **kwargs) for _, fn, kwargs in default_calls(ref)]
    return precompute(calls, path if path is not None else EXAMPLES.path, log=log)


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
