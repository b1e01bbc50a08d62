"""The heavy handlers on a Space's GPU.

ZeroGPU attaches a GPU only inside functions wrapped with ``spaces.GPU`` (from the ``spaces`` package, which
``app.py`` imports before Gradio on a Space); anywhere else ``spaces.GPU`` hands the function back unchanged. The
heavy handlers are the ones that take ``gr.Progress`` (long work: they report progress and can be stopped);
:func:`on_gpu` wraps exactly those once the app is built, each with a duration sized from the call's inputs
(:func:`gpu_seconds`, at most ``LAYERWISE_GPU_SECONDS``, default 120). No ``torch.compile`` runs anywhere (ZeroGPU does
not support it; only ahead-of-time compilation). Without the ``spaces`` package loaded (a laptop, the tests)
nothing is wrapped, and on a CPU Space or a dedicated GPU every wrapper is the handler itself. Where models run is
:func:`core.zoo.model_device` (the GPU of a GPU Space).
"""
from __future__ import annotations

import inspect
import math
import os
import sys

import gradio as gr

DEFAULT_SECONDS = 120  # the most a ZeroGPU call asks for (LAYERWISE_GPU_SECONDS); ZeroGPU's own default is 60
FLOOR_SECONDS = 15  # every call: ZeroGPU starts a worker for it and the model goes onto the GPU again
SECONDS_PER_ITEM = 0.5  # one unit of work (a method on a text, a sample, a step) of a model of up to 100 M parameters
COUNT_INPUTS = ("n", "samples", "steps", "eval_n")  # the number inputs that count units of work


def heavy(fn) -> bool:
    """Whether an event handler is long work: it takes a ``gr.Progress``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(isinstance(p.default, gr.Progress) for p in params)


def _values(value):
    """The plain input values inside one argument (a stage hands its inputs over as one dict)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _values(v)
    elif isinstance(value, (str, int, float, list, tuple, set)) and not isinstance(value, bool):
        yield value


def _parameters(name: str) -> int | None:
    from core.zoo import card_of, registered_names

    if name not in registered_names():
        return None
    try:
        return card_of(name).parameters
    except Exception:  # noqa: BLE001  (a model not prepared: sized as a small one)
        return None


def gpu_seconds(fn, cap: int):
    """ZeroGPU's duration callable for a heavy handler: called with each call's own arguments, it asks for
    ``FLOOR_SECONDS + SECONDS_PER_ITEM x model factor x items`` seconds, at most ``cap``. ``items`` is the work the
    inputs ask for: the product of the lengths of its list inputs (methods, modes, runs) and of its counts
    (:data:`COUNT_INPUTS`: samples, steps); the model factor is a registered model's parameters over 100 M (at
    least 1). A call whose inputs name none of these (e.g. a link, whose work depends on its view) asks for ``cap``.
    Shorter requests queue sooner and fit a visitor's daily quota (2 minutes without an account)."""
    signature = inspect.signature(fn)

    def duration(*args, **kwargs) -> int:
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
        except TypeError:
            return cap
        values = [v for name, value in bound.items() for v in _values(value)]
        lists = [max(1, len(v)) for v in values if isinstance(v, (list, tuple, set))]
        counts = [max(1.0, float(bound[n])) for n in COUNT_INPUTS
                  if isinstance(bound.get(n), (int, float)) and not isinstance(bound.get(n), bool)]
        sizes = [p for p in (_parameters(v) for v in values if isinstance(v, str)) if p]
        if not lists and not counts and not sizes:
            return cap
        items = math.prod(lists) * math.prod(counts)
        factor = max(1.0, max(sizes, default=0) / 1e8)
        return int(min(cap, math.ceil(FLOOR_SECONDS + SECONDS_PER_ITEM * factor * items)))

    return duration


def on_gpu(demo: gr.Blocks, spaces=None) -> list[str]:
    """Wrap every heavy handler of ``demo`` with ``spaces.GPU`` (``spaces``: the module, default the loaded one);
    returns the names of the handlers wrapped (none without ``spaces``)."""
    spaces = spaces or sys.modules.get("spaces")
    if spaces is None:
        return []
    try:
        seconds = max(1, int(os.environ.get("LAYERWISE_GPU_SECONDS", DEFAULT_SECONDS)))
    except ValueError:
        seconds = DEFAULT_SECONDS
    wrapped = []
    for block_fn in demo.fns.values():
        fn = block_fn.fn
        if fn is None or hasattr(fn, "zerogpu") or not heavy(fn):  # zerogpu: spaces wrapped it already
            continue
        block_fn.fn = spaces.GPU(duration=gpu_seconds(fn, seconds))(fn)  # sized per call from its inputs
        wrapped.append(block_fn.api_name or block_fn.name)
    return wrapped
