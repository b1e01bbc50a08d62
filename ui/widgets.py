"""Small pieces every tab uses to show a :class:`core.runner.Result`: tables, the Downloads box, a method picker."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from core.errors import BadInputError
from core.figures import message_figure


def number(value, what: str, cast=int):
    """``cast(value)`` of a number box, or a clear error for a blank or a value that is not a number."""
    try:
        return cast(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInputError(f"{what} = {value!r} is not a number.", fix=f"type a number for {what}.") from None


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
