"""What a NeuZip-compressed model holds: :func:`memory_report` counts the bytes (compressed weights, other weights, the
decode buffers and workspace), :func:`device_memory` measures a model on a CUDA device in bf16 and compressed."""
from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.codec import decode_workspace_bytes
from core.neuzip.modules import SKIP, CompressedLinear, compress_model, compressed_tensors

__all__ = ["memory_report", "device_memory", "require_cuda"]


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
    (``torch.cuda.max_memory_allocated`` above the loaded model). Returns bytes: ``bf16`` / ``compressed``
    ``{loaded, forward_peak}``, ``linear_bf16_bytes`` and ``linear_resident_bytes`` (the compressed arrays on the
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
        before = torch.cuda.memory_allocated(device)
        copy_of.to(device)
        torch.cuda.synchronize(device)
        loaded = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.inference_mode():
            logits = copy_of(ids).logits.float()
        torch.cuda.synchronize(device)
        return {"loaded": loaded - before, "forward_peak": torch.cuda.max_memory_allocated(device) - loaded}, logits

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
