"""Turn problems the user can fix into ``gr.Error`` messages; the app keeps serving."""
from __future__ import annotations

import functools

import gradio as gr

from core.errors import LayerwiseError


def user_errors(fn):
    """Wrap an event handler: a :class:`LayerwiseError` becomes a ``gr.Error`` naming the fix."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LayerwiseError as exc:
            raise gr.Error(str(exc), title="Cannot do that") from exc

    return wrapper
