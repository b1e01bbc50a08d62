"""The house style of every chart, and the one writer of result files, shared by the CLI and the tabs.

A tab shows a plotly figure; the CLI writes the same figure as a self-contained HTML file (plotly.js
inlined, so it opens offline), the data as JSON and the rows as CSV. Colours are the Okabe & Ito (2008)
palette, distinguishable with the common colour-vision deficiencies (yellow last: weak on white).
"""
from __future__ import annotations

import csv
import io
import json
import os
import warnings
from pathlib import Path

from core.errors import BadInputError


def _plotly(module: str = "plotly.graph_objects"):
    """Import a plotly module on first use (the compute paths import the paper packages, whose figure modules name
    plotly, without loading it: a GPU image with only the compute stack runs them), with the house template as
    plotly's default: applied when a figure is serialised (for the page, the HTML file or an image), since giving it
    to every figure instead (``template="plotly_white"``) validates and copies the whole template each time, 30 ms a
    figure, most of the app's start-up time spent on charts."""
    import importlib

    loaded = importlib.import_module(module)
    import plotly.io as pio

    if pio.templates.default != "plotly_white":
        pio.templates.default = "plotly_white"
    return loaded


class _Lazy:
    """A plotly module imported on first use (:func:`_plotly`)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(_plotly(self._name), attr)


go = _Lazy("plotly.graph_objects")  # plotly's graph objects, imported when the first figure is built


def make_subplots(*args, **kwargs):
    """``plotly.subplots.make_subplots``, imported when first called."""
    return _plotly("plotly.subplots").make_subplots(*args, **kwargs)


PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
FONT = {"size": 15, "color": "#0f172a"}


def style(fig: "go.Figure", title: str, x_title: str | None = None, y_title: str | None = None,
          height: int = 460) -> "go.Figure":
    """Title, axis labels (say the unit: ``"memory (MB)"``), a framed legend, the palette, projector-size type."""
    fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"}, font=FONT,
                      height=height, margin={"l": 70, "r": 20, "t": 80, "b": 60}, colorway=list(PALETTE),
                      legend={"bgcolor": "rgba(255,255,255,0.85)", "bordercolor": "#cbd5e1", "borderwidth": 1})
    if x_title is not None:
        fig.update_xaxes(title_text=x_title, showline=True, linecolor="#475569")
    if y_title is not None:
        fig.update_yaxes(title_text=y_title, showline=True, linecolor="#475569")
    return fig


def message_figure(message: str, title: str = "", height: int = 300) -> "go.Figure":
    """An empty figure that says why there is nothing to plot yet."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 16, "color": "#475569"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(title={"text": title, "x": 0.01}, font=FONT, height=height)
    return fig


def figure_html(fig: "go.Figure") -> str:
    """A whole HTML page holding the figure, with plotly.js inlined (works offline)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fig.to_html(include_plotlyjs=True, full_html=True)


__all__ = ["PALETTE", "FONT", "style", "message_figure", "figure_html", "go", "make_subplots"]
