"""Initial weights in float64 that are the same on every x86-64 CPU: torch's float32 normal draw, done in float64.

torch draws a float32 ``normal_`` of 16 or more contiguous values by Box-Muller over a block of float32 uniforms:
u1, u2 -> sqrt(-2 log(1 - u1)) * (cos, sin)(2 pi u2). The log, sin and cos run in float32 and their last bits depend
on the CPU: on AVX2 and AVX-512 CPUs torch's vectorised kernel (Cephes polynomials with FMA), on other CPUs
(``ATEN_CPU_CAPABILITY=default``) libm's float functions, the angle computed in double; the two differ in about a
third of the values (measured: 37% of a 4096 x 64 draw, docs/testing.md). A float32 initialisation is therefore not
the same on every CPU, and a float64 run started from it (cast) would differ between CPUs by whole float32 ulps.

:func:`normal_float64` draws the same uniforms from the generator (the same 32-bit words: the generator ends in the
same state as after torch's draw) and does the vectorised kernel's steps in float64, rounding each result to float32
where the kernel rounds (correctly, with :func:`round_to_float32`, no float32 tensor involved). Its values equal
torch's AVX2 / AVX-512 float32 draw in most positions and lie within 2 float32 ulps of it elsewhere (tested), and
they are the same on every CPU: float64 log, sin and cos differ between CPU paths by about an ulp of float64, which
changes a value rounded to float32 only when it lies within that distance of a rounding boundary (a chance of about
1e-8 per value).
"""
from __future__ import annotations

import math
import struct

import torch

_SPLIT = float(2 ** 29 + 1)  # Veltkamp's constant for keeping 53 - 29 = 24 significant bits (float32's)


def float32_value(x: float) -> float:
    """The Python float ``x`` rounded to float32 (IEEE, round to nearest even), as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def round_to_float32(x: torch.Tensor) -> torch.Tensor:
    """A float64 tensor rounded to float32 precision (24 significant bits, round to nearest), kept in float64:
    Veltkamp's splitting, two subtractions and a multiplication in float64 (exact IEEE operations, the same on every
    CPU). Exact ties may round away from even; no value here is a tie that matters. Values stay far inside float32's
    normal range (weights of a few units)."""
    c = x * _SPLIT
    return c - (c - x)


def _box_muller(u: torch.Tensor, std: float) -> torch.Tensor:
    """Blocks (n, 16) of uniforms in [0, 1) (float64 holding float32 values) -> (n, 16) normal values: the steps of
    torch's ``normal_fill_16_AVX2`` (pairs j, j + 8), each rounded to float32 as the float32 kernel rounds it."""
    u1, u2 = 1.0 - u[:, :8], u[:, 8:]                      # 1 - u is exact in float32 (u is a multiple of 2^-24)
    radius = round_to_float32(torch.sqrt(-2.0 * round_to_float32(torch.log(u1))))
    theta = round_to_float32(float32_value(2.0 * math.pi) * u2)
    cos, sin = round_to_float32(torch.cos(theta)), round_to_float32(torch.sin(theta))
    s = float32_value(std)
    return torch.cat((round_to_float32(round_to_float32(radius * cos) * s),   # the kernel's fmadd(n, std, 0)
                      round_to_float32(round_to_float32(radius * sin) * s)), dim=1)


def _uniforms(n: int, generator: torch.Generator | None) -> torch.Tensor:
    """``n`` float32 uniforms of torch's stream, ``(random() & (2^24 - 1)) * 2^-24``, as float64 (one 32-bit word
    each, as ``torch.empty(n).uniform_()`` takes them)."""
    words = torch.randint(0, 2 ** 24, (n,), generator=generator, dtype=torch.int64)
    return words.to(torch.float64) * 2.0 ** -24


def normal_float64(shape, std: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Normal(0, ``std``) values of ``shape`` in float64: torch's float32 ``torch.empty(shape).normal_(0, std,
    generator=generator)`` as its vectorised kernel computes it, on any CPU (see the module). Fewer than 16 values
    torch draws one by one in double on every CPU, then rounds to float32: so does this."""
    n = math.prod(shape)
    if n < 16:
        return round_to_float32(torch.empty(shape, dtype=torch.float64).normal_(0.0, std, generator=generator))
    u = _uniforms(n, generator)
    out = torch.empty(n, dtype=torch.float64)
    whole = n // 16 * 16
    out[:whole] = _box_muller(u[:whole].view(-1, 16), std).reshape(-1)
    if n % 16:  # torch draws 16 fresh uniforms and recomputes the last 16 values
        out[n - 16:] = _box_muller(_uniforms(16, generator).view(1, 16), std).reshape(-1)
    return out.view(shape)
