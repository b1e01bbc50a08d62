"""Linear layers that keep only a NeuZip-compressed weight and decompress it at every forward.

``compress_model(model)`` swaps each ``nn.Linear`` (except those whose qualified name contains a
``skip`` substring) for a :class:`CompressedLinear`. All swapped layers of a model share one
:class:`DecompressionBuffer`, sized for the largest weight: the forward pass decompresses layer by
layer into it, so at most one decompressed weight exists at a time. With ``decode_ahead = D``
(:func:`set_decode_ahead`) a background thread decodes the next ``D`` layers while the current one
computes, in ``D + 1`` buffers (the decoder releases the GIL: it runs on another core). With ``mantissa_bits=7`` the
weights come back bit for bit, so a bf16 model gives identical outputs.

Memory (:func:`memory_report`): resident bytes = the compressed weights (every stored byte) +
the parameters and buffers left uncompressed; peak = resident + the shared decompression buffer +
the decode workspace of the largest layer (the peak transient). The buffer is not thread-safe: run
one forward at a time per model.

Where the weights live: each :class:`CompressedLinear` keeps its compressed arrays (exponent stream, escapes,
sign/mantissa fields, normaliser scales, per-pair table) as non-persistent buffers, so they follow the module:
``compress_model`` leaves them on the device the weights were on, and ``model.to(device)`` / ``.cuda()`` moves them
like any buffer. On a CUDA device every forward decodes from those resident arrays (Triton rANS decode and bit
merge, the decode table built on the device) and moves nothing from the host; the GPU holds the compressed
weights plus one decompression buffer, not the bf16 weights. On the CPU the numba decoder reads the same memory.
The buffers are not part of ``state_dict()``; save the weights with ``save_compressed(path,
compressed_tensors(model))`` and restore them with :func:`apply_compressed` (onto the device of the model's
layers). The stored arrays also stay on the host (what saving and the CPU decoder read).
"""
from __future__ import annotations

import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError
from kernels.dispatch import warm
from core.neuzip.codec import CompressedTensor, DeviceArrays, bf16_exact, check_params, compress, \
    decode_workspace_bytes

__all__ = ["CompressedLinear", "DecompressionBuffer", "compress_model", "apply_compressed", "decompress_model",
           "memory_report", "compressed_tensors", "set_decode_ahead", "device_memory"]


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
    """

    def __init__(self, ahead: int = 0) -> None:
        self.ahead = 0
        self.slots: list[torch.Tensor | None] = [None]
        self.layers: list[CompressedLinear] = []
        self._index: dict[int, int] = {}
        self._pending: dict[int, tuple[Future, int]] = {}  # layer index -> (decode, slot)
        self._current: int | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.set_ahead(ahead)

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


ARRAY_PREFIX = "nz_"  # CompressedLinear's buffers: nz_states, nz_words, nz_fields, ... (core.neuzip.codec.DeviceArrays)
_warned = threading.Event()


def _warn_not_resident(where: torch.device, wanted: torch.device) -> None:
    if not _warned.is_set():
        _warned.set()
        warnings.warn(f"NeuZip: the compressed weights are on {where} but the input is on {wanted}, so every forward "
                      f"copies them there; move the model with model.to({str(wanted)!r}) to keep them resident.",
                      UserWarning, stacklevel=4)


class CompressedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` stored NeuZip-compressed and decompressed on each call.

    Parameters
    ----------
    weight : CompressedTensor of shape (out_features, in_features)
    bias : (out_features,) tensor or None (kept uncompressed)
    buffer : the shared :class:`DecompressionBuffer`
    """

    def __init__(self, weight: CompressedTensor, bias: torch.Tensor | None, buffer: DecompressionBuffer):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight_compressed = weight
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self._buffer = buffer
        for name, t in weight.device_arrays().items():  # on the CPU: views of the stored arrays
            self.register_buffer(ARRAY_PREFIX + name, t, persistent=False)

    @property
    def device(self) -> torch.device:
        """Where the compressed arrays are (``model.to(device)`` moves them)."""
        return self.nz_states.device

    def arrays(self) -> DeviceArrays:
        """The compressed arrays this layer keeps, on :attr:`device`."""
        return DeviceArrays(**{name: getattr(self, ARRAY_PREFIX + name) for name in DeviceArrays.NAMES})

    def decode(self, out: torch.Tensor) -> torch.Tensor:
        """Decode the weight into ``out`` (bf16, ``numel`` elements) on ``out``'s device and return it shaped.

        On the CPU the numba decoder runs; elsewhere the kernel path decodes from the arrays this layer keeps
        on that device. A layer whose arrays are on another device than ``out`` (a model not moved with
        ``.to(device)``) copies them for this call, with one warning per process."""
        ct = self.weight_compressed
        if out.device.type == "cpu":
            return ct.decompress(out=out)
        arrays = self.arrays()
        if arrays.device != out.device:
            _warn_not_resident(arrays.device, out.device)
            arrays = ct.device_arrays(out.device)
        out.view(-1).copy_(ct.decode_arrays(arrays))
        return out.view(ct.shape)

    def decompressed_weight(self, device: torch.device | None = None) -> torch.Tensor:
        """The weight, ``(out_features, in_features) bfloat16``, living in the shared buffer (on ``device``,
        default :attr:`device`)."""
        device = self.device if device is None else torch.device(device)
        return self._buffer.weight(self, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in_features) -> (..., out_features)."""
        w = self.decompressed_weight(x.device)
        if w.dtype != x.dtype:
            w = w.to(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, w, bias)

    def extra_repr(self) -> str:
        c = self.weight_compressed
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"mantissa_bits={c.mantissa_bits}, block_size={c.block_size}, "
                f"bits_per_weight={c.bits_per_weight:.2f}")


def compress_model(model: nn.Module, mantissa_bits: int = 7, block_size: int | None = None,
                   skip: tuple[str, ...] = ("embed", "lm_head"),
                   progress: Callable[[int, int, str], None] | None = None, decode_ahead: int = 0) -> nn.Module:
    """Swap the model's linear layers for :class:`CompressedLinear`, in place.

    Parameters
    ----------
    model : any ``nn.Module`` holding ``nn.Linear`` layers
    mantissa_bits : 7 (lossless) or 3, 1, 0
    block_size : per-block normaliser size (k < 7 only), or None
    skip : layers whose qualified name contains any of these substrings stay uncompressed
    progress : optional ``progress(done, total, layer name)``, called before each layer; raising
        from it cancels and leaves the model untouched
    decode_ahead : layers decoded in advance by a background thread while the current one
        computes (0: decode each layer when called); see :func:`set_decode_ahead`

    Returns
    -------
    The same model object. Non-bf16 weights are converted with one warning (which says whether
    the conversion changed any value).

    Raises
    ------
    BadInputError
        Bad parameters, or no linear layer left to compress.
    """
    check_params(mantissa_bits, block_size)
    mantissa_bits, block_size = int(mantissa_bits), None if block_size is None else int(block_size)
    if not isinstance(model, nn.Module):
        raise BadInputError(f"expected a torch.nn.Module, got {type(model).__name__}.")
    DecompressionBuffer().set_ahead(decode_ahead)  # validate before the (long) compression
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise BadInputError("this model has no linear layers to compress.",
                            fix="NeuZip compresses nn.Linear weights; pick a transformer-style model")
    chosen = [(name, m) for name, m in linears if not any(s in name for s in skip)]
    if not chosen:
        raise BadInputError(f"all {len(linears)} linear layers match skip={tuple(skip)}.",
                            fix="pass a narrower skip tuple")
    converted = [m.weight for _, m in chosen if m.weight.dtype != torch.bfloat16]
    if converted:
        dtypes = ", ".join(sorted({str(w.dtype).removeprefix("torch.") for w in converted}))
        if all(bf16_exact(w.detach()) for w in converted):
            warnings.warn(f"NeuZip: converting {dtypes} linear weights to bfloat16; every value was already a "
                          "bfloat16 value, so the weights are unchanged (activations now see bf16 weights).",
                          UserWarning, stacklevel=2)
        else:
            warnings.warn(f"NeuZip: converting {dtypes} linear weights to bfloat16 (lossy in itself: some "
                          "values change); outputs will differ from the original model.",
                          UserWarning, stacklevel=2)
    buffer = getattr(model, "_neuzip_buffer", None) or DecompressionBuffer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the conversion was reported once above
        # compress everything first, so a failure (e.g. NaNs with k = 0) leaves the model untouched
        swapped = []
        for i, (name, linear) in enumerate(chosen):
            if progress:
                progress(i, len(chosen), name)
            weight = compress(linear.weight.detach(), mantissa_bits, block_size)
            swapped.append((name, CompressedLinear(weight, linear.bias, buffer).to(linear.weight.device)))
    for name, layer in swapped:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer)
    model._neuzip_buffer = buffer
    _warm_decoder(model)
    return set_decode_ahead(model, decode_ahead)


DECODE_KERNELS = ("pair_rans_decode", "merge_bf16")


def _warm_decoder(model: nn.Module) -> None:
    """On CUDA, decide the decode kernels' self-checks now, not inside the first forward."""
    for device in {m.device for m in model.modules() if isinstance(m, CompressedLinear)}:
        warm(device, DECODE_KERNELS)


def set_decode_ahead(model: nn.Module, layers: int = 2) -> nn.Module:
    """Decode the next ``layers`` compressed weights in a background thread while the current layer
    computes (0 turns it off), in place.

    The expected call order is the order of the modules in the model (true for the usual
    transformer blocks: q, k, v, o, gate, up, down); a layer called out of that order is decoded when
    called. Memory: ``layers + 1`` decode buffers, each the size of the largest weight (see
    :func:`memory_report`). One forward at a time per model.

    Raises
    ------
    BadInputError
        ``layers`` not an integer in [0, 8], or a model without compressed layers.
    """
    buffer = getattr(model, "_neuzip_buffer", None)
    if buffer is None:
        raise BadInputError("this model has no NeuZip-compressed layers.",
                            fix="run compress_model (or apply_compressed) first")
    buffer.set_ahead(layers)
    buffer.register([m for m in model.modules() if isinstance(m, CompressedLinear)])
    return model


def apply_compressed(model: nn.Module, tensors: dict[str, CompressedTensor]) -> nn.Module:
    """Swap the named ``nn.Linear`` layers for :class:`CompressedLinear` holding the given weights, in place.

    The inverse of saving ``compressed_tensors(model)``: load the file with
    :func:`core.neuzip.load_compressed` and apply it to a freshly built model (biases and all other
    parameters come from that model).

    Raises
    ------
    BadInputError
        A name that is not a linear layer of ``model``, or a weight of the wrong shape.
    """
    modules = dict(model.named_modules())
    for name, ct in tensors.items():
        layer = modules.get(name)
        if not isinstance(layer, nn.Linear):
            raise BadInputError(f"{name!r} is not a linear layer of this model.",
                                fix="apply the checkpoint to the architecture it was saved from")
        if tuple(ct.shape) != tuple(layer.weight.shape):
            raise BadInputError(f"{name}: compressed weight has shape {tuple(ct.shape)}, "
                                f"the layer expects {tuple(layer.weight.shape)}.")
    buffer = getattr(model, "_neuzip_buffer", None) or DecompressionBuffer()
    for name, ct in tensors.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, CompressedLinear(ct, modules[name].bias, buffer).to(modules[name].weight.device))
    model._neuzip_buffer = buffer
    _warm_decoder(model)
    return set_decode_ahead(model, buffer.ahead)


def decompress_model(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """Swap every :class:`CompressedLinear` back for an ``nn.Linear`` holding its decoded weight, in place.

    The result computes exactly what the compressed model computes, without decoding at every
    forward: use it for evaluations that run many forwards (e.g. perplexity of a lossy setting).

    Parameters
    ----------
    model : a model that went through :func:`compress_model` or :func:`apply_compressed`
    dtype : weight dtype of the new layers (default bf16, the decoded dtype)
    """
    for name, layer in [(n, m) for n, m in model.named_modules() if isinstance(m, CompressedLinear)]:
        ct = layer.weight_compressed
        weight = layer.decode(torch.empty(ct.numel, dtype=torch.bfloat16, device=layer.device))
        linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                           device="meta")
        linear.weight = nn.Parameter(weight if dtype is None else weight.to(dtype), requires_grad=False)
        if layer.bias is not None:
            linear.bias = layer.bias
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, linear)
    if hasattr(model, "_neuzip_buffer"):
        model._neuzip_buffer.set_ahead(0)
        del model._neuzip_buffer
    return model


def compressed_tensors(model: nn.Module) -> dict[str, CompressedTensor]:
    """``{qualified layer name: CompressedTensor}`` of every :class:`CompressedLinear` (for saving)."""
    return {name: m.weight_compressed for name, m in model.named_modules() if isinstance(m, CompressedLinear)}


def memory_report(model: nn.Module) -> dict[str, int]:
    """Weight memory of a (compressed or plain) model, in bytes.

    Returns
    -------
    dict with ``compressed_weight_bytes`` (every stored byte of the compressed weights),
    ``other_bytes`` (parameters and buffers stored as tensors, counted once even when shared),
    ``resident_bytes`` (their sum), ``buffer_bytes`` (the shared bf16 decompression buffers: 2 bytes
    times the largest compressed weight, times ``1 + decode_ahead``), ``decode_workspace_bytes``
    (upper bound on the CPU decode temporaries of that weight,
    :func:`core.neuzip.codec.decode_workspace_bytes`; twice that with decoding ahead, when the
    calling thread and the decode thread may both decode), ``decode_ahead``,
    ``peak_transient_bytes`` (buffer + workspace) and ``peak_bytes`` (resident + transient).
    Activations are not counted, nor the cast copy of the weight that a forward makes when the
    inputs are not bf16.
    """
    seen, other = set(), 0
    compressed_arrays = {id(t) for m in model.modules() if isinstance(m, CompressedLinear)
                         for _, t in m.arrays().items() if t is not None}
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen or id(t) in compressed_arrays:
            continue
        seen.add(t.data_ptr())
        other += t.numel() * t.element_size()
    comp = compressed_tensors(model)
    compressed = sum(c.nbytes for c in comp.values())
    largest = max((c.numel for c in comp.values()), default=0)
    buf = getattr(model, "_neuzip_buffer", None)
    ahead = buf.ahead if buf is not None else 0
    buffer = 2 * largest * (1 + ahead)
    chunk = max((c.exponents.chunk_size for c in comp.values()), default=0)
    workspace = decode_workspace_bytes(largest, chunk) * (2 if ahead else 1) if largest else 0
    return {"compressed_weight_bytes": compressed, "other_bytes": other, "decode_ahead": ahead,
            "resident_bytes": compressed + other, "buffer_bytes": buffer, "decode_workspace_bytes": workspace,
            "peak_transient_bytes": buffer + workspace, "peak_bytes": compressed + other + buffer + workspace}


def require_cuda(device: torch.device | str) -> torch.device:
    """``device`` as a ``torch.device`` when it is a CUDA device torch can use, else a :class:`BadInputError`."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadInputError(f"{device!r} is not a device.", fix="use cuda or cuda:N") from None
    if device.type != "cuda" or not torch.cuda.is_available():
        raise BadInputError(f"the device memory of a compressed model is measured on a CUDA device; {device} is not "
                            "one torch can use here.", fix="run it on a GPU host (python -m core neuzip device-memory)")
    return device


def device_memory(model: nn.Module, device: torch.device | str = "cuda", mantissa_bits: int = 7,
                  block_size: int | None = None, tokens: int = 512, skip: tuple[str, ...] = ("embed", "lm_head")) -> dict:
    """What a model holds on a CUDA ``device`` in bf16 and NeuZip-compressed, measured there.

    ``model`` (any causal LM, left unchanged) is copied twice: once as bf16 and once with its linear layers
    compressed (:func:`compress_model`); each copy is moved to ``device`` alone, and ``torch.cuda.memory_allocated``
    before and after gives what it holds; then the peak of one no-grad forward of ``tokens`` random ids
    (``torch.cuda.max_memory_allocated`` above the loaded model). Returns bytes: ``bf16`` / ``compressed``
    ``{loaded, forward_peak}``, ``linear_bf16_bytes`` and ``linear_resident_bytes`` (the compressed arrays on the
    device) and their ``linear_ratio`` (lossless: about 10.6 / 16 on SmolLM2), and the logits' max abs difference.

    Raises
    ------
    BadInputError
        ``device`` is not a CUDA device torch can use.
    """
    import copy

    device = require_cuda(device)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not vocab:
        raise BadInputError("the model has no config.vocab_size to draw input ids from.",
                            fix="pick a causal language model")
    ids = torch.randint(0, vocab, (1, int(tokens)), generator=torch.Generator().manual_seed(0)).to(device)

    def measure(copy_of: nn.Module) -> tuple[dict, torch.Tensor]:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        copy_of.to(device)
        torch.cuda.synchronize(device)
        loaded = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.inference_mode():
            logits = copy_of(ids).logits.float()
        torch.cuda.synchronize(device)
        return {"loaded": loaded - before, "forward_peak": torch.cuda.max_memory_allocated(device) - loaded}, logits

    dense = copy.deepcopy(model).to(torch.bfloat16).eval()
    linear_bf16 = sum(m.weight.numel() * 2 for n, m in dense.named_modules()
                      if isinstance(m, nn.Linear) and not any(x in n for x in skip))
    bf16, want = measure(dense)
    dense.cpu()
    del dense
    torch.cuda.empty_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        packed = compress_model(copy.deepcopy(model).to(torch.bfloat16).eval(), mantissa_bits, block_size, skip)
    compressed, got = measure(packed)
    resident = sum(t.numel() * t.element_size() for m in packed.modules() if isinstance(m, CompressedLinear)
                   for _, t in m.arrays().items() if t is not None)
    packed.cpu()
    del packed
    torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(device), "tokens": int(tokens), "mantissa_bits": int(mantissa_bits),
            "block_size": block_size, "bf16": bf16, "compressed": compressed, "linear_bf16_bytes": linear_bf16,
            "linear_resident_bytes": resident, "linear_ratio": resident / linear_bf16,
            "loaded_ratio": compressed["loaded"] / bf16["loaded"],
            "max_abs_logit_difference": float((got - want).abs().max())}
