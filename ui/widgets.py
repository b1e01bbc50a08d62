"""Small pieces every tab uses to show a :class:`core.runner.Result`: charts, tables, the Downloads box."""
from __future__ import annotations

import json
import re

import gradio as gr
import pandas as pd
from gradio.components.plot import PlotData

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


SLIDE = {"width": 960, "height": 540, "scale": 2}  # 16:9 at a size where the title and legend read on a slide


def slide_config(title: str) -> dict:
    """The plotly config of every chart: the toolbar's camera saves a PNG of 1920 x 1080 (a slide; ui.talk's script
    adds the SVG button of the same size), named after the chart's title."""
    name = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "chart"
    return {"toImageButtonOptions": {"format": "png", "filename": f"layerwise-{name}", **SLIDE},
            "displaylogo": False}


class Plot(gr.Plot):
    """``gr.Plot`` whose plotly charts carry :func:`slide_config` (Gradio hands a figure's ``config`` to plotly)."""

    is_template = True  # drawn by the front end's Plot (and configured from gr.Plot's own arguments)
    fill = False  # drop the figure's own height so that the chart fills its box

    def postprocess(self, value) -> PlotData | None:
        data = super().postprocess(value)
        if data is None or data.type != "plotly":
            return data
        fig = json.loads(data.plot)
        title = (fig.get("layout", {}).get("title") or {}).get("text") or ""
        fig["config"] = slide_config(re.sub(r"<[^>]+>", " ", title))
        if self.fill:
            fig.get("layout", {}).pop("height", None)
        return PlotData(type="plotly", plot=json.dumps(fig))


class FillPlot(Plot):
    """A :class:`Plot` that fills its box (the stage's, sized to the screen in the presenter view)."""

    fill = True
