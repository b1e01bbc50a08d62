"""Turn problems the user can fix into ``gr.Error`` messages; the app keeps serving."""
from __future__ import annotations

import functools
import inspect

import gradio as gr

from core.errors import Cancelled, LayerwiseError, storage_error


def as_gr_error(exc: LayerwiseError) -> gr.Error:
    """The ``gr.Error`` the app shows for a problem the user can fix."""
    return gr.Error(str(exc), title="Stopped" if isinstance(exc, Cancelled) else "Cannot do that")


def user_errors(fn):
    """Wrap an event handler (plain or generator): a :class:`LayerwiseError` (or a read-only / full user folder)
    becomes a ``gr.Error`` naming the fix."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def streaming(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except LayerwiseError as exc:
                raise as_gr_error(exc) from exc
            except OSError as exc:  # a read-only or full LAYERWISE_HOME is a message; any other OSError a bug
                if storage_error(exc) is None:
                    raise
                raise as_gr_error(storage_error(exc)) from exc
        return streaming

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LayerwiseError as exc:
            raise as_gr_error(exc) from exc
        except OSError as exc:  # a read-only or full LAYERWISE_HOME is a message; any other OSError a bug
            if storage_error(exc) is None:
                raise
            raise as_gr_error(storage_error(exc)) from exc

    return wrapper
