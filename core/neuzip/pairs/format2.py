"""Format 2 of the exponent stream (written by Layerwise before format 3: the same table, pairs and escapes; 32-bit
states, 16-bit words, a refill test after every pair), read for converting old files."""
from __future__ import annotations

import numba
import numpy as np

from core.neuzip.pairs.decode import _bytes_from_indices, _corrupt
from core.neuzip.pairs.table import LANES, PRECISION, PairTable, _check_offsets

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
