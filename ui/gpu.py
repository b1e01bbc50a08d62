"""The heavy handlers on a Space's GPU.

ZeroGPU attaches a GPU only inside functions wrapped with ``spaces.GPU`` (from the ``spaces`` package, which
``app.py`` imports before Gradio on a Space); anywhere else ``spaces.GPU`` hands the function back unchanged. The
heavy handlers are the ones that take ``gr.Progress`` (long work: they report progress and can be stopped);
:func:`on_gpu` wraps exactly those once the app is built. Without the ``spaces`` package loaded (a laptop, the tests)
nothing is wrapped, and on a CPU Space or a dedicated GPU every wrapper is the handler itself. Where models run is
:func:`core.zoo.model_device` (the GPU of a GPU Space).
"""
from __future__ import annotations

import inspect
import os
import sys

import gradio as gr

DEFAULT_SECONDS = 120  # what a ZeroGPU call may take (LAYERWISE_GPU_SECONDS); ZeroGPU's own default is 60


def heavy(fn) -> bool:
    """Whether an event handler is long work: it takes a ``gr.Progress``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(isinstance(p.default, gr.Progress) for p in params)


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
        block_fn.fn = spaces.GPU(duration=seconds)(fn)
        wrapped.append(block_fn.api_name or block_fn.name)
    return wrapped
