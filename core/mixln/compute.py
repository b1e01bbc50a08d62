"""What each Mix-LN analysis computes: ``compute(request, progress) -> data`` for the entries of
:data:`core.mixln.views.ANALYSES`.

The analyses of the committed runs read their folders (``assets/mixln``); the diagnostics of a run or any causal LM
(angular distance, layer removal, gradient norms) are found by the weights' fingerprint without loading them (a run's
precomputed diagnostics, then the results cache) and computed on the model and its held-out windows only when
neither has them. Layer removal of several runs is one lookup per run (:func:`diagnostic`), so it returns the
:class:`core.runner.Found` it assembled.
"""
from __future__ import annotations

from pathlib import Path

from core.errors import BadInputError
from core.mixln import analysis, folders, reference, schemas, summary
from core.mixln.placements import placement_colour
from core.mixln.recipe import RUN_SETS
from core.progress import report
from core.runner import Found, digest, lookup, result_key

# the analyses assembled from one lookup per run or model: entry -> the name each subject's result is stored under (in
# a run's diagnostics.json and the results cache), and what each must hold (checked on what is read back)
STORED = {"removal": "mixln/removal", "model-gradnorms": "mixln/gradnorms"}
STORED_SCHEMA = {"removal": schemas.REMOVAL, "model-gradnorms": schemas.GRADNORMS}


def colour(run, i: int = 0) -> str:
    return placement_colour(run.placement, run.meta["alpha"], i)


# ---- committed runs -----------------------------------------------------------------------------------------------
def loss(req, progress=None) -> list[dict]:
    """Each run's label, colour and training / held-out history."""
    return [{"run": r.name, "label": r.label, "colour": colour(r, i), "history": r.history}
            for i, r in enumerate(folders.load_run(n) for n in req.runs)]


def gradnorms(req, progress=None) -> list[dict]:
    """Each run's per-layer gradient norms at initialisation and at the step asked for (default: the end)."""
    results = [analysis.run_gradnorms(n, req.kind) for n in req.runs]
    if req.step is not None:
        for r in results:
            k = max([i for i, s in enumerate(r["steps"]) if s <= max(req.step, r["steps"][0])] or [0])
            r["final_step"], r["final"] = r["steps"][k], r["per_step"][k]
    return results


def compare(req, progress=None) -> list[dict]:
    """One row per committed run and depth, over the seeds (:func:`core.mixln.summary.compare_table`)."""
    rows = []
    for s in req.sets:
        root = folders.ASSETS / RUN_SETS[s].folder
        present = folders.list_runs(root)
        picked = [n for n in (req.runs or present) if n in present]
        rows += summary.compare_table(picked, root) if picked else []
    if not rows:
        raise BadInputError("no committed runs found.", fix="run `python -m core mixln reproduce` first.")
    return rows


def sweep(req, progress=None) -> list[dict]:
    rows = summary.sweep_table()
    if not rows:
        raise BadInputError("no sweep runs found.", fix="run `python -m core mixln reproduce` first.")
    return rows


def curves(req, progress=None) -> dict:
    bands = summary.loss_bands(list(req.runs) if req.runs else None, req.set_name)
    if not bands:
        raise BadInputError(f"no runs of the set {req.set_name} found.", fix="run `python -m core mixln reproduce`.")
    return {"set": req.set_name, "metric": req.metric, "bands": bands}


def lr_sweep(req, progress=None) -> list[dict]:
    rows = summary.lr_sweep_table()
    if not rows:
        raise BadInputError("no learning-rate sweep runs found.",
                            fix="run `python -m core mixln reproduce --set lr-sweep` first.")
    return rows


def depth(req, progress=None) -> list[dict]:
    profiles = summary.depth_profiles(list(req.runs) if req.runs else None)
    if not profiles:
        raise BadInputError("no runs with diagnostics found.", fix="run `python -m core mixln reproduce` first.")
    return profiles


def reproduces(req, progress=None) -> dict:
    """What reproduces (:mod:`core.mixln.reproduces`): one row per claim of the paper and its follow-ups (the paper's
    figure, the committed runs' with n and spread, a verdict), the embedding-init comparison, the follow-ups'
    published table, the recipe runs not committed yet, and each as Markdown (``python tools/docs.py`` writes them
    into docs/mixln-reproduces.md and the README)."""
    from core.mixln import reproduces as rep
    data = {"claims": rep.claims(), "init": rep.init_rows(), "followups": rep.followup_rows(),
            "pending": rep.pending_rows(), "sources": rep.markdown_sources()}
    data["markdown"] = {"claims": rep.claims_markdown(data["claims"]), "init": rep.init_markdown(data["init"]),
                        "followups": rep.followup_markdown(data["followups"]),
                        "pending": rep.pending_markdown(data["pending"])}
    return data


# ---- diagnostics of a run or any causal LM ------------------------------------------------------------------------
def diagnostic(name: str, ref: str, run: Path | None, params: dict, compute) -> Found:
    """The result of a diagnostic for a run or a zoo model, found by the weights' fingerprint without loading them (a
    run's precomputed diagnostics, then the results cache); ``compute(subject)`` runs only when neither has it, on
    the model and its held-out windows."""
    subject = lambda: analysis.load_subject(ref, run, params["samples"], params["seq_len"])  # noqa: E731
    return lookup(analysis.fingerprint_of(ref, run), STORED[name], params, lambda: compute(subject()),
                  examples=folders.run_examples(run), schema=STORED_SCHEMA[name],
                  model=folders.run_name(run) if run is not None else ref)


def angular(req, progress=None) -> dict:
    """The (first layer l, block size n) heatmap of d(h_l, h_l+n), raw and scaled per block size."""
    report(progress, 0.1, f"loading {req.ref}")
    return analysis.angular_data(analysis.load_subject(req.ref, req.run, req.samples, req.seq_len), req.params,
                                 progress)


def removal(req, progress=None) -> Found:
    """Held-out loss increase when each layer is skipped, one result per run or model (each found on its own)."""
    results, sources = [], []
    for i, (ref, run) in enumerate(zip(req.refs, req.runs)):
        report(progress, 0.05, f"loading {ref}")
        params = req.params_of(run)  # a run's windows and a model's differ (core.mixln.requests.RUN_SAMPLES)
        found = diagnostic("removal", ref, run, params,
                           lambda subject: analysis.removal_data(subject, params, progress))
        r = found.data
        if run is not None:
            loaded = folders.load_run(ref)
            r = {**r, "label": loaded.label, "colour": colour(loaded, i)}
        results.append(r)
        sources.append(found.source)
    source = "computed" if "computed" in sources else sources[0]
    return Found(results, source, result_key(digest(results), "mixln/removal", {}))


def model_gradnorms(req, progress=None) -> Found:
    """Per-layer gradient norms of one batch of held-out text for any causal LM at its current weights."""
    found = diagnostic("model-gradnorms", req.ref, req.run, req.params,
                       lambda subject: analysis.gradnorm_data(subject, req.params))
    return Found([found.data], found.source, found.key)


# ---- reference levels ---------------------------------------------------------------------------------------------
def reference_levels(req, progress=None) -> dict:
    """The unigram and bigram levels of the training data on the committed runs' held-out windows, computed now;
    ``req.write`` stores them in ``assets/mixln/reference.json``, which the charts read."""
    return reference.write_reference() if req.write else reference.reference_levels()
