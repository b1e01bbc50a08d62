"""Decoding format 3 from Python: :func:`decode` (exponent bytes of a chunk range), :func:`decode_into` (a whole tensor
straight into bf16 bits), :func:`decode_reference` (the format as plainly as possible, what the tests hold the fast
decoder and the kernels to), and the stream as the arrays of the kernel path (:func:`stream_arrays`,
:func:`kernel_args`, :func:`segment_index`)."""
from __future__ import annotations

import numpy as np

import threading

from core.neuzip.pairs.backend import codec
from core.neuzip.pairs.table import _L, _SHIFT, LANES, ROUND, PairStream, PairTable, pair_frequencies

def _corrupt(chunk: int) -> ValueError:
    return ValueError(f"corrupt exponent stream: chunk {chunk} did not end in its initial state")


def _chunk_range(stream: PairStream, first_chunk: int, last_chunk: int | None) -> tuple[int, int]:
    num = stream.num_chunks
    last = num if last_chunk is None else min(int(last_chunk), num)
    return max(0, int(first_chunk)), last


_FIELD_BITS: dict[int, np.ndarray] = {}
_scratch = threading.local()  # each thread's decode tables (34 KB), reused: a decode allocates nothing


def field_bits(k: int) -> np.ndarray | None:
    """``(256 * P,) uint16``: the sign and mantissa bits of field ``q`` of packed byte ``b`` at ``b * P + q``
    (``P = 8 // (k + 1)`` fields per byte), as they sit in a bf16 value; None for ``k = 7`` (one byte a weight)."""
    if k == 7:
        return None
    if k not in _FIELD_BITS:
        width, per = k + 1, 8 // (k + 1)
        field = (np.arange(256)[:, None] >> (np.arange(per)[None, :] * width)) & ((1 << width) - 1)
        _FIELD_BITS[k] = (((field >> k) << 15) | ((field & ((1 << k) - 1)) << (7 - k))).astype(np.uint16).reshape(-1)
    return _FIELD_BITS[k]


def _tables(table: PairTable) -> tuple[np.ndarray, np.ndarray]:
    """``table``'s decode tables, built into this thread's scratch (valid until the thread's next decode)."""
    if getattr(_scratch, "slot_pair", None) is None or _scratch.slot_pair.size != 1 << table.precision:
        _scratch.slot_pair = np.empty(1 << table.precision, np.uint8)
        _scratch.info = np.empty(256, np.int64)
    return table.cpu_tables(_scratch.slot_pair, _scratch.info)


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
        bad = _decode_chunks(stream, first, last, None, None, None, lo, 7, 0, out)
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
    bad = _decode_chunks(stream, 0, stream.num_chunks, fields, scales, out, 0, k,
                         0 if block_size is None else int(block_size), None)
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


def _decode_chunks(stream: PairStream, first: int, last: int, fields, scales, out, out_offset, k, block,
                   exponents_out) -> int:
    """Decode chunks ``[first, last)`` of ``stream``: merged into ``out`` (bf16 bits) and/or as exponent
    bytes into ``exponents_out``, both starting at weight ``out_offset``. Returns -1 when well formed,
    else the first bad chunk. The compiled call releases the GIL."""
    t = stream.table
    slot_pair, info = _tables(t)
    return codec().decode_range(stream.words, stream.states, stream.offsets, stream.escapes, stream.escape_offsets,
                                stream.n, stream.chunk_size, first, last, slot_pair, info.view(np.uint64), t.marker,
                                fields, scales, out, out_offset, k, block, field_bits(k), exponents_out)


def segment_index(stream: PairStream, segment: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each segment of ``segment`` weights starts in the stream: ``states (S, 8) int64``, the word offsets
    ``(S + 1,) int64`` and the escape offsets ``(S + 1,) int64`` (``S = ceil(n / segment)``; the last entries are
    the totals), so that a decoder can start at any segment, not only at a chunk. ``segment`` is a multiple of 32
    that divides the chunk size; ``segment = chunk_size`` gives the chunks' own arrays. One compiled pass over the
    stream (the rANS rounds without their output, ~0.5 ns per weight), which also checks every chunk.

    Raises
    ------
    ValueError
        ``segment`` does not cut the chunks into whole rounds, or the stream is corrupt.
    """
    segment = int(segment)
    if segment < 2 * ROUND or segment % (2 * ROUND) or stream.chunk_size % segment:
        raise ValueError(f"segment must be a multiple of {2 * ROUND} dividing the chunk size {stream.chunk_size}, "
                         f"got {segment}")
    stream.validate()
    num = -(-stream.n // segment)
    states = np.empty((num, LANES), np.uint64)
    seg_p, seg_q = np.empty(num + 1, np.int64), np.empty(num + 1, np.int64)
    slot_pair, info = _tables(stream.table)
    bad = codec().segment_index(stream.words, np.ascontiguousarray(stream.states), stream.offsets,
                                stream.escape_offsets, stream.n, stream.chunk_size, segment, slot_pair,
                                info.view(np.uint64), stream.table.marker, states, seg_p, seg_q)
    if bad >= 0:
        raise _corrupt(bad)
    return states.view(np.int64), seg_p, seg_q


def stream_arrays(stream: PairStream, segment: int | None = None) -> dict[str, np.ndarray]:
    """The stream as the arrays of the kernel path (:func:`kernels.neuzip_rans.pair_rans_decode`), zero-copy views
    where the dtype allows: ``states (S, 8) int64``, ``offsets (S + 1,) int64``, ``words (W,) int32`` (the uint32
    words bit for bit), ``escapes (E,) uint8``, ``escape_offsets (S + 1,) int64``, and the two decode tables the
    CPU decoder uses too (:meth:`PairTable.cpu_tables`): ``slot_pair (2**precision,) uint8`` (the pair of each
    slot) and ``pair_info (A * A,) int64`` (per pair: frequency, its two exponent bytes, cdf). With ``segment``
    (a multiple of 32 dividing the chunk size) the states and offsets are those of every segment
    (:func:`segment_index`: a pass over the stream, which checks it); without, those of the chunks."""
    if segment is None:
        states, offsets, escape_offsets = (np.ascontiguousarray(stream.states).view(np.int64),
                                           stream.offsets.astype(np.int64), stream.escape_offsets.astype(np.int64))
    else:
        states, offsets, escape_offsets = segment_index(stream, segment)
    slot_pair, info = stream.table.cpu_tables()
    return {"states": states, "offsets": offsets, "words": np.ascontiguousarray(stream.words).view(np.int32),
            "escapes": np.ascontiguousarray(stream.escapes), "escape_offsets": escape_offsets,
            "slot_pair": slot_pair, "pair_info": info}


def kernel_args(stream: PairStream, device=None, segment: int | None = None) -> tuple:
    """The positional arguments of :func:`kernels.neuzip_rans.pair_rans_decode` for ``stream``, as tensors on
    ``device``; with ``segment``, the segment layout (pass ``segment=`` to the decode as well)."""
    import torch

    a = {k: torch.from_numpy(v).to(device) for k, v in stream_arrays(stream, segment).items()}
    return (a["states"], a["offsets"], a["words"], a["slot_pair"], a["pair_info"], a["escapes"], a["escape_offsets"],
            stream.table.marker, stream.n, stream.chunk_size, stream.table.precision)
