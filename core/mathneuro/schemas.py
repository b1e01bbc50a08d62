"""What each stored MathNeuro result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view shows a missing value as such. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused."""
from __future__ import annotations

from core.schema import DictOf, Int, ListOf, Num, Opt, Rec, Str

_LEVELS = DictOf(Rec({}, optional={"chance": Opt(Num), "uniform_loss": Opt(Num)}))
_SWEEP_PARAMS = {"math": Str, "nonmath": Str, "method": Str, "eval_n": Int}

SCHEMAS = {
    "mathneuro-layers": Rec(
        {"params": Rec({"method": Str, "n": Int, "proportion": Num}),
         "by_nonmath": DictOf(Rec({"selected": Int, "total": Int,
                                   "rows": ListOf(Rec({"layer": Int, "module": Str, "selected": Int, "total": Int,
                                                       "share": Num}))}), 1)}),
    "mathneuro-effect": Rec(
        {"params": Rec({"math": Str, "nonmath": ListOf(Str, 1), "n": Int, "proportion": Num, "eval_n": Int,
                        "mode": Str}),
         "metrics": DictOf(Str, 1), "before": DictOf(Num, 1), "levels": Opt(_LEVELS),
         "rows": ListOf(Rec({"method": Str, "label": Str, "nonmath": Str, "selected": Int, "math_before": Num,
                             "math_after": Num, "nonmath_before": Num, "nonmath_after": Num}), 1)}),
    "mathneuro-proportion-sweep": Rec(
        {"params": Rec({**_SWEEP_PARAMS, "n": Int}), "metrics": DictOf(Str, 1), "levels": Opt(_LEVELS),
         "rows": ListOf(Rec({"proportion": Num, "math": Num, "nonmath": Num}), 1)}),
    "mathneuro-scale-sweep": Rec(
        {"params": Rec({**_SWEEP_PARAMS, "proportion": Num}), "metrics": DictOf(Str, 1), "levels": Opt(_LEVELS),
         "selected": Int, "rows": ListOf(Rec({"factor": Num, "math": Num, "nonmath": Num}), 1)}),
    "mathneuro-consistency": Rec(
        {"params": Rec({"method": Str, "n": Int, "repeats": Int}),
         "rows": ListOf(Rec({"proportion": Num, "samples": Int, "overlap_with_full": Num,
                             "jaccard_with_full": Num}), 1)}),
    "mathneuro-drill": Rec(
        {"params": Rec({"method": Str, "proportion": Num}), "name": Str, "shape": ListOf(Int, 2), "selected": Int,
         "total": Int, "share": Num, "grid": ListOf(ListOf(Num, 1), 1), "row_edges": ListOf(Int, 2),
         "col_edges": ListOf(Int, 2), "row_counts": ListOf(Int, 1), "col_counts": ListOf(Int, 1),
         "matrices": ListOf(Str)}),
}
