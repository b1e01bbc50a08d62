"""Concurrency lanes: which events may run at the same time.

Gradio's queue runs the events of one handler function as one group, ``default_concurrency_limit`` of them at once
(``app.py --concurrency``, 2 by default). So a dataset page waited for the page asked just before it, and two
visitors asking for the targets of their texts waited for each other, although each call takes milliseconds.

- **heavy** handlers (those taking ``gr.Progress``: :func:`ui.gpu.heavy`, the ones that report progress and can be
  stopped) keep that: ``--concurrency`` at a time each.
- **cheap** handlers (every other one without a limit of its own) share one lane, ``cheap``, of ``--cheap-lane``
  calls at once (default 8; 0 leaves them as Gradio groups them), so a cheap call waits only for cheap calls, and
  only when eight are already running.
- Events that set their own limit keep it (the precomputed views of a stage and a link: unlimited; preparing the
  data: one at a time).

``bench/load.py --lanes`` measures the queue's share of cheap calls with and without the lane, side by side.
"""
from __future__ import annotations

import gradio as gr

from ui.gpu import heavy

DEFAULT_CHEAP_LANE = 8
CHEAP = "cheap"


def assign_lanes(demo: gr.Blocks, cheap_limit: int = DEFAULT_CHEAP_LANE) -> list[str]:
    """Put every cheap handler of ``demo`` without a limit of its own into the lane :data:`CHEAP` of ``cheap_limit``
    calls at once (0: none); returns the api names (or function names) of the events moved. Call before the queue
    starts (``demo.launch``)."""
    if cheap_limit <= 0:
        return []
    moved = []
    for block_fn in demo.fns.values():
        if block_fn.fn is None or heavy(block_fn.fn) or block_fn.concurrency_limit != "default":
            continue
        block_fn.concurrency_id = CHEAP
        block_fn.concurrency_limit = cheap_limit
        moved.append(block_fn.api_name or block_fn.name)
    return moved
