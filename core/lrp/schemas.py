"""What each stored MambaLRP result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view shows a missing value as such. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused."""
from __future__ import annotations

from core.schema import Bool, DictOf, Int, ListOf, Num, Opt, Rec, Str

_METHOD = Rec({"label": Str, "logit": Num, "total": Num, "absorbed": Num, "seconds": Num})
_PREDICTIONS = ListOf(Rec({"id": Int, "name": Str, "probability": Num}), 1)
_EXPLAINED = {"kind": Str, "model": Str, "note": Str, "target": Int, "target_name": Str, "predictions": _PREDICTIONS}
_TIMING = Rec({"explain_s": DictOf(Opt(Num))})

SCHEMAS = {
    "lrp/text": Rec({**_EXPLAINED, "model_kind": Str, "tokens": ListOf(Str, 1),
                     "methods": DictOf(Rec({**_METHOD.fields, "relevance": ListOf(Num, 1)}), 1)}),
    "lrp/image": Rec({**_EXPLAINED, "label": Opt(Int), "image": ListOf(ListOf(Num, 1), 1), "grid": ListOf(Int, 2),
                      "methods": DictOf(Rec({**_METHOD.fields, "relevance": ListOf(ListOf(Num, 1), 1)}), 1)}),
    "lrp-evaluation": Rec(
        {"model": Str, "dataset": Str, "split": Str, "baseline": Str, "accuracy": Opt(Num), "complete": Bool,
         "n_done": Int, "steps": Int, "methods": ListOf(Str, 1), "labels": DictOf(Str), "fractions": ListOf(Num),
         "conservation": DictOf(Rec({"mean_abs_error": Num, "mean_rel_error": Opt(Num), "logits": ListOf(Num),
                                     "sums": ListOf(Num)})),
         "timing": _TIMING},
        optional={"faithfulness": DictOf(Rec({"delta_af": Num, "delta_af_sem": Opt(Num), "mean_area_morf": Num,
                                              "mean_area_lerf": Num, "morf": ListOf(Num), "lerf": ListOf(Num)}))}),
    "lrp-long-range": Rec(
        {"model": Str, "k": Int, "length": Int, "n_done": Int, "methods": ListOf(Str, 1), "labels": DictOf(Str),
         "methods_stats": DictOf(Rec({"distances": ListOf(ListOf(Num)), "mean_distance": Opt(Num),
                                      "median_distance": Opt(Num), "share_beyond_half": Opt(Num)})),
         "timing": _TIMING}),
    "lrp-key-token": Rec(
        {"model": Rec({"accuracy": Num}), "dataset": Str, "k": Int, "n": Int, "n_done": Int, "chance": Num,
         "methods": ListOf(Str, 1), "labels": DictOf(Str), "hit_rate": DictOf(Num), "hit_rate_min": DictOf(Num),
         "hit_rate_max": DictOf(Num),
         "last_token": Opt(Rec({"last_position": Int, "median_abs_change_key": Num, "median_abs_change_last": Num,
                                "median_abs_change_key_per_seed": ListOf(Num),
                                "median_abs_change_last_per_seed": ListOf(Num),
                                "methods": DictOf(Rec(
                                    {"misses": Int, "misses_per_seed": ListOf(Int),
                                     "last_first_share_of_misses": Num,
                                     "last_first_share_of_misses_per_seed": ListOf(Opt(Num)),
                                     "median_abs_change_key_in_misses": Num, "median_abs_change_top1_in_misses": Num,
                                     "median_abs_margin_change_key_in_misses": Num,
                                     "top1_moves_more_share_of_misses": Num},
                                    optional={"median_abs_margin_change_top1_in_misses": Num}))}))},
        optional={"hit_rate_std": DictOf(Num), "n_seeds": Int}),
}
