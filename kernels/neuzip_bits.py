"""Split bf16 values into an exponent byte and a packed sign/mantissa field, and merge them back.

This is the bit-level half of the NeuZip codec (Hao et al., 2024); the entropy coding of the
exponent bytes lives elsewhere. Every bf16 value ``b`` (16 bits: sign ``s``, exponent ``e``
(8 bits), mantissa ``m`` (7 bits)) becomes

- one exponent byte ``e'`` (to be entropy-coded), and
- one ``W = 1 + k`` bit field ``(s << k) | m'`` holding the sign and the top ``k`` mantissa bits,
  ``k = mantissa_bits in {0, 1, 3, 7}``.

Rounding (k < 7)
----------------
The 15-bit magnitude ``e << 7 | m`` is rounded to nearest, ties to even, on the ``D = 7 - k``
dropped bits; a carry out of the mantissa increments the exponent, so ``|x_hat - x| <= 2**-(k+1) |x|``
for every normal ``x``. Two exceptions keep that bound and keep specials special:

- a value whose rounding would carry into exponent 255 (become infinite) is truncated instead
  (the truncation error in the top binade is still within the bound);
- infinities and NaNs (exponent 255) are truncated, and a NaN keeps its top mantissa (quiet) bit
  set so it stays a NaN for ``k >= 1``. With ``k = 0`` there is no mantissa left and a NaN decodes
  as an infinity: callers must refuse NaNs for ``k = 0``.

With ``k = 7`` nothing is rounded and the split is lossless bit for bit (NaN payloads, signed zeros,
subnormals and infinities included).

Packing
-------
``P = 8 // W`` fields share one byte, little end first: value ``i`` sits in byte ``i // P`` at bit
``(i % P) * W``. ``N`` values take ``ceil(N / P)`` bytes; unused trailing fields are zero.

Public functions
----------------
- :func:`split_bf16` / :func:`merge_bf16` dispatch (Triton on CUDA, reference elsewhere),
- :func:`split_bf16_triton` / :func:`merge_bf16_triton` the Triton wrappers (CUDA, or CPU under
  ``TRITON_INTERPRET=1``),
- :func:`split_bf16_ref` / :func:`merge_bf16_ref` their plain-PyTorch twins, bit-identical.
"""
from __future__ import annotations

import torch

from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = [
    "MANTISSA_BITS", "fields_per_byte", "packed_length",
    "split_bf16", "split_bf16_ref", "split_bf16_triton",
    "merge_bf16", "merge_bf16_ref", "merge_bf16_triton",
]

MANTISSA_BITS = (0, 1, 3, 7)
_BLOCK = 1024  # packed bytes per program


def fields_per_byte(mantissa_bits: int) -> int:
    """How many ``1 + mantissa_bits`` bit fields one byte holds (8, 4, 2 or 1)."""
    return 8 // (1 + mantissa_bits)


def packed_length(n: int, mantissa_bits: int) -> int:
    """Bytes taken by ``n`` packed fields."""
    p = fields_per_byte(mantissa_bits)
    return (n + p - 1) // p


def _check_split(x: torch.Tensor, mantissa_bits: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 1:
        raise TypeError(f"expected a 1-d bfloat16 tensor, got {getattr(x, 'dtype', type(x))} "
                        f"of shape {tuple(getattr(x, 'shape', ()))}")
    if mantissa_bits not in MANTISSA_BITS:
        raise ValueError(f"mantissa_bits must be one of {MANTISSA_BITS}, got {mantissa_bits}")


def _check_merge(exponent: torch.Tensor, fields: torch.Tensor, mantissa_bits: int) -> None:
    if mantissa_bits not in MANTISSA_BITS:
        raise ValueError(f"mantissa_bits must be one of {MANTISSA_BITS}, got {mantissa_bits}")
    if exponent.dtype != torch.uint8 or fields.dtype != torch.uint8:
        raise TypeError("exponent and fields must be uint8 tensors")
    if exponent.dim() != 1 or fields.dim() != 1:
        raise TypeError("exponent and fields must be 1-d")
    if fields.numel() != packed_length(exponent.numel(), mantissa_bits):
        raise ValueError(f"{exponent.numel()} values need {packed_length(exponent.numel(), mantissa_bits)} "
                         f"packed bytes, got {fields.numel()}")


# --------------------------------------------------------------------------------------------
# Reference (plain PyTorch)
# --------------------------------------------------------------------------------------------
def _round_magnitude_ref(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Round 15-bit magnitudes (int32) to ``k`` mantissa bits; see the module docstring."""
    d = 7 - k
    exp = mag >> 7
    trunc = (mag >> d) << d
    lsb = (mag >> d) & 1
    rounded = ((mag + (1 << (d - 1)) - 1 + lsb) >> d) << d
    rounded = torch.where((rounded >> 7) == 255, trunc, rounded)  # would overflow to inf: truncate
    special = exp == 255
    if k >= 1:
        nan = special & ((mag & 0x7F) != 0)
        trunc = torch.where(nan, trunc | 0x40, trunc)
    return torch.where(special, trunc, rounded)


def split_bf16_ref(x: torch.Tensor, mantissa_bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exponent bytes and packed sign/mantissa fields of bf16 values. Plain PyTorch.

    Parameters
    ----------
    x : (N,) bfloat16
    mantissa_bits : int in {0, 1, 3, 7}; 7 is lossless

    Returns
    -------
    exponent : (N,) uint8, the (rounded) exponent byte of every value
    fields : (ceil(N / P),) uint8, ``P = 8 // (1 + mantissa_bits)`` packed fields per byte
    """
    _check_split(x, mantissa_bits)
    k = mantissa_bits
    bits = x.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    sign = bits >> 15
    mag = bits & 0x7FFF
    if k < 7:
        mag = _round_magnitude_ref(mag, k)
    exponent = (mag >> 7).to(torch.uint8)
    field = (sign << k) | ((mag >> (7 - k)) & ((1 << k) - 1))
    p = fields_per_byte(k)
    n = x.numel()
    field = torch.nn.functional.pad(field, (0, packed_length(n, k) * p - n)).reshape(-1, p)
    shifts = torch.arange(p, dtype=torch.int32, device=x.device) * (1 + k)
    packed = (field << shifts).sum(dim=1, dtype=torch.int32)
    return exponent, packed.to(torch.uint8)


def merge_bf16_ref(exponent: torch.Tensor, fields: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Rebuild bf16 values from exponent bytes and packed fields (inverse of the split). Plain PyTorch.

    Parameters
    ----------
    exponent : (N,) uint8
    fields : (ceil(N / P),) uint8, packed as :func:`split_bf16_ref` writes them
    mantissa_bits : int in {0, 1, 3, 7}

    Returns
    -------
    (N,) bfloat16; dropped mantissa bits are zero.
    """
    _check_merge(exponent, fields, mantissa_bits)
    k = mantissa_bits
    n = exponent.numel()
    p = fields_per_byte(k)
    field = fields.to(torch.int32)
    if p > 1:
        shifts = torch.arange(p, dtype=torch.int32, device=fields.device) * (1 + k)
        field = ((field[:, None] >> shifts) & ((1 << (1 + k)) - 1)).reshape(-1)[:n]
    bits = exponent.to(torch.int32)
    bits <<= 7  # in place: few full-size temporaries
    bits |= (field & ((1 << k) - 1)) << (7 - k)
    bits |= (field >> k) << 15
    return bits.to(torch.int16).view(torch.bfloat16)


# --------------------------------------------------------------------------------------------
# Triton
# --------------------------------------------------------------------------------------------
if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _split_bf16_kernel(x_ptr, exp_ptr, fields_ptr, n, n_bytes,
                           K: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr):
        """One program packs BLOCK output bytes, i.e. P * BLOCK input values.

        x_ptr: (n,) int16 (bf16 bits); exp_ptr: (n,) uint8; fields_ptr: (n_bytes,) uint8.
        """
        pid = tl.program_id(0)
        j = pid * BLOCK + tl.arange(0, BLOCK)
        packed = tl.zeros([BLOCK], dtype=tl.int32)
        for i in tl.static_range(P):
            idx = j * P + i
            inside = idx < n
            bits = tl.load(x_ptr + idx, mask=inside, other=0).to(tl.int32) & 0xFFFF
            sign = bits >> 15
            mag = bits & 0x7FFF
            if K < 7:  # drop 7 - K bits
                exp = mag >> 7
                trunc = (mag >> (7 - K)) << (7 - K)
                lsb = (mag >> (7 - K)) & 1
                rounded = ((mag + (1 << (6 - K)) - 1 + lsb) >> (7 - K)) << (7 - K)
                rounded = tl.where((rounded >> 7) == 255, trunc, rounded)
                special = exp == 255
                if K >= 1:
                    nan = special & ((mag & 0x7F) != 0)
                    trunc = tl.where(nan, trunc | 0x40, trunc)
                mag = tl.where(special, trunc, rounded)
            tl.store(exp_ptr + idx, (mag >> 7).to(tl.uint8), mask=inside)
            field = (sign << K) | ((mag >> (7 - K)) & ((1 << K) - 1))
            packed = packed | tl.where(inside, field << (i * (1 + K)), 0)
        tl.store(fields_ptr + j, packed.to(tl.uint8), mask=j < n_bytes)

    @triton.jit
    def _merge_bf16_kernel(exp_ptr, fields_ptr, out_ptr, n, n_bytes,
                           K: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr):
        """One program unpacks BLOCK packed bytes into P * BLOCK bf16 values (as int16 bits)."""
        pid = tl.program_id(0)
        j = pid * BLOCK + tl.arange(0, BLOCK)
        packed = tl.load(fields_ptr + j, mask=j < n_bytes, other=0).to(tl.int32)
        for i in tl.static_range(P):
            idx = j * P + i
            inside = idx < n
            field = (packed >> (i * (1 + K))) & ((1 << (1 + K)) - 1)
            exp = tl.load(exp_ptr + idx, mask=inside, other=0).to(tl.int32)
            bits = ((field >> K) << 15) | (exp << 7) | ((field & ((1 << K) - 1)) << (7 - K))
            bits = tl.where(bits >= 32768, bits - 65536, bits)
            tl.store(out_ptr + idx, bits.to(tl.int16), mask=inside)


def split_bf16_triton(x: torch.Tensor, mantissa_bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of :func:`split_bf16_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use split_bf16_ref")
    _check_split(x, mantissa_bits)
    k = mantissa_bits
    n = x.numel()
    n_bytes = packed_length(n, k)
    bits = x.contiguous().view(torch.int16)
    exponent = torch.empty(n, dtype=torch.uint8, device=x.device)
    fields = torch.empty(n_bytes, dtype=torch.uint8, device=x.device)
    if n:
        grid = (triton.cdiv(n_bytes, _BLOCK),)
        _split_bf16_kernel[grid](bits, exponent, fields, n, n_bytes,
                                 K=k, P=fields_per_byte(k), BLOCK=_BLOCK)
    return exponent, fields


def merge_bf16_triton(exponent: torch.Tensor, fields: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Triton twin of :func:`merge_bf16_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use merge_bf16_ref")
    _check_merge(exponent, fields, mantissa_bits)
    k = mantissa_bits
    n = exponent.numel()
    n_bytes = fields.numel()
    out = torch.empty(n, dtype=torch.int16, device=exponent.device)
    if n:
        grid = (triton.cdiv(n_bytes, _BLOCK),)
        _merge_bf16_kernel[grid](exponent.contiguous(), fields.contiguous(), out, n, n_bytes,
                                 K=k, P=fields_per_byte(k), BLOCK=_BLOCK)
    return out.view(torch.bfloat16)


def split_bf16(x: torch.Tensor, mantissa_bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split bf16 values into exponent bytes and packed fields: Triton on CUDA, reference elsewhere.

    Parameters
    ----------
    x : (N,) bfloat16
    mantissa_bits : int in {0, 1, 3, 7}

    Returns
    -------
    exponent : (N,) uint8
    fields : (ceil(N / P),) uint8, ``P = 8 // (1 + mantissa_bits)``
    """
    if use_triton(x, kernel="split_bf16"):
        return split_bf16_triton(x, mantissa_bits)
    return split_bf16_ref(x, mantissa_bits)


def merge_bf16(exponent: torch.Tensor, fields: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Merge exponent bytes and packed fields back into bf16: Triton on CUDA, reference elsewhere.

    Parameters
    ----------
    exponent : (N,) uint8
    fields : (ceil(N / P),) uint8
    mantissa_bits : int in {0, 1, 3, 7}

    Returns
    -------
    (N,) bfloat16
    """
    if use_triton(exponent, fields, kernel="merge_bf16"):
        return merge_bf16_triton(exponent, fields, mantissa_bits)
    return merge_bf16_ref(exponent, fields, mantissa_bits)


def _check_values(device) -> torch.Tensor:
    """Every bf16 bit pattern whose low byte is one of a few values: all exponents, both signs, NaNs and
    infinities, rounding ties (4,096 values)."""
    high = torch.arange(256, dtype=torch.int32)[:, None] << 8
    low = torch.tensor([0x00, 0x01, 0x0F, 0x10, 0x40, 0x7F, 0x80, 0x81, 0xC0, 0xC1, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF],
                       dtype=torch.int32)[None, :]
    bits = (high | low).reshape(-1)
    bits = torch.where(bits >= 2**15, bits - 2**16, bits).to(torch.int16)
    return bits.view(torch.bfloat16).to(device)


def _split_check_run(fn, args):
    (x,) = args
    return tuple(t for k in MANTISSA_BITS for t in fn(x, k))


def _merge_check_inputs(device, dtype):
    return tuple(split_bf16_ref(_check_values(device), k) for k in MANTISSA_BITS)


def _merge_check_run(fn, args):
    return tuple(fn(exponent, fields, k).view(torch.int16) for (exponent, fields), k in zip(args, MANTISSA_BITS))


register_check("split_bf16", KernelCheck(triton=split_bf16_triton, ref=split_bf16_ref, run=_split_check_run,
                                         inputs=lambda device, dtype: (_check_values(device),),
                                         dtypes=(torch.bfloat16,)))
register_check("merge_bf16", KernelCheck(triton=merge_bf16_triton, ref=merge_bf16_ref, run=_merge_check_run,
                                         inputs=_merge_check_inputs, dtypes=(torch.uint8,)))
