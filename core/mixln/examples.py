"""The Mix-LN views a speaker shows (:mod:`core.examples`): the charts of the committed runs (``assets/mixln``), all
read from files at once. ``placement`` picks the runs (``pre-ln,post-ln,mix-ln-0.25``), ``run`` one run."""
from __future__ import annotations

from core.analyses import Example, Param
from core.mixln.folders import list_runs
from core.mixln.requests import DEFAULT_RUNS
from core.mixln.service import (angular_distance_result, compare_result, curves_result, depth_result,
                                gradnorms_result, layer_removal_result, loss_result, lr_sweep_result, sweep_result)

RUNS = tuple(list_runs())
PLACEMENT = Param("placement", "runs", "multi", RUNS)
SHOWN = {"placement": [r for r in DEFAULT_RUNS if r in RUNS] or list(RUNS[:3])}


def _loss(progress=None, placement=()):
    return loss_result(placement)


def _gradnorms(progress=None, placement=(), kind="param"):
    return gradnorms_result(placement, kind)


def _removal(progress=None, placement=()):
    return layer_removal_result(placement, progress=progress)


def _angular(progress=None, run=None):
    return angular_distance_result(run, progress=progress)


def _seeds(progress=None, layers="12", metric="loss"):
    return curves_result(None, "main" if str(layers) == "12" else "depth-24", metric)


EXAMPLE_VIEWS = (
    Example("loss", "Loss curves", "loss", _loss, (PLACEMENT,), SHOWN),
    Example("gradnorms", "Gradient norm per layer", "gradnorms", _gradnorms,
            (PLACEMENT, Param("kind", "gradient of", "choice", ("param", "input"))), {**SHOWN, "kind": "param"}),
    Example("seeds", "Held-out loss over seeds", "curves", _seeds,
            (Param("layers", "layers", "choice", ("12", "24")), Param("metric", "metric", "choice",
                                                                      ("loss", "perplexity"))),
            {"layers": "12", "metric": "loss"}),
    Example("compare", "Comparison at equal steps", "compare", lambda progress=None: compare_result()),
    Example("alpha", "Alpha sweep", "sweep", lambda progress=None: sweep_result()),
    Example("lr-sweep", "Learning-rate sweep", "lr-sweep", lambda progress=None: lr_sweep_result()),
    Example("depth", "12 vs 24 layers", "depth", lambda progress=None: depth_result()),
    Example("angular", "Angular distance", "angular", _angular, (Param("run", "run", "choice", RUNS),),
            {"run": SHOWN["placement"][-1]}),
    Example("removal", "Layer removal", "removal", _removal, (PLACEMENT,), SHOWN),
)
