"""Chunk-parallel decode of format-3 exponent streams: the Triton kernel (under TRITON_INTERPRET=1) and its
PyTorch twin against the numba coder that writes the format, exponent for exponent."""
import numpy as np
import pytest
import torch

from core.neuzip import pairs
from kernels.dispatch import triton_available
from kernels.neuzip_rans import (gemv_eligible, pair_rans_decode, pair_rans_decode_ref, pair_rans_decode_triton,
                                 pair_rans_gemv, pair_rans_gemv_ref, pair_rans_gemv_triton, slot_table)

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


@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_the_slot_table_built_from_per_pair_arrays_is_the_coders_table(n, chunk, escapes):
    """What a resident GPU weight keeps (per pair: frequency and bytes) rebuilds the coder's per-slot table exactly,
    and the stream decodes from it."""
    e = _exponents(n, n + 2, escapes)
    stream = pairs.encode(e, chunk_size=chunk)
    a = {k: torch.from_numpy(v) for k, v in pairs.stream_arrays(stream).items()}
    table = slot_table(a["pair_freq"], a["pair_bytes"], stream.table.precision)
    assert torch.equal(table, torch.from_numpy(pairs.decode_table(stream.table)))
    got = pair_rans_decode_ref(a["states"], a["offsets"], a["words"], table, a["escapes"], a["escape_offsets"],
                               stream.table.marker, stream.n, stream.chunk_size, stream.table.precision)
    assert np.array_equal(got.numpy(), e)


@needs_triton
@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_triton_matches_ref(n, chunk, escapes):
    e = _exponents(n, n + 1, escapes)
    args = pairs.kernel_args(pairs.encode(e, chunk_size=chunk))
    assert torch.equal(pair_rans_decode_triton(*args), pair_rans_decode_ref(*args))


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
    assert int(args[4].numel()) >= 200  # escapes stored
    got = pair_rans_decode_triton(*args, block=block)
    assert np.array_equal(got.numpy(), e) and torch.equal(got, pair_rans_decode_ref(*args))


@needs_triton
@pytest.mark.parametrize("decode", [pair_rans_decode_ref, pair_rans_decode_triton])
def test_corrupt_stream_is_detected(decode):
    stream = pairs.encode(_exponents(512, 4, escapes=5), chunk_size=128)
    args = list(pairs.kernel_args(stream))
    args[2] = args[2].clone()
    args[2][3] ^= 0x1234
    with pytest.raises(ValueError, match="corrupt"):
        decode(*args)
    args = list(pairs.kernel_args(stream))
    args[5] = args[5].clone()
    args[5][1:-1] += 1  # escapes moved from chunk to chunk
    with pytest.raises(ValueError, match="corrupt"):
        decode(*args)


def test_bad_arguments():
    args = list(pairs.kernel_args(pairs.encode(_exponents(100), chunk_size=32)))
    with pytest.raises(ValueError):
        pair_rans_decode_ref(*args[:8], 48, args[9])  # chunk size that does not match the states
    with pytest.raises(TypeError):
        pair_rans_decode_ref(args[0], args[1], args[2].to(torch.int16), *args[3:])


# ---- the exponent decode fused with a matrix-vector product (batch-1 inference) ----
def _gemv_args(out_features, in_features, chunk, seed, escapes=0):
    from kernels.neuzip_bits import merge_bf16_ref

    n = out_features * in_features
    e = _exponents(n, seed, escapes)
    rng = np.random.default_rng(seed + 1)
    fields = torch.from_numpy(rng.integers(0, 256, n).astype(np.uint8))
    vec = torch.from_numpy(rng.standard_normal(in_features).astype(np.float32))
    args = (*pairs.kernel_args(pairs.encode(e, chunk_size=chunk)), fields, vec)
    weight = merge_bf16_ref(torch.from_numpy(e), fields, 7).view(out_features, in_features)
    return args, weight


@needs_triton
@pytest.mark.parametrize("out_features,in_features,chunk,escapes,block", [
    (9, 32, 256, 0, 32),    # a chunk spans 8 rows, the last chunk ragged
    (5, 128, 32, 6, 32),    # a row spans 4 chunks
    (7, 96, 64, 40, 2),     # chunks straddle rows (64 vs 96), dense escapes, 2 chunks per program
    (3, 64, 128, 3, 1),     # fewer weights than one chunk
])
def test_fused_gemv_is_the_decoded_matrix_times_the_vector(out_features, in_features, chunk, escapes, block):
    args, weight = _gemv_args(out_features, in_features, chunk, out_features + in_features, escapes)
    got = pair_rans_gemv_triton(*args, block=block)
    want = pair_rans_gemv_ref(*args)
    exact = (weight.double() @ args[-1].double())
    assert got.dtype == torch.float32 and got.shape == (out_features,)
    scale = float((weight.double().abs() @ args[-1].double().abs()).max())
    assert float((got.double() - exact).abs().max()) <= 1e-6 * scale  # float32 sums of the same products
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * scale)
    assert torch.equal(got, pair_rans_gemv_triton(*args, block=block))  # no atomics: the same every run


def test_fused_gemv_reference_and_eligibility():
    args, weight = _gemv_args(4, 32, 64, 0)
    torch.testing.assert_close(pair_rans_gemv_ref(*args), weight.float() @ args[-1])
    assert torch.equal(pair_rans_gemv(*args), pair_rans_gemv_ref(*args))  # CPU tensors dispatch to the ref
    assert gemv_eligible(4 * 32, 32, 7, False)
    assert not gemv_eligible(4 * 48, 48, 7, False)  # rows not a multiple of 32
    assert not gemv_eligible(4 * 32, 32, 3, False) and not gemv_eligible(4 * 32, 32, 7, True)  # lossy, normalised
    with pytest.raises(ValueError, match="multiple of 32"):
        pair_rans_gemv_ref(*args[:-1], args[-1][:16])
