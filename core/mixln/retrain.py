"""Retraining the committed runs with the recipe (``mixln reproduce``) and storing each as the repository keeps it.

- :func:`reproduce`       every run of :data:`~core.mixln.recipe.RUN_SETS` (or the chosen ones) into a root folder
- :func:`train_job`       one run: trained, stored compact, its diagnostics precomputed, weights kept for seed 0 only
- :func:`compact_run`     float16 weights, re-evaluated
- :func:`thin_history`    every step up to 100, then every 10th
- :func:`float64_prefix`  the first 50 steps again in float64 (what the reproducibility test compares)
- :func:`record_prefixes` re-record the float64 prefix of committed runs in their run.json (``mixln prefix``)

``core.mixln.reproduce_result`` passes ``diagnostics=core.mixln.write_run_diagnostics`` so each run's diagnostics are
precomputed while its weights are there; this module does not import the analyses.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import torch

from core.files import atomic_write
from core.mixln.data import prepare_corpus
from core.mixln.folders import evaluate_run, weights_fingerprint
from core.mixln.launch import train_run
from core.mixln.recipe import ASSETS, RECIPE, RECIPE_MODEL, RUN_SETS, Job, recipe_jobs
from core.progress import Progress, report, scaled


def reproduce(root: str | os.PathLike = ASSETS, names: list[str] | None = None, progress: Progress | None = None,
              sets: list[str] | None = None, seeds: list[int] | None = None, skip_done: bool = False,
              jobs: list[Job] | None = None, keep_all_weights: bool = False,
              diagnostics: Callable[[str], object] | None = None) -> dict[str, dict]:
    """Retrain the committed runs into ``root`` with the recipe (one shared tokenizer, same data): every
    :data:`RUN_SETS` entry by default, or the chosen sets / placements (``names``) / seeds, or ``jobs``.
    ``skip_done`` keeps runs whose run.json says finished or diverged; ``keep_all_weights`` keeps every run's
    weights (a scratch folder), not only those the repository holds; ``diagnostics(folder)`` precomputes a run's
    diagnostics (see :func:`train_job`); ``progress`` hears a note per run and its steps, as a share of the whole.
    Returns run.json per job key."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / "tokenizer.json"
    if not tok_path.is_file():
        corpus = prepare_corpus(RECIPE_MODEL["vocab_size"])
        atomic_write(tok_path, lambda tmp: corpus.tokenizer.save(str(tmp)))
    results = {}
    todo = jobs if jobs is not None else recipe_jobs(sets, names, seeds)
    for i, job in enumerate(todo):
        done = root / job.relative_folder / "run.json"
        if skip_done and done.is_file() and json.loads(done.read_text()).get("status") in ("finished", "diverged"):
            results[job.key] = json.loads(done.read_text())
            continue
        report(progress, i / len(todo), f"note: run {i + 1}/{len(todo)}: {job.key}")
        results[job.key] = train_job(job, root, scaled(progress, i / len(todo), (i + 1) / len(todo)),
                                     keep_all_weights, diagnostics)
    return results


def train_job(job: Job, root: str | os.PathLike = ASSETS, progress: Progress | None = None,
              keep_all_weights: bool = False,
              diagnostics: Callable[[str], object] | None = None) -> dict:
    """Train one recipe run into ``root / job.relative_folder`` and store it as committed: float16 weights
    (re-evaluated, their fingerprint in run.json), ``diagnostics(folder)`` called while the weights are there when
    the run's set asks for diagnostics, then the weights dropped unless kept for its seed."""
    root = Path(root)
    folder = root / job.relative_folder
    for sub in ("model.safetensors", "diagnostics.json", "run.json", "history.json"):
        (folder / sub).unlink(missing_ok=True)
    spec = RECIPE[job.name]
    train_run(folder, spec["norm"], spec["alpha"], job.model, job.train, root / "tokenizer.json",
              keep_checkpoints=False, progress=progress)
    meta = compact_run(folder)
    meta["history_kept"] = thin_history(folder)
    meta["float64_prefix"] = float64_prefix(job, root)
    if RUN_SETS[job.set].diagnostics and diagnostics is not None:
        diagnostics(str(folder))
    if not job.keep_weights:
        if not keep_all_weights:
            (folder / "model.safetensors").unlink(missing_ok=True)
        kept = RUN_SETS[job.set].weights_for_seed
        meta["weights"] = f"not kept (only seed {kept} of this set is committed with weights)"
    meta["job"] = {"set": job.set, "name": job.name, "seed": job.seed, "lr": job.lr}
    atomic_write(folder / "run.json", json.dumps(meta, indent=1))
    return meta


def compact_run(folder: str | os.PathLike, dtype: str = "float16") -> dict:
    """Store a run's weights in ``dtype`` (half the bytes, for committing) and record the final held-out
    perplexity of the stored weights; the float32 value measured during training is kept beside it."""
    from safetensors.torch import load_file, save_file
    folder = Path(folder)
    meta = json.loads((folder / "run.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    target = getattr(torch, dtype)
    if any(v.dtype != target for v in state.values()):
        half = {k: v.to(target).contiguous() for k, v in state.items()}
        atomic_write(folder / "model.safetensors",
                     lambda tmp: save_file(half, str(tmp), metadata={"format": "pt", "model_type": "mixln"}))
    if meta.get("final_eval_perplexity") is not None:
        meta.setdefault("final_eval_loss_float32", meta["final_eval_loss"])
        meta.setdefault("final_eval_perplexity_float32", meta["final_eval_perplexity"])
        atomic_write(folder / "run.json", json.dumps(meta, indent=1))
        got = evaluate_run(str(folder))
        meta.update(final_eval_loss=got["loss"], final_eval_perplexity=got["perplexity"])
    meta["weights_dtype"] = dtype
    meta["weights_fingerprint"] = weights_fingerprint(folder)  # keys the run's diagnostics once the weights are gone
    atomic_write(folder / "run.json", json.dumps(meta, indent=1))
    return meta


CHECK_STEPS = 50  # the prefix every committed run records in float64 (inside the 300-step warmup: same schedule)


def float64_prefix(job: Job, root: str | os.PathLike = ASSETS, steps: int = CHECK_STEPS) -> dict:
    """The first ``steps`` steps of ``job`` trained again in float64 (same data, initialisation and schedule): the
    training losses, global gradient norms, per-layer weight-gradient norms at step 1 and the held-out loss at the
    last step. Every floating-point operation is float64 (tested op by op): the initial weights are torch's float32
    draws computed in float64 (:mod:`core.mixln.rng`), the norms, rotary tables, loss and gradient norms are float64.
    Float64 rounding differs between CPU paths (vector width, summation order, libm) by ~1e-16 per operation, so
    these numbers agree across x86-64 CPUs to the measured spread (``assets/mixln/prefix_spread.json``), where
    float32 runs drift apart by up to ~1e-3 within 50 steps. What the reproducibility test retrains and compares."""
    spec = RECIPE[job.name]
    hist = train_run(None, spec["norm"], spec["alpha"], job.model,
                     {**job.train, "steps": steps, "eval_every": steps, "dtype": "float64"},
                     Path(root) / "tokenizer.json")
    return {"steps": steps, "dtype": "float64", "loss": [r["loss"] for r in hist["train"]],
            "grad_norm": [r["grad_norm"] for r in hist["train"]], "grad_norms_step1": hist["grad_norms"][0]["param"],
            "eval_loss": hist["eval"][-1]["loss"]}


def record_prefixes(root: str | os.PathLike = ASSETS, jobs: list[Job] | None = None,
                    progress: Progress | None = None, steps: int = CHECK_STEPS) -> dict[str, float | None]:
    """Train the float64 prefix (:func:`float64_prefix`) of each committed run of ``jobs`` (default: every recipe run)
    again and store it in the run's run.json, nothing else changed. Runs not trained yet under ``root`` are left out.
    Returns per job key the largest relative change of the recorded losses, gradient norms and held-out loss
    (:func:`prefix_change`; None for a run that had no prefix). ``steps``: the recorded length (tests shorten it)."""
    root = Path(root)
    todo = [j for j in (recipe_jobs() if jobs is None else jobs) if (root / j.relative_folder / "run.json").is_file()]
    changes = {}
    for i, job in enumerate(todo):
        report(progress, i / len(todo), f"note: float64 prefix {i + 1}/{len(todo)}: {job.key}")
        path = root / job.relative_folder / "run.json"
        new = float64_prefix(job, root, steps)
        meta = json.loads(path.read_text())  # read after the training: a run.json written meanwhile is kept
        old = meta.get("float64_prefix")
        meta["float64_prefix"] = new
        atomic_write(path, json.dumps(meta, indent=1))
        changes[job.key] = prefix_change(old, new) if old else None
    report(progress, 1.0, f"note: {len(todo)} float64 prefixes recorded")
    return changes


PREFIX_QUANTITIES = ("loss", "grad_norm", "grad_norms_step1", "eval_loss")  # what a prefix records


def prefix_changes(a: dict, b: dict) -> dict[str, float]:
    """Per recorded quantity (training losses, global gradient norms, per-layer gradient norms at step 1, held-out
    loss), the largest relative difference between two prefixes of the same run (relative to ``b``), over the steps
    both have; the held-out loss only when both end at the same step."""
    out = {}
    for key in PREFIX_QUANTITIES:
        if key == "eval_loss":
            if a["steps"] == b["steps"]:
                out[key] = abs(a[key] - b[key]) / abs(b[key])
        else:
            out[key] = max(abs(x - y) / abs(y) for x, y in zip(a[key], b[key]))
    return out


def prefix_change(a: dict, b: dict) -> float:
    """The largest of :func:`prefix_changes`."""
    return max(prefix_changes(a, b).values())


HISTORY_EVERY_STEP = 100   # a committed history keeps every training step up to here (the prefix checks) ...
HISTORY_STRIDE = 10        # ... then every 10th step (and the last), so 3,000-step curves stay small in the repository


def thin_history(folder: str | os.PathLike, every_step: int = HISTORY_EVERY_STEP, stride: int = HISTORY_STRIDE) -> str:
    """Keep the training records of steps <= ``every_step`` and of every ``stride``-th step after it (and the last)
    in ``folder/history.json``; evaluations and gradient norms are kept whole. Returns what was kept, in words."""
    path = Path(folder) / "history.json"
    hist = json.loads(path.read_text())
    last = hist["train"][-1]["step"] if hist["train"] else 0
    hist["train"] = [r for r in hist["train"]
                     if r["step"] <= every_step or r["step"] % stride == 0 or r["step"] == last]
    atomic_write(path, json.dumps(hist))
    return f"training records: every step up to {every_step}, then every {stride}th step and the last"
