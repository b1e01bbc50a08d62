"""What the Mix-LN tab and ``python -m core mixln`` do, one function per user action, each returning a
:class:`core.results.Result` (status text, data, tables, figures, files):

    loss_result(runs)                         training and held-out loss of committed runs
    gradnorms_result(runs, kind, step)        per-layer gradient norms logged at init and at a step
    compare_result(), sweep_result()          final held-out perplexity per placement / against alpha, over seeds,
                                              at 12 and 24 layers (mean, error bars min-max, n)
    curves_result(runs, set, metric)          held-out loss / perplexity curves over seeds (mean, min-max band)
    lr_sweep_result()                         final held-out loss per placement and peak learning rate (one seed)
    depth_result()                            12 vs 24 layers: per-layer angular distance, gradient norm, removal
    reproduces_result(docs)                   what reproduces: claim, paper's figure, ours (n, spread), verdict
    angular_distance_result(ref)              d(h_l, h_l+n) heatmap of a run or any causal LM (precomputed / cached)
    layer_removal_result(refs)                held-out loss increase when each layer is skipped
    model_gradnorms_result(ref)               gradient norms of one batch for any causal LM
    live_run(placement, alpha, layers, steps) a small run trained now, one Result per update (a generator)
    train_result(...), reproduce_result(...)  train a run folder / retrain the committed runs
    reference_result()                        unigram / bigram levels of the training data on the held-out windows
    write_run_diagnostics(run)                precompute a run's diagnostics into its folder

Each parses its raw inputs once into its request (:mod:`core.mixln.requests`) and is answered by
:func:`analysis_result` (:func:`core.analyses.answer`): the entry's compute function (:mod:`core.mixln.compute`) reads
the committed runs or finds a diagnostic by the weights' fingerprint (a run's precomputed ``diagnostics.json``, the
results cache) and the entry in :data:`core.mixln.views.ANALYSES` shows it. The live run, training and reproducing
build their data themselves (they stream or write files) and are shown by their entries.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from core.analyses import request_for, result_function
from core.budget import charge_request
from core.mixln import folders, launch, reference, retrain
from core.mixln.recipe import LIVE_MODEL, LIVE_TRAIN, recipe_command
from core.mixln.requests import DEFAULT_RUNS
from core.mixln.views import ANALYSES, view
from core.progress import Progress
from core.results import Result
from core.runner import Found, precompute


def _run_examples(name: str, req):
    """A diagnostic of a run is answered first from the run's own precomputed ``diagnostics.json``."""
    return folders.run_examples(getattr(req, "run", None))


# analysis_result(name, *raw, progress=None, **raw): analysis ``name`` of ANALYSES for the raw inputs (its request
# type's parse arguments): read, found or computed, and shown
analysis_result = result_function(ANALYSES, _run_examples)


# ---- committed runs -----------------------------------------------------------------------------------------------
def loss_result(names=DEFAULT_RUNS) -> Result:
    """Training (thin) and held-out (thick) loss against the step, one colour per run."""
    return analysis_result("loss", names)


def gradnorms_result(names=DEFAULT_RUNS, kind: str = "param", step: float | None = None) -> Result:
    """Each run's per-layer gradient norm at initialisation (dotted) and at ``step`` (solid; default: the end)."""
    return analysis_result("gradnorms", names, kind, step)


def compare_result(names=None, sets=("main", "depth-24")) -> Result:
    """One row per committed run and depth: placement, alpha, steps, status, final held-out loss and perplexity over
    the seeds (mean, std, min, max, n; :func:`core.mixln.summary.compare_table`); the chart draws min-max error bars."""
    return analysis_result("compare", names, sets)


def sweep_result() -> Result:
    """Final held-out perplexity against Mix-LN's alpha (0 = all Pre-LN, 1 = all Post-LN), over seeds, at 12 and 24
    layers."""
    return analysis_result("sweep")


def curves_result(names=None, set_name: str = "main", metric: str = "loss") -> Result:
    """Held-out loss (or perplexity) curves of the committed placements over their seeds: mean line, min-max band."""
    return analysis_result("curves", names, set_name, metric)


def lr_sweep_result() -> Result:
    """Final held-out loss per placement and peak learning rate (one seed per rate): what makes the comparison fair."""
    return analysis_result("lr-sweep")


def depth_result(names=None) -> Result:
    """12 vs 24 layers: per-layer angular distance d(h_l, h_l+1), weight-gradient norm at the end of training and
    loss increase when the layer is skipped, per placement, mean and min-max over seeds."""
    return analysis_result("depth", names)


def reproduces_result() -> Result:
    """What reproduces: one row per claim of the paper (and its follow-ups) with the paper's figure, the project's
    figure from the committed runs (n, spread) and a verdict; the embedding-init comparison; the follow-ups'
    published table beside the runs (:mod:`core.mixln.reproduces`; ``python tools/docs.py`` writes them into the
    docs)."""
    return analysis_result("reproduces")


# ---- diagnostics of a run or any causal LM ------------------------------------------------------------------------
def angular_distance_result(ref: str, samples: int | None = None, seq_len: int = 64, position: str = "last",
                            progress: Progress | None = None) -> Result:
    """The paper's (first layer l, block size n) heatmap of d(h_l, h_l+n), raw and scaled per block size."""
    return analysis_result("angular", ref, samples, seq_len, position, progress=progress)


def layer_removal_result(refs, samples: int | None = None, seq_len: int = 64, progress: Progress | None = None
                         ) -> Result:
    """Held-out loss increase when each layer is skipped, one bar group per run or model (``samples``: held-out
    windows, None for the default: 64 spread over a run's held-out stream, 8 of a model's)."""
    return analysis_result("removal", refs, samples, seq_len, progress=progress)


def model_gradnorms_result(ref: str, samples: int = 4, seq_len: int = 64) -> Result:
    """Per-layer gradient norms of one batch of held-out text for any causal LM at its current weights."""
    return analysis_result("model-gradnorms", ref, samples, seq_len)


def write_run_diagnostics(ref: str) -> Path:
    """Precompute the default angular-distance and layer-removal results of a run into its ``diagnostics.json`` (an
    example store), so the tab shows them at once (``python -m core mixln reproduce`` calls this after training each
    run, while its weights are there)."""
    folder = folders.resolve_run(ref)
    path = folder / folders.DIAGNOSTICS_FILE
    path.unlink(missing_ok=True)
    return precompute([lambda: angular_distance_result(str(folder)), lambda: layer_removal_result([str(folder)])], path)


# ---- training -----------------------------------------------------------------------------------------------------
def live_run(placement: str, alpha: float, layers: int, steps: int, progress: Progress | None = None
             ) -> Iterator[Result]:
    """Train a small model now (nothing is written) and yield a Result (status, loss and gradient-norm figures) at
    every evaluation and gradient-norm log; a ``progress`` that raises ``Cancelled`` ends it, keeping the curves."""
    req = request_for(ANALYSES, "live", placement, alpha, layers, steps)
    charge_request(req)  # priced before it trains, against the one budget (public mode; core.budget)
    sizes = {**LIVE_MODEL, "num_layers": req.layers}
    tcfg = {**LIVE_TRAIN, "steps": req.steps, "eval_every": max(5, req.steps // 6)}
    tok = folders.ASSETS / "tokenizer.json"
    events = launch.train_run_iter(None, req.placement, req.alpha, sizes, tcfg, tok if tok.is_file() else None,
                                   progress=progress)
    levels = reference.reference_levels(train_config=tcfg) if tok.is_file() else None  # on the live run's windows
    for ev in events:
        if ev.kind in ("eval", "grad_norms", "diverged", "stopped", "done"):
            yield view("live", Found({"history": ev.history.to_dict(), "levels": levels}, "computed", None), req)


def reference_result(write: bool = False) -> Result:
    """The unigram and bigram levels of the training data on the committed runs' held-out windows, computed now
    (:func:`core.mixln.reference.reference_levels`); ``write`` stores them in ``assets/mixln/reference.json``, which
    the charts read."""
    return analysis_result("reference", write)


def train_result(out, placement: str = "mix", alpha: float = 0.25, model_sizes: dict | None = None,
                 train_config: dict | None = None, tokenizer=None, resume=None, checkpoint_every: int = 0,
                 progress: Progress | None = None) -> Result:
    """Train one run into the folder ``out`` (:func:`core.mixln.launch.train_run`); ``progress`` hears its steps."""
    req = request_for(ANALYSES, "train", out, placement, alpha, model_sizes, train_config, tokenizer, resume,
                      checkpoint_every)
    meta = launch.train_run(req.out, req.placement, req.alpha, req.model_sizes, req.train_config, req.tokenizer,
                            req.resume, checkpoint_every=req.checkpoint_every, progress=progress)
    return view("train", Found({**meta, "folder": str(req.folder)}, "computed", None), req)


def reproduce_result(root=None, names=None, progress: Progress | None = None, sets=None, seeds=None,
                     skip_done: bool = False) -> Result:
    """Retrain the committed runs with the recipe (all run sets, or the chosen sets / placements / seeds) and
    precompute each run's diagnostics while its weights are there (what the tab opens on)."""
    req = request_for(ANALYSES, "reproduce", root, names, sets, seeds, skip_done)
    done = retrain.reproduce(req.root, progress=progress, skip_done=req.skip_done, jobs=list(req.jobs),
                             diagnostics=write_run_diagnostics)
    reference.write_reference(req.root)  # the unigram / bigram levels the charts draw, on the same held-out windows
    data = {"root": str(req.root),
            "runs": {k: {f: m.get(f) for f in ("status", "final_eval_perplexity", "wall_seconds")}
                     for k, m in done.items()},
            "commands": {j.key: recipe_command(j.name, j) for j in req.jobs}}
    return view("reproduce", Found(data, "computed", None), req)
