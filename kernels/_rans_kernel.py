"""The NeuZip exponent decode kernel (format 3, pairs of exponents, segments) and its launch: the one Triton kernel
behind :mod:`kernels.neuzip_rans` (the exponent bytes, or the bf16 weight with the bit merge fused) and
:mod:`kernels.neuzip_gemv` (the decode fused with a matrix-vector product), with the argument checks they share.
The stream format and the arguments are described in :mod:`kernels.neuzip_rans`. A private helper: only the kernel
modules import it."""
from __future__ import annotations

import torch

from kernels.dispatch import triton_available

LANES = 8
ROUND = 2 * LANES  # pairs per round
L_MIN = 1 << 31  # a state's lower end
SHIFT = 32  # bits per word


def warps(rows: int) -> int:
    """Warps per program: one per 32 states of the tile (at most 4)."""
    return max(1, min(4, rows * LANES // 32))


def check_stream(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size, precision,
                 segment) -> tuple[int, int]:
    """(number of segments, segment length) of a well-formed call; ValueError / TypeError otherwise."""
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


def max_rounds(n: int, segment: int) -> int:
    """The most rounds of any segment: a segment's pairs in whole rounds, or fewer when the tensor is smaller."""
    return -(-min(segment // 2, (n + 1) // 2) // ROUND)


def raise_if_corrupt(errors: torch.Tensor) -> None:
    """Raise ``ValueError`` when a decode set the device flag ``errors`` (one device-to-host read; clears it)."""
    if bool(errors.any()):
        errors.zero_()
        raise ValueError("corrupt exponent stream: a segment did not end where the next one starts")


def flag_or_raise(bad: torch.Tensor, errors: torch.Tensor | None) -> None:
    """``bad`` (a device bool) into ``errors`` without a host sync, or checked at once when there is no flag."""
    if errors is None:
        if bool(bad):
            raise ValueError("corrupt exponent stream: a segment did not end where the next one starts")
    else:
        errors.bitwise_or_(bad.to(errors.dtype))


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
                                 GEMV: tl.constexpr, MERGE: tl.constexpr, ESC_FLAGS: tl.constexpr = False):
        """Program ``pid`` decodes segments ``pid * BLOCK ...`` for all rounds, their 8 states as one ``(BLOCK, 8)``
        tile: a round is two steps of the whole tile (state ``i`` decodes pair ``16 r + i``, then ``16 r + 8 + i``),
        then one refill of the tile, each state's word found by a prefix sum over the states that need one.
        Escapes are taken in stream order the same way. ``out_ptr``: the decoded bytes as ``int16`` pairs
        (``(num_segments * segment / 2,)``, padded; the wrapper keeps ``[:n]`` bytes). At the end each segment's
        states and pointers are compared with where the next segment starts (``2**31`` at a chunk's end); a
        mismatch stores 1 at ``err_ptr`` (no atomics needed: every writer writes 1). ``ESC_FLAGS``: an escape is
        known by bits 32 / 33 of its pair's ``pair_info`` entry (tables built on the device, which has no host
        ``marker`` to compare with), not by its byte.

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
                if ESC_FLAGS:  # the pair's escapes flagged in bits 32 / 33 of its pair_info (no marker)
                    hit0 = (real0 & (((t >> 32) & 1) != 0)).to(tl.int64)
                    hit1 = (real1 & (((t >> 33) & 1) != 0)).to(tl.int64)
                else:
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


def launch(args: tuple, out: torch.Tensor, block: int, segment: int | None, errors: torch.Tensor | None,
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
        out, flag, -1 if marker is None else int(marker), n, num, segment, chunk_size // segment,
        words.numel(), escapes.numel(), max_rounds(n, segment), out if fields is None else fields.contiguous(),
        vec.contiguous() if gemv else out, in_features, rows_per_segment, PRECISION=precision, LANES_=LANES,
        BLOCK=block, GEMV=gemv, MERGE=merge, ESC_FLAGS=marker is None, num_warps=warps(block))
    if errors is None:
        raise_if_corrupt(flag)


def decode_kernel():
    """The decode's Triton ``JITFunction`` (for ``bench/aot_sm90.py``, which compiles it for sm_90 without a GPU)."""
    if not triton_available():
        raise RuntimeError("triton is not installed")
    return _pair_rans_decode_kernel

