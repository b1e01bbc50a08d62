"""LOMO (Lv et al., 2023), alone and over NeuZip-compressed weights (Hao et al., 2024, Sec. 3.3).

LOMO fuses the optimizer step into the backward: as soon as autograd has produced a parameter's gradient, the SGD
update is applied to that parameter and the gradient is freed, so at most the gradients in flight exist, never the
full set. The update is LOMO's: weight and gradient in float32, ``w - lr * g``, rounded once to the weight's dtype
(:func:`fused_sgd_`, done in slices so the float32 copies stay small). LOMO's optional two-pass gradient-norm
clipping (one backward to measure the norm, one to update) is not done here; neither is loss scaling (bf16 needs
none). The learning rate is constant.

- :func:`attach_lomo` puts the update on every trainable parameter (``register_post_accumulate_grad_hook``: after the
  gradient, summed over every use of the parameter, is in ``.grad``).
- :func:`zip_linears` is LOMO + NeuZip: each linear layer's weight is kept entropy-coded (the project's lossless codec,
  :func:`core.neuzip.codec.compress`); :class:`ZipLinear` decompresses it into a shared buffer just before its
  forward, and again in its backward (the input is saved, the weight is not), computes the input and weight
  gradients exactly as autograd does for ``F.linear``, applies the fused update to the decompressed weight, and
  compresses it again. Neither a full-precision copy of the weights nor a full gradient is ever held. With lossless
  compression the training is the same as LOMO's, bit for bit (tested). A model can also be built with its linear
  layers compressed as they are read (:meth:`ZipState.layer` as the hook of :mod:`core.neuzip.streaming`), so its
  bf16 weights are never all in memory.

On a GPU the compressed weights stay on the device and are re-encoded there after each fused update
(:class:`core.neuzip.resident.ResidentStream`: the device encoder writes the CPU encoder's bytes; nothing goes through
the host); the step's one check of the device streams (their sizes and the decodes' corruption flag, one host sync)
comes with :meth:`ZipState.wait` at the end of the step. ``ZipState(on_device=True)`` takes that path on the CPU too
(the kernels' PyTorch twins: how it is tested without a GPU).

Memory that stays put: each :class:`ZipLinear` re-encodes its weight every step into storage reserved once for it
(its sign/mantissa bytes, fixed for lossless; its exponent stream's arrays with :data:`core.neuzip.pairs.HEADROOM`
to grow into: :class:`core.neuzip.pairs.StreamStore`), through an encoder scratch the layers share; the fused update's
float32 slices are two buffers reused by every parameter. A fresh allocation per layer per step, of a slightly
different size each time, left holes in the heap that the process kept (its RSS grew step after step).
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.neuzip import pairs
from core.neuzip.codec import CompressedTensor, compress
from core.neuzip.modules import SKIP, linear_layers
from core.neuzip.resident import ResidentStream, check_streams
from kernels.dispatch import warm

__all__ = ["fused_sgd_", "attach_lomo", "ZipLinear", "ZipState", "UpdateScratch", "zip_linears", "weights_digest",
           "UPDATE_SLICE", "RESIDENT"]

UPDATE_SLICE = 1 << 18  # weights updated per float32 slice (2 MB of temporaries)
RESIDENT = None  # ZipState's default for on_device: None = on CUDA devices only (tests set True: the CPU twins)
RESIDENT_KERNELS = ("split_bf16", "pair_rans_encode", "pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16")


class UpdateScratch:
    """The two float32 slices of LOMO's fused update (at most ``2 x UPDATE_SLICE`` values, 2 MiB), made on first use
    (inside the tracker's ``optimizer`` category), grown to the largest slice asked for, and reused by every parameter
    of a model, one pair per device."""

    def __init__(self):
        self._slices: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device, numel: int = UPDATE_SLICE) -> torch.Tensor:
        """``(2, m)`` float32 on ``device``, ``m >= min(numel, UPDATE_SLICE)``."""
        want = min(int(numel), UPDATE_SLICE)
        t = self._slices.get(device)
        if t is None or t.shape[1] < want:
            t = self._slices[device] = None  # the smaller pair is freed before the larger one is made
            t = self._slices[device] = torch.empty(2, want, dtype=torch.float32, device=device)
        return t


@torch.no_grad()
def fused_sgd_(weight: torch.Tensor, grad: torch.Tensor, lr: float, tracker=None,
               scratch: UpdateScratch | None = None) -> None:
    """LOMO's update in place: ``weight <- round(float32(weight) - lr * float32(grad))``, one slice at a time (the
    float32 slices count as ``optimizer`` memory for ``tracker``; with ``scratch`` they are its two reused buffers,
    the same arithmetic, bit for bit)."""
    w, g = weight.view(-1), grad.reshape(-1)
    with tracker.category("optimizer") if tracker is not None else contextlib.nullcontext():
        buffers = None if scratch is None else scratch.get(w.device, w.numel())
        for start in range(0, w.numel(), UPDATE_SLICE):
            stop = min(w.numel(), start + UPDATE_SLICE)
            if buffers is None:
                part = w[start:stop].float()
                part.add_(g[start:stop].float(), alpha=-lr)
            else:
                part, other = buffers[0, :stop - start], buffers[1, :stop - start]
                part.copy_(w[start:stop])
                other.copy_(g[start:stop])
                part.add_(other, alpha=-lr)
            w[start:stop].copy_(part)


def attach_lomo(params, lr: float, tracker=None, scratch: UpdateScratch | None = None) -> list:
    """Apply :func:`fused_sgd_` to each of ``params`` as soon as its gradient is accumulated, then free the gradient.
    ``tracker`` (a :class:`core.neuzip.memtrack.MemoryTracker`, or a callable returning one or None) sees the gradient
    as ``gradients``; ``scratch``: the float32 slices to reuse (default: one :class:`UpdateScratch` for these
    parameters). Returns the hook handles."""
    current = tracker if callable(tracker) else (lambda: tracker)
    scratch = UpdateScratch() if scratch is None else scratch

    def hook(p: torch.Tensor) -> None:
        t = current()
        if t is not None:
            t.mark_gradient(p.grad)
        fused_sgd_(p, p.grad, lr, t, scratch)
        p.grad = None

    unique = {id(p): p for p in params if p.requires_grad}
    return [p.register_post_accumulate_grad_hook(hook) for p in unique.values()]


class ZipState:
    """What the compressed layers of one model share: the learning rate, the decode buffer (bf16, the size of the
    largest weight; CPU only), the fused update's float32 slices, the encoder's scratch (the exponent bytes of the
    largest weight, and the words of an encoding that outgrew its layer's storage), the memory tracker of the run
    (None when not measuring) and, with ``threads = 1``, a background thread that compresses each updated weight
    while the backward goes on (a copy of the weight waits for it: at most ``threads`` copies at a time; the C
    encoder releases the GIL; the thread has its own encoder scratch). With ``threads = 0`` the backward compresses
    each weight itself. ``on_device``: keep the weights compressed on their device and re-encode them there (None: on
    CUDA devices; see the module docstring)."""

    def __init__(self, lr: float, threads: int = 0, on_device: bool | None = None):
        self.lr = float(lr)
        self.buffer: torch.Tensor | None = None
        self.tracker = None
        self.threads = int(threads)
        self.update = UpdateScratch()
        self.scratch = pairs.EncodeScratch()
        self._background_scratch = pairs.EncodeScratch()
        self._pool = None
        self._pending: collections.deque = collections.deque()
        self._accounted = 0  # scratch bytes told to the tracker
        self.layers: list["ZipLinear"] = []  # every layer that shares this state
        self.on_device = RESIDENT if on_device is None else on_device
        self.resident: list["ZipLinear"] = []  # the layers whose weight lives on its device
        self.last_check: dict = {}
        self._errors: dict = {}

    def layer(self, name: str, linear: nn.Linear, weight: torch.Tensor) -> "ZipLinear":
        """The :class:`ZipLinear` that replaces ``linear`` (the hook of :mod:`core.neuzip.streaming`: ``weight`` is a
        scratch, compressed here and not kept)."""
        return ZipLinear(weight, linear.bias, self)

    def ready(self, model: nn.Module) -> None:
        """After the model is built and on its device: the decode buffer for its largest compressed weight (CPU), the
        arrays of each compressed layer on its device (GPU), or its weight kept and re-encoded there
        (:meth:`resident_on`: a layer compressed on the host as it was read becomes resident once moved)."""
        layers = [m for m in model.modules() if isinstance(m, ZipLinear)]
        moving = [m for m in layers if m.resident is None and m.compressed is not None and m.device.type != "cpu"
                  and self.resident_on(m.device)]
        if moving:  # on CUDA: the kernels' self-checks now, not inside the first backward
            warm(moving[0].device, RESIDENT_KERNELS)
        for m in layers:
            if m.resident is None and m.compressed is not None and m.device.type != "cpu" \
                    and self.resident_on(m.device):
                weight = m.compressed.decompress().view(m.compressed.shape).to(m.device)
                m.compressed, m.arrays, m.fields, m.stream_store = None, None, None, None
                m.store(weight)
            elif m.device.type != "cpu" and m.arrays is None and m.compressed is not None:
                m.adopt(m.compressed)
        on_host = [m.numel for m in layers if m.compressed is not None]
        if on_host and layers[0].device.type == "cpu":
            self.decode_buffer(max(on_host))

    def resident_on(self, device: torch.device) -> bool:
        """Whether a layer on ``device`` keeps its weight compressed there (and re-encodes it there)."""
        return device.type == "cuda" if self.on_device is None else bool(self.on_device)

    def errors(self, device: torch.device) -> torch.Tensor:
        """The device flag the resident layers' decodes set on a corrupt stream (read by :meth:`wait`)."""
        if device not in self._errors:
            self._errors[device] = torch.zeros(1, dtype=torch.int32, device=device)
        return self._errors[device]

    def decode_buffer(self, numel: int) -> torch.Tensor:
        if self.buffer is None or self.buffer.numel() < numel:
            self.buffer = torch.empty(numel, dtype=torch.bfloat16)
        return self.buffer[:numel]

    def encode(self, layer: "ZipLinear", weight: torch.Tensor, scratch: pairs.EncodeScratch | None = None
               ) -> CompressedTensor:
        """``weight`` (bf16, the layer's shape) losslessly compressed into ``layer``'s own storage (CPU tensors; a
        device tensor goes through :func:`core.neuzip.codec.compress`)."""
        if weight.dtype != torch.bfloat16:
            raise ValueError(f"ZipLinear keeps bf16 weights, got {weight.dtype}")
        if weight.device.type != "cpu":
            return compress(weight)
        scratch = self.scratch if scratch is None else scratch
        n = weight.numel()
        if layer.stream_store is None:  # reserved once, for the layer's life
            layer.fields = torch.empty(n, dtype=torch.uint8)
            layer.stream_store = pairs.StreamStore(n, pairs.DEFAULT_CHUNK)
        bits = weight.detach().contiguous().view(-1).view(torch.int16).numpy().view(np.uint16)
        exponents, histogram = scratch.exponents(n), scratch.histogram
        histogram[:] = 0
        pairs.split_into(bits, 7, exponents, layer.fields.numpy(), histogram)
        stream = pairs.encode(exponents, layer.stream_store.chunk_size, store=layer.stream_store, scratch=scratch,
                              histogram=histogram)
        return CompressedTensor(tuple(weight.shape), 7, None, stream, layer.fields)

    def submit(self, layer: "ZipLinear", weight: torch.Tensor) -> None:
        """Compress ``weight`` (the layer's updated weight) as the layer's new weight: now, or in the background
        (never while a memory tracker measures: the tracked steps compress in the backward's thread)."""
        if not self.threads or self.tracker is not None or layer.resident is not None:
            layer.store(weight)  # a resident layer's re-encode is queued on the device: nothing to wait for here
            return
        while len(self._pending) >= self.threads:
            self._finish()
        copy = weight.clone()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="neuzip-compress")
        layer.pending = True
        self._pending.append((layer, self._pool.submit(self.encode, layer, copy, self._background_scratch)))

    def account_scratch(self) -> None:
        """Tell the tracker how much the encoder scratch grew (NumPy memory its profiler does not see)."""
        held = self.scratch.nbytes + self._background_scratch.nbytes
        if self.tracker is not None and held != self._accounted:
            self.tracker.account(held - self._accounted)
        self._accounted = held

    def storage_report(self) -> dict:
        """Bytes the compressed layers hold (reserved stream storage and sign/mantissa bytes), their stored bytes, the
        encoder scratch, and how often a layer's storage had to grow."""
        layers = [m for m in self.layers if m.stream_store is not None]
        return {"layers": len(layers), "reserved_bytes": sum(m.numpy_bytes() + m.fields.numel() for m in layers),
                "stored_bytes": sum(m.compressed.nbytes for m in layers),
                "scratch_bytes": self.scratch.nbytes + self._background_scratch.nbytes,
                "regrown": sum(m.stream_store.grown for m in layers)}

    def _finish(self) -> None:
        layer, future = self._pending.popleft()
        layer.adopt(future.result())
        layer.pending = False

    def wait(self, layer: "ZipLinear | None" = None) -> None:
        """Finish the background compressions (up to ``layer``'s; all when None). With ``layer`` None (the end of a
        step) also check the resident layers' device streams: one host sync for all of them
        (:func:`core.neuzip.resident.check_streams`: buffers grown where needed, an error for an update that did not
        fit or a corrupt decode)."""
        while self._pending and (layer is None or layer.pending):
            self._finish()
        if layer is None and self.resident:
            device = self.resident[0].device
            self.last_check = check_streams([m.resident for m in self.resident],
                                            [f"layer {i}" for i in range(len(self.resident))], self.errors(device))

    def close(self) -> None:
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class _ZipLinearFn(torch.autograd.Function):
    """``F.linear(x, W, b)`` with ``W`` decompressed in the forward and again in the backward, where it is updated."""

    @staticmethod
    def forward(ctx, x, anchor, bias, layer):
        w = layer.decoded()
        ctx.layer = layer
        ctx.save_for_backward(x, bias)
        return F.linear(x, w, bias)

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        layer = ctx.layer
        w = layer.decoded()
        g2 = grad.reshape(-1, grad.shape[-1])
        grad_x = g2.mm(w).view(x.shape) if ctx.needs_input_grad[0] else None  # autograd's mm backward, operand for
        grad_w = g2.t().mm(x.reshape(-1, x.shape[-1]))                        # operand, so the bits are the same
        grad_b = g2.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
        tracker = layer.state.tracker
        if tracker is not None:
            tracker.mark_gradient(grad_w)
        fused_sgd_(w, grad_w, layer.state.lr, tracker, layer.state.update)
        del grad_w
        layer.state.submit(layer, w)
        return grad_x, None, grad_b, None


class ZipLinear(nn.Module):
    """A linear layer trained with LOMO whose weight is stored NeuZip-compressed (lossless, ``k = 7``).

    Parameters
    ----------
    weight : (out_features, in_features) bf16 tensor (compressed here; the tensor is not kept)
    bias : (out_features,) or None: an ordinary parameter (LOMO-updated by :func:`attach_lomo`)
    state : the :class:`ZipState` the model's compressed layers share
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, state: ZipState):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.state = state
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone())
        self.anchor = nn.Parameter(torch.empty(0, dtype=torch.bfloat16, device=weight.device))  # backward runs even
        self.compressed: CompressedTensor | None = None                                           # when x needs none
        self.arrays = None
        self.resident: ResidentStream | None = None  # the weight compressed on its device (ZipState.resident_on)
        self.pending = False  # a background compression of this layer's weight is under way
        self.fields: torch.Tensor | None = None  # this layer's storage, reserved at its first CPU encoding: its
        self.stream_store: pairs.StreamStore | None = None  # sign/mantissa bytes and its stream's arrays
        state.layers.append(self)
        self.store(weight.detach().to(torch.bfloat16))

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def numel(self) -> int:
        return self.out_features * self.in_features

    def store(self, weight: torch.Tensor) -> None:
        """Compress ``weight`` (bf16, this layer's shape) and keep it as this layer's weight: in this layer's storage
        on the host, or on its device, re-encoded there (:class:`core.neuzip.resident.ResidentStream`)."""
        with self.state.tracker.category("weights") if self.state.tracker else contextlib.nullcontext():
            if self.resident is not None:
                self.resident.reencode(weight)
                return
            if self.state.resident_on(self.device):
                if weight.dtype != torch.bfloat16:
                    raise ValueError(f"ZipLinear keeps bf16 weights, got {weight.dtype}")
                self.resident = ResidentStream(weight.to(self.device))
                self.state.resident.append(self)
                return
            ct = self.state.encode(self, weight)
        self.adopt(ct)
        self.state.account_scratch()

    def adopt(self, ct: CompressedTensor) -> None:
        """Keep ``ct`` as this layer's weight (on a GPU, its arrays are copied there)."""
        tracker = self.state.tracker
        old = self.numpy_bytes()
        with tracker.category("weights") if tracker else contextlib.nullcontext():
            arrays = None if self.device.type == "cpu" else ct.device_arrays(self.device, ct.device_layout(self.device))
        self.compressed, self.arrays = ct, arrays
        if tracker is not None and arrays is None:
            tracker.account(self.numpy_bytes() - old)

    def numpy_bytes(self) -> int:
        """The bytes this layer holds in NumPy arrays (its stream's reserved storage, headroom included, and its
        table; the sign/mantissa fields are a torch tensor): what a host-side tracker must be told about."""
        ct = self.compressed
        if ct is None or self.arrays is not None:
            return 0
        if self.stream_store is None:  # compressed elsewhere (a device weight): its exact arrays
            return ct.nbytes - ct.fields.numel() - (0 if ct.scales is None else ct.scales.numel())
        return self.stream_store.nbytes + ct.exponents.table.nbytes

    def decoded(self) -> torch.Tensor:
        """The weight, decompressed: ``(out, in) bf16``, in the shared buffer on the CPU (valid until the next
        layer decodes), a fresh tensor on a GPU."""
        if self.pending:
            self.state.wait(self)
        if self.resident is not None:
            return self.resident.decode(errors=self.state.errors(self.device))
        ct = self.compressed
        if self.arrays is None:
            return ct.decompress(out=self.state.decode_buffer(ct.numel)).view(ct.shape)
        return ct.decode_arrays(self.arrays).view(ct.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            x = x.to(torch.bfloat16)
        return _ZipLinearFn.apply(x, self.anchor, self.bias, self)

    def extra_repr(self) -> str:
        where = f"resident on {self.device}" if self.resident is not None else \
            f"bits_per_weight={self.compressed.bits_per_weight:.2f}"
        return f"in_features={self.in_features}, out_features={self.out_features}, {where}"


def zip_linears(model: nn.Module, lr: float, skip: tuple[str, ...] = SKIP, tracker=None,
                threads: int = 0, on_device: bool | None = None) -> ZipState:
    """Swap the model's linear layers (except those named with a ``skip`` substring: embeddings, LM head) for
    :class:`ZipLinear`, in place; returns their shared :class:`ZipState` (``tracker``: the run's memory tracker;
    ``threads``: background compression, ``on_device``: weights kept and re-encoded on their device; see
    :class:`ZipState`)."""
    state = ZipState(lr, threads, on_device)
    state.tracker = tracker
    device = next(model.parameters()).device
    if state.resident_on(device):  # on CUDA: the kernels' self-checks now, not inside the first backward
        warm(device, RESIDENT_KERNELS)
    for name, linear in linear_layers(model, skip):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, ZipLinear(linear.weight.detach(), linear.bias, state))
        linear.weight = None  # the bf16 weight is gone once compressed
    state.ready(model)
    return state


@torch.no_grad()
def weights_digest(model: nn.Module) -> str:
    """sha256 over every trainable weight's bits, by name, compressed layers decompressed (``<layer>.weight``): equal
    for two models exactly when their weights are, whether stored compressed or not. One weight at a time (a
    compressed layer is decoded into its model's shared buffer): the digest holds no second copy of the model."""
    named = {}
    for name, m in model.named_modules():
        if isinstance(m, ZipLinear):
            named[f"{name}.weight"] = m.decoded
    for name, p in model.named_parameters(remove_duplicate=True):
        if p.numel() and not name.endswith(".anchor"):
            named[name] = p.detach
    h = hashlib.sha256()
    for name in sorted(named):
        t = named[name]()
        t = t.contiguous() if t.device.type == "cpu" else t.contiguous().cpu()
        h.update(name.encode())
        h.update(t.view(torch.uint8).numpy() if t.dtype != torch.bool else t.numpy())
    return h.hexdigest()[:24]
