"""Per-session Stop, and the one bridge from a Gradio handler to :mod:`core.runner`'s progress convention.

``cancels=`` stops Gradio from waiting for an event, but the worker thread of a plain (non-generator) handler runs
on; so the work also polls a flag that its session's Stop button sets: :func:`job` gives ``core`` a
``progress(fraction, message)`` that drives ``gr.Progress`` and raises :class:`core.errors.Cancelled` once Stop was
pressed. Flags are keyed by the browser session, so one visitor's Stop never stops another's work.
"""
from __future__ import annotations

import threading

import gradio as gr

from core.progress import cancellable

_flags: dict[str, threading.Event] = {}
_lock = threading.Lock()
STOPPED = "Stopped. Press a button to start again."


def stop_flag(request: gr.Request | None) -> threading.Event:
    """The Stop flag of the session that made ``request`` (one shared flag when there is no session)."""
    key = getattr(request, "session_hash", None) or "default"
    with _lock:
        return _flags.setdefault(key, threading.Event())


def job(request: gr.Request | None, progress=None):
    """A new piece of work for this session: clears its Stop flag and returns the ``progress(fraction, message)``
    callable to hand to ``core`` (it drives ``gr.Progress`` and raises ``Cancelled`` after Stop)."""
    flag = stop_flag(request)
    flag.clear()
    show = (lambda fraction, message: progress(fraction, desc=message)) if progress is not None else None
    return cancellable(show, flag.is_set)


def stop(request: gr.Request = None) -> str:
    """Ask this session's running work to stop."""
    stop_flag(request).set()
    return STOPPED
