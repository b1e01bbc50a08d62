"""What each MathNeuro action is asked, parsed once: the raw inputs of the tab (widget values), the CLI (argparse)
or a notebook become one frozen request here, checked here and nowhere else, so the tab and the CLI share every rule
(e.g. at most two non-math datasets, :data:`MAX_NONMATH`).

A request knows its cache parameters (:meth:`params`, the ``params`` of the result and its key: unchanged from what
the committed examples were computed with) and the options of its view that do not change the result
(:meth:`options`, e.g. the layer distribution's count or share).
"""
from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from core.errors import BadInputError
from core.mathneuro.methods import METHODS, get_method
from core.mathneuro.recipe import DEMO_NAME, SENTIMENT
from core.mathneuro.scoring import check_factor, check_proportion
from core.mathneuro.tasks import check_count, check_metric

MAX_NONMATH = 2  # non-math datasets an analysis compares against at once (the tab's layer and effect panels)
SHOW = {"count": "count", "share": "share of the module's weights"}  # the layer distribution's values -> labels

DEFAULTS = {"model": DEMO_NAME, "math": "arithmetic-words", "nonmath": [SENTIMENT, "movie-sentiment"],
            "n": 100, "eval_n": 100, "proportion": 0.05, "method": "mathneuro", "factor": 1.1,
            "methods": list(METHODS), "proportions": [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2],
            "factors": [0.0, 0.5, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5, 2.0], "consistency_proportions": [0.01, 0.05, 0.1],
            "repeats": 3, "seed": 0, "metric": "auto", "show": "count", "max_cells": 64}


# ---- one rule each ------------------------------------------------------------------------------------------------
def model_ref(ref) -> str:
    """The model reference, stripped; an empty one is a clear error."""
    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick a model, e.g. mathneuro-tiny.")
    return str(ref).strip()


def nonmath_names(nonmath) -> tuple[str, ...]:
    """One name or a list of 1 to :data:`MAX_NONMATH` non-math dataset names."""
    items = [nonmath] if isinstance(nonmath, str) else list(nonmath or [])
    if not items:
        raise BadInputError("No non-math dataset chosen.", fix="Pick one or two non-math datasets.")
    if len(items) > MAX_NONMATH:
        raise BadInputError("Pick at most two non-math datasets.", fix="Untick one (or give one or two names).")
    if not all(isinstance(x, str) and x.strip() for x in items):
        raise BadInputError(f"Non-math dataset names must be text, got {items!r}.", fix="Pick them from the list.")
    return tuple(items)


def first_nonmath(nonmath) -> str:
    """The non-math dataset of an analysis that compares against one: the first of the one or two chosen."""
    return nonmath_names(nonmath)[0]


def samples_n(n) -> int:
    return check_count(n, "The number of samples N")


def eval_count(eval_n) -> int:
    return check_count(eval_n, "The number of evaluation items")


def method_name(method) -> str:
    return get_method(method).name


def method_names(methods) -> tuple[str, ...]:
    """The methods to compare; none chosen means all of them."""
    return tuple(method_name(m) for m in (methods or list(METHODS)))


def proportion_list(proportions, default: list[float]) -> tuple[float, ...]:
    """Values of K (``default`` when none are given)."""
    return tuple(check_proportion(k, "Each proportion K") for k in (proportions or default))


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise BadInputError(f"The seed must be a whole number, got {seed!r}.", fix="Use e.g. 0.")
    return int(seed)


def default_matrix(names: list[str]) -> str:
    """The weight matrix the drill-down shows first: the first MLP down-projection (else the first matrix)."""
    return next((x for x in names if "mlp.down_proj" in x), names[0])


# ---- the requests -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """What every analysis is asked: the model reference, the math dataset, the non-math dataset(s) and N.

    A request type lists its fields in the order of its result's ``params``; :data:`VIEW_OPTIONS` names the fields
    that change only how the result is shown (:meth:`options`), not the result (:meth:`params`, its key)."""

    ref: str
    math: str
    nonmath: str | tuple[str, ...]
    n: int

    VIEW_OPTIONS: ClassVar[tuple[str, ...]] = ()

    def params(self) -> dict:
        """The parameters of the result (and of its key): every field but the model reference (the key holds the
        model's fingerprint) and the view options; tuples as lists (JSON)."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)
                if f.name != "ref" and f.name not in self.VIEW_OPTIONS}

    def options(self) -> dict:
        """The view options (:func:`core.mathneuro.views.view`)."""
        return {k: getattr(self, k) for k in self.VIEW_OPTIONS}

    def key(self) -> tuple[str, str, dict]:
        """(model name, the weights' fingerprint, :meth:`params`): how the result is stored and looked up."""
        from core.zoo import fingerprint

        return self.ref, fingerprint(self.ref), self.params()

    def price(self):
        """What the analysis costs (:mod:`core.budget`): N samples of the math and each non-math dataset scored
        (forward and backward; ``repeats`` times more for the consistency), and ``eval_n`` items of each dataset
        evaluated before and after each setting (method, K or factor)."""
        from core.budget import SAMPLE_TOKENS, Price, model_flops, model_parameters

        params = model_parameters(self.ref)
        datasets = 1 + (len(self.nonmath) if isinstance(self.nonmath, tuple) else 1)
        scored = self.n * datasets * (1 + getattr(self, "repeats", 0))
        settings = max(len(getattr(self, name, ()) or ()) for name in ("methods", "proportions", "factors"))
        evaluated = getattr(self, "eval_n", 0) * (1 + settings) * datasets
        return Price(model_flops(params, scored * SAMPLE_TOKENS, backward=True)
                     + model_flops(params, evaluated * SAMPLE_TOKENS),
                     f"{scored:,} samples scored and {evaluated:,} items evaluated on {self.ref} "
                     f"({params / 1e6:.1f} M parameters)", fix="a smaller N, fewer evaluation items or settings.")


@dataclass(frozen=True)
class IdentifyRequest(Request):
    """The masks of one method against one non-math dataset (not cached; ``out``: a ``.safetensors`` to write)."""

    proportion: float
    method: str
    seed: int = 0
    out: Path | None = None

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportion, method, seed=0, out=None) -> "IdentifyRequest":
        n, proportion, method = samples_n(n), check_proportion(proportion), method_name(method)
        path = Path(out) if out else None
        if path is not None and path.suffix != ".safetensors":
            raise BadInputError(f"Cannot write masks to {path.name}.", fix="Use --out masks.safetensors.")
        if path is not None and not path.parent.exists():
            raise BadInputError(f"Folder {path.parent} does not exist.", fix="Create it or choose another path.")
        return cls(model_ref(ref), math, first_nonmath(nonmath), n, proportion, method, check_seed(seed), path)


@dataclass(frozen=True)
class LayersRequest(Request):
    """Selected parameters per layer and module against one or two non-math datasets; ``show`` count or share."""

    proportion: float
    method: str
    show: str = "count"

    VIEW_OPTIONS: ClassVar[tuple[str, ...]] = ("show",)

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportion, method="mathneuro", show="count") -> "LayersRequest":
        proportion, n, method = check_proportion(proportion), samples_n(n), method_name(method)
        if show not in SHOW:
            raise BadInputError(f"Cannot show {show!r}.", fix=f"Use one of: {', '.join(SHOW)}.")
        return cls(model_ref(ref), math, nonmath_names(nonmath), n, proportion, method, show)


@dataclass(frozen=True)
class EffectRequest(Request):
    """Each method's set pruned (or scaled by ``factor``): math and non-math metric before and after."""

    proportion: float
    methods: tuple[str, ...]
    eval_n: int
    metric: str
    mode: str
    factor: float | None

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportion, methods=None, eval_n=100, metric="auto", mode="prune",
              factor=None) -> "EffectRequest":
        proportion, nonmath, methods = check_proportion(proportion), nonmath_names(nonmath), method_names(methods)
        ref, n, eval_n, metric = model_ref(ref), samples_n(n), eval_count(eval_n), check_metric(metric)
        if mode == "scale":
            factor = check_factor(factor)
        elif mode == "prune":
            factor = None
        else:
            raise BadInputError(f"Unknown intervention {mode!r}.", fix="Use prune or scale.")
        return cls(ref, math, nonmath, n, proportion, methods, eval_n, metric, mode, factor)


@dataclass(frozen=True)
class ProportionSweepRequest(Request):
    """The set pruned at each K (``proportions``), against the first non-math dataset."""

    proportions: tuple[float, ...]
    method: str
    eval_n: int
    metric: str

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportions=None, method="mathneuro", eval_n=100,
              metric="auto") -> "ProportionSweepRequest":
        proportions = proportion_list(proportions, DEFAULTS["proportions"])
        eval_n, ref, method = eval_count(eval_n), model_ref(ref), method_name(method)
        return cls(ref, math, first_nonmath(nonmath), samples_n(n), proportions, method, eval_n,
                   check_metric(metric))


@dataclass(frozen=True)
class ScaleSweepRequest(Request):
    """The set scaled by each factor, against the first non-math dataset."""

    proportion: float
    method: str
    factors: tuple[float, ...]
    eval_n: int
    metric: str
    factor: float | None = None  # the chosen factor (added to ``factors``), whose metrics the status reports

    VIEW_OPTIONS: ClassVar[tuple[str, ...]] = ("factor",)

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportion, method="mathneuro", factors=None, eval_n=100, metric="auto",
              factor=None) -> "ScaleSweepRequest":
        proportion = check_proportion(proportion)
        factors = [check_factor(f, "Each scale factor") for f in (factors if factors is not None else
                                                                  DEFAULTS["factors"])]
        if factor is not None:
            factor = check_factor(factor)
            factors = factors if factor in factors else sorted(set(factors) | {round(factor, 4)})
        if not factors:
            raise BadInputError("Give at least one scale factor.")
        eval_n, ref, method = eval_count(eval_n), model_ref(ref), method_name(method)
        return cls(ref, math, first_nonmath(nonmath), samples_n(n), proportion, method, tuple(factors), eval_n,
                   check_metric(metric), factor)


@dataclass(frozen=True)
class ConsistencyRequest(Request):
    """How much of the set found from all N samples is found from fewer: ``repeats`` random subsets per count
    (seeded), per K."""

    proportions: tuple[float, ...]
    method: str  # mathneuro, wanda or random (the analysis refuses lape, which keeps no column norms)
    repeats: int  # random subsets per sample count
    seed: int  # draws the subsets

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportions=None, method="mathneuro", repeats=3,
              seed=0) -> "ConsistencyRequest":
        n, ref, repeats = samples_n(n), model_ref(ref), check_count(repeats, "repeats")
        proportions = proportion_list(proportions, DEFAULTS["consistency_proportions"])
        return cls(ref, math, first_nonmath(nonmath), n, proportions, method_name(method), repeats, check_seed(seed))


@dataclass(frozen=True)
class DrillRequest(Request):
    """Where one weight matrix's selected entries sit, pooled to at most ``max_cells`` per side."""

    proportion: float
    method: str
    matrix: str
    max_cells: int

    @classmethod
    def parse(cls, ref, math, nonmath, n, proportion, method="mathneuro", matrix=None, max_cells=64, *,
              matrices: Callable[[str], list[str]]) -> "DrillRequest":
        """``matrices(ref)``: the model's scored weight names (asked once the cheap checks have passed)."""
        proportion, n, method = check_proportion(proportion), samples_n(n), method_name(method)
        max_cells, ref = check_count(max_cells, "The number of heatmap cells per side"), model_ref(ref)
        names = matrices(ref)
        matrix = matrix or default_matrix(names)
        if matrix not in names:
            raise BadInputError(f"The model has no scored matrix {matrix!r}.", fix=f"Use e.g. {names[0]}.")
        return cls(ref, math, first_nonmath(nonmath), n, proportion, method, matrix, max_cells)
