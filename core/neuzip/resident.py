"""A lossless NeuZip weight that lives on the device and is re-encoded there (LOMO + NeuZip on a GPU).

:class:`ResidentStream` keeps a bf16 weight compressed on its device: the sign/mantissa bytes and the format-3
exponent stream (:mod:`core.neuzip.pairs` describes the format) in buffers of fixed capacity, with its decode tables.
:meth:`ResidentStream.reencode` splits an updated weight and encodes it on the device
(:func:`kernels.neuzip_encode.encode_stream`: the CPU encoder's bytes for the same chunk size) into those buffers,
without reading anything back: the words and escapes of a weight vary a little from update to update, so each buffer
holds :data:`HEADROOM` more than the last measured size, and a stream that would not fit is not written (the weight
keeps its previous value and the stream remembers it, ``ok`` on the device). :func:`check_streams` reads every
stream's sizes once (one host sync; LOMO + NeuZip calls it after each step, where the loss is read anyway), grows the
buffers that came close to full, and raises on a weight that did not fit (its update was not stored).

The chunk size is the decode's segment length on that device (:func:`kernels.neuzip_rans.decode_layout`), so the
encoder and the decoder get as many independent programs as the layout gives, and no segment index is needed. Off
CUDA (the tests, where the kernels' PyTorch twins stand in) chunks of :data:`CPU_CHUNK` weights.
"""
from __future__ import annotations

import numpy as np
import torch

from core.neuzip import pairs
from core.neuzip.codec import CompressedTensor
from kernels.neuzip_bits import merge_bf16, split_bf16
from kernels.neuzip_encode import encode_stream
from kernels.neuzip_rans import DECODE_ROWS, decode_layout, fused_decode_bf16, multiprocessors, pair_rans_decode

__all__ = ["ResidentStream", "check_streams", "device_chunk", "HEADROOM", "CPU_CHUNK"]

HEADROOM = 1 / 8  # words and escapes reserved beyond the last measured size (grown back at each check)
CPU_CHUNK = 1024  # weights per chunk off CUDA (where there is no multiprocessor count to lay out for)
SMALL = ("states", "offsets", "escape_offsets", "slot_pair", "pair_info", "symbols", "counts", "K")


def device_chunk(n: int, device: torch.device | str) -> int:
    """The chunk size a weight of ``n`` values is encoded with on ``device``: the decode's segment length there."""
    sms = multiprocessors(device)
    return CPU_CHUNK if sms is None else decode_layout(n, pairs.DEFAULT_CHUNK, sms)


def _capacity(used: int, chunks: int, per_chunk: int) -> int:
    return int(used * (1 + HEADROOM)) + per_chunk * chunks


class ResidentStream:
    """One lossless bf16 weight, compressed on its device (see the module docstring).

    Attributes: ``shape``, ``n``, ``chunk_size``; the tensors ``fields (n,) uint8``, ``states (C, 8) int64``,
    ``offsets`` / ``escape_offsets (C + 1,) int64``, ``words (cap_w + 1,) int32``, ``escapes (cap_e + 1,) uint8``
    (each buffer's last entry a dummy slot), the decode tables ``slot_pair`` / ``pair_info``, the table's
    ``symbols`` / ``counts`` / ``K`` (for :meth:`to_compressed`), and ``ok`` (a device bool: every re-encode since the
    last check fitted)."""

    def __init__(self, weight: torch.Tensor, chunk_size: int | None = None):
        """Encode ``weight`` (bf16, any shape) on its device. Sizing the buffers reads the stream's sizes back once
        (a host sync at creation, none per re-encode)."""
        if weight.dtype != torch.bfloat16:
            raise ValueError(f"a resident NeuZip weight is bf16, got {weight.dtype}")
        self.shape, self.n = tuple(weight.shape), weight.numel()
        device = weight.device
        self.chunk_size = device_chunk(self.n, device) if chunk_size is None else pairs.round_chunk_size(chunk_size)
        chunks = -(-self.n // self.chunk_size)
        exponent, self.fields = split_bf16(weight.detach().reshape(-1), 7)
        words = torch.empty(self.n // 4 + 8 * chunks + 1, dtype=torch.int32, device=device)  # > the most it can take
        escapes = torch.empty(self.n + 1, dtype=torch.uint8, device=device)
        out = encode_stream(exponent, self.chunk_size, words, escapes)
        used_w, used_e = (int(v) for v in torch.stack([out["offsets"][-1], out["escape_offsets"][-1]]).tolist())
        self.words = torch.empty(_capacity(used_w, chunks, 8) + 1, dtype=torch.int32, device=device)
        self.words[:used_w] = words[:used_w]
        self.escapes = torch.empty(_capacity(used_e, chunks, 0) + 64 + 1, dtype=torch.uint8, device=device)
        self.escapes[:used_e] = escapes[:used_e]
        for name in SMALL:
            setattr(self, name, out[name])
        self.ok = torch.ones((), dtype=torch.bool, device=device)
        self.need = torch.stack([out["offsets"][-1], out["escape_offsets"][-1]])  # the last encode's sizes
        self.fails = 0  # re-encodes that did not fit, found by check_streams

    @property
    def device(self) -> torch.device:
        return self.fields.device

    @property
    def nbytes(self) -> int:
        """Device bytes this weight holds (buffers at their capacity, decode tables included)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> list[torch.Tensor]:
        return [self.fields, self.words, self.escapes] + [getattr(self, name) for name in SMALL] + [self.ok, self.need]

    def reencode(self, weight: torch.Tensor) -> None:
        """Store ``weight`` (bf16, this shape, on this device) as the new value, encoded on the device into the
        existing buffers; no host sync. When its words or escapes would not fit, nothing changes and ``ok`` turns
        False (:func:`check_streams` reports it)."""
        exponent, fields = split_bf16(weight.detach().reshape(-1), 7)
        out = encode_stream(exponent, self.chunk_size, self.words, self.escapes)
        ok = out["ok"]
        self.need = torch.stack([out["offsets"][-1], out["escape_offsets"][-1]])  # what it needed, stored or not
        torch.where(ok, fields, self.fields, out=self.fields)
        for name in SMALL:
            old = getattr(self, name)
            setattr(self, name, torch.where(ok, out[name], old))
        self.ok = self.ok & ok

    def decode(self, out: torch.Tensor | None = None, errors: torch.Tensor | None = None) -> torch.Tensor:
        """The weight, ``(*shape) bfloat16`` on the device (into ``out`` when given): one fused launch where the
        kernels choose it, else the exponent decode and the bit merge. Reads nothing back when ``errors`` is given."""
        stream = (self.states, self.offsets, self.words, self.slot_pair, self.pair_info, self.escapes,
                  self.escape_offsets, None, self.n, self.chunk_size, pairs.PRECISION)
        flat = None if out is None else out.view(-1)
        weight = fused_decode_bf16(*stream, self.fields, mantissa_bits=7, scaled=False, errors=errors, out=flat,
                                   block=DECODE_ROWS)
        if weight is None:
            weight = merge_bf16(pair_rans_decode(*stream, errors=errors, block=DECODE_ROWS), self.fields, 7)
            weight = weight if flat is None else flat.copy_(weight)
        return weight.view(self.shape)

    def sizes(self) -> torch.Tensor:
        """``(3,) int64`` on the device: ok, then the words and escapes to make room for (the larger of what is
        stored and what the last re-encode needed)."""
        stored = torch.stack([self.offsets[-1], self.escape_offsets[-1]])
        return torch.cat([self.ok.to(torch.int64).view(1), torch.maximum(stored, self.need)])

    def fit(self, used_w: int, used_e: int) -> bool:
        """Grow a buffer whose use came within half the headroom of its capacity (a device-to-device copy); True when
        one grew."""
        chunks, grew = self.states.shape[0], False
        for name, used, per_chunk, extra in (("words", used_w, 8, 0), ("escapes", used_e, 0, 64)):
            buf = getattr(self, name)
            if used > (buf.numel() - 1) / (1 + HEADROOM / 2):
                bigger = torch.empty(_capacity(used, chunks, per_chunk) + extra + 1, dtype=buf.dtype,
                                     device=buf.device)
                bigger[:buf.numel()] = buf
                setattr(self, name, bigger)
                grew = True
        return grew

    def to_compressed(self) -> CompressedTensor:
        """The weight as a host :class:`CompressedTensor` (what ``compress`` writes for this chunk size), for saving
        and for checking against the CPU encoder (reads the stream back: a host sync)."""
        K = int(self.K)
        used_w, used_e = int(self.offsets[-1]), int(self.escape_offsets[-1])
        table = pairs.PairTable(self.symbols[:K].cpu().numpy().astype(np.uint8),
                                self.counts[:K + 1].cpu().numpy().astype(np.uint16), pairs.PRECISION)
        stream = pairs.PairStream(table, self.states.cpu().numpy().view(np.uint64).copy(),
                                  self.offsets.cpu().numpy().astype(np.uint32),
                                  self.words[:used_w].cpu().numpy().view(np.uint32).copy(),
                                  self.escapes[:used_e].cpu().numpy().copy(),
                                  self.escape_offsets.cpu().numpy().astype(np.uint32), self.n, self.chunk_size)
        return CompressedTensor(self.shape, 7, None, stream, self.fields.cpu().clone())


def check_streams(streams: list[ResidentStream], names: list[str] | None = None,
                  errors: torch.Tensor | None = None) -> dict:
    """Read every stream's sizes, and the decodes' corruption flag ``errors``, at once (one host sync), grow the
    buffers that came close to full and reset the ``ok`` flags; ``{"grown": [names], "words": used, "escapes": used}``.
    Raises ``RuntimeError`` naming the weights whose update did not fit its buffers (that update was not stored: the
    weight kept its previous value), ``ValueError`` when a decode found a corrupt stream."""
    if not streams:
        return {"grown": [], "words": 0, "escapes": 0}
    names = names or [str(i) for i in range(len(streams))]
    device = streams[0].device
    flag = torch.zeros(3, dtype=torch.int64, device=device) if errors is None else \
        errors.to(device=device, dtype=torch.int64).reshape(-1)[:1].repeat(3)
    rows = torch.stack([s.sizes() for s in streams] + [flag]).tolist()
    if rows.pop()[0]:
        errors.zero_()
        raise ValueError("corrupt exponent stream: a decode on the device found a segment that did not end where "
                         "the next one starts")
    grown, failed = [], []
    for name, s, (ok, used_w, used_e) in zip(names, streams, rows):
        if s.fit(used_w, used_e):
            grown.append(name)
        if not ok:
            s.fails += 1
            failed.append(name)
        s.ok = torch.ones((), dtype=torch.bool, device=s.device)
    if failed:
        raise RuntimeError(f"NeuZip on the device: the updated weight of {', '.join(failed)} outgrew the space kept "
                           f"for it ({HEADROOM:.0%} above its last size), so that update was not stored; the buffers "
                           "have grown now. Raise core.neuzip.resident.HEADROOM, or check the learning rate (an update "
                           "that changes the exponents' statistics this much is unusual).")
    return {"grown": grown, "words": sum(r[1] for r in rows), "escapes": sum(r[2] for r in rows)}
