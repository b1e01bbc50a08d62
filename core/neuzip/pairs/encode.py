"""The format-3 encoder: exponent bytes -> pair indices -> chunked rANS with 8 interleaved states (each chunk coded
backwards), the one-pass split of bf16 bits into exponent bytes and packed sign/mantissa fields (both compiled:
:mod:`core.neuzip.pairs.backend`), and the storage a tensor that is encoded again and again is written into.

:class:`StreamStore` holds one tensor's stream arrays, reserved once for its length: the states and both offset arrays
have a fixed size, the words and escapes get ``headroom`` beyond the first encoding's size. An encoding that fits is
written straight into them (no allocation); one that does not is written into an :class:`EncodeScratch` (sized once
for the largest tensor) and the store reserved again, bigger (:attr:`StreamStore.grown` counts it). LOMO + NeuZip
re-encodes every linear weight every step this way, so the heap does not grow step after step (a fresh allocation per
encoding, of a slightly different size each time, left glibc's heap full of holes: +2-17 MB blocks a step at 1 B
weights).
"""
from __future__ import annotations

import numpy as np

from core.neuzip.pairs.backend import codec
from core.neuzip.pairs.table import (CHUNK_MULTIPLE, DEFAULT_CHUNK, LANES, PairStream, PairTable,
                                     table_from_histogram)

__all__ = ["encode", "split_into", "StreamStore", "EncodeScratch", "HEADROOM"]

HEADROOM = 1 / 32  # words and escapes reserved beyond an encoding's size (a recompressed weight's stream moves by
# well under 1 % from step to step: 652 bytes of 135 MiB in the SmolLM2 run)


class EncodeScratch:
    """Arrays an encoder reuses between tensors, grown to the largest one: the exponent bytes (``exponents(n)``),
    an exponent histogram, and the words of an encoding that did not fit its store (``words(n)``)."""

    def __init__(self):
        self._exponents = np.empty(0, np.uint8)
        self._words = np.empty(0, np.uint32)
        self.histogram = np.zeros(256, np.int64)

    def exponents(self, n: int) -> np.ndarray:
        if self._exponents.size < n:
            self._exponents = np.empty(n, np.uint8)
        return self._exponents[:n]

    def words(self, n: int) -> np.ndarray:
        if self._words.size < n:
            self._words = np.empty(n, np.uint32)
        return self._words[:n]

    @property
    def nbytes(self) -> int:
        return int(self._exponents.nbytes + self._words.nbytes + self.histogram.nbytes)


class StreamStore:
    """The stream arrays of one tensor of ``n`` exponents in chunks of ``chunk_size``, reserved once and written
    into by every :func:`encode` given this store (see the module docstring). The :class:`PairStream` an encoding
    returns views these arrays: it is valid until the next encoding into the same store."""

    def __init__(self, n: int, chunk_size: int = DEFAULT_CHUNK, headroom: float = HEADROOM):
        num = -(-int(n) // int(chunk_size))
        self.n, self.chunk_size, self.headroom = int(n), int(chunk_size), float(headroom)
        self.states = np.empty((num, LANES), np.uint64)
        self.offsets = np.empty(num + 1, np.uint32)
        self.escape_offsets = np.empty(num + 1, np.uint32)
        self.words = np.empty(0, np.uint32)
        self.escapes = np.empty(0, np.uint8)
        self.grown = 0  # times the words or escapes were reserved again after the first encoding

    def reserve(self, words: int, escapes: int) -> None:
        """Room for at least ``words`` words and ``escapes`` escaped bytes (plus the headroom when it grows)."""
        for name, need, dtype in (("words", words, np.uint32), ("escapes", escapes, np.uint8)):
            have = getattr(self, name)
            if have.size < need:
                if have.size:
                    self.grown += 1
                setattr(self, name, np.empty(int(need * (1 + self.headroom)) + 16, dtype))

    @property
    def nbytes(self) -> int:
        """Bytes held (the reserved capacity, headroom included)."""
        return int(self.states.nbytes + self.offsets.nbytes + self.escape_offsets.nbytes + self.words.nbytes
                   + self.escapes.nbytes)


def encode(exponents: np.ndarray, chunk_size: int | None = None, table: PairTable | None = None,
           store: StreamStore | None = None, scratch: EncodeScratch | None = None,
           histogram: np.ndarray | None = None) -> PairStream:
    """Entropy-code exponent bytes ``(n,) uint8`` (n >= 1) in format 3.

    Parameters
    ----------
    chunk_size : weights per chunk, a positive multiple of 32 (default :data:`DEFAULT_CHUNK`; smaller
        chunks give a GPU more independent lanes at ~72 bytes each)
    table : a table to use instead of the exponents' own
    store : write the stream into this tensor's reserved arrays (its ``n`` and ``chunk_size`` must match): the
        stream returned views them; without it the stream gets arrays of its own, of the exact sizes
    scratch : where the words are written first when they may not fit (without ``store``: always, then copied out
        at their exact size; with it: when they do not fit it); default: a temporary array
    histogram : how often each byte occurs in ``exponents`` (256,), when the caller has it (:func:`split_into`
        counts it on the way): saves a pass
    """
    e = np.ascontiguousarray(exponents, dtype=np.uint8).reshape(-1)
    n = e.size
    if n == 0:
        raise ValueError("cannot encode an empty stream")
    chunk_size = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    if chunk_size < CHUNK_MULTIPLE or chunk_size % CHUNK_MULTIPLE:
        raise ValueError(f"chunk_size must be a positive multiple of {CHUNK_MULTIPLE}, got {chunk_size}")
    if store is not None and (store.n != n or store.chunk_size != chunk_size):
        raise ValueError(f"the store holds {store.n} exponents in chunks of {store.chunk_size}, not {n} in {chunk_size}")
    histogram = np.bincount(e, minlength=256) if histogram is None else histogram
    table = table_from_histogram(histogram) if table is None else table
    table.validate()
    alpha = table.alphabet
    lookup = np.full(256, alpha - 1, np.int64)
    lookup[table.symbols] = np.arange(table.symbols.size)
    escaped = int(n - histogram[table.symbols].sum())
    c = codec()
    num = -(-n // chunk_size)
    if store is None:
        states, offsets, escape_offsets = (np.empty((num, LANES), np.uint64), np.empty(num + 1, np.uint32),
                                           np.empty(num + 1, np.uint32))
        escapes = np.empty(escaped, np.uint8)
        bound = c.words_bound(n, chunk_size)
        words = scratch.words(bound) if scratch is not None else np.empty(bound, np.uint32)
    else:
        states, offsets, escape_offsets = store.states, store.offsets, store.escape_offsets
        store.reserve(0, escaped)
        escapes, words = store.escapes, store.words
    total = c.encode(e, lookup, alpha, chunk_size, table.frequencies, table.cdf, table.pad_pair, states, offsets,
                     words, escapes, escape_offsets)
    if total == -1:  # the store's words are too few: encode into the scratch, then reserve the store again
        bound = c.words_bound(n, chunk_size)
        words = scratch.words(bound) if scratch is not None else np.empty(bound, np.uint32)
        total = c.encode(e, lookup, alpha, chunk_size, table.frequencies, table.cdf, table.pad_pair, states, offsets,
                         words, escapes, escape_offsets)
        if total >= 0:
            store.reserve(total, 0)
            store.words[:total] = words[:total]
            words = store.words
    if total == -3:
        raise ValueError("the table does not cover every exponent")
    if total < 0:
        raise RuntimeError(f"the encoder ran out of room (code {total})")
    n_esc = int(escape_offsets[-1])
    words = words[:total] if store is not None else words[:total].copy()
    return PairStream(table, states, offsets, words, escapes[:n_esc], escape_offsets, n, chunk_size)


def split_into(bits: np.ndarray, k: int, exponents: np.ndarray, fields: np.ndarray,
               histogram: np.ndarray | None = None) -> None:
    """bf16 bits ``(n,) uint16`` -> exponent bytes ``exponents (n,) uint8`` and packed ``1 + k`` bit fields ``fields
    (ceil(n / P),) uint8``, both written in place, in one pass (the twin of
    :func:`kernels.neuzip_bits.split_bf16_ref`, bit for bit, tested on all 65,536 patterns); ``histogram (256,)
    int64``, when given, gets each exponent byte's count added."""
    codec().split(bits, int(k), exponents, fields, histogram)
