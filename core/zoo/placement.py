"""Where a model's layers live when it does not fit on one device: accelerate's big-model loading.

A :class:`Placement` (``--device-map auto --max-memory 0=20GiB,cpu=64GiB [--offload-folder DIR]`` on the CLI) is
handed to ``transformers``' ``from_pretrained(device_map=..., max_memory=..., offload_folder=...)``: whole decoder
layers fill the GPUs in order, then the CPU, then the rest is *offloaded to disk* (its weights stay in the
checkpoint's safetensors files, or in ``offload_folder``, and are read for each forward pass). accelerate's hooks
move activations between devices and load an offloaded layer's weights just before it runs and drop them after, so
no device ever holds the whole model.

What the analyses need from such a model, and only from here:

- :func:`input_device`: where token ids go (the first GPU of the map, else the CPU);
- :func:`compute_device`: where a module computes (its weights' device, or its hook's execution device when its
  weights are offloaded);
- :func:`parameter_values`: a parameter's values, wherever they live (read from its offload store when the
  parameter is a placeholder on the ``meta`` device), one tensor at a time;
- :func:`offloaded_names` / :func:`is_dispatched`: which parameters are offloaded, whether a model is split at all;
- :func:`offload_hook` and :class:`ServedWeights`: how :func:`core.mathneuro.private_view` gives a request its own
  hooks, so an intervention on an offloaded matrix is applied as the matrix is read.

The CLI's scope (:func:`placed`) sets the placement every :func:`core.zoo.load_model` call inside it uses, so the
analyses' service functions need no new parameter.
"""
from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInputError

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True)
class Placement:
    """How to spread a checkpoint: ``device_map`` (accelerate's strategy), ``max_memory`` (device -> bytes, as
    ``((device, bytes), ...)``: GPU indices as ints, ``"cpu"``), ``offload_folder`` (where offloaded weights go when
    they cannot be read from the checkpoint itself)."""

    device_map: str = "auto"
    max_memory: tuple[tuple[int | str, int], ...] | None = None
    offload_folder: str | None = None

    def hf_kwargs(self) -> dict:
        """The keywords of ``from_pretrained`` that apply it."""
        kwargs: dict = {"device_map": self.device_map}
        if self.max_memory is not None:
            kwargs["max_memory"] = dict(self.max_memory)
        if self.offload_folder is not None:
            kwargs["offload_folder"] = self.offload_folder
        return kwargs

    def describe(self) -> str:
        memory = ", ".join(f"{'GPU ' if isinstance(d, int) else ''}{d}: {format_bytes(b)}"
                           for d, b in (self.max_memory or ()))
        return f"device map {self.device_map}" + (f", at most {memory}" if memory else "")


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def parse_size(text: str, label: str | None = None) -> int:
    """``"20GiB"``, ``"500MB"``, ``"400KB"``, ``"123456"`` (bytes) -> bytes (> 0), or :class:`BadInputError` naming
    ``label`` (default: the text)."""
    label = label or repr(str(text))
    m = _SIZE.match(str(text))
    unit = m.group(2).upper() if m else ""
    if not m or unit not in _UNITS:
        raise BadInputError(f"{label} is not a size.", fix="write e.g. 20GiB, 500MB, 400KB or a number of bytes.")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value < 1:
        raise BadInputError(f"{label} is not a positive size.", fix="give at least 1 byte, e.g. 400KB.")
    return value


def parse_max_memory(text: str, gpus: int | None = None) -> tuple[tuple[int | str, int], ...]:
    """``"0=20GiB,1=20GiB,cpu=64GiB"`` -> ``((0, bytes), (1, bytes), ("cpu", bytes))``; a device is a GPU index
    (one this machine has) or ``cpu``."""
    if gpus is None:
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    entries = [e for e in str(text).replace(" ", "").split(",") if e]
    if not entries:
        raise BadInputError("--max-memory is empty.", fix="write e.g. --max-memory 0=20GiB,cpu=64GiB.")
    out: dict[int | str, int] = {}
    for entry in entries:
        device, sep, size = entry.partition("=")
        if not sep:
            raise BadInputError(f"--max-memory entry {entry!r} has no device=size.",
                                fix="write e.g. --max-memory 0=20GiB,cpu=64GiB (GPU index or cpu, then a size).")
        device = device.lower()
        if device.isdigit():
            key: int | str = int(device)
            if key >= gpus:
                raise BadInputError(f"--max-memory names GPU {key}, but this machine has {gpus} GPU(s).",
                                    fix=f"name GPUs 0 to {gpus - 1} and cpu." if gpus else "name only cpu here.")
        elif device == "cpu":
            key = "cpu"
        else:
            raise BadInputError(f"--max-memory device {device!r} is neither a GPU index nor cpu.",
                                fix="write e.g. --max-memory 0=20GiB,cpu=64GiB; what is left goes to disk.")
        if key in out:
            raise BadInputError(f"--max-memory names {device} twice.", fix="give each device once.")
        out[key] = parse_size(size, f"--max-memory {entry}")
    return tuple(out.items())


def make_placement(device_map: str | None = None, max_memory: str | dict | None = None,
                   offload_folder: str | None = None) -> Placement | None:
    """A checked :class:`Placement` from the CLI's three options (None when none is given: load as usual).
    ``--max-memory`` alone means ``--device-map auto``."""
    if device_map is None and max_memory is None and offload_folder is None:
        return None
    if device_map is not None and device_map not in DEVICE_MAPS:
        raise BadInputError(f"--device-map {device_map!r} is not one of accelerate's placements.",
                            fix=f"use one of: {', '.join(DEVICE_MAPS)} (auto: GPUs in order, then CPU, then disk).")
    if isinstance(max_memory, dict):
        memory = tuple((k, parse_size(v) if isinstance(v, str) else int(v)) for k, v in max_memory.items())
    else:
        memory = parse_max_memory(max_memory) if max_memory is not None else None
    folder = None
    if offload_folder is not None:
        path = Path(offload_folder).expanduser()
        try:
            is_file = path.exists() and not path.is_dir()
        except OSError as exc:  # a name too long for the file system, and the like
            raise BadInputError(f"--offload-folder cannot be used here: {exc.strerror or exc}.",
                                fix="give a short path to a folder (it is created when weights go to disk).") from exc
        if is_file or not str(offload_folder).strip():
            raise BadInputError(f"--offload-folder {offload_folder!r} is not a folder.",
                                fix="give a folder (it is created when weights go to disk).")
        folder = str(path)
    return Placement(device_map or "auto", memory, folder)


def add_placement_args(p) -> None:
    """``--device-map``, ``--max-memory``, ``--offload-folder`` on an argparse parser."""
    p.add_argument("--device-map", choices=DEVICE_MAPS, default=None,
                   help="spread a checkpoint bigger than one device with accelerate: auto fills the GPUs in order, "
                        "then the CPU, then offloads the rest to disk (read layer by layer)")
    p.add_argument("--max-memory", default=None, metavar="DEV=SIZE,...",
                   help="memory each device may hold, e.g. 0=20GiB,1=20GiB,cpu=64GiB (implies --device-map auto)")
    p.add_argument("--offload-folder", default=None, metavar="DIR",
                   help="where offloaded weights go when they cannot be read from the checkpoint's safetensors files")


# ---- the placement load_model uses by default (set by the CLI around one command) -------------------------------
_current: contextvars.ContextVar[Placement | None] = contextvars.ContextVar("layerwise_placement", default=None)


def current_placement() -> Placement | None:
    return _current.get()


@contextlib.contextmanager
def placed(placement: Placement | None) -> Iterator[None]:
    """Within the block, :func:`core.zoo.load_model` loads with ``placement`` unless told otherwise."""
    token = _current.set(placement)
    try:
        yield
    finally:
        _current.reset(token)


# ---- a dispatched model -------------------------------------------------------------------------------------------
def is_dispatched(model) -> bool:
    """Whether accelerate spread ``model`` over devices (transformers sets ``hf_device_map`` then)."""
    return bool(getattr(model, "hf_device_map", None))


def input_device(model):
    """Where inputs go: the first GPU of a dispatched model's map (else the CPU), or the first parameter's device."""
    import torch
    if is_dispatched(model):
        gpus = [d for d in model.hf_device_map.values() if isinstance(d, int) or str(d).startswith("cuda")]
        return torch.device(f"cuda:{gpus[0]}" if isinstance(gpus[0], int) else gpus[0]) if gpus else torch.device("cpu")
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


def _align_hooks(module) -> list:
    from accelerate.hooks import AlignDevicesHook, SequentialHook
    hook = getattr(module, "_hf_hook", None)
    hooks = list(hook.hooks) if isinstance(hook, SequentialHook) else [hook] if hook is not None else []
    return [h for h in hooks if isinstance(h, AlignDevicesHook)]


def offload_hook(module):
    """The accelerate hook that loads ``module``'s own weights for each forward (None when they are resident)."""
    for h in _align_hooks(module):
        if h.offload and h.weights_map is not None:
            return h
    return None


def compute_device(module):
    """Where ``module`` computes: its hook's execution device when its weights are offloaded, else its weight's."""
    import torch
    hook = offload_hook(module)
    if hook is not None and hook.execution_device is not None:
        d = hook.execution_device
        return torch.device(f"cuda:{d}" if isinstance(d, int) else d)
    for t in module.parameters(recurse=False):
        return t.device
    return torch.device("cpu")


def _owner(model, name: str):
    """(module holding an offload hook that serves parameter ``name``, the name relative to it) or None."""
    parts = name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        try:
            module = model.get_submodule(".".join(parts[:i]))
        except AttributeError:
            continue
        hook = offload_hook(module)
        relative = ".".join(parts[i:])
        if hook is not None and (i == len(parts) - 1 or hook.place_submodules) and relative in hook.weights_map:
            return module, relative
    return None


def offloaded_names(model) -> list[str]:
    """The parameters of ``model`` that are placeholders on ``meta``, their values read from an offload store."""
    if not is_dispatched(model):
        return []
    return [n for n, p in model.named_parameters() if p.device.type == "meta" and _owner(model, n) is not None]


def parameter_values(model, name: str):
    """The values of parameter ``name`` of ``model`` (a tensor, detached): the parameter itself when it is resident,
    else read from its offload store (the checkpoint's safetensors file, the offload folder or CPU memory)."""
    param = model.get_parameter(name)
    if param.device.type != "meta":
        return param.detach()
    found = _owner(model, name)
    if found is None:
        raise BadInputError(f"the weights of {name} are not loaded and have no offload store.",
                            fix="load the model without --device-map, or with an accelerate device map.")
    module, relative = found
    return offload_hook(module).weights_map[relative].detach()


def weight_of(module, name: str = "weight"):
    """``module.<name>``'s values (:func:`parameter_values` for one module: e.g. an ``nn.Linear``'s weight)."""
    return parameter_values(module, name)


class ServedWeights(Mapping):
    """An offload hook's weights map seen through a request's changes: ``served[name]`` (a tensor, or a callable
    returning one, evaluated each time the layer runs) instead of the stored tensor. The store is never written."""

    def __init__(self, base: Mapping, served: dict[str, object]):
        self.base, self.served = base, served

    def __getitem__(self, key):
        if key in self.served:
            value = self.served[key]
            return value() if callable(value) else value
        return self.base[key]

    def __iter__(self):
        return iter(self.base.keys())

    def __len__(self) -> int:
        return len(self.base)

    def keys(self):
        return self.base.keys()

    def __contains__(self, key) -> bool:
        return key in self.served or key in self.base


def changed_values(read: Callable[[], object], mask, multiplier: float) -> Callable[[], object]:
    """A callable that reads a stored matrix and multiplies the ``mask`` entries by ``multiplier`` (the values an
    intervention gives it), for :class:`ServedWeights`: the changed matrix exists only while its layer runs."""
    def values():
        w = read().clone()
        m = mask.to(w.device)
        w[m] = w[m] * multiplier
        return w
    return values


class ParameterValues(Mapping):
    """``{parameter name: values}`` of ``model`` read one at a time (:func:`parameter_values`): iterating it loads one
    tensor per step, so a consumer that handles one tensor at a time never holds an offloaded model whole."""

    def __init__(self, model, names: list[str]):
        self.model, self.names = model, list(names)

    def __getitem__(self, name: str):
        if name not in self.names:
            raise KeyError(name)
        return parameter_values(self.model, name)

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)
