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
the loss of every step, the peak of live tensor bytes split into weights / gradients / optimizer state / activations
(:class:`core.neuzip.memtrack.MemoryTracker`, over the first ``track_steps`` steps), the process's peak RSS, and
iterations per second (the median step time of the steps after those, run without the tracker), both by the wall
clock and by the CPU time the process spent (``time.process_time``: what a step costs whatever else the machine runs;
on a shared machine the wall clock measures the load as much as the mode). Every mode uses the
same recipe: bf16 weights, every decoder layer checkpointed (its forward recomputed in the backward), the
cross-entropy computed ``loss_chunk`` tokens at a time (the logits of one slice exist at once), a constant learning
rate, no gradient clipping.

Models (:func:`build_model`): a registered causal LM (e.g. ``smollm2-135m``), a local folder, a Mix-LN run
(``mixln:pre-ln``), or a Llama configuration with random weights from :data:`RANDOM_MODELS` (``llama-1b``: the shapes of
Llama-3.2-1B; ``llama3-8b``; ``tiny-llama``), optionally cut to ``layers`` decoder layers (e.g. a few 8B-shaped
layers on a GPU). Text: the paragraphs of the Mix-LN corpora (Wikipedia, OpenWebText, Python docs; train split),
tokenized with the model's tokenizer, else with the Mix-LN BPE (4,096 ids), packed into blocks of ``seq`` tokens and
drawn in a seeded order.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError, Cancelled
from core.neuzip import published as _published
from core.neuzip.lomo import attach_lomo, weights_digest, zip_linears
from core.neuzip.memtrack import MemoryTracker, reset_peak_rss, rss, tag_parameter_gradients, trim_heap
from core.progress import report

__all__ = ["TrainingMode", "MODES", "RANDOM_MODELS", "PAPER_TABLE1", "PAPER_SOURCE", "TrainSettings", "build_model",
           "training_batches", "train_modes", "decoder_layers", "lm_loss", "mode_lr", "check_modes"]


@dataclass(frozen=True)
class TrainingMode:
    """One way to train. ``weights``: how the weights are stored (``bf16``, ``neuzip``, or a bitsandbytes format
    ``int8`` / ``nf4`` / ``fp4``); ``update``: ``sgd``, ``adamw``, ``lomo`` (fused into the backward) or ``lora``
    (AdamW on LoRA adapters over frozen weights); ``defaults``: the learning rate and the mode's own options."""

    name: str
    label: str
    colour: str
    weights: str
    update: str
    defaults: dict = field(default_factory=dict)
    description: str = ""

    @property
    def needs_bnb(self) -> bool:
        return self.weights in ("int8", "nf4", "fp4")

    @property
    def same_training_as(self) -> str | None:
        """The mode whose training this one must reproduce bit for bit (lossless compression changes nothing)."""
        return "lomo" if self.name == "lomo+neuzip" else None


SGD_LR = 0.01  # vanilla / LOMO / LOMO + NeuZip: one SGD rate, so their curves can be compared step for step
_LORA = {"lr": 1e-3, "rank": 8, "alpha": 16.0}
MODES: dict[str, TrainingMode] = {m.name: m for m in (
    TrainingMode("vanilla", "Vanilla (SGD)", "#000000", "bf16", "sgd", {"lr": SGD_LR},
                 "bf16 weights and gradients, torch.optim.SGD after the backward"),
    TrainingMode("vanilla-adamw", "Vanilla AdamW", "#999999", "bf16", "adamw", {"lr": 3e-4},
                 "bf16 weights and gradients, AdamW (two bf16 states per weight); reference"),
    TrainingMode("lomo", "LOMO", "#E69F00", "bf16", "lomo", {"lr": SGD_LR},
                 "bf16 weights; each gradient applied (fp32 update) in the backward and freed"),
    TrainingMode("lomo+neuzip", "LOMO + NeuZip", "#0072B2", "neuzip", "lomo", {"lr": SGD_LR},
                 "linear weights entropy-coded at rest (lossless), decompressed per layer, updated, recompressed"),
    TrainingMode("qlora-int8", "QLoRA INT8", "#D55E00", "int8", "lora", dict(_LORA),
                 "frozen INT8 weights (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    # 4-bit: the block scales float32 ("-single") or quantized again to 8 bits (QLoRA's double quantization, the
    # NeuZip paper's NF4² / FP4² rows); qlora-nf4 and qlora-fp4 have always been the double-quantized ones
    TrainingMode("qlora-fp4-single", "QLoRA FP4", "#56B4E9", "fp4", "lora", dict(_LORA, double_quant=False),
                 "frozen FP4 weights, float32 block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-fp4", "QLoRA FP4²", "#009E73", "fp4", "lora", dict(_LORA, double_quant=True),
                 "frozen FP4 weights, double-quantized block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-nf4-single", "QLoRA NF4", "#A6761D", "nf4", "lora", dict(_LORA, double_quant=False),
                 "frozen NF4 weights, float32 block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-nf4", "QLoRA NF4²", "#CC79A7", "nf4", "lora", dict(_LORA, double_quant=True),
                 "frozen NF4 weights, double-quantized block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
)}

# NeuZip paper, Table 1 (pre-training decoder-only models, one GPU), whole: read from the paper's text by
# core.neuzip.published (which holds Table 2 too); one row per model and mode, "note" says which run did not fit
PAPER_TABLE1 = tuple({"model": r["model"], "mode": r["mode"], "memory_GiB": r["memory_GiB"], "it_per_s": r["it_per_s"],
                      "loss": r["score"], **({"note": "out of memory"} if r["oom"] else {})} for r in _published.TABLE1)
PAPER_SOURCE = _published.TABLE1_SOURCE

# Llama configurations trained from random weights (transformers' LlamaConfig keywords)
_LLAMA3 = dict(vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192, rms_norm_eps=1e-5)
RANDOM_MODELS: dict[str, dict] = {
    "tiny-llama": dict(vocab_size=4096, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                       max_position_embeddings=1024),
    "llama-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=True),  # Llama-3.2-1B's shapes: 1.24 B parameters
    "llama3-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),  # 8.03 B
}


@dataclass(frozen=True)
class TrainSettings:
    """The recipe every mode of one run shares."""

    steps: int = 8
    batch: int = 1
    seq: int = 64
    seed: int = 0
    lr: dict = field(default_factory=dict)  # mode -> learning rate (default: the mode's)
    checkpointing: bool = True
    loss_chunk: int = 128  # tokens whose logits exist at once (0: all)
    track_steps: int = 2
    device: str = "cpu"
    layers: int | None = None  # cut the model to this many decoder layers
    budget_s: float | None = None  # stop each mode after budget_s / modes seconds (its steps so far count)
    compress_threads: int = 0  # lomo+neuzip: 1 compresses each updated weight in a background thread


def mode_lr(mode: str, settings: TrainSettings) -> float:
    return float(settings.lr.get(mode, MODES[mode].defaults["lr"]))


# ---- models -------------------------------------------------------------------------------------------------------
def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers: the ``nn.ModuleList`` holding the most parameters."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise BadInputError("this model has no stack of layers (nn.ModuleList) to train layer by layer.",
                            fix="pick a transformer causal LM")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _cut(model: nn.Module, layers: int | None) -> nn.Module:
    if layers is None:
        return model
    stack = decoder_layers(model)
    if not 1 <= layers <= len(stack):
        raise BadInputError(f"layers={layers}: the model has {len(stack)} decoder layers.",
                            fix=f"use 1 to {len(stack)}")
    del stack[layers:]
    config = getattr(model, "config", None)
    for attr in ("num_hidden_layers", "num_layers"):
        if config is not None and hasattr(config, attr):
            setattr(config, attr, layers)
    return model


class _Source:
    """Builds fresh bf16 copies of one model (the same weights each time) and says what it is."""

    def __init__(self, ref: str, seed: int):
        self.ref, self.seed = ref, seed
        self.tokenizer = None
        self.loaded = None
        if ref in RANDOM_MODELS:
            self.label = f"{ref} (Llama configuration, random weights)"
        elif ref.startswith("mixln:"):
            from core.paths import ASSETS_DIR

            folder = ASSETS_DIR / "mixln" / ref.split(":", 1)[1]
            if not (folder / "config.json").is_file():
                raise BadInputError(f"no Mix-LN run {ref!r}.",
                                    fix="use mixln:pre-ln, mixln:post-ln, mixln:mix-ln-0.25, ...")
            self.folder, self.label = folder, f"{ref} (this project's Mix-LN run)"
        else:
            from core.zoo import load_model

            self.loaded = load_model(ref)
            self.tokenizer = self.loaded.tokenizer
            self.label = ref

    def build(self, layers: int | None = None, meta: bool = False) -> nn.Module:
        """A fresh bf16 copy; ``meta``: on the meta device (its shapes only; random configurations)."""
        torch.manual_seed(self.seed)
        if self.ref in RANDOM_MODELS:
            from transformers import LlamaConfig, LlamaForCausalLM

            cfg = dict(RANDOM_MODELS[self.ref])
            if layers is not None:
                cfg["num_hidden_layers"] = layers
                layers = None
            config = LlamaConfig(**cfg, attention_bias=False, mlp_bias=False)
            config._attn_implementation = "sdpa"
            default = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16)  # initialised in bf16: no float32 copy of a 1-8 B model
            try:
                with torch.device("meta") if meta else contextlib.nullcontext():
                    model = LlamaForCausalLM(config)
            finally:
                torch.set_default_dtype(default)
        elif self.ref.startswith("mixln:"):
            from core.mixln import MixLNForCausalLM

            model = MixLNForCausalLM.from_pretrained(self.folder)
        else:
            model = copy.deepcopy(self.loaded.model)
        model = _cut(model, layers).to(torch.bfloat16)
        for p in model.parameters():
            p.requires_grad_(True)
        return model

    def vocab(self, model: nn.Module) -> int:
        cfg = getattr(model, "config", None)
        return int(getattr(cfg, "vocab_size", 0) or model.get_output_embeddings().weight.shape[0])


def build_model(ref: str, seed: int = 0, layers: int | None = None) -> nn.Module:
    """A fresh bf16 copy of ``ref`` (see the module doc), every parameter trainable."""
    return _Source(ref, seed).build(layers)


# ---- data ---------------------------------------------------------------------------------------------------------
def _encode(tokenizer, texts: list[str]) -> list[int]:
    if hasattr(tokenizer, "encode_batch"):  # a tokenizers.Tokenizer (the Mix-LN BPE)
        eos = tokenizer.token_to_id("<|endoftext|>")
        ids = []
        for enc in tokenizer.encode_batch(texts):
            ids.extend(enc.ids + ([eos] if eos is not None else []))
        return ids
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = []
    for row in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(list(row) + ([eos] if eos is not None else []))
    return ids


def training_batches(tokenizer, vocab: int, steps: int, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """``(steps, batch, seq)`` token ids: the train paragraphs of the Mix-LN corpora, tokenized, packed into blocks of
    ``seq`` and drawn in a seeded order (the same for every mode). ``tokenizer`` None: the Mix-LN BPE (4,096 ids)."""
    from core.mixln.data import corpus_texts

    if tokenizer is None:
        from core.mixln.data import load_tokenizer
        from core.paths import ASSETS_DIR

        tokenizer = load_tokenizer(ASSETS_DIR / "mixln" / "tokenizer.json")
        if vocab < tokenizer.get_vocab_size():
            raise BadInputError(f"the model has {vocab} token ids and no tokenizer; the Mix-LN BPE needs 4,096.",
                                fix="pick a model with a tokenizer or a vocabulary of at least 4,096")
    need = steps * batch * seq
    texts, ids, at = corpus_texts("train"), [], 0
    while len(ids) < 2 * need and at < len(texts):  # twice what is needed, so the seeded draw has a choice
        ids.extend(_encode(tokenizer, texts[at:at + 64]))
        at += 64
    blocks = torch.tensor(ids[:len(ids) // seq * seq], dtype=torch.long).view(-1, seq)
    if len(blocks) < steps * batch:
        raise BadInputError(f"the corpus gives {len(blocks)} blocks of {seq} tokens; {steps * batch} are needed.",
                            fix="fewer steps, a smaller batch or shorter sequences")
    if int(blocks.max()) >= vocab:
        raise BadInputError(f"the tokenizer's ids reach {int(blocks.max())}, the model has {vocab}.")
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed))[:steps * batch]
    return blocks[order].view(steps, batch, seq)


# ---- one step -----------------------------------------------------------------------------------------------------
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


class _LinearCrossEntropy(torch.autograd.Function):
    """``sum_i CE(h_i W^T + b, t_i)`` over the rows of ``h`` (N, D), ``chunk`` rows at a time: the logits of one
    chunk exist at once (float32), and the gradients of ``h``, ``W`` and ``b`` are made in the same pass (softmax
    minus one-hot, times ``W`` and ``h``), kept until the backward scales them by the upstream gradient. One
    contiguous weight gradient, summed over the chunks in place (a tied embedding then adds its own in place too)."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk):
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
                grad_w.addmm_(g.t(), hc)
            if grad_b is not None:
                grad_b += g.sum(0)
        ctx.grads = [grad_h, grad_w, grad_b]
        return total

    @staticmethod
    def backward(ctx, upstream):
        grads, ctx.grads = ctx.grads, None
        for g in grads:
            if g is not None:
                g.mul_(upstream)
        return grads[0], grads[1], grads[2], None, None


def lm_loss(model: nn.Module, ids: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """Mean next-token cross-entropy of ``ids`` (B, T), the logits ``chunk`` tokens at a time (0: all at once) by
    :class:`_LinearCrossEntropy`."""
    name, head = _head(model)
    if not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise BadInputError("the model's LM head has no weight matrix.", fix="pick a causal LM with a linear head")
    setattr(model, name, nn.Identity())  # the model's forward returns the last hidden states
    try:
        out = model(input_ids=ids, use_cache=False) if hasattr(model, "generation_config") else model(ids)
    finally:
        setattr(model, name, head)
    hidden = (out.logits if hasattr(out, "logits") else out[0])[:, :-1]
    hidden = hidden.reshape(-1, hidden.shape[-1])
    targets = ids[:, 1:].reshape(-1)
    n = targets.numel()
    return _LinearCrossEntropy.apply(hidden, head.weight, getattr(head, "bias", None), targets, chunk or n) / n


# ---- one mode -----------------------------------------------------------------------------------------------------
def _prepare(model: nn.Module, mode: TrainingMode, settings: TrainSettings, current: dict):
    """Set ``model`` up for ``mode`` (in place); returns ``(optimizer or None, trainable parameters, zip state)``.
    ``current["tracker"]`` is the memory tracker while one measures (the hooks read it)."""
    lr = mode_lr(mode.name, settings)
    state = None
    if mode.weights == "neuzip":
        state = zip_linears(model, lr, tracker=current.get("tracker"), threads=settings.compress_threads)
    if mode.update == "lora":
        from core.neuzip.qlora import quantize_linears

        d = mode.defaults
        params = quantize_linears(model, mode.weights, d["rank"], d["alpha"], settings.seed,
                                  double_quant=d.get("double_quant", True))
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    else:
        params = list({id(p): p for p in model.parameters() if p.requires_grad and p.numel()}.values())
        opt = None if mode.update == "lomo" else torch.optim.SGD(params, lr=lr) if mode.update == "sgd" else \
            torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if mode.update == "lomo":
        attach_lomo(params, lr, tracker=lambda: current.get("tracker"))
    else:  # the summed gradient in .grad counts as a gradient
        def seen(p):
            if current.get("tracker") is not None:
                current["tracker"].mark_gradient(p.grad)
        for p in params:
            p.register_post_accumulate_grad_hook(seen)
    return opt, params, state


def _step(model, ids, opt, params, settings: TrainSettings, tracker=None, state=None) -> float:
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


def train_mode(source: _Source, mode: TrainingMode, batches: torch.Tensor, settings: TrainSettings,
               progress=None, budget_s: float | None = None) -> dict:
    """Train a fresh copy of the model in ``mode`` on ``batches`` (steps, B, T); the measurements as a dict.

    The memory tracker (the profiler) runs from before the model is built to the end of the first ``track_steps``
    steps; the steps after those run without it and give the speed and the peak RSS (with fewer steps, both come
    from the tracked steps and say so). ``track_steps = 0`` measures no memory (``peak_bytes`` None)."""
    device = torch.device(settings.device)
    cuda = device.type == "cuda"
    steps, track = len(batches), min(settings.track_steps, len(batches))
    losses, seconds, cpu, current = [], [], [], {}
    tracker = MemoryTracker(device) if track else None
    started = time.perf_counter()
    if tracker is not None:
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
        return math.isfinite(value)

    with tracker if tracker is not None else contextlib.nullcontext():
        current["tracker"] = tracker
        model = source.build(settings.layers).to(device)
        model.train()
        if settings.checkpointing:
            checkpoint_layers(model)
        opt, params, state = _prepare(model, mode, settings, current)
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        if tracker is not None:
            gc.collect()
            reset_peak_rss()
            tracker.begin()
        rss_start = rss()["rss"]
        finite = all(run(step, tracker) for step in range(track))
        if tracker is not None:
            tracker.end()
        current["tracker"] = None
        if state is not None:
            state.tracker = None
    cuda_peak = torch.cuda.max_memory_allocated(device) if cuda else None
    if finite and track < steps:
        reset_peak_rss()
    for step in range(track, steps if finite else track):
        if budget_s is not None and time.perf_counter() - started > budget_s:
            break
        if not run(step, None):
            break
    timed, timed_cpu = seconds[track:] or seconds, cpu[track:] or cpu
    result = {
        "mode": mode.name, "label": mode.label, "lr": mode_lr(mode.name, settings), "steps": len(losses),
        "losses": losses, "final_loss": losses[-1] if losses else None, "step_seconds": seconds,
        "step_cpu_seconds": cpu, "timed_steps": len(timed), "timed_with_tracker": bool(track) and not seconds[track:],
        "it_per_s": 1.0 / statistics.median(timed) if timed else None,
        "it_per_cpu_s": 1.0 / statistics.median(timed_cpu) if timed_cpu and statistics.median(timed_cpu) else None,
        "peak_bytes": tracker.peak_bytes if tracker else None, "peak_split": tracker.peak_split if tracker else None,
        "weights_bytes": tracker.at_rest["weights"] if tracker else None,
        "trainable_parameters": sum(p.numel() for p in params), "rss_start_bytes": rss_start,
        "peak_rss_bytes": rss()["peak"], "weights_digest": weights_digest(model),
    }
    if cuda:
        result["cuda_max_allocated_bytes"] = cuda_peak
    if state is not None:
        state.close()
    del model, opt, params, state, tracker
    if cuda:
        torch.cuda.empty_cache()
    return result


# ---- a run: every mode --------------------------------------------------------------------------------------------
def check_modes(modes) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(str(m).strip() for m in ([modes] if isinstance(modes, str) else modes)))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise BadInputError(f"unknown training mode(s): {', '.join(unknown) or 'none given'}.",
                            fix="use " + ", ".join(MODES))
    return modes


def train_modes(ref: str, modes=tuple(MODES), settings: TrainSettings = TrainSettings(), progress=None,
                batches: torch.Tensor | None = None) -> dict:
    """Train ``ref`` in each of ``modes`` from the same weights on the same batches; the run and per mode its
    losses, memory and speed (see the module doc). Modes that cannot run here (bitsandbytes) are listed with the
    reason under ``skipped``. A stop (:class:`Cancelled`) keeps the modes finished in its ``partial``.
    ``batches``: token ids ``(steps, batch, seq)`` to train on instead of the corpus (tests)."""
    modes = check_modes(modes)
    started = time.time()
    report(progress, 0.0, f"loading {ref}")
    source = _Source(ref, settings.seed)
    probe = source.build(settings.layers, meta=True)  # the shapes (a random configuration is not initialised)
    vocab, n_params = source.vocab(probe), sum(p.numel() for p in {id(p): p for p in probe.parameters()}.values())
    from core.neuzip.modules import linear_layers

    n_linear = sum(m.weight.numel() for _, m in linear_layers(probe))
    n_layers = len(decoder_layers(probe))
    del probe
    if batches is None:
        batches = training_batches(source.tokenizer, vocab, settings.steps, settings.batch, settings.seq, settings.seed)
    run = {"model": ref, "model_label": source.label, "parameters": n_params, "linear_parameters": n_linear,
           "decoder_layers": n_layers, "vocab": vocab, "device": settings.device, "threads": torch.get_num_threads(),
           "settings": {"steps": settings.steps, "batch": settings.batch, "seq": settings.seq, "seed": settings.seed,
                        "lr": {m: mode_lr(m, settings) for m in modes}, "checkpointing": settings.checkpointing,
                        "loss_chunk": settings.loss_chunk, "track_steps": settings.track_steps,
                        "layers": settings.layers, "budget_s": settings.budget_s,
                        "compress_threads": settings.compress_threads,
                        "data": "train paragraphs of wikipedia-paragraphs, openwebtext-paragraphs, pydoc-topics; "
                                + ("the model's tokenizer" if source.tokenizer is not None else "the Mix-LN BPE")},
           "machine": _machine(settings.device), "load_average_start": _load(), "modes": [], "skipped": {}}
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
            run["modes"].append(train_mode(source, MODES[m], batches, settings, sub, per_mode))
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


def _machine(device: str) -> dict:
    out = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
           "processor": platform.processor() or platform.machine()}
    if torch.device(device).type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out
