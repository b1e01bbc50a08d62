"""What the MathNeuro tab and ``python -m core mathneuro`` do, one function per user action, each returning a
:class:`core.results.Result` (status text, data, tables, figures, files):

    identify_result, layer_distribution_result, effect_result, proportion_sweep_result, scale_sweep_result,
    consistency_result, drill_result          the analyses, by model reference and dataset names
    analysis_result(name, **raw)              any analysis of :data:`core.mathneuro.views.ANALYSES`
    matrix_choices, example_results, precompute_examples, train_demo_result

An action parses its raw inputs once into a request (:mod:`core.mathneuro.requests`: every rule, for the tab and the
CLI alike) and answers it with :func:`core.analyses.answer`: keyed by the model fingerprint + analysis + the request's
parameters (the defaults for the embedded model are committed in ``assets/mathneuro/examples.json`` and answer at
once, without loading the model; anything else is computed once by :mod:`core.mathneuro.compute` and cached), and
shown by the analysis' entry (:data:`core.mathneuro.views.ANALYSES`). The statistics an analysis identifies its sets
from (small: one vector per matrix) go the same way, as a result that carries tensors.

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

import time
from functools import partial
from pathlib import Path

from core.analyses import result_function
from core.errors import BadInputError
from core.mathneuro.analysis import selection_summary
from core.mathneuro.compute import load, masks_for, matrix_names, statistics  # noqa: F401  (the service's helpers)
from core.mathneuro.interventions import save_masks
from core.mathneuro.recipe import DEMO_NAME
from core.mathneuro.requests import (DEFAULTS, ConsistencyRequest, DrillRequest, EffectRequest, IdentifyRequest,
                                     LayersRequest, ProportionSweepRequest, ScaleSweepRequest, default_matrix)
from core.mathneuro.views import ANALYSES, view
from core.paths import ASSETS_DIR
from core.results import Result
from core.runner import ExampleStore, Found, precompute, result_key

EXAMPLES = ExampleStore(ASSETS_DIR / "mathneuro" / "examples.json")


# ---- the one way an analysis is answered ----------------------------------------------------------------------------
# analysis_result(name, *raw, progress=None, request=None, **raw): analysis ``name`` of ANALYSES, a committed example,
# the results cache or its compute function
analysis_result = result_function(ANALYSES, lambda name, request: EXAMPLES)  # the store read at call time


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

    return analysis_result("layers", request=req, progress=progress)


def effect_result(ref: str, math: str, nonmath, n: int, proportion: float, methods=None, eval_n: int = 100,
                  metric: str = "auto", mode: str = "prune", factor: float | None = None, progress=None) -> Result:
    """Math and non-math metric before and after the intervention, per method and non-math dataset."""
    req = EffectRequest.parse(ref, math, nonmath, n, proportion, methods, eval_n, metric, mode, factor)

    return analysis_result("effect", request=req, progress=progress)


def proportion_sweep_result(ref: str, math: str, nonmath, n: int, proportions=None, method: str = "mathneuro",
                            eval_n: int = 100, metric: str = "auto", progress=None) -> Result:
    """Selected count and math / non-math metric after pruning, per K (against the first non-math dataset)."""
    req = ProportionSweepRequest.parse(ref, math, nonmath, n, proportions, method, eval_n, metric)

    return analysis_result("proportion-sweep", request=req, progress=progress)


def scale_sweep_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                       factors=None, eval_n: int = 100, metric: str = "auto", progress=None,
                       factor: float | None = None) -> Result:
    """Math / non-math metric with the selected parameters scaled by each factor (1.0 = unchanged); ``factor``
    adds one chosen factor to ``factors`` (the default factors when None) and is reported in the status."""
    req = ScaleSweepRequest.parse(ref, math, nonmath, n, proportion, method, factors, eval_n, metric, factor)

    return analysis_result("scale-sweep", request=req, progress=progress)


def consistency_result(ref: str, math: str, nonmath, n: int, proportions=None, method: str = "mathneuro",
                       repeats: int = 3, seed: int = 0, progress=None) -> Result:
    """Overlap of sets found from 1..N random samples with the set found from all N, per K."""
    req = ConsistencyRequest.parse(ref, math, nonmath, n, proportions, method, repeats, seed)

    return analysis_result("consistency", request=req, progress=progress)


def matrix_choices(ref: str) -> tuple[list[str], str]:
    """(the model's scored weight names, the one the drill-down shows first)."""
    names = matrix_names(ref)
    return names, default_matrix(names)


def drill_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                 matrix: str | None = None, max_cells: int = 64, progress=None) -> Result:
    """One weight matrix's selected entries, pooled to at most ``max_cells`` per side, plus row/column counts (and
    the model's matrices: the choices of the next drill-down)."""
    req = DrillRequest.parse(ref, math, nonmath, n, proportion, method, matrix, max_cells, matrices=matrix_names)

    return analysis_result("drill", request=req, progress=progress)


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
