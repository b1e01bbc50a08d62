"""Per-session Stop for long computations.

``cancels=`` stops Gradio from waiting for an event, but the worker thread of a plain (non-generator)
handler runs on; so a handler also polls a flag that its session's Stop button sets. Flags are keyed by
the browser session, so one visitor's Stop never stops another's work.
"""
from __future__ import annotations

import threading

import gradio as gr

from core.errors import LayerwiseError

_flags: dict[str, threading.Event] = {}
_lock = threading.Lock()


def stop_flag(request: gr.Request | None) -> threading.Event:
    """The Stop flag of the session that made ``request`` (one shared flag when there is no session)."""
    key = getattr(request, "session_hash", None) or "default"
    with _lock:
        return _flags.setdefault(key, threading.Event())


class Stopped(LayerwiseError):
    """The user pressed Stop."""


def progress_callback(progress, request: gr.Request | None):
    """A ``(done, total, stage)`` callback for ``core`` runners that drives ``gr.Progress`` and raises
    :class:`Stopped` once the session's Stop flag is set."""
    flag = stop_flag(request)

    def cb(done, total, stage):
        if flag.is_set():
            raise Stopped("Stopped.", fix="Press the button again to restart.")
        progress(done / max(total, 1), desc=f"{stage}: {done}/{total}")
    return cb
