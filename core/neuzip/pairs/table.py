"""The format-3 constants, the pair table and the encoded stream (see :mod:`core.neuzip.pairs` for the format), and
the per-slot tables the decoders build from a table (by the compiled codec, :mod:`core.neuzip.pairs.backend`)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from core.neuzip.pairs.constants import (CHUNK_MULTIPLE, DEFAULT_CHUNK, LANES, MAX_DIRECT,  # noqa: F401 (re-exported)
                                         PRECISION, ROUND)
from core.neuzip.pairs.constants import MAX_COUNT as _MAX_COUNT
from core.neuzip.pairs.constants import STATE_LOW as _L
from core.neuzip.pairs.constants import WORD_BITS as _SHIFT


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

    def cpu_tables(self, slot_pair: np.ndarray | None = None, info: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The decoders' ``slot_pair (2**precision,) uint8`` (the pair of each slot) and ``info (A * A,) int64`` (per
        pair: bits 0-15 its frequency, 16-31 its two exponent bytes, 48-63 its ``cdf``): two L1-resident lookups,
        which beat one lookup in a 256 KB per-slot table on the CPU (1.95 against 1.41 GB/s, measured), and 34 KB per
        layer instead of 256 KB on a device. Built per call (32 KB, a few us), into ``slot_pair`` and ``info`` when
        given (``info`` then of at least ``A * A`` entries, int64 or uint64: a reused scratch)."""
        from core.neuzip.pairs.backend import codec

        pairs = self.frequencies.size
        slot_pair = np.empty(1 << self.precision, np.uint8) if slot_pair is None else slot_pair
        info = np.empty(pairs, np.int64) if info is None else info[:pairs]
        codec().tables(self.frequencies, self._decoded, self.alphabet, self.precision, slot_pair,
                       info.view(np.uint64))
        return slot_pair, info.view(np.int64)

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
    return table_from_histogram(np.bincount(exponents, minlength=256))


def table_from_histogram(histogram: np.ndarray) -> PairTable:
    """The table for exponents whose bytes occur ``histogram (256,)`` times: the 15 most frequent bytes and scaled
    counts."""
    counts = np.asarray(histogram).astype(np.int64)
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
