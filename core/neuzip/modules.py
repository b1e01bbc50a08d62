"""Linear layers that keep only a NeuZip-compressed weight and decompress it at every forward.

``compress_model(model)`` swaps each ``nn.Linear`` (except those whose qualified name contains a
``skip`` substring) for a :class:`CompressedLinear`. All swapped layers of a model share one
:class:`DecompressionBuffer`, sized for the largest weight: the forward pass decompresses layer by
layer into it, so at most one decompressed weight exists at a time. With ``decode_ahead = D``
(:func:`set_decode_ahead`) a background thread decodes the next ``D`` layers while the current one
computes, in ``D + 1`` buffers (the decoder releases the GIL: it runs on another core). With ``mantissa_bits=7`` the
weights come back bit for bit, so a bf16 model gives identical outputs.

The shared buffer (:class:`core.neuzip.buffer.DecompressionBuffer`) is not thread-safe: run one forward at a time
per model. What a compressed model holds in memory: :mod:`core.neuzip.memory`.

Where the weights live: each :class:`CompressedLinear` keeps its compressed arrays (exponent stream, escapes,
sign/mantissa fields, normaliser scales, per-pair table) as non-persistent buffers, so they follow the module:
``compress_model`` leaves them on the device the weights were on, and ``model.to(device)`` / ``.cuda()`` moves them
like any buffer. On a CUDA device every forward decodes from those resident arrays (Triton rANS decode and bit
merge, the decode table built on the device) and moves nothing from the host; the GPU holds the compressed
weights plus one decompression buffer, not the bf16 weights. On the CPU the numba decoder reads the same memory.
The buffers are not part of ``state_dict()``; save the weights with ``save_compressed(path,
compressed_tensors(model))`` and restore them with :func:`apply_compressed` (onto the device of the model's
layers). The stored arrays also stay on the host (what saving and the CPU decoder read).

Laid out for the device: when a layer lands on a CUDA device (``compress_model`` of a model there, or
``.to(device)``), its stream is re-indexed in segments that give the decode kernel enough programs to fill that
device (:func:`kernels.neuzip_rans.decode_layout`; one pass over the stream on the CPU, which also checks it), and
the two decode tables are kept beside it: a forward builds nothing. The decodes on the device check the stream
without waiting for it (a device flag); the model's forward hook reads the flag once per forward.
"""
from __future__ import annotations

import threading
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError
from core.neuzip.buffer import DecompressionBuffer
from core.neuzip import pairs
from core.neuzip.codec import CompressedTensor, DeviceArrays, bf16_exact, check_params, compress, compress_reusing
from core.progress import Progress, item_progress
from kernels.dispatch import warm

__all__ = ["CompressedLinear", "compress_model", "apply_compressed", "decompress_model", "compressed_tensors",
           "set_decode_ahead", "linear_layers", "load_compressed_model", "hf_folder", "empty_causal_lm",
           "finish_compressed", "SKIP"]


SKIP = ("embed", "lm_head")  # linear layers left in bf16: the embeddings and the LM head
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
        arrays = weight.device_arrays()
        for name, t in arrays.items():  # on the CPU: views of the stored arrays
            self.register_buffer(ARRAY_PREFIX + name, t, persistent=False)
        self.segment: int | None = None  # the chunks; a CUDA device gets its own layout (lay_out)
        self.rows = arrays.rows

    def _apply(self, fn, recurse=True):  # .to(device), .cuda(), ...: then lay the stream out for the new device
        super()._apply(fn, recurse)
        self.lay_out()
        return self

    def lay_out(self, segment: int | None | str = "device", rows: int | None = None) -> "CompressedLinear":
        """Lay the resident stream out in segments of ``segment`` weights for the device it is on: ``"device"``
        (the default, what moving the layer does) picks :meth:`CompressedTensor.device_layout` (the chunks off
        CUDA), None the chunks, an int that length (a multiple of 32 dividing the chunk size); ``rows``: segments
        per program of the decode kernel. Builds the segment index on the CPU (a pass over the stream that checks
        it) and moves it to the device; a no-op when the layout is already that."""
        if segment == "device":
            segment = self.weight_compressed.device_layout(self.device)
        rows = self.rows if rows is None else int(rows)
        if segment == self.segment and rows == self.rows:
            return self
        arrays = self.weight_compressed.device_arrays(None, segment)
        for name in DeviceArrays.LAYOUT:
            setattr(self, ARRAY_PREFIX + name, getattr(arrays, name).to(self.device))
        self.segment, self.rows = segment, rows
        return self

    @property
    def device(self) -> torch.device:
        """Where the compressed arrays are (``model.to(device)`` moves them)."""
        return self.nz_states.device

    def arrays(self) -> DeviceArrays:
        """The compressed arrays this layer keeps, on :attr:`device`."""
        return DeviceArrays(**{name: getattr(self, ARRAY_PREFIX + name) for name in DeviceArrays.NAMES},
                            segment=self.segment, rows=self.rows)

    def decode(self, out: torch.Tensor) -> torch.Tensor:
        """Decode the weight into ``out`` (bf16, ``numel`` elements) on ``out``'s device and return it shaped.

        On the CPU the numba decoder runs; elsewhere the kernel path decodes from the arrays this layer keeps
        on that device. A layer whose arrays are on another device than ``out`` (a model not moved with
        ``.to(device)``) copies them for this call, with one warning per process."""
        ct = self.weight_compressed
        if out.device.type == "cpu":
            return ct.decompress(out=out)
        arrays, errors = self.arrays(), self._buffer.errors(out.device)
        if arrays.device != out.device:
            _warn_not_resident(arrays.device, out.device)
            arrays, errors = ct.device_arrays(out.device), None  # a copy per call: checked at once
        ct.decode_arrays(arrays, errors, out=out.view(-1))  # on CUDA: one kernel, straight into ``out``
        return out.view(ct.shape)

    def decompressed_weight(self, device: torch.device | None = None) -> torch.Tensor:
        """The weight, ``(out_features, in_features) bfloat16``, living in the shared buffer (on ``device``,
        default :attr:`device`)."""
        device = self.device if device is None else torch.device(device)
        return self._buffer.weight(self, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in_features) -> (..., out_features). One row (batch-1 generation) on a device where the fused
        decode + matrix-vector kernel is chosen multiplies straight from the compressed arrays; otherwise the
        weight is decoded into the shared buffer and multiplied."""
        if x.numel() == self.in_features and not (x.requires_grad and torch.is_grad_enabled()):  # the kernel has no
            errors = None if x.device.type == "cpu" else self._buffer.errors(x.device)  # backward: inference only
            y = self.weight_compressed.gemv_arrays(self.arrays(), x, errors)
            if y is not None:
                if self.bias is not None:
                    y = y + self.bias.float()
                return y.to(x.dtype).view(*x.shape[:-1], self.out_features)
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


def linear_layers(model: nn.Module, skip: tuple[str, ...] = SKIP) -> list[tuple[str, nn.Linear]]:
    """``(qualified name, layer)`` of the model's ``nn.Linear`` layers whose name contains none of ``skip``: the layers
    NeuZip compresses (and the trade-off quantizes), or one :class:`BadInputError` when there are none."""
    if not isinstance(model, nn.Module):
        raise BadInputError(f"expected a torch.nn.Module, got {type(model).__name__}.")
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise BadInputError("this model has no linear layers to compress.",
                            fix="NeuZip compresses nn.Linear weights; pick a transformer-style model")
    chosen = [(name, m) for name, m in linears if not any(s in name for s in skip)]
    if not chosen:
        raise BadInputError(f"all {len(linears)} linear layers match skip={tuple(skip)}.",
                            fix="pass a narrower skip tuple")
    return chosen


def compress_model(model: nn.Module, mantissa_bits: int = 7, block_size: int | None = None,
                   skip: tuple[str, ...] = SKIP,
                   progress: Progress | None = None, decode_ahead: int = 0) -> nn.Module:
    """Swap the model's linear layers for :class:`CompressedLinear`, in place.

    Parameters
    ----------
    model : any ``nn.Module`` holding ``nn.Linear`` layers
    mantissa_bits : 7 (lossless) or 3, 1, 0
    block_size : per-block normaliser size (k < 7 only), or None
    skip : layers whose qualified name contains any of these substrings stay uncompressed
    progress : optional ``progress(fraction, message)`` (:data:`core.progress.Progress`), called before each layer;
        raising from it cancels and leaves the model untouched
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
    DecompressionBuffer().set_ahead(decode_ahead)  # validate before the (long) compression
    chosen = linear_layers(model, skip)
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
        step = item_progress(progress, "compressing layer")
        for i, (name, linear) in enumerate(chosen):
            if step:
                step(i, len(chosen), name)
            weight = compress(linear.weight.detach(), mantissa_bits, block_size)
            swapped.append((name, CompressedLinear(weight, linear.bias, buffer).to(linear.weight.device)))
    for name, layer in swapped:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer)
    return finish_compressed(model, buffer, decode_ahead)


def finish_compressed(model: nn.Module, buffer: DecompressionBuffer, decode_ahead: int = 0) -> nn.Module:
    """A model whose compressed layers share ``buffer``: kept on the model, checked after each forward, its device
    kernels decided, decoding ``decode_ahead`` layers ahead."""
    model._neuzip_buffer = buffer
    _watch(model)
    _warm_decoder(model)
    return set_decode_ahead(model, decode_ahead)


def _check_decodes(model: nn.Module, args, output) -> None:
    """After each forward of the model: did a decode on a device find a corrupt stream? One read of the device
    flag per forward (the layers themselves never wait for the device); none while the checks are deferred (a
    forward captured in a CUDA graph: :mod:`core.neuzip.capture` checks after its replays)."""
    buffer = getattr(model, "_neuzip_buffer", None)
    if buffer is not None and not buffer.deferred:
        buffer.check()


def _watch(model: nn.Module) -> None:
    """Check the device decodes once per forward of ``model`` (a forward hook, registered once)."""
    if getattr(model, "_neuzip_watch", None) is None:
        model._neuzip_watch = model.register_forward_hook(_check_decodes)


DECODE_KERNELS = ("pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16")  # the fused decode + merge, and
# the two it replaces (lossy weights, or where it failed its check); pair_rans_gemv: opt-in, never chosen in auto


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
    return finish_compressed(model, buffer, buffer.ahead)


def hf_folder(ref: str):
    """The folder of a Hugging Face causal LM that can be read tensor by tensor (a registered model's prepared folder,
    or a local folder with ``config.json`` and ``*.safetensors``), or None for anything else (a model class of
    Layerwise's own, a hub id): those load whole."""
    from core.zoo import resolve
    from core.zoo.registry import card_of

    how, folder = resolve(ref)
    if folder is None or not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        return None
    if how == "registered" and card_of(ref).model_class != "hf":
        return None
    return folder


def empty_causal_lm(folder) -> nn.Module:
    """The causal LM of ``folder``'s ``config.json`` with its parameters on the meta device (its buffers real)."""
    import transformers

    from core.neuzip.streaming import empty_model

    config = transformers.AutoConfig.from_pretrained(folder)
    return empty_model(lambda: transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16))


def load_compressed_model(ref: str, mantissa_bits: int = 7, block_size: int | None = None, *,
                          checkpoint=None, skip: tuple[str, ...] = SKIP, decode_ahead: int = 0,
                          progress: Progress | None = None) -> nn.Module:
    """A causal LM with its linear layers NeuZip-compressed, loaded one tensor at a time: the bf16 (or float32) model
    is never whole in memory (:mod:`core.neuzip.streaming`). Each linear weight is read into a scratch and compressed
    (:func:`compress`), or taken from ``checkpoint`` (a NeuZip checkpoint of the linear weights, as ``neuzip compress``
    writes it; read one tensor at a time, its checksum verified); every other tensor is kept in bf16. The result
    computes what ``compress_model(load_model(ref).model.bfloat16())`` computes, bit for bit for ``k = 7``.

    Raises
    ------
    BadInputError
        ``ref`` is not a Hugging Face folder that can be read tensor by tensor (see :func:`hf_folder`), bad
        parameters, or a checkpoint that does not fit the model.
    """
    from core.neuzip.streaming import folder_specs, stream_into

    check_params(mantissa_bits, block_size)
    folder = hf_folder(ref)
    if folder is None:
        raise BadInputError(f"{ref} cannot be read tensor by tensor (not a Hugging Face folder with safetensors "
                            "weights).", fix="use compress_model(load_model(ref).model) for it")
    DecompressionBuffer().set_ahead(decode_ahead)
    model = empty_causal_lm(folder)
    chosen = linear_layers(model, skip)
    buffer = DecompressionBuffer()
    tensors = None
    if checkpoint is not None:
        from core.neuzip.checkpoint import stream_compressed

        tensors = dict(stream_compressed(checkpoint))  # the compressed weights: the model's final form
        wanted = {name for name, _ in chosen}
        if set(tensors) != wanted:
            extra, missing = sorted(set(tensors) - wanted), sorted(wanted - set(tensors))
            raise BadInputError(f"{checkpoint} does not hold the linear weights of {ref}"
                                + (f" (it has {extra[0]}, which the model has not)" if extra else "")
                                + (f" (it lacks {missing[0]})" if missing else "") + ".",
                                fix="use the checkpoint `neuzip compress` wrote for this model")
        for name, layer in chosen:
            if tuple(tensors[name].shape) != tuple(layer.weight.shape):
                raise BadInputError(f"{name}: the checkpoint's weight has shape {tuple(tensors[name].shape)}, the "
                                    f"model's {tuple(layer.weight.shape)}.", fix="use the checkpoint of this model")

    scratch = pairs.EncodeScratch()  # the compression's temporaries, reused from layer to layer

    def compressed(name: str, layer: nn.Linear, weight: torch.Tensor | None) -> nn.Module:
        ct = tensors[name] if tensors is not None else compress_reusing(weight, mantissa_bits, block_size, scratch)
        return CompressedLinear(ct, layer.bias, buffer)

    stream_into(model, folder_specs(folder), compressed, chosen, progress=progress, read_linear=tensors is None)
    model.eval()
    return finish_compressed(model, buffer, decode_ahead)


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
        layer._buffer.check()
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
    if getattr(model, "_neuzip_watch", None) is not None:
        model._neuzip_watch.remove()
        del model._neuzip_watch
    return model


def compressed_tensors(model: nn.Module) -> dict[str, CompressedTensor]:
    """``{qualified layer name: CompressedTensor}`` of every :class:`CompressedLinear` (for saving)."""
    return {name: m.weight_compressed for name, m in model.named_modules() if isinstance(m, CompressedLinear)}
