"""The NeuZip exponent decode fused with a matrix-vector product, for batch-1 generation: ``W @ vec`` straight from a
lossless compressed weight (each decoded exponent merged with its sign/mantissa byte and multiplied in registers;
the bf16 weight never exists in memory), beside its PyTorch twin (decode, merge, float32 product).

- :func:`fused_gemv`: the entry point callers use: the product, or None where the fused kernel does not apply or
  is not chosen on that device (the caller then decodes the weight and multiplies);
- :func:`pair_rans_gemv` dispatches (Triton on CUDA after its self-check and while opted in, the twin elsewhere);
- :func:`pair_rans_gemv_triton` / :func:`pair_rans_gemv_ref`: the kernel and its twin.

The arguments are the exponent stream's (:mod:`kernels.neuzip_rans`), then ``fields (n,) uint8`` (one sign/mantissa
byte per weight) and ``vec (in_features,)``.
"""
from __future__ import annotations

import functools

import torch

from kernels._rans_checks import check_run, check_stream_inputs
from kernels._rans_kernel import check_stream, launch
from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton
from kernels.neuzip_rans import DECODE_ROWS, pair_rans_decode_ref

__all__ = ["fused_gemv", "gemv_eligible", "pair_rans_gemv", "pair_rans_gemv_ref", "pair_rans_gemv_triton"]


def _gemv_check(n: int, fields: torch.Tensor, vec: torch.Tensor) -> tuple[int, int]:
    in_features = vec.numel()
    if in_features == 0 or in_features % 32 or n % in_features:
        raise ValueError(f"the fused GEMV needs in_features a positive multiple of 32 dividing n, got {in_features}")
    if fields.numel() != n:
        raise ValueError("the fused GEMV takes lossless weights: one sign/mantissa byte per weight (k = 7)")
    return n // in_features, in_features


def pair_rans_gemv_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
                       precision, fields, vec, *, segment=None, errors=None) -> torch.Tensor:
    """``W @ vec`` for a lossless NeuZip weight ``W`` (row-major ``(n / in_features, in_features)``, exponents as
    the stream above, sign/mantissa bytes ``fields``) and ``vec (in_features,)``: the decode, the bit merge, then
    a float32 matrix-vector product. Plain PyTorch; returns ``(n / in_features,) float32``."""
    from kernels.neuzip_bits import merge_bf16_ref

    out_features, in_features = _gemv_check(n, fields, vec)
    exponent = pair_rans_decode_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                                    chunk_size, precision, segment=segment, errors=errors)
    weight = merge_bf16_ref(exponent, fields, 7).view(out_features, in_features)
    return weight.float() @ vec.float()


@functools.lru_cache(maxsize=512)
def _row_gather(num: int, segment: int, in_features: int, out_features: int, device: torch.device) -> torch.Tensor:
    """``(out_features, K)`` indices into the flat partial sums (``num * rows_per_segment`` of them, then one zero):
    row ``r``'s entry of each segment that touches it, in segment order, and the zero where a segment does not.
    Built once per weight shape, layout and device (a few KB), not in every call: batch-1 generation calls each
    layer once a token."""
    rows_per = _rows_per_segment(segment, in_features)
    r = torch.arange(out_features, device=device, dtype=torch.int64)
    c = (r * in_features // segment)[:, None] + torch.arange((in_features - 1) // segment + 2, device=device)
    valid = (c < num) & (c * segment < (r[:, None] + 1) * in_features)
    slot = (r[:, None] - c * segment // in_features).clamp(0, rows_per - 1)
    return torch.where(valid, c.clamp(max=num - 1) * rows_per + slot, num * rows_per)


def _rows_per_segment(segment: int, in_features: int) -> int:
    """The most rows one segment of ``segment`` weights touches, rows of ``in_features``."""
    return (segment - 1) // in_features + 2


def pair_rans_gemv_triton(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                          chunk_size, precision, fields, vec, *, segment=None, errors=None,
                          block: int = DECODE_ROWS) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_gemv_ref`: the exponent decode fused with the matrix-vector product (each
    decoded weight is merged and multiplied in registers; the bf16 weight never exists in memory). Sums in float32
    in another order than the reference: equal within rounding, and the same every run (no atomics)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_gemv_ref")
    num, segment = check_stream(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size,
                                precision, segment)
    out_features, in_features = _gemv_check(n, fields, vec)
    rows_per = _rows_per_segment(segment, in_features)
    partial = torch.zeros(num * rows_per + 1, dtype=torch.float32, device=states.device)  # + the zero
    launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision),
            partial, block, segment, errors, fields, vec.float(), in_features, rows_per)
    # each row's sum of its segments' partial sums, segments in order (a gather and a sum: deterministic)
    return partial[_row_gather(num, segment, in_features, out_features, states.device)].sum(1)




def gemv_eligible(n: int, in_features: int, mantissa_bits: int, scaled: bool) -> bool:
    """Whether a weight can take the fused decode + GEMV: lossless, no normaliser, rows of a multiple of 32."""
    return mantissa_bits == 7 and not scaled and in_features > 0 and in_features % 32 == 0 and n % in_features == 0




def pair_rans_gemv(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
                   precision, fields, vec, *, segment=None, errors=None, block: int = DECODE_ROWS) -> torch.Tensor:
    """``W @ vec`` straight from the compressed weight: the fused Triton kernel on CUDA (after its self-check),
    the reference elsewhere. See :func:`pair_rans_gemv_ref`."""
    args = (states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision,
            fields, vec)
    if use_triton(states, offsets, words, slot_pair, escape_offsets, fields, vec, kernel="pair_rans_gemv"):
        return pair_rans_gemv_triton(*args, segment=segment, errors=errors, block=block)
    return pair_rans_gemv_ref(*args, segment=segment, errors=errors)


def fused_gemv(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision,
               fields, vec, *, mantissa_bits: int, scaled: bool, segment=None, errors=None,
               block: int = DECODE_ROWS) -> torch.Tensor | None:
    """``W @ vec`` as ``(n / in_features,) float32`` by the fused decode + matrix-vector kernel, or None where it does
    not apply (a lossy or normalised weight, rows not a multiple of 32) or is not chosen for these tensors (not on
    CUDA, a failed self-check, or not opted in while its ``KernelCheck`` has ``auto=False``): the caller decodes the
    weight and multiplies. The choice is made here, not by the caller."""
    vec = vec.reshape(-1)
    if not gemv_eligible(n, vec.numel(), mantissa_bits, scaled):
        return None
    vec = vec.float()
    if not use_triton(states, fields, vec, kernel="pair_rans_gemv"):
        return None
    return pair_rans_gemv_triton(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                                 chunk_size, precision, fields, vec, segment=segment, errors=errors, block=block)


def _gemv_check_inputs(device, dtype, in_features: int = 64, chunk_size: int = 96) -> tuple:
    """The decode check's stream read as a ``(n / 64, 64)`` matrix (chunks of 96 weights in segments of 32 straddle
    rows), random sign/mantissa bytes and a random vector; the last element is the segment length."""
    args = list(check_stream_inputs(device, dtype, n=704, chunk_size=chunk_size, segment=32))
    g = torch.Generator().manual_seed(1)
    fields = torch.randint(0, 256, (args[8],), generator=g, dtype=torch.uint8)
    vec = torch.randn(in_features, generator=g)
    return (*args[:-1], fields.to(device), vec.to(device), args[-1])


register_check("pair_rans_gemv", KernelCheck(
    triton=pair_rans_gemv_triton, ref=pair_rans_gemv_ref, inputs=_gemv_check_inputs, run=check_run,
    dtypes=(torch.float32,), auto=False,
    why="not yet timed on a GPU against the decode + cuBLAS it replaces (bench/gpu.py neuzip_generate): "
        "opt-in with LAYERWISE_KERNELS=triton until it is shown to win"))
