"""What each stored Mix-LN diagnostic must hold before its view reads it (:mod:`core.schema`): every field the view
reads or its table lists, ``Opt`` where the view copes with a missing value (a layer's value is ``None`` only inside
the angular-distance grid, which the heatmap leaves blank). ``tests/core/test_schemas.py`` checks the views against
them."""
from __future__ import annotations

from core.schema import Int, ListOf, Num, Opt, Rec, Str

_LAYERS = ListOf(Num, 1)
# the 64-window diagnostics of a run (issue 35): which windows, how many, and the per-window values (windows x layers)
# the standard errors and paired contrasts of core.mixln.reproduces are computed from
_PER_WINDOW = ListOf(ListOf(Opt(Num), 1), 1)
_WINDOWS = {"corpus": Str, "windows": Int}

ANGULAR = Rec({"subject": Opt(Str), "num_layers": Opt(Int), "samples": Opt(Int), "seq_len": Opt(Int),
               "block_sizes": ListOf(Int, 1), "first_layers": ListOf(Int, 1),
               "raw": ListOf(ListOf(Opt(Num), 1), 1), "scaled": ListOf(ListOf(Opt(Num), 1), 1)},
              optional=_WINDOWS | {"adjacent_se": ListOf(Opt(Num), 1), "adjacent_per_window": _PER_WINDOW},
              same_length=(("block_sizes", "raw", "scaled"),))

REMOVAL = Rec({"subject": Opt(Str), "baseline_loss": Opt(Num), "baseline_perplexity": Num,
               "layers": ListOf(Int, 1), "losses": _LAYERS, "loss_increase": _LAYERS,
               "perplexities": _LAYERS, "perplexity_increase": _LAYERS},
              optional=_WINDOWS | {"samples": Opt(Int), "seq_len": Opt(Int),
                                   "loss_increase_se": ListOf(Opt(Num), 1),
                                   "loss_increase_per_window": _PER_WINDOW},
              same_length=(("layers", "losses", "loss_increase", "perplexities", "perplexity_increase"),))

GRADNORMS = Rec({"subject": Str, "layers": ListOf(Int, 1), "param": _LAYERS, "input": _LAYERS,
                 "loss": Opt(Num)}, same_length=(("layers", "param", "input"),))
