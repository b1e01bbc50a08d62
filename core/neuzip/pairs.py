"""Format 2 of the NeuZip exponent stream: pairs of exponents rANS-coded in big chunks, 8 interleaved states.

Why this shape (measured on this 2-core CPU, 1 thread, SmolLM2-135M's linear weights; see the README):
exponents take ~2.6 bits each, so coding a *pair* of exponents as one symbol halves the decode steps;
8 rANS states interleaved over one word stream let the CPU overlap 8 table lookups (1.9 GB/s of bf16
out, against 0.6 GB/s for 4 states decoded one after another); chunks of 2**17 weights cost 36 bytes
each (0.002 bits per weight, against 0.063 for format 1's 1,024-weight chunks with 8 bytes each).
In memory ``offsets`` has ``C + 1`` entries; only the ``C - 1`` inner ones are stored.

Format ("rans32x16-pairs", codec format 2)
------------------------------------------
- Alphabet. ``symbols (K,) uint8``: the ``K <= 15`` most frequent exponent bytes, ascending. Index
  ``a in [0, K)`` stands for ``symbols[a]``; index ``K`` is the *escape*: any other byte. ``A = K + 1``.
- Table. ``counts (A,) uint16``: how often each index occurs (escape last; scaled down so that every
  count is below ``2**16``; a present index keeps a count >= 1). The pair ``(a, b)`` gets the
  weight ``counts[a] * counts[b]`` and an integer frequency ``freq[a * A + b]`` from
  :func:`pair_frequencies` (integers only, so encoder and decoder agree bit for bit), all present
  pairs >= 1, summing to ``M = 2**precision`` (``precision`` 15 by default, at most 16).
  ``cdf`` is the running sum of ``freq`` in pair-index order.
- Pairs. Exponent ``2 i`` and ``2 i + 1`` form pair ``i`` (an odd count is padded with index 0,
  decoded and dropped). Chunk ``c`` holds pairs ``[c * chunk_size / 2, ...)`` (``chunk_size`` a
  multiple of 16 weights; the last chunk may be shorter).
- States. Each chunk has ``LANES = 8`` rANS states (32 bits, ``2**16 <= x < 2**32``), ``states (C, 8)
  uint32``, and one stream of 16-bit words ``words[offsets[c]:offsets[c + 1]]`` (``offsets (C + 1,)
  uint32``) shared by the 8 states. Pair ``j`` of a chunk is decoded by state ``j % 8``, in order::

      slot = x & (M - 1);  (a, b) = the pair with cdf <= slot < cdf + freq
      x = freq * (x >> precision) + slot - cdf
      if x < 2**16: x = (x << 16) | words[p]; p += 1
      for an escaped index, first a then b:               # a raw byte
          byte = x & 0xFF;  x >>= 8
          if x < 2**16: x = (x << 16) | words[p]; p += 1

  and a well-formed chunk ends with every state at ``2**16`` and ``p == offsets[c + 1]`` (checked).
- The encoder runs each chunk backwards from states ``2**16`` (:func:`encode`).

Cost beyond the order-0 exponent entropy: the frequency quantization (~0.003 bits per exponent at
precision 15), ``36`` bytes per chunk (32 for a single chunk), ``K + 2 A`` bytes of table per tensor, escapes (8 raw bits for
exponents outside the 15 most frequent: about 1 in 10**4 weights of trained models).

:func:`decode_into` decodes chunk by chunk into a small scratch buffer and merges straight into the
bf16 output (``nogil``: a thread can decode while torch computes). :func:`decode_reference` is the
same format written as plainly as possible (numpy, one chunk at a time) and is what the tests hold
the fast decoder and the kernels to.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["LANES", "DEFAULT_PRECISION", "DEFAULT_CHUNK", "MAX_DIRECT", "PairTable", "PairStream",
           "pair_frequencies", "build_table", "encode", "decode", "decode_into", "decode_reference",
           "decode_table", "kernel_args"]

LANES = 8
DEFAULT_PRECISION = 15
DEFAULT_CHUNK = 1 << 17  # weights per chunk
MAX_DIRECT = 15  # exponents coded directly; the rest escape
_L = 1 << 16
_MAX_COUNT = (1 << 16) - 1
_CHUNK_HEADER_BYTES = 4 * LANES + 4  # states + one offset


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

    def validate(self) -> None:
        """Raise ValueError when the table cannot be well formed."""
        if not 8 <= self.precision <= 16:
            raise ValueError(f"corrupt table: precision {self.precision}")
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


def build_table(exponents: np.ndarray, precision: int = DEFAULT_PRECISION) -> PairTable:
    """The table for ``exponents (n,) uint8``: the 15 most frequent bytes and scaled counts."""
    if not 8 <= precision <= 16:
        raise ValueError(f"precision must be in [8, 16], got {precision}")
    counts = np.bincount(exponents, minlength=256).astype(np.int64)
    order = np.lexsort((np.arange(256), -counts))[:MAX_DIRECT]
    symbols = np.sort(order[counts[order] > 0])
    c = np.append(counts[symbols], counts.sum() - counts[symbols].sum())
    top = int(c.max())
    if top > _MAX_COUNT:  # scale down, keeping every present index >= 1
        c = np.where(c > 0, np.maximum(1, (c * _MAX_COUNT) // top), 0)
    return PairTable(symbols.astype(np.uint8), c.astype(np.uint16), int(precision))


@dataclass(frozen=True)
class PairStream:
    """An encoded exponent stream: ``table``, ``states (C, 8) uint32``, ``offsets (C + 1,) uint32``,
    ``words (W,) uint16``, ``n`` exponents, ``chunk_size`` weights per chunk."""

    table: PairTable
    states: np.ndarray
    offsets: np.ndarray
    words: np.ndarray
    n: int
    chunk_size: int

    @property
    def num_chunks(self) -> int:
        return -(-self.n // self.chunk_size)

    def validate(self) -> None:
        """Structural checks (no decoding); ValueError when the stream cannot be well formed."""
        self.table.validate()
        if self.n < 1 or self.chunk_size < 2 * LANES or self.chunk_size % (2 * LANES):
            raise ValueError("corrupt stream: bad length or chunk size")
        num = self.num_chunks
        if self.states.shape != (num, LANES) or self.offsets.shape != (num + 1,):
            raise ValueError("corrupt stream: wrong number of chunks")
        if np.any(self.states < _L):
            raise ValueError("corrupt stream: a state below 2**16")
        offsets = self.offsets.astype(np.int64)
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != self.words.size:
            raise ValueError("corrupt stream: bad chunk offsets")

    @property
    def nbytes(self) -> int:
        """Bytes stored: every array, table included; of the offsets only the ``C - 1`` inner ones
        (the first is 0, the last the number of words)."""
        inner = 4 * max(0, self.offsets.size - 2)
        return int(self.table.nbytes + self.states.nbytes + inner + self.words.nbytes)


# ------------------------------------------------------------------------------------------ encoder

@numba.njit(nogil=True, cache=True)
def _encode_chunks(index, escaped, freq, cdf, precision, chunk_pairs, states, counts, words):
    """Encode pairs chunk by chunk, backwards. ``index (2 m,)`` alphabet indices, ``escaped (2 m,)`` the
    raw bytes of escaped exponents. Writes ``states (C, 8)``, ``counts (C,)`` words per chunk and the
    words (in decoding order) to ``words``; returns the number of words."""
    m = index.size // 2
    esc = freq.size
    alpha = np.int64(np.sqrt(esc) + 0.5)
    total = 0
    x = np.empty(8, np.int64)
    for c in range(states.shape[0]):
        lo = c * chunk_pairs
        hi = min(m, lo + chunk_pairs)
        x[:] = 1 << 16
        start = total
        for i in range(hi - 1, lo - 1, -1):
            j = (i - lo) % 8
            xx = x[j]
            a = index[2 * i]
            b = index[2 * i + 1]
            if b == alpha - 1:  # decoded last, so encoded first
                if xx >= 1 << 24:
                    words[total] = xx & 0xFFFF
                    total += 1
                    xx >>= 16
                xx = (xx << 8) | escaped[2 * i + 1]
            if a == alpha - 1:
                if xx >= 1 << 24:
                    words[total] = xx & 0xFFFF
                    total += 1
                    xx >>= 16
                xx = (xx << 8) | escaped[2 * i]
            s = a * alpha + b
            f = freq[s]
            if xx >= f << (32 - precision):
                words[total] = xx & 0xFFFF
                total += 1
                xx >>= 16
            xx = ((xx // f) << precision) + (xx % f) + cdf[s]
            x[j] = xx
        words[start:total] = words[start:total][::-1].copy()
        states[c, :] = x
        counts[c] = total - start
    return total


def encode(exponents: np.ndarray, chunk_size: int | None = None, precision: int = DEFAULT_PRECISION,
           table: PairTable | None = None) -> PairStream:
    """Entropy-code exponent bytes ``(n,) uint8`` (n >= 1) in format 2.

    Parameters
    ----------
    chunk_size : weights per chunk, a positive multiple of 16 (default :data:`DEFAULT_CHUNK`; smaller
        chunks give a GPU more independent lanes at 36 bytes each)
    precision : table precision in bits, 8..16 (15 by default)
    table : a table to use instead of the exponents' own
    """
    e = np.ascontiguousarray(exponents, dtype=np.uint8).reshape(-1)
    n = e.size
    if n == 0:
        raise ValueError("cannot encode an empty stream")
    chunk_size = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    if chunk_size < 2 * LANES or chunk_size % (2 * LANES):
        raise ValueError(f"chunk_size must be a positive multiple of {2 * LANES}, got {chunk_size}")
    table = build_table(e, precision) if table is None else table
    table.validate()
    alpha = table.alphabet
    lookup = np.full(256, alpha - 1, np.int64)
    lookup[table.symbols] = np.arange(table.symbols.size)
    index = lookup[e]
    if n % 2:
        index = np.append(index, 0)
    escaped = np.append(e, 0).astype(np.int64) if n % 2 else e.astype(np.int64)
    freq = pair_frequencies(table.counts, table.precision)
    present = np.bincount(index[0::2] * alpha + index[1::2], minlength=alpha * alpha) > 0
    if np.any(freq[present] == 0):
        raise ValueError("the table does not cover every exponent")
    cdf = np.concatenate([[0], np.cumsum(freq)[:-1]]).astype(np.int64)
    num = -(-n // chunk_size)
    states = np.empty((num, LANES), np.int64)
    counts = np.empty(num, np.int64)
    words = np.empty(3 * index.size // 2 + 8 * num + 8, np.int64)
    total = _encode_chunks(index, escaped, freq, cdf, table.precision, chunk_size // 2, states, counts, words)
    offsets = np.zeros(num + 1, np.uint32)
    np.cumsum(counts, out=offsets[1:])
    return PairStream(table, states.astype(np.uint32), offsets, words[:total].astype(np.uint16), n, chunk_size)


# ------------------------------------------------------------------------------------------ decoder

def decode_table(table: PairTable) -> np.ndarray:
    """The per-slot decode table ``(2**precision,) int64``: bits 0-15 the frequency, 16-31
    ``slot - cdf``, 32-39 and 40-47 the two exponent bytes, bit 48 / 49 set when the first / second
    is escaped. One lookup per pair."""
    freq = pair_frequencies(table.counts, table.precision)
    return _decode_table(freq, table.symbols.astype(np.int64), np.int64(table.alphabet), table.precision)


@numba.njit(nogil=True, cache=True)
def _decode_table(freq, symbols, alpha, precision):
    out = np.empty(1 << precision, np.int64)
    slot = 0
    for s in range(freq.size):
        a = s // alpha
        b = s % alpha
        hi = 0
        if a == alpha - 1:
            hi |= 1 << 16
        else:
            hi |= symbols[a]
        if b == alpha - 1:
            hi |= 1 << 17
        else:
            hi |= symbols[b] << 8
        for k in range(freq[s]):
            out[slot] = freq[s] | (k << 16) | (hi << 32)
            slot += 1
    return out


@numba.njit(inline="always")
def _advance(x, t, precision):
    return (t & 0xFFFF) * (x >> precision) + ((t >> 16) & 0xFFFF)


@numba.njit(inline="always")
def _refill(x, p, words):
    w = np.int64(words[p])
    if x < 65536:
        x = (x << 16) | w
        p += 1
    return x, p


@numba.njit(inline="always")
def _refill_checked(x, p, words):
    if x < 65536:
        w = np.int64(words[p]) if p < words.size else 0
        x = (x << 16) | w
        p += 1
    return x, p


@numba.njit(inline="always")
def _escapes(x, p, t, words):
    """Read the raw bytes of escaped exponents; returns the state, the word pointer and the pair."""
    pair = (t >> 32) & 0xFFFF
    if (t >> 48) & 1:
        pair = (pair & 0xFF00) | (x & 0xFF)
        x >>= 8
        x, p = _refill(x, p, words)
    if (t >> 49) & 1:
        pair = (pair & 0x00FF) | ((x & 0xFF) << 8)
        x >>= 8
        x, p = _refill(x, p, words)
    return x, p, pair


@numba.njit(nogil=True, cache=True)
def _decode_chunk(words, p, x, table, precision, pairs, m):
    """Decode ``m`` pairs of one chunk into ``pairs[:m]`` (uint16: first exponent in the low byte).
    ``x (8,)`` holds the states on entry and on exit; returns the word pointer. Reads never pass
    the end of ``words``, even for a corrupt stream (the caller checks the end states)."""
    mask = (1 << precision) - 1
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    safe = words.size - 3 * 8  # a round reads at most 3 words per state
    o = 0
    while True:
        rounds = min((m - o) // 8, (safe - p) // 24 + 1) if p <= safe else 0
        if rounds <= 0:
            break
        for _ in range(rounds):
            t0 = table[x0 & mask]
            t1 = table[x1 & mask]
            t2 = table[x2 & mask]
            t3 = table[x3 & mask]
            t4 = table[x4 & mask]
            t5 = table[x5 & mask]
            t6 = table[x6 & mask]
            t7 = table[x7 & mask]
            x0 = _advance(x0, t0, precision)
            x1 = _advance(x1, t1, precision)
            x2 = _advance(x2, t2, precision)
            x3 = _advance(x3, t3, precision)
            x4 = _advance(x4, t4, precision)
            x5 = _advance(x5, t5, precision)
            x6 = _advance(x6, t6, precision)
            x7 = _advance(x7, t7, precision)
            x0, p = _refill(x0, p, words)
            if t0 >> 48:
                x0, p, t0 = _escapes(x0, p, t0, words)
                t0 <<= 32
            x1, p = _refill(x1, p, words)
            if t1 >> 48:
                x1, p, t1 = _escapes(x1, p, t1, words)
                t1 <<= 32
            x2, p = _refill(x2, p, words)
            if t2 >> 48:
                x2, p, t2 = _escapes(x2, p, t2, words)
                t2 <<= 32
            x3, p = _refill(x3, p, words)
            if t3 >> 48:
                x3, p, t3 = _escapes(x3, p, t3, words)
                t3 <<= 32
            x4, p = _refill(x4, p, words)
            if t4 >> 48:
                x4, p, t4 = _escapes(x4, p, t4, words)
                t4 <<= 32
            x5, p = _refill(x5, p, words)
            if t5 >> 48:
                x5, p, t5 = _escapes(x5, p, t5, words)
                t5 <<= 32
            x6, p = _refill(x6, p, words)
            if t6 >> 48:
                x6, p, t6 = _escapes(x6, p, t6, words)
                t6 <<= 32
            x7, p = _refill(x7, p, words)
            if t7 >> 48:
                x7, p, t7 = _escapes(x7, p, t7, words)
                t7 <<= 32
            pairs[o] = (t0 >> 32) & 0xFFFF
            pairs[o + 1] = (t1 >> 32) & 0xFFFF
            pairs[o + 2] = (t2 >> 32) & 0xFFFF
            pairs[o + 3] = (t3 >> 32) & 0xFFFF
            pairs[o + 4] = (t4 >> 32) & 0xFFFF
            pairs[o + 5] = (t5 >> 32) & 0xFFFF
            pairs[o + 6] = (t6 >> 32) & 0xFFFF
            pairs[o + 7] = (t7 >> 32) & 0xFFFF
            o += 8
    x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7] = x0, x1, x2, x3, x4, x5, x6, x7
    for j in range(m - o):  # the rest, one pair at a time with checked reads
        xx = x[j % 8]
        t = table[xx & mask]
        xx = _advance(xx, t, precision)
        xx, p = _refill_checked(xx, p, words)
        pair = (t >> 32) & 0xFFFF
        if (t >> 48) & 1:
            pair = (pair & 0xFF00) | (xx & 0xFF)
            xx >>= 8
            xx, p = _refill_checked(xx, p, words)
        if (t >> 49) & 1:
            pair = (pair & 0x00FF) | ((xx & 0xFF) << 8)
            xx >>= 8
            xx, p = _refill_checked(xx, p, words)
        x[j % 8] = xx
        pairs[o + j] = pair
    return p


@numba.njit(nogil=True, cache=True)
def _decode_chunks(words, offsets, states, table, precision, n, chunk_size, first, last,
                   fields, scales, out, out_offset, k, block, exponents_out):
    """Decode chunks ``[first, last)``; merge into ``out`` (bf16 bits) at ``out_offset`` when
    ``out.size``, and/or write exponent bytes to ``exponents_out`` when its size is nonzero.
    Returns -1 when well formed, else the first bad chunk."""
    chunk_pairs = chunk_size // 2
    pairs = np.empty(chunk_pairs, np.uint16)
    x = np.empty(8, np.int64)
    for c in range(first, last):
        lo = c * chunk_size
        count = min(n, lo + chunk_size) - lo
        m = (count + 1) // 2
        x[:] = states[c]
        p = _decode_chunk(words, np.int64(offsets[c]), x, table, precision, pairs, m)
        for j in range(8):
            if x[j] != 65536:
                return c
        if p != offsets[c + 1]:
            return c
        exps = pairs.view(np.uint8)
        if out.size:
            _merge(exps, fields, scales, out, lo, lo - out_offset, count, k, block)
        if exponents_out.size:
            exponents_out[lo - out_offset:lo - out_offset + count] = exps[:count]
    return -1


@numba.njit(nogil=True, cache=True)
def _merge(exponents, fields, scales, out, src, dst, count, k, block):
    """``out[dst + i]`` (bf16 bits) for ``i < count`` from ``exponents[i]`` and the packed field (and
    block scale code, when ``block > 0``) of weight ``src + i``: the numba twin of
    :func:`kernels.neuzip_bits.merge_bf16_ref` followed by :func:`core.neuzip.normaliser.denormalise`."""
    dest = out[dst:dst + count]
    exps = exponents[:count]
    if k == 7:
        raw = fields[src:src + count]
        for i in range(count):
            r = raw[i]
            dest[i] = ((np.uint16(r) & 0x80) << 8) | (np.uint16(exps[i]) << 7) | (np.uint16(r) & 0x7F)
    else:
        width = k + 1
        per = 8 // width
        fmask = (1 << width) - 1
        for i in range(count):
            g = src + i
            field = (np.int64(fields[g // per]) >> ((g % per) * width)) & fmask
            dest[i] = ((field >> k) << 15) | (np.int64(exps[i]) << 7) | ((field & ((1 << k) - 1)) << (7 - k))
    if block > 0:  # times 1 + code / 128 in float32, rounded to bf16 (nearest even); NaNs pass unchanged
        wide = np.empty(count, np.uint32)
        for i in range(count):
            wide[i] = np.uint32(dest[i]) << 16
        value = wide.view(np.float32)
        for i in range(count):
            scale = 1.0 + np.float64(scales[(src + i) // block]) / 128.0
            value[i] = np.float32(np.float64(value[i]) * scale)  # exact in float64, one rounding
        for i in range(count):
            v = np.int64(wide[i])
            if (dest[i] & 0x7FFF) <= 0x7F80:
                dest[i] = (v + 0x7FFF + ((v >> 16) & 1)) >> 16


# ------------------------------------------------------------------------------------------ wrappers

def _corrupt(chunk: int) -> ValueError:
    return ValueError(f"corrupt exponent stream: chunk {chunk} did not end in its initial state")


def _chunk_range(stream: PairStream, first_chunk: int, last_chunk: int | None) -> tuple[int, int]:
    num = stream.num_chunks
    last = num if last_chunk is None else min(int(last_chunk), num)
    return max(0, int(first_chunk)), last


_EMPTY_U8 = np.zeros(0, np.uint8)
_EMPTY_U16 = np.zeros(0, np.uint16)


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
        bad = _decode_chunks(stream.words, stream.offsets, stream.states, decode_table(stream.table),
                             stream.table.precision, stream.n, stream.chunk_size, first, last,
                             _EMPTY_U8, _EMPTY_U8, _EMPTY_U16, lo, 7, 0, out)
        if bad >= 0:
            raise _corrupt(bad)
    return out


def decode_into(stream: PairStream, fields: np.ndarray, mantissa_bits: int, out: np.ndarray,
                scales: np.ndarray | None = None, block_size: int | None = None,
                table: np.ndarray | None = None) -> np.ndarray:
    """Decode the whole tensor straight into bf16 bits: ``out (n,) uint16`` (e.g. a torch buffer's
    ``.view(torch.int16).numpy().view(np.uint16)``), releasing the GIL while it runs.

    Parameters
    ----------
    fields : packed sign/mantissa fields, ``(ceil(n / P),) uint8`` (:mod:`kernels.neuzip_bits`)
    scales, block_size : block normaliser codes ``(ceil(n / B),) uint8`` and ``B``, or None
    table : :func:`decode_table` of ``stream.table`` when the caller keeps it
    """
    if out.dtype != np.uint16 or out.size != stream.n:
        raise ValueError(f"out must be uint16 with {stream.n} elements")
    table = decode_table(stream.table) if table is None else table
    bad = _decode_chunks(stream.words, stream.offsets, stream.states, table, stream.table.precision, stream.n,
                         stream.chunk_size, 0, stream.num_chunks, fields,
                         _EMPTY_U8 if scales is None else scales, out, 0, int(mantissa_bits),
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
    out = []
    for c in range(stream.num_chunks):
        x = [int(s) for s in stream.states[c]]
        p = int(stream.offsets[c])
        count = min(stream.n, (c + 1) * stream.chunk_size) - c * stream.chunk_size
        for j in range((count + 1) // 2):
            lane = j % LANES
            slot = x[lane] & (m - 1)
            s = int(np.searchsorted(cdf, slot, side="right")) - 1
            x[lane] = int(freq[s]) * (x[lane] >> prec) + slot - int(cdf[s])
            if x[lane] < _L:
                x[lane] = (x[lane] << 16) | words[p]
                p += 1
            for i in (s // alpha, s % alpha):
                if i < alpha - 1:
                    out.append(int(t.symbols[i]))
                    continue
                out.append(x[lane] & 0xFF)
                x[lane] >>= 8
                if x[lane] < _L:
                    x[lane] = (x[lane] << 16) | words[p]
                    p += 1
        if any(v != _L for v in x) or p != stream.offsets[c + 1]:
            raise _corrupt(c)
        if count % 2:
            out.pop()
    return np.array(out, np.uint8)


def kernel_args(stream: PairStream, device=None) -> tuple:
    """The arguments of :func:`kernels.neuzip_rans.pair_rans_decode` for ``stream``, as tensors on ``device``."""
    import torch

    table = decode_table(stream.table)

    def t(a, dtype):
        return torch.from_numpy(np.ascontiguousarray(a).astype(dtype, copy=False)).to(device)

    return (t(stream.states, np.int64), t(stream.offsets, np.int64), t(stream.words.view(np.int16), np.int16),
            t(table, np.int64), stream.n, stream.chunk_size, stream.table.precision)
