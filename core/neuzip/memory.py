"""What a NeuZip-compressed model holds: :func:`memory_report` counts the bytes (compressed weights, other weights, the
decode buffers and workspace), :func:`device_memory` measures a model on a CUDA device in bf16 and compressed, and
:func:`inference_memory` measures what a process holds with the model loaded in a form and after a forward (run in a
fresh process: the machine's view beside the tensor figure)."""
from __future__ import annotations

import copy
import gc
import warnings

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.codec import check_params, decode_workspace_bytes
from core.neuzip.modules import SKIP, CompressedLinear, compress_model, compressed_tensors

__all__ = ["memory_report", "device_memory", "require_cuda", "inference_memory", "process_points", "FORMS"]


def memory_report(model: nn.Module) -> dict[str, int]:
    """Weight memory of a (compressed or plain) model, in bytes.

    Returns
    -------
    dict with ``compressed_weight_bytes`` (every stored byte of the compressed weights),
    ``other_bytes`` (parameters and buffers stored as tensors, counted once even when shared),
    ``resident_bytes`` (their sum), ``buffer_bytes`` (the shared bf16 decompression buffers: 2 bytes
    times the largest compressed weight, times ``1 + decode_ahead``), ``decode_workspace_bytes``
    (upper bound on the CPU decode temporaries of that weight,
    :func:`core.neuzip.codec.decode_workspace_bytes`; twice that with decoding ahead, when the
    calling thread and the decode thread may both decode), ``decode_ahead``,
    ``peak_transient_bytes`` (buffer + workspace) and ``peak_bytes`` (resident + transient).
    Activations are not counted, nor the cast copy of the weight that a forward makes when the
    inputs are not bf16.
    """
    seen, other = set(), 0
    compressed_arrays = {id(t) for m in model.modules() if isinstance(m, CompressedLinear)
                         for _, t in m.arrays().items() if t is not None}
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen or id(t) in compressed_arrays:
            continue
        seen.add(t.data_ptr())
        other += t.numel() * t.element_size()
    comp = compressed_tensors(model)
    compressed = sum(c.nbytes for c in comp.values())
    largest = max((c.numel for c in comp.values()), default=0)
    buf = getattr(model, "_neuzip_buffer", None)
    ahead = buf.ahead if buf is not None else 0
    buffer = 2 * largest * (1 + ahead)
    chunk = max((c.exponents.chunk_size for c in comp.values()), default=0)
    workspace = decode_workspace_bytes(largest, chunk) * (2 if ahead else 1) if largest else 0
    return {"compressed_weight_bytes": compressed, "other_bytes": other, "decode_ahead": ahead,
            "resident_bytes": compressed + other, "buffer_bytes": buffer, "decode_workspace_bytes": workspace,
            "peak_transient_bytes": buffer + workspace, "peak_bytes": compressed + other + buffer + workspace}


def cuda_present() -> bool:
    """Whether this host has a CUDA device torch can use (the NeuZip tab shows its GPU-memory measurement only then)."""
    return torch.cuda.is_available()


def require_cuda(device: torch.device | str) -> torch.device:
    """``device`` as a ``torch.device`` when it is a CUDA device torch can use, else a :class:`BadInputError`."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadInputError(f"{device!r} is not a device.", fix="use cuda or cuda:N") from None
    if device.type != "cuda" or not torch.cuda.is_available():
        raise BadInputError(f"the device memory of a compressed model is measured on a CUDA device; {device} is not "
                            "one torch can use here.", fix="run it on a GPU host (python -m core neuzip device-memory)")
    return device


def device_memory(model: nn.Module, device: torch.device | str = "cuda", mantissa_bits: int = 7,
                  block_size: int | None = None, tokens: int = 512, skip: tuple[str, ...] = SKIP) -> dict:
    """What a model holds on a CUDA ``device`` in bf16 and NeuZip-compressed, measured there.

    ``model`` (any causal LM, left unchanged) is copied twice: once as bf16 and once with its linear layers
    compressed (:func:`compress_model`); each copy is moved to ``device`` alone, and ``torch.cuda.memory_allocated``
    before and after gives what it holds; then the peak of one no-grad forward of ``tokens`` random ids
    (``torch.cuda.max_memory_allocated`` above the loaded model), and beside each what the caching allocator reserved
    (``memory_reserved`` after the load, ``max_memory_reserved`` over the forward, both above what it held before: what
    the device gives the process). Returns bytes: ``bf16`` / ``compressed``
    ``{loaded, forward_peak, loaded_reserved, forward_peak_reserved}``, ``linear_bf16_bytes`` and ``linear_resident_bytes`` (the compressed arrays on the
    device) and their ``linear_ratio`` (lossless: about 10.6 / 16 on SmolLM2), and the logits' max abs difference.

    Raises
    ------
    BadInputError
        ``device`` is not a CUDA device torch can use.
    """
    device = require_cuda(device)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not vocab:
        raise BadInputError("the model has no config.vocab_size to draw input ids from.",
                            fix="pick a causal language model")
    ids = torch.randint(0, vocab, (1, int(tokens)), generator=torch.Generator().manual_seed(0)).to(device)

    def measure(copy_of: nn.Module) -> tuple[dict, torch.Tensor]:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        before, before_reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        copy_of.to(device)
        torch.cuda.synchronize(device)
        loaded, loaded_reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.inference_mode():
            logits = copy_of(ids).logits.float()
        torch.cuda.synchronize(device)
        return {"loaded": loaded - before, "forward_peak": torch.cuda.max_memory_allocated(device) - loaded,
                "loaded_reserved": loaded_reserved - before_reserved,  # the caching allocator's view, beside
                "forward_peak_reserved": torch.cuda.max_memory_reserved(device) - before_reserved}, logits

    dense = copy.deepcopy(model).to(torch.bfloat16).eval()
    linear_bf16 = sum(m.weight.numel() * 2 for n, m in dense.named_modules()
                      if isinstance(m, nn.Linear) and not any(x in n for x in skip))
    bf16, want = measure(dense)
    dense.cpu()
    del dense
    torch.cuda.empty_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        packed = compress_model(copy.deepcopy(model).to(torch.bfloat16).eval(), mantissa_bits, block_size, skip)
    compressed, got = measure(packed)
    resident = sum(t.numel() * t.element_size() for m in packed.modules() if isinstance(m, CompressedLinear)
                   for _, t in m.arrays().items() if t is not None)
    packed.cpu()
    del packed
    torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(device), "tokens": int(tokens), "mantissa_bits": int(mantissa_bits),
            "block_size": block_size, "bf16": bf16, "compressed": compressed, "linear_bf16_bytes": linear_bf16,
            "linear_resident_bytes": resident, "linear_ratio": resident / linear_bf16,
            "loaded_ratio": compressed["loaded"] / bf16["loaded"],
            "max_abs_logit_difference": float((got - want).abs().max())}


FORMS = ("bf16", "neuzip")  # the forms a model runs in for inference_memory


def inference_memory(ref: str, form: str = "bf16", mantissa_bits: int = 7, block_size: int | None = None,
                     tokens: int = 512, seed: int = 0, progress=None) -> dict:
    """Load ``ref`` in ``form`` (``bf16``, or ``neuzip``: its linear layers compressed with ``mantissa_bits`` /
    ``block_size``), one tensor at a time (:mod:`core.neuzip.streaming`: never the bf16 model whole for a compressed
    form), run one forward of ``tokens`` random ids (seeded) and measure, in this process (run it in a fresh one:
    :func:`core.neuzip.process.run_fresh`, job ``inference-memory``):

    - ``loaded_rss_bytes``: RSS with the model loaded (after a garbage collection and ``malloc_trim``);
    - ``idle_rss_bytes``: RSS after the forward, the same way (what the process keeps while it waits);
    - ``tensor_bytes``: what the model holds as tensors and compressed arrays (:func:`memory_report`'s
      ``resident_bytes``: the tensor figure), ``peak_bytes`` with the decode buffers;
    - ``logits_digest``: sha256 of the logits' bits (the lossless form gives the bf16 form's, bit for bit).

    ``ref``: a Hugging Face folder or registered causal LM, or a configuration of :data:`RANDOM_MODELS`."""
    import hashlib

    from core.neuzip.memtrack import rss, trim_heap
    from core.neuzip.modules import finish_compressed, linear_layers
    from core.neuzip.train_models import ModelSource
    from core.progress import report

    if form not in FORMS:
        raise BadInputError(f"form must be one of {', '.join(FORMS)}, got {form!r}.")
    check_params(mantissa_bits, block_size)
    source = ModelSource(ref, seed)
    report(progress, 0.0, f"loading {ref} ({form})")
    hook, buffer = None, None
    if form == "neuzip":
        from core.neuzip import pairs
        from core.neuzip.buffer import DecompressionBuffer
        from core.neuzip.codec import compress_reusing
        from core.neuzip.modules import CompressedLinear

        buffer, scratch = DecompressionBuffer(), pairs.EncodeScratch()

        def hook(name, layer, weight):
            return CompressedLinear(compress_reusing(weight, mantissa_bits, block_size, scratch), layer.bias, buffer)
    model = source.build(linear=hook, linears=linear_layers)
    scratch = None
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    if buffer is not None:
        finish_compressed(model, buffer)
    gc.collect()
    trim_heap()
    loaded = rss()
    held = memory_report(model)
    vocab = source.vocab(model)
    ids = torch.randint(0, vocab, (1, int(tokens)), generator=torch.Generator().manual_seed(seed))
    report(progress, 0.5, f"a forward of {tokens} tokens")
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=False).logits
    digest = hashlib.sha256(logits.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:24]
    del logits
    gc.collect()
    trim_heap()
    idle = rss()
    report(progress, 1.0, "done")
    return {"model": ref, "form": form, "mantissa_bits": mantissa_bits, "block_size": block_size, "tokens": tokens,
            "loaded_rss_bytes": loaded["rss"], "load_peak_rss_bytes": loaded["peak"], "idle_rss_bytes": idle["rss"],
            "tensor_bytes": held["resident_bytes"], "peak_bytes": held["peak_bytes"],
            "compressed_weight_bytes": held["compressed_weight_bytes"], "logits_digest": digest}


def process_points(ref: str, settings, tokens: int = 512, progress=None) -> list[dict]:
    """Each bf16 or NeuZip setting of ``settings`` (as :func:`core.neuzip.tradeoff.default_settings` gives them; the
    other formats are left out) as the machine sees it: :func:`inference_memory` in a fresh process each. Per setting:
    its ``label``, ``setting``, the process's ``idle_rss_bytes`` after the forward, ``loaded_rss_bytes``,
    ``peak_rss_bytes`` (the whole process) and the model's ``tensor_bytes``, and ``logits_digest``."""
    from core.neuzip.formats import setting_label
    from core.neuzip.process import run_fresh
    from core.progress import scaled

    chosen = [s for s in settings if s["method"] in ("bf16", "neuzip")]
    rows = []
    for i, s in enumerate(chosen):
        label = setting_label(s)
        part = scaled(progress, i / len(chosen), (i + 1) / len(chosen))
        kwargs = {"ref": ref, "form": "bf16" if s["method"] == "bf16" else "neuzip", "tokens": tokens,
                  "mantissa_bits": s.get("k", 7), "block_size": s.get("block_size")}
        r = run_fresh("inference-memory", kwargs,
                      progress=None if part is None else (lambda f, m, part=part, label=label: part(f, f"{label}: {m}")))
        rows.append({"label": label, "setting": dict(s), "idle_rss_bytes": r["idle_rss_bytes"],
                     "loaded_rss_bytes": r["loaded_rss_bytes"], "peak_rss_bytes": r["process"]["peak_rss_bytes"],
                     "tensor_bytes": r["tensor_bytes"], "logits_digest": r["logits_digest"]})
    return rows
