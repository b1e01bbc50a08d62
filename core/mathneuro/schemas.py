"""What each stored MathNeuro result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view copes with a missing value. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused."""
from __future__ import annotations

from core.schema import DictOf, Int, ListOf, Num, Opt, Rec, Str

_LEVELS = Opt(DictOf(Opt(Rec({}, optional={"chance": Opt(Num), "uniform_loss": Opt(Num)}))))
_METRICS = DictOf(Opt(Str), 1)
_SWEEP_PARAMS = {"math": Str, "nonmath": Str, "method": Opt(Str), "eval_n": Opt(Int)}

LAYERS = Rec(
    {"params": Rec({"method": Opt(Str), "n": Opt(Int), "proportion": Num}),
     "by_nonmath": DictOf(Rec({"selected": Int, "total": Int,
                               "rows": ListOf(Rec({"layer": Opt(Int), "module": Opt(Str), "selected": Opt(Int),
                                                   "total": Opt(Int), "share": Num}))}), 1)})

EFFECT = Rec(
    {"params": Rec({"math": Str, "nonmath": ListOf(Str, 1), "n": Opt(Int), "proportion": Num, "eval_n": Opt(Int),
                    "mode": Str}),
     "metrics": _METRICS, "before": DictOf(Opt(Num), 1), "levels": _LEVELS,
     "rows": ListOf(Rec({"method": Opt(Str), "label": Opt(Str), "nonmath": Opt(Str), "selected": Int,
                         "math_before": Num, "math_after": Num, "nonmath_before": Num, "nonmath_after": Num}),
                    1)})

PROPORTION_SWEEP = Rec(
    {"params": Rec({**_SWEEP_PARAMS, "n": Opt(Int)}), "metrics": _METRICS, "levels": _LEVELS,
     "rows": ListOf(Rec({"proportion": Num, "math": Num, "nonmath": Num}), 1)})

SCALE_SWEEP = Rec(
    {"params": Rec({**_SWEEP_PARAMS, "proportion": Num}), "metrics": _METRICS, "levels": _LEVELS,
     "selected": Int, "rows": ListOf(Rec({"factor": Opt(Num), "math": Opt(Num), "nonmath": Opt(Num)}), 1)})

CONSISTENCY = Rec(
    {"params": Rec({"method": Opt(Str), "n": Opt(Int), "repeats": Opt(Int)}),
     "rows": ListOf(Rec({"proportion": Num, "samples": Int, "overlap_with_full": Num,
                         "jaccard_with_full": Opt(Num)}), 1)})

DRILL = Rec(
    {"params": Rec({"method": Opt(Str), "proportion": Num}), "name": Str, "shape": ListOf(Int, 2),
     "selected": Int, "total": Int, "share": Num, "grid": ListOf(ListOf(Num, 1), 1), "row_edges": ListOf(Int, 2),
     "col_edges": ListOf(Int, 2), "row_counts": ListOf(Int, 1), "col_counts": ListOf(Int, 1),
     "matrices": Opt(ListOf(Str))})
