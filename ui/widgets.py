"""Small pieces every tab uses to show a :class:`core.runner.Result`: tables, the Downloads box, a method picker, and
the number fields (:func:`finite_number`, :func:`finite_slider`) that refuse NaN, infinity and out-of-range values
with the app's own message."""
from __future__ import annotations

import math
import numbers

import gradio as gr
import pandas as pd

from core.errors import BadInputError
from core.figures import message_figure
from ui.errors import as_gr_error


def number(value, what: str, cast=int):
    """``cast(value)`` of a number box, or a clear error for a blank, NaN, infinity or a value that is not a number."""
    if isinstance(value, float) and not math.isfinite(value):
        raise BadInputError(f"{what} = {value!r} is not a finite number.", fix=f"type a number for {what}.")
    try:
        return cast(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInputError(f"{what} = {value!r} is not a number.", fix=f"type a number for {what}.") from None


def _checked(component, payload):
    """``payload`` of a number field, or the app's own message (``gr.Error``) for NaN, infinity, a value that is not
    a number or one outside the field's range; gradio's own checks would say "Could not preprocess" or crash."""
    if payload is None:
        return None
    label = component.label or "the number"
    lo, hi = component.minimum, component.maximum
    bounds = f"from {lo:g} to {hi:g}" if lo is not None and hi is not None else \
        f"of at least {lo:g}" if lo is not None else f"of at most {hi:g}" if hi is not None else "that is finite"
    if isinstance(payload, bool) or not isinstance(payload, numbers.Real) or not math.isfinite(payload) or (
            lo is not None and payload < lo) or (hi is not None and payload > hi):
        raise as_gr_error(BadInputError(f"{label} = {payload!r} is not allowed.", fix=f"type a number {bounds}."))
    return payload


def _refusing(component):
    """``component`` (a number field) with its ``preprocess`` checked first by :func:`_checked`. An instance
    attribute, not a subclass: gradio writes a ``.pyi`` stub beside the module of every component subclass."""
    plain = component.preprocess
    component.preprocess = lambda payload: plain(_checked(component, payload))
    return component


def finite_number(*args, **kwargs) -> gr.Number:
    """``gr.Number`` that refuses NaN, infinity and out-of-range values with the app's own message."""
    return _refusing(gr.Number(*args, **kwargs))


def finite_slider(*args, **kwargs) -> gr.Slider:
    """``gr.Slider`` that refuses NaN, infinity and out-of-range values with the app's own message."""
    return _refusing(gr.Slider(*args, **kwargs))


def frame(rows) -> pd.DataFrame | None:
    """Rows (list of dicts) as a table, or None when there are none."""
    return pd.DataFrame(rows) if rows else None


def files_of(result) -> list[str]:
    """The Result's download files (written once per result), or [] when there is no result."""
    return result.files() if result is not None else []


def downloads_update(result) -> dict:
    """The Downloads box after a handler: its files, shown only when there are some."""
    files = files_of(result)
    return gr.update(value=files or None, visible=bool(files))


def downloads_box(result, label: str, elem_id: str) -> gr.File:
    """A Downloads box holding ``result``'s files (a precomputed example has files too); hidden while empty."""
    files = files_of(result)
    return gr.File(value=files or None, visible=bool(files), label=label, file_count="multiple", interactive=False,
                   elem_id=elem_id, elem_classes="lw-downloads")


def figure_or(result, name: str, message: str):
    """A figure of the Result, or a figure that says what to press."""
    if result is not None and name in result.figures:
        return result.figures[name]
    return message_figure(message)


def image_file(**kwargs) -> gr.Image:
    """An image upload (``gr.Image``) handed to the handler as its file's path, not opened by Gradio: the handler reads
    the header first (:func:`core.lrp.inputs.prepare_image` refuses a decompression bomb before decoding it) and
    answers a file that is not an image with the app's own message (Gradio's own failure is a bare
    ``{"error": null}`` in public mode). An instance's ``preprocess`` (a subclass would make Gradio write a stub file
    beside this module)."""
    box = gr.Image(type="filepath", **kwargs)
    opened = box.preprocess

    def preprocess(payload):
        if payload is None or (payload.url or "").startswith("data:"):  # an inline image: Gradio writes the file
            return opened(payload)
        return str(payload.path) if payload.path else None

    box.preprocess = preprocess
    return box
