"""Measurements behind the NeuZip views: bit-field histograms, a compression table, throughput.

Every function takes a *source*: an ``nn.Module`` (its named parameters) or a state dict
(``{name: tensor}``). By default only floating tensors with at least two dimensions (weight
matrices) are measured; pass ``select(name, tensor) -> bool`` to choose others. Values are looked
at as bf16 (others are converted, and the result says so in ``note``). Long loops take an optional
:data:`core.progress.Progress` (``progress(fraction, message)``), called before each tensor; raising from it cancels.
"""
from __future__ import annotations

import importlib.util
import time
import warnings
import zlib
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.codec import bf16_exact, check_params, compress, split_fields, to_bf16
from core.progress import Progress, item_progress

__all__ = ["entropy_bits", "bitfield_histograms", "compression_table", "throughput", "zstd_available"]

Selector = Callable[[str, torch.Tensor], bool]


def zstd_available() -> bool:
    """True when the optional ``zstandard`` package imports (it is used for one column only)."""
    return importlib.util.find_spec("zstandard") is not None


def entropy_bits(counts: np.ndarray) -> float:
    """Shannon entropy in bits of a histogram ``counts (S,)``; 0 for an empty one."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(-(p * np.log2(p)).sum())


def _tensors(source: nn.Module | dict, select: Selector | None) -> list[tuple[str, torch.Tensor]]:
    if isinstance(source, nn.Module):
        items: Iterable = source.named_parameters()
    elif isinstance(source, dict):
        items = source.items()
    else:
        raise BadInputError(f"expected a model or a state dict, got {type(source).__name__}.")
    pick = select or (lambda name, t: t.dim() >= 2)
    chosen, seen = [], set()
    for n, t in items:
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and pick(n, t)):
            continue
        key = (t.device, t.data_ptr(), tuple(t.shape), t.stride())
        if key in seen:  # tied weights (e.g. lm_head = embed_tokens) count once
            continue
        seen.add(key)
        chosen.append((n, t.detach()))
    if not chosen:
        raise BadInputError("no floating-point weight tensors to measure.",
                            fix="pass a model or state dict with weight matrices, or a wider select=")
    return chosen


def _conversion_note(dtypes: set[str], exact: bool) -> str | None:
    dtypes = dtypes - {"bfloat16"}
    if not dtypes:
        return None
    how = ("exact here: every value was already a bfloat16 value" if exact
           else "lossy: some values changed")
    return f"{', '.join(sorted(dtypes))} weights were converted to bfloat16 for this measurement ({how})"


def bitfield_histograms(source: nn.Module | dict, select: Selector | None = None,
                        progress: Progress | None = None) -> dict:
    """Histograms of the sign, exponent and mantissa fields of all selected weights (as bf16).

    Returns
    -------
    dict with ``sign (2,)``, ``exponent (256,)``, ``mantissa (128,)`` counts (lists of ints),
    ``entropy`` (bits per field: sign, exponent, mantissa), ``numel``, ``tensors`` (names) and
    ``note`` (a dtype conversion, or None).
    """
    sign = np.zeros(2, np.int64)
    exponent = np.zeros(256, np.int64)
    mantissa = np.zeros(128, np.int64)
    names, dtypes, exact = [], set(), True
    chosen = _tensors(source, select)
    step = item_progress(progress, "histograms")
    for i, (name, t) in enumerate(chosen):
        if step:
            step(i, len(chosen), name)
        dtypes.add(str(t.dtype).removeprefix("torch."))
        x = t.reshape(-1).to(torch.bfloat16).cpu()
        exact = exact and (t.dtype == torch.bfloat16 or bf16_exact(t.reshape(-1).cpu(), x))
        bits = x.view(torch.int16).to(torch.int32) & 0xFFFF
        sign += np.bincount((bits >> 15).numpy(), minlength=2)
        exponent += np.bincount(((bits >> 7) & 0xFF).numpy(), minlength=256)
        mantissa += np.bincount((bits & 0x7F).numpy(), minlength=128)
        names.append(name)
    return {"sign": sign.tolist(), "exponent": exponent.tolist(), "mantissa": mantissa.tolist(),
            "entropy": {"sign": entropy_bits(sign), "exponent": entropy_bits(exponent),
                        "mantissa": entropy_bits(mantissa)},
            "numel": int(sign.sum()), "tensors": names, "note": _conversion_note(dtypes, exact)}


def _zstd_bits(raw: bytes, level: int) -> float | None:
    if not zstd_available():
        return None
    import zstandard

    return 8.0 * len(zstandard.ZstdCompressor(level=level).compress(raw))


def compression_table(source: nn.Module | dict, mantissa_bits: int = 7, block_size: int | None = None,
                      select: Selector | None = None, zlib_level: int = 6, zstd_level: int = 3,
                      progress: Progress | None = None) -> dict:
    """Bits per weight achieved by NeuZip per tensor and in total, against bounds and generic coders.

    Returns
    -------
    dict with ``rows``: one dict per tensor (``name``, ``shape``, ``numel``, ``bits_per_weight``
    (every stored byte), ``entropy_bound`` (empirical exponent entropy + 1 + k, plus 8 / B with a
    normaliser), ``exponent_entropy``, ``zlib_bits_per_weight`` and ``zstd_bits_per_weight`` on the
    raw bf16 bytes (the latter None when ``zstandard`` is not installed)), ``total`` (the same
    columns, weighted by ``numel``), ``mantissa_bits``, ``block_size``, ``zstd_available`` and
    ``note``.
    """
    check_params(mantissa_bits, block_size)
    mantissa_bits, block_size = int(mantissa_bits), None if block_size is None else int(block_size)
    rows, dtypes, exact = [], set(), True
    chosen = _tensors(source, select)
    step = item_progress(progress, "table")
    for i, (name, t) in enumerate(chosen):
        if step:
            step(i, len(chosen), name)
        dtypes.add(str(t.dtype).removeprefix("torch."))
        x, note = to_bf16(t.cpu())
        exact = exact and (note is None or "nothing was lost" in note)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ct = compress(x, mantissa_bits, block_size)
        n = x.numel()
        # the bound is about the exponents actually coded (after rounding and normalising)
        h = entropy_bits(np.bincount(split_fields(x, mantissa_bits, block_size)[0].numpy(), minlength=256))
        bound = h + 1 + mantissa_bits + (8.0 / block_size if block_size else 0.0)
        raw = x.view(torch.int16).numpy().tobytes()
        zs = _zstd_bits(raw, zstd_level)
        rows.append({"name": name, "shape": list(t.shape), "numel": n,
                     "bits_per_weight": ct.bits_per_weight, "entropy_bound": bound,
                     "exponent_entropy": h,
                     "zlib_bits_per_weight": 8.0 * len(zlib.compress(raw, zlib_level)) / n,
                     "zstd_bits_per_weight": None if zs is None else zs / n})
    total_n = sum(r["numel"] for r in rows)

    def wavg(key: str) -> float | None:
        if any(r[key] is None for r in rows):
            return None
        return sum(r[key] * r["numel"] for r in rows) / total_n

    total = {"name": "total", "numel": total_n,
             **{k: wavg(k) for k in ("bits_per_weight", "entropy_bound", "exponent_entropy",
                                     "zlib_bits_per_weight", "zstd_bits_per_weight")}}
    return {"rows": rows, "total": total, "mantissa_bits": mantissa_bits, "block_size": block_size,
            "zstd_available": zstd_available(), "note": _conversion_note(dtypes, exact)}


def _best_seconds(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def throughput(tensor: torch.Tensor, mantissa_bits: int = 7, block_size: int | None = None,
               repeats: int = 3) -> dict:
    """Compress / decompress speed on this machine against a plain copy of the same bytes.

    Parameters
    ----------
    tensor : (...) floating tensor (measured as bf16)
    repeats : best of this many runs for each figure

    Returns
    -------
    dict with ``bytes`` (bf16 input size), ``compress_MBps``, ``decompress_MBps``, ``memcpy_MBps``
    (MB = 1e6 bytes of bf16 input), ``decompress_vs_memcpy`` (time ratio), ``bits_per_weight`` and
    ``device``.
    """
    check_params(mantissa_bits, block_size)
    mantissa_bits, block_size = int(mantissa_bits), None if block_size is None else int(block_size)
    x, note = to_bf16(tensor)
    nbytes = 2 * x.numel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ct = compress(x, mantissa_bits, block_size)
        t_comp = _best_seconds(lambda: compress(x, mantissa_bits, block_size), repeats)
    out = torch.empty_like(x)
    t_dec = _best_seconds(lambda: ct.decompress(out=out), repeats)
    t_copy = _best_seconds(lambda: out.copy_(x), repeats)
    return {"bytes": nbytes, "compress_MBps": nbytes / t_comp / 1e6, "decompress_MBps": nbytes / t_dec / 1e6,
            "memcpy_MBps": nbytes / t_copy / 1e6, "decompress_vs_memcpy": t_dec / t_copy,
            "bits_per_weight": ct.bits_per_weight, "device": str(x.device), "note": note}
