"""Per-session Stop for long computations.

``cancels=`` stops Gradio from waiting for an event, but the worker thread of a plain (non-generator)
handler runs on; so a handler also polls a flag that its session's Stop button sets. Flags are keyed by
the browser session, so one visitor's Stop never stops another's work.
"""
from __future__ import annotations

import threading

import gradio as gr

_flags: dict[str, threading.Event] = {}
_lock = threading.Lock()


def stop_flag(request: gr.Request | None) -> threading.Event:
    """The Stop flag of the session that made ``request`` (one shared flag when there is no session)."""
    key = getattr(request, "session_hash", None) or "default"
    with _lock:
        return _flags.setdefault(key, threading.Event())
