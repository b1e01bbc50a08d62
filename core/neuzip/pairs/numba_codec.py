"""The numba twin of the C codec (:mod:`core.neuzip.pairs.native`): the fallback where no C compiler is found (or with
``LAYERWISE_NEUZIP_CODEC=numba``), bit for bit the same streams and values (tested). Importing numba costs a process
about 140 MiB of RSS and its first compiled call about 70 MiB more, which is why it is no longer the default.

Decoding: the rANS rounds of a chunk (8 states, two pairs per refill), the check of its end states, the escapes
patched in, and the merge of exponents with the packed sign/mantissa fields into bf16 bits (the block normaliser
undone per block); :func:`_decode_range` is one compiled call per tensor (the GIL released). Encoding: the pair
indices and escapes, then each chunk coded backwards; the one-pass split of bf16 bits. :class:`NumbaCodec` gives
them the signatures of :mod:`core.neuzip.pairs.backend`.

Every kernel sits in this one file: numba's on-disk cache (``cache=True``) is invalidated by an edit to the file of
a compiled function, not by an edit to another file it calls into."""
from __future__ import annotations

import numba
import numpy as np

from core.neuzip.pairs.constants import LANES, PRECISION, ROUND
from core.neuzip.pairs.constants import STATE_LOW as _L
from core.neuzip.pairs.constants import WORD_BITS as _SHIFT

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


@numba.njit(nogil=True, cache=True)
def _decode_range(words, states, offsets, escapes, escape_offsets, n, chunk_size, first, last, slot_pair, info, marker,
                  fields, scales, out, out_offset, k, block, field_bits, exponents_out):
    """The chunk loop of :func:`core.neuzip.pairs.decode._decode_chunks`, compiled (one call into numba per tensor, the GIL released
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


@numba.njit(nogil=True, cache=True)
def _segment_index(words, states, offsets, escape_offsets, n, chunk_size, segment, slot_pair, info, marker,
                   seg_states, seg_p, seg_q):
    """Run the rANS rounds of every chunk (:func:`_decode_chunk`, one segment at a time into a scratch) and record,
    at the start of each segment of ``segment`` weights (a multiple of 32 dividing ``chunk_size``), the 8 states,
    the word pointer and the escapes taken so far: ``seg_states (S, 8)``, ``seg_p (S + 1,)``, ``seg_q (S + 1,)``
    (the last entries: the totals). A decoder can then start at any segment. Checks every chunk's end states,
    word pointer and escape count on the way; returns -1 when well formed, else the first bad chunk."""
    x = np.empty(LANES, np.int64)
    scratch = np.empty(segment // 2, np.uint16)
    exps = scratch.view(np.uint8)
    num = (n + chunk_size - 1) // chunk_size
    for c in range(num):
        lo = c * chunk_size
        hi = min(n, lo + chunk_size)
        for j in range(LANES):
            x[j] = states[c, j]
        p = np.int64(offsets[c])
        q = np.int64(escape_offsets[c])
        for start in range(lo, hi, segment):
            s = start // segment
            for j in range(LANES):
                seg_states[s, j] = x[j]
            seg_p[s] = p
            seg_q[s] = q
            count = min(hi, start + segment) - start
            p = _decode_chunk(words, p, x, slot_pair, info, scratch, ((count + 1) // 2 + ROUND - 1) // ROUND)
            for i in range(count):
                q += np.int64(exps[i] == marker)
        if p != np.int64(offsets[c + 1]) or q != np.int64(escape_offsets[c + 1]):
            return c
        for j in range(LANES):
            if x[j] != _L:
                return c
    seg_p[seg_p.size - 1] = np.int64(offsets[num])
    seg_q[seg_q.size - 1] = np.int64(escape_offsets[num])
    return -1


# ---- encoding ----
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
def _split(bits, k, exponents, fields):
    """bf16 bits ``(n,) uint16`` -> exponent bytes ``exponents (n,) uint8`` and packed ``1 + k`` bit fields
    ``fields (ceil(n / P),) uint8`` (both written in place): the twin of ``nz_split``."""
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


# ---- tables and format 2 ----
@numba.njit(nogil=True, cache=True)
def _cpu_tables(freq, decoded, alpha, precision):
    """The decoders' two small tables (the CPU decoder's, and on a device each compressed layer's, built once
    at load): ``slot_pair (2**precision,) uint8``, the pair of each slot, and ``info (A * A,) int64``, per pair:
    bits 0-15 the frequency, 16-31 the two exponent bytes, 48-63 ``cdf`` (two L1-resident lookups beat one
    lookup in a 256 KB per-slot table on the CPU: 1.95 against 1.41 GB/s, measured; 34 KB per layer instead of
    256 KB on a device)."""
    slot_pair = np.empty(1 << precision, np.uint8)
    info = np.empty(freq.size, np.int64)
    slot = 0
    for s in range(freq.size):
        pair = decoded[s // alpha] | (decoded[s % alpha] << 8)
        info[s] = freq[s] | (pair << 16) | (slot << 48)
        slot_pair[slot:slot + freq[s]] = s
        slot += freq[s]
    return slot_pair, info


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


class NumbaCodec:
    """The kernels above behind the signatures of :mod:`core.neuzip.pairs.backend` (those of the C codec)."""

    name = "numba"

    def decode_range(self, words, states, offsets, escapes, escape_offsets, n, chunk_size, first, last, slot_pair,
                     info, marker, fields, scales, out, out_offset, k, block, field_bits, exponents_out) -> int:
        return int(_decode_range(words, states.view(np.int64), offsets, escapes, escape_offsets, n, chunk_size, first,
                                 last, slot_pair, info.view(np.int64), np.uint8(marker), _or(fields, np.uint8),
                                 _or(scales, np.uint8), _or(out, np.uint16), out_offset, k, block,
                                 _or(field_bits, np.uint16), _or(exponents_out, np.uint8)))

    def segment_index(self, words, states, offsets, escape_offsets, n, chunk_size, segment, slot_pair, info, marker,
                      seg_states, seg_p, seg_q) -> int:
        return int(_segment_index(words, states.view(np.int64), offsets, escape_offsets, n, chunk_size, segment,
                                  slot_pair, info.view(np.int64), np.uint8(marker), seg_states.view(np.int64), seg_p,
                                  seg_q))

    def split(self, bits, k, exponents, fields, hist=None) -> None:
        _split(bits, int(k), exponents, fields)
        if hist is not None:
            hist += np.bincount(exponents, minlength=256)

    def encode(self, e, lookup, alpha, chunk_size, freq, cdf, pad, states, offsets, words, escapes,
               escape_offsets) -> int:
        n = e.size
        num = states.shape[0]
        pair_index = np.empty((n + 1) // 2, np.int64)
        escaped = np.empty(n, np.uint8)
        escape_counts = np.zeros(num, np.int64)
        used = np.zeros(freq.size, np.int64)
        n_escapes = _pair_indices(e, lookup, alpha, chunk_size, pair_index, escaped, escape_counts, used)
        if np.any(freq[used > 0] == 0):
            return -3
        if n_escapes > escapes.size:
            return -2
        scratch = np.empty(pair_index.size + (ROUND + LANES) * num + LANES, np.uint32)
        counts = np.empty(num, np.int64)
        st = np.empty((num, LANES), np.int64)
        total = _encode_chunks(pair_index, pad, freq, cdf, chunk_size // 2, st, counts, scratch)
        if total > words.size:
            return -1
        words[:total] = scratch[:total]
        states[:] = st.view(np.uint64)
        offsets[0] = 0
        offsets[1:] = np.cumsum(counts)
        escapes[:n_escapes] = escaped[:n_escapes]
        escape_offsets[0] = 0
        escape_offsets[1:] = np.cumsum(escape_counts)
        return int(total)

    def words_bound(self, n: int, chunk_size: int) -> int:
        m, cp = (n + 1) // 2, chunk_size // 2
        return sum(-(-(min(m, lo + cp) - lo) // ROUND) * LANES for lo in range(0, m, cp))

    def tables(self, freq, decoded, alpha, precision, slot_pair, info) -> None:
        sp, inf = _cpu_tables(freq, decoded, np.int64(alpha), precision)
        slot_pair[:] = sp
        info[:] = inf.view(np.uint64)

    def format2_pairs(self, words, states, offsets, slot_pair, freq, cdf, n, chunk_size, out) -> int:
        return int(_format2_pairs(words, states, offsets, slot_pair, freq, cdf, int(n), int(chunk_size), out))


def _or(a, dtype):
    return np.zeros(0, dtype) if a is None else a
