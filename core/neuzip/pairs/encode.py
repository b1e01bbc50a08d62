"""The format-3 encoder: exponent bytes -> pair indices -> chunked rANS with 8 interleaved states (each chunk
coded backwards), and the one-pass split of bf16 bits into exponent bytes and packed sign/mantissa fields."""
from __future__ import annotations

import numba
import numpy as np

from core.neuzip.pairs.table import (_L, _SHIFT, CHUNK_MULTIPLE, DEFAULT_CHUNK, LANES, PRECISION, ROUND, PairStream,
                                     PairTable, build_table)

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
