"""Faithfulness at equal expected retention: soft comprehensiveness and sufficiency with every method keeping the same
expected share of the input (the project's protocol in the spirit of pi-Soft-NC / pi-Soft-NS, Huang and Chan,
arXiv 2601.03089; docs/mambalrp.md says where it may differ from theirs).

Soft-NC and Soft-NS (Zhao and Aletras, 2023) perturb a token by dropping elements of its embedding at random, with a
probability set by its attribution score; a method whose scores are larger keeps more of the input and scores
better without being more faithful. Here the keep probability of a unit (token or patch) comes from its **rank** in
the method's relevance, calibrated so that every method, on every input, keeps the same expected share ``pi``:

    u_i   = (rank_i + 0.5) / n                        rank 0 = first in the order, n units
    p_i   = sigmoid((t - u_i) / softness)             t solved (bisection) so that mean_i p_i = pi exactly
    x~    = each embedding element of unit i kept with probability p_i, else replaced by the baseline (zero)

The order is most relevant first for sufficiency (keep what the method ranks high) and least relevant first for
comprehensiveness (drop what it ranks high). With ``q(x)`` the probability of the explained class or token, ``x0``
every unit replaced, ``D0 = max(0, q(x) - q(x0))`` and ``q~`` the mean of ``q`` over ``draws`` masks:

    NC(pi) = max(0, q(x) - q~_comprehensiveness(pi)) / D0          higher: dropping the top ranks hurts more
    NS(pi) = (D0 - max(0, q(x) - q~_sufficiency(pi))) / D0         higher: keeping the top ranks suffices

and pi-Soft-NC / pi-Soft-NS are their means over :data:`RETENTION_GRID` (the area under the curve; the ends,
NC(0) = NS(1) = 1 and NC(1) = NS(0) = 0, are the same for every method). NC can pass 1 (a partial perturbation lowers ``q`` below
``q(x0)``: on a two-class model the empty input sits near 0.5, while removing the evidence for a class can flip it).
An input with ``D0`` below :data:`MIN_DROP` (removing everything barely lowers ``q``) has no normalised score: it
is left out for every method alike, and counted. The masks are drawn from one seeded generator per input, the same uniforms for every
method (common random numbers), so method differences are paired over both inputs and draws.

    keep_probabilities(relevance, pi, softness)                -> (len(pi), n) per unit
    retention_scores(model, explanation, input_ids | pixel_values, ...) -> RetentionScores
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.errors import BadInputError
from core.lrp.adapters import adapter_for
from core.lrp.context import lrp_rules

RETENTION_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # expected share of the input kept
SOFTNESS = 0.1  # the sigmoid's width in rank quantiles: -> 0 is the hard top-k flip, larger blurs the ranks
DRAWS = 2  # masks per (input, pi, side); their mean probability is scored (the same for every method)
MIN_DROP = 0.05  # D0 below this: no normalised score for the input (for every method); a smaller D0 would magnify
# the input's score by more than 20 (measured on mamba-sentiment: D0 of 0.002 gave NC = 161 and one input ruled the mean)
VERSION = 2  # of the protocol (part of an evaluation's key; 2: MIN_DROP 0.05, q(x) and q(x0) kept per input)


def keep_probabilities(relevance: torch.Tensor, pi, softness: float = SOFTNESS,
                       most_relevant_first: bool = True) -> torch.Tensor:
    """Keep probability of each unit at each expected retention ``pi``: ``(len(pi), n)`` float64, each row's mean
    equal to its ``pi`` (to 1e-12), non-increasing along ``relevance``'s order (descending with
    ``most_relevant_first``, else ascending; ties in position order). ``relevance: (n,)``."""
    rel = torch.as_tensor(relevance).reshape(-1).double()
    n = rel.numel()
    pis = torch.as_tensor(pi, dtype=torch.float64).reshape(-1)
    if n == 0 or not bool(((pis > 0) & (pis < 1)).all()):
        raise BadInputError("pi must lie strictly between 0 and 1, with at least one unit.")
    if not softness > 0:
        raise BadInputError(f"softness must be > 0, got {softness!r}.")
    order = torch.argsort(rel, descending=most_relevant_first, stable=True)
    rank = torch.empty(n, dtype=torch.float64)
    rank[order] = torch.arange(n, dtype=torch.float64)
    u = (rank + 0.5) / n
    lo = torch.full_like(pis, -1.0 - 50 * softness)
    hi = torch.full_like(pis, 2.0 + 50 * softness)
    for _ in range(100):  # the mean keep probability rises with t: bisection to float64 resolution
        mid = (lo + hi) / 2
        mean = torch.sigmoid((mid[:, None] - u[None]) / softness).mean(1)
        low = mean < pis
        lo, hi = torch.where(low, mid, lo), torch.where(low, hi, mid)
    return torch.sigmoid(((lo + hi)[:, None] / 2 - u[None]) / softness)


@dataclass
class RetentionScores:
    """One explanation's scores at equal retention: ``grid`` (the pi values), ``nc`` and ``ns`` (per pi, None when
    the input has no normalised score), ``p_full`` (q(x)), ``p_empty`` (q(x0)) and the mean probabilities
    ``q_comprehensiveness`` / ``q_sufficiency`` per pi."""

    grid: tuple
    p_full: float
    p_empty: float
    q_comprehensiveness: list
    q_sufficiency: list

    @property
    def defined(self) -> bool:
        return self.p_full - self.p_empty >= MIN_DROP

    @property
    def nc(self) -> list | None:
        if not self.defined:
            return None
        d0 = self.p_full - self.p_empty
        return [max(0.0, self.p_full - q) / d0 for q in self.q_comprehensiveness]

    @property
    def ns(self) -> list | None:
        if not self.defined:
            return None
        d0 = self.p_full - self.p_empty
        return [(d0 - max(0.0, self.p_full - q)) / d0 for q in self.q_sufficiency]

    @property
    def pi_soft_nc(self) -> float | None:
        return None if self.nc is None else float(np.mean(self.nc))

    @property
    def pi_soft_ns(self) -> float | None:
        return None if self.ns is None else float(np.mean(self.ns))


def _probabilities(adapter, batch: torch.Tensor, target: int, batch_size: int) -> torch.Tensor:
    out = []
    with torch.no_grad(), lrp_rules(adapter.model, None):
        for i in range(0, batch.shape[0], batch_size):
            out.append(torch.softmax(adapter.logits(batch[i:i + batch_size]).double(), -1)[:, target])
    return torch.cat(out)


def retention_scores(model, explanation, input_ids=None, pixel_values=None, seed: int = 0,
                     grid=RETENTION_GRID, softness: float = SOFTNESS, draws: int = DRAWS, baseline="zero",
                     batch_size: int = 32) -> RetentionScores:
    """Soft comprehensiveness and sufficiency of ``explanation`` at each expected retention of ``grid`` (the module
    docstring). ``seed`` seeds the masks: give every method the same seed on the same input (the evaluation uses
    the input's index), so they are scored under the same draws."""
    from core.lrp.methods import _baseline_embedding

    if draws < 1:
        raise BadInputError("draws must be at least 1.")
    adapter = adapter_for(model)
    embeds = adapter.embed(input_ids, pixel_values)
    units = adapter.unit_positions(embeds.shape[1])
    rel = explanation.relevance.reshape(-1)
    if rel.shape[0] != units.shape[0]:
        raise BadInputError("The explanation does not belong to this input (lengths differ).")
    base = _baseline_embedding(adapter, embeds, baseline)[0, 0]
    grid = tuple(float(p) for p in grid)
    n, hidden = units.shape[0], embeds.shape[-1]
    gen = torch.Generator().manual_seed(int(seed))
    uniforms = torch.rand((len(grid), draws, n, hidden), generator=gen, dtype=torch.float64)
    empty = embeds.clone()
    empty[0, units] = base
    batch = [embeds, empty]
    for first in (False, True):  # comprehensiveness (least relevant kept first), then sufficiency
        keep = keep_probabilities(rel, grid, softness, most_relevant_first=first)  # (P, n)
        kept = uniforms < keep[:, None, :, None]  # (P, draws, n, H)
        x = embeds.expand(len(grid) * draws, -1, -1).clone()
        x[:, units] = torch.where(kept.reshape(-1, n, hidden), x[:, units], base.to(x))
        batch.append(x)
    q = _probabilities(adapter, torch.cat(batch), explanation.target, batch_size).cpu()
    k = len(grid) * draws
    comp, suff = q[2:2 + k].view(len(grid), draws).mean(1), q[2 + k:].view(len(grid), draws).mean(1)
    return RetentionScores(grid, float(q[0]), float(q[1]), comp.tolist(), suff.tolist())
