"""The registry of parameter-identification methods and :func:`identify`.

Each method works in two steps so that sweeps can reuse the costly part:

1. ``collect(model, math_inputs, nonmath_inputs, ...)`` runs the model over both datasets and keeps
   small statistics (:class:`Statistics`); methods with the same ``statistics`` kind share them.
2. ``select(model, statistics, proportion, seed)`` turns them into parameter masks.

Methods
-------
mathneuro  math top-K minus non-math top-K, per weight matrix (Christ et al., 2024)
wanda      math top-K, no filtering (Sun et al., 2023 scores)
random     as many parameters per matrix as MathNeuro selects, uniformly at random (seeded)
lape       neurons with low-entropy firing probabilities above the authors' bars (Tang et al., 2024), see ``lape.py``
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.errors import BadInputError
from core.mathneuro import lape
from core.mathneuro.scoring import (ColumnNorms, check_proportion, collect_column_norms, importance_scores,
                                    scored_linears, top_share_mask)
from core.progress import Progress, scaled
from core.zoo.placement import compute_device, weight_of
from kernels.topk_mask import topk_mask

Masks = dict[str, torch.Tensor]
"""Parameter name (as in ``model.named_parameters()``) -> bool tensor of the parameter's shape."""


@dataclass
class Statistics:
    """What a method keeps from the forward passes: ``kind`` names how ``math``/``nonmath`` were made."""

    kind: str
    math: Any
    nonmath: Any


# ----------------------------------------------------------------------------------------------
# Per-matrix selection rules (also used by the consistency analysis, one matrix at a time)
# ----------------------------------------------------------------------------------------------
def wanda_matrix(weight: torch.Tensor, math_norms: torch.Tensor, proportion: float) -> torch.Tensor:
    """(d_out, d_in) bool: top-K share of ``|W| * math_norms``."""
    return top_share_mask(importance_scores(weight, math_norms), proportion)


def mathneuro_matrix(weight: torch.Tensor, math_norms: torch.Tensor, nonmath_norms: torch.Tensor,
                     proportion: float) -> torch.Tensor:
    """(d_out, d_in) bool: top-K for math and not top-K for non-math."""
    math_top = wanda_matrix(weight, math_norms, proportion)
    nonmath_top = wanda_matrix(weight, nonmath_norms, proportion)
    return math_top & ~nonmath_top


def matrix_seed(seed: int, name: str) -> int:
    """A seed per (seed, parameter name), independent of the order matrices are visited in."""
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


def random_matrix(shape: torch.Size, count: int, seed: int, name: str, device=None) -> torch.Tensor:
    """(shape) bool with exactly ``count`` True entries drawn uniformly, reproducibly from (seed, name)."""
    gen = torch.Generator().manual_seed(matrix_seed(seed, name))
    noise = torch.rand(tuple(shape), generator=gen, dtype=torch.float32)
    return topk_mask(noise.to(device) if device is not None else noise, count)


# ----------------------------------------------------------------------------------------------
# Collect and select
# ----------------------------------------------------------------------------------------------
def _collect_norms(model, math_inputs, nonmath_inputs, *, max_length=None, progress=None) -> Statistics:
    math = collect_column_norms(model, math_inputs, what="math", max_length=max_length,
                                progress=scaled(progress, 0.0, 0.5))
    nonmath = collect_column_norms(model, nonmath_inputs, what="non-math", max_length=max_length,
                                   progress=scaled(progress, 0.5, 1.0))
    return Statistics("column_norms", math, nonmath)


def _collect_firing(model, math_inputs, nonmath_inputs, *, max_length=None, progress=None) -> Statistics:
    math = lape.collect_firing_counts(model, math_inputs, what="math", max_length=max_length,
                                      progress=scaled(progress, 0.0, 0.5))
    nonmath = lape.collect_firing_counts(model, nonmath_inputs, what="non-math", max_length=max_length,
                                         progress=scaled(progress, 0.5, 1.0))
    return Statistics("firing_counts", math, nonmath)


def _weight(m: nn.Linear) -> torch.Tensor:
    """The linear layer's weight values where it computes (read from disk, one matrix at a time, when the model was
    loaded with ``--device-map`` and this layer is offloaded)."""
    return weight_of(m).to(compute_device(m))


def scored_with_norms(model, stats: Statistics) -> list[tuple[str, nn.Linear, torch.Tensor, torch.Tensor]]:
    """``(name, linear, math norms, non-math norms)`` of every scored matrix of ``model``
    (:func:`core.mathneuro.scoring.scored_linears`: one entry per distinct weight, a tied or repeated weight under
    the name of its first appearance), from the one list the statistics were collected over.

    Raises
    ------
    BadInputError
        When the statistics were collected over other matrices (another model, or one whose tied weights were not
        tied), naming the first that differs, instead of failing half-way with a bare ``KeyError``.
    """
    linears = scored_linears(model)
    for side in (stats.math, stats.nonmath):
        if set(side.sums) != set(linears):
            odd = sorted(set(side.sums) ^ set(linears))
            raise BadInputError(f"The statistics do not belong to this model: they cover other weight matrices "
                                f"({', '.join(odd[:3])}{' ...' if len(odd) > 3 else ''}).",
                                fix="Collect them again on this model (collect(model, ...)).")
    return [(n, m, stats.math.sums[n], stats.nonmath.sums[n]) for n, m in linears.items()]


def _select_mathneuro(model, stats: Statistics, proportion: float, seed: int = 0) -> Masks:
    return {n: mathneuro_matrix(_weight(m), math, nonmath, proportion)
            for n, m, math, nonmath in scored_with_norms(model, stats)}


def _select_wanda(model, stats: Statistics, proportion: float, seed: int = 0) -> Masks:
    return {n: wanda_matrix(_weight(m), math, proportion) for n, m, math, _ in scored_with_norms(model, stats)}


def _select_random(model, stats: Statistics, proportion: float, seed: int = 0) -> Masks:
    out = {}
    for n, m, math, nonmath in scored_with_norms(model, stats):
        count = int(mathneuro_matrix(_weight(m), math, nonmath, proportion).sum())
        out[n] = random_matrix(m.weight.shape, count, seed, n, compute_device(m))
    return out


def _select_lape(model, stats: Statistics, proportion: float, seed: int = 0, *, filter_rate: float = lape.FILTER_RATE,
                 activation_bar_ratio: float = lape.ACTIVATION_BAR_RATIO) -> Masks:
    return lape.lape_masks(model, stats.math, stats.nonmath, proportion, seed, filter_rate, activation_bar_ratio)


@dataclass(frozen=True)
class Method:
    """One identification method.

    Attributes
    ----------
    name : registry key
    label : display name
    description : one line for the UI
    statistics : kind of statistics it needs (methods with the same kind can share them)
    collect : (model, math_inputs, nonmath_inputs, *, max_length, progress) -> Statistics
    select : (model, Statistics, proportion, seed, **options) -> Masks
    colour : its colour in the charts
    options : the method's own options and their defaults (keywords of ``select``)
    """

    name: str
    label: str
    description: str
    statistics: str
    collect: Callable[..., Statistics]
    select: Callable[..., Masks]
    colour: str
    options: dict = field(default_factory=dict)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("mathneuro", "MathNeuro", "Top-K of |W|·‖X‖ on math inputs, minus the top-K on non-math inputs, "
           "per weight matrix.", "column_norms", _collect_norms, _select_mathneuro, "#D55E00"),
    Method("wanda", "Wanda (math only)", "Top-K of |W|·‖X‖ on math inputs per weight matrix, no filtering.",
           "column_norms", _collect_norms, _select_wanda, "#0072B2"),
    Method("random", "Random", "As many parameters per matrix as MathNeuro selects, drawn at random (seeded).",
           "column_norms", _collect_norms, _select_random, "#009E73"),
    Method("lape", "LAPE (neurons)", "MLP neurons whose firing probabilities have low entropy across the two "
           "datasets (after the authors' 95th-percentile filter) and exceed the activation bar on math; their "
           "down-projection columns (scaling them scales the neuron).", "firing_counts", _collect_firing,
           _select_lape, "#CC79A7",
           {"filter_rate": lape.FILTER_RATE, "activation_bar_ratio": lape.ACTIVATION_BAR_RATIO}),
)}


def get_method(name: str) -> Method:
    """The registered method, or :class:`BadInputError` listing the known ones."""
    if not isinstance(name, str) or name not in METHODS:
        raise BadInputError(f"Unknown method {name!r}.", fix=f"Use one of: {', '.join(METHODS)}.")
    return METHODS[name]


def collect(model: nn.Module, math_inputs: Iterable[torch.Tensor], nonmath_inputs: Iterable[torch.Tensor],
            method: str = "mathneuro", *, max_length: int | None = None,
            progress: Progress | None = None) -> Statistics:
    """Run the model over both datasets and keep the statistics ``method`` needs (model left unchanged)."""
    return get_method(method).collect(model, math_inputs, nonmath_inputs, max_length=max_length, progress=progress)


def _options(m: Method, options: dict | None) -> dict:
    unknown = set(options or {}) - set(m.options)
    if unknown:
        raise BadInputError(f"Method {m.name!r} has no option {', '.join(sorted(unknown))}.",
                            fix=f"Use {', '.join(m.options) or 'no options'}.")
    return {**m.options, **(options or {})}


def select(model: nn.Module, statistics: Statistics, proportion: float, method: str = "mathneuro",
           seed: int = 0, options: dict | None = None) -> Masks:
    """Masks from statistics already collected (for sweeps over K and seeds); ``options`` override the
    method's defaults (:attr:`Method.options`)."""
    m = get_method(method)
    opts = _options(m, options)
    proportion = check_proportion(proportion)
    if statistics.kind != m.statistics:
        raise BadInputError(f"Method {method!r} needs {m.statistics} statistics, got {statistics.kind}.",
                            fix=f"Collect them with collect(..., method={method!r}).")
    return m.select(model, statistics, proportion, seed, **opts)


def identify(model: nn.Module, math_inputs: Iterable[torch.Tensor], nonmath_inputs: Iterable[torch.Tensor],
             proportion: float, method: str = "mathneuro", seed: int = 0, *, max_length: int | None = None,
             progress: Progress | None = None, options: dict | None = None) -> Masks:
    """Find the parameters ``method`` calls math-specific.

    Parameters
    ----------
    model : nn.Module
        Any model with ``nn.Linear`` layers; never modified (hooks removed and train/eval flags
        restored, also after an error or a cancel from ``progress``).
    math_inputs, nonmath_inputs : iterable of (1, T) LongTensor
        Token ids, one sample per tensor (no truncation unless ``max_length`` is given).
    proportion : float in (0, 1]
        K: each weight matrix keeps its ``int(numel * K)`` highest scores.
    method : a key of :data:`METHODS`
    seed : used by ``random``
    progress : ``progress(fraction, message)`` (:data:`core.progress.Progress`), optional; may raise to cancel.
    options : the method's options (:attr:`Method.options`), e.g. ``{"filter_rate": 0.9}`` for ``lape``

    Returns
    -------
    dict parameter name (e.g. ``model.layers.0.mlp.down_proj.weight``) -> bool tensor of that
    parameter's shape (on its device), True where selected; one entry per scored weight.
    """
    m = get_method(method)
    proportion = check_proportion(proportion)
    opts = _options(m, options)
    stats = m.collect(model, math_inputs, nonmath_inputs, max_length=max_length, progress=progress)
    return m.select(model, stats, proportion, seed, **opts)


def column_norm_statistics(math: ColumnNorms, nonmath: ColumnNorms) -> Statistics:
    """Wrap two :class:`ColumnNorms` as statistics for mathneuro / wanda / random."""
    return Statistics("column_norms", math, nonmath)
