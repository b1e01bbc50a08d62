"""The MathNeuro views a speaker shows (:mod:`core.examples`): the six precomputed analyses of the embedded model
(``assets/mathneuro/examples.json``). Their default inputs are answered from the store without loading the model;
another model, method or K is computed (and cached) by the service."""
from __future__ import annotations

from core.analyses import Example, Param
from core.mathneuro.methods import METHODS
from core.mathneuro.recipe import DEMO_NAME
from core.mathneuro.requests import DEFAULTS, SHOW
from core.mathneuro.service import (consistency_result, drill_result, effect_result, example_results,
                                    layer_distribution_result, proportion_sweep_result, scale_sweep_result)
from core.mathneuro.views import view
from core.runner import Found

D = DEFAULTS
MODEL = Param("model", "model", "choice", (DEMO_NAME, "smollm2-135m"), open=True)
METHOD = Param("method", "method", "choice", tuple(METHODS))
K = Param("k", "K", "number", low=1e-6, high=1.0)
DRILLED = "model.layers.0.mlp.down_proj.weight"


def _stored(analysis: str, values: dict, defaults: dict, **options):
    """The precomputed Result when ``values`` are the defaults (None otherwise, or when the store lacks it), shown
    with the view ``options`` (e.g. ``show="share"``)."""
    if values != defaults:
        return None
    res = example_results(DEMO_NAME, only=(analysis,)).get(analysis)
    if res is None or not options:
        return res
    return view(analysis, Found(res.data, res.source, res.key), **options)


def _effect(progress=None, model=DEMO_NAME, method=tuple(D["methods"]), k=D["proportion"]):
    values = {"model": model, "method": list(method), "k": k}
    return _stored("effect", values, EFFECT) or effect_result(model, D["math"], D["nonmath"], D["n"], k, list(method),
                                                              D["eval_n"], progress=progress)


def _layers(progress=None, model=DEMO_NAME, method=D["method"], k=D["proportion"], show=D["show"]):
    values = {"model": model, "method": method, "k": k}
    return _stored("layers", {**values, "show": "count"}, {**LAYERS, "show": "count"}, show=show) or \
        layer_distribution_result(model, D["math"], D["nonmath"], D["n"], k, method, progress=progress, show=show)


def _proportions(progress=None, model=DEMO_NAME, method=D["method"]):
    return _stored("proportion-sweep", {"model": model, "method": method}, SWEEP) or proportion_sweep_result(
        model, D["math"], D["nonmath"][0], D["n"], D["proportions"], method, D["eval_n"], progress=progress)


def _scales(progress=None, model=DEMO_NAME, method=D["method"], k=D["proportion"]):
    return _stored("scale-sweep", {"model": model, "method": method, "k": k}, SCALE) or scale_sweep_result(
        model, D["math"], D["nonmath"][0], D["n"], k, method, D["factors"], D["eval_n"], progress=progress)


def _consistency(progress=None, model=DEMO_NAME, method=D["method"]):
    return _stored("consistency", {"model": model, "method": method}, SWEEP) or consistency_result(
        model, D["math"], D["nonmath"][0], D["n"], D["consistency_proportions"], method, D["repeats"],
        progress=progress)


def _drill(progress=None, model=DEMO_NAME, method=D["method"], k=D["proportion"], matrix=DRILLED):
    values = {"model": model, "method": method, "k": k, "matrix": matrix}
    return _stored("drill", values, DRILL) or drill_result(model, D["math"], D["nonmath"][0], D["n"], k, method,
                                                           matrix, progress=progress)


EFFECT = {"model": DEMO_NAME, "method": list(D["methods"]), "k": D["proportion"]}
LAYERS = {"model": DEMO_NAME, "method": D["method"], "k": D["proportion"]}
SWEEP = {"model": DEMO_NAME, "method": D["method"]}
SCALE = {**SWEEP, "k": D["proportion"]}
DRILL = {**LAYERS, "matrix": DRILLED}

EXAMPLE_VIEWS = (
    Example("effect", "Pruning effect", "effect", _effect,
            (MODEL, Param("method", "methods", "multi", tuple(METHODS)), K), EFFECT),
    Example("layers", "Layer distribution", "layers", _layers,
            (MODEL, METHOD, K, Param("show", "show", "choice", tuple(SHOW))), {**LAYERS, "show": D["show"]}),
    Example("proportion-sweep", "Proportion sweep", "proportion-sweep", _proportions, (MODEL, METHOD), SWEEP),
    Example("scale-sweep", "Scale-factor sweep", "scale-sweep", _scales, (MODEL, METHOD, K), SCALE),
    Example("consistency", "Consistency", "consistency", _consistency, (MODEL, METHOD), SWEEP),
    Example("drill", "Drill-down", "drill", _drill, (MODEL, METHOD, K, Param("matrix", "matrix", "text")), DRILL),
)
