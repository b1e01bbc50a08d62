"""Chunked rANS coding of a byte stream, vectorised over chunks: codec format 1.

Format 1 was the NeuZip exponent stream until format 2 (:mod:`core.neuzip.pairs`: pairs of exponents,
8 interleaved states, big chunks, a numba decoder) replaced it. It stays for two uses: reading
version-1 checkpoints (:func:`core.neuzip.load_compressed` decodes them here and re-encodes them in
the current format, 3) and entropy-coding NF4 codes in the trade-off (:mod:`core.neuzip.tradeoff`).

The stream format ("rans32x16") is chosen so that every chunk decodes on its own, e.g. one chunk per
GPU lane or program, with nothing shared but a small read-only table.

Format
------
- Alphabet: bytes 0..255. Table: the symbols that occur, ``symbols (S,) uint8``, with integer
  frequencies ``freqs (S,) uint32``, every one >= 1, summing to ``M = 2**precision``
  (``precision <= 16``, default 12). ``cdf[s]`` is the sum of the frequencies of the symbols before
  ``s`` (in increasing byte order). Stored once per tensor.
- The ``n`` symbols are cut into chunks of ``chunk_size`` (the last one may be shorter). Chunk ``j``
  holds symbols ``[j * chunk_size, min(n, (j + 1) * chunk_size))``.
- Each chunk is an independent rANS stream with a 32-bit state ``x`` and 16-bit words,
  ``L = 2**16 <= x < 2**32``. Its final encoder state is ``states[j] (uint32)``; its words are
  ``words[offsets[j]:offsets[j + 1]] (uint16)`` in *decoding* order; ``offsets (num_chunks + 1,)
  uint32`` starts at 0.
- Decoding chunk ``j``::

      x = states[j]; p = offsets[j]
      for each symbol position in the chunk, in order:
          slot = x & (M - 1)
          s = the symbol with cdf[s] <= slot < cdf[s] + freq[s]
          x = freq[s] * (x >> precision) + slot - cdf[s]
          if x < 2**16:
              x = (x << 16) | words[p]; p += 1
      # a well-formed chunk ends with x == 2**16 and p == offsets[j + 1]

- Encoding runs backwards over the chunk from ``x = 2**16``: before pushing symbol ``s``, if
  ``x >= freq[s] << (32 - precision)`` emit ``x & 0xFFFF`` and shift ``x >>= 16``; then
  ``x = ((x // freq[s]) << precision) + x % freq[s] + cdf[s]``. A word emitted while encoding
  position ``i`` is read back right after decoding position ``i``, so a chunk's words in
  decoding order are the emitted words sorted by position.

Cost per chunk beyond the entropy: 8 bytes (state and offset), i.e. ``64 / chunk_size`` bits per
symbol. The default chunk size (:func:`auto_chunk_size`) aims at >= 1024 chunks per tensor, between
1024 and 4096 symbols each (at most 0.0625 bits per symbol of overhead): more lanes make both the
vectorised CPU decoder and a GPU decoder faster.

The numpy implementation here runs all chunks of a tensor as lanes of one vector and loops over
positions, which is the same schedule a GPU decoder uses.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RansTable", "RansStream", "build_table", "encode", "decode", "decode_tables",
           "auto_chunk_size"]

_L = 1 << 16
DEFAULT_PRECISION = 12
MIN_CHUNK, MAX_CHUNK = 1024, 4096
_LANES_PER_PASS = 8192  # bounds the working memory of one vectorised pass


@dataclass(frozen=True)
class RansTable:
    """Quantized symbol table: ``symbols (S,) uint8``, ``freqs (S,) uint32`` summing to ``2**precision``."""

    symbols: np.ndarray
    freqs: np.ndarray
    precision: int

    def full(self) -> tuple[np.ndarray, np.ndarray]:
        """``(freq, cdf)``, both ``(256,) uint32`` indexed by byte value (zero freq for absent bytes)."""
        freq = np.zeros(256, np.uint32)
        freq[self.symbols] = self.freqs
        cdf = np.concatenate([[0], np.cumsum(freq)[:-1]]).astype(np.uint32)
        return freq, cdf


@dataclass(frozen=True)
class RansStream:
    """An encoded byte stream: the table, ``states (C,) uint32``, ``offsets (C + 1,) uint32``, ``words (W,) uint16``."""

    table: RansTable
    states: np.ndarray
    offsets: np.ndarray
    words: np.ndarray
    n: int
    chunk_size: int

    def validate(self) -> None:
        """Structural checks (cheap, no decoding); raises ValueError when the stream cannot be well formed."""
        t = self.table
        if not 8 <= t.precision <= 16:
            raise ValueError(f"corrupt table: precision {t.precision}")
        sym = t.symbols.astype(np.int64)
        if sym.size == 0 or sym.size != t.freqs.size or np.any(np.diff(sym) <= 0):
            raise ValueError("corrupt table: symbols")
        if t.freqs.min() < 1 or int(t.freqs.astype(np.int64).sum()) != 1 << t.precision:
            raise ValueError("corrupt table: frequencies do not sum to 2**precision")
        if self.n < 1 or self.chunk_size < 1:
            raise ValueError("corrupt rANS stream: bad length or chunk size")
        num = -(-self.n // self.chunk_size)
        if self.states.size != num or self.offsets.size != num + 1:
            raise ValueError("corrupt rANS stream: wrong number of chunks")
        if np.any(self.states < _L):
            raise ValueError("corrupt rANS stream: a state below 2**16")
        offsets = self.offsets.astype(np.int64)
        counts = np.diff(offsets)
        lengths = np.full(num, self.chunk_size)
        lengths[-1] = self.n - (num - 1) * self.chunk_size
        if offsets[0] != 0 or np.any(counts < 0) or np.any(counts > lengths) or offsets[-1] != self.words.size:
            raise ValueError("corrupt rANS stream: bad chunk offsets")

    @property
    def nbytes(self) -> int:
        """Bytes of every array (table included)."""
        t = self.table
        return (t.symbols.nbytes + t.freqs.nbytes + self.states.nbytes + self.offsets.nbytes
                + self.words.nbytes)


def build_table(counts: np.ndarray, precision: int = DEFAULT_PRECISION) -> RansTable:
    """Quantize symbol counts to frequencies summing to ``2**precision``, each present symbol >= 1.

    Parameters
    ----------
    counts : (256,) int, occurrences of each byte value (at least one nonzero)
    precision : int in [8, 16]

    Returns
    -------
    RansTable
    """
    if not 8 <= precision <= 16:
        raise ValueError(f"precision must be in [8, 16], got {precision}")
    counts = np.asarray(counts, dtype=np.int64)
    symbols = np.nonzero(counts)[0]
    if symbols.size == 0:
        raise ValueError("cannot build a table for an empty stream")
    m = 1 << precision
    c = counts[symbols].astype(np.float64)
    freqs = np.maximum(1, np.floor(c * m / c.sum())).astype(np.int64)
    # hand out (or take back) the remainder: largest fractional parts first, never below 1
    deficit = m - int(freqs.sum())
    if deficit > 0:
        frac = c * m / c.sum() - np.floor(c * m / c.sum())
        order = np.argsort(-frac, kind="stable")
        freqs[order[:deficit % len(order)]] += 1
        freqs += deficit // len(order)
    while deficit < 0:
        # take from the symbols that lose least per unit (largest counts first)
        order = np.argsort(-c, kind="stable")
        for i in order:
            if deficit == 0:
                break
            take = min(freqs[i] - 1, -deficit)
            freqs[i] -= take
            deficit += take
    return RansTable(symbols.astype(np.uint8), freqs.astype(np.uint32), precision)


def _encode_lanes(sym: np.ndarray, freq: np.ndarray, cdf: np.ndarray, precision: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode equal-length chunks as lanes. ``sym (lanes, length) uint8``.

    Returns ``states (lanes,) uint32``, ``counts (lanes,) int64`` and the words of all lanes,
    lane after lane, each in decoding order.
    """
    lanes, length = sym.shape
    symt = np.ascontiguousarray(sym.T)                 # (length, lanes)
    f = freq[symt]
    c = cdf[symt]
    # emit when x >= f << (32 - precision); as "x > limit" the limit fits uint32 even for f = 2**precision
    limit = ((f.astype(np.uint64) << np.uint64(32 - precision)) - np.uint64(1)).astype(np.uint32)
    out = np.empty((length, lanes), np.uint16)
    emitted = np.empty((length, lanes), bool)
    x = np.full(lanes, _L, np.uint32)
    p = np.uint32(precision)
    s16 = np.uint32(16)
    for i in range(length - 1, -1, -1):
        e = x > limit[i]
        emitted[i] = e
        out[i] = x  # low 16 bits
        x = np.where(e, x >> s16, x)
        fi = f[i]
        q = x // fi
        x = (q << p) + (x - q * fi) + c[i]
    counts = emitted.sum(axis=0)
    words = out.T[emitted.T]                           # lane-major, positions ascending
    return x, counts, words


def auto_chunk_size(n: int) -> int:
    """The default chunk size for ``n`` symbols: a power of two in [1024, 4096], near ``n / 1024``."""
    target = max(1, n // 1024)
    return int(min(MAX_CHUNK, max(MIN_CHUNK, 1 << (target.bit_length() - 1))))


def encode(symbols: np.ndarray, table: RansTable | None = None, chunk_size: int | None = None,
           precision: int = DEFAULT_PRECISION) -> RansStream:
    """Entropy-code a byte stream in independent chunks.

    Parameters
    ----------
    symbols : (n,) uint8, n >= 1
    table : a table covering every byte in ``symbols``; built from their counts when None
    chunk_size : symbols per chunk (>= 1); None picks :func:`auto_chunk_size`
    precision : table precision in bits, when the table is built here

    Returns
    -------
    RansStream
    """
    symbols = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    n = symbols.size
    if n == 0:
        raise ValueError("cannot encode an empty stream")
    chunk_size = auto_chunk_size(n) if chunk_size is None else int(chunk_size)
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    if table is None:
        table = build_table(np.bincount(symbols, minlength=256), precision)
    freq, cdf = table.full()
    if np.any(freq[np.unique(symbols)] == 0):
        raise ValueError("the table does not cover every symbol")
    full, tail = divmod(n, chunk_size)
    states, counts, words = [], [], []
    for start in range(0, full, _LANES_PER_PASS):
        stop = min(full, start + _LANES_PER_PASS)
        lane_sym = symbols[start * chunk_size:stop * chunk_size].reshape(stop - start, chunk_size)
        s, k, w = _encode_lanes(lane_sym, freq, cdf, table.precision)
        states.append(s), counts.append(k), words.append(w)
    if tail:
        s, k, w = _encode_lanes(symbols[full * chunk_size:].reshape(1, tail), freq, cdf, table.precision)
        states.append(s), counts.append(k), words.append(w)
    counts = np.concatenate(counts)
    offsets = np.zeros(counts.size + 1, np.uint32)
    np.cumsum(counts, out=offsets[1:])
    return RansStream(table, np.concatenate(states).astype(np.uint32), offsets,
                      np.concatenate(words).astype(np.uint16), n, chunk_size)


def decode_tables(table: RansTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-slot lookup tables, each ``(2**precision,)``: symbol (uint8), frequency and
    ``slot - cdf[symbol]`` (uint32). A decoder needs only these."""
    freq, cdf = table.full()
    m = 1 << table.precision
    if int(freq.sum()) != m:
        raise ValueError("corrupt table: frequencies do not sum to 2**precision")
    slot_sym = np.repeat(np.arange(256, dtype=np.uint8), freq)
    slots = np.arange(m, dtype=np.uint32)
    return slot_sym, freq[slot_sym], slots - cdf[slot_sym]


def _decode_lanes(states, starts, ends, words, length, slot_sym, slot_freq, slot_bias, precision):
    lanes = states.size
    out = np.empty((length, lanes), np.uint8)
    x = states.astype(np.uint32)
    ptr = starts.astype(np.int64)
    last = words.size - 1
    mask = np.uint32((1 << precision) - 1)
    p = np.uint32(precision)
    s16 = np.uint32(16)
    for i in range(length):
        slot = x & mask
        out[i] = slot_sym[slot]
        x = slot_freq[slot] * (x >> p) + slot_bias[slot]
        need = x < _L
        w = words[np.minimum(ptr, last)].astype(np.uint32)
        x = np.where(need, (x << s16) | w, x)
        ptr += need
    if np.any(x != _L) or np.any(ptr != ends):
        raise ValueError("corrupt rANS stream: a chunk did not end in its initial state")
    return out.T.reshape(-1)


def decode(stream: RansStream, first_chunk: int = 0, last_chunk: int | None = None,
           validated: bool = False) -> np.ndarray:
    """Decode chunks ``[first_chunk, last_chunk)`` of a :class:`RansStream` (all by default).

    Parameters
    ----------
    stream : the encoded stream
    first_chunk, last_chunk : chunk range (``last_chunk=None``: to the end)
    validated : skip the structural checks (the caller already ran ``stream.validate()``)

    Returns
    -------
    (m,) uint8, the symbols of those chunks (``m = n`` for the whole stream)

    Raises
    ------
    ValueError
        When the stream is inconsistent (corrupt table, offsets or words); every decoded chunk's
        end state is checked.
    """
    if not validated:
        stream.validate()
    n, size = stream.n, stream.chunk_size
    full, tail = divmod(n, size)
    num = stream.states.size
    last = num if last_chunk is None else min(int(last_chunk), num)
    first = max(0, int(first_chunk))
    offsets = stream.offsets.astype(np.int64)
    slot_sym, slot_freq, slot_bias = decode_tables(stream.table)
    words = stream.words if stream.words.size else np.zeros(1, np.uint16)
    parts = [np.zeros(0, np.uint8)]
    for start in range(first, min(last, full), _LANES_PER_PASS):
        stop = min(last, full, start + _LANES_PER_PASS)
        parts.append(_decode_lanes(stream.states[start:stop], offsets[start:stop], offsets[start + 1:stop + 1],
                                   words, size, slot_sym, slot_freq, slot_bias, stream.table.precision))
    if tail and last > full >= first:
        parts.append(_decode_lanes(stream.states[full:], offsets[full:full + 1], offsets[full + 1:],
                                   words, tail, slot_sym, slot_freq, slot_bias, stream.table.precision))
    return np.concatenate(parts)
