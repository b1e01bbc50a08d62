"""Chunk-parallel decode of NeuZip exponent streams (format 3, pairs of exponents), beside its PyTorch twin.

The stream format ("rans64x32-pairs", written by ``core.neuzip.pairs``): ``n`` exponent bytes as
``ceil(n / 2)`` pairs, cut into chunks of ``chunk_size`` weights (a multiple of 32). Each chunk has 8
rANS states of 64 bits (``states[c, :]``, in ``[2**31, 2**63)``) sharing one stream of 32-bit words
``words[offsets[c]:offsets[c + 1]]``. A chunk's pairs are padded to whole rounds of 16 (the pad pairs
are decoded and dropped); round ``r`` decodes pairs ``16 r + j`` with state ``j % 8``, then refills
the states in order 0..7. A decoder needs one per-slot table of ``2**precision`` int64 entries
(``precision <= 15``): bits 0-15 the frequency, 16-31 ``slot - cdf``, 32-39 / 40-47 the two exponent
bytes::

    for j in 0..15:  t = table[x[j % 8] & (2**precision - 1)]
                     x[j % 8] = (t & 0xFFFF) * (x[j % 8] >> precision) + ((t >> 16) & 0xFFFF)
    for i in 0..7:   if x[i] < 2**31: x[i] = (x[i] << 32) | words[p]; p += 1

An exponent that decodes to ``marker`` is an escape: it takes the chunk's next byte of ``escapes``
(chunk ``c``'s are ``escapes[escape_offsets[c]:escape_offsets[c + 1]]``). A well-formed chunk ends
with all 8 states at ``2**31``, ``p == offsets[c + 1]`` and every escape used; both implementations
check it.

Public functions, one signature
``(states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision) -> (n,) uint8``:

- :func:`pair_rans_decode` dispatches (Triton on CUDA, reference elsewhere),
- :func:`pair_rans_decode_triton`: one program decodes ``BLOCK`` chunks, their ``BLOCK x 8`` states as one tile
  (a round: two table lookups of the whole tile, then one refill, each state's word placed by a prefix sum),
- :func:`pair_rans_decode_ref`: the same lanes in plain PyTorch.

Tensor types: ``states (C, 8) int64``, ``offsets (C + 1,) int64``, ``words (W,) int32`` (the uint32
words, bit for bit), ``table (2**precision,) int64``, ``escapes (E,) uint8``, ``escape_offsets (C + 1,)
int64``; ``marker`` an int in [0, 255].

(The CPU path of the codec decodes with numba, ``core.neuzip.pairs.decode_into``; these two are the
GPU path and its reference.)
"""
from __future__ import annotations

import functools

import torch

from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = ["LANES", "gemv_eligible", "pair_rans_decode", "pair_rans_decode_ref", "pair_rans_decode_triton",
           "pair_rans_gemv", "pair_rans_gemv_ref", "pair_rans_gemv_triton", "slot_table"]

LANES = 8
ROUND = 2 * LANES  # pairs per round
_L = 1 << 31
_SHIFT = 32
_BLOCK = 32  # chunks per program


def _check(states, offsets, words, table, escape_offsets, n, chunk_size, precision) -> int:
    if chunk_size < 2 * ROUND or chunk_size % (2 * ROUND):
        raise ValueError(f"chunk_size must be a positive multiple of {2 * ROUND}")
    num = -(-n // chunk_size) if n > 0 else 0
    if tuple(states.shape) != (num, LANES) or offsets.numel() != num + 1 or escape_offsets.numel() != num + 1:
        raise ValueError(f"{n} symbols in chunks of {chunk_size} need ({num}, {LANES}) states and {num + 1} offsets")
    if not 8 <= precision <= 15 or table.numel() != 1 << precision:
        raise ValueError("the table must have 2**precision entries, precision in [8, 15]")
    if words.dtype != torch.int32:
        raise TypeError("words must be int32 (the uint32 words, bit for bit)")
    return num


def _max_rounds(n: int, chunk_size: int) -> int:
    """The most rounds of any chunk: a chunk's pairs in whole rounds, or fewer when the tensor is smaller."""
    return -(-min(chunk_size // 2, (n + 1) // 2) // ROUND)


def slot_table(freq: torch.Tensor, pair_bytes: torch.Tensor, precision: int) -> torch.Tensor:
    """The per-slot decode table, ``(2**precision,) int64``, built on the device of its inputs without a host sync.

    Parameters
    ----------
    freq : (P,) integer, the frequency of each pair (in pair-index order), summing to ``2**precision``
    pair_bytes : (P,) integer, each pair's two exponent bytes (first in bits 0-7, second in bits 8-15)
    precision : table precision

    Slot ``s`` of pair ``i`` (``cdf[i] <= s < cdf[i] + freq[i]``) holds ``freq[i] | (s - cdf[i]) << 16 |
    pair_bytes[i] << 32``: the layout the decoders read (module docstring). A few kilobytes per tensor stay
    resident (``freq``, ``pair_bytes``); the 256 KB table is rebuilt per decode.
    """
    size = 1 << precision
    freq, pair_bytes = freq.to(torch.int64), pair_bytes.to(torch.int64)
    index = torch.arange(freq.numel(), device=freq.device)
    pair = torch.repeat_interleave(index, freq, output_size=size)  # output_size: no device-to-host sync
    cdf = torch.cumsum(freq, 0) - freq
    slots = torch.arange(size, device=freq.device, dtype=torch.int64)
    return freq[pair] | ((slots - cdf[pair]) << 16) | (pair_bytes[pair] << 32)


def _corrupt(x_end: torch.Tensor, p_end: torch.Tensor, offsets: torch.Tensor, q_end: torch.Tensor,
             escape_offsets: torch.Tensor) -> None:
    if bool((x_end != _L).any()) or bool((p_end != offsets[1:]).any()) or bool((q_end != escape_offsets[1:]).any()):
        raise ValueError("corrupt exponent stream: a chunk did not end in its initial state")


def pair_rans_decode_ref(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, table: torch.Tensor,
                         escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int, n: int, chunk_size: int,
                         precision: int) -> torch.Tensor:
    """Decode all chunks as lanes of one vector, pair by pair. Plain PyTorch.

    Parameters
    ----------
    states : (C, 8) int64; offsets : (C + 1,) int64; words : (W,) int16; table : (2**precision,) int64
    escapes : (E,) uint8; escape_offsets : (C + 1,) int64; marker : the byte escapes decode to
    n : number of exponents; chunk_size : weights per chunk (a multiple of 16; the last chunk may be shorter)

    Returns
    -------
    (n,) uint8
    """
    num = _check(states, offsets, words, table, escape_offsets, n, chunk_size, precision)
    device = states.device
    x = states.to(torch.int64).clone()
    p = offsets[:-1].to(torch.int64).clone()
    q = escape_offsets[:-1].to(torch.int64).clone()
    count = (n - torch.arange(num, device=device, dtype=torch.int64) * chunk_size).clamp(max=chunk_size)
    rounds = ((count + 1) // 2 + ROUND - 1) // ROUND
    w = torch.cat([words.to(torch.int64) & 0xFFFFFFFF, torch.zeros(1, dtype=torch.int64, device=device)])
    esc = torch.cat([escapes.to(torch.int64), torch.zeros(1, dtype=torch.int64, device=device)])
    table = table.to(torch.int64)
    out = torch.zeros(num, chunk_size, dtype=torch.uint8, device=device)
    mask = (1 << precision) - 1
    for r in range(_max_rounds(n, chunk_size)):
        act = rounds > r
        for h in range(ROUND):
            j, lane = r * ROUND + h, h % LANES
            xl = x[:, lane]
            t = table[xl & mask]
            x[:, lane] = torch.where(act, (t & 0xFFFF) * (xl >> precision) + ((t >> 16) & 0xFFFF), xl)
            for half in range(2):
                e = (t >> (32 + 8 * half)) & 0xFF
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
        _corrupt(x, p, offsets.to(torch.int64), q, escape_offsets.to(torch.int64))
    return out.reshape(-1)[:n]


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _pair_rans_decode_kernel(states_ptr, offsets_ptr, words_ptr, table_ptr, escapes_ptr, escape_offsets_ptr,
                                 out_ptr, x_end_ptr, p_end_ptr, q_end_ptr, marker, n, num_chunks, chunk_size,
                                 num_words, num_escapes, max_rounds, fields_ptr, vec_ptr, in_features, rows_per_chunk,
                                 PRECISION: tl.constexpr, LANES_: tl.constexpr, BLOCK: tl.constexpr,
                                 GEMV: tl.constexpr):
        """Program ``pid`` decodes chunks ``pid * BLOCK ...`` for all rounds, their 8 states as one ``(BLOCK, 8)``
        tile: a round is two steps of the whole tile (state ``i`` decodes pair ``16 r + i``, then ``16 r + 8 + i``),
        then one refill of the tile, each state's word found by a prefix sum over the states that need one.
        Escapes are taken in stream order the same way. ``out_ptr``: the decoded bytes as ``int16`` pairs
        (``(num_chunks * chunk_size / 2,)``, padded; the wrapper keeps ``[:n]`` bytes).

        ``GEMV``: the exponents are not stored; each is merged at once with its sign/mantissa byte
        (``fields_ptr``, lossless k = 7) into a bf16 weight of the row-major ``(n / in_features, in_features)``
        matrix and multiplied by ``vec_ptr[column]`` (float32). A round's 32 weights lie in one row
        (``in_features`` and ``chunk_size`` are multiples of 32); a chunk sums its rounds row by row in order and
        writes each row's sum to ``out_ptr[chunk, row - first row of the chunk]`` (float32,
        ``(num_chunks, rows_per_chunk)``): no atomics, the same sums in the same order every run.
        """
        pid = tl.program_id(0)
        c = pid * BLOCK + tl.arange(0, BLOCK)
        live = c < num_chunks
        col = tl.arange(0, LANES_)
        X = tl.load(states_ptr + c[:, None] * LANES_ + col[None, :], mask=live[:, None], other=2147483648)
        p = tl.load(offsets_ptr + c, mask=live, other=0)
        q = tl.load(escape_offsets_ptr + c, mask=live, other=0)
        start = c.to(tl.int64) * chunk_size
        count = tl.minimum(n - start, chunk_size)
        rounds = ((count + 1) // 2 + 2 * LANES_ - 1) // (2 * LANES_)
        if GEMV:
            row0 = start // in_features
            row = row0
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for r in range(0, max_rounds):  # the most rounds of any chunk (a tensor smaller than a chunk needs fewer)
            act = live & (r < rounds)
            if GEMV:
                row_r = (start + r * 4 * LANES_) // in_features
                moved = act & (row_r != row)
                tl.store(out_ptr + c * rows_per_chunk + (row - row0), acc, mask=moved)
                acc = tl.where(moved, 0.0, acc)
                row = tl.where(act, row_r, row)
            for half in tl.static_range(2):
                j = r * 2 * LANES_ + half * LANES_ + col  # the pair each state decodes, (LANES,)
                t = tl.load(table_ptr + (X & ((1 << PRECISION) - 1)), mask=act[:, None], other=0)
                X = tl.where(act[:, None], (t & 0xFFFF) * (X >> PRECISION) + ((t >> 16) & 0xFFFF), X)
                real0 = live[:, None] & (2 * j[None, :] < count[:, None])
                real1 = live[:, None] & (2 * j[None, :] + 1 < count[:, None])
                e0 = (t >> 32) & 0xFF
                e1 = (t >> 40) & 0xFF
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
                    w0 = (((f0 & 0x80) << 8) | (e0.to(tl.int32) << 7) | (f0 & 0x7F)) << 16
                    w1 = (((f1 & 0x80) << 8) | (e1.to(tl.int32) << 7) | (f1 & 0x7F)) << 16
                    v0 = tl.load(vec_ptr + i0 % in_features, mask=real0, other=0.0)
                    v1 = tl.load(vec_ptr + (i0 + 1) % in_features, mask=real1, other=0.0)
                    prod = tl.where(real0, w0.to(tl.float32, bitcast=True) * v0, 0.0) + \
                        tl.where(real1, w1.to(tl.float32, bitcast=True) * v1, 0.0)
                    acc = acc + tl.sum(prod, axis=1)
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
            tl.store(out_ptr + c * rows_per_chunk + (row - row0), acc, mask=live)
        tl.store(x_end_ptr + c[:, None] * LANES_ + col[None, :], X, mask=live[:, None])
        tl.store(p_end_ptr + c, p, mask=live)
        tl.store(q_end_ptr + c, q, mask=live)


def _launch(args: tuple, out: torch.Tensor, block: int, fields: torch.Tensor | None = None,
            vec: torch.Tensor | None = None, in_features: int = 1, rows_per_chunk: int = 1) -> None:
    """Run the kernel over the checked stream ``args`` (the public functions' first ten arguments) into ``out``:
    decoded bytes, or with ``fields`` and ``vec`` (GEMV mode) the per-(chunk, row) partial sums; then verify that
    every chunk ended in its initial state."""
    states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision = args
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    num, device = states.shape[0], states.device
    if not num:
        return
    x_end = torch.empty(num, LANES, dtype=torch.int64, device=device)
    p_end = torch.empty(num, dtype=torch.int64, device=device)
    q_end = torch.empty(num, dtype=torch.int64, device=device)
    w = words if words.numel() else torch.zeros(1, dtype=torch.int32, device=device)
    esc = escapes if escapes.numel() else torch.zeros(1, dtype=torch.uint8, device=device)
    gemv = fields is not None
    _pair_rans_decode_kernel[(triton.cdiv(num, block),)](
        states.to(torch.int64).contiguous(), offsets.to(torch.int64).contiguous(), w.contiguous(),
        table.to(torch.int64).contiguous(), esc.contiguous(), escape_offsets.to(torch.int64).contiguous(),
        out, x_end, p_end, q_end, int(marker), n, num, chunk_size, words.numel(), escapes.numel(),
        _max_rounds(n, chunk_size), fields.contiguous() if gemv else out, vec.contiguous() if gemv else out,
        in_features, rows_per_chunk, PRECISION=precision, LANES_=LANES, BLOCK=block, GEMV=gemv)
    _corrupt(x_end, p_end, offsets.to(torch.int64), q_end, escape_offsets.to(torch.int64))


def pair_rans_decode_triton(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, table: torch.Tensor,
                            escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int, n: int, chunk_size: int,
                            precision: int, *, block: int = _BLOCK) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_decode_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical.
    ``block``: chunks per program (a power of two; ``bench/gpu.py`` times others)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_decode_ref")
    num = _check(states, offsets, words, table, escape_offsets, n, chunk_size, precision)
    out = torch.empty(num * chunk_size, dtype=torch.uint8, device=states.device)
    _launch((states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision),
            out.view(torch.int16), block)
    return out[:n]


def pair_rans_decode(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, table: torch.Tensor,
                     escapes: torch.Tensor, escape_offsets: torch.Tensor, marker: int, n: int, chunk_size: int,
                     precision: int) -> torch.Tensor:
    """Decode a format-3 exponent stream: Triton on CUDA, reference elsewhere. See :func:`pair_rans_decode_ref`."""
    args = (states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision)
    if use_triton(states, offsets, words, table, escape_offsets, kernel="pair_rans_decode"):
        return pair_rans_decode_triton(*args)
    return pair_rans_decode_ref(*args)


def _gemv_check(n: int, chunk_size: int, fields: torch.Tensor, vec: torch.Tensor) -> tuple[int, int]:
    in_features = vec.numel()
    if in_features == 0 or in_features % 32 or n % in_features:
        raise ValueError(f"the fused GEMV needs in_features a positive multiple of 32 dividing n, got {in_features}")
    if fields.numel() != n:
        raise ValueError("the fused GEMV takes lossless weights: one sign/mantissa byte per weight (k = 7)")
    return n // in_features, in_features


def pair_rans_gemv_ref(states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision,
                       fields, vec) -> torch.Tensor:
    """``W @ vec`` for a lossless NeuZip weight ``W`` (row-major ``(n / in_features, in_features)``, exponents as
    the stream above, sign/mantissa bytes ``fields``) and ``vec (in_features,)``: the decode, the bit merge, then
    a float32 matrix-vector product. Plain PyTorch; returns ``(n / in_features,) float32``."""
    from kernels.neuzip_bits import merge_bf16_ref

    out_features, in_features = _gemv_check(n, chunk_size, fields, vec)
    exponent = pair_rans_decode_ref(states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size,
                                    precision)
    weight = merge_bf16_ref(exponent, fields, 7).view(out_features, in_features)
    return weight.float() @ vec.float()


@functools.lru_cache(maxsize=512)
def _row_gather(num: int, chunk_size: int, in_features: int, out_features: int, device: torch.device) -> torch.Tensor:
    """``(out_features, K)`` indices into the flat partial sums (``num * rows_per_chunk`` of them, then one zero):
    row ``r``'s entry of each chunk that touches it, in chunk order, and the zero where a chunk does not. Built once
    per weight shape and device (a few KB), not in every call: batch-1 generation calls each layer once a token."""
    rows_per_chunk = _rows_per_chunk(chunk_size, in_features)
    r = torch.arange(out_features, device=device, dtype=torch.int64)
    c = (r * in_features // chunk_size)[:, None] + torch.arange((in_features - 1) // chunk_size + 2, device=device)
    valid = (c < num) & (c * chunk_size < (r[:, None] + 1) * in_features)
    slot = (r[:, None] - c * chunk_size // in_features).clamp(0, rows_per_chunk - 1)
    return torch.where(valid, c.clamp(max=num - 1) * rows_per_chunk + slot, num * rows_per_chunk)


def _rows_per_chunk(chunk_size: int, in_features: int) -> int:
    """The most rows one chunk of ``chunk_size`` weights touches, rows of ``in_features``."""
    return (chunk_size - 1) // in_features + 2


def pair_rans_gemv_triton(states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision,
                          fields, vec, *, block: int = _BLOCK) -> torch.Tensor:
    """Triton twin of :func:`pair_rans_gemv_ref`: the exponent decode fused with the matrix-vector product (each
    decoded weight is merged and multiplied in registers; the bf16 weight never exists in memory). Sums in float32
    in another order than the reference: equal within rounding, and the same every run (no atomics)."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_gemv_ref")
    num = _check(states, offsets, words, table, escape_offsets, n, chunk_size, precision)
    out_features, in_features = _gemv_check(n, chunk_size, fields, vec)
    rows_per_chunk = _rows_per_chunk(chunk_size, in_features)
    partial = torch.zeros(num * rows_per_chunk + 1, dtype=torch.float32, device=states.device)  # + the zero
    _launch((states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision), partial,
            block, fields, vec.float(), in_features, rows_per_chunk)
    # each row's sum of its chunks' partial sums, chunks in order (a gather and a sum: deterministic)
    return partial[_row_gather(num, chunk_size, in_features, out_features, states.device)].sum(1)


def gemv_eligible(n: int, in_features: int, mantissa_bits: int, scaled: bool) -> bool:
    """Whether a weight can take the fused decode + GEMV: lossless, no normaliser, rows of a multiple of 32."""
    return mantissa_bits == 7 and not scaled and in_features > 0 and in_features % 32 == 0 and n % in_features == 0


def pair_rans_gemv(states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision,
                   fields, vec) -> torch.Tensor:
    """``W @ vec`` straight from the compressed weight: the fused Triton kernel on CUDA (after its self-check),
    the reference elsewhere. See :func:`pair_rans_gemv_ref`."""
    args = (states, offsets, words, table, escapes, escape_offsets, marker, n, chunk_size, precision, fields, vec)
    if use_triton(states, offsets, words, table, escape_offsets, fields, vec, kernel="pair_rans_gemv"):
        return pair_rans_gemv_triton(*args)
    return pair_rans_gemv_ref(*args)


def _check_inputs(device, dtype, n: int = 700, chunk_size: int = 128, precision: int = 10) -> tuple:
    """A small valid stream for the self-check: skewed pairs (escapes included) in chunks of 8 interleaved states,
    encoded by a plain rANS encoder (the inverse of the decode loop in the module docstring; pad pairs 0)."""
    marker = 255
    pairs = [(120, 121), (121, 121), (122, marker), (marker, 119)]
    freq = [500, 300, 150, 74]  # sums to 2**precision
    cdf = [sum(freq[:i]) for i in range(len(freq))]
    g = torch.Generator().manual_seed(0)
    symbols = torch.multinomial(torch.tensor(freq, dtype=torch.float), n // 2, replacement=True, generator=g).tolist()
    states, offsets, words, escapes, escape_offsets = [], [0], [], [], [0]
    for start in range(0, n // 2, chunk_size // 2):
        chunk = symbols[start:start + chunk_size // 2]
        rounds = -(-len(chunk) // ROUND)
        padded = chunk + [0] * (rounds * ROUND - len(chunk))
        x, out = [_L] * LANES, []
        for r in reversed(range(rounds)):
            for lane in reversed(range(LANES)):
                a, b = padded[r * ROUND + lane], padded[r * ROUND + LANES + lane]
                if x[lane] >> (2 * _SHIFT - 1 - 2 * precision) >= freq[a] * freq[b]:
                    out.append(x[lane] & 0xFFFFFFFF)
                    x[lane] >>= _SHIFT
                for s in (b, a):
                    x[lane] = ((x[lane] // freq[s]) << precision) + x[lane] % freq[s] + cdf[s]
        states.append(x)
        words += out[::-1]
        offsets.append(len(words))
        escapes += [7 + (i % 100) for i, s in enumerate(chunk) for e in pairs[s] if e == marker]
        escape_offsets.append(len(escapes))
    table = slot_table(torch.tensor(freq), torch.tensor([a | (b << 8) for a, b in pairs]), precision)
    w = torch.tensor(words, dtype=torch.int64)
    return (torch.tensor(states, dtype=torch.int64, device=device), torch.tensor(offsets, device=device),
            torch.where(w >= 2**31, w - 2**32, w).to(torch.int32).to(device), table.to(device),
            torch.tensor(escapes, dtype=torch.uint8, device=device), torch.tensor(escape_offsets, device=device),
            marker, n, chunk_size, precision)


register_check("pair_rans_decode", KernelCheck(triton=pair_rans_decode_triton, ref=pair_rans_decode_ref,
                                               inputs=_check_inputs, dtypes=(torch.int64,)))


def _gemv_check_inputs(device, dtype, in_features: int = 64, chunk_size: int = 96) -> tuple:
    """The decode check's stream read as a ``(n / 64, 64)`` matrix (chunks of 96 weights straddle rows), random
    sign/mantissa bytes and a random vector."""
    args = list(_check_inputs(device, dtype, n=704, chunk_size=chunk_size))
    g = torch.Generator().manual_seed(1)
    fields = torch.randint(0, 256, (args[7],), generator=g, dtype=torch.uint8)
    vec = torch.randn(in_features, generator=g)
    return (*args, fields.to(device), vec.to(device))


register_check("pair_rans_gemv", KernelCheck(
    triton=pair_rans_gemv_triton, ref=pair_rans_gemv_ref, inputs=_gemv_check_inputs, dtypes=(torch.float32,),
    auto=False, why="not yet timed on a GPU against the decode + cuBLAS it replaces (bench/gpu.py neuzip_generate): "
                    "opt-in with LAYERWISE_KERNELS=triton until it is shown to win"))
