"""Concurrency lanes: which events may run at the same time, and how much heavy work the whole server does at once.

Gradio's queue runs the events of one handler function as one group, ``default_concurrency_limit`` of them at once.
So a dataset page waited for the page asked just before it, and, worse, every heavy handler had a limit of its own:
one visitor had 11 heavy jobs in flight (issue 42), and up to 55 could run at once on 2 cores.

- **heavy** handlers (those taking ``gr.Progress``: :func:`ui.gpu.heavy`, the ones that report progress and can be
  stopped) share **one** lane, ``heavy``, of ``--concurrency`` events at once in the whole server, whichever handler
  and whichever visitor; a handler that ran one at a time (a live training: each measures its own memory and speed)
  still does, inside the lane (:func:`bound_heavy`). In public mode one visitor may also have only
  :func:`ui.stopping.visitor_limit` of them computing (the others are refused with one message).
- **cheap** handlers (every other one without a limit of its own) share one lane, ``cheap``, of ``--cheap-lane``
  calls at once (default 8; 0 leaves them as Gradio groups them), so a cheap call waits only for cheap calls.
- Cheap events that set their own limit keep it (the precomputed views of a stage and a link: unlimited; preparing
  the data: one at a time).

``bench/load.py --lanes`` measures the queue's share of cheap calls with and without the lane, side by side.
"""
from __future__ import annotations

import functools
import inspect
import threading

import gradio as gr

from ui.gpu import heavy
from ui.stopping import end_jobs
from ui.tempfolder import after_event

DEFAULT_CHEAP_LANE = 8
CHEAP = "cheap"
HEAVY = "heavy"


def bound_heavy(fn, exclusive: bool = False):
    """``fn`` (a heavy handler) ending its jobs when it returns (:func:`ui.stopping.end_jobs`: the visitor may start
    another) and then sweeping Gradio's temp folder (:func:`ui.tempfolder.after_event`), and with ``exclusive`` one
    call at a time (others wait, inside the heavy lane). Its signature is ``fn``'s, so Gradio hands it the same
    request and progress."""
    lock = threading.Lock() if exclusive else None

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def streaming(*args, **kwargs):
            if lock is not None:
                lock.acquire()
            try:
                yield from fn(*args, **kwargs)
            finally:
                end_jobs()
                if lock is not None:
                    lock.release()
                after_event()
        return streaming

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        if lock is not None:
            lock.acquire()
        try:
            return fn(*args, **kwargs)
        finally:
            end_jobs()
            if lock is not None:
                lock.release()
            after_event()
    return plain


def assign_lanes(demo: gr.Blocks, cheap_limit: int = DEFAULT_CHEAP_LANE, heavy_limit: int | None = None) -> list[str]:
    """Put every heavy handler of ``demo`` into the lane :data:`HEAVY` of ``heavy_limit`` events at once (None: leave
    the heavy handlers as Gradio groups them), each wrapped by :func:`bound_heavy`, and every cheap handler without
    a limit of its own into the lane :data:`CHEAP` of ``cheap_limit`` calls (0: none); returns the api names (or
    function names) of the events moved. Call before the queue starts (``demo.launch``)."""
    moved = []
    for block_fn in demo.fns.values():
        if block_fn.fn is None:
            continue
        if heavy(block_fn.fn):
            if heavy_limit is None or getattr(block_fn, "layerwise_bounded", False):
                continue
            block_fn.fn = bound_heavy(block_fn.fn, exclusive=block_fn.concurrency_limit == 1)
            block_fn.layerwise_bounded = True
            block_fn.concurrency_id, block_fn.concurrency_limit = HEAVY, max(1, int(heavy_limit))
            moved.append(block_fn.api_name or block_fn.name)
            continue
        if cheap_limit <= 0 or block_fn.concurrency_limit != "default":
            continue
        block_fn.concurrency_id = CHEAP
        block_fn.concurrency_limit = cheap_limit
        moved.append(block_fn.api_name or block_fn.name)
    return moved
