"""Chunk-parallel rANS decode of NeuZip exponent streams, beside its PyTorch reference twin.

The stream format ("rans32x16", written by ``core.neuzip.rans``): ``n`` byte symbols cut into chunks
of ``chunk_size``; chunk ``j`` is an independent rANS stream with a 32-bit state starting at
``states[j]`` and 16-bit words ``words[offsets[j]:offsets[j + 1]]`` in decoding order. A decoder
needs three per-slot tables of ``2**precision`` entries (symbol, frequency, ``slot - cdf[symbol]``)::

    slot = x & (2**precision - 1)
    out  = slot_sym[slot]
    x    = slot_freq[slot] * (x >> precision) + slot_bias[slot]
    if x < 2**16: x = (x << 16) | words[p]; p += 1

Every lane (one chunk) runs this loop on its own; a well-formed chunk ends with ``x == 2**16`` and
``p == offsets[j + 1]``, which both implementations check.

Public functions, one signature
``(states, offsets, words, slot_sym, slot_freq, slot_bias, n, chunk_size, precision) -> (n,) uint8``:

- :func:`rans_decode` dispatches (Triton on CUDA, reference elsewhere),
- :func:`rans_decode_triton`: one program decodes ``BLOCK`` chunks as a vector of lanes,
- :func:`rans_decode_ref`: the same lanes in plain PyTorch.

Tensor types: ``states (C,) int64`` (values < 2**32), ``offsets (C + 1,) int64``, ``words (W,) int16``
(the uint16 words, bit for bit), ``slot_sym (M,) uint8``, ``slot_freq (M,) int32``,
``slot_bias (M,) int32``.
"""
from __future__ import annotations

import torch

from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

__all__ = ["rans_decode", "rans_decode_ref", "rans_decode_triton"]

_L = 1 << 16
_BLOCK = 128  # chunks per program


def _check(states, offsets, words, n, chunk_size, precision) -> int:
    num = -(-n // chunk_size) if n > 0 else 0
    if states.numel() != num or offsets.numel() != num + 1:
        raise ValueError(f"{n} symbols in chunks of {chunk_size} need {num} states and {num + 1} offsets")
    if not 1 <= precision <= 16:
        raise ValueError("precision must be in [1, 16]")
    if words.dtype != torch.int16:
        raise TypeError("words must be int16 (the uint16 words, bit for bit)")
    return num


def _corrupt(x_end: torch.Tensor, p_end: torch.Tensor, offsets: torch.Tensor) -> None:
    if bool((x_end != _L).any()) or bool((p_end != offsets[1:]).any()):
        raise ValueError("corrupt rANS stream: a chunk did not end in its initial state")


def rans_decode_ref(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_sym: torch.Tensor,
                    slot_freq: torch.Tensor, slot_bias: torch.Tensor, n: int, chunk_size: int,
                    precision: int) -> torch.Tensor:
    """Decode all chunks as lanes of one vector, position by position. Plain PyTorch.

    Parameters
    ----------
    states : (C,) int64; offsets : (C + 1,) int64; words : (W,) int16
    slot_sym : (M,) uint8; slot_freq, slot_bias : (M,) int32, ``M = 2**precision``
    n : number of symbols; chunk_size : symbols per chunk (the last chunk may be shorter)

    Returns
    -------
    (n,) uint8
    """
    num = _check(states, offsets, words, n, chunk_size, precision)
    device = states.device
    lanes = torch.arange(num, device=device)
    x = states.to(torch.int64).clone()
    p = offsets[:-1].to(torch.int64).clone()
    length = n - lanes * chunk_size  # symbols left in each lane's chunk
    w = torch.cat([words.to(torch.int64) & 0xFFFF, torch.zeros(1, dtype=torch.int64, device=device)])
    freq, bias = slot_freq.to(torch.int64), slot_bias.to(torch.int64)
    out = torch.empty(num, chunk_size, dtype=torch.uint8, device=device)
    mask = (1 << precision) - 1
    for i in range(min(chunk_size, n)):
        act = length > i
        slot = x & mask
        out[:, i] = slot_sym[slot]
        x_new = freq[slot] * (x >> precision) + bias[slot]
        need = act & (x_new < _L)
        x_new = torch.where(need, (x_new << 16) | w[p.clamp(max=w.numel() - 1)], x_new)
        x = torch.where(act, x_new, x)
        p = p + need.to(torch.int64)
    _corrupt(x, p, offsets.to(torch.int64))
    return out.reshape(-1)[:n]


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _rans_decode_kernel(states_ptr, offsets_ptr, words_ptr, slot_sym_ptr, slot_freq_ptr, slot_bias_ptr,
                            out_ptr, x_end_ptr, p_end_ptr, n, num_chunks, chunk_size,
                            PRECISION: tl.constexpr, BLOCK: tl.constexpr):
        """Program ``pid`` decodes chunks ``pid * BLOCK ...`` (one lane each) for all positions."""
        pid = tl.program_id(0)
        c = pid * BLOCK + tl.arange(0, BLOCK)
        live = c < num_chunks
        x = tl.load(states_ptr + c, mask=live, other=65536)
        p = tl.load(offsets_ptr + c, mask=live, other=0)
        start = c.to(tl.int64) * chunk_size
        for i in range(0, chunk_size):
            pos = start + i
            act = live & (pos < n)
            slot = x & ((1 << PRECISION) - 1)
            sym = tl.load(slot_sym_ptr + slot, mask=act, other=0)
            f = tl.load(slot_freq_ptr + slot, mask=act, other=1).to(tl.int64)
            b = tl.load(slot_bias_ptr + slot, mask=act, other=0).to(tl.int64)
            x_new = f * (x >> PRECISION) + b
            need = act & (x_new < 65536)
            w = tl.load(words_ptr + p, mask=need, other=0).to(tl.int64) & 0xFFFF
            x_new = tl.where(need, (x_new << 16) | w, x_new)
            x = tl.where(act, x_new, x)
            p = p + need.to(tl.int64)
            tl.store(out_ptr + pos, sym, mask=act)
        tl.store(x_end_ptr + c, x, mask=live)
        tl.store(p_end_ptr + c, p, mask=live)


def rans_decode_triton(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_sym: torch.Tensor,
                       slot_freq: torch.Tensor, slot_bias: torch.Tensor, n: int, chunk_size: int,
                       precision: int) -> torch.Tensor:
    """Triton twin of :func:`rans_decode_ref` (CUDA, or CPU under ``TRITON_INTERPRET=1``); bit-identical."""
    if not triton_available():
        raise RuntimeError("triton is not installed; use rans_decode_ref")
    num = _check(states, offsets, words, n, chunk_size, precision)
    device = states.device
    out = torch.empty(n, dtype=torch.uint8, device=device)
    x_end = torch.empty(num, dtype=torch.int64, device=device)
    p_end = torch.empty(num, dtype=torch.int64, device=device)
    if num:
        w = words if words.numel() else torch.zeros(1, dtype=torch.int16, device=device)
        _rans_decode_kernel[(triton.cdiv(num, _BLOCK),)](
            states.to(torch.int64).contiguous(), offsets.to(torch.int64).contiguous(), w.contiguous(),
            slot_sym.contiguous(), slot_freq.to(torch.int32).contiguous(), slot_bias.to(torch.int32).contiguous(),
            out, x_end, p_end, n, num, chunk_size, PRECISION=precision, BLOCK=_BLOCK)
    _corrupt(x_end, p_end, offsets.to(torch.int64))
    return out


def rans_decode(states: torch.Tensor, offsets: torch.Tensor, words: torch.Tensor, slot_sym: torch.Tensor,
                slot_freq: torch.Tensor, slot_bias: torch.Tensor, n: int, chunk_size: int,
                precision: int) -> torch.Tensor:
    """Decode a chunked rANS stream: Triton on CUDA, reference elsewhere. See :func:`rans_decode_ref`."""
    args = (states, offsets, words, slot_sym, slot_freq, slot_bias, n, chunk_size, precision)
    if use_triton(states, offsets, words, slot_sym, slot_freq, slot_bias, kernel="rans_decode"):
        return rans_decode_triton(*args)
    return rans_decode_ref(*args)


def _check_inputs(device, dtype, n: int = 700, chunk_size: int = 128, precision: int = 10) -> tuple:
    """A small valid stream for the self-check: skewed symbols in chunks, encoded by a plain rANS encoder
    (the inverse of the decode loop in the module docstring)."""
    g = torch.Generator().manual_seed(0)
    freq = torch.tensor([600, 250, 100, 50, 20, 4])  # sums to 2**precision
    cdf = torch.cumsum(freq, 0) - freq
    symbols = torch.multinomial(freq.float(), n, replacement=True, generator=g).tolist()
    states, offsets, words = [], [0], []
    for start in range(0, n, chunk_size):
        x, out = _L, []
        for s in reversed(symbols[start:start + chunk_size]):
            f, c = int(freq[s]), int(cdf[s])
            if x >= ((_L >> precision) << 16) * f:
                out.append(x & 0xFFFF)
                x >>= 16
            x = ((x // f) << precision) + x % f + c
        states.append(x)
        words += out[::-1]
        offsets.append(len(words))
    slot_sym = torch.repeat_interleave(torch.arange(len(freq)), freq)
    w = torch.tensor(words, dtype=torch.int32)
    return (torch.tensor(states, dtype=torch.int64, device=device), torch.tensor(offsets, device=device),
            torch.where(w >= 2**15, w - 2**16, w).to(torch.int16).to(device), slot_sym.to(torch.uint8).to(device),
            freq[slot_sym].to(torch.int32).to(device), (torch.arange(2**precision) - cdf[slot_sym]).to(torch.int32).to(device),
            n, chunk_size, precision)


register_check("rans_decode", KernelCheck(triton=rans_decode_triton, ref=rans_decode_ref, inputs=_check_inputs,
                                          dtypes=(torch.int64,)))
