"""Chunk-parallel rANS decode: the Triton kernel (under TRITON_INTERPRET=1) and its PyTorch twin against the
numpy coder that writes the format, symbol for symbol."""
import numpy as np
import pytest
import torch

from core.neuzip import rans
from kernels.dispatch import triton_available
from kernels.neuzip_rans import rans_decode, rans_decode_ref, rans_decode_triton

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton not installed")


def _symbols(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(118, 2.5, n), 0, 255).astype(np.uint8)


CASES = [(1, 64), (300, 64), (640, 64), (1000, 128), (350, 350)]


@pytest.mark.parametrize("n,chunk", CASES)
def test_ref_matches_numpy_coder(n, chunk):
    sym = _symbols(n, n)
    stream = rans.encode(sym, chunk_size=chunk)
    got = rans_decode_ref(*rans.kernel_args(stream))
    assert got.dtype == torch.uint8 and np.array_equal(got.numpy(), sym)
    assert torch.equal(rans_decode(*rans.kernel_args(stream)), got)  # CPU tensors dispatch to the ref


@needs_triton
@pytest.mark.parametrize("n,chunk", CASES)
def test_triton_matches_ref(n, chunk):
    sym = _symbols(n, n + 1)
    stream = rans.encode(sym, chunk_size=chunk)
    args = rans.kernel_args(stream)
    assert torch.equal(rans_decode_triton(*args), rans_decode_ref(*args))


@needs_triton
def test_triton_many_programs_and_precisions():
    sym = _symbols(129 * 16 + 5, 3)  # 130 chunks: two programs of 128 lanes, a ragged last chunk
    for precision in (10, 16):
        stream = rans.encode(sym, chunk_size=16, precision=precision)
        assert np.array_equal(rans_decode_triton(*rans.kernel_args(stream)).numpy(), sym)


@needs_triton
@pytest.mark.parametrize("decode", [rans_decode_ref, rans_decode_triton])
def test_corrupt_stream_is_detected(decode):
    stream = rans.encode(_symbols(512, 4), chunk_size=128)
    args = list(rans.kernel_args(stream))
    args[2] = args[2].clone()
    args[2][3] ^= 0x1234
    with pytest.raises(ValueError, match="corrupt"):
        decode(*args)
