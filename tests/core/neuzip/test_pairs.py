"""Format-3 exponent streams (pairs, 8 interleaved 64-bit rANS states, two pairs per refill): the fast numba
coder against the plain reference decoder, integer frequency tables, sizes against the entropy, escapes,
the pad pairs of the last round and corrupt streams."""
from dataclasses import replace

import numpy as np
import pytest

from core.neuzip import pairs
from core.neuzip.measure import entropy_bits


def exponents(n, seed=0, spread=2.5, escapes=0):
    rng = np.random.default_rng(seed)
    e = np.clip(rng.normal(118, spread, n), 0, 255).astype(np.uint8)
    if escapes:
        e[rng.choice(n, escapes, replace=False)] = rng.integers(0, 256, escapes)
    return e


@pytest.mark.parametrize("n,chunk,escapes", [(1, 32, 0), (2, 32, 0), (33, 32, 3), (47, 96, 3), (1000, 64, 40),
                                             (5001, 1024, 500), (4096, 4096, 0), (70_001, 1 << 17, 2000)])
def test_round_trip_and_reference(n, chunk, escapes):
    e = exponents(n, n, escapes=escapes)
    s = pairs.encode(e, chunk_size=chunk)
    assert s.states.shape == (-(-n // chunk), pairs.LANES)
    assert np.array_equal(pairs.decode(s), e)
    if n <= 10_000:
        assert np.array_equal(pairs.decode_reference(s), e)


def test_every_byte_and_a_single_symbol():
    every = np.arange(256, dtype=np.uint8).repeat(5)  # 241 of the 256 bytes escape
    one = np.full(999, 7, np.uint8)                   # one pair takes all 2**15 slots
    for e in (every, one):
        s = pairs.encode(e, chunk_size=256)
        assert np.array_equal(pairs.decode(s), e)
        assert np.array_equal(pairs.decode_reference(s), e)
    assert pairs.encode(one).words.size == 0  # a certain symbol costs nothing


def test_pair_frequencies_known_answers():
    # weights 9, 3, 3, 1 of 16 -> exactly 144, 48, 48, 16 of 256
    assert pairs.pair_frequencies(np.array([3, 1]), 8).tolist() == [144, 48, 48, 16]
    f = pairs.pair_frequencies(np.array([1000, 1, 0]), 12)  # absent index: no pairs; rare pairs >= 1
    assert f.sum() == 4096 and f[[2, 5, 6, 7, 8]].tolist() == [0, 0, 0, 0, 0] and f[[1, 3, 4]].min() == 1
    rng = np.random.default_rng(0)
    for _ in range(20):
        c = rng.integers(0, 65536, 16) * (rng.random(16) < 0.8)
        c[0] = max(c[0], 1)
        for precision in (10, 15, 16):
            f = pairs.pair_frequencies(c, precision)
            present = np.outer(c, c).reshape(-1) > 0
            assert f.sum() == 1 << precision and f[present].min() >= 1 and not f[~present].any()


def test_size_within_a_hair_of_the_entropy():
    e = exponents(1 << 20, 3, spread=2.0, escapes=50)
    s = pairs.encode(e)
    h = entropy_bits(np.bincount(e, minlength=256))
    bits = 8 * s.nbytes / e.size
    assert h < bits < h + 0.006 + 8 * 50 / e.size  # quantization + headers, plus the escaped bytes


def test_table_keeps_the_fifteen_most_frequent():
    e = np.repeat(np.arange(20, dtype=np.uint8), np.arange(20, 0, -1) * 10)
    t = pairs.build_table(e)
    assert t.symbols.tolist() == list(range(15)) and t.counts[-1] == 10 * (5 + 4 + 3 + 2 + 1)
    assert pairs.build_table(np.full(10**6, 3, np.uint8)).counts.max() < 2**16  # scaled to fit uint16
    with pytest.raises(ValueError, match="precision"):  # a constant of the format
        replace(t, precision=12).validate()


@pytest.mark.parametrize("first,last", [(0, 1), (3, 7), (15, 16), (10, None)])
def test_any_chunk_range_decodes_on_its_own(first, last):
    e = exponents(1000, 7, escapes=30)
    s = pairs.encode(e, chunk_size=64)  # 16 chunks, the last one 40 long
    stop = 1000 if last is None else min(1000, 64 * last)
    assert np.array_equal(pairs.decode(s, first, last), e[64 * first:stop])


def test_corrupt_streams_are_detected_without_reading_out_of_bounds():
    e = exponents(5000, 2, escapes=20)
    s = pairs.encode(e, chunk_size=1024)
    words = s.words.copy()
    words[10] ^= 0x5555
    bad = replace(s, words=words)
    for decode in (pairs.decode, pairs.decode_reference):
        with pytest.raises(ValueError, match="corrupt"):
            decode(bad)
    states = s.states.copy()
    states[2, 3] ^= 1 << 20
    with pytest.raises(ValueError, match="corrupt"):
        pairs.decode(replace(s, states=states))
    moved = s.escape_offsets.copy()
    moved[1:-1] += 1  # escapes shifted from chunk to chunk
    for decode in (pairs.decode, pairs.decode_reference):
        with pytest.raises(ValueError, match="corrupt"):
            decode(replace(s, escape_offsets=moved))
    # a stream cut short: the offsets say so before decoding
    with pytest.raises(ValueError, match="offsets"):
        pairs.decode(replace(s, words=s.words[:-5]))
    # offsets shifted to the very end: the decoder runs out of words, reads nothing past them, fails cleanly
    short = np.zeros_like(s.offsets)
    short[-1] = s.words.size
    short[1:-1] = s.words.size - 1
    with pytest.raises(ValueError, match="corrupt"):
        pairs.decode(replace(s, offsets=short))


def test_escapes_and_the_marker():
    e = np.repeat(np.arange(40, dtype=np.uint8), 50)  # 25 of the 40 bytes escape, the marker among them
    s = pairs.encode(e, chunk_size=512)
    assert s.table.marker == 15 and s.escapes.size == 25 * 50 and 15 in s.escapes
    assert np.array_equal(pairs.decode(s), e) and np.array_equal(pairs.decode_reference(s), e)
    assert np.array_equal(np.diff(s.escape_offsets.astype(np.int64)),
                          [np.sum(e[i:i + 512] >= 15) for i in range(0, e.size, 512)])


@pytest.mark.parametrize("kwargs", [dict(chunk_size=24), dict(chunk_size=0), dict(chunk_size=8), dict(chunk_size=48)])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        pairs.encode(exponents(100), **kwargs)


def test_states_and_the_pad_pair():
    e = exponents(3 * 64 + 2, 5)  # 3 full chunks of 2 rounds, then 1 pair padded to a round of 16
    s = pairs.encode(e, chunk_size=64)
    assert s.states.dtype == np.uint64 and s.words.dtype == np.uint32
    assert ((s.states >= 2**31) & (s.states < 2**63)).all()
    f = s.table.frequencies
    assert f[s.table.pad_pair] == f.max() and s.table.pad_pair == int(np.flatnonzero(f == f.max())[0])
    # the pad pairs cost about -log2(p) bits each: the ragged chunk is cheaper with them than with pair 0
    assert np.array_equal(pairs.decode(s), e) and np.array_equal(pairs.decode_reference(s), e)


def test_a_state_takes_two_pairs_between_refills():
    """Known answer: two equally frequent exponents make 4 pairs of exactly 2 bits. A state gains 4 bits per
    round from 2**31; before the round that would take it past 2**63 (it is >= 2**33 f1 f2 = 2**59 after 7
    rounds, then every 8) it moves one 32-bit word out."""
    e = np.random.default_rng(1).permutation(np.repeat(np.array([118, 119], np.uint8), 2048))
    s = pairs.encode(e, chunk_size=e.size)
    f = s.table.frequencies
    assert sorted(f[f > 0].tolist()) == [2**13] * 4  # 4 pairs of 2 bits each at precision 15
    rounds = e.size // 2 // pairs.ROUND  # 128
    assert s.words.size == pairs.LANES * (rounds // 8)
    assert ((s.states >= 2**31) & (s.states < 2**35)).all()
    assert np.array_equal(pairs.decode(s), e) and np.array_equal(pairs.decode_reference(s), e)
