"""Chunk-parallel decode of format-3 exponent streams: the Triton kernel (under TRITON_INTERPRET=1) and its
PyTorch twin against the numba coder that writes the format, exponent for exponent."""
import numpy as np
import pytest
import torch

from core.neuzip import pairs
from kernels.dispatch import triton_available
from kernels.neuzip_gemv import fused_gemv, gemv_eligible, pair_rans_gemv, pair_rans_gemv_ref, pair_rans_gemv_triton
from kernels.neuzip_rans import (MAX_SEGMENT, decode_layout, decode_programs, fused_decode_bf16, merge_eligible,
                                 pair_rans_decode, pair_rans_decode_bf16, pair_rans_decode_bf16_ref,
                                 pair_rans_decode_bf16_triton, pair_rans_decode_ref, pair_rans_decode_triton)

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton not installed")


def _exponents(n, seed=0, escapes=0):
    rng = np.random.default_rng(seed)
    e = np.clip(rng.normal(118, 2.5, n), 0, 255).astype(np.uint8)
    if escapes:
        e[rng.choice(n, escapes, replace=False)] = rng.integers(0, 256, escapes)
    return e


CASES = [(1, 32, 0), (300, 64, 9), (641, 64, 30), (1000, 128, 0), (350, 352, 12), (70, 32, 4)]


@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_ref_matches_numba_coder(n, chunk, escapes):
    e = _exponents(n, n, escapes)
    stream = pairs.encode(e, chunk_size=chunk)
    got = pair_rans_decode_ref(*pairs.kernel_args(stream))
    assert got.dtype == torch.uint8 and np.array_equal(got.numpy(), e)
    assert torch.equal(pair_rans_decode(*pairs.kernel_args(stream)), got)  # CPU tensors dispatch to the ref


def _segments(chunk):
    """Every segment length a chunk of ``chunk`` weights can be cut into (multiples of 32 dividing it)."""
    return [s for s in range(32, chunk + 1, 32) if chunk % s == 0]


@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_a_decode_may_start_at_any_segment(n, chunk, escapes):
    """The segment index (states, word and escape pointers every ``segment`` weights, from one pass over the stream)
    lets the decode start mid-chunk: every segment length gives the coder's exponents, and the index's last entries
    are the stream's totals."""
    e = _exponents(n, n + 2, escapes)
    stream = pairs.encode(e, chunk_size=chunk)
    for segment in _segments(chunk):
        states, offsets, escape_offsets = pairs.segment_index(stream, segment)
        assert states.shape == (-(-n // segment), 8)
        assert offsets[-1] == stream.words.size and escape_offsets[-1] == stream.escapes.size
        starts = np.arange(0, n, chunk) // segment  # a chunk's first segment starts where the chunk does
        assert np.array_equal(states[starts], stream.states.view(np.int64))
        got = pair_rans_decode_ref(*pairs.kernel_args(stream, segment=segment), segment=segment)
        assert np.array_equal(got.numpy(), e), segment


def test_segment_lengths_that_do_not_cut_whole_rounds_are_refused():
    stream = pairs.encode(_exponents(300), chunk_size=128)
    for segment in (16, 48, 96, 256):
        with pytest.raises(ValueError, match="segment"):
            pairs.segment_index(stream, segment)
        with pytest.raises(ValueError, match="segment"):
            pair_rans_decode_ref(*pairs.kernel_args(stream), segment=segment)


def test_the_layout_fills_an_h100_at_the_apps_chunk():
    """At the app's default chunk (2**17 weights) a 1536x576 SmolLM2-135M linear on an H100 (132 multiprocessors)
    is cut into segments that give at least 2 programs per multiprocessor (264); a CPU keeps the chunks."""
    n, chunk = 1536 * 576, pairs.DEFAULT_CHUNK
    assert -(-n // chunk) == 7  # the chunks alone: 7 lanes of 8 states
    segment = decode_layout(n, chunk, 132)
    assert chunk % segment == 0 and segment % 32 == 0
    assert decode_programs(n, segment) >= 2 * 132
    assert decode_layout(n, chunk, None) == chunk
    assert decode_layout(n, chunk, 132, min_segment=chunk) == chunk  # a floor that forbids cutting
    # a large matrix: segments no longer than MAX_SEGMENT (1024: the H200 run decoded 24576x576 at 92 GB/s in
    # segments of 8192, at 216 GB/s in segments of 1024), however many programs that makes
    assert decode_layout(24576 * 576, chunk, 132) == MAX_SEGMENT == 1024
    assert decode_programs(24576 * 576, MAX_SEGMENT) == 3456
    assert decode_layout(4 * chunk * 1000, chunk, 132) == MAX_SEGMENT
    assert decode_layout(4 * chunk * 1000, chunk, 132, max_segment=chunk) == chunk  # big enough to fill it
    assert decode_layout(n, chunk, 132) == 512  # SmolLM2-135M's matrices: the floor, as before


@needs_triton
@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_triton_matches_ref(n, chunk, escapes):
    """Bit-identical to the twin, in the chunks and in the shortest segments (32 weights: every round its own lane,
    a chunk's lanes spread over several programs)."""
    e = _exponents(n, n + 1, escapes)
    stream = pairs.encode(e, chunk_size=chunk)
    for segment in (None, 32):
        args = pairs.kernel_args(stream, segment=segment)
        got = pair_rans_decode_triton(*args, segment=segment)
        assert torch.equal(got, pair_rans_decode_ref(*args, segment=segment)) and np.array_equal(got.numpy(), e)


@needs_triton
def test_triton_many_programs():
    e = _exponents(33 * 32 + 5, 3, escapes=20)  # 34 chunks: two programs of 32 lanes, a ragged last chunk
    stream = pairs.encode(e, chunk_size=32)
    assert np.array_equal(pair_rans_decode_triton(*pairs.kernel_args(stream)).numpy(), e)


@needs_triton
@pytest.mark.parametrize("block", [1, 4, 64])
def test_triton_takes_escapes_in_stream_order_at_any_block(block):
    """Dense escapes (both bytes of one pair, several states of one round, odd n): the tile decode places each
    escape by a prefix sum over the round's states, which must give the stream's order; any chunks per program."""
    e = _exponents(9 * 64 + 17, 5, escapes=260)
    stream = pairs.encode(e, chunk_size=64)
    args = pairs.kernel_args(stream)
    assert int(args[5].numel()) >= 200  # escapes stored
    got = pair_rans_decode_triton(*args, block=block)
    assert np.array_equal(got.numpy(), e) and torch.equal(got, pair_rans_decode_ref(*args))
    args = pairs.kernel_args(stream, segment=32)  # segments start mid-chunk with escapes already taken
    assert np.array_equal(pair_rans_decode_triton(*args, segment=32, block=block).numpy(), e)


@needs_triton
@pytest.mark.parametrize("decode", [pair_rans_decode_ref, pair_rans_decode_triton])
@pytest.mark.parametrize("segment", [None, 32])
def test_corrupt_stream_is_detected(decode, segment):
    """Without a flag the decode raises at once; with one (what a forward passes on a device) it sets the flag
    and returns without reading anything back, and a good stream leaves the flag at 0."""
    from kernels.neuzip_rans import raise_if_corrupt

    stream = pairs.encode(_exponents(512, 4, escapes=5), chunk_size=128)
    good = pairs.kernel_args(stream, segment=segment)
    flag = torch.zeros(1, dtype=torch.int32)
    decode(*good, segment=segment, errors=flag)
    assert int(flag) == 0
    words = list(good)
    words[2] = words[2].clone()
    words[2][3] ^= 0x1234
    moved = list(good)
    moved[6] = moved[6].clone()
    moved[6][1:-1] += 1  # escapes moved from segment to segment
    states = list(good)
    states[0] = states[0].clone()
    states[0][1, 2] += 1  # a segment starting from the wrong state
    for args in (words, moved, states):
        with pytest.raises(ValueError, match="corrupt"):
            decode(*args, segment=segment)
        flag.zero_()
        decode(*args, segment=segment, errors=flag)
        assert int(flag) != 0
        with pytest.raises(ValueError, match="corrupt"):
            raise_if_corrupt(flag)
        assert int(flag) == 0  # cleared by the check


def test_bad_arguments():
    args = list(pairs.kernel_args(pairs.encode(_exponents(100), chunk_size=32)))
    with pytest.raises(ValueError):
        pair_rans_decode_ref(*args[:9], 48, args[10])  # chunk size that does not match the states
    with pytest.raises(TypeError):
        pair_rans_decode_ref(args[0], args[1], args[2].to(torch.int16), *args[3:])


# ---- the exponent decode fused with the bit merge (the weight straight into the decompression buffer) ----
def _weight(n, seed, escapes=0):
    """Random bf16 bits (the exponents skewed as a weight's, escapes among them) and their split."""
    e = _exponents(n, seed, escapes)
    fields = torch.from_numpy(np.random.default_rng(seed + 1).integers(0, 256, n).astype(np.uint8))
    bits = (((fields.to(torch.int32) & 0x80) << 8) | (torch.from_numpy(e).to(torch.int32) << 7)
            | (fields.to(torch.int32) & 0x7F))
    return e, fields, bits.to(torch.int16)


@needs_triton
@pytest.mark.parametrize("n,chunk,escapes,block,segment", [
    (2, 32, 0, 4, None),        # one pair
    (640, 64, 30, 4, None),     # dense escapes, chunk layout
    (1000, 128, 0, 1, 32),      # segments of 32 (every round its own lane), one per program, a ragged last chunk
    (9 * 64 + 18, 64, 200, 64, 32),  # escapes in both bytes of a pair, many segments per program
    (704, 192, 12, 2, 64),      # segments of 64 in chunks of 192
])
def test_fused_decode_and_merge_writes_the_weight_bit_for_bit(n, chunk, escapes, block, segment):
    """One kernel decodes the exponents and merges them with the sign/mantissa bytes: the original bf16 bits,
    bit-identical to the twin (decode, then merge_bf16), written into ``out`` when given; the flag stays clean."""
    e, fields, bits = _weight(n, n + chunk, escapes)
    args = (*pairs.kernel_args(pairs.encode(e, chunk_size=chunk), segment=segment), fields)
    flag = torch.zeros(1, dtype=torch.int32)
    got = pair_rans_decode_bf16_triton(*args, segment=segment, block=block, errors=flag)
    want = pair_rans_decode_bf16_ref(*args, segment=segment)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), bits)
    assert torch.equal(want.view(torch.int16), bits) and int(flag) == 0
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    assert pair_rans_decode_bf16_triton(*args, segment=segment, block=block, out=out) is out
    assert torch.equal(out.view(torch.int16), bits)
    assert torch.equal(pair_rans_decode_bf16(*args, segment=segment).view(torch.int16), bits)  # CPU: the twin


@needs_triton
def test_fused_decode_and_merge_flags_a_corrupt_stream():
    e, fields, _ = _weight(512, 4, escapes=5)
    args = list(pairs.kernel_args(pairs.encode(e, chunk_size=128), segment=64)) + [fields]
    args[2] = args[2].clone()
    args[2][3] ^= 0x1234
    with pytest.raises(ValueError, match="corrupt"):
        pair_rans_decode_bf16_triton(*args, segment=64)
    flag = torch.zeros(1, dtype=torch.int32)
    pair_rans_decode_bf16_triton(*args, segment=64, errors=flag)
    assert int(flag) != 0


def test_fused_decode_and_merge_eligibility_and_bad_arguments():
    """Lossless, unnormalised, an even number of weights: anything else (and a bad ``out``) is refused, and the
    codec takes the two-kernel path instead."""
    assert merge_eligible(1536 * 576, 7, False)
    assert not merge_eligible(1536 * 576, 3, False) and not merge_eligible(1536 * 576, 7, True)
    assert not merge_eligible(7, 7, False) and not merge_eligible(0, 7, False)
    e, fields, _ = _weight(64, 0)
    args = (*pairs.kernel_args(pairs.encode(e, chunk_size=32)), fields)
    with pytest.raises(ValueError, match="even"):
        pair_rans_decode_bf16_ref(*pairs.kernel_args(pairs.encode(e[:63], chunk_size=32)), fields[:63])
    with pytest.raises(ValueError, match="sign/mantissa"):
        pair_rans_decode_bf16_ref(*args[:-1], fields[:32])
    for out in (torch.empty(64), torch.empty(65, dtype=torch.bfloat16)[1:], torch.empty(32, dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match="out"):
            pair_rans_decode_bf16_ref(*args, out=out)


# ---- the exponent decode fused with a matrix-vector product (batch-1 inference) ----
def _gemv_args(out_features, in_features, chunk, seed, escapes=0, segment=None):
    from kernels.neuzip_bits import merge_bf16_ref

    n = out_features * in_features
    e = _exponents(n, seed, escapes)
    rng = np.random.default_rng(seed + 1)
    fields = torch.from_numpy(rng.integers(0, 256, n).astype(np.uint8))
    vec = torch.from_numpy(rng.standard_normal(in_features).astype(np.float32))
    args = (*pairs.kernel_args(pairs.encode(e, chunk_size=chunk), segment=segment), fields, vec)
    weight = merge_bf16_ref(torch.from_numpy(e), fields, 7).view(out_features, in_features)
    return args, weight


@needs_triton
@pytest.mark.parametrize("out_features,in_features,chunk,escapes,block,segment", [
    (9, 32, 256, 0, 32, None),  # a chunk spans 8 rows, the last chunk ragged
    (5, 128, 32, 6, 32, None),  # a row spans 4 chunks
    (7, 96, 64, 40, 2, None),   # chunks straddle rows (64 vs 96), dense escapes, 2 chunks per program
    (3, 64, 128, 3, 1, None),   # fewer weights than one chunk
    (7, 96, 192, 40, 4, 64),    # segments of 64 in chunks of 192 straddle rows of 96, dense escapes
    (9, 32, 256, 5, 4, 32),     # one segment per row, the last chunk ragged
])
def test_fused_gemv_is_the_decoded_matrix_times_the_vector(out_features, in_features, chunk, escapes, block,
                                                           segment):
    args, weight = _gemv_args(out_features, in_features, chunk, out_features + in_features, escapes, segment)
    got = pair_rans_gemv_triton(*args, block=block, segment=segment)
    want = pair_rans_gemv_ref(*args, segment=segment)
    exact = (weight.double() @ args[-1].double())
    assert got.dtype == torch.float32 and got.shape == (out_features,)
    scale = float((weight.double().abs() @ args[-1].double().abs()).max())
    assert float((got.double() - exact).abs().max()) <= 1e-6 * scale  # float32 sums of the same products
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * scale)
    assert torch.equal(got, pair_rans_gemv_triton(*args, block=block, segment=segment))  # no atomics: repeatable


def test_fused_gemv_reference_and_eligibility():
    args, weight = _gemv_args(4, 32, 64, 0)
    torch.testing.assert_close(pair_rans_gemv_ref(*args), weight.float() @ args[-1])
    assert torch.equal(pair_rans_gemv(*args), pair_rans_gemv_ref(*args))  # CPU tensors dispatch to the ref
    assert gemv_eligible(4 * 32, 32, 7, False)
    assert not gemv_eligible(4 * 48, 48, 7, False)  # rows not a multiple of 32
    assert not gemv_eligible(4 * 32, 32, 3, False) and not gemv_eligible(4 * 32, 32, 7, True)  # lossy, normalised
    with pytest.raises(ValueError, match="multiple of 32"):
        pair_rans_gemv_ref(*args[:-1], args[-1][:16])


def test_the_entry_points_answer_none_where_their_kernel_does_not_apply(monkeypatch):
    """``fused_decode_bf16`` / ``fused_gemv`` are what core calls: None for CPU tensors (the kernel is not chosen
    there) and for a weight the kernel cannot take (lossy, normalised, odd, rows not a multiple of 32), so the caller
    takes the two-step path; the choice stays in kernels/."""
    import kernels.dispatch as dispatch

    e, fields, bits = _weight(64, 1)
    args = (*pairs.kernel_args(pairs.encode(e, chunk_size=32)), fields)
    assert fused_decode_bf16(*args, mantissa_bits=7, scaled=False) is None  # CPU tensors: not chosen
    gargs, weight = _gemv_args(2, 32, 32, 3)
    assert fused_gemv(*gargs, mantissa_bits=7, scaled=False) is None
    monkeypatch.setattr(dispatch, "device_eligible", lambda tensors: True)  # as if on CUDA
    monkeypatch.setattr(dispatch, "kernel_trusted", lambda name, device, dtype: True)
    assert fused_decode_bf16(*args, mantissa_bits=3, scaled=False) is None  # lossy
    assert fused_decode_bf16(*args, mantissa_bits=7, scaled=True) is None  # normalised
    assert fused_decode_bf16(*args, mantissa_bits=7, scaled=False,
                             out=torch.empty(65, dtype=torch.bfloat16)[1:]) is None  # a misaligned buffer
    assert fused_gemv(*gargs[:-1], gargs[-1][:16], mantissa_bits=7, scaled=False) is None  # 16 columns
    if triton_available():  # where it applies and is chosen: the kernel (the interpreter stands in)
        assert torch.equal(fused_decode_bf16(*args, mantissa_bits=7, scaled=False).view(torch.int16), bits)
        monkeypatch.setenv("LAYERWISE_KERNELS", "triton")  # the GEMV is opt-in (auto=False) until timed
        got = fused_gemv(*gargs, mantissa_bits=7, scaled=False)
        torch.testing.assert_close(got, weight.float() @ gargs[-1], rtol=1e-5, atol=1e-5)
