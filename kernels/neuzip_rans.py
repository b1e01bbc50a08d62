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

An exponent that decodes to ``marker`` is an escape: it takes the next byte of ``escapes``. With ``marker=None``
the escapes are flagged in ``pair_info`` instead (bit 32: the pair's first exponent, bit 33: its second), as the
tables built on a device by :mod:`kernels.neuzip_encode` are (no host value to compare with, no host sync).

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
- :func:`pair_rans_decode_ref`: the same lanes in plain PyTorch;

the lossless weight decoded and merged by one launch (:func:`pair_rans_decode_bf16`, the same arguments plus
``fields``), and :func:`fused_decode_bf16`, the entry point callers use: that weight, or None where the fused kernel
does not apply or is not chosen (the kernel modules own the choice; ``core`` names no Triton function).
:func:`decode_layout` picks the segment length for a device: enough programs to fill it. The kernel itself and its
launch are in :mod:`kernels._rans_kernel`; the decode fused with a matrix-vector product is :mod:`kernels.neuzip_gemv`,
the encoder :mod:`kernels.neuzip_encode`.

Tensor types: ``states (S, 8) int64``, ``offsets (S + 1,) int64``, ``words (W,) int32`` (the uint32 words, bit
for bit), ``slot_pair (2**precision,) uint8``, ``pair_info (P,) int64`` (``P <= 256``), ``escapes (E,) uint8``,
``escape_offsets (S + 1,) int64``; ``marker`` an int in [0, 255], or None (escape flags in ``pair_info``).

(The CPU path of the codec decodes with numba, ``core.neuzip.pairs.decode_into``; these are the GPU path and its
reference.)
"""
from __future__ import annotations

import torch

from kernels._rans_checks import check_run, check_stream_inputs
from kernels._rans_kernel import (L_MIN, LANES, ROUND, SHIFT, check_stream, decode_kernel, flag_or_raise, launch,
                                  max_rounds, raise_if_corrupt)
from kernels._rans_kernel import warps as decode_warps
from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = ["LANES", "DECODE_ROWS", "PROGRAMS_PER_SM", "MIN_SEGMENT", "MAX_SEGMENT", "decode_layout",
           "decode_programs", "decode_kernel", "decode_warps", "multiprocessors", "merge_eligible", "fused_decode_bf16",
           "pair_rans_decode", "pair_rans_decode_ref", "pair_rans_decode_triton", "pair_rans_decode_bf16",
           "pair_rans_decode_bf16_ref", "pair_rans_decode_bf16_triton", "raise_if_corrupt"]

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


def pair_rans_decode_ref(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_pair: torch.Tensor,
                         pair_info: torch.Tensor, escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int,
                         n: int, chunk_size: int, precision: int, *, segment: int | None = None,
                         errors: torch.Tensor | None = None) -> torch.Tensor:
    """Decode all segments as lanes of one vector, pair by pair. Plain PyTorch, no host sync when ``errors`` is
    given (see the module docstring for the arguments). Returns ``(n,) uint8``."""
    num, segment = check_stream(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size,
                                precision, segment)
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
    for r in range(max_rounds(n, segment)):
        act = rounds > r
        for h in range(ROUND):
            j, lane = r * ROUND + h, h % LANES
            xl = x[:, lane]
            s = xl & mask
            t = info[slots[s]]
            x[:, lane] = torch.where(act, (t & 0xFFFF) * (xl >> precision) + s - (t >> 48), xl)
            for half in range(2):
                e = (t >> (16 + 8 * half)) & 0xFF
                escaped = e == marker if marker is not None else ((t >> (32 + half)) & 1) == 1
                hit = (count > 2 * j + half) & escaped
                e = torch.where(hit, esc[q.clamp(max=esc.numel() - 1)], e)
                q = q + hit.to(torch.int64)
                out[:, 2 * j + half] = torch.where(count > 2 * j + half, e, 0).to(torch.uint8)
        for lane in range(LANES):
            xl = x[:, lane]
            need = act & (xl < L_MIN)
            x[:, lane] = torch.where(need, (xl << SHIFT) | w[p.clamp(max=w.numel() - 1)], xl)
            p = p + need.to(torch.int64)
    if num:
        per = chunk_size // segment
        last = ((seg_ids + 1) % per == 0) | (seg_ids == num - 1)
        nxt = torch.cat([states[1:].to(torch.int64), torch.full((1, LANES), L_MIN, dtype=torch.int64, device=device)])
        want = torch.where(last[:, None], torch.full_like(nxt, L_MIN), nxt)
        bad = (x != want).any() | (p != offsets[1:].to(torch.int64)).any() | \
            (q != escape_offsets[1:].to(torch.int64)).any()
        flag_or_raise(bad, errors)
    return out.reshape(-1)[:n]


def pair_rans_decode_triton(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_pair: torch.Tensor,
                            pair_info: torch.Tensor, escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int,
                            n: int, chunk_size: int, precision: int, *, segment: int | None = None,
                            errors: torch.Tensor | None = None, block: int = DECODE_ROWS) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_decode_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical.
    ``block``: segments per program (a power of two; ``bench/gpu.py`` times others)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_decode_ref")
    num, segment = check_stream(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size,
                                precision, segment)
    out = torch.empty(num * segment, dtype=torch.uint8, device=states.device)
    launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
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
    num, segment = check_stream(states, offsets, words, slot_pair, pair_info, escape_offsets, n, chunk_size,
                                precision, segment)
    _merge_check(n, fields, out)
    if out is None:
        out = torch.empty(n, dtype=torch.bfloat16, device=states.device)
    launch((states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size, precision),
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


def fused_decode_bf16(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker, n, chunk_size,
                      precision, fields, *, mantissa_bits: int, scaled: bool, segment=None, errors=None, out=None,
                      block: int = DECODE_ROWS) -> torch.Tensor | None:
    """The weight ``(n,) bfloat16`` decoded and merged by one kernel launch (into ``out`` when given), or None where
    the fused kernel does not apply (a lossy or normalised weight, an odd number of weights, an ``out`` that is not
    contiguous and 4-byte aligned) or is not chosen for these tensors (not on CUDA, or its self-check failed there):
    the caller then decodes the exponents (:func:`pair_rans_decode`) and merges them itself. The choice is made
    here, not by the caller."""
    if not merge_eligible(n, mantissa_bits, scaled):
        return None
    if out is not None and not (out.is_contiguous() and out.data_ptr() % 4 == 0):
        return None
    if not use_triton(states, fields, kernel="pair_rans_decode_bf16"):
        return None
    return pair_rans_decode_bf16_triton(states, offsets, words, slot_pair, pair_info, escapes, escape_offsets, marker,
                                        n, chunk_size, precision, fields, segment=segment, errors=errors, out=out,
                                        block=block)


register_check("pair_rans_decode", KernelCheck(triton=pair_rans_decode_triton, ref=pair_rans_decode_ref,
                                               inputs=check_stream_inputs, run=check_run, dtypes=(torch.int64,)))


def _merge_check_inputs(device, dtype) -> tuple:
    """The decode check's stream (700 weights in segments of 64) with random sign/mantissa bytes; the last element
    is the segment length."""
    args = list(check_stream_inputs(device, dtype))
    fields = torch.randint(0, 256, (args[8],), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    return (*args[:-1], fields.to(device), args[-1])


def _merge_check_run(fn, args):
    """The weight's bits (``int16``: compared exactly)."""
    return check_run(fn, args).view(torch.int16)


register_check("pair_rans_decode_bf16", KernelCheck(
    triton=pair_rans_decode_bf16_triton, ref=pair_rans_decode_bf16_ref, inputs=_merge_check_inputs,
    run=_merge_check_run, dtypes=(torch.int64,)))  # the dtype dispatch keys it by: the states' (no float input)


