"""Per-block normaliser for lossy NeuZip (mantissa_bits < 7).

Each block of ``B`` consecutive values (row-major, the last block may be shorter) is divided by
``s = 1 + code / 128`` where ``code`` is the 7-bit mantissa of the block's largest finite magnitude
``a``, so ``a / s`` is an exact power of two and survives mantissa truncation exactly. One byte per
block is stored (``8 / B`` bits per weight). ``code = 0`` (``s = 1``) when ``a`` is zero, subnormal
or the block holds only non-finite values.

The division runs in float32; the quotient goes to bf16 by *round to odd* (truncate, then set the
lowest bit if anything was dropped), so that the later round-to-nearest to ``k <= 3`` mantissa bits
is correctly rounded (no double rounding). Decoding multiplies back in float32, where the product of
a ``(k+1)``-bit and an 8-bit significand is exact, and rounds once to bf16 (nearest, ties to even);
NaNs come back bit for bit (torch's own float32 -> bf16 conversion of a NaN differs between its
vectorised and scalar paths, so it is not left to decide).
"""
from __future__ import annotations

import torch

__all__ = ["block_scale_codes", "normalise", "denormalise"]


def block_scale_codes(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """One scale code per block.

    Parameters
    ----------
    x : (N,) bfloat16
    block_size : B, a power of two

    Returns
    -------
    codes : (ceil(N / B),) uint8, the mantissa bits of each block's largest finite magnitude
    """
    n = x.numel()
    num = -(-n // block_size)
    mag = x.float().abs()
    mag = torch.where(torch.isfinite(mag), mag, torch.zeros_like(mag))
    mag = torch.nn.functional.pad(mag, (0, num * block_size - n))
    amax = mag.reshape(num, block_size).amax(dim=1).to(torch.bfloat16)
    bits = amax.view(torch.int16).to(torch.int32)
    exp = (bits >> 7) & 0xFF
    code = torch.where((exp >= 1) & (exp <= 254), bits & 0x7F, torch.zeros_like(bits))
    return code.to(torch.uint8)


def _scales(codes: torch.Tensor, n: int, block_size: int) -> torch.Tensor:
    scale = 1.0 + codes.to(torch.float32) / 128.0
    return scale.repeat_interleave(block_size)[:n]


def normalise(x: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale every block so its largest magnitude is a power of two.

    Parameters
    ----------
    x : (N,) bfloat16
    block_size : B, a power of two

    Returns
    -------
    y : (N,) bfloat16, ``x / s`` rounded to odd
    codes : (ceil(N / B),) uint8
    """
    codes = block_scale_codes(x, block_size)
    y = x.float() / _scales(codes, x.numel(), block_size)
    bits = y.view(torch.int32)
    hi = (bits >> 16) | ((bits & 0xFFFF) != 0).to(torch.int32)  # round to odd
    return hi.to(torch.int16).view(torch.bfloat16), codes


def denormalise(y: torch.Tensor, codes: torch.Tensor, block_size: int) -> torch.Tensor:
    """Undo :func:`normalise` (up to the rounding of ``y``).

    Parameters
    ----------
    y : (N,) bfloat16
    codes : (ceil(N / B),) uint8
    block_size : B

    Returns
    -------
    (N,) bfloat16
    """
    z = (y.float() * _scales(codes.to(y.device), y.numel(), block_size)).to(torch.bfloat16)
    return torch.where(torch.isnan(y), y, z)
