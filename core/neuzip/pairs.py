"""Format 3 of the NeuZip exponent stream: pairs of exponents rANS-coded in big chunks, 8 interleaved
64-bit states that each decode two pairs per refill.

Why this shape (measured on this 2-core CPU, 1 thread; see the README):
exponents take ~2.6 bits each, so coding a *pair* of exponents as one symbol halves the decode steps;
8 rANS states interleaved over one word stream let the CPU overlap 8 table lookups (1.9 GB/s of bf16
out, against 0.6 GB/s for 4 states decoded one after another); escaped exponents kept out of the
rANS stream (a marker, patched afterwards) save a test per pair (+20 %); chunks of 2**17 weights cost
~72 bytes each (~0.004 bits per weight, against 0.063 for format 1's 1,024-weight chunks). Format 3
widens format 2's 32-bit states (16-bit words, a refill test after every pair) to 64 bits with 32-bit
words: a state takes two pairs (at most 30 bits) between refill tests, which removes half of the
refill work and made the decode loop 1.3x faster (0.73 -> 0.55 ns per weight) for +0.001 bits per weight.

Format ("rans64x32-pairs", codec format 3)
------------------------------------------
- Alphabet. ``symbols (K,) uint8``: the ``K <= 15`` most frequent exponent bytes, ascending. Index
  ``a in [0, K)`` stands for ``symbols[a]``; index ``K`` is the *escape*: any other byte, whose value
  is the next byte of ``escapes``. ``A = K + 1``. The *marker* is the smallest byte not in
  ``symbols`` (what an escape decodes to before it is patched).
- Table. ``counts (A,) uint16``: how often each index occurs (escape last; scaled down so that every
  count is below ``2**16``; a present index keeps a count >= 1). The pair ``(a, b)`` gets the
  weight ``counts[a] * counts[b]`` and an integer frequency ``freq[a * A + b]`` from
  :func:`pair_frequencies` (integers only, so encoder and decoder agree bit for bit), all present
  pairs >= 1, summing to ``M = 2**precision``, ``precision = 15`` (a constant of the format: the
  CPU decoder is compiled for it).
  ``cdf`` is the running sum of ``freq`` in pair-index order.
- Pairs. Exponent ``2 i`` and ``2 i + 1`` form pair ``i`` (an odd count is padded with index 0,
  decoded and dropped). Chunk ``c`` holds weights ``[c * chunk_size, (c + 1) * chunk_size)``
  (``chunk_size`` a multiple of 32; the last chunk may be shorter). A chunk's ``m`` pairs are
  padded to whole *rounds* of 16 with the *pad pair* (the most frequent pair, the lowest index on a
  tie), decoded and dropped.
- States. Each chunk has ``LANES = 8`` rANS states (``2**31 <= x < 2**63``), ``states (C, 8)
  uint64``, and one stream of 32-bit words ``words[offsets[c]:offsets[c + 1]]`` (``offsets (C + 1,)
  uint32``) shared by the 8 states. Round ``r`` of a chunk decodes pairs ``16 r + j`` (``j < 16``)
  with state ``j % 8``, then refills the states in order 0..7::

      for j in 0..15:  slot = x[j % 8] & (M - 1);  (a, b) = the pair with cdf <= slot < cdf + freq
                       x[j % 8] = freq * (x[j % 8] >> precision) + slot - cdf
      for i in 0..7:   if x[i] < 2**31: x[i] = (x[i] << 32) | words[p]; p += 1

  and a well-formed chunk ends with every state at ``2**31`` and ``p == offsets[c + 1]`` (checked).
  The encoder runs each chunk backwards from states ``2**31`` (:func:`encode`); before it encodes a
  state's two pairs of a round (frequencies ``f1``, ``f2``) it moves 32 bits out when ``x >=
  2**33 f1 f2``, so both decode steps and one refill bring the state back into ``[2**31, 2**63)``.
- Escapes. ``escapes (E,) uint8``: the escaped exponents in order, chunk ``c``'s at
  ``escapes[escape_offsets[c]:escape_offsets[c + 1]]`` (``escape_offsets (C + 1,) uint32``).
- Stored: every array, but of ``offsets`` and ``escape_offsets`` only the ``C - 1`` inner entries
  (the first is 0, the last the array's length).

Cost beyond the order-0 exponent entropy: the frequency quantization (~0.003 bits per exponent at
precision 15), ~72 bytes per chunk (64 bytes of states; the states' initial 31 bits are not used),
the pad pairs of the last round (~2 bits each), ``K + 2 A`` bytes of table per tensor, escapes (8 raw
bits for exponents outside the 15 most frequent: about 1 in 10**4 weights).

:func:`decode_into` decodes chunk by chunk into a small scratch buffer and merges straight into the
bf16 output (``nogil``: a thread can decode while torch computes). :func:`decode_reference` is the
same format written as plainly as possible (Python ints, one pair at a time) and is what the tests
hold the fast decoder and the kernels to. :func:`decode_format2` reads format 2 (32-bit states, 16-bit
words, a refill test after every pair) for converting old files.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["LANES", "ROUND", "CHUNK_MULTIPLE", "PRECISION", "DEFAULT_CHUNK", "MAX_DIRECT", "PairTable",
           "PairStream", "pair_frequencies", "build_table", "encode", "decode", "decode_into", "decode_reference",
           "decode_format2", "decode_table", "kernel_args", "stream_arrays", "split_into", "round_chunk_size"]

LANES = 8
ROUND = 2 * LANES  # pairs per round: each state decodes two, then refills once
CHUNK_MULTIPLE = 2 * ROUND  # weights per chunk are a multiple of this (whole rounds)
PRECISION = 15  # table precision of format 3 (compiled into the CPU decoder)
DEFAULT_CHUNK = 1 << 17  # weights per chunk
MAX_DIRECT = 15  # exponents coded directly; the rest escape
_L = 1 << 31  # lower end of a state
_SHIFT = 32  # bits per word
_MAX_COUNT = (1 << 16) - 1


@dataclass(frozen=True)
class PairTable:
    """``symbols (K,) uint8`` (ascending) and ``counts (K + 1,) uint16`` (escapes last), ``precision``."""

    symbols: np.ndarray
    counts: np.ndarray
    precision: int

    @property
    def alphabet(self) -> int:
        """``A = K + 1`` (the escape included)."""
        return int(self.symbols.size) + 1

    @functools.cached_property
    def frequencies(self) -> np.ndarray:
        """:func:`pair_frequencies` of the counts, ``(A * A,) int64`` (computed once)."""
        return pair_frequencies(self.counts, self.precision)

    @functools.cached_property
    def cdf(self) -> np.ndarray:
        """The running sum of :attr:`frequencies` before each pair, ``(A * A,) int64`` (computed once)."""
        return np.concatenate([[0], np.cumsum(self.frequencies)[:-1]]).astype(np.int64)

    @functools.cached_property
    def pad_pair(self) -> int:
        """The pair index that pads a chunk to whole rounds: the most frequent pair (the lowest index
        on a tie)."""
        return int(np.argmax(self.frequencies))

    @functools.cached_property
    def marker(self) -> int:
        """The smallest byte not in ``symbols``: what an escape decodes to before it is patched."""
        used = set(self.symbols.tolist())
        return next(b for b in range(256) if b not in used)

    def cpu_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The CPU decoder's ``slot_pair (2**precision,) uint8`` and ``info (A * A,) int64`` (built
        per call: 32 KB, ~10 us)."""
        return _cpu_tables(self.frequencies, self._decoded, np.int64(self.alphabet), self.precision)

    @functools.cached_property
    def _decoded(self) -> np.ndarray:
        """The byte each index decodes to (the marker for the escape): ``(A,) int64``."""
        return np.append(self.symbols.astype(np.int64), self.marker)

    def validate(self) -> None:
        """Raise ValueError when the table cannot be well formed."""
        if self.precision != PRECISION:
            raise ValueError(f"corrupt table: precision {self.precision} (formats 2 and 3 use {PRECISION})")
        sym = self.symbols.astype(np.int64)
        if sym.size > MAX_DIRECT or np.any(np.diff(sym) <= 0) or self.counts.size != sym.size + 1:
            raise ValueError("corrupt table: symbols / counts")
        c = self.counts.astype(np.int64)
        if c.sum() <= 0 or c.max() > _MAX_COUNT or np.any(c[:-1] == 0):
            raise ValueError("corrupt table: counts")
        if int(np.count_nonzero(c)) ** 2 > 1 << self.precision:
            raise ValueError("corrupt table: more pairs than slots")

    @property
    def nbytes(self) -> int:
        return int(self.symbols.nbytes + self.counts.nbytes)


def pair_frequencies(counts: np.ndarray, precision: int) -> np.ndarray:
    """Integer pair frequencies ``(A * A,) int64`` summing to ``2**precision`` (integers only).

    ``freq[a * A + b]`` is ``floor(M w / W)`` (at least 1 for a present pair) with ``w = counts[a] *
    counts[b]``, ``W = sum(w)``; the remainder goes one by one to the largest ``(M w) mod W`` (ties: the
    lower index); an excess is taken back from the largest frequencies (ties: the lower index).
    """
    c = np.asarray(counts, dtype=np.int64)
    m = 1 << precision
    w = np.outer(c, c).reshape(-1)
    total = int(w.sum())
    present = w > 0
    f = np.where(present, np.maximum(1, (w * m) // total), 0)
    deficit = m - int(f.sum())
    if deficit > 0:
        rem = (w * m) % total
        idx = np.nonzero(present)[0]
        order = idx[np.lexsort((idx, -rem[idx]))]
        f[order[:deficit]] += 1
    while deficit < 0:
        idx = np.nonzero(f > 1)[0]
        order = idx[np.lexsort((idx, -f[idx]))]
        for i in order:
            take = min(int(f[i]) - 1, -deficit, max(1, int(f[i]) // 2))
            f[i] -= take
            deficit += take
            if deficit == 0:
                break
    return f


def build_table(exponents: np.ndarray) -> PairTable:
    """The table for ``exponents (n,) uint8``: the 15 most frequent bytes and scaled counts."""
    counts = np.bincount(exponents, minlength=256).astype(np.int64)
    order = np.lexsort((np.arange(256), -counts))[:MAX_DIRECT]
    symbols = np.sort(order[counts[order] > 0])
    c = np.append(counts[symbols], counts.sum() - counts[symbols].sum())
    top = int(c.max())
    if top > _MAX_COUNT:  # scale down, keeping every present index >= 1
        c = np.where(c > 0, np.maximum(1, (c * _MAX_COUNT) // top), 0)
    return PairTable(symbols.astype(np.uint8), c.astype(np.uint16), PRECISION)


@dataclass(frozen=True)
class PairStream:
    """An encoded exponent stream: ``table``, ``states (C, 8) uint64``, ``offsets (C + 1,) uint32``,
    ``words (W,) uint32``, ``escapes (E,) uint8``, ``escape_offsets (C + 1,) uint32``, ``n``
    exponents, ``chunk_size`` weights per chunk."""

    table: PairTable
    states: np.ndarray
    offsets: np.ndarray
    words: np.ndarray
    escapes: np.ndarray
    escape_offsets: np.ndarray
    n: int
    chunk_size: int

    @property
    def num_chunks(self) -> int:
        return -(-self.n // self.chunk_size)

    def validate(self) -> None:
        """Structural checks (no decoding); ValueError when the stream cannot be well formed."""
        self.table.validate()
        if self.n < 1 or self.chunk_size < CHUNK_MULTIPLE or self.chunk_size % CHUNK_MULTIPLE:
            raise ValueError("corrupt stream: bad length or chunk size")
        if self.states.dtype != np.uint64 or self.words.dtype != np.uint32:
            raise ValueError("corrupt stream: states must be uint64 and words uint32 (format 3)")
        num = self.num_chunks
        if self.states.shape != (num, LANES) or self.offsets.shape != (num + 1,) \
                or self.escape_offsets.shape != (num + 1,):
            raise ValueError("corrupt stream: wrong number of chunks")
        if np.any(self.states < _L) or np.any(self.states >= np.uint64(1 << 63)):
            raise ValueError("corrupt stream: a state outside [2**31, 2**63)")
        _check_offsets(self.offsets, self.words, self.escape_offsets, self.escapes, "stream")

    @property
    def nbytes(self) -> int:
        """Bytes stored: every array, table included; of the two offset arrays only the ``C - 1``
        inner entries (the first is 0, the last the array's length)."""
        inner = 2 * 4 * max(0, self.num_chunks - 1)
        return int(self.table.nbytes + self.states.nbytes + inner + self.words.nbytes + self.escapes.nbytes)


def _check_offsets(offsets: np.ndarray, words: np.ndarray, escape_offsets: np.ndarray, escapes: np.ndarray,
                   what: str) -> None:
    """ValueError unless both chunk offset arrays start at 0, never decrease and end at their array's length."""
    for o, size in ((offsets, words.size), (escape_offsets, escapes.size)):
        o = o.astype(np.int64)
        if o[0] != 0 or np.any(np.diff(o) < 0) or o[-1] != size:
            raise ValueError(f"corrupt {what}: bad chunk offsets")


def round_chunk_size(chunk_size: int) -> int:
    """``chunk_size`` rounded up to a multiple of :data:`CHUNK_MULTIPLE` (whole rounds)."""
    return -(-int(chunk_size) // CHUNK_MULTIPLE) * CHUNK_MULTIPLE


# ------------------------------------------------------------------------------------------ encoder

@numba.njit(nogil=True, cache=True)
def _encode_chunks(pair_index, pad, freq, cdf, chunk_pairs, states, counts, words):
    """Encode pair indices ``(m,)`` chunk by chunk, backwards, each chunk padded with ``pad`` to whole
    rounds. Writes ``states (C, 8)``, ``counts (C,)`` words per chunk and the words (in decoding order) to
    ``words``; returns their number."""
    m = pair_index.size
    total = 0
    x = np.empty(LANES, np.int64)
    for c in range(states.shape[0]):
        lo = c * chunk_pairs
        hi = min(m, lo + chunk_pairs)
        rounds = (hi - lo + ROUND - 1) // ROUND
        x[:] = _L
        start = total
        for r in range(rounds - 1, -1, -1):
            for j in range(LANES - 1, -1, -1):  # the refills of a round, undone in reverse
                i = lo + r * ROUND + j
                a = pair_index[i] if i < hi else pad
                b = pair_index[i + LANES] if i + LANES < hi else pad
                fa, fb = freq[a], freq[b]
                xx = x[j]
                if (xx >> (2 * _SHIFT - 1 - 2 * PRECISION)) >= fa * fb:  # x >= 2**33 fa fb (no overflow)
                    words[total] = xx & 0xFFFFFFFF
                    total += 1
                    xx >>= _SHIFT
                xx = ((xx // fb) << PRECISION) + (xx % fb) + cdf[b]
                x[j] = ((xx // fa) << PRECISION) + (xx % fa) + cdf[a]
        words[start:total] = words[start:total][::-1].copy()
        states[c, :] = x
        counts[c] = total - start
    return total


def encode(exponents: np.ndarray, chunk_size: int | None = None, table: PairTable | None = None) -> PairStream:
    """Entropy-code exponent bytes ``(n,) uint8`` (n >= 1) in format 3.

    Parameters
    ----------
    chunk_size : weights per chunk, a positive multiple of 32 (default :data:`DEFAULT_CHUNK`; smaller
        chunks give a GPU more independent lanes at ~72 bytes each)
    table : a table to use instead of the exponents' own
    """
    e = np.ascontiguousarray(exponents, dtype=np.uint8).reshape(-1)
    n = e.size
    if n == 0:
        raise ValueError("cannot encode an empty stream")
    chunk_size = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    if chunk_size < CHUNK_MULTIPLE or chunk_size % CHUNK_MULTIPLE:
        raise ValueError(f"chunk_size must be a positive multiple of {CHUNK_MULTIPLE}, got {chunk_size}")
    table = build_table(e) if table is None else table
    table.validate()
    alpha = table.alphabet
    lookup = np.full(256, alpha - 1, np.int64)
    lookup[table.symbols] = np.arange(table.symbols.size)
    freq, cdf = table.frequencies, table.cdf
    num = -(-n // chunk_size)
    pair_index = np.empty((n + 1) // 2, np.int64)
    escapes = np.empty(n, np.uint8)
    escape_counts = np.zeros(num, np.int64)
    used = np.zeros(freq.size, np.int64)
    n_escapes = _pair_indices(e, lookup, alpha, chunk_size, pair_index, escapes, escape_counts, used)
    if np.any(freq[used > 0] == 0):
        raise ValueError("the table does not cover every exponent")
    states = np.empty((num, LANES), np.int64)
    counts = np.empty(num, np.int64)
    words = np.empty(pair_index.size + (ROUND + LANES) * num + LANES, np.uint32)  # < 1 word per pair
    total = _encode_chunks(pair_index, table.pad_pair, freq, cdf, chunk_size // 2, states, counts, words)
    offsets = np.zeros(num + 1, np.uint32)
    np.cumsum(counts, out=offsets[1:])
    escape_offsets = np.zeros(num + 1, np.uint32)
    np.cumsum(escape_counts, out=escape_offsets[1:])
    return PairStream(table, states.astype(np.uint64), offsets, words[:total].copy(),
                      escapes[:n_escapes].copy(), escape_offsets, n, chunk_size)


@numba.njit(nogil=True, cache=True)
def _pair_indices(e, lookup, alpha, chunk_size, pair_index, escapes, escape_counts, used):
    """One pass over the exponents: pair indices (an odd count padded with index 0), the escaped bytes
    in order, escapes per chunk and how often each pair occurs. Returns the number of escapes."""
    n = e.size
    q = 0
    for i in range(n):
        a = lookup[e[i]]
        if a == alpha - 1:
            escapes[q] = e[i]
            q += 1
            escape_counts[i // chunk_size] += 1
        if i % 2 == 0:
            pair_index[i // 2] = a * alpha
        else:
            pair_index[i // 2] += a
    for j in range(pair_index.size):
        used[pair_index[j]] += 1
    return q


@numba.njit(nogil=True, cache=True)
def split_into(bits, k, exponents, fields):
    """The numba twin of :func:`kernels.neuzip_bits.split_bf16_ref` (bit for bit, tested on all 65,536
    patterns): bf16 bits ``(n,) uint16`` -> exponent bytes ``exponents (n,) uint8`` and packed
    ``1 + k`` bit fields ``fields (ceil(n / P),) uint8`` (both written in place)."""
    width = k + 1
    per = 8 // width
    d = 7 - k
    fields[:] = 0
    for i in range(bits.size):
        b = np.int64(bits[i])
        mag = b & 0x7FFF
        if k < 7:
            exp = mag >> 7
            trunc = (mag >> d) << d
            rounded = ((mag + (1 << (d - 1)) - 1 + ((mag >> d) & 1)) >> d) << d
            if (rounded >> 7) == 255:
                rounded = trunc
            if exp == 255:
                if k >= 1 and (mag & 0x7F) != 0:
                    trunc |= 0x40
                rounded = trunc
            mag = rounded
        exponents[i] = mag >> 7
        field = ((b >> 15) << k) | ((mag >> d) & ((1 << k) - 1))
        fields[i // per] |= np.uint8(field << ((i % per) * width))


# ------------------------------------------------------------------------------------------ decoder

def decode_table(table: PairTable) -> np.ndarray:
    """The per-slot table of the GPU kernel, ``(2**precision,) int64``: bits 0-15 the frequency,
    16-31 ``slot - cdf``, 32-39 / 40-47 the two exponent bytes (the marker for an escape)."""
    return _decode_table(table.frequencies, table._decoded, np.int64(table.alphabet), table.precision)


@numba.njit(nogil=True, cache=True)
def _decode_table(freq, decoded, alpha, precision):
    out = np.empty(1 << precision, np.int64)
    slot = 0
    for s in range(freq.size):
        pair = decoded[s // alpha] | (decoded[s % alpha] << 8)
        for k in range(freq[s]):
            out[slot] = freq[s] | (k << 16) | (pair << 32)
            slot += 1
    return out


@numba.njit(nogil=True, cache=True)
def _cpu_tables(freq, decoded, alpha, precision):
    """The CPU decoder's two small tables: ``slot_pair (2**precision,) uint8``, the pair of each
    slot, and ``info (A * A,) int64``, per pair: bits 0-15 the frequency, 16-31 the two exponent
    bytes, 48-63 ``cdf`` (two L1-resident lookups beat one lookup in a 256 KB table: 1.95 against
    1.41 GB/s, measured)."""
    slot_pair = np.empty(1 << precision, np.uint8)
    info = np.empty(freq.size, np.int64)
    slot = 0
    for s in range(freq.size):
        pair = decoded[s // alpha] | (decoded[s % alpha] << 8)
        info[s] = freq[s] | (pair << 16) | (slot << 48)
        slot_pair[slot:slot + freq[s]] = s
        slot += freq[s]
    return slot_pair, info


@numba.njit(inline="always")
def _step(x, t):
    return (t & 0xFFFF) * (x >> PRECISION) + (x & ((1 << PRECISION) - 1)) - (t >> 48)


@numba.njit(inline="always")
def _refill(x, p, words):
    w = np.int64(words[np.uint64(p)])  # an unsigned index: no negative-index wrap-around test
    if x < _L:
        x = (x << _SHIFT) | w
        p += 1
    return x, p


@numba.njit(inline="always")
def _refill_checked(x, p, words):
    if x < _L:
        w = np.int64(words[np.uint64(p)]) if p < words.size else 0
        x = (x << _SHIFT) | w
        p += 1
    return x, p


@numba.njit(nogil=True, cache=True)
def _decode_chunk(words, p, x, slot_pair, info, pairs, rounds):
    """Decode ``rounds`` rounds (16 pairs each) of one chunk into ``pairs[:16 rounds]`` (uint16: first
    exponent in the low byte). ``x (8,)`` holds the states on entry and on exit; returns the word
    pointer. Reads never pass the end of ``words``, even for a corrupt stream (the caller checks the
    end states). Each pair's output is stored right after its lookup (fewer live registers: 3 % faster
    than storing a round's pairs at its end)."""
    mask = (1 << PRECISION) - 1
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    safe = words.size - LANES  # a round reads at most one word per state
    o = 0
    end = rounds * ROUND
    while o < end and p <= safe:
        t0 = info[slot_pair[x0 & mask]]
        pairs[o + 0] = np.uint16((t0 >> 16) & 0xFFFF)
        x0 = _step(x0, t0)
        t1 = info[slot_pair[x1 & mask]]
        pairs[o + 1] = np.uint16((t1 >> 16) & 0xFFFF)
        x1 = _step(x1, t1)
        t2 = info[slot_pair[x2 & mask]]
        pairs[o + 2] = np.uint16((t2 >> 16) & 0xFFFF)
        x2 = _step(x2, t2)
        t3 = info[slot_pair[x3 & mask]]
        pairs[o + 3] = np.uint16((t3 >> 16) & 0xFFFF)
        x3 = _step(x3, t3)
        t4 = info[slot_pair[x4 & mask]]
        pairs[o + 4] = np.uint16((t4 >> 16) & 0xFFFF)
        x4 = _step(x4, t4)
        t5 = info[slot_pair[x5 & mask]]
        pairs[o + 5] = np.uint16((t5 >> 16) & 0xFFFF)
        x5 = _step(x5, t5)
        t6 = info[slot_pair[x6 & mask]]
        pairs[o + 6] = np.uint16((t6 >> 16) & 0xFFFF)
        x6 = _step(x6, t6)
        t7 = info[slot_pair[x7 & mask]]
        pairs[o + 7] = np.uint16((t7 >> 16) & 0xFFFF)
        x7 = _step(x7, t7)
        t0 = info[slot_pair[x0 & mask]]
        pairs[o + 8] = np.uint16((t0 >> 16) & 0xFFFF)
        x0 = _step(x0, t0)
        t1 = info[slot_pair[x1 & mask]]
        pairs[o + 9] = np.uint16((t1 >> 16) & 0xFFFF)
        x1 = _step(x1, t1)
        t2 = info[slot_pair[x2 & mask]]
        pairs[o + 10] = np.uint16((t2 >> 16) & 0xFFFF)
        x2 = _step(x2, t2)
        t3 = info[slot_pair[x3 & mask]]
        pairs[o + 11] = np.uint16((t3 >> 16) & 0xFFFF)
        x3 = _step(x3, t3)
        t4 = info[slot_pair[x4 & mask]]
        pairs[o + 12] = np.uint16((t4 >> 16) & 0xFFFF)
        x4 = _step(x4, t4)
        t5 = info[slot_pair[x5 & mask]]
        pairs[o + 13] = np.uint16((t5 >> 16) & 0xFFFF)
        x5 = _step(x5, t5)
        t6 = info[slot_pair[x6 & mask]]
        pairs[o + 14] = np.uint16((t6 >> 16) & 0xFFFF)
        x6 = _step(x6, t6)
        t7 = info[slot_pair[x7 & mask]]
        pairs[o + 15] = np.uint16((t7 >> 16) & 0xFFFF)
        x7 = _step(x7, t7)
        x0, p = _refill(x0, p, words)
        x1, p = _refill(x1, p, words)
        x2, p = _refill(x2, p, words)
        x3, p = _refill(x3, p, words)
        x4, p = _refill(x4, p, words)
        x5, p = _refill(x5, p, words)
        x6, p = _refill(x6, p, words)
        x7, p = _refill(x7, p, words)
        o += ROUND
    x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7] = x0, x1, x2, x3, x4, x5, x6, x7
    while o < end:  # the last rounds, with checked reads
        for j in range(ROUND):
            t = info[slot_pair[x[j % LANES] & mask]]
            pairs[o + j] = np.uint16((t >> 16) & 0xFFFF)
            x[j % LANES] = _step(x[j % LANES], t)
        for j in range(LANES):
            x[j], p = _refill_checked(x[j], p, words)
        o += ROUND
    return p


@numba.njit(nogil=True, cache=True)
def _finish_chunk(x, p, p_end, pairs, count, escapes, q, q_end, marker, fields, scales, out, src, dst, k, block,
                  field_bits, exponents_out):
    """After :func:`_decode_chunk`: check the end states ``x`` and word pointer ``p``, patch the markers
    with the chunk's escaped bytes ``escapes[q:q_end]``, merge into ``out`` (bf16 bits) at ``dst`` when
    ``out.size``, and/or copy the exponent bytes to ``exponents_out[dst:]`` when its size is nonzero.
    Returns False for a corrupt chunk. (A separate call from the decode loop: compiled together, the loop
    runs 35 % slower.) When merging, the markers are counted per 256 weights inside the merge loop, so
    only windows with a marker are read again (one pass over the chunk instead of two)."""
    if p != p_end:
        return False
    for j in range(LANES):
        if x[j] != _L:
            return False
    exps = pairs.view(np.uint8)
    hits = np.zeros((count + 255) >> 8, np.int32)
    if out.size:
        _merge(exps, fields, out, src, dst, count, k, field_bits, marker, hits)
    elif q < q_end:
        _count_markers(exps, count, marker, hits)
    if q < q_end:
        for w in range(hits.size):
            if hits[w] == 0:
                continue
            for i in range(w << 8, min(count, (w + 1) << 8)):
                if exps[i] == marker:
                    if q == q_end:
                        return False
                    exps[i] = escapes[q]
                    if out.size:  # the exponent field is bits 7-14 of a bf16 value
                        out[dst + i] = (out[dst + i] & np.uint16(0x807F)) | (np.uint16(escapes[q]) << 7)
                    q += 1
    if q != q_end:
        return False
    if out.size and block > 0:
        _scale_blocks(out[dst:dst + count], scales, src, block)
    if exponents_out.size:
        exponents_out[dst:dst + count] = exps[:count]
    return True


def _decode_chunks(stream: PairStream, first: int, last: int, fields, scales, out, out_offset, k, block,
                   exponents_out) -> int:
    """Decode chunks ``[first, last)`` of ``stream``: merged into ``out`` (bf16 bits) and/or as exponent
    bytes into ``exponents_out``, both starting at weight ``out_offset``. Returns -1 when well formed,
    else the first bad chunk. Each call into numba releases the GIL."""
    t = stream.table
    slot_pair, info = t.cpu_tables()
    marker, field_bits = np.uint8(t.marker), _field_table(k)
    return _decode_range(stream.words, stream.states, stream.offsets, stream.escapes, stream.escape_offsets, stream.n,
                         stream.chunk_size, first, last, slot_pair, info, marker, fields, scales, out, out_offset, k,
                         block, field_bits, exponents_out)


@numba.njit(nogil=True, cache=True)
def _decode_range(words, states, offsets, escapes, escape_offsets, n, chunk_size, first, last, slot_pair, info, marker,
                  fields, scales, out, out_offset, k, block, field_bits, exponents_out):
    """The chunk loop of :func:`_decode_chunks`, compiled (one call into numba per tensor, the GIL released
    throughout)."""
    pairs = np.empty(chunk_size // 2, np.uint16)
    x = np.empty(LANES, np.int64)
    for c in range(first, last):
        lo = c * chunk_size
        count = min(n, lo + chunk_size) - lo
        for j in range(LANES):
            x[j] = states[c, j]
        rounds = ((count + 1) // 2 + ROUND - 1) // ROUND
        p = _decode_chunk(words, np.int64(offsets[c]), x, slot_pair, info, pairs, rounds)
        if not _finish_chunk(x, p, np.int64(offsets[c + 1]), pairs, count, escapes, np.int64(escape_offsets[c]),
                             np.int64(escape_offsets[c + 1]), marker, fields, scales, out, lo, lo - out_offset, k, block,
                             field_bits, exponents_out):
            return c
    return -1


@numba.njit(nogil=True, cache=True)
def _field_bits(k):
    """``(256 * P,) uint16``: the sign and mantissa bits of field ``q`` of packed byte ``b`` at
    ``b * P + q`` (``P = 8 // (k + 1)`` fields per byte), as they sit in a bf16 value."""
    width = k + 1
    per = 8 // width
    out = np.empty(256 * per, np.uint16)
    for byte in range(256):
        for q in range(per):
            field = (byte >> (q * width)) & ((1 << width) - 1)
            out[byte * per + q] = ((field >> k) << 15) | ((field & ((1 << k) - 1)) << (7 - k))
    return out


_FIELD_BITS = {}


@numba.njit(nogil=True, cache=True)
def _merge(exponents, fields, out, src, dst, count, k, field_bits, marker, hits):
    """``out[dst + i]`` (bf16 bits) for ``i < count`` from ``exponents[i]`` and the packed field of weight
    ``src + i``: the numba twin of :func:`kernels.neuzip_bits.merge_bf16_ref` (the block scale, when
    there is one, is applied by :func:`_scale_blocks` after the escapes are patched). ``src`` is a multiple
    of 16 (a chunk start), so it starts on a packed byte; ``field_bits`` is :func:`_field_bits` of ``k``
    (unused for ``k = 7``). Counts the exponents equal to ``marker`` per 256 weights into ``hits``."""
    dest = out[dst:dst + count]
    if k == 7:
        raw = fields[src:src + count]
        for w in range(hits.size):
            lo = w << 8
            if lo + 256 <= count:  # a fixed trip count: the loop vectorises
                d, r, e = dest[lo:lo + 256], raw[lo:lo + 256], exponents[lo:lo + 256]
                h = 0
                for i in range(256):
                    ri = np.uint16(r[i])
                    d[i] = ((ri & 0x80) << 8) | (np.uint16(e[i]) << 7) | (ri & 0x7F)
                    h += np.int32(e[i] == marker)
                hits[w] = h
            else:
                h = 0
                for i in range(lo, count):
                    ri = np.uint16(raw[i])
                    dest[i] = ((ri & 0x80) << 8) | (np.uint16(exponents[i]) << 7) | (ri & 0x7F)
                    h += np.int32(exponents[i] == marker)
                hits[w] = h
    else:
        shift = 3 if k == 0 else (2 if k == 1 else 1)  # log2 of the fields per byte
        per = 1 << shift
        packed = fields[src >> shift:]
        whole = count >> shift
        if per == 2:  # a constant per call: the loop over a byte's fields unrolls (1.4-2x faster)
            _merge_bytes(exponents, packed, dest, whole, field_bits, 2)
        elif per == 4:
            _merge_bytes(exponents, packed, dest, whole, field_bits, 4)
        else:
            _merge_bytes(exponents, packed, dest, whole, field_bits, 8)
        for i in range(whole << shift, count):
            dest[i] = field_bits[(np.int64(packed[i >> shift]) << shift) | (i & (per - 1))] | (np.uint16(exponents[i]) << 7)
        _count_markers(exponents, count, marker, hits)


@numba.njit(inline="always")
def _merge_bytes(exponents, packed, dest, nbytes, field_bits, per):
    """Weights ``[0, nbytes * per)`` of :func:`_merge` for ``k < 7``: one table row per packed byte."""
    for j in range(nbytes):
        row = field_bits[np.int64(packed[j]) * per:]
        for q in range(per):
            dest[per * j + q] = row[q] | (np.uint16(exponents[per * j + q]) << 7)


@numba.njit(nogil=True, cache=True)
def _count_markers(exponents, count, marker, hits):
    """``hits[w]``: how many of ``exponents[256 w:256 (w + 1)]`` (within ``count``) equal ``marker`` (a fixed
    trip count for the full windows, so the count vectorises)."""
    for w in range(hits.size):
        lo = w << 8
        h = 0
        if lo + 256 <= count:
            e = exponents[lo:lo + 256]
            for i in range(256):
                h += np.int32(e[i] == marker)
        else:
            for i in range(lo, count):
                h += np.int32(exponents[i] == marker)
        hits[w] = h


@numba.njit(nogil=True, cache=True)
def _scale_blocks(dest, scales, src, block):
    """Times ``1 + code / 128`` in float32, rounded to bf16 (nearest even), per block of ``block`` weights
    of ``dest`` (bf16 bits of weights ``src, src + 1, ...``): the numba twin of
    :func:`core.neuzip.normaliser.denormalise`. NaNs and infinities pass unchanged."""
    count = dest.size
    wide = np.empty(block, np.uint32)  # one block at a time: stays in L1
    value = wide.view(np.float32)
    i = 0
    while i < count:
        b = (src + i) // block
        size = min(count, (b + 1) * block - src) - i
        seg = dest[i:i + size]
        scale = np.float32(1.0 + np.float32(scales[b]) / np.float32(128.0))
        for j in range(size):
            wide[j] = np.uint32(seg[j]) << 16
        for j in range(size):
            value[j] = value[j] * scale
        for j in range(size):
            v = wide[j]
            rounded = np.uint16((v + np.uint32(0x7FFF) + ((v >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
            if (seg[j] & 0x7FFF) <= 0x7F80:
                seg[j] = rounded
        i += size

# ------------------------------------------------------------------------------------------ wrappers

def _corrupt(chunk: int) -> ValueError:
    return ValueError(f"corrupt exponent stream: chunk {chunk} did not end in its initial state")


def _chunk_range(stream: PairStream, first_chunk: int, last_chunk: int | None) -> tuple[int, int]:
    num = stream.num_chunks
    last = num if last_chunk is None else min(int(last_chunk), num)
    return max(0, int(first_chunk)), last


_EMPTY_U8 = np.zeros(0, np.uint8)
_EMPTY_U16 = np.zeros(0, np.uint16)


def _field_table(k: int) -> np.ndarray:
    if k == 7:
        return _EMPTY_U16
    if k not in _FIELD_BITS:
        _FIELD_BITS[k] = _field_bits(k)
    return _FIELD_BITS[k]


def decode(stream: PairStream, first_chunk: int = 0, last_chunk: int | None = None,
           validated: bool = False) -> np.ndarray:
    """Exponent bytes of chunks ``[first_chunk, last_chunk)`` (all by default): ``(m,) uint8``.

    Raises
    ------
    ValueError
        An inconsistent stream (every decoded chunk's end states are checked).
    """
    if not validated:
        stream.validate()
    first, last = _chunk_range(stream, first_chunk, last_chunk)
    lo, hi = first * stream.chunk_size, min(stream.n, last * stream.chunk_size)
    out = np.empty(max(0, hi - lo), np.uint8)
    if last > first:
        bad = _decode_chunks(stream, first, last, _EMPTY_U8, _EMPTY_U8, _EMPTY_U16, lo, 7, 0, out)
        if bad >= 0:
            raise _corrupt(bad)
    return out


def decode_into(stream: PairStream, fields: np.ndarray, mantissa_bits: int, out: np.ndarray,
                scales: np.ndarray | None = None, block_size: int | None = None) -> np.ndarray:
    """Decode the whole tensor straight into bf16 bits: ``out (n,) uint16`` (e.g. a torch buffer's
    ``.view(torch.int16).numpy().view(np.uint16)``), releasing the GIL while it runs.

    Parameters
    ----------
    fields : packed sign/mantissa fields, ``(ceil(n / P),) uint8`` (:mod:`kernels.neuzip_bits`)
    scales, block_size : block normaliser codes ``(ceil(n / B),) uint8`` and ``B``, or None
    """
    if out.dtype != np.uint16 or out.size != stream.n:
        raise ValueError(f"out must be uint16 with {stream.n} elements")
    k = int(mantissa_bits)
    bad = _decode_chunks(stream, 0, stream.num_chunks, fields, _EMPTY_U8 if scales is None else scales, out, 0, k,
                         0 if block_size is None else int(block_size), _EMPTY_U8)
    if bad >= 0:
        raise _corrupt(bad)
    return out


def decode_reference(stream: PairStream) -> np.ndarray:
    """The format as written in the module docstring: one chunk, one pair at a time, Python ints.
    Slow; for tests. Returns ``(n,) uint8``."""
    stream.validate()
    t, m = stream.table, 1 << stream.table.precision
    freq = pair_frequencies(t.counts, t.precision)
    cdf = np.concatenate([[0], np.cumsum(freq)])
    alpha, prec = t.alphabet, t.precision
    words = [int(w) for w in stream.words]
    indices = []
    for c in range(stream.num_chunks):
        x = [int(s) for s in stream.states[c]]
        p = int(stream.offsets[c])
        count = min(stream.n, (c + 1) * stream.chunk_size) - c * stream.chunk_size
        chunk = []
        for r in range(-(-((count + 1) // 2) // ROUND)):  # whole rounds
            for j in range(ROUND):
                lane = j % LANES
                slot = x[lane] & (m - 1)
                s = int(np.searchsorted(cdf, slot, side="right")) - 1
                x[lane] = int(freq[s]) * (x[lane] >> prec) + slot - int(cdf[s])
                chunk += [s // alpha, s % alpha]
            for lane in range(LANES):
                if x[lane] < _L:
                    x[lane] = (x[lane] << _SHIFT) | (words[p] if p < len(words) else 0)
                    p += 1
        if any(v != _L for v in x) or p != stream.offsets[c + 1]:
            raise _corrupt(c)
        indices += chunk[:count]  # the pad pairs (and an odd count's padding) dropped
    return _bytes_from_indices(t, np.array(indices, np.int64), stream.escapes, stream.escape_offsets,
                               stream.chunk_size)


def _bytes_from_indices(table: PairTable, indices: np.ndarray, escapes: np.ndarray, escape_offsets: np.ndarray,
                        chunk_size: int) -> np.ndarray:
    """Exponent bytes ``(n,) uint8`` from the alphabet index of each exponent: the escape index takes the
    next escaped byte. ValueError (corrupt chunk) when a chunk's escapes do not match its
    ``escape_offsets`` range."""
    out = table._decoded[indices].astype(np.uint8)
    escaped = indices == table.alphabet - 1
    per_chunk = np.bincount(np.nonzero(escaped)[0] // chunk_size, minlength=escape_offsets.size - 1)
    bad = np.nonzero(per_chunk != np.diff(escape_offsets.astype(np.int64)))[0]
    if bad.size:
        raise _corrupt(int(bad[0]))
    out[escaped] = escapes
    return out


@numba.njit(nogil=True, cache=True)
def _format2_pairs(words, states, offsets, slot_pair, freq, cdf, n, chunk_size, out):
    """Format 2's pair indices into ``out (ceil(n / 2),)``: 8 states of 32 bits per chunk, a 16-bit word read
    after any pair that leaves its state below ``2**16``. Returns -1 when every chunk ends in its initial
    state with its words used up, else the first chunk that does not."""
    mask = (1 << PRECISION) - 1
    x = np.empty(LANES, np.int64)
    for c in range(states.shape[0]):
        lo = c * chunk_size
        p, end = np.int64(offsets[c]), np.int64(offsets[c + 1])
        for j in range(LANES):
            x[j] = states[c, j]
        for j in range((min(n, lo + chunk_size) - lo + 1) // 2):
            xx = x[j % LANES]
            s = slot_pair[xx & mask]
            xx = freq[s] * (xx >> PRECISION) + (xx & mask) - cdf[s]
            if xx < 1 << 16:
                if p >= end:
                    return c
                xx = (xx << 16) | np.int64(words[p])
                p += 1
            x[j % LANES] = xx
            out[lo // 2 + j] = s
        if p != end:
            return c
        for j in range(LANES):
            if x[j] != 1 << 16:
                return c
    return -1


def decode_format2(table: PairTable, states: np.ndarray, offsets: np.ndarray, words: np.ndarray,
                   escapes: np.ndarray, escape_offsets: np.ndarray, n: int, chunk_size: int) -> np.ndarray:
    """Exponent bytes ``(n,) uint8`` of a format-2 stream (as written by Layerwise before format 3: the same
    table, pairs and escapes; ``states (C, 8) uint32`` in ``[2**16, 2**32)``, ``words (W,) uint16``, a refill
    test after every pair), for converting old files. ValueError for an inconsistent stream."""
    table.validate()
    if n < 1 or chunk_size < 2 * LANES or chunk_size % (2 * LANES):
        raise ValueError("corrupt format-2 stream: bad length or chunk size")
    num = -(-int(n) // int(chunk_size))
    if states.shape != (num, LANES) or offsets.shape != (num + 1,) or escape_offsets.shape != (num + 1,):
        raise ValueError("corrupt format-2 stream: wrong number of chunks")
    _check_offsets(offsets, words, escape_offsets, escapes, "format-2 stream")
    s = np.empty((n + 1) // 2, np.int64)
    bad = _format2_pairs(words.astype(np.uint16, copy=False), states.astype(np.int64), offsets.astype(np.int64),
                         table.cpu_tables()[0], table.frequencies, table.cdf, int(n), int(chunk_size), s)
    if bad >= 0:
        raise _corrupt(bad)
    alpha = table.alphabet
    indices = np.stack([s // alpha, s % alpha], axis=1).reshape(-1)[:n]
    return _bytes_from_indices(table, indices, escapes, escape_offsets, int(chunk_size))


def stream_arrays(stream: PairStream) -> dict[str, np.ndarray]:
    """The stream as the arrays of the kernel path (:func:`kernels.neuzip_rans.pair_rans_decode` and
    :func:`kernels.neuzip_rans.slot_table`), zero-copy views where the dtype allows: ``states (C, 8) int64``,
    ``offsets (C + 1,) int64``, ``words (W,) int32`` (the uint32 words bit for bit), ``escapes (E,) uint8``,
    ``escape_offsets (C + 1,) int64``, and per pair ``pair_freq (A * A,) int32`` and ``pair_bytes (A * A,) int32``
    (its two exponent bytes, the marker for an escape)."""
    t = stream.table
    decoded, alpha = t._decoded, t.alphabet
    index = np.arange(alpha * alpha)
    return {"states": np.ascontiguousarray(stream.states).view(np.int64),
            "offsets": stream.offsets.astype(np.int64),
            "words": np.ascontiguousarray(stream.words).view(np.int32),
            "escapes": np.ascontiguousarray(stream.escapes),
            "escape_offsets": stream.escape_offsets.astype(np.int64),
            "pair_freq": t.frequencies.astype(np.int32),
            "pair_bytes": (decoded[index // alpha] | (decoded[index % alpha] << 8)).astype(np.int32)}


def kernel_args(stream: PairStream, device=None) -> tuple:
    """The arguments of :func:`kernels.neuzip_rans.pair_rans_decode` for ``stream``, as tensors on ``device``."""
    import torch

    a = {k: torch.from_numpy(v).to(device) for k, v in stream_arrays(stream).items()}
    return (a["states"], a["offsets"], a["words"], torch.from_numpy(decode_table(stream.table)).to(device),
            a["escapes"], a["escape_offsets"], stream.table.marker, stream.n, stream.chunk_size,
            stream.table.precision)
