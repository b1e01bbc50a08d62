"""NeuZip bit split/merge: Triton kernels (under TRITON_INTERPRET=1) against the PyTorch twins, bit for bit,
and the twins against an independent per-value Python re-implementation of the rounding rule."""
import math
import struct

import pytest
import torch

from kernels.dispatch import triton_available
from kernels.neuzip_bits import (
    MANTISSA_BITS, fields_per_byte, merge_bf16, merge_bf16_ref, merge_bf16_triton, packed_length,
    split_bf16, split_bf16_ref, split_bf16_triton,
)

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton not installed")

SPECIALS = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x7FA5, 0x0001, 0x807F, 0x0080,
            0x7F7F, 0xFF7F, 0x3F80, 0x3FFF, 0x3FBF, 0x7F70, 0x7F78]


def _bits(words) -> torch.Tensor:
    return torch.tensor([w - 65536 if w >= 32768 else w for w in words], dtype=torch.int16)


def all_bf16() -> torch.Tensor:
    """Every one of the 65536 bf16 bit patterns."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def _round_slow(word: int, k: int) -> int:
    """Independent model of the rounding: exact rationals, round half to even on the magnitude."""
    sign, mag = word & 0x8000, word & 0x7FFF
    if k == 7:
        return word
    if (mag >> 7) == 255:  # inf / NaN: truncate, NaN keeps its quiet bit
        m = (mag & 0x7F) >> (7 - k) << (7 - k)
        if mag & 0x7F and k >= 1:
            m |= 0x40
        return sign | (255 << 7) | m
    step = 1 << (7 - k)
    q, r = divmod(mag, step)
    if 2 * r > step or (2 * r == step and q % 2 == 1):
        q += 1
    out = q * step
    if (out >> 7) == 255:  # would become infinite: truncate
        out = mag // step * step
    return sign | out


@pytest.mark.parametrize("k", MANTISSA_BITS)
def test_ref_matches_slow_rounding_on_every_bf16(k):
    x = all_bf16()
    exponent, fields = split_bf16_ref(x, k)
    y = merge_bf16_ref(exponent, fields, k).view(torch.int16).to(torch.int32) & 0xFFFF
    sample = list(range(0, 65536, 37)) + SPECIALS
    got = y[torch.tensor([w ^ 0x8000 for w in sample])].tolist()  # index of word w
    assert got == [_round_slow(w, k) for w in sample]


def test_lossless_round_trip_every_bf16_bit_for_bit():
    x = all_bf16()
    exponent, fields = split_bf16_ref(x, 7)
    assert fields.numel() == x.numel()
    assert torch.equal(merge_bf16_ref(exponent, fields, 7).view(torch.int16), x.view(torch.int16))


@pytest.mark.parametrize("k", [0, 1, 3])
def test_error_bound_for_every_normal_value(k):
    x = all_bf16()
    y = merge_bf16_ref(*split_bf16_ref(x, k), k)
    xf, yf = x.double(), y.double()
    normal = torch.isfinite(xf) & (xf.abs() >= 2.0**-126)
    assert torch.isfinite(yf[normal]).all()  # nothing overflows to infinity
    assert ((yf - xf).abs()[normal] <= 2.0 ** -(k + 1) * xf.abs()[normal]).all()
    assert (torch.sign(yf[normal]) == torch.sign(xf[normal])).all()


@pytest.mark.parametrize("k", [1, 3])
def test_lossy_keeps_specials_special(k):
    x = _bits(SPECIALS).view(torch.bfloat16)
    y = merge_bf16_ref(*split_bf16_ref(x, k), k)
    assert torch.equal(torch.isnan(y), torch.isnan(x))
    inf = torch.isinf(x)
    assert torch.equal(y[inf], x[inf])
    zero = x == 0
    assert torch.equal(y[zero].view(torch.int16), x[zero].view(torch.int16))  # signed zeros


def test_carry_into_exponent():
    # 1.1111111b * 2^0 rounds up to 2.0 with k = 3; the top binade truncates instead of overflowing
    x = _bits([0x3FFF, 0x7F7F]).view(torch.bfloat16)
    y = merge_bf16_ref(*split_bf16_ref(x, 3), 3)
    assert y[0].item() == 2.0
    assert math.isfinite(y[1].item()) and y[1].view(torch.int16).item() == 0x7F70


@pytest.mark.parametrize("k", MANTISSA_BITS)
@pytest.mark.parametrize("n", [1, 7, 1000, 3001])
def test_packing_layout(k, n):
    torch.manual_seed(n)
    x = torch.randn(n).to(torch.bfloat16)
    exponent, fields = split_bf16_ref(x, k)
    assert exponent.shape == (n,) and fields.shape == (packed_length(n, k),)
    p, w = fields_per_byte(k), 1 + k
    i = n - 1  # the last value sits at byte i // p, bit (i % p) * w
    field = (int(fields[i // p]) >> ((i % p) * w)) & ((1 << w) - 1)
    bits = int(merge_bf16_ref(exponent, fields, k).view(torch.int16)[i]) & 0xFFFF
    assert field == ((bits >> 15) << k) | ((bits >> (7 - k)) & ((1 << k) - 1))
    # the padding after the last value is zero
    used = (n - (n // p) * p) if n % p else p
    assert int(fields[-1]) >> (used * w) == 0


@needs_triton
@pytest.mark.parametrize("k", MANTISSA_BITS)
def test_triton_split_and_merge_match_ref_bit_for_bit(k):
    torch.manual_seed(k)
    x = torch.cat([_bits(SPECIALS).view(torch.bfloat16), all_bf16()[::7],
                   (torch.randn(2500) * 0.02).to(torch.bfloat16)])
    e_ref, f_ref = split_bf16_ref(x, k)
    e_tri, f_tri = split_bf16_triton(x, k)
    assert torch.equal(e_ref, e_tri) and torch.equal(f_ref, f_tri)
    y_ref = merge_bf16_ref(e_ref, f_ref, k)
    y_tri = merge_bf16_triton(e_ref, f_ref, k)
    assert torch.equal(y_ref.view(torch.int16), y_tri.view(torch.int16))


@needs_triton
def test_triton_ragged_tail():
    x = torch.randn(1025 * 8 + 3).to(torch.bfloat16)  # more than one program, a partial byte
    for k in (0, 7):
        e, f = split_bf16_triton(x, k)
        e_ref, f_ref = split_bf16_ref(x, k)
        assert torch.equal(e, e_ref) and torch.equal(f, f_ref)
        assert torch.equal(merge_bf16_triton(e, f, k).view(torch.int16), merge_bf16_ref(e, f, k).view(torch.int16))


def test_dispatch_uses_ref_on_cpu_and_rejects_bad_input():
    x = torch.randn(10).to(torch.bfloat16)
    e, f = split_bf16(x, 3)
    assert torch.equal(merge_bf16(e, f, 3), merge_bf16_ref(e, f, 3))
    with pytest.raises(ValueError):
        split_bf16(x, 2)
    with pytest.raises(TypeError):
        split_bf16(x.float(), 7)
    with pytest.raises(ValueError):
        merge_bf16(e, f[:-1], 3)


def test_packing_bits_of_a_known_value():
    # -1.5 in bf16 is 0xBFC0: sign 1, exponent 127, mantissa 1000000b
    x = torch.tensor([-1.5], dtype=torch.bfloat16)
    assert struct.unpack("<H", x.view(torch.int16).numpy().tobytes())[0] == 0xBFC0
    e, f = split_bf16_ref(x, 1)
    assert e.tolist() == [127] and f.tolist() == [0b11]
