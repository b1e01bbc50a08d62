"""The bf16 buffers that the compressed layers of a model share, and the decoder that fills them (at most one decoded
weight at a time, or ``D + 1`` when a background thread decodes the next ``D`` layers ahead)."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from core.errors import BadInputError
from kernels.neuzip_rans import raise_if_corrupt

__all__ = ["DecompressionBuffer"]


class DecompressionBuffer:
    """The bf16 buffers shared by the compressed layers of a model, and the decoder that fills them.

    With ``ahead = 0`` (the default) there is one flat buffer, sized for the largest weight, and each
    layer decodes its weight into it when called. With ``ahead = D >= 1`` a background thread decodes
    the next ``D`` layers (in the order the layers were registered, wrapping around to the first
    layer for the next forward) while the current one computes; ``D + 1`` buffers are then in use:
    the current layer's and the ``D`` in flight. The CPU decoder releases the GIL, so the decoding
    runs on another core while torch computes; a layer whose decode has not started when it is
    needed (no core free) is decoded by the calling thread instead of waiting. CUDA inputs decode
    synchronously.

    On a device the decodes check the stream without waiting for it: a corrupt segment sets a flag on the device
    (:meth:`errors`), which :meth:`check` reads once (the model's forward hook calls it after each forward).
    """

    def __init__(self, ahead: int = 0) -> None:
        self.ahead = 0
        self.slots: list[torch.Tensor | None] = [None]
        self.layers: list["CompressedLinear"] = []
        self._index: dict[int, int] = {}
        self._pending: dict[int, tuple[Future, int]] = {}  # layer index -> (decode, slot)
        self._current: int | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._errors: dict[torch.device, torch.Tensor] = {}
        self.deferred = False  # the model's forward hook skips check() (core.neuzip.capture checks after replays)
        self.set_ahead(ahead)

    def errors(self, device: torch.device) -> torch.Tensor:
        """The ``(1,) int32`` flag that the decodes on ``device`` set when a stream is corrupt (made on first use,
        outside inference mode so that any later forward may update it)."""
        flag = self._errors.get(device)
        if flag is None:
            with torch.inference_mode(False):
                flag = self._errors[device] = torch.zeros(1, dtype=torch.int32, device=device)
        return flag

    def check(self) -> None:
        """Raise ``ValueError`` if a decode since the last check found a corrupt stream: one device-to-host read per
        device that decoded (none on the CPU, whose decoder raises at once)."""
        for flag in self._errors.values():
            raise_if_corrupt(flag)

    @property
    def tensor(self) -> torch.Tensor | None:
        """The first buffer (the only one when ``ahead = 0``)."""
        return self.slots[0]

    def set_ahead(self, ahead: int) -> None:
        """Decode ``ahead`` layers in advance (0: decode each layer when it is called)."""
        if isinstance(ahead, bool) or not isinstance(ahead, int) or not 0 <= ahead <= 8:
            raise BadInputError(f"decode_ahead must be an integer from 0 to 8, got {ahead!r}.",
                                fix="use 0 (decode when called), or 1-2 layers ahead")
        self._drain()
        self.ahead = ahead
        self.slots = (self.slots + [None] * (ahead + 1))[:ahead + 1]
        if ahead and self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuzip-decode")

    def register(self, layers: list["CompressedLinear"]) -> None:
        """The layers in their expected call order."""
        self._drain()
        self.layers = list(layers)
        self._index = {id(m): i for i, m in enumerate(self.layers)}

    def take(self, numel: int, device: torch.device, slot: int = 0) -> torch.Tensor:
        """A ``(numel,) bfloat16`` view of buffer ``slot`` on ``device`` (grown on demand)."""
        t = self.slots[slot]
        if t is None or t.numel() < numel or t.device != device:
            self.slots[slot] = t = torch.empty(numel, dtype=torch.bfloat16, device=device)
        return t[:numel]

    def weight(self, layer: "CompressedLinear", device: torch.device) -> torch.Tensor:
        """``layer``'s decoded weight, ``(out_features, in_features) bfloat16``, in one of the buffers.

        It stays valid until the next call (the next layer's forward)."""
        ct = layer.weight_compressed
        i = self._index.get(id(layer))
        if self.ahead == 0 or device.type != "cpu" or i is None:
            self._drain()
            self._current = 0
            return layer.decode(self.take(ct.numel, device))
        self._current = None  # the previous layer has finished with its buffer
        window = {(i + d) % len(self.layers) for d in range(1, self.ahead + 1)} - {i}
        for j in [j for j in self._pending if j != i and j not in window]:
            self._pending.pop(j)[0].result()  # a mispredicted decode: let it finish, drop it
        if i in self._pending:
            future, slot = self._pending.pop(i)
            if future.cancel():  # the decode thread has not got to it (a busy machine): decode it here
                w = ct.decompress(out=self.take(ct.numel, device, slot))
            else:
                w = future.result()
        else:
            slot = self._free_slot()
            w = ct.decompress(out=self.take(ct.numel, device, slot))
        self._current = slot
        for d in range(1, self.ahead + 1):
            j = (i + d) % len(self.layers)
            if j == i or j in self._pending:
                continue
            nxt = self.layers[j].weight_compressed
            slot_j = self._free_slot()
            out = self.take(nxt.numel, device, slot_j)
            self._pending[j] = (self._executor.submit(nxt.decompress, out=out), slot_j)
        return w

    def _free_slot(self) -> int:
        used = {slot for _, slot in self._pending.values()} | {self._current}
        return next(s for s in range(len(self.slots)) if s not in used)

    def _drain(self) -> None:
        """Wait for every decode in flight and forget it."""
        for future, _ in self._pending.values():
            future.result()
        self._pending.clear()

    @property
    def nbytes(self) -> int:
        """Bytes currently allocated."""
        return sum(t.numel() * 2 for t in self.slots if t is not None)
