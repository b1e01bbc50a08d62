"""Memory measured while a model trains: the peak of live tensor bytes, split by what the bytes are, and the peak RSS.

:class:`MemoryTracker` is allocator-level: it runs PyTorch's profiler with ``profile_memory=True``, which records
every allocation and free of the CPU allocator (and of the CUDA caching allocator on a GPU) with its address, size
and time, without changing what the program does. (A dispatch-level tracker, a ``TorchDispatchMode``, was tried
first and dropped: while any dispatch mode is active, autograd stops summing gradients in place, so it measured
copies the real program does not make; 54 MiB more at the tied embedding of SmolLM2-135M.) The profiler starts
before the model is built, so the size of every block is known; what is alive when the tracked steps begin
(:meth:`MemoryTracker.begin`: the model, its compressed or quantized weights, the optimizer without state) is the
model at rest and counts as ``weights``.

Each byte belongs to one of :data:`CATEGORIES`:

- ``weights``: the model at rest (parameters, buffers, compressed or quantized weights, the decode buffer), and what
  is allocated inside :meth:`MemoryTracker.category` ``("weights")`` (decoding and compressing a layer);
- ``gradients``: blocks named as a gradient while alive (:meth:`MemoryTracker.mark_gradient`): the ``.grad`` of
  parameters, the gradients on their way to it (the engine's partial sums of a weight used twice, see
  :func:`tag_parameter_gradients`) and the weight gradient of a compressed layer while it is applied;
- ``optimizer``: what is allocated inside ``category("optimizer")``: the optimizer's state and step temporaries, the
  float32 slices of LOMO's fused update;
- ``activations``: everything else (activations saved for the backward, their gradients, logits, temporaries).

Bytes outside PyTorch's allocators (the NumPy arrays of a NeuZip-compressed weight) are counted with
:meth:`MemoryTracker.account`. Not seen: the NumPy / numba temporaries of compressing one layer and the decoder's
128 KB scratch (the peak RSS includes them).

Peak RSS (:func:`reset_peak_rss`, :func:`rss`) comes from Linux's ``VmHWM``, reset through ``/proc/self/clear_refs``;
it counts everything the process holds (the Python heap, the libraries, NumPy arrays, other models loaded), so it is
larger than the tensor bytes and is reported beside them.
"""
from __future__ import annotations

import bisect
import contextlib
import re
from pathlib import Path

import torch

__all__ = ["CATEGORIES", "MemoryTracker", "tag_parameter_gradients", "reset_peak_rss", "rss", "trim_heap"]

CATEGORIES = ("weights", "gradients", "optimizer", "activations")
_PREFIX = "layerwise::"


class MemoryTracker:
    """Peak live tensor bytes over a window, split into :data:`CATEGORIES`::

        tracker = MemoryTracker()
        with tracker:                 # profiling from here: build the model inside
            model = build()
            tracker.begin()           # what is alive now is the model at rest (weights)
            loss = model(x).sum(); loss.backward()
            with tracker.category("optimizer"):
                opt.step()
            tracker.end()
        tracker.peak_bytes, tracker.peak_split

    ``device``: ``cpu`` or a CUDA device (the blocks of that device are counted).
    """

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self._prof = None
        self._marks: list[tuple[str, str]] = []  # (kind, argument) in the order made, kept as profiler events
        self.peak_bytes = 0
        self.peak_split = dict.fromkeys(CATEGORIES, 0)
        self.at_rest = dict.fromkeys(CATEGORIES, 0)
        self.timeline: list[tuple[int, int]] = []  # (ns since begin, live bytes) after each change, for plots
        self.active = False

    debug = False  # keep the big blocks alive at the peak (peak_live), with the operator that made each

    # ---- marking (profiler events with a name the analysis reads) --------------------------------------------------
    def _mark(self, kind: str, arg="") -> None:
        if self.active:
            with torch.profiler.record_function(f"{_PREFIX}{kind}:{arg}"):
                pass

    def begin(self) -> None:
        """The tracked window starts: what is alive now counts as the model at rest (``weights``)."""
        self._mark("begin")

    def end(self) -> None:
        self._mark("end")

    @contextlib.contextmanager
    def category(self, name: str):
        """Blocks allocated inside count as ``name`` (``weights`` or ``optimizer``; ``activations`` is the default)."""
        _check(name)
        if not self.active:
            yield self
            return
        with torch.profiler.record_function(f"{_PREFIX}{name}:"):
            yield self

    def mark_gradient(self, t: torch.Tensor | None) -> None:
        """The block holding ``t`` (alive now) is a gradient, from its allocation to its free."""
        if t is not None and self.active:
            self._mark("gradient", t.data_ptr())

    def account(self, nbytes: int) -> None:
        """``nbytes`` more (or fewer, when negative) ``weights`` from now on that PyTorch's allocator does not see."""
        if nbytes:
            self._mark("account", int(nbytes))

    # ---- profiling ----------------------------------------------------------------------------------------------
    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self._prof = profile(activities=activities, profile_memory=True)
        self._prof.__enter__()
        self.active = True
        return self

    def __exit__(self, *exc):
        self.active = False
        self._prof.__exit__(*exc)
        if exc[0] is None:
            self._analyse(self._prof.profiler.kineto_results.experimental_event_tree())
        self._prof = None
        return False

    def _analyse(self, roots) -> None:
        from torch._C._profiler import _EventType

        allocs, marks = [], []  # (t, ptr, size, scope category); (t, kind, arg)
        stack = [(r, "activations") for r in roots]
        while stack:
            node, scope = stack.pop()
            if node.tag == _EventType.Allocation:
                e = node.extra_fields
                if torch.device(str(e.device)).type == self.device.type:
                    allocs.append((node.start_time_ns, e.ptr, e.alloc_size, scope,
                                   node.parent.name if self.debug and node.parent is not None else ""))
                continue
            name = node.name
            if name.startswith(_PREFIX):
                kind, _, arg = name[len(_PREFIX):].partition(":")
                if kind in CATEGORIES:
                    scope = kind
                else:
                    marks.append((node.start_time_ns, kind, arg))
            stack.extend((c, scope) for c in node.children)
        allocs.sort(key=lambda a: a[0])
        marks.sort()
        begin = next((t for t, k, _ in marks if k == "begin"), None)
        end = next((t for t, k, _ in marks if k == "end"), None)
        if begin is None:
            raise RuntimeError("MemoryTracker: begin() was not called inside the tracked block")
        # blocks: [t_alloc, t_free or None, size, category]; by address, in order of allocation
        blocks, by_ptr = [], {}
        for t, ptr, size, scope, op in allocs:
            if size > 0:
                b = [t, None, size, scope, op]
                blocks.append(b)
                by_ptr.setdefault(ptr, []).append(b)
            else:
                open_ = [b for b in by_ptr.get(ptr, ()) if b[1] is None]
                if open_:  # else a block from before the profiler: not counted either way
                    open_[-1][1] = t
        starts = {ptr: [b[0] for b in bs] for ptr, bs in by_ptr.items()}
        for t, kind, arg in marks:
            if kind == "gradient":
                ptr = int(arg)
                i = bisect.bisect_right(starts.get(ptr, []), t) - 1
                if i >= 0:
                    b = by_ptr[ptr][i]
                    if b[1] is None or b[1] >= t:
                        b[3] = "gradients"
        for b in blocks:  # the model at rest
            if b[0] <= begin and (b[1] is None or b[1] > begin):
                b[3] = "weights"
        events = [(b[0], b[2], b[3]) for b in blocks] + [(b[1], -b[2], b[3]) for b in blocks if b[1] is not None]
        events += [(t, int(arg), "weights") for t, kind, arg in marks if kind == "account"]
        events.sort(key=lambda e: (e[0], e[1] > 0))  # frees before allocations at the same instant
        totals = dict.fromkeys(CATEGORIES, 0)
        peak, split, timeline = -1, dict(totals), []
        rest_done = False
        for t, delta, cat in events:
            if t > begin and not rest_done:
                self.at_rest, rest_done = dict(totals), True
            totals[cat] += delta
            if begin <= t and (end is None or t <= end):
                live = sum(totals.values())
                timeline.append((t - begin, live))
                if live > peak:
                    peak, split = live, dict(totals)
                    if self.debug:
                        self.peak_live = sorted(((b[2] >> 20, b[3], b[4]) for b in blocks if b[2] > 1 << 21 and
                                                 b[0] <= t and (b[1] is None or b[1] > t)), reverse=True)
        if not rest_done:
            self.at_rest = dict(totals)
        if peak < 0:
            peak, split = sum(self.at_rest.values()), dict(self.at_rest)
        self.peak_bytes, self.peak_split, self.timeline = peak, split, timeline


def _check(category: str) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown memory category {category!r}; one of {CATEGORIES}")


def tag_parameter_gradients(loss: torch.Tensor, tracker: MemoryTracker, params) -> int:
    """Mark every gradient autograd computes for one of ``params`` as ``gradients`` from the moment the backward
    produces it (not only once it is stored in ``.grad``): a hook on each graph node that feeds a parameter's
    ``AccumulateGrad``. Call after the forward, before ``loss.backward()``; returns the hooks placed."""
    wanted = {id(p) for p in params}
    seen, todo, placed = set(), [loss.grad_fn], 0
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        slots = []
        for i, (nxt, _) in enumerate(node.next_functions):
            if nxt is None:
                continue
            if type(nxt).__name__ == "AccumulateGrad":
                if id(nxt.variable) in wanted:
                    slots.append(i)
            else:
                todo.append(nxt)
        if slots:
            def hook(grad_inputs, grad_outputs, slots=tuple(slots)):
                for i in slots:
                    tracker.mark_gradient(grad_inputs[i])
            node.register_hook(hook)
            placed += 1
    return placed


# ---- the process -------------------------------------------------------------------------------------------------
_STATUS = Path("/proc/self/status")


def rss() -> dict[str, int | None]:
    """``{"rss": bytes now, "peak": bytes since the last reset}`` (Linux ``VmRSS`` / ``VmHWM``; None elsewhere)."""
    try:
        text = _STATUS.read_text()
    except OSError:
        return {"rss": None, "peak": None}
    found = dict(re.findall(r"Vm(RSS|HWM):\s+(\d+) kB", text))
    return {"rss": int(found["RSS"]) * 1024 if "RSS" in found else None,
            "peak": int(found["HWM"]) * 1024 if "HWM" in found else None}


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS to its RSS now (Linux ``clear_refs``; False where that is not possible)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Give freed heap memory back to the system (glibc ``malloc_trim``), so that a later RSS peak is not hidden by
    memory an earlier run freed but the allocator kept."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
