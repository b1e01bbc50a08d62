"""What each stored MambaLRP result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view copes with a missing value. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused."""
from __future__ import annotations

from core.schema import Bool, DictOf, Holds, Int, ListOf, Num, Opt, Rec, Str, close

_METHOD = {"label": Opt(Str), "logit": Num, "total": Num, "absorbed": Num, "seconds": Num}


def _adds_up(m: dict) -> str | None:
    """A method's relevance total plus what it leaves unexplained (biases, the class token, ...) is its logit: for
    MambaLRP, sum = logit (issue 42: a value edited and sealed again was served beside the right sum); for a text, the
    tokens' relevances sum to the total (measured on the committed examples: to 1e-16 and 1e-7 of the logit)."""
    if not close(m["total"] + m["absorbed"], m["logit"]):
        return f"total {m['total']:.6g} + absorbed {m['absorbed']:.6g} is not the logit {m['logit']:.6g}"
    flat = m["relevance"] if m["relevance"] and not isinstance(m["relevance"][0], list) else None
    if flat is not None and not close(sum(flat), m["total"]):
        return f"the relevances sum to {sum(flat):.6g}, not the total {m['total']:.6g}"
    return None
_PREDICTIONS = ListOf(Rec({"id": Int, "name": Opt(Str), "probability": Num}), 1)
_EXPLAINED = {"model": Opt(Str), "note": Opt(Str), "target": Opt(Int), "target_name": Opt(Str),
              "predictions": _PREDICTIONS}
_TIMING = Rec({"explain_s": DictOf(Opt(Num))})
_LABELS = DictOf(Opt(Str))

TEXT = Rec({**_EXPLAINED, "kind": Str, "model_kind": Opt(Str), "tokens": ListOf(Str, 1),
            "methods": DictOf(Holds(Rec({**_METHOD, "label": Str, "relevance": ListOf(Num, 1)}), _adds_up),
                              1)})

IMAGE = Rec({**_EXPLAINED, "kind": Opt(Str), "label": Opt(Int), "image": ListOf(ListOf(Num, 1), 1),
             "grid": ListOf(Int, 2),
             "methods": DictOf(Holds(Rec({**_METHOD, "relevance": ListOf(ListOf(Num, 1), 1)}), _adds_up),
                               1)})

FLOW = Rec(
    {"model": Opt(Str), "note": Opt(Str), "target": Opt(Int), "target_name": Opt(Str), "family": Str,
     "structure": Str, "tokens": ListOf(Str, 1), "logit": Num, "total": Num, "residual": Num,
     "absorbed": Rec({"bias": Num, "softmax": Num}),
     "blocks": ListOf(Rec({"layer": Int, "kind": Str, "label": Str, "short": Opt(Str), "name": Str,
                           "in": ListOf(Num, 1), "out": ListOf(Num, 1)}), 1)})

COMPARE = Rec(
    {"method_label": Str, "words": ListOf(Str, 1),
     "models": ListOf(Rec({"model": Str, "family": Str, "structure": Str, "parameters": Int, "target_name": Opt(Str),
                           "logit": Num, "total": Num, "absorbed": Num, "seconds": Num, "note": Opt(Str),
                           "words": ListOf(Num, 1), "outside_text": Num, "share_last_word": Num,
                           "share_last_3_words": Num, "words_for_half": Int,
                           "cumulative_from_end": ListOf(Num, 1)}), 2)})

EVALUATION = Rec(
    {"model": Opt(Str), "dataset": Opt(Str), "split": Opt(Str), "baseline": Opt(Str), "accuracy": Opt(Num),
     "complete": Opt(Bool), "n_done": Opt(Int), "steps": Opt(Int), "methods": ListOf(Str, 1), "labels": _LABELS,
     "fractions": ListOf(Num),
     "conservation": DictOf(Rec({"mean_abs_error": Num, "mean_rel_error": Opt(Num), "logits": Opt(ListOf(Num)),
                                 "sums": Opt(ListOf(Num))},
                                optional={"mean_share_off_explained": Opt(Num), "mean_effective_units": Opt(Num)})),
     "timing": _TIMING},
    optional={"faithfulness": DictOf(Rec({"delta_af": Num, "delta_af_sem": Opt(Num), "mean_area_morf": Num,
                                          "mean_area_lerf": Num, "morf": Opt(ListOf(Num)),
                                          "lerf": Opt(ListOf(Num))},
                                         optional={"delta": ListOf(Num), "pi_soft_nc": Opt(Num),
                                                   "pi_soft_nc_sem": Opt(Num),
                                                   "pi_soft_nc_per_input": ListOf(Opt(Num)), "pi_soft_ns": Opt(Num),
                                                   "pi_soft_ns_sem": Opt(Num),
                                                   "pi_soft_ns_per_input": ListOf(Opt(Num))})),
              "retention": Rec({"grid": ListOf(Num, 1), "draws": Int, "n_defined": Int}),
              "command": Opt(Str)})

LONG_RANGE = Rec(
    {"model": Opt(Str), "k": Opt(Int), "length": Opt(Int), "n_done": Opt(Int), "methods": ListOf(Str, 1),
     "labels": _LABELS,
     "methods_stats": DictOf(Rec({"distances": ListOf(ListOf(Num)), "mean_distance": Opt(Num),
                                  "median_distance": Opt(Num), "share_beyond_half": Opt(Num)})),
     "timing": _TIMING})

KEY_TOKEN = Rec(
    {"model": Rec({"accuracy": Num}), "dataset": Opt(Str), "k": Opt(Int), "n": Opt(Int), "n_done": Opt(Int),
     "chance": Num, "methods": ListOf(Str, 1), "labels": _LABELS, "hit_rate": DictOf(Num),
     "hit_rate_min": DictOf(Num), "hit_rate_max": DictOf(Num),
     "last_token": Opt(Rec({"last_position": Int, "median_abs_change_key": Num, "median_abs_change_last": Num,
                            "median_abs_change_key_per_seed": ListOf(Num),
                            "median_abs_change_last_per_seed": ListOf(Num),
                            "methods": DictOf(Rec(
                                {"misses": Opt(Int), "misses_per_seed": ListOf(Int),
                                 "last_first_share_of_misses": Num,
                                 "last_first_share_of_misses_per_seed": ListOf(Opt(Num)),
                                 "median_abs_change_key_in_misses": Num, "median_abs_change_top1_in_misses": Num,
                                 "median_abs_margin_change_key_in_misses": Num,
                                 "top1_moves_more_share_of_misses": Num},
                                optional={"median_abs_margin_change_top1_in_misses": Num}))}))},
    optional={"hit_rate_std": DictOf(Num), "n_seeds": Opt(Int), "family": Str,
              "hit_rate_per_seed": DictOf(ListOf(Num))})

AGREEMENT = Rec(
    {"model": Opt(Str), "n_explainable": Int, "n_done": Int, "agreement_accuracy": Num,
     "agreeing_plural_share": Opt(Num), "methods": ListOf(Str, 1), "labels": _LABELS, "refused": DictOf(Str),
     "agreement_by_template": DictOf(Rec({"accuracy": Num})),
     "chance": Rec({"mrr": Opt(Num), "pointing_accuracy": Opt(Num)}),
     "scores": DictOf(Rec({"rank": ListOf(Int), "reciprocal_rank": ListOf(Num), "pointing": ListOf(Num),
                           "mrr": Opt(Num), "mrr_sem": Opt(Num), "mean_rank": Opt(Num), "mean_rank_sem": Opt(Num),
                           "median_rank": Opt(Num), "pointing_accuracy": Opt(Num),
                           "pointing_accuracy_sem": Opt(Num), "subject_above_attractor_share": Opt(Num)}))})

BIAS = Rec(
    {"model": Opt(Str), "method": Opt(Str), "target_name": Opt(Str), "templates": Opt(Int), "terms_n": Opt(Int),
     "texts": Opt(Int), "template_logit_min": Num, "template_logit_max": Num,
     "terms": ListOf(Rec({"term": Opt(Str), "group": Opt(Str), "shift_mean": Num, "shift_std": Opt(Num),
                          "relevance_mean": Opt(Num), "relevance_std": Opt(Num)}), 1),
     "pairs": ListOf(Rec({"swap": Str, "n": Opt(Int), "pairs": Opt(Int), "logit_gap_mean": Num,
                          "logit_gap_std": Num, "relevance_gap_mean": Num, "relevance_gap_std": Num,
                          "templates_female_higher": Opt(Int)})),
     "rows": ListOf(Rec({"term": Opt(Str), "group": Opt(Str), "template": Opt(Int), "logit": Opt(Num),
                         "probability": Opt(Num), "relevance": Opt(Num)}), 1)})
