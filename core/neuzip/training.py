"""Training with compressed weights (NeuZip paper, Sec. 3.3 and Table 1), beside the usual ways, measured.

:data:`MODES` is the one registry of training modes; each entry carries its label, colour and defaults:

- ``vanilla``: bf16 weights, full gradients, plain SGD (``torch.optim.SGD``): the paper's baseline;
- ``vanilla-adamw``: the same with AdamW (its two states in bf16, as torch keeps them for bf16 weights): a reference;
- ``lomo``: LOMO's fused update in the backward, each gradient freed once applied (:mod:`core.neuzip.lomo`);
- ``lomo+neuzip``: LOMO over NeuZip-compressed linear weights (lossless): decompressed per layer for the forward and
  again in the backward, updated, compressed again (:class:`core.neuzip.lomo.ZipLinear`);
- ``qlora-int8`` / ``qlora-fp4-single`` / ``qlora-fp4`` / ``qlora-nf4-single`` / ``qlora-nf4``: frozen bitsandbytes
  weights plus float32 LoRA adapters trained with AdamW (:mod:`core.neuzip.qlora`), where bitsandbytes runs; skipped
  with the reason where it does not. The 4-bit ones come as the paper's Table 2 lists them: block scales float32
  (``-single``: QLoRA FP4 / NF4) or double-quantized (QLoRA FP4² / NF4²).

:func:`train_modes` trains one model in each mode from the same weights on the same batches and measures, per mode:
the loss of every step; the tensor ledger, the paper's analogue of its CUDA peak: the peak of live tensor bytes split
into weights / gradients / optimizer state / activations (:class:`core.neuzip.memtrack.MemoryTracker`, over the first
``track_steps`` steps); the machine's view: the process's peak RSS (``peak_rss_bytes``, the whole process, the model's
load included), its RSS after each step, and ``max_memory_reserved`` beside ``max_memory_allocated`` on a GPU; and
iterations per second (the median step time of the steps after the first ``track_steps``), by the wall clock and by
the CPU time the process spent (``time.process_time``: what a step costs whatever else the machine runs).

Each mode runs in fresh processes by default (``TrainSettings.fresh``): one measures the process (no profiler, every
step), one the tensor ledger (the profiler, the tracked steps), so no mode inherits another's heap or imports and
neither measurement sees the other's (:mod:`core.neuzip.train_step`). ``fresh=False`` runs every mode in this process
one after the other (the tests; the peak RSS is then this process's, reset before each mode's steps, and says so).

Models (:mod:`core.neuzip.train_models`): a registered causal LM (e.g. ``smollm2-135m``), a local folder, a Mix-LN run
(``mixln:pre-ln``), or a Llama configuration with random weights from :data:`RANDOM_MODELS` (``llama-1b``: the shapes
of Llama-3.2-1B; ``llama3-8b``; ``tiny-llama``), optionally cut to ``layers`` decoder layers; each built one tensor at
a time straight into its mode's form (a compressed mode never holds the bf16 model). Text: the paragraphs of the
Mix-LN corpora (Wikipedia, OpenWebText, Python docs; train split), tokenized with the model's tokenizer, else with
the Mix-LN BPE (4,096 ids), packed into blocks of ``seq`` tokens and drawn in a seeded order (by this process, which
loads the tokenizer only; the fresh processes get the token ids).
"""
from __future__ import annotations

import dataclasses
import os
import time

import torch

from core.errors import BadInputError, Cancelled
from core.neuzip import published as _published
from core.neuzip.train_recipe import (MODES, SGD_LR, TrainingMode, TrainSettings,  # noqa: F401 (re-exported)
                                      check_modes, mode_lr)
from core.neuzip.lomo import attach_lomo  # noqa: F401  (re-exported: the tests and notebooks reach it here)
from core.neuzip.memtrack import tag_parameter_gradients  # noqa: F401  (re-exported)
from core.neuzip.train_models import (RANDOM_MODELS, ModelSource, build_model, decoder_layers,  # noqa: F401
                                      source_parameters, source_reference, training_batches)
from core.neuzip.train_step import lm_loss, train_mode
from core.progress import report

__all__ = ["TrainingMode", "MODES", "RANDOM_MODELS", "PAPER_TABLE1", "PAPER_SOURCE", "TrainSettings", "build_model",
           "training_batches", "train_modes", "decoder_layers", "lm_loss", "mode_lr", "check_modes"]


# NeuZip paper, Table 1 (pre-training decoder-only models, one GPU), whole: read from the paper's text by
# core.neuzip.published (which holds Table 2 too); one row per model and mode, "note" says which run did not fit
PAPER_TABLE1 = tuple({"model": r["model"], "mode": r["mode"], "memory_GiB": r["memory_GiB"], "it_per_s": r["it_per_s"],
                      "loss": r["score"], **({"note": "out of memory"} if r["oom"] else {})} for r in _published.TABLE1)
PAPER_SOURCE = _published.TABLE1_SOURCE

# ---- a run: every mode --------------------------------------------------------------------------------------------
def _in_fresh_processes(ref: str, mode: TrainingMode, batches: torch.Tensor, settings: TrainSettings, progress,
                        budget_s: float | None) -> dict:
    """One mode in two fresh processes: the process's memory, speed and losses (every step, no profiler), then the
    tensor ledger (the profiler, the tracked steps); their figures in one dict."""
    from core.neuzip.process import run_fresh

    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    kwargs = {"ref": ref, "mode": mode.name, "settings": fields, "batches": batches.tolist(),
              "threads": torch.get_num_threads(), "budget_s": budget_s}
    track = min(settings.track_steps, len(batches))
    share = len(batches) / (len(batches) + track)
    part = (lambda lo, hi: None if progress is None else (lambda f, m: progress(lo + (hi - lo) * f, m)))
    result = run_fresh("train-mode", {**kwargs, "measure": "process"}, part(0.0, share))
    process = result.pop("process")
    result.update(peak_rss_bytes=process["peak_rss_bytes"], fresh_process=True)
    if track:
        ledger = run_fresh("train-mode", {**kwargs, "measure": "tensors"}, part(share, 1.0))
        result.update({k: ledger[k] for k in ("peak_bytes", "peak_split", "weights_bytes")})
        result["tracked_run"] = {"losses": ledger["losses"], "weights_digest": ledger["weights_digest"],
                                 "peak_rss_bytes": ledger["process"]["peak_rss_bytes"]}
    else:
        result.update(peak_bytes=None, peak_split=None, weights_bytes=None)
    return result


def train_modes(ref: str, modes=tuple(MODES), settings: TrainSettings = TrainSettings(), progress=None,
                batches: torch.Tensor | None = None) -> dict:
    """Train ``ref`` in each of ``modes`` from the same weights on the same batches; the run and per mode its
    losses, memory and speed (see the module doc). Modes that cannot run here (bitsandbytes) are listed with the
    reason under ``skipped``. A stop (:class:`Cancelled`) keeps the modes finished in its ``partial``.
    ``batches``: token ids ``(steps, batch, seq)`` to train on instead of the corpus (tests)."""
    from core.neuzip.modules import linear_layers
    from core.neuzip.process import machine

    modes = check_modes(modes)
    started = time.time()
    report(progress, 0.0, f"reading {ref}")
    source = ModelSource(ref, settings.seed)
    probe = source.build(settings.layers, meta=True)  # the shapes: no weight is read
    vocab, n_params = source.vocab(probe), sum(p.numel() for p in {id(p): p for p in probe.parameters()}.values())
    n_linear = sum(m.weight.numel() for _, m in linear_layers(probe))
    n_layers = len(decoder_layers(probe))
    del probe
    tokenizer = source.tokenizer() if batches is None else None
    if batches is None:
        batches = training_batches(tokenizer, vocab, settings.steps, settings.batch, settings.seq, settings.seed)
    run = {"model": ref, "model_label": source.label, "parameters": n_params, "linear_parameters": n_linear,
           "decoder_layers": n_layers, "vocab": vocab, "device": settings.device, "threads": torch.get_num_threads(),
           "settings": {"steps": settings.steps, "batch": settings.batch, "seq": settings.seq, "seed": settings.seed,
                        "lr": {m: mode_lr(m, settings) for m in modes}, "checkpointing": settings.checkpointing,
                        "loss_chunk": settings.loss_chunk, "track_steps": settings.track_steps,
                        "layers": settings.layers, "budget_s": settings.budget_s,
                        "compress_threads": settings.compress_threads, "fresh": settings.fresh,
                        "data": "train paragraphs of wikipedia-paragraphs, openwebtext-paragraphs, pydoc-topics; "
                                + ("the model's tokenizer" if tokenizer is not None else "the Mix-LN BPE")},
           "machine": machine(settings.device), "load_average_start": _load(), "modes": [], "skipped": {}}
    todo = []
    for m in modes:
        why = _cannot_run(MODES[m], settings.device)
        if why:
            run["skipped"][m] = why
        else:
            todo.append(m)
    per_mode = settings.budget_s / max(len(todo), 1) if settings.budget_s else None
    try:
        for i, m in enumerate(todo):
            sub = (lambda f, msg, i=i: report(progress, (i + f) / len(todo), msg)) if progress else None
            if settings.fresh:
                run["modes"].append(_in_fresh_processes(ref, MODES[m], batches, settings, sub, per_mode))
            else:
                run["modes"].append({**train_mode(source, MODES[m], batches, settings, sub, per_mode),
                                     "fresh_process": False})
    except Cancelled as stop:
        raise Cancelled(stop.message, stop.fix, partial=_finish(run, started)) from None
    report(progress, 1.0, "done")
    return _finish(run, started)


def _finish(run: dict, started: float) -> dict:
    run["load_average_end"] = _load()
    run["seconds"] = round(time.time() - started, 1)
    by = {r["mode"]: r for r in run["modes"]}
    same = {}
    for name, r in by.items():
        for ref in ([MODES[name].same_training_as] if MODES[name].same_training_as else []) + \
                (["lomo"] if name == "vanilla" else []):
            if ref in by and by[ref]["steps"] == r["steps"]:
                same[f"{name} vs {ref}"] = {"losses": r["losses"] == by[ref]["losses"],
                                            "weights": r["weights_digest"] == by[ref]["weights_digest"]}
    run["identical"] = same
    return run


def _cannot_run(mode: TrainingMode, device: str) -> str:
    if mode.needs_bnb:
        from core.neuzip.qlora import bnb_status

        return bnb_status(torch.device(device).type)
    return ""


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
