"""Format 2 of the exponent stream (written by Layerwise before format 3: the same table, pairs and escapes; 32-bit
states, 16-bit words, a refill test after every pair), read for converting old files."""
from __future__ import annotations

import numpy as np

from core.neuzip.pairs.backend import codec
from core.neuzip.pairs.decode import _bytes_from_indices, _corrupt
from core.neuzip.pairs.table import LANES, PairTable, _check_offsets


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
    bad = codec().format2_pairs(np.ascontiguousarray(words, dtype=np.uint16), np.ascontiguousarray(states, np.int64),
                                np.ascontiguousarray(offsets, np.int64), table.cpu_tables()[0], table.frequencies,
                                table.cdf, int(n), int(chunk_size), s)
    if bad >= 0:
        raise _corrupt(bad)
    alpha = table.alphabet
    indices = np.stack([s // alpha, s % alpha], axis=1).reshape(-1)[:n]
    return _bytes_from_indices(table, indices, escapes, escape_offsets, int(chunk_size))
