"""Chunk-parallel decode of NeuZip exponent streams (format 3, pairs of exponents), beside its PyTorch twin.

The stream format ("rans64x32-pairs", written by ``core.neuzip.pairs``): ``n`` exponent bytes as
``ceil(n / 2)`` pairs, cut into chunks of ``chunk_size`` weights (a multiple of 32). Each chunk has 8
rANS states of 64 bits (in ``[2**31, 2**63)``) sharing one stream of 32-bit words. A chunk's pairs are padded
to whole rounds of 16 (the pad pairs are decoded and dropped); round ``r`` decodes pairs ``16 r + j`` with
state ``j % 8``, then refills the states in order 0..7. A decoder reads two small tables (built once per tensor:
:meth:`core.neuzip.pairs.PairTable.cpu_tables`): ``slot_pair (2**precision,) uint8``, the pair of each slot,
and ``pair_info (A * A,) int64``, per pair: bits 0-15 its frequency, 16-23 / 24-31 its two exponent bytes,
48-63 its ``cdf``::

    for j in 0..15:  s = x[j % 8] & (2**precision - 1);  t = pair_info[slot_pair[s]]
                     x[j % 8] = (t & 0xFFFF) * (x[j % 8] >> precision) + s - (t >> 48)
    for i in 0..7:   if x[i] < 2**31: x[i] = (x[i] << 32) | words[p]; p += 1

An exponent that decodes to ``marker`` is an escape: it takes the next byte of ``escapes``.

**Segments.** A decoder may start at any *segment* of ``segment`` weights (a multiple of 32 dividing
``chunk_size``), not only at a chunk, given the 8 states, word pointer and escape pointer there
(:func:`core.neuzip.pairs.segment_index` records them in one pass over the stream). So a GPU decodes a matrix
with as many independent lanes as it needs, whatever the chunk size the file was written with (the app's
chunks are 2**17 weights: a 1536x576 matrix is 7 chunks, which alone would be 7 sequential lanes of 4,096
rounds each). ``states (S, 8)``, ``offsets (S + 1,)`` and ``escape_offsets (S + 1,)`` are then per segment
(``S = ceil(n / segment)``); with ``segment = chunk_size`` (the default) they are the chunks' own arrays.
A well-formed segment ends where the next one starts (its states, word and escape pointers), and the last
segment of a chunk with all 8 states at ``2**31``: both implementations check it.

**Checks without a host sync.** Given ``errors`` (an ``int32`` device tensor), a decode that finds a segment
ending anywhere else sets ``errors`` to nonzero and returns at once: nothing waits for the device, and the
caller looks at the flag once (``core.neuzip`` does so once per forward). Without ``errors`` the functions check
at once and raise ``ValueError`` (one device-to-host read).

Public functions, one signature
``(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision,
*, segment=None, errors=None) -> (n,) uint8``:

- :func:`pair_rans_decode` dispatches (Triton on CUDA, reference elsewhere),
- :func:`pair_rans_decode_triton`: one program decodes ``block`` segments, their ``block x 8`` states as one tile
  (a round: two steps of the whole tile, then one refill, each state's word placed by a prefix sum),
- :func:`pair_rans_decode_ref`: the same lanes in plain PyTorch.

and the fused decode + matrix-vector product of batch-1 generation (:func:`pair_rans_gemv`, the same arguments
plus ``fields, vec``). :func:`decode_layout` picks the segment length for a device: enough programs to fill it.

Tensor types: ``states (S, 8) int64``, ``offsets (S + 1,) int64``, ``words (W,) int32`` (the uint32 words, bit
for bit), ``slot_pair (2**precision,) uint8``, ``pair_info (P,) int64`` (``P <= 256``), ``escapes (E,) uint8``,
``escape_offsets (S + 1,) int64``; ``marker`` an int in [0, 255].

(The CPU path of the codec decodes with numba, ``core.neuzip.pairs.decode_into``; these are the GPU path and its
reference.)
"""
from __future__ import annotations

import functools

import torch

from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = ["LANES", "DECODE_ROWS", "PROGRAMS_PER_SM", "MIN_SEGMENT", "MAX_SEGMENT", "decode_layout",
           "decode_programs", "multiprocessors", "gemv_eligible", "merge_eligible", "pair_rans_decode",
           "pair_rans_decode_ref", "pair_rans_decode_triton", "pair_rans_decode_bf16", "pair_rans_decode_bf16_ref",
           "pair_rans_decode_bf16_triton", "pair_rans_gemv", "pair_rans_gemv_ref", "pair_rans_gemv_triton",
           "raise_if_corrupt"]

LANES = 8
ROUND = 2 * LANES  # pairs per round
_L = 1 << 31
_SHIFT = 32

# ---- the device layout: set from the first GPU run (2026-11-27, H200: docs/gpu.md) -----------------------------------
DECODE_ROWS = 4  # segments per program: a (4, 8) tile of states, one warp (rows 1-2 were slower at both sizes)
PROGRAMS_PER_SM = 2  # at least this many programs per multiprocessor for one matrix (when MIN_SEGMENT allows)
MIN_SEGMENT = 512  # weights; the shortest segment: each costs 80 bytes of resident index (8 states, 2 offsets)
MAX_SEGMENT = 1024  # weights; the longest: a segment is 32 serial rounds at most, however large the matrix
# (24576x576 on the H200: segments of 8192 decoded at 92 GB/s, of 1024 at 216 GB/s, of 256 at 226 GB/s)


def multiprocessors(device: torch.device | str) -> int | None:
    """The device's multiprocessor count (CUDA), or None (the CPU and other devices: no segment layout)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def decode_layout(n: int, chunk_size: int, sms: int | None, rows: int = DECODE_ROWS,
                  per_sm: int = PROGRAMS_PER_SM, min_segment: int = MIN_SEGMENT,
                  max_segment: int = MAX_SEGMENT) -> int:
    """The segment length (weights) to decode ``n`` weights written in chunks of ``chunk_size`` on a device with
    ``sms`` multiprocessors: halving the chunk down to ``max_segment`` (a segment's serial rounds do not grow with
    the matrix), then on while it gives fewer than ``per_sm`` programs of ``rows`` segments per multiprocessor,
    but not below ``min_segment`` (nor below 32, nor to a length that no longer divides the chunk). ``sms`` None:
    the chunk itself (no index).

    At the app's chunk of 2**17 on an H100 (132 multiprocessors): a 1536x576 matrix gets segments of 512 weights,
    1,728 segments, 432 programs (2 per SM needs 264); a 24576x576 one segments of 1024 (3,456 programs)."""
    segment = int(chunk_size)
    if not sms:
        return segment
    want = per_sm * sms * rows
    floor = max(2 * ROUND, int(min_segment))
    while (segment > max_segment or -(-n // segment) < want) and segment // 2 >= floor \
            and segment % (4 * ROUND) == 0:
        segment //= 2
    return segment


def decode_programs(n: int, segment: int, rows: int = DECODE_ROWS) -> int:
    """How many programs decode ``n`` weights in segments of ``segment``, ``rows`` segments a program."""
    return -(-(-(-n // segment)) // rows)


def _warps(rows: int) -> int:
    """Warps per program: one per 32 states of the tile (at most 4)."""
    return max(1, min(4, rows * LANES // 32))


def _check(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
           segment) -> tuple[int, int]:
    segment = chunk_size if segment is None else int(segment)
    if chunk_size < 2 * ROUND or chunk_size % (2 * ROUND):
        raise ValueError(f"chunk_size must be a positive multiple of {2 * ROUND}")
    if segment < 2 * ROUND or segment % (2 * ROUND) or chunk_size % segment:
        raise ValueError(f"segment must be a multiple of {2 * ROUND} dividing chunk_size, got {segment}")
    num = -(-n // segment) if n > 0 else 0
    if tuple(states.shape) != (num, LANES) or offsets.numel() != num + 1 or escape_offsets.numel() != num + 1:
        raise ValueError(f"{n} symbols in segments of {segment} need ({num}, {LANES}) states and {num + 1} offsets")
    if not 8 <= precision <= 15 or slot_pair.numel() != 1 << precision or slot_pair.dtype != torch.uint8:
        raise ValueError("slot_pair must be uint8 with 2**precision entries, precision in [8, 15]")
    if pair_info.dtype != torch.int64 or not 0 < pair_info.numel() <= 256:
        raise ValueError("pair_info must be int64 with at most 256 entries")
    if words.dtype != torch.int32:
        raise TypeError("words must be int32 (the uint32 words, bit for bit)")
    return num, segment


def _max_rounds(n: int, segment: int) -> int:
    """The most rounds of any segment: a segment's pairs in whole rounds, or fewer when the tensor is smaller."""
    return -(-min(segment // 2, (n + 1) // 2) // ROUND)


def raise_if_corrupt(errors: torch.Tensor) -> None:
    """Raise ``ValueError`` when a decode set the device flag ``errors`` (one device-to-host read; clears it)."""
    if bool(errors.any()):
        errors.zero_()
        raise ValueError("corrupt exponent stream: a segment did not end where the next one starts")


def _flag(bad: torch.Tensor, errors: torch.Tensor | None) -> None:
    """``bad`` (a device bool) into ``errors`` without a host sync, or checked at once when there is no flag."""
    if errors is None:
        if bool(bad):
            raise ValueError("corrupt exponent stream: a segment did not end where the next one starts")
    else:
        errors.bitwise_or_(bad.to(errors.dtype))


def pair_rans_decode_ref(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_pair: torch.Tensor,
                         pair_info: torch.Tensor, escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int,
                         n: int, chunk_size: int, precision: int, *, segment: int | None = None,
                         errors: torch.Tensor | None = None) -> torch.Tensor:
    """Decode all segments as lanes of one vector, pair by pair. Plain PyTorch, no host sync when ``errors`` is
    given (see the module docstring for the arguments). Returns ``(n,) uint8``."""
    num, segment = _check(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
                          segment)
    device = states.device
    x = states.to(torch.int64).clone()
    p = offsets[:-1].to(torch.int64).clone()
    q = escape_offsets[:-1].to(torch.int64).clone()
    seg_ids = torch.arange(num, device=device, dtype=torch.int64)
    count = (n - seg_ids * segment).clamp(max=segment)
    rounds = ((count + 1) // 2 + ROUND - 1) // ROUND
    w = torch.cat([words.to(torch.int64) & 0xFFFFFFFF, torch.zeros(1, dtype=torch.int64, device=device)])
    esc = torch.cat([escapes.to(torch.int64), torch.zeros(1, dtype=torch.int64, device=device)])
    slots, info = slot_pair.to(torch.int64), pair_info.to(torch.int64)
    out = torch.zeros(num, segment, dtype=torch.uint8, device=device)
    mask = (1 << precision) - 1
    for r in range(_max_rounds(n, segment)):
        act = rounds > r
        for h in range(ROUND):
            j, lane = r * ROUND + h, h % LANES
            xl = x[:, lane]
            s = xl & mask
            t = info[slots[s]]
            x[:, lane] = torch.where(act, (t & 0xFFFF) * (xl >> precision) + s - (t >> 48), xl)
            for half in range(2):
                e = (t >> (16 + 8 * half)) & 0xFF
                hit = (count > 2 * j + half) & (e == marker)
                e = torch.where(hit, esc[q.clamp(max=esc.numel() - 1)], e)
                q = q + hit.to(torch.int64)
                out[:, 2 * j + half] = torch.where(count > 2 * j + half, e, 0).to(torch.uint8)
        for lane in range(LANES):
            xl = x[:, lane]
            need = act & (xl < _L)
            x[:, lane] = torch.where(need, (xl << _SHIFT) | w[p.clamp(max=w.numel() - 1)], xl)
            p = p + need.to(torch.int64)
    if num:
        per = chunk_size // segment
        last = ((seg_ids + 1) % per == 0) | (seg_ids == num - 1)
        nxt = torch.cat([states[1:].to(torch.int64), torch.full((1, LANES), _L, dtype=torch.int64, device=device)])
        want = torch.where(last[:, None], torch.full_like(nxt, _L), nxt)
        bad = (x != want).any() | (p != offsets[1:].to(torch.int64)).any() | \
            (q != escape_offsets[1:].to(torch.int64)).any()
        _flag(bad, errors)
    return out.reshape(-1)[:n]


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _bf16_bits(field, exponent):
        """The bf16 bits (int32, low 16) of a lossless (k = 7) sign/mantissa byte and its exponent byte."""
        return ((field & 0x80) << 8) | (exponent << 7) | (field & 0x7F)

    @triton.jit
    def _pair_rans_decode_kernel(states_ptr, offsets_ptr, words_ptr, slot_ptr, info_ptr, escapes_ptr,
                                 escape_offsets_ptr, out_ptr, err_ptr, marker, n, num_segments, segment, per_chunk,
                                 num_words, num_escapes, max_rounds, fields_ptr, vec_ptr, in_features,
                                 rows_per_segment, PRECISION: tl.constexpr, LANES_: tl.constexpr, BLOCK: tl.constexpr,
                                 GEMV: tl.constexpr, MERGE: tl.constexpr):
        """Program ``pid`` decodes segments ``pid * BLOCK ...`` for all rounds, their 8 states as one ``(BLOCK, 8)``
        tile: a round is two steps of the whole tile (state ``i`` decodes pair ``16 r + i``, then ``16 r + 8 + i``),
        then one refill of the tile, each state's word found by a prefix sum over the states that need one.
        Escapes are taken in stream order the same way. ``out_ptr``: the decoded bytes as ``int16`` pairs
        (``(num_segments * segment / 2,)``, padded; the wrapper keeps ``[:n]`` bytes). At the end each segment's
        states and pointers are compared with where the next segment starts (``2**31`` at a chunk's end); a
        mismatch stores 1 at ``err_ptr`` (no atomics needed: every writer writes 1).

        ``MERGE``: the exponents are not stored either; each pair is merged at once with its two sign/mantissa
        bytes (``fields_ptr``, lossless k = 7) into two bf16 weights, stored as one ``int32`` at ``out_ptr``
        (the bf16 destination seen as ``int32``, ``n`` even): decode and bit merge in one pass, no intermediate.

        ``GEMV``: the exponents are not stored; each is merged at once with its sign/mantissa byte
        (``fields_ptr``, lossless k = 7) into a bf16 weight of the row-major ``(n / in_features, in_features)``
        matrix and multiplied by ``vec_ptr[column]`` (float32). A round's 32 weights lie in one row
        (``in_features`` and ``segment`` are multiples of 32); a segment sums its rounds row by row in order and
        writes each row's sum to ``out_ptr[segment, row - first row of the segment]`` (float32,
        ``(num_segments, rows_per_segment)``): no atomics, the same sums in the same order every run.
        """
        pid = tl.program_id(0)
        c = pid * BLOCK + tl.arange(0, BLOCK)
        live = c < num_segments
        col = tl.arange(0, LANES_)
        X = tl.load(states_ptr + c[:, None] * LANES_ + col[None, :], mask=live[:, None], other=2147483648)
        p = tl.load(offsets_ptr + c, mask=live, other=0)
        q = tl.load(escape_offsets_ptr + c, mask=live, other=0)
        start = c.to(tl.int64) * segment
        count = tl.minimum(n - start, segment)
        rounds = ((count + 1) // 2 + 2 * LANES_ - 1) // (2 * LANES_)
        if GEMV:
            row0 = start // in_features
            row = row0
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for r in range(0, max_rounds):  # the most rounds of any segment (a tensor smaller than one needs fewer)
            act = live & (r < rounds)
            if GEMV:
                row_r = (start + r * 4 * LANES_) // in_features
                moved = act & (row_r != row)
                tl.store(out_ptr + c * rows_per_segment + (row - row0), acc, mask=moved)
                acc = tl.where(moved, 0.0, acc)
                row = tl.where(act, row_r, row)
            for half in tl.static_range(2):
                j = r * 2 * LANES_ + half * LANES_ + col  # the pair each state decodes, (LANES,)
                s = X & ((1 << PRECISION) - 1)
                pr = tl.load(slot_ptr + s, mask=act[:, None], other=0).to(tl.int32)
                t = tl.load(info_ptr + pr, mask=act[:, None], other=0)
                X = tl.where(act[:, None], (t & 0xFFFF) * (X >> PRECISION) + s - (t >> 48), X)
                real0 = live[:, None] & (2 * j[None, :] < count[:, None])
                real1 = live[:, None] & (2 * j[None, :] + 1 < count[:, None])
                e0 = (t >> 16) & 0xFF
                e1 = (t >> 24) & 0xFF
                hit0 = (real0 & (e0 == marker)).to(tl.int64)
                hit1 = (real1 & (e1 == marker)).to(tl.int64)
                both = hit0 + hit1
                q0 = q[:, None] + tl.cumsum(both, axis=1) - both  # escapes before this pair, in stream order
                e0 = tl.where(hit0 != 0, tl.load(escapes_ptr + q0, mask=(hit0 != 0) & (q0 < num_escapes),
                                                 other=0).to(tl.int64), e0)
                q1 = q0 + hit0
                e1 = tl.where(hit1 != 0, tl.load(escapes_ptr + q1, mask=(hit1 != 0) & (q1 < num_escapes),
                                                 other=0).to(tl.int64), e1)
                q = q + tl.sum(both, axis=1)
                e1 = tl.where(real1, e1, 0)
                if GEMV:
                    i0 = start[:, None] + 2 * j[None, :]  # the pair's two weights: i0, i0 + 1
                    f0 = tl.load(fields_ptr + i0, mask=real0, other=0).to(tl.int32)
                    f1 = tl.load(fields_ptr + i0 + 1, mask=real1, other=0).to(tl.int32)
                    w0 = _bf16_bits(f0, e0.to(tl.int32)) << 16
                    w1 = _bf16_bits(f1, e1.to(tl.int32)) << 16
                    v0 = tl.load(vec_ptr + i0 % in_features, mask=real0, other=0.0)
                    v1 = tl.load(vec_ptr + (i0 + 1) % in_features, mask=real1, other=0.0)
                    prod = tl.where(real0, w0.to(tl.float32, bitcast=True) * v0, 0.0) + \
                        tl.where(real1, w1.to(tl.float32, bitcast=True) * v1, 0.0)
                    acc = acc + tl.sum(prod, axis=1)
                elif MERGE:
                    i0 = start[:, None] + 2 * j[None, :]  # the pair's two weights: i0, i0 + 1 (n even: both real)
                    f0 = tl.load(fields_ptr + i0, mask=real0, other=0).to(tl.int32)
                    f1 = tl.load(fields_ptr + i0 + 1, mask=real1, other=0).to(tl.int32)
                    both16 = _bf16_bits(f0, e0.to(tl.int32)) | (_bf16_bits(f1, e1.to(tl.int32)) << 16)
                    tl.store(out_ptr + start[:, None] // 2 + j[None, :], both16, mask=real0)  # little-endian
                else:
                    pair = (e0 | (e1 << 8)).to(tl.int16)  # bytes 2j, 2j + 1 (little-endian)
                    tl.store(out_ptr + start[:, None] // 2 + j[None, :], pair, mask=real0)
            need = act[:, None] & (X < 2147483648)
            grow = need.to(tl.int64)
            at = p[:, None] + tl.cumsum(grow, axis=1) - grow  # states refill in order 0..7
            wd = tl.load(words_ptr + at, mask=need & (at < num_words), other=0).to(tl.int64) & 0xFFFFFFFF
            X = tl.where(need, (X << 32) | wd, X)
            p = p + tl.sum(grow, axis=1)
        if GEMV:
            tl.store(out_ptr + c * rows_per_segment + (row - row0), acc, mask=live)
        last = (((c + 1) % per_chunk) == 0) | (c == num_segments - 1)
        want = tl.load(states_ptr + (c[:, None] + 1) * LANES_ + col[None, :], mask=(live & ~last)[:, None],
                       other=2147483648)
        bad_x = tl.sum((X != want).to(tl.int32), axis=1) != 0
        bad = live & (bad_x | (p != tl.load(offsets_ptr + c + 1, mask=live, other=0))
                      | (q != tl.load(escape_offsets_ptr + c + 1, mask=live, other=0)))
        tl.store(err_ptr + c * 0, bad.to(tl.int32), mask=bad)


def _launch(args: tuple, out: torch.Tensor, block: int, segment: int | None, errors: torch.Tensor | None,
            fields: torch.Tensor | None = None, vec: torch.Tensor | None = None, in_features: int = 1,
            rows_per_segment: int = 1) -> None:
    """Run the kernel over the checked stream ``args`` (the public functions' first eleven arguments) into
    ``out``: decoded bytes; with ``fields`` alone (MERGE mode) the bf16 weights, as ``int32`` pairs; with
    ``fields`` and ``vec`` (GEMV mode) the per-(segment, row) partial sums. A segment that does not end where the
    next starts sets ``errors`` (or, without it, raises at once)."""
    states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision = args
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    segment = chunk_size if segment is None else int(segment)
    num, device = states.shape[0], states.device
    if not num:
        return
    flag = errors if errors is not None else torch.zeros(1, dtype=torch.int32, device=device)
    w = words if words.numel() else torch.zeros(1, dtype=torch.int32, device=device)
    esc = escapes if escapes.numel() else torch.zeros(1, dtype=torch.uint8, device=device)
    gemv, merge = fields is not None and vec is not None, fields is not None and vec is None
    _pair_rans_decode_kernel[(triton.cdiv(num, block),)](
        states.to(torch.int64).contiguous(), offsets.to(torch.int64).contiguous(), w.contiguous(),
        slot_pair.contiguous(), pair_info.contiguous(), esc.contiguous(), escape_offsets.to(torch.int64).contiguous(),
        out, flag, int(marker), n, num, segment, chunk_size // segment,
        words.numel(), escapes.numel(), _max_rounds(n, segment), out if fields is None else fields.contiguous(),
        vec.contiguous() if gemv else out, in_features, rows_per_segment, PRECISION=precision, LANES_=LANES,
        BLOCK=block, GEMV=gemv, MERGE=merge, num_warps=_warps(block))
    if errors is None:
        raise_if_corrupt(flag)


def pair_rans_decode_triton(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_pair: torch.Tensor,
                            pair_info: torch.Tensor, escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int,
                            n: int, chunk_size: int, precision: int, *, segment: int | None = None,
                            errors: torch.Tensor | None = None, block: int = DECODE_ROWS) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_decode_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical.
    ``block``: segments per program (a power of two; ``bench/gpu.py`` times others)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_decode_ref")
    num, segment = _check(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
                          segment)
    out = torch.empty(num * segment, dtype=torch.uint8, device=states.device)
    _launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
             precision), out.view(torch.int16), block, segment, errors)
    return out[:n]


def pair_rans_decode(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_pair: torch.Tensor,
                     pair_info: torch.Tensor, escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int, n: int,
                     chunk_size: int, precision: int, *, segment: int | None = None,
                     errors: torch.Tensor | None = None, block: int = DECODE_ROWS) -> torch.Tensor:
    """Decode a format-3 exponent stream: Triton on CUDA, reference elsewhere. See :func:`pair_rans_decode_ref`."""
    args = (states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision)
    if use_triton(states, offsets, words, slot_pair, pair_info, escape_offsets, kernel="pair_rans_decode"):
        return pair_rans_decode_triton(*args, segment=segment, errors=errors, block=block)
    return pair_rans_decode_ref(*args, segment=segment, errors=errors)


def merge_eligible(n: int, mantissa_bits: int, scaled: bool) -> bool:
    """Whether a weight can take the fused decode + bit merge: lossless (one sign/mantissa byte per weight), no
    normaliser, an even number of weights (the kernel writes bf16 pairs as ``int32``)."""
    return mantissa_bits == 7 and not scaled and n > 0 and n % 2 == 0


def merge_chosen(*tensors: torch.Tensor) -> bool:
    """Whether the fused decode + bit merge kernel runs for ``tensors`` (the dispatcher's choice, made here and not by
    its callers: CUDA tensors and its self-check passed); where not, the caller decodes, then merges."""
    return use_triton(*tensors, kernel="pair_rans_decode_bf16")


def _merge_check(n: int, fields: torch.Tensor, out: torch.Tensor | None) -> None:
    if n <= 0 or n % 2:
        raise ValueError(f"the fused decode + merge writes bf16 pairs: it needs an even number of weights, got {n}")
    if fields.numel() != n or fields.dtype != torch.uint8:
        raise ValueError("the fused decode + merge takes lossless weights: one sign/mantissa byte per weight (k = 7)")
    if out is not None and (out.dtype != torch.bfloat16 or out.numel() != n or not out.is_contiguous()
                            or out.data_ptr() % 4):
        raise ValueError(f"out must be a contiguous, 4-byte aligned bfloat16 tensor of {n} elements")


def pair_rans_decode_bf16_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                              chunk_size, precision, fields, *, segment=None, errors=None, out=None) -> torch.Tensor:
    """The lossless weight ``(n,) bfloat16`` from its exponent stream (as :func:`pair_rans_decode_ref`) and its
    sign/mantissa bytes ``fields (n,) uint8``: the decode, then the bit merge (:func:`merge_bf16_ref`, k = 7).
    Plain PyTorch; written into ``out`` when given."""
    from kernels.neuzip_bits import merge_bf16_ref

    _merge_check(n, fields, out)
    exponent = pair_rans_decode_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                                    chunk_size, precision, segment=segment, errors=errors)
    weight = merge_bf16_ref(exponent, fields, 7)
    return weight if out is None else out.copy_(weight)


def pair_rans_decode_bf16_triton(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                                 chunk_size, precision, fields, *, segment=None, errors=None, out=None,
                                 block: int = DECODE_ROWS) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_decode_bf16_ref`, bit-identical: one launch decodes the exponents and merges
    them with their sign/mantissa bytes in registers, writing the bf16 weight straight into ``out`` (e.g. the
    shared decompression buffer): no exponent tensor, no separate merge kernel, no copy."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_decode_bf16_ref")
    num, segment = _check(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
                          segment)
    _merge_check(n, fields, out)
    if out is None:
        out = torch.empty(n, dtype=torch.bfloat16, device=states.device)
    _launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision),
            out.view(torch.int32), block, segment, errors, fields)
    return out


def pair_rans_decode_bf16(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                          chunk_size, precision, fields, *, segment=None, errors=None, out=None,
                          block: int = DECODE_ROWS) -> torch.Tensor:
    """The lossless bf16 weight from its compressed arrays: the fused Triton decode + merge on CUDA (after its
    self-check), the reference elsewhere. See :func:`pair_rans_decode_bf16_ref`."""
    args = (states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision,
            fields)
    if use_triton(states, offsets, words, slot_pair, escape_offsets, fields, kernel="pair_rans_decode_bf16"):
        return pair_rans_decode_bf16_triton(*args, segment=segment, errors=errors, out=out, block=block)
    return pair_rans_decode_bf16_ref(*args, segment=segment, errors=errors, out=out)


def _gemv_check(n: int, fields: torch.Tensor, vec: torch.Tensor) -> tuple[int, int]:
    in_features = vec.numel()
    if in_features == 0 or in_features % 32 or n % in_features:
        raise ValueError(f"the fused GEMV needs in_features a positive multiple of 32 dividing n, got {in_features}")
    if fields.numel() != n:
        raise ValueError("the fused GEMV takes lossless weights: one sign/mantissa byte per weight (k = 7)")
    return n // in_features, in_features


def pair_rans_gemv_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
                       precision, fields, vec, *, segment=None, errors=None) -> torch.Tensor:
    """``W @ vec`` for a lossless NeuZip weight ``W`` (row-major ``(n / in_features, in_features)``, exponents as
    the stream above, sign/mantissa bytes ``fields``) and ``vec (in_features,)``: the decode, the bit merge, then
    a float32 matrix-vector product. Plain PyTorch; returns ``(n / in_features,) float32``."""
    from kernels.neuzip_bits import merge_bf16_ref

    out_features, in_features = _gemv_check(n, fields, vec)
    exponent = pair_rans_decode_ref(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                                    chunk_size, precision, segment=segment, errors=errors)
    weight = merge_bf16_ref(exponent, fields, 7).view(out_features, in_features)
    return weight.float() @ vec.float()


@functools.lru_cache(maxsize=512)
def _row_gather(num: int, segment: int, in_features: int, out_features: int, device: torch.device) -> torch.Tensor:
    """``(out_features, K)`` indices into the flat partial sums (``num * rows_per_segment`` of them, then one zero):
    row ``r``'s entry of each segment that touches it, in segment order, and the zero where a segment does not.
    Built once per weight shape, layout and device (a few KB), not in every call: batch-1 generation calls each
    layer once a token."""
    rows_per = _rows_per_segment(segment, in_features)
    r = torch.arange(out_features, device=device, dtype=torch.int64)
    c = (r * in_features // segment)[:, None] + torch.arange((in_features - 1) // segment + 2, device=device)
    valid = (c < num) & (c * segment < (r[:, None] + 1) * in_features)
    slot = (r[:, None] - c * segment // in_features).clamp(0, rows_per - 1)
    return torch.where(valid, c.clamp(max=num - 1) * rows_per + slot, num * rows_per)


def _rows_per_segment(segment: int, in_features: int) -> int:
    """The most rows one segment of ``segment`` weights touches, rows of ``in_features``."""
    return (segment - 1) // in_features + 2


def pair_rans_gemv_triton(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n,
                          chunk_size, precision, fields, vec, *, segment=None, errors=None,
                          block: int = DECODE_ROWS) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_gemv_ref`: the exponent decode fused with the matrix-vector product (each
    decoded weight is merged and multiplied in registers; the bf16 weight never exists in memory). Sums in float32
    in another order than the reference: equal within rounding, and the same every run (no atomics)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_gemv_ref")
    num, segment = _check(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
                          segment)
    out_features, in_features = _gemv_check(n, fields, vec)
    rows_per = _rows_per_segment(segment, in_features)
    partial = torch.zeros(num * rows_per + 1, dtype=torch.float32, device=states.device)  # + the zero
    _launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision),
            partial, block, segment, errors, fields, vec.float(), in_features, rows_per)
    # each row's sum of its segments' partial sums, segments in order (a gather and a sum: deterministic)
    return partial[_row_gather(num, segment, in_features, out_features, states.device)].sum(1)


def gemv_eligible(n: int, in_features: int, mantissa_bits: int, scaled: bool) -> bool:
    """Whether a weight can take the fused decode + GEMV: lossless, no normaliser, rows of a multiple of 32."""
    return mantissa_bits == 7 and not scaled and in_features > 0 and in_features % 32 == 0 and n % in_features == 0


def gemv_chosen(*tensors: torch.Tensor) -> bool:
    """Whether the fused decode + GEMV kernel runs for ``tensors`` (the dispatcher's choice, made here and not by its
    callers: CUDA tensors, its self-check passed, and opted in while it is ``auto=False``); where not, the caller
    decodes the weight and multiplies."""
    return use_triton(*tensors, kernel="pair_rans_gemv")


def pair_rans_gemv(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
                   precision, fields, vec, *, segment=None, errors=None, block: int = DECODE_ROWS) -> torch.Tensor:
    """``W @ vec`` straight from the compressed weight: the fused Triton kernel on CUDA (after its self-check),
    the reference elsewhere. See :func:`pair_rans_gemv_ref`."""
    args = (states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision,
            fields, vec)
    if use_triton(states, offsets, words, slot_pair, escape_offsets, fields, vec, kernel="pair_rans_gemv"):
        return pair_rans_gemv_triton(*args, segment=segment, errors=errors, block=block)
    return pair_rans_gemv_ref(*args, segment=segment, errors=errors)


def _check_inputs(device, dtype, n: int = 700, chunk_size: int = 128, precision: int = 10,
                  segment: int = 64) -> tuple:
    """A small valid stream for the self-check: skewed pairs (escapes included) in chunks of 8 interleaved states,
    encoded by a plain rANS encoder (the inverse of the decode loop in the module docstring; pad pairs 0), laid out
    in segments of ``segment`` weights (the encoder's states between rounds are where the decoder's start); the
    last element is ``segment``."""
    marker = 255
    pairs = [(120, 121), (121, 121), (122, marker), (marker, 119)]
    freq = [500, 300, 150, 74]  # sums to 2**precision
    cdf = [sum(freq[:i]) for i in range(len(freq))]
    g = torch.Generator().manual_seed(0)
    symbols = torch.multinomial(torch.tensor(freq, dtype=torch.float), n // 2, replacement=True, generator=g).tolist()
    states, offsets, words, escapes, escape_offsets = [], [0], [], [], [0]
    per = segment // 2 // ROUND  # rounds per segment
    for start in range(0, n // 2, chunk_size // 2):
        chunk = symbols[start:start + chunk_size // 2]
        rounds = -(-len(chunk) // ROUND)
        padded = chunk + [0] * (rounds * ROUND - len(chunk))
        x, out, marks = [_L] * LANES, [], {}
        for r in reversed(range(rounds)):
            for lane in reversed(range(LANES)):
                a, b = padded[r * ROUND + lane], padded[r * ROUND + LANES + lane]
                if x[lane] >> (2 * _SHIFT - 1 - 2 * precision) >= freq[a] * freq[b]:
                    out.append(x[lane] & 0xFFFFFFFF)
                    x[lane] >>= _SHIFT
                for s in (b, a):
                    x[lane] = ((x[lane] // freq[s]) << precision) + x[lane] % freq[s] + cdf[s]
            if r % per == 0:
                marks[r] = (list(x), len(out))  # the decoder's states at round r, and the words it has not read
        taken = [e == marker for s in chunk for e in pairs[s]]
        for r in sorted(marks):
            x_r, left = marks[r]
            states.append(x_r)
            offsets.append(len(words) + len(out) - left)
            escape_offsets.append(len(escapes) + sum(taken[:2 * r * ROUND]))
        words += out[::-1]
        escapes += [7 + (i % 100) for i, s in enumerate(chunk) for e in pairs[s] if e == marker]
    offsets, escape_offsets = offsets[1:] + [len(words)], escape_offsets[1:] + [len(escapes)]
    slot_pair = torch.repeat_interleave(torch.arange(len(freq)), torch.tensor(freq)).to(torch.uint8)
    info = torch.tensor([f | ((a | (b << 8)) << 16) | (c << 48) for f, (a, b), c in zip(freq, pairs, cdf)])
    w = torch.tensor(words, dtype=torch.int64)
    return (torch.tensor(states, dtype=torch.int64, device=device), torch.tensor(offsets, device=device),
            torch.where(w >= 2**31, w - 2**32, w).to(torch.int32).to(device), slot_pair.to(device), info.to(device),
            torch.tensor(escapes, dtype=torch.uint8, device=device), torch.tensor(escape_offsets, device=device),
            marker, n, chunk_size, precision, segment)


def _check_run(fn, args):
    """The check's call: the stream's arguments, then its segment length as the keyword."""
    return fn(*args[:-1], segment=args[-1])


register_check("pair_rans_decode", KernelCheck(triton=pair_rans_decode_triton, ref=pair_rans_decode_ref,
                                               inputs=_check_inputs, run=_check_run, dtypes=(torch.int64,)))


def _merge_check_inputs(device, dtype) -> tuple:
    """The decode check's stream (700 weights in segments of 64) with random sign/mantissa bytes; the last element
    is the segment length."""
    args = list(_check_inputs(device, dtype))
    fields = torch.randint(0, 256, (args[8],), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    return (*args[:-1], fields.to(device), args[-1])


def _merge_check_run(fn, args):
    """The weight's bits (``int16``: compared exactly)."""
    return _check_run(fn, args).view(torch.int16)


register_check("pair_rans_decode_bf16", KernelCheck(
    triton=pair_rans_decode_bf16_triton, ref=pair_rans_decode_bf16_ref, inputs=_merge_check_inputs,
    run=_merge_check_run, dtypes=(torch.int64,)))  # the dtype dispatch keys it by: the states' (no float input)


def _gemv_check_inputs(device, dtype, in_features: int = 64, chunk_size: int = 96) -> tuple:
    """The decode check's stream read as a ``(n / 64, 64)`` matrix (chunks of 96 weights in segments of 32 straddle
    rows), random sign/mantissa bytes and a random vector; the last element is the segment length."""
    args = list(_check_inputs(device, dtype, n=704, chunk_size=chunk_size, segment=32))
    g = torch.Generator().manual_seed(1)
    fields = torch.randint(0, 256, (args[8],), generator=g, dtype=torch.uint8)
    vec = torch.randn(in_features, generator=g)
    return (*args[:-1], fields.to(device), vec.to(device), args[-1])


register_check("pair_rans_gemv", KernelCheck(
    triton=pair_rans_gemv_triton, ref=pair_rans_gemv_ref, inputs=_gemv_check_inputs, run=_check_run,
    dtypes=(torch.float32,), auto=False,
    why="not yet timed on a GPU against the decode + cuBLAS it replaces (bench/gpu.py neuzip_generate): "
        "opt-in with LAYERWISE_KERNELS=triton until it is shown to win"))
