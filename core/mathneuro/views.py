"""What each MathNeuro analysis shows, registered once: :data:`ANALYSES` (name -> its request type, CSV rows, figure,
status text and the other views the tab shows) and :func:`view`, which turns what :func:`core.runner.lookup` found
into a :class:`core.results.Result`. The service computes; this module only shows (no model, no cache).

Adding an analysis: its :class:`Analysis` entry here and its action in :mod:`core.mathneuro.service` (the request it
parses and what it computes); the examples, the cache check, the downloads and the stage follow from the entry.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.mathneuro import figures
from core.mathneuro.requests import (ConsistencyRequest, DrillRequest, EffectRequest, LayersRequest,
                                     ProportionSweepRequest, ScaleSweepRequest)
from core.mathneuro.tasks import limitation, metric_label
from core.results import Result, source_text
from core.runner import Found


def _rows(result: dict) -> list[dict]:
    return result["rows"]


@dataclass(frozen=True)
class Analysis:
    """One analysis: how its inputs are parsed and how its result is shown.

    Attributes
    ----------
    request : the request type that parses its raw inputs (:mod:`core.mathneuro.requests`)
    figure : ``figure(result, **figure options) -> plotly Figure`` (:mod:`core.mathneuro.figures`)
    status : ``status(result, source text, **status options) -> str``, one Markdown paragraph
    rows : ``rows(result) -> list of dicts``, its table (the CSV download)
    views : ``views(result) -> dict``, what else the tab shows that is not a file (e.g. a before/after table)
    figure_options, status_options : the view options (from the request's ``options()``) each one takes; a request
        type shared by several analyses may carry options another one ignores
    """

    request: type
    figure: Callable[..., Any]
    status: Callable[..., str]
    rows: Callable[[dict], list[dict]] = _rows
    views: Callable[[dict], dict] | None = None
    figure_options: tuple[str, ...] = ()
    status_options: tuple[str, ...] = ()


# ---- status texts -------------------------------------------------------------------------------------------------
def _limitations_text(res: dict, names: list[str], before: dict) -> str:
    """' Limits: ...' for the non-math comparators that cannot show a side effect (at chance, at ceiling, loss
    beyond uniform guessing; :func:`core.mathneuro.tasks.limitation`), else ''."""
    notes = [f"{nm} {why}" for nm in names
             if (why := limitation(res["metrics"][nm], before.get(nm), (res.get("levels") or {}).get(nm)))]
    return (" Limits of the comparators: " + "; ".join(notes) + ".") if notes else ""


def effect_status(res: dict, src: str) -> str:
    p = res["params"]
    parts = [f"**{metric_label(k, v)}**" for k, v in res["metrics"].items()]
    text = f"Metrics: {', '.join(parts)}; K = {100 * p['proportion']:g}%, N = {p['n']} ({src})."
    for r in (r for r in res["rows"] if r["method"] == "mathneuro"):
        text += (f" MathNeuro vs {r['nonmath']}: math {r['math_before']:.3g} → {r['math_after']:.3g}, "
                 f"non-math {r['nonmath_before']:.3g} → {r['nonmath_after']:.3g}.")
    return text + _limitations_text(res, [k for k in res["metrics"] if k != p["math"]], res.get("before", {}))


def layers_status(res: dict, src: str) -> str:
    sel = ", ".join(f"{nm}: {part['selected']:,} of {part['total']:,}" for nm, part in res["by_nonmath"].items())
    return f"Layer distribution of **{res['params']['method']}** ({src}): {sel} selected."


def proportion_status(res: dict, src: str) -> str:
    p = res["params"]
    return (f"Proportion sweep of **{p['method']}** against {p['nonmath']} ({src})."
            + _limitations_text(res, [p["nonmath"]], {p["nonmath"]: res["rows"][0]["nonmath"]}))


def scale_status(res: dict, src: str, factor: float | None = None) -> str:
    """``factor``: the chosen factor, whose metrics the text reports."""
    row = next((r for r in res["rows"] if factor is not None and abs(r["factor"] - factor) < 1e-9), None)
    extra = f" At x{factor:g}: math {row['math']:.3g}, non-math {row['nonmath']:.3g}." if row else ""
    return f"Scale-factor sweep of **{res['params']['method']}** ({res['selected']:,} parameters, {src}).{extra}"


def consistency_status(res: dict, src: str) -> str:
    return f"Consistency of **{res['params']['method']}** from 1 to {res['params']['n']} samples ({src})."


def drill_status(res: dict, src: str) -> str:
    rows, cols = res["row_counts"], res["col_counts"]
    top_r = sorted(range(len(rows)), key=lambda i: -rows[i])[:3]
    top_c = sorted(range(len(cols)), key=lambda i: -cols[i])[:3]
    return (f"**{res['name']}** {res['shape'][0]}×{res['shape'][1]} ({src}): rows with most selected entries "
            f"{', '.join(f'{i} ({rows[i]})' for i in top_r)}; columns {', '.join(f'{i} ({cols[i]})' for i in top_c)}.")


# ---- tables -------------------------------------------------------------------------------------------------------
def layers_rows(result: dict) -> list[dict]:
    return [{"nonmath": nm, **r} for nm, part in result["by_nonmath"].items() for r in part["rows"]]


def drill_rows(result: dict) -> list[dict]:
    return [{"row_block": i, **{f"col_{j}": v for j, v in enumerate(row)}} for i, row in enumerate(result["grid"])]


def effect_views(result: dict) -> dict:
    """The before / after table of the pruning effect."""
    return {"effect": [{"method": r["label"], "non-math dataset": r["nonmath"], "parameters pruned": r["selected"],
                        "math before": round(r["math_before"], 3), "math after": round(r["math_after"], 3),
                        "non-math before": round(r["nonmath_before"], 3),
                        "non-math after": round(r["nonmath_after"], 3)} for r in result["rows"]]}


def drill_views(result: dict) -> dict:
    """The model's scored matrices (the tab's choices for the next drill-down)."""
    return {"matrices": result["matrices"]}


ANALYSES: dict[str, Analysis] = {
    "layers": Analysis(LayersRequest, figures.layers_figure, layers_status, layers_rows, figure_options=("show",)),
    "effect": Analysis(EffectRequest, figures.effect_figure, effect_status, views=effect_views),
    "proportion-sweep": Analysis(ProportionSweepRequest, figures.proportion_figure, proportion_status),
    "scale-sweep": Analysis(ScaleSweepRequest, figures.scale_figure, scale_status, status_options=("factor",)),
    "consistency": Analysis(ConsistencyRequest, figures.consistency_figure, consistency_status),
    "drill": Analysis(DrillRequest, figures.drill_figure, drill_status, drill_rows, views=drill_views),
}


def view(name: str, found: Found, **options) -> Result:
    """The analysis ``name`` of what was ``found`` as a Result: status text, its table (CSV), its figure, the other
    views and the files the tab offers. ``options``: view options (e.g. ``show="share"``, from the request's
    ``options()``); the figure and the status each get those they take (:attr:`Analysis.figure_options`,
    :attr:`Analysis.status_options`)."""
    a = ANALYSES[name]
    data = found.data
    status = a.status(data, source_text(found.source), **{k: options[k] for k in a.status_options if k in options})
    figure = a.figure(data, **{k: options[k] for k in a.figure_options if k in options})
    return Result(status, data, tables={name: a.rows(data)}, figures={name: figure},
                  views=a.views(data) if a.views else {}, source=found.source, key=found.key,
                  stem=f"mathneuro-{name}", downloads=("json", "csv"))
