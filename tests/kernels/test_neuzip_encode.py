"""The NeuZip encoder on the device (kernels.neuzip_encode): its Triton kernel (under TRITON_INTERPRET=1) and its
PyTorch twin against the numba encoder that defines format 3, byte for byte, on hand-made, random and real
(SmolLM2-135M) exponents; the decoders' tables it builds; a stream that outgrows its buffers writes nothing; and no
host sync anywhere (the meta device stands in for a GPU)."""
import numpy as np
import pytest
import torch

from core.neuzip import pairs
from tests.syncs import HostSyncs
from kernels.dispatch import triton_available
from kernels.neuzip_encode import encode_stream, pair_rans_encode_ref, pair_rans_encode_triton
from kernels.neuzip_rans import pair_rans_decode_ref

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton not installed")


def _exponents(n, seed=0, escapes=0):
    rng = np.random.default_rng(seed)
    e = np.clip(rng.normal(118, 2.5, n), 0, 255).astype(np.uint8)
    if escapes:
        e[rng.choice(n, escapes, replace=False)] = rng.integers(0, 256, escapes)
    return e


def _skewed():
    """One exponent 100,000 times, sixteen others 3 times each: the counts are scaled down (the largest above
    2**16 - 1) and the pair frequencies bumped to 1 exceed 2**15, so the excess is taken back (the remainder rule's
    other branch: a deficit handed out, as random exponents give)."""
    return np.concatenate([np.full(100_000, 120), np.arange(100, 116).repeat(3)]).astype(np.uint8)


def _buffers(n, words=None, escapes=None):
    return (torch.full((n + 8 if words is None else words + 1,), -7, dtype=torch.int32),
            torch.full((n + 1 if escapes is None else escapes + 1,), 3, dtype=torch.uint8))


def assert_same_stream(out, words, escapes, stream):
    """The device encoder's arrays are the CPU encoder's, byte for byte; its decode tables are the CPU decoder's
    (plus the escape flags in bits 32 / 33)."""
    K = int(out["K"])
    assert bool(out["ok"])
    assert np.array_equal(out["symbols"][:K].numpy().astype(np.uint8), stream.table.symbols)
    assert np.array_equal(out["counts"][:K + 1].numpy().astype(np.uint16), stream.table.counts)
    assert np.array_equal(out["states"].numpy().view(np.uint64), stream.states)
    assert np.array_equal(out["offsets"].numpy(), stream.offsets.astype(np.int64))
    assert np.array_equal(words[:int(out["offsets"][-1])].numpy().view(np.uint32), stream.words)
    assert np.array_equal(out["escape_offsets"].numpy(), stream.escape_offsets.astype(np.int64))
    assert np.array_equal(escapes[:int(out["escape_offsets"][-1])].numpy(), stream.escapes)
    slot_pair, info = stream.table.cpu_tables()
    A = K + 1
    used = out["freq"][:A * A].numpy() > 0
    assert np.array_equal(out["slot_pair"].numpy(), slot_pair)
    assert np.array_equal((out["pair_info"][:A * A].numpy() & ~np.int64(3 << 32))[used], info[used])
    assert int(out["marker"]) == stream.table.marker and int(out["pad"]) == stream.table.pad_pair


CASES = [(1, 32, 0), (300, 64, 9), (641, 64, 30), (1000, 128, 0), (350, 352, 12), (5000, 256, 300)]


@pytest.mark.parametrize("n,chunk,escapes", CASES)
def test_the_twin_writes_the_cpu_encoders_stream(n, chunk, escapes):
    e = _exponents(n, n, escapes)
    words, esc = _buffers(n)
    out = encode_stream(torch.from_numpy(e), chunk, words, esc)
    assert_same_stream(out, words, esc, pairs.encode(e, chunk_size=chunk))


def test_scaled_counts_and_an_excess_of_bumped_pairs_are_handled_as_the_cpu_encoder_does():
    e = _skewed()
    words, esc = _buffers(e.size)
    out = encode_stream(torch.from_numpy(e), 4096, words, esc)
    stream = pairs.encode(e, chunk_size=4096)
    assert int(stream.table.counts.max()) == 2**16 - 1  # scaled
    assert_same_stream(out, words, esc, stream)


@needs_triton
@pytest.mark.parametrize("n,chunk,escapes,block", [(1, 32, 0, 4), (641, 64, 30, 4),
                                                   pytest.param(350, 352, 12, 1, marks=pytest.mark.slow),
                                                   pytest.param(5000, 256, 300, 8, marks=pytest.mark.slow)])
def test_the_kernel_equals_the_twin_bit_for_bit(n, chunk, escapes, block):
    e = torch.from_numpy(_exponents(n, n + 1, escapes))
    words, esc = _buffers(n)
    table = encode_stream(e, chunk, words, esc)
    args = (e, table["lookup"], table["freq"], table["cdf"], table["alpha"], table["pad"], n, chunk)
    mine = torch.zeros_like(words)
    states, offsets = pair_rans_encode_triton(*args, mine, block=block)
    assert torch.equal(states, table["states"]) and torch.equal(offsets, table["offsets"])
    total = int(offsets[-1])
    assert torch.equal(mine[:total], words[:total])


def _smollm2_exponents(count: int) -> np.ndarray | None:
    from safetensors import safe_open

    from core.zoo.loading import resolve

    try:
        _, folder = resolve("smollm2-135m")
    except Exception:
        return None
    if folder is None or not (folder / "model.safetensors").is_file():
        return None
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        w = f.get_slice("model.layers.3.mlp.up_proj.weight")[: -(-count // 576)].reshape(-1)[:count]
    bits = w.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    exponent, fields = np.empty(count, np.uint8), np.empty(count, np.uint8)
    pairs.split_into(bits, 7, exponent, fields)
    return exponent


@needs_triton
@pytest.mark.slow
def test_real_weights_slice_byte_for_byte():
    """65,536 weights of SmolLM2-135M (layer 3's up_proj, in bf16) in chunks of 1,024 (the decode's segment on a
    GPU): the twin and the kernel write the CPU encoder's stream."""
    e = _smollm2_exponents(1 << 16)
    if e is None:
        pytest.skip("smollm2-135m not prepared (python -m core models prepare)")
    stream = pairs.encode(e, chunk_size=1024)
    words, esc = _buffers(e.size, words=stream.words.size + 64, escapes=stream.escapes.size + 8)
    t = torch.from_numpy(e)
    out = encode_stream(t, 1024, words, esc)
    assert_same_stream(out, words, esc, stream)
    mine = torch.zeros_like(words)
    states, offsets = pair_rans_encode_triton(t, out["lookup"], out["freq"], out["cdf"], out["alpha"], out["pad"],
                                              e.size, 1024, mine, block=64)
    assert torch.equal(states, out["states"]) and torch.equal(mine[:stream.words.size], words[:stream.words.size])


def test_the_stream_decodes_with_the_device_tables_and_no_marker():
    """The tables built on the device flag the escapes in pair_info, so the decode needs no host marker."""
    e = _exponents(641, 5, escapes=40)
    words, esc = _buffers(e.size)
    out = encode_stream(torch.from_numpy(e), 64, words, esc)
    got = pair_rans_decode_ref(out["states"], out["offsets"], words, out["slot_pair"], out["pair_info"], esc,
                               out["escape_offsets"], None, e.size, 64, 15)
    assert np.array_equal(got.numpy(), e)


@pytest.mark.parametrize("short", ["words", "escapes"])
def test_a_stream_that_outgrows_its_buffers_writes_nothing(short):
    e = _exponents(641, 7, escapes=40)
    stream = pairs.encode(e, chunk_size=64)
    caps = {"words": stream.words.size - 1, "escapes": stream.escapes.size - 1}
    words, esc = _buffers(e.size, **{short: caps[short]})
    before = (words.clone(), esc.clone())
    out = encode_stream(torch.from_numpy(e), 64, words, esc)
    assert not bool(out["ok"])
    assert torch.equal(words[:-1], before[0][:-1]) and torch.equal(esc[:-1], before[1][:-1])
    words, esc = _buffers(e.size, words=stream.words.size, escapes=stream.escapes.size)  # exactly enough
    assert bool(encode_stream(torch.from_numpy(e), 64, words, esc)["ok"])


@pytest.mark.slow
def test_no_host_sync_on_the_meta_device():
    """Every size is known from n and the chunk: the encoder reads nothing back (0 syncs), whatever the data."""
    n = 600
    e = torch.empty(n, dtype=torch.uint8, device="meta")
    words = torch.empty(n + 1, dtype=torch.int32, device="meta")
    esc = torch.empty(n + 1, dtype=torch.uint8, device="meta")
    with HostSyncs(answer=True) as syncs:
        out = encode_stream(e, 64, words, esc)
    assert syncs.count == 0, syncs.report()
    assert out["states"].shape == (-(-n // 64), 8) and out["ok"].shape == ()


def test_bad_arguments():
    e = torch.from_numpy(_exponents(100))
    words, _ = _buffers(100)
    table = encode_stream(e, 64, *_buffers(100))
    args = (table["lookup"], table["freq"], table["cdf"], table["alpha"], table["pad"], 100)
    with pytest.raises(ValueError, match="chunk_size"):
        pair_rans_encode_ref(e, *args, 48, words)
    with pytest.raises(ValueError, match="int32"):
        pair_rans_encode_ref(e, *args, 64, words.to(torch.int64))
    with pytest.raises(ValueError, match="uint8"):
        pair_rans_encode_ref(e.to(torch.int32), *args, 64, words)
