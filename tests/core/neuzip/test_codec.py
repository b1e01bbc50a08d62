"""NeuZip codec: rANS stream, lossless and lossy round trips, normaliser, bad input."""
import warnings

import numpy as np
import pytest
import torch

from core.errors import BadInputError
from core.neuzip import CompressedTensor, compress
from core.neuzip import rans
from core.neuzip.measure import entropy_bits
from core.neuzip.normaliser import block_scale_codes


def weights(n=20000, seed=0, scale=0.02):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * scale).to(torch.bfloat16)


def _i16(x):
    return x.view(torch.int16)


# ---------------------------------------------------------------------------------- rANS stream
def _decode_slow(stream: rans.RansStream) -> np.ndarray:
    """One chunk at a time, with plain Python ints: the format as written in the module docstring."""
    freq, cdf = stream.table.full()
    p, m = stream.table.precision, (1 << stream.table.precision) - 1
    out = []
    for j in range(stream.states.size):
        x, ptr = int(stream.states[j]), int(stream.offsets[j])
        length = min(stream.chunk_size, stream.n - j * stream.chunk_size)
        for _ in range(length):
            slot = x & m
            s = int(np.searchsorted(cdf, slot, side="right")) - 1
            while freq[s] == 0:
                s -= 1
            out.append(s)
            x = int(freq[s]) * (x >> p) + slot - int(cdf[s])
            if x < 1 << 16:
                x = (x << 16) | int(stream.words[ptr])
                ptr += 1
        assert x == 1 << 16 and ptr == stream.offsets[j + 1]
    return np.array(out, np.uint8)


@pytest.mark.parametrize("n,chunk", [(1, 4096), (1000, 64), (1000, 1000), (2050, 256), (3000, 4096)])
def test_rans_round_trip_and_matches_slow_decoder(n, chunk):
    rng = np.random.default_rng(n)
    sym = np.clip(rng.normal(120, 3, n), 0, 255).astype(np.uint8)
    stream = rans.encode(sym, chunk_size=chunk)
    assert stream.states.size == -(-n // chunk)
    assert np.array_equal(rans.decode(stream), sym)
    assert np.array_equal(_decode_slow(stream), sym)


def test_rans_size_close_to_entropy():
    rng = np.random.default_rng(1)
    sym = np.clip(rng.normal(120, 2, 200_000), 0, 255).astype(np.uint8)
    h = entropy_bits(np.bincount(sym, minlength=256))
    for chunk in (None, 4096):
        stream = rans.encode(sym, chunk_size=chunk)
        bits = 8 * stream.nbytes / sym.size
        assert h < bits < h + 64 / stream.chunk_size + 0.01  # 64 bits per chunk + table quantization


def test_auto_chunk_size():
    assert [rans.auto_chunk_size(n) for n in (1, 10**5, 2**20, 3 * 2**20, 2**30)] == [1024, 1024, 1024, 2048, 4096]


def test_rans_many_lanes_in_several_passes():
    sym = np.clip(np.random.default_rng(5).normal(100, 2, 8192 * 2 + 5), 0, 255).astype(np.uint8)
    stream = rans.encode(sym, chunk_size=2)  # 8194 full chunks (two vectorised passes) and a tail
    assert np.array_equal(rans.decode(stream), sym)


def test_rans_size_matches_a_maintained_coder():
    constriction = pytest.importorskip("constriction")
    sym = np.clip(np.random.default_rng(6).normal(120, 2, 20_000), 0, 255).astype(np.uint8)
    ours = rans.encode(sym, chunk_size=20_000)  # one stream, like constriction's
    p = np.bincount(sym, minlength=256).astype(np.float64)
    coder = constriction.stream.stack.AnsCoder()
    coder.encode_reverse(sym.astype(np.int32), constriction.stream.model.Categorical(p / p.sum(), perfect=False))
    theirs = 4 * coder.get_compressed().size
    assert abs(ours.words.nbytes - theirs) < 0.005 * theirs


def test_rans_edge_alphabets():
    for sym in (np.full(5000, 7, np.uint8), np.arange(256, dtype=np.uint8).repeat(3)):
        assert np.array_equal(rans.decode(rans.encode(sym, chunk_size=512)), sym)


def test_rans_table_is_exact():
    counts = np.zeros(256, np.int64)
    counts[[0, 5, 255]] = [1, 10**9, 3]
    t = rans.build_table(counts, 12)
    assert t.symbols.tolist() == [0, 5, 255] and int(t.freqs.astype(np.int64).sum()) == 4096
    assert t.freqs.min() >= 1
    one = rans.build_table(np.bincount([9, 9], minlength=256), 16)  # a single symbol takes all 2**16
    assert one.freqs.tolist() == [65536]
    assert np.array_equal(rans.decode(rans.encode(np.full(10, 9, np.uint8), one)), np.full(10, 9))


def test_rans_detects_corrupt_stream():
    sym = np.clip(np.random.default_rng(2).normal(120, 3, 5000), 0, 255).astype(np.uint8)
    s = rans.encode(sym, chunk_size=1000)
    words = s.words.copy()
    words[10] ^= 0x5555
    with pytest.raises(ValueError):
        rans.decode(rans.RansStream(s.table, s.states, s.offsets, words, s.n, s.chunk_size))


# ---------------------------------------------------------------------------------- codec
def test_lossless_round_trip_is_bit_exact_with_specials():
    words = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x7FA5, 0x0001, 0x807F, 0x0080, 0x7F7F]
    specials = torch.tensor([w - 65536 if w >= 32768 else w for w in words], dtype=torch.int16)
    x = torch.cat([_i16(weights(5000)), specials]).view(torch.bfloat16).reshape(-1, 4)[:1253]
    c = compress(x)
    y = c.decompress()
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    assert torch.equal(_i16(y), _i16(x))


@pytest.mark.parametrize("shape", [(1,), (3, 5, 7), (64, 100)])
def test_lossless_shapes_and_nbytes(shape):
    x = weights(int(np.prod(shape))).reshape(shape)
    c = compress(x)
    assert isinstance(c, CompressedTensor) and c.shape == shape
    assert torch.equal(_i16(c.decompress()), _i16(x))
    stored = sum(a.nbytes for a in c.arrays().values())
    assert c.nbytes > stored  # metadata counted too


def test_lossless_bits_per_weight_on_gaussian_weights():
    c = compress(weights(1 << 16))
    # 1 sign + 7 mantissa + about 2.6 bits of exponent for N(0, 0.02^2) in bf16
    assert 10.3 < c.bits_per_weight < 11.0


@pytest.mark.parametrize("k", [0, 1, 3])
def test_lossy_bound_and_size(k):
    x = weights(6000, seed=k)
    c = compress(x, mantissa_bits=k)
    y = c.decompress().double()
    xd = x.double()
    normal = xd.abs() >= 2.0**-126
    assert ((y - xd).abs()[normal] <= 2.0 ** -(k + 1) * xd.abs()[normal]).all()
    assert c.bits_per_weight < compress(x).bits_per_weight - (7 - k) + 0.5


@pytest.mark.parametrize("k,block", [(3, 32), (1, 256), (0, 1024)])
def test_normaliser_keeps_block_maxima_exact_and_error_small(k, block):
    x = weights(3000, seed=block)
    c = compress(x, mantissa_bits=k, block_size=block)
    assert c.scales is not None and c.scales.numel() == -(-3000 // block)
    y = c.decompress()
    xd, yd = x.double(), y.double()
    nblocks = -(-x.numel() // block)
    pad = nblocks * block - x.numel()
    idx = torch.nn.functional.pad(xd.abs(), (0, pad)).reshape(nblocks, block).argmax(dim=1) + \
        torch.arange(nblocks) * block
    assert torch.equal(yd[idx], xd[idx])  # the largest magnitude of each block survives exactly
    # within the k-bit bound plus one final bf16 rounding on decode
    assert ((yd - xd).abs() <= (2.0 ** -(k + 1) + 2.0**-8) * xd.abs() + 1e-30).all()


def test_block_scale_codes():
    x = torch.tensor([0.5, -1.75, 0.0, float("nan"), 3.0, 0.0, 0.0, 0.0], dtype=torch.bfloat16)
    # block 0 max |x| = 1.75 = 1.1100000b -> code 0b1100000; block 1 max = 3 = 1.1b * 2 -> 0b1000000
    assert block_scale_codes(x, 4).tolist() == [96, 64]


def test_float32_input_is_converted_with_a_note():
    x = torch.randn(100)
    with pytest.warns(UserWarning, match="lossy"):
        c = compress(x)
    assert c.note and "float32" in c.note and "changed some values" in c.note and c.source_dtype == "float32"
    assert torch.equal(_i16(c.decompress()), _i16(x.to(torch.bfloat16)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compress(x.to(torch.bfloat16)).note is None


@pytest.mark.parametrize("kwargs", [
    dict(tensor=torch.empty(0, 4, dtype=torch.bfloat16)),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=2),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=True),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=7.0),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits="7"),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=3, block_size=100),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=3, block_size=16),
    dict(tensor=torch.ones(4, dtype=torch.bfloat16), mantissa_bits=7, block_size=64),
    dict(tensor=torch.ones(4, dtype=torch.int32)),
    dict(tensor=torch.tensor([float("nan")], dtype=torch.bfloat16), mantissa_bits=0),
])
def test_bad_input_is_a_clear_error(kwargs):
    with pytest.raises(BadInputError) as info:
        compress(**kwargs)
    assert info.value.message


def test_float32_holding_bf16_values_says_nothing_was_lost():
    x = weights(50).float()
    x[3] = float("nan")
    with pytest.warns(UserWarning, match="nothing was lost"):
        c = compress(x)
    assert torch.equal(c.decompress().float().nan_to_num(7.0), x.nan_to_num(7.0))


def test_numpy_integers_are_accepted():
    x = weights(100)
    c = compress(x, mantissa_bits=np.int64(3), block_size=np.int32(32))
    assert c.mantissa_bits == 3 and type(c.mantissa_bits) is int and type(c.block_size) is int
    assert c.metadata()["block_size"] == 32


def test_metadata_keeps_only_what_differs_from_the_defaults():
    x = weights(100).reshape(4, 25)
    lossless = compress(x)
    assert lossless.metadata() == {"shape": [4, 25]}  # k = 7, no blocks, default chunk, bf16, no note
    assert lossless.nbytes == lossless.exponents.nbytes + lossless.fields.numel() + len('{"shape":[4,25]}')
    assert compress(x, mantissa_bits=3, block_size=64, chunk_size=64).metadata() == {
        "shape": [4, 25], "mantissa_bits": 3, "block_size": 64, "chunk_size": 64}


def test_large_outputs_come_from_a_huge_page_mapping(monkeypatch):
    """From HUGE_OUTPUT_BYTES on, decompress() returns a tensor over its own anonymous mapping (Linux): the same
    bits, writable, alive after the compressed tensor and the mapping's last Python name are gone."""
    import gc
    import mmap
    import types

    from core.neuzip import codec

    maps = []

    def counting_mmap(*args, **kwargs):
        maps.append(args[1])
        return mmap.mmap(*args, **kwargs)

    monkeypatch.setattr(codec, "mmap", types.SimpleNamespace(**{k: getattr(mmap, k) for k in dir(mmap)
                                                                 if k.isupper()}, mmap=counting_mmap))
    x = weights(3000).reshape(60, 50)
    c = compress(x)
    monkeypatch.setattr(codec, "HUGE_OUTPUT_BYTES", 2 * x.numel())
    y = c.decompress()
    assert maps == ([2 << 20] if hasattr(mmap, "MADV_HUGEPAGE") else [])  # whole 2 MiB pages
    assert y.shape == (60, 50) and y.dtype == torch.bfloat16 and torch.equal(_i16(y), _i16(x))
    del c
    gc.collect()
    y.mul_(2)
    assert torch.equal(y, x * 2)
    monkeypatch.setattr(codec, "HUGE_OUTPUT_BYTES", 2 * x.numel() + 1)  # one byte short: torch.empty
    assert torch.equal(_i16(compress(x).decompress()), _i16(x)) and len(maps) <= 1


def test_decompress_into_a_reused_buffer():
    x = weights(600).reshape(20, 30)
    c = compress(x)
    buf = torch.full((600,), 7.0, dtype=torch.bfloat16)
    y = c.decompress(out=buf)
    assert y.data_ptr() == buf.data_ptr() and y.shape == (20, 30)
    assert torch.equal(_i16(y), _i16(x))


def test_rans_decodes_any_chunk_range_on_its_own():
    sym = np.clip(np.random.default_rng(7).normal(110, 3, 1000), 0, 255).astype(np.uint8)
    stream = rans.encode(sym, chunk_size=64)  # 16 chunks, the last one 40 symbols long
    for first, last in [(0, 1), (3, 7), (15, 16), (10, None)]:
        stop = 1000 if last is None else min(1000, 64 * last)
        assert np.array_equal(rans.decode(stream, first, last), sym[64 * first:stop])


@pytest.mark.parametrize("k,block,chunk", [(7, None, 40), (3, 32, 48), (0, None, 12), (1, 64, 1024), (7, None, 96)])
def test_chunk_sizes_round_up_and_chunks_decode_on_their_own(k, block, chunk):
    from core.neuzip import pairs

    x = weights(5000, seed=chunk)
    c = compress(x, mantissa_bits=k, block_size=block, chunk_size=chunk)
    assert c.exponents.chunk_size == -(-chunk // 32) * 32  # a multiple of 32 weights (whole rounds of 16 pairs)
    whole = pairs.decode(c.exponents)
    parts = [pairs.decode(c.exponents, i, i + 1) for i in range(c.exponents.num_chunks)]
    assert np.array_equal(np.concatenate(parts), whole)
    if k == 7:
        assert torch.equal(_i16(c.decompress()), _i16(x))


def all_bf16():
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def test_lossless_round_trip_of_every_bf16_pattern():
    x = all_bf16()
    for chunk in (None, 1024):
        c = compress(x, chunk_size=chunk)
        assert torch.equal(_i16(c.decompress()), _i16(x))


@pytest.mark.parametrize("k,block", [(3, None), (1, 32), (3, 1024)])
def test_cpu_decoder_matches_the_torch_twins_on_every_bf16_pattern(k, block):
    """The numba merge + normaliser against kernels.neuzip_bits.merge_bf16_ref + normaliser.denormalise."""
    x = all_bf16()
    c = compress(x, mantissa_bits=k, block_size=block, chunk_size=4096)
    assert torch.equal(_i16(c.decompress().reshape(-1)), _i16(c._decode_on_device(torch.device("cpu"))))


@pytest.mark.parametrize("k", [0, 1, 3])
def test_cpu_merge_of_ragged_chunks_matches_the_torch_twin(k):
    """Chunks of 96 and a last one of 81 weights: the per-byte merge and its tail (81 = 8 * 10 + 1 = 4 * 20 + 1 = 2 * 40 + 1)."""
    x = all_bf16()[12345:13386]
    c = compress(x, mantissa_bits=k, chunk_size=96)
    assert torch.equal(_i16(c.decompress().reshape(-1)), _i16(c._decode_on_device(torch.device("cpu"))))


@pytest.mark.parametrize("k", [0, 1, 3, 7])
def test_cpu_split_matches_the_torch_twin_on_every_bf16_pattern(k):
    from core.neuzip.codec import split_fields
    from kernels.neuzip_bits import split_bf16_ref

    x = all_bf16()
    exponent, fields, _ = split_fields(x, k, None)
    want_exponent, want_fields = split_bf16_ref(x, k)
    assert torch.equal(exponent, want_exponent) and torch.equal(fields, want_fields)


def test_decompress_into_a_strided_out():
    x = weights(600).reshape(20, 30)
    c = compress(x)
    buf = torch.zeros(30, 20, dtype=torch.bfloat16).t()  # not contiguous
    y = c.decompress(out=buf)
    assert torch.equal(_i16(y.contiguous()), _i16(x)) and torch.equal(_i16(buf.contiguous()), _i16(x))


@pytest.mark.parametrize("k,block", [(7, None), (3, 64)])
def test_device_decode_path_matches_cpu_path(k, block):
    """The path CUDA tensors take (kernel ops; here their PyTorch twins) gives the same bits."""
    x = weights(3000, seed=11).reshape(30, 100)
    c = compress(x, mantissa_bits=k, block_size=block, chunk_size=256)
    assert torch.equal(_i16(c._decode_on_device(torch.device("cpu"))), _i16(c.decompress().reshape(-1)))
