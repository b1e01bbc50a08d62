"""The house style of every chart, and the one writer of result files, shared by the CLI and the tabs.

A tab shows a plotly figure; the CLI writes the same figure as a self-contained HTML file (plotly.js
inlined, so it opens offline), the data as JSON and the rows as CSV. Colours are the Okabe & Ito (2008)
palette, distinguishable with the common colour-vision deficiencies (yellow last: weak on white).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import warnings
from pathlib import Path

from core.errors import BadInputError

SLIDE = {"width": 960, "height": 540, "scale": 2}  # a chart's export for a slide: 16:9; the PNG is 1920 x 1080 pixels


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


# ---- fitting a figure to the talk-size screen -----------------------------------------------------------------------
# The smallest box a chart is drawn in: the presenter view's stage at 1280 x 720, the screen's height less 250 px and
# about 1,210 px wide (a chart taller than 700 px, several rows of panels, keeps its own height: ui/talk.py). fit()
# places everything for this box; tests/e2e/test_layout.py measures the drawn charts at 1280 x 720 and 1920 x 1080.
STAGE = {"width": 1210, "height": 470, "tall": 700}
TITLE_PAD = 12  # px from the top of the figure to the title
CHAR = 0.56  # a character's width in em, about (the sans-serif plotly draws in)
LINE = 1.3  # line height in em
CANDIDATES = ("top center", "bottom center", "middle right", "middle left", "top right", "top left", "bottom right",
              "bottom left")


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text or "")


def _unwrap(line: str) -> str:
    """A title line without the markup that only made it small (``<sup>``, a font-size span)."""
    line = re.sub(r"</?su[bp]>", "", line)
    return re.sub(r"<span style=['\"]\s*font-size:\s*\d+(?:\.\d+)?px;?\s*['\"]>(.*?)</span>", r"\1", line)


def _line_sizes(text: str, size: float) -> list[float]:
    """The font size of each line of a plotly text (``<br>`` breaks; ``font-size:Npx`` spans, ``<sup>``/``<sub>``
    at plotly's 70 %)."""
    out = []
    for line in re.split(r"<br\s*/?>", text or ""):
        m = re.search(r"font-size:\s*(\d+(?:\.\d+)?)px", line)
        out.append(float(m.group(1)) if m else 0.7 * size if re.search(r"<su[bp]>", line) else size)
    return out


def _base_size(fig) -> float:
    return float(fig.layout.font.size or FONT["size"])


def _top_block(fig, size: float) -> float:
    """Height (px) of what sits just above the plot area: the top row's subplot titles and a legend above it."""
    above = 0.0
    for a in fig.layout.annotations or ():
        if str(a.yref or "paper").endswith(("paper", "domain")) and a.y is not None and a.y >= 0.999 and \
                (a.yanchor or "auto") in ("bottom", "auto"):
            above = max(above, sum(_line_sizes(a.text, float(a.font.size or size))) * LINE + 4)
    legend = fig.layout.legend
    if fig.layout.showlegend is not False and legend.y is not None and legend.y >= 1 and legend.yanchor == "bottom":
        names = [_plain(tr.name) for tr in fig.data if tr.name and tr.showlegend is not False]
        per_row = max(1.0, STAGE["width"] * 0.9 / max(1.0, max((len(n) for n in names), default=1) * CHAR * size + 50))
        rows = math.ceil(len(names) / per_row) if legend.orientation == "h" else len(names)
        above = max(above, rows * (LINE * size + 8) + 10 + (legend.y - 1) * 900)  # y above 1: of a plot up to 900 px
    return above


def _plot_height(fig) -> float:
    """The plot area's height in the smallest box the chart is drawn in (an estimate before plotly lays it out)."""
    height = fig.layout.height or 460
    box = height if height > STAGE["tall"] else min(height, STAGE["height"])
    margin = fig.layout.margin
    return max(60.0, box - (margin.t or 80) - (margin.b or 60) - _tick_room(fig))


def _tick_room(fig) -> float:
    """Height (px) the x tick labels take: one line, or more when long category names turn sideways."""
    size = _base_size(fig)
    cats = [str(x) for tr in fig.data if getattr(tr, "x", None) is not None and getattr(tr, "orientation", None) != "h"
            for x in tr.x if isinstance(x, str)]
    if not cats:
        return LINE * size
    n, longest = len(dict.fromkeys(cats)), max(len(_plain(c)) for c in cats)
    return 0.75 * longest * CHAR * size if longest * CHAR * size > STAGE["width"] * 0.8 / n else LINE * size


def _wrap(text: str) -> str:
    """A long axis title on two lines: before its last parenthesis, else at the space nearest its middle."""
    cut = text.rfind(" (")
    if cut <= 0:
        spaces = [i for i, ch in enumerate(text) if ch == " "]
        if not spaces:
            return text
        cut = min(spaces, key=lambda i: abs(i - len(text) / 2))
    return text[:cut] + "<br>" + text[cut + 1:]


def _axis_range(values: list[float], log: bool) -> tuple[float, float]:
    vs = [math.log10(v) if log else v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if not vs:
        return 0.0, 1.0
    lo, hi = min(vs), max(vs)
    pad = 0.06 * (hi - lo or 1.0)
    return lo - pad, hi + pad


def place_labels(fig) -> None:
    """Point labels that do not cover each other, a marker or the plot's edge: each label of a ``markers+text``
    scatter keeps its trace's position where that is free, else takes the free position nearest it (estimated in
    the smallest box the chart is drawn in; the browser test measures the drawn result)."""
    traces = [tr for tr in fig.data if tr.type == "scatter" and "text" in (tr.mode or "") and tr.text is not None
              and not isinstance(tr.textposition, (list, tuple))]
    if not traces:
        return
    size, lay = _base_size(fig), fig.layout
    xs = [x for tr in fig.data if tr.type == "scatter" and tr.x is not None for x in tr.x if isinstance(x, (int, float))]
    ys = [y for tr in fig.data if tr.type == "scatter" and tr.y is not None for y in tr.y if isinstance(y, (int, float))]
    if not xs or not ys:
        return
    logx, logy = lay.xaxis.type == "log", lay.yaxis.type == "log"
    (x0, x1), (y0, y1) = _axis_range(xs, logx), _axis_range(ys, logy)
    legend = 0 if lay.showlegend is False or (lay.legend.orientation == "h") else 200
    width = STAGE["width"] - (lay.margin.l or 70) - (lay.margin.r or 20) - legend
    height = _plot_height(fig)

    def px(x, y):
        x, y = (math.log10(x) if logx else x), (math.log10(y) if logy else y)
        return (x - x0) / (x1 - x0) * width, (y1 - y) / (y1 - y0) * height

    def shown(x, y):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and (x > 0 or not logx) and \
            (y > 0 or not logy)

    markers, lines = [], []  # boxes around the markers; small boxes along the lines (labels keep off both)
    for tr in fig.data:
        if tr.type != "scatter" or tr.x is None or tr.y is None:
            continue
        pts = [px(x, y) for x, y in zip(tr.x, tr.y) if shown(x, y)]
        if "markers" in (tr.mode or ""):
            r = float(tr.marker.size if isinstance(tr.marker.size, (int, float)) else 10) / 2 + 1
            markers += [(cx - r, cy - r, cx + r, cy + r) for cx, cy in pts]
        if "lines" in (tr.mode or "") or tr.mode is None:
            hv = tr.line.shape == "hv"
            for (ax, ay), (bx, by) in zip(pts, pts[1:]):
                legs = [((ax, ay), (bx, ay)), ((bx, ay), (bx, by))] if hv else [((ax, ay), (bx, by))]
                for (sx, sy), (ex_, ey) in legs:
                    steps = max(1, int(math.hypot(ex_ - sx, ey - sy) / 6))
                    lines += [(sx + (ex_ - sx) * i / steps - 1.5, sy + (ey - sy) * i / steps - 1.5,
                               sx + (ex_ - sx) * i / steps + 1.5, sy + (ey - sy) * i / steps + 1.5)
                              for i in range(steps + 1)]
    placed: list[tuple[float, float, float, float]] = []

    def box(cx, cy, w, h, r, where):
        vertical, horizontal = where.split()
        left = {"left": cx - r - w, "right": cx + r, "center": cx - w / 2}[horizontal]
        top = {"top": cy - r - h, "bottom": cy + r, "middle": cy - h / 2}[vertical]
        return left, top, left + w, top + h

    def cost(b):
        inside = max(0.0, -b[0]) + max(0.0, b[2] - width) + max(0.0, -b[1]) + max(0.0, b[3] - height)
        return 10 * inside + sum(max(0.0, min(b[2], o[2]) - max(b[0], o[0])) * max(0.0, min(b[3], o[3]) -
                                                                                   max(b[1], o[1]))
                                 for o in placed + markers + lines)

    for tr in traces:
        fs = float(tr.textfont.size or size)
        preferred = tr.textposition or "top center"
        order = [preferred] + [c for c in CANDIDATES if c != preferred]
        chosen = []
        for x, y, text in zip(tr.x, tr.y, tr.text if isinstance(tr.text, (list, tuple)) else [tr.text] * len(tr.x)):
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) or (logx and x <= 0) or \
                    (logy and y <= 0):
                chosen.append(preferred)
                continue
            cx, cy = px(x, y)
            w, h = len(_plain(str(text))) * CHAR * fs, LINE * fs
            own = [m for m in markers if abs((m[0] + m[2]) / 2 - cx) < 0.5 and abs((m[1] + m[3]) / 2 - cy) < 0.5]
            r = max([(m[2] - m[0]) / 2 for m in own] + [4.0])  # clear of the widest marker drawn at the point
            scored = []
            for k, where in enumerate(order):
                b = box(cx, cy, w, h, r, where)
                scored.append((cost(b) - sum(max(0.0, min(b[2], o[2]) - max(b[0], o[0])) *
                                             max(0.0, min(b[3], o[3]) - max(b[1], o[1])) for o in own), k, where, b))
            best = min(scored, key=lambda s: (s[0] if s[0] > 1.0 else 0.0, s[1]))  # free (< 1 px²) beats order
            chosen.append(best[2])
            placed.append(best[3])
        tr.textposition = chosen


def fit(fig):
    """Fit a finished figure to the talk-size screen (the house layout; idempotent): the title at the top of the figure
    with room below it for the subplot titles and a legend above the plot, colour-bar titles beside their bar, a y
    axis title too long for its plot's height on two lines, and point labels placed apart (:func:`place_labels`).
    Applied to every figure a result shows (:func:`core.analyses.view`)."""
    lay, size = fig.layout, _base_size(fig)
    if lay.title.text:
        title_size = float(lay.title.font.size or 1.4 * size)
        lines = re.split(r"<br\s*/?>", lay.title.text)
        if len(lines) > 1:  # the lines under the first are a subtitle (plotly places several title lines badly)
            sizes = _line_sizes(lay.title.text, title_size)[1:]
            lay.title.text = lines[0]
            lay.title.subtitle.update(text="<br>".join(_unwrap(line) for line in lines[1:]),
                                      font={"size": round(min(sizes))})
        block = TITLE_PAD + title_size * 1.25
        if lay.title.subtitle.text:
            sub = float(lay.title.subtitle.font.size or size)
            block += 6 + len(re.split(r"<br\s*/?>", lay.title.subtitle.text)) * sub * 1.35
        lay.title.update(yref="container", y=1, yanchor="top", pad={"t": TITLE_PAD})
        lay.margin.t = math.ceil(block + 12 + _top_block(fig, size))
    for tr in fig.data:
        bar = getattr(tr, "colorbar", None)
        if bar is not None and bar.title.text:
            bar.title.side = "right"
    plot_h = _plot_height(fig)
    for name in [k for k in lay.to_plotly_json() if k.startswith("yaxis")]:
        axis = lay[name]
        text = axis.title.text
        if text and "<br>" not in text:
            domain = axis.domain or (0, 1)
            if len(_plain(text)) * CHAR * float(axis.title.font.size or size) > 0.92 * plot_h * (domain[1] - domain[0]):
                axis.title.text = _wrap(text)
    place_labels(fig)
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


def figure_html(fig: "go.Figure", plotly_js: bool | str = True) -> str:
    """A whole HTML page holding the figure, with plotly.js inlined (works offline); ``plotly_js`` a path instead:
    a ``<script src>`` of that path (relative to the page: the static site's one shared copy)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fig.to_html(include_plotlyjs=plotly_js, full_html=True)


__all__ = ["SLIDE", "PALETTE", "FONT", "style", "fit", "place_labels", "message_figure", "figure_html", "go", "make_subplots"]
