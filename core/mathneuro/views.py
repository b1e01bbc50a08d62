"""What each MathNeuro analysis is and shows, registered once: :data:`ANALYSES`, entries of the one
:class:`core.analyses.Analysis` type (its request type, its compute function in :mod:`core.mathneuro.compute`, its
CSV rows, figure, status text and the other views the tab shows). :func:`analysis` makes an entry in the MathNeuro
convention: stored as ``mathneuro-<name>``, one table and one figure named after it, JSON and CSV downloads.

Adding an analysis: its entry here (``analysis(name, request, compute, figure, status)``); the service answers it
(``core.mathneuro.analysis_result(name, ...)``) and the examples, the cache check, the downloads and the stage
follow from the entry.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import analyses
from core.analyses import Analysis, Shown
from core.mathneuro import compute, figures, schemas
from core.mathneuro.requests import (ConsistencyRequest, DrillRequest, EffectRequest, LayersRequest,
                                     ProportionSweepRequest, ScaleSweepRequest)
from core.mathneuro.tasks import limitation, metric_label


def _rows(result: dict) -> list[dict]:
    return result["rows"]


def analysis(name: str, request: type, compute: Callable | None, figure: Callable[..., Any],
             status: Callable[..., str], rows: Callable[[dict], list[dict]] = _rows,
             views: Callable[[dict], dict] | None = None, figure_options: tuple[str, ...] = (),
             status_options: tuple[str, ...] = (), **more) -> Analysis:
    """A MathNeuro analysis: stored as ``mathneuro-<name>``, shown as one table (``rows(result)``, the CSV) and one
    figure (``figure(result, **figure options)``) named ``name``, a status paragraph (``status(result, source text,
    **status options)``) and ``views(result)``; the view options (the request's ``options()``, e.g. ``show``) go to
    the figure and the status that take them (``figure_options``, ``status_options``). ``more``: other
    :class:`core.analyses.Analysis` fields (``schema``: :mod:`core.mathneuro.schemas`)."""
    def pick(shown: Shown, names) -> dict:
        return {k: shown.options[k] for k in names if k in shown.options}
    return Analysis(
        request, lambda d, shown: status(d, shown.source_text, **pick(shown, status_options)), compute,
        stored_as=f"mathneuro-{name}", tables=lambda d, shown: {name: rows(d)},
        figures=lambda d, shown: {name: figure(d, **pick(shown, figure_options))},
        views=(lambda d, shown: views(d)) if views else (lambda d, shown: {}), stem=f"mathneuro-{name}",
        downloads=("json", "csv"), **more)


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
    "layers": analysis("layers", LayersRequest, compute.layers, figures.layers_figure, layers_status, layers_rows,
                       figure_options=("show",), schema=schemas.LAYERS),
    "effect": analysis("effect", EffectRequest, compute.effect, figures.effect_figure, effect_status,
                       views=effect_views, schema=schemas.EFFECT),
    "proportion-sweep": analysis("proportion-sweep", ProportionSweepRequest, compute.proportion_sweep,
                                 figures.proportion_figure, proportion_status, schema=schemas.PROPORTION_SWEEP),
    "scale-sweep": analysis("scale-sweep", ScaleSweepRequest, compute.scale_sweep, figures.scale_figure,
                            scale_status, status_options=("factor",), schema=schemas.SCALE_SWEEP),
    "consistency": analysis("consistency", ConsistencyRequest, compute.consistency, figures.consistency_figure,
                            consistency_status, schema=schemas.CONSISTENCY),
    "drill": analysis("drill", DrillRequest, compute.drill, figures.drill_figure, drill_status, drill_rows,
                      views=drill_views, schema=schemas.DRILL),
}


view = analyses.view_function(ANALYSES)  # view(name, found, request=None, **options), e.g. show="share"
