"""The NeuZip encoder on the device: exponent bytes -> a format-3 stream (:mod:`kernels.neuzip_rans` describes it),
byte for byte what the CPU encoder (``core.neuzip.pairs.encode``, numba) writes for the same chunk size, without a
host sync: every array has a shape known from ``n`` and the chunk size, and every data-dependent size (the words,
the escapes) is written into a buffer of fixed capacity and reported as a device scalar.

Three steps, each on the exponents' device:

1. :func:`stream_table`: the pair table (the 15 most frequent exponents, their scaled counts, the escape's count,
   the integer pair frequencies with their remainder rule, the pad pair) and the decoders' tables (``slot_pair``,
   ``pair_info`` with the escapes flagged in bits 32 / 33), from a histogram. Small torch ops on 256-entry arrays
   (sorts with the CPU encoder's tie rules); the alphabet size ``A`` stays a device scalar, the arrays padded to
   ``A <= 16``.
2. :func:`escape_counts` / :func:`write_escapes`: escapes per chunk, and the escaped bytes in stream order into a
   capacity buffer (slices of the tensor at a time: the temporaries stay small).
3. :func:`pair_rans_encode`: the rANS coding of each chunk (8 interleaved 64-bit states, backwards from ``2**31``),
   Triton on CUDA after its self-check, the PyTorch twin elsewhere. Chunks are independent, so a program encodes
   ``block`` chunks as one ``(block, 8)`` tile of states. Two passes: the first finds each chunk's final states and
   word count, the second (after a prefix sum gives the word offsets) writes each word where a decoder reads it:
   round by round in increasing order, states 0..7 within a round.

:func:`encode_stream` runs the three into caller-owned capacity buffers: ``words (cap_w + 1,) int32`` and
``escapes (cap_e + 1,) uint8``, the last entry of each a dummy slot that masked writes go to. It writes them only
when the stream fits (``ok``, a device bool): a stream that outgrows its buffers leaves them as they were (the
caller keeps its previous weight and reads ``ok`` when it next syncs).

The chunk size is the caller's: on a device the decode's segment length (:func:`kernels.neuzip_rans.decode_layout`)
gives as many independent programs to the encoder as to the decoder, and no segment index is needed.
"""
from __future__ import annotations

import torch

from kernels._rans_kernel import L_MIN, LANES, ROUND, SHIFT
from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = ["PRECISION", "MAX_DIRECT", "ENCODE_ROWS", "SLICE", "stream_table", "escape_counts", "write_escapes",
           "pair_rans_encode", "pair_rans_encode_ref", "pair_rans_encode_triton", "encode_stream", "encode_kernel"]

PRECISION = 15  # format 3's table precision
MAX_DIRECT = 15  # exponents coded directly; the rest escape
_MAX_COUNT = (1 << 16) - 1
ENCODE_ROWS = 4  # chunks per program: a (4, 8) tile of states, one warp (as the decode's tile)
SLICE = 1 << 20  # exponents per slice of the histogram and escape passes (bounds their temporaries)


def _slices(n: int, chunk_size: int):
    """``(start, stop)`` ranges of about :data:`SLICE` exponents, each starting on a chunk."""
    step = max(1, SLICE // chunk_size) * chunk_size
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def stream_table(exponent: torch.Tensor) -> dict:
    """The format-3 table of ``exponent (n,) uint8`` and the decoders' tables, on its device, no host sync.

    Returns a dict of tensors: ``symbols (15,) int64`` (the ``K`` most frequent exponents ascending, then 256),
    ``K`` and ``alpha`` (``A = K + 1``) as 0-dim int64, ``counts (16,) int64`` (the scaled counts, escape at index
    ``K``, zeros after), ``freq`` / ``cdf (256,) int64`` indexed by the pair index ``a * A + b``, ``pad`` (the pad
    pair), ``marker`` (the smallest byte not a symbol), ``lookup (256,) int64`` (byte -> alphabet index, the escape
    ``A - 1`` for bytes not coded directly), ``slot_pair (2**15,) uint8`` and ``pair_info (256,) int64`` (as
    ``PairTable.cpu_tables`` builds them, plus the escape flags in bits 32 / 33)."""
    device = exponent.device
    n = exponent.numel()
    hist = torch.zeros(256, dtype=torch.int64, device=device)
    for start, stop in _slices(n, 1):
        e = exponent[start:stop].to(torch.int64)
        hist.index_add_(0, e, torch.ones_like(e))
    byte = torch.arange(256, device=device, dtype=torch.int64)
    # the 15 most frequent (ties: the lower byte), then those present, ascending
    order = torch.sort(-hist * 256 + byte, stable=True).indices[:MAX_DIRECT]
    present = hist[order] > 0
    symbols = torch.sort(torch.where(present, order, 256)).values
    K = present.sum()
    valid = symbols < 256
    direct = torch.where(valid, hist[symbols.clamp(max=255)], 0)
    counts = torch.zeros(16, dtype=torch.int64, device=device)
    counts[:MAX_DIRECT] = direct
    counts.scatter_add_(0, K.view(1), (hist.sum() - direct.sum()).view(1))  # the escapes' count at index K
    top = counts.max()
    scaled = torch.where(counts > 0, torch.clamp((counts * _MAX_COUNT) // top, min=1), 0)
    counts = torch.where(top > _MAX_COUNT, scaled, counts)
    alpha = K + 1
    freq = _pair_frequencies(counts, alpha, 1 << PRECISION)
    cdf = torch.cumsum(freq, 0) - freq
    in_set = torch.zeros(257, dtype=torch.bool, device=device)
    in_set[symbols] = True
    marker = torch.argmin(in_set[:256].to(torch.int32))  # the first byte not a symbol
    decoded = torch.cat([symbols, symbols.new_zeros(1)])  # alphabet index -> byte (the escape: the marker)
    decoded = torch.where(torch.arange(16, device=device) == K, marker, decoded).clamp(max=255)
    lookup = torch.full((257,), 0, dtype=torch.int64, device=device) + (alpha - 1)
    lookup[symbols] = torch.arange(MAX_DIRECT, device=device)
    pair = torch.arange(256, device=device, dtype=torch.int64)
    first, second = (pair // alpha).clamp(max=15), (pair % alpha).clamp(max=15)
    flags = (first == alpha - 1).to(torch.int64) | ((second == alpha - 1).to(torch.int64) << 1)
    info = freq | ((decoded[first] | (decoded[second] << 8)) << 16) | (flags << 32) | (cdf << 48)
    info = torch.where(freq > 0, info, 0)
    slot_pair = torch.repeat_interleave(pair, freq, output_size=1 << PRECISION).to(torch.uint8)
    return {"symbols": symbols, "K": K, "alpha": alpha, "counts": counts, "freq": freq, "cdf": cdf,
            "pad": torch.argmax(freq), "marker": marker, "lookup": lookup[:256], "slot_pair": slot_pair,
            "pair_info": info}


def _pair_frequencies(counts: torch.Tensor, alpha: torch.Tensor, m: int) -> torch.Tensor:
    """``core.neuzip.pairs.pair_frequencies`` on the device: integer pair frequencies ``(256,) int64`` (pair index
    ``a * A + b``; zeros past ``A * A``) summing to ``m``, with its rules: ``floor(m w / W)`` (at least 1 for a
    present pair); a remainder handed out one by one to the largest ``(m w) mod W`` (ties: the lower index); an
    excess taken back from the largest frequencies (ties: the lower index), at most half of each, in passes."""
    device = counts.device
    p = torch.arange(256, device=device, dtype=torch.int64)
    a, b = p // alpha, p % alpha
    w = torch.where(p < alpha * alpha, counts[a.clamp(max=15)] * counts[b.clamp(max=15)], 0)
    total = w.sum()
    present = w > 0
    f = torch.where(present, torch.clamp((w * m) // total, min=1), 0)
    deficit = m - f.sum()
    rem = (w * m) % total
    key = torch.where(present, (total - rem) * 256 + p, torch.iinfo(torch.int64).max)
    rank = torch.empty_like(p).scatter_(0, torch.sort(key, stable=True).indices, p)
    f = f + (present & (rank < deficit)).to(torch.int64)  # deficit <= 0: nobody
    excess = torch.clamp(-deficit, min=0)
    for _ in range(2):  # one pass takes it all back at precision 15 (the halves of 32,768 far exceed 256)
        big = f > 1
        key = torch.where(big, (m - f) * 256 + p, torch.iinfo(torch.int64).max)
        order = torch.sort(key, stable=True).indices
        cap = torch.where(big, torch.clamp(f // 2, min=1), 0)[order]
        take = torch.minimum(torch.clamp(excess - (torch.cumsum(cap, 0) - cap), min=0), cap)
        f = f - torch.zeros_like(f).scatter_(0, order, take)
        excess = excess - take.sum()
    return f


def escape_counts(exponent: torch.Tensor, lookup: torch.Tensor, alpha: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """How many escapes each chunk of ``chunk_size`` exponents holds: ``(C,) int64``."""
    n = exponent.numel()
    out = []
    for start, stop in _slices(n, chunk_size):
        escaped = (lookup[exponent[start:stop].to(torch.int64)] == alpha - 1).to(torch.int64)
        pad = -(stop - start) % chunk_size
        out.append(torch.nn.functional.pad(escaped, (0, pad)).view(-1, chunk_size).sum(1))
    return torch.cat(out)


def write_escapes(exponent: torch.Tensor, lookup: torch.Tensor, alpha: torch.Tensor, escapes: torch.Tensor,
                  ok: torch.Tensor) -> None:
    """The escaped exponents in stream order into ``escapes (cap + 1,) uint8`` where ``ok`` (a device bool); a
    write that does not fit, or any write when not ``ok``, goes to the dummy last entry."""
    dummy = escapes.numel() - 1
    carry = torch.zeros((), dtype=torch.int64, device=exponent.device)
    for start, stop in _slices(exponent.numel(), 1):
        e = exponent[start:stop]
        escaped = lookup[e.to(torch.int64)] == alpha - 1
        rank = torch.cumsum(escaped.to(torch.int64), 0) + carry - 1
        at = torch.where(escaped & ok & (rank < dummy), rank, dummy)
        escapes.index_put_((at,), e)
        carry = rank[-1] + 1


def _check_encode(exponent, lookup, freq, cdf, n, chunk_size, words) -> int:
    if exponent.dtype != torch.uint8 or exponent.dim() != 1 or exponent.numel() != n or n < 1:
        raise ValueError(f"exponent must be a 1-d uint8 tensor of {n} >= 1 entries")
    if chunk_size < 2 * ROUND or chunk_size % (2 * ROUND):
        raise ValueError(f"chunk_size must be a positive multiple of {2 * ROUND}, got {chunk_size}")
    if lookup.numel() != 256 or freq.numel() != 256 or cdf.numel() != 256:
        raise ValueError("lookup, freq and cdf must have 256 entries")
    if words.dtype != torch.int32 or words.dim() != 1 or words.numel() < 1:
        raise ValueError("words must be a 1-d int32 buffer with a dummy last entry")
    return -(-n // chunk_size)


def _pairs_of(exponent, lookup, alpha, pad, first, hi, n):
    """The pair index of pair ``first`` (a tensor of pair positions) or ``pad`` past ``hi`` (per row): the twin's
    gather of two exponents and their alphabet indices."""
    real = first < hi
    i0 = (2 * first).clamp(max=n - 1)
    i1 = (2 * first + 1).clamp(max=n - 1)
    a = lookup[exponent[i0].to(torch.int64)]
    b = torch.where(2 * first + 1 < n, lookup[exponent[i1].to(torch.int64)], 0)
    return torch.where(real, a * alpha + b, pad)


def pair_rans_encode_ref(exponent, lookup, freq, cdf, alpha, pad, n, chunk_size, words, ok=None):
    """The rANS coding of every chunk as lanes of one vector, round by round backwards (plain PyTorch, no host
    sync): ``(states (C, 8) int64, offsets (C + 1,) int64)``; the words are written into ``words`` (their decoding
    order) where ``ok`` allows (default: where they fit), else to its dummy last entry."""
    num = _check_encode(exponent, lookup, freq, cdf, n, chunk_size, words)
    device = exponent.device
    chunk_pairs, m = chunk_size // 2, (n + 1) // 2
    c = torch.arange(num, device=device, dtype=torch.int64)
    lo = c * chunk_pairs
    hi = torch.clamp(lo + chunk_pairs, max=m)
    rounds = (hi - lo + ROUND - 1) // ROUND
    lane = torch.arange(LANES, device=device, dtype=torch.int64)
    most = -(-min(chunk_pairs, m) // ROUND)

    def run(write_at=None):
        x = torch.full((num, LANES), L_MIN, dtype=torch.int64, device=device)
        emitted = torch.zeros(num, dtype=torch.int64, device=device)
        for r in range(most - 1, -1, -1):
            act = (r < rounds)[:, None]
            first = lo[:, None] + r * ROUND + lane[None, :]
            a = _pairs_of(exponent, lookup, alpha, pad, first, hi[:, None], n)
            b = _pairs_of(exponent, lookup, alpha, pad, first + LANES, hi[:, None], n)
            fa, fb = freq[a], freq[b]
            emit = act & ((x >> (2 * SHIFT - 1 - 2 * PRECISION)) >= fa * fb)
            count = emit.to(torch.int64)
            if write_at is not None:
                at = write_at(emitted, count, emit)
                value = x & 0xFFFFFFFF
                words.index_put_((at,), torch.where(value >= 1 << 31, value - (1 << 32), value).to(torch.int32))
            emitted = emitted + count.sum(1)
            x = torch.where(emit, x >> SHIFT, x)
            fb, fa = torch.where(act, fb, 1), torch.where(act, fa, 1)
            y = ((x // fb) << PRECISION) + x % fb + cdf[b]
            y = ((y // fa) << PRECISION) + y % fa + cdf[a]
            x = torch.where(act, y, x)
        return x, emitted

    states, totals = run()
    offsets = torch.cat([totals.new_zeros(1), torch.cumsum(totals, 0)])
    dummy = words.numel() - 1
    fits = offsets[-1] <= dummy
    allowed = fits if ok is None else ok & fits

    def write_at(after, count, emit):  # a word's place: the chunk's later rounds fill its end, lanes in order
        pos = offsets[:-1, None] + (totals - after - count.sum(1))[:, None] + torch.cumsum(count, 1) - count
        return torch.where(emit & allowed, pos, dummy)

    run(write_at)
    return states, offsets


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _pair_at(e_ptr, lookup_ptr, A, pad, first, hi, n, act):
        """Pair index of pair positions ``first`` (a tile), ``pad`` past ``hi``; the second exponent of an odd
        tensor's last pair is index 0."""
        real = act & (first < hi)
        e0 = tl.load(e_ptr + 2 * first, mask=real, other=0).to(tl.int32)
        e1 = tl.load(e_ptr + 2 * first + 1, mask=real & (2 * first + 1 < n), other=0).to(tl.int32)
        a = tl.load(lookup_ptr + e0, mask=real, other=0)
        b = tl.load(lookup_ptr + e1, mask=real & (2 * first + 1 < n), other=0)
        b = tl.where(2 * first + 1 < n, b, 0)
        return tl.where(real, a * A + b, pad)

    @triton.jit
    def _pair_rans_encode_kernel(e_ptr, lookup_ptr, freq_ptr, cdf_ptr, alpha_ptr, pad_ptr, states_ptr, totals_ptr,
                                 offsets_ptr, words_ptr, allowed_ptr, n, num_chunks, chunk_pairs, most_rounds, dummy,
                                 PRECISION_: tl.constexpr, LANES_: tl.constexpr, BLOCK: tl.constexpr,
                                 WRITE: tl.constexpr):
        """Program ``pid`` encodes chunks ``pid * BLOCK ...``, their 8 states as one ``(BLOCK, 8)`` tile, rounds from
        the last to the first: before a state codes its two pairs of a round it moves its low 32 bits out when
        ``x >= 2**33 f_a f_b`` (a word), then codes the second pair, then the first. Pass 1 (``WRITE`` False)
        stores the final states and each chunk's word count; pass 2 writes each word at its place in decoding
        order, ``offsets[c] + (words of the earlier rounds) + (words of the lower states this round)``, when
        ``allowed`` (else nothing)."""
        pid = tl.program_id(0)
        c = pid * BLOCK + tl.arange(0, BLOCK)
        live = c < num_chunks
        col = tl.arange(0, LANES_)
        A = tl.load(alpha_ptr)
        pad = tl.load(pad_ptr)
        m = (n + 1) // 2
        lo = c.to(tl.int64) * chunk_pairs
        hi = tl.minimum(lo + chunk_pairs, m)
        rounds = tl.where(live, (hi - lo + 2 * LANES_ - 1) // (2 * LANES_), 0)
        X = tl.full((BLOCK, LANES_), 2147483648, tl.int64)
        emitted = tl.zeros((BLOCK,), dtype=tl.int64)
        if WRITE:
            allowed = tl.load(allowed_ptr + c * 0) != 0  # (BLOCK,): one flag for all
            total = tl.load(totals_ptr + c, mask=live, other=0)
            base = tl.load(offsets_ptr + c, mask=live, other=0)
        for rr in range(0, most_rounds):
            r = most_rounds - 1 - rr
            act = live & (r < rounds)
            first = lo[:, None] + r * 2 * LANES_ + col[None, :]
            a = _pair_at(e_ptr, lookup_ptr, A, pad, first, hi[:, None], n, act[:, None])
            b = _pair_at(e_ptr, lookup_ptr, A, pad, first + LANES_, hi[:, None], n, act[:, None])
            fa = tl.load(freq_ptr + a, mask=act[:, None], other=1)
            fb = tl.load(freq_ptr + b, mask=act[:, None], other=1)
            emit = act[:, None] & ((X >> (64 - 1 - 2 * PRECISION_)) >= fa * fb)
            count = emit.to(tl.int64)
            if WRITE:
                pos = base[:, None] + (total - emitted - tl.sum(count, axis=1))[:, None] + tl.cumsum(count, axis=1) \
                    - count
                value = X & 0xFFFFFFFF
                value = tl.where(value >= 2147483648, value - 4294967296, value).to(tl.int32)
                tl.store(words_ptr + pos, value, mask=emit & allowed[:, None] & (pos < dummy))
            emitted = emitted + tl.sum(count, axis=1)
            X = tl.where(emit, X >> 32, X)
            Y = ((X // fb) << PRECISION_) + X % fb + tl.load(cdf_ptr + b, mask=act[:, None], other=0)
            Y = ((Y // fa) << PRECISION_) + Y % fa + tl.load(cdf_ptr + a, mask=act[:, None], other=0)
            X = tl.where(act[:, None], Y, X)
        if not WRITE:
            tl.store(states_ptr + c[:, None] * LANES_ + col[None, :], X, mask=live[:, None])
            tl.store(totals_ptr + c, emitted, mask=live)


def pair_rans_encode_triton(exponent, lookup, freq, cdf, alpha, pad, n, chunk_size, words, ok=None,
                            block: int = ENCODE_ROWS):
    """Triton twin of :func:`pair_rans_encode_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``): the same states,
    offsets and words, bit for bit; two launches and a prefix sum, no host sync."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use pair_rans_encode_ref")
    num = _check_encode(exponent, lookup, freq, cdf, n, chunk_size, words)
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    device = exponent.device
    states = torch.empty((num, LANES), dtype=torch.int64, device=device)
    totals = torch.empty(num, dtype=torch.int64, device=device)
    most = -(-min(chunk_size // 2, (n + 1) // 2) // ROUND)
    dummy = words.numel() - 1
    args = [exponent, lookup.to(torch.int64).contiguous(), freq.to(torch.int64).contiguous(),
            cdf.to(torch.int64).contiguous(), alpha.to(torch.int64).reshape(1), pad.to(torch.int64).reshape(1),
            states, totals]
    grid = (triton.cdiv(num, block),)
    warps = max(1, min(4, block * LANES // 32))
    _pair_rans_encode_kernel[grid](*args, totals, words, totals, n, num, chunk_size // 2, most, dummy,
                                   PRECISION_=PRECISION, LANES_=LANES, BLOCK=block, WRITE=False, num_warps=warps)
    offsets = torch.cat([totals.new_zeros(1), torch.cumsum(totals, 0)])
    fits = offsets[-1] <= dummy
    allowed = (fits if ok is None else ok & fits).to(torch.int32).reshape(1)
    _pair_rans_encode_kernel[grid](*args, offsets, words, allowed, n, num, chunk_size // 2, most, dummy,
                                   PRECISION_=PRECISION, LANES_=LANES, BLOCK=block, WRITE=True, num_warps=warps)
    return states, offsets


def pair_rans_encode(exponent, lookup, freq, cdf, alpha, pad, n, chunk_size, words, ok=None,
                     block: int = ENCODE_ROWS):
    """The rANS coding of every chunk: the Triton kernel on CUDA (after its self-check), the twin elsewhere."""
    if use_triton(exponent, freq, words, kernel="pair_rans_encode"):
        return pair_rans_encode_triton(exponent, lookup, freq, cdf, alpha, pad, n, chunk_size, words, ok, block)
    return pair_rans_encode_ref(exponent, lookup, freq, cdf, alpha, pad, n, chunk_size, words, ok)


def encode_stream(exponent: torch.Tensor, chunk_size: int, words: torch.Tensor, escapes: torch.Tensor,
                  block: int = ENCODE_ROWS) -> dict:
    """Encode ``exponent (n,) uint8`` in chunks of ``chunk_size`` on its device, into ``words (cap_w + 1,) int32``
    and ``escapes (cap_e + 1,) uint8`` (each with a dummy last entry), no host sync.

    Returns :func:`stream_table`'s tensors plus ``states (C, 8) int64``, ``offsets (C + 1,) int64``,
    ``escape_offsets (C + 1,) int64`` and ``ok`` (a 0-dim bool: the words and the escapes fit their buffers).
    When not ``ok`` nothing was written into ``words`` or ``escapes``."""
    n = exponent.numel()
    table = stream_table(exponent)
    lookup, alpha = table["lookup"], table["alpha"]
    per_chunk = escape_counts(exponent, lookup, alpha, chunk_size)
    escape_offsets = torch.cat([per_chunk.new_zeros(1), torch.cumsum(per_chunk, 0)])
    esc_fit = escape_offsets[-1] <= escapes.numel() - 1
    states, offsets = pair_rans_encode(exponent, lookup, table["freq"], table["cdf"], alpha, table["pad"], n,
                                       chunk_size, words, esc_fit, block)
    ok = esc_fit & (offsets[-1] <= words.numel() - 1)
    write_escapes(exponent, lookup, alpha, escapes, ok)
    return {**table, "states": states, "offsets": offsets, "escape_offsets": escape_offsets, "ok": ok}


def encode_kernel():
    """The encoder's Triton ``JITFunction`` (for ``bench/aot_sm90.py``)."""
    if not triton_available():
        raise RuntimeError("triton is not installed")
    return _pair_rans_encode_kernel


def _check_inputs(device, dtype, n: int = 701, chunk_size: int = 64) -> tuple:
    """Skewed exponents with escapes (an odd count, a ragged last chunk), their table, and a words buffer."""
    g = torch.Generator().manual_seed(3)
    e = (118 + 2.5 * torch.randn(n, generator=g)).round().clamp(0, 255).to(torch.uint8)
    e[torch.randint(0, n, (40,), generator=g)] = torch.randint(0, 256, (40,), generator=g, dtype=torch.uint8)
    e = e.to(device)
    t = stream_table(e)
    words = torch.zeros(n + 1, dtype=torch.int32, device=device)
    return e, t["lookup"], t["freq"], t["cdf"], t["alpha"], t["pad"], n, chunk_size, words


def _check_run(fn, args):
    """States, offsets and the words buffer (all integers: compared exactly)."""
    args = list(args)
    args[-1] = args[-1].clone()
    states, offsets = fn(*args)
    return states, offsets, args[-1][:-1]


register_check("pair_rans_encode", KernelCheck(triton=pair_rans_encode_triton, ref=pair_rans_encode_ref,
                                               inputs=_check_inputs, run=_check_run, dtypes=(torch.int64,)))
