"""Turn problems the user can fix into ``gr.Error`` messages; the app keeps serving."""
from __future__ import annotations

import functools
import inspect

import gradio as gr

from core.errors import Cancelled, LayerwiseError


def _as_gr_error(exc: LayerwiseError) -> gr.Error:
    return gr.Error(str(exc), title="Stopped" if isinstance(exc, Cancelled) else "Cannot do that")


def user_errors(fn):
    """Wrap an event handler (plain or generator): a :class:`LayerwiseError` becomes a ``gr.Error`` naming the fix."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def streaming(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except LayerwiseError as exc:
                raise _as_gr_error(exc) from exc
        return streaming

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LayerwiseError as exc:
            raise _as_gr_error(exc) from exc

    return wrapper
