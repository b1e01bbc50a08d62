"""One training mode in this process: the model built in the mode's form, its update set up, the steps run and
measured (:func:`train_mode`), and the loss all modes share (:func:`lm_loss`).

Every mode uses the same recipe: bf16 weights, every decoder layer checkpointed (its forward recomputed in the
backward), the cross-entropy computed ``loss_chunk`` tokens at a time by one fused function (the logits of one slice
exist at once), a constant learning rate, no gradient clipping.

What :func:`train_mode` measures depends on ``measure``:

- ``"tensors"``: the tensor ledger. :class:`core.neuzip.memtrack.MemoryTracker` (PyTorch's profiler, allocator-level)
  runs from before the model is built to the end of the first ``track_steps`` steps: the peak of live tensor bytes
  split into weights / gradients / optimizer / activations, the paper's analogue (its CUDA peak). Only those steps
  run.
- ``"process"``: the machine's view. No profiler (its event records would count in the process); every step runs; the
  process's RSS after the model is built and after each step, its peak RSS (``VmHWM``: the whole process, the load
  included), ``max_memory_reserved`` / ``max_memory_allocated`` on a GPU, the speed and the losses.
- ``"both"`` (an in-process run, e.g. the tests): the tracked steps, then the rest without the tracker (its peak RSS
  from those), as before processes were fresh.

:func:`core.neuzip.training.train_modes` runs ``"process"`` and ``"tensors"`` in two fresh processes per mode by
default (:func:`run_mode` is what each runs), so no mode inherits another's heap and no measurement sees the other's.
"""
from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError
from core.neuzip.lomo import ZipState, attach_lomo, weights_digest
from core.neuzip.memtrack import MemoryTracker, reset_peak_rss, rss, tag_parameter_gradients, trim_heap
from core.neuzip.modules import linear_layers
from core.neuzip.train_recipe import MODES, TrainSettings, mode_lr
from core.neuzip.train_models import ModelSource, decoder_layers
from core.progress import report

__all__ = ["MEASURES", "checkpoint_layers", "lm_loss", "train_mode", "run_mode"]

MEASURES = ("tensors", "process", "both")


def checkpoint_layers(model: nn.Module) -> None:
    """Recompute each decoder layer's forward in the backward (non-reentrant activation checkpointing), in place."""
    from torch.utils.checkpoint import checkpoint

    for layer in decoder_layers(model):
        inner = layer.forward

        def forward(*args, _inner=inner, **kwargs):
            if torch.is_grad_enabled():
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)
            return _inner(*args, **kwargs)
        layer.forward = forward


def _head(model: nn.Module) -> tuple[str, nn.Module]:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = head if head is not None else getattr(model, "lm_head", None)
    for name, child in model.named_children():
        if child is head:
            return name, child
    raise BadInputError("this model has no LM head to compute the loss with.", fix="pick a causal language model")


class LinearCrossEntropy(torch.autograd.Function):
    """``sum_i CE(h_i W^T + b, t_i)`` over the rows of ``h`` (N, D), ``chunk`` rows at a time: the logits of one
    chunk exist at once (float32), and the gradients of ``h``, ``W`` and ``b`` are made in the same pass (softmax
    minus one-hot, times ``W`` and ``h``), kept until the backward scales them by the upstream gradient. One
    contiguous weight gradient, summed over the chunks in place; with ``tied`` (a :class:`TiedGradient`) it is
    handed to the tied input embedding's lookup, which adds its rows in place and passes the sum on."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk, tied=None):
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        grad_b = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        total = torch.zeros((), dtype=torch.promote_types(h.dtype, torch.float32), device=h.device)
        for s in range(0, h.shape[0], chunk):
            hc, tc = h[s:s + chunk], targets[s:s + chunk, None]
            logits = F.linear(hc, weight, bias)
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            total += (lse - logits.gather(1, tc)).sum()
            if grad_h is None and grad_w is None and grad_b is None:
                continue
            g = logits.sub_(lse).exp_().scatter_add_(1, tc, torch.full_like(lse, -1.0)).to(h.dtype)
            del logits
            if grad_h is not None:
                torch.mm(g, weight, out=grad_h[s:s + chunk])
            if grad_w is not None:
                _add_weight_gradient(grad_w, g, hc)
            if grad_b is not None:
                grad_b += g.sum(0)
        ctx.grads, ctx.tied = [grad_h, grad_w, grad_b], tied
        return total

    @staticmethod
    def backward(ctx, upstream):
        grads, ctx.grads = ctx.grads, None
        for g in grads:
            if g is not None:
                g.mul_(upstream)
        if ctx.tied is not None and grads[1] is not None:  # the tied lookup adds its rows and hands the sum over
            ctx.tied.grad_w, grads[1] = grads[1], None
        ctx.tied = None
        return grads[0], grads[1], grads[2], None, None, None


class TiedGradient:
    """The slot through which a tied input embedding's lookup (:class:`TiedLookup`) receives the LM head's weight
    gradient from :class:`LinearCrossEntropy`'s backward (which runs first), to add its own rows into it in place."""

    def __init__(self):
        self.used = False
        self.grad_w: torch.Tensor | None = None


class TiedLookup(torch.autograd.Function):
    """``F.embedding(ids, weight)`` whose weight gradient, when the same weight is the LM head's, is summed into the
    head's gradient in place instead of a second dense one of the table's size (Llama-3.2-1B: 501 MiB, which autograd
    would hold beside the head's while it adds them). The bits are autograd's: the rows of the lookup's gradient are
    summed by PyTorch's own embedding backward over the distinct tokens only (each row the same sequence of
    additions), then each is added once to the head's row, as autograd adds the two partial gradients."""

    @staticmethod
    def forward(ctx, ids, weight, padding_idx, slot):
        slot.used = True
        ctx.save_for_backward(ids)
        ctx.rows, ctx.padding_idx, ctx.slot = weight.shape[0], padding_idx, slot
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad_out):
        (ids,), slot = ctx.saved_tensors, ctx.slot
        grad_w, slot.grad_w, ctx.slot = slot.grad_w, None, None
        pad = -1 if ctx.padding_idx is None else ctx.padding_idx
        if grad_w is None:  # the head's gradient did not come this way: autograd's own dense gradient
            return None, torch.ops.aten.embedding_dense_backward(grad_out, ids, ctx.rows, pad, False), None, None
        rows, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        if pad >= 0:
            hit = (rows == pad).nonzero()
            pad = int(hit[0, 0]) if hit.numel() else -1
        part = torch.ops.aten.embedding_dense_backward(grad_out.reshape(-1, grad_out.shape[-1]), inverse,
                                                       rows.numel(), pad, False)
        grad_w.index_add_(0, rows, part.to(grad_w.dtype))
        return None, grad_w, None, None


def _tied_embedding(model: nn.Module, head: nn.Module) -> nn.Module | None:
    """The model's input embedding when it shares the head's weight and :class:`TiedLookup` can stand in for it."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if type(emb) is not nn.Embedding or emb.weight is not getattr(head, "weight", None):
        return None
    if emb.sparse or emb.scale_grad_by_freq or emb.max_norm is not None:
        return None
    return emb


WEIGHT_GRAD_BLOCK_BYTES = 32 << 20  # on the CPU: the weight gradient is summed this many float32 bytes of rows at a time


def _add_weight_gradient(grad_w: torch.Tensor, g: torch.Tensor, h: torch.Tensor) -> None:
    """``grad_w += g^T h`` in place. On the CPU a reduced-precision (bf16) matrix product writes through a float32
    copy of its whole output (measured on an AVX2 CPU: 1,003 MiB for Llama-3.2-1B's 128,256 x 2,048 head, twice
    the gradient itself, the process's peak where nothing else shows it), so there the rows are summed in blocks of
    :data:`WEIGHT_GRAD_BLOCK_BYTES` of float32: each output element is the same sum over the same tokens."""
    if grad_w.device.type != "cpu":
        grad_w.addmm_(g.t(), h)
        return
    rows = max(1, WEIGHT_GRAD_BLOCK_BYTES // (4 * grad_w.shape[1]))
    for s in range(0, grad_w.shape[0], rows):
        grad_w[s:s + rows].addmm_(g[:, s:s + rows].t(), h)


def lm_loss(model: nn.Module, ids: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """Mean next-token cross-entropy of ``ids`` (B, T), the logits ``chunk`` tokens at a time (0: all at once) by
    :class:`LinearCrossEntropy`."""
    name, head = _head(model)
    if not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise BadInputError("the model's LM head has no weight matrix.", fix="pick a causal LM with a linear head")
    emb, slot = _tied_embedding(model, head), TiedGradient()
    setattr(model, name, nn.Identity())  # the model's forward returns the last hidden states
    if emb is not None:
        emb.forward = lambda x: TiedLookup.apply(x, emb.weight, emb.padding_idx, slot)
    try:
        out = model(input_ids=ids, use_cache=False) if hasattr(model, "generation_config") else model(ids)
    finally:
        setattr(model, name, head)
        if emb is not None:
            del emb.forward
    hidden = (out.logits if hasattr(out, "logits") else out[0])[:, :-1]
    hidden = hidden.reshape(-1, hidden.shape[-1])
    targets = ids[:, 1:].reshape(-1)
    n = targets.numel()
    return LinearCrossEntropy.apply(hidden, head.weight, getattr(head, "bias", None), targets, chunk or n,
                                    slot if slot.used and torch.is_grad_enabled() else None) / n


# ---- one mode -----------------------------------------------------------------------------------------------------
def _prepare(source: ModelSource, mode, settings, current: dict, progress=None):
    """The model built for ``mode`` and its update set up; returns ``(model, optimizer or None, trainable
    parameters, zip state)``. ``current["tracker"]`` is the memory tracker while one measures (the hooks read it)."""

    lr = mode_lr(mode.name, settings)
    state, hook = None, None
    if mode.weights == "neuzip":
        state = ZipState(lr, settings.compress_threads)
        state.tracker = current.get("tracker")
        hook = state.layer  # each linear layer compressed as it is read
    elif mode.update == "lora":
        from core.neuzip.qlora import lora_hook

        hook = lora_hook(mode.weights, mode.defaults["rank"], mode.defaults["alpha"], settings.seed,
                         mode.defaults.get("double_quant", True))
    model = source.build(settings.layers, linear=hook, linears=linear_layers, progress=progress)
    model = model.to(settings.device)
    if state is not None:
        state.ready(model)
    model.train()
    if settings.checkpointing:
        checkpoint_layers(model)
    if mode.update == "lora":
        from core.neuzip.qlora import LoRALinear

        for p in model.parameters():
            p.requires_grad_(False)
        params = [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    else:
        params = list({id(p): p for p in model.parameters() if p.requires_grad and p.numel()}.values())
        opt = None if mode.update == "lomo" else torch.optim.SGD(params, lr=lr) if mode.update == "sgd" else \
            torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if mode.update == "lomo":
        attach_lomo(params, lr, tracker=lambda: current.get("tracker"),
                    scratch=None if state is None else state.update)  # one pair of float32 slices per model
    else:  # the summed gradient in .grad counts as a gradient
        def seen(p):
            if current.get("tracker") is not None:
                current["tracker"].mark_gradient(p.grad)
        for p in params:
            p.register_post_accumulate_grad_hook(seen)
    return model, opt, params, state


def _step(model, ids, opt, params, settings, tracker=None, state: ZipState | None = None) -> float:
    loss = lm_loss(model, ids, settings.loss_chunk)
    if tracker is not None:
        tag_parameter_gradients(loss, tracker, params)
    loss.backward()
    if state is not None:
        state.wait()  # the background compressions of this step
    if opt is not None:
        with tracker.category("optimizer") if tracker is not None else contextlib.nullcontext():
            opt.step()
            opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def train_mode(source: ModelSource, mode, batches: torch.Tensor, settings, progress=None,
               budget_s: float | None = None, measure: str = "both") -> dict:
    """Train a fresh copy of the model in ``mode`` on ``batches`` (steps, B, T) and measure it (``measure``: see the
    module doc); the measurements as a dict."""
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    device = torch.device(settings.device)
    cuda = device.type == "cuda"
    steps, track = len(batches), min(settings.track_steps, len(batches))
    if measure == "tensors":
        steps = track
    elif measure == "process":
        track = 0
    losses, seconds, cpu, rss_after, current = [], [], [], [], {}
    tracker = MemoryTracker(device) if track else None
    started = time.perf_counter()
    if tracker is not None and measure == "both":
        gc.collect()
        trim_heap()

    def run(step: int, measuring: MemoryTracker | None) -> bool:
        report(progress, step / steps, f"{mode.label}: step {step + 1}/{steps}")
        ids = batches[step].to(device)
        t0, c0 = time.perf_counter(), time.process_time()
        value = _step(model, ids, opt, params, settings, measuring, state)
        if cuda:
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        losses.append(value)
        rss_after.append(rss()["rss"])
        return math.isfinite(value)

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    with tracker if tracker is not None else contextlib.nullcontext():
        current["tracker"] = tracker
        report(progress, 0.0, f"{mode.label}: building the model")
        model, opt, params, state = _prepare(source, mode, settings, current)
        if cuda:
            torch.cuda.synchronize(device)
        if tracker is not None:
            gc.collect()
            tracker.begin()
        if measure == "both":
            reset_peak_rss()
        built = rss()
        finite = all(run(step, tracker) for step in range(track))
        if tracker is not None:
            tracker.end()
        current["tracker"] = None
        if state is not None:
            state.tracker = None
    if finite and track < steps and measure == "both":
        reset_peak_rss()
    for step in range(track, steps if finite else track):
        if budget_s is not None and time.perf_counter() - started > budget_s:
            break
        if not run(step, None):
            break
    timed, timed_cpu = seconds[track:] or seconds, cpu[track:] or cpu
    # the device's peaks over every step, the model at rest included (they were reset after it was set up)
    cuda_peak = torch.cuda.max_memory_allocated(device) if cuda else None
    cuda_reserved = torch.cuda.max_memory_reserved(device) if cuda else None
    if measure == "process" and len(seconds) > settings.track_steps:  # the same steps as a tracked run times
        timed, timed_cpu = seconds[settings.track_steps:], cpu[settings.track_steps:]
    result = {
        "mode": mode.name, "label": mode.label, "lr": _lr(mode, settings), "steps": len(losses),
        "losses": losses, "final_loss": losses[-1] if losses else None, "step_seconds": seconds,
        "step_cpu_seconds": cpu, "timed_steps": len(timed), "timed_with_tracker": bool(track) and not seconds[track:],
        "it_per_s": 1.0 / statistics.median(timed) if timed else None,
        "it_per_cpu_s": 1.0 / statistics.median(timed_cpu) if timed_cpu and statistics.median(timed_cpu) else None,
        "trainable_parameters": sum(p.numel() for p in params), "weights_digest": weights_digest(model),
        "rss_built_bytes": built["rss"], "load_peak_rss_bytes": built["peak"], "rss_after_step_bytes": rss_after,
        "peak_rss_bytes": rss()["peak"],
    }
    if tracker is not None:
        result.update(peak_bytes=tracker.peak_bytes, peak_split=tracker.peak_split,
                      weights_bytes=tracker.at_rest["weights"])
    if state is not None:
        result["zip_storage"] = state.storage_report()
    if cuda:
        result["cuda_max_allocated_bytes"] = cuda_peak
        result["reserved_bytes"] = cuda_reserved
    if state is not None:
        state.close()
    del model, opt, params, state, tracker
    if cuda:
        torch.cuda.empty_cache()
    return result


def _lr(mode, settings) -> float:

    return mode_lr(mode.name, settings)


def run_mode(ref: str, mode: str, settings: dict, batches: list, measure: str, threads: int = 0,
             budget_s: float | None = None, progress=None) -> dict:
    """One mode of a run, as a fresh process runs it (:func:`core.neuzip.training.train_modes`): ``settings`` as
    :class:`core.neuzip.training.TrainSettings` fields, ``batches`` as nested lists of token ids."""

    if threads:
        torch.set_num_threads(int(threads))
    settings = TrainSettings(**settings)
    source = ModelSource(ref, settings.seed)
    return train_mode(source, MODES[mode], torch.tensor(batches, dtype=torch.long), settings, progress, budget_s,
                      measure)
