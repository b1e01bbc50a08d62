"""Models loaded straight into the form they run or train in, one tensor at a time.

The usual way (``from_pretrained``, then :func:`core.neuzip.compress_model`) holds the whole model in its stored dtype
(SmolLM2's prepared checkpoint is float32: 513 MiB), then in bf16, before a compressed model exists: the process's
peak is the bf16 model's whatever the compression saves. Here the model is built on the meta device (parameters with
shapes and no data; buffers real), and each tensor is read, converted and either kept (bf16) or, for a linear layer
that is to be compressed, read into a bf16 scratch reused by every layer and handed to ``linear(name, layer,
weight)``, which returns the layer that replaces it (a :class:`core.neuzip.CompressedLinear`, a LOMO + NeuZip
:class:`core.neuzip.lomo.ZipLinear`, a quantized layer); the bf16 weight is never kept. The peak is the model in its
final form plus one tensor.

Sources of tensors (:class:`TensorSpec`: a name, a shape and how to write the tensor into a bf16 tensor):

- :func:`folder_specs`: the ``*.safetensors`` files of a Hugging Face folder (a registered model's prepared folder,
  or a local one), read with plain file reads in slices of :data:`READ_BYTES` (:class:`SafetensorsFile`; no mapped
  file pages count in the process's RSS);
- :func:`random_specs`: random weights for a configuration (``normal(0, initializer_range)`` for matrices, ones for
  norms, zeros for biases), each tensor drawn from its own generator, seeded by the run's seed and the tensor's name,
  in slices: the same weights in every mode, whichever form the model takes.

A NeuZip checkpoint streams the same way (:func:`core.neuzip.checkpoint.stream_compressed`, used by
:func:`core.neuzip.modules.load_compressed_model`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from core.errors import BadInputError

__all__ = ["READ_BYTES", "SafetensorsFile", "TensorSpec", "folder_specs", "random_specs", "empty_model",
           "stream_into", "LinearHook", "write_safetensors"]

READ_BYTES = 4 << 20  # bytes read (and converted) at a time
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}

LinearHook = Callable[[str, nn.Linear, torch.Tensor], nn.Module]  # (name, layer on meta, bf16 weight) -> new layer


class SafetensorsFile:
    """One safetensors file read with plain reads (``os.pread``): its header (``entries``: name -> dtype, shape,
    byte range; ``metadata``) and any tensor, whole (:meth:`array`) or converted into a tensor slice by slice
    (:meth:`read_into`)."""

    def __init__(self, path: str | os.PathLike):
        from core.zoo.safetensors_check import read_header

        self.path = Path(path)
        self.entries = read_header(self.path)  # checked: parses, every tensor's bytes inside the file
        size = self.path.stat().st_size
        with open(self.path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            self.metadata = json.loads(fh.read(n)).get("__metadata__") or {}
        self.data_start = 8 + n
        assert size >= self.data_start

    def dtype(self, name: str) -> torch.dtype:
        dtype = _DTYPES.get(self.entries[name]["dtype"])
        if dtype is None:
            raise BadInputError(f"{self.path.name}: {name} has dtype {self.entries[name]['dtype']}, which Layerwise "
                                "does not read.", fix="convert the checkpoint to float32, float16 or bfloat16")
        return dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.entries[name]["shape"])

    def _span(self, name: str) -> tuple[int, int]:
        start, stop = self.entries[name]["data_offsets"]
        return self.data_start + int(start), int(stop) - int(start)

    def array(self, name: str, dtype: np.dtype) -> np.ndarray:
        """The tensor's bytes as a numpy array of ``dtype``: of the stored shape when ``dtype`` has the stored width
        (e.g. uint32 for I32), else flat."""
        offset, nbytes = self._span(name)
        dtype = np.dtype(dtype)
        out = np.empty(nbytes // dtype.itemsize, dtype)
        self._read(offset, memoryview(out.view(np.uint8)))
        stored = _DTYPES.get(self.entries[name]["dtype"])
        if stored is not None and torch.empty((), dtype=stored).element_size() == dtype.itemsize:
            out = out.reshape(self.shape(name))
        return out

    def read_into(self, name: str, out: torch.Tensor, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """Write the tensor into ``out`` (a CPU tensor of its number of elements, any dtype: converted as
        ``Tensor.to`` converts), :data:`READ_BYTES` at a time through ``buffer`` (a uint8 tensor of at least that many
        bytes, reused: a model's load then allocates nothing but its parameters; default: one made here)."""
        dtype, numel = self.dtype(name), int(np.prod(self.shape(name), dtype=np.int64))
        if out.numel() != numel:
            raise ValueError(f"{name}: {numel} values, out holds {out.numel()}")
        offset, nbytes = self._span(name)
        flat = out.view(-1)
        if dtype == out.dtype and out.is_contiguous():
            self._read(offset, memoryview(flat.view(torch.uint8).numpy()))
            return out
        item = torch.empty((), dtype=dtype).element_size()
        per = max(1, READ_BYTES // item)
        if buffer is None or buffer.numel() < min(per, numel) * item:
            buffer = torch.empty(min(per, numel) * item, dtype=torch.uint8)
        buf = buffer[:min(per, numel) * item].view(dtype)
        for lo in range(0, numel, per):
            hi = min(numel, lo + per)
            part = buf[:hi - lo]
            self._read(offset + lo * item, memoryview(part.view(torch.uint8).numpy()))
            flat[lo:hi].copy_(part)
        return out

    def _read(self, offset: int, view: memoryview) -> None:
        with open(self.path, "rb", buffering=0) as fh:
            fd, done = fh.fileno(), 0
            while done < len(view):
                got = os.preadv(fd, [view[done:]], offset + done)
                if got <= 0:
                    raise BadInputError(f"{self.path} ended early (truncated?).", fix="prepare or download it again")
                done += got


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to load: its ``name`` in the model, its ``shape``, and ``fill(out, buffer=None)``, which writes it
    into ``out`` (a CPU tensor of that shape, any floating dtype), through ``buffer`` (a reused uint8 tensor of
    :data:`READ_BYTES`) when given; ``dtype``: the dtype it is stored in."""

    name: str
    shape: tuple[int, ...]
    fill: Callable[[torch.Tensor], torch.Tensor]
    dtype: torch.dtype = torch.bfloat16


def folder_specs(folder: str | os.PathLike) -> dict[str, TensorSpec]:
    """Every tensor of a Hugging Face folder's ``*.safetensors`` files (a sharded checkpoint's shards too)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise BadInputError(f"{folder} holds no *.safetensors file.", fix="give a folder with safetensors weights")
    specs = {}
    for path in files:
        f = SafetensorsFile(path)
        for name in f.entries:
            specs[name] = TensorSpec(name, f.shape(name),
                                     lambda out, buffer=None, f=f, name=name: f.read_into(name, out, buffer),
                                     f.dtype(name))
    return specs


def _seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()[:8], "little") >> 1


def _draw(out: torch.Tensor, seed: int, name: str, std: float, buffer: torch.Tensor | None = None) -> torch.Tensor:
    """``normal(0, std)`` into ``out``, :data:`READ_BYTES` worth of float32 at a time (through ``buffer``), from the
    tensor's own generator."""
    gen = torch.Generator().manual_seed(_seed(seed, name))
    flat = out.view(-1)
    per = READ_BYTES // 4
    if buffer is None or buffer.numel() < READ_BYTES:
        buffer = torch.empty(READ_BYTES, dtype=torch.uint8)
    draws = buffer[:READ_BYTES].view(torch.float32)
    for lo in range(0, flat.numel(), per):
        hi = min(flat.numel(), lo + per)
        part = torch.randn(hi - lo, generator=gen, out=draws[:hi - lo])
        flat[lo:hi].copy_(part.mul_(std))
    return out


def random_specs(model: nn.Module, seed: int = 0, std: float = 0.02) -> dict[str, TensorSpec]:
    """Random weights for ``model``'s parameters (on the meta device: their names and shapes): ``normal(0, std)`` for
    every tensor of two or more dimensions, ones for the 1-D weights (norms), zeros for biases."""
    specs = {}
    for name, p in model.named_parameters(remove_duplicate=True):
        shape = tuple(p.shape)
        if len(shape) >= 2:
            fill = lambda out, buffer=None, name=name: _draw(out, seed, name, std, buffer)  # noqa: E731
        elif name.endswith("bias"):
            fill = lambda out, buffer=None: out.zero_()  # noqa: E731
        else:
            fill = lambda out, buffer=None: out.fill_(1.0)  # noqa: E731
        specs[name] = TensorSpec(name, shape, fill)
    return specs


@contextlib.contextmanager
def _meta_parameters():
    """Parameters created inside are on the meta device (no memory, no initialisation); buffers are real."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        yield


def empty_model(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` (e.g. ``AutoModelForCausalLM.from_config(config)``) with its parameters on the meta device, under the
    process's model-construction lock (:func:`core.zoo.construction.constructing`)."""
    from core.zoo.construction import constructing

    with constructing(), _meta_parameters():
        return build()


def _set_parameter(model: nn.Module, name: str, value: torch.Tensor) -> None:
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner) if owner else model
    module._parameters[leaf] = nn.Parameter(value, requires_grad=False)


def stream_into(model: nn.Module, specs: dict[str, TensorSpec], linear: LinearHook | None = None,
                linears: Iterable[tuple[str, nn.Linear]] = (), progress=None, read_linear: bool = True) -> nn.Module:
    """Give every meta parameter of ``model`` its data from ``specs``, in place; the ``linears`` (``(qualified name,
    layer)`` of layers on the meta device) are replaced by ``linear(name, layer, weight)`` instead, their bf16 weight
    read into one scratch that every layer reuses (so a hook must copy or compress it, not keep it). A tied output
    embedding whose weight the specs do not hold gets the input embedding's. Everything else is bf16. With
    ``read_linear`` False the hook gets None for the weight (it has the weight from elsewhere).

    Raises
    ------
    BadInputError
        A parameter the specs do not hold, or of another shape.
    """
    from core.progress import item_progress

    linears = list(linears)
    replaced = {f"{n}.weight" for n, _ in linears}
    params = [(n, p) for n, p in model.named_parameters(remove_duplicate=True) if n not in replaced]
    step = item_progress(progress, "loading")
    total = len(params) + len(linears)
    tied = _tied_output(model)
    buffer = torch.empty(READ_BYTES, dtype=torch.uint8)  # every read and conversion goes through it
    for i, (name, p) in enumerate(params):
        if step:
            step(i, total, name)
        if name not in specs:
            if tied is not None and name == tied[0]:
                continue
            raise BadInputError(f"the weights hold no {name}.", fix="load the checkpoint its configuration belongs to")
        _check_shape(specs[name], p)
        _set_parameter(model, name, specs[name].fill(torch.empty(tuple(p.shape), dtype=torch.bfloat16), buffer))
    if tied is not None:  # tie_word_embeddings: the output embedding is the input one (whatever the files hold)
        tied[1].weight = tied[2].weight
    if linears:
        largest = max(m.weight.numel() for _, m in linears)
        scratch = torch.empty(largest if read_linear else 0, dtype=torch.bfloat16)
        for j, (name, layer) in enumerate(linears):
            if step:
                step(len(params) + j, total, name)
            weight = None
            if read_linear:
                spec = specs.get(f"{name}.weight")
                if spec is None:
                    raise BadInputError(f"the weights hold no {name}.weight.",
                                        fix="load the checkpoint its configuration belongs to")
                _check_shape(spec, layer.weight)
                weight = spec.fill(scratch[:layer.weight.numel()].view(tuple(layer.weight.shape)), buffer)
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, linear(name, layer, weight))
        del scratch
    del buffer
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise BadInputError(f"{len(left)} parameters got no data (e.g. {left[0]}).",
                            fix="load the checkpoint its configuration belongs to")
    return model


def _check_shape(spec: TensorSpec, p: torch.Tensor) -> None:
    if tuple(spec.shape) != tuple(p.shape):
        raise BadInputError(f"{spec.name} has shape {tuple(spec.shape)} in the weights, {tuple(p.shape)} in the "
                            "model.", fix="load the checkpoint its configuration belongs to")


def _tied_output(model: nn.Module):
    """``(name of the output embedding's weight, output module, input module)`` when the configuration ties them."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False) or not hasattr(model, "get_output_embeddings"):
        return None
    out, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or emb is None:
        return None
    name = next((n for n, m in model.named_modules() if m is out), None)
    return None if name is None else (f"{name}.weight" if name else "weight", out, emb)


def write_safetensors(path: str | os.PathLike, shapes: list[tuple[str, tuple[int, ...]]], tensors,
                      metadata: dict[str, str] | None = None) -> None:
    """Write bf16 tensors to a safetensors file one at a time: the header from ``shapes`` (``(name, shape)`` in file
    order), then each tensor of ``tensors`` (an iterable of ``(name, bf16 tensor)`` in that order) as it comes, so
    that only one is ever in memory. ValueError when a tensor is not the one the header announced."""
    entries, offset = {}, 0
    for name, shape in shapes:
        nbytes = 2 * int(np.prod(shape, dtype=np.int64))
        entries[name] = {"dtype": "BF16", "shape": [int(d) for d in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        entries["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        done = 0
        for (name, t), (want, shape) in zip(tensors, shapes):
            if name != want or tuple(t.shape) != tuple(shape) or t.dtype != torch.bfloat16:
                raise ValueError(f"expected {want} {tuple(shape)} bf16, got {name} {tuple(t.shape)} {t.dtype}")
            fh.write(memoryview(t.contiguous().view(torch.uint8).numpy()))
            done += 1
        if done != len(shapes):
            raise ValueError(f"{len(shapes) - done} tensors announced in the header never came")
