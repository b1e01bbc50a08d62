"""Count the host syncs of a piece of code: the ops that make the host wait for the device to read a value back.

On a GPU such an op (``tensor.item()``, ``bool(tensor)``, ``int(tensor)``, ``.tolist()``, ``.cpu()``,
``torch.nonzero``, ``torch.equal``, ``t[mask]``, ``repeat_interleave`` without ``output_size``, ...)
drains the launch queue: the GPU idles while Python runs, once per call. :class:`HostSyncs` is a
``TorchDispatchMode`` that sees every aten op the code runs and records those that sync, with the Python line that
caused each, so a test can hold a hot path to "no sync per layer" on any machine:

    with HostSyncs(answer=True) as syncs:       # on tensors of the "meta" device (shapes only, no data)
        model(ids)
    assert syncs.count == 0, syncs.report()

On the ``meta`` device (no data, hence no values to read) the ops that would sync cannot run at all; with
``answer=True`` the mode records them and answers with a placeholder (0, an empty index, a zero-filled CPU copy),
so the code runs to its end and every sync is counted, not only the first. On CUDA the same mode counts the real
syncs of a run (``bench/gpu.py`` reports them per forward). Ops on CPU tensors never wait for a device and are not
counted.
"""
from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncs", "CaptureCheck", "SyncEvent", "SYNC_OPS"]

aten = torch.ops.aten

# ops whose result (or output shape) depends on values: the host must wait for the device to compute them
SYNC_OPS = {
    aten._local_scalar_dense.default: "item",  # .item(), bool(t), int(t), float(t), t.tolist() of one element
    aten.item.default: "item",  # the same, as seen under inference mode (not decomposed there)
    aten.is_nonzero.default: "item",
    aten.nonzero.default: "nonzero",  # torch.nonzero, torch.where(cond) (boolean-mask indexing: below)
    aten.equal.default: "equal",  # torch.equal
    aten.masked_select.default: "masked_select",
    aten._unique2.default: "unique",
    aten.unique_consecutive.default: "unique",
    aten.unique_dim.default: "unique",
}


@dataclass(frozen=True)
class SyncEvent:
    """One host sync: which op (``item``, ``nonzero``, ``to_host``, ...) and the project line that caused it."""

    op: str
    where: str


def _device_of(args, kwargs) -> torch.device | None:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    return b.device
    return None


def _caller() -> str:
    """The innermost stack frame outside torch and this module: the line that asked for the value."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        path = frame.filename.replace("\\", "/")
        if "/torch/" in path or path.endswith("tests/syncs.py"):
            continue
        return f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}"
    return "?"


class HostSyncs(TorchDispatchMode):
    """Records the host syncs of the ops run inside it (see the module docstring).

    Parameters
    ----------
    answer : on the ``meta`` device, answer each syncing op with a placeholder so that the code runs on (off
        ``meta`` the op runs as usual).

    Attributes
    ----------
    events : the :class:`SyncEvent` of every sync, in order.
    """

    def __init__(self, answer: bool = False):
        super().__init__()
        self.answer = answer
        self.events: list[SyncEvent] = []

    @property
    def count(self) -> int:
        return len(self.events)

    def by_line(self) -> Counter:
        """How many syncs each project line caused."""
        return Counter(f"{e.op} at {e.where}" for e in self.events)

    def report(self) -> str:
        """The syncs by line, most frequent first (for an assertion's message)."""
        return "; ".join(f"{n} x {what}" for what, n in self.by_line().most_common()) or "no host syncs"

    def _to_host(self, func, args, kwargs) -> bool:
        """A copy from a device to the host (``.cpu()``, ``.to("cpu")``, ``.tolist()`` of a device tensor)."""
        if func in (aten._to_copy.default, aten.to.device, aten.to.dtype_layout):
            src = args[0] if args else None
            dst = kwargs.get("device") or (args[1] if len(args) > 1 and isinstance(args[1], torch.device) else None)
            return isinstance(src, torch.Tensor) and src.device.type != "cpu" and dst is not None \
                and torch.device(dst).type == "cpu"
        if func is aten.copy_.default:
            return args[0].device.type == "cpu" and args[1].device.type != "cpu"
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = _device_of(args, kwargs)
        op = SYNC_OPS.get(func)
        if op is None and func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            op = "repeat_interleave"  # without output_size the output length is read back
        if op is None and func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) \
                and any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
            op = "mask_index"  # t[mask], t[mask] = v: the mask's nonzero entries are read back
        if op is None and self._to_host(func, args, kwargs):
            op, device = "to_host", args[0].device if func is not aten.copy_.default else args[1].device
        if op is None or device is None or device.type == "cpu":
            return func(*args, **kwargs)
        self.events.append(SyncEvent(op, _caller()))
        if not (self.answer and device.type == "meta"):
            return func(*args, **kwargs)
        return self._placeholder(func, op, args, kwargs)

    @staticmethod
    def _placeholder(func, op, args, kwargs):
        if op == "item":
            t = args[0]
            return False if t.dtype == torch.bool else (0.0 if t.is_floating_point() else 0)
        if op == "equal":
            return True
        if op == "to_host":
            if func is aten.copy_.default:
                return args[0]
            src = args[0]
            return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
        if op == "nonzero":
            return torch.empty(0, args[0].dim(), dtype=torch.long, device="meta")
        if op == "mask_index":
            if func is aten.index.Tensor:
                t, index = args[0], args[1]
                skipped = sum(i.dim() if i is not None else 1 for i in index)
                return torch.empty(0, *t.shape[skipped:], dtype=t.dtype, device="meta")
            return args[0]
        if op == "repeat_interleave":
            return torch.empty(0, dtype=torch.long, device="meta")
        return torch.empty(0, dtype=args[0].dtype, device="meta")  # masked_select, unique: empty


def _shapes(out) -> tuple:
    """The (shape, dtype) of every tensor in an op's output."""
    if isinstance(out, torch.Tensor):
        return ((tuple(out.shape), str(out.dtype)),)
    if isinstance(out, (list, tuple)):
        return tuple(item for o in out for item in _shapes(o))
    return ()


class CaptureCheck(HostSyncs):
    """What a CUDA graph cannot hold, recorded (on the ``meta`` device, the stand-in for a GPU): the host syncs (as
    :class:`HostSyncs` with ``answer=True``), the copies from host memory onto the device (``from_host``: a graph
    records the copy, not the host data, so it would replay stale values), and the trace of every op with the shapes
    and dtypes it produced, so two calls with different values can be compared: equal traces mean fixed shapes."""

    def __init__(self):
        super().__init__(answer=True)
        self.trace: list[tuple[str, tuple]] = []
        self.from_host: list[SyncEvent] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if func in (aten._to_copy.default, aten.to.device, aten.to.dtype_layout) and src is not None \
                and src.device.type == "cpu":
            dst = kwargs.get("device") or (args[1] if len(args) > 1 and isinstance(args[1], torch.device) else None)
            if dst is not None and torch.device(dst).type != "cpu":
                self.from_host.append(SyncEvent("from_host", _caller()))
        if func is aten.copy_.default and args[0].device.type != "cpu" and args[1].device.type == "cpu":
            self.from_host.append(SyncEvent("from_host", _caller()))
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.trace.append((str(func), _shapes(out)))
        return out
