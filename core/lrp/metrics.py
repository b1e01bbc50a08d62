"""Evaluation of explanation methods: conservation, faithfulness by perturbation, long-range view, ground truth.

All runners take a list of samples, each a dict of :func:`core.lrp.explain` arguments
(``{"input_ids": ..., "target": ...}`` or ``{"pixel_values": ...}``), accept ``progress(fraction, message)``
(:mod:`core.runner`'s convention) and stop early, returning what they have, when it raises
:class:`core.errors.Cancelled`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from core.errors import BadInputError, Cancelled
from core.lrp.adapters import adapter_for
from core.lrp.context import lrp_rules
from core.lrp.methods import Explanation, _baseline_embedding, explain, method_names
from core.progress import Progress, report


def _sample(s) -> dict:
    if isinstance(s, dict):
        return dict(s)
    if hasattr(s, "tokens"):  # a core.data TokenTask record
        return {"input_ids": torch.tensor([list(s.tokens)]), "target": getattr(s, "label", None)}
    t = torch.as_tensor(s)
    return {"pixel_values": t} if t.is_floating_point() else {"input_ids": t}


def each_sample(samples, methods, progress: Progress | None):
    """Yield ``(i, sample, method)`` for every sample and method; ``progress`` is called before each and at the end,
    and ends the loop early (without an error) when it raises :class:`Cancelled`."""
    samples = [_sample(s) for s in samples]
    names = method_names(methods)
    total = max(1, len(samples) * len(names))
    done = 0
    try:
        for i, sample in enumerate(samples):
            for name in names:
                report(progress, done / total, f"{name}: sample {i + 1}/{len(samples)}")
                yield i, sample, name
                done += 1
        report(progress, 1.0, "done")
    except Cancelled:
        return


# ------------------------------------------------------------------------------------------------
# Conservation
# ------------------------------------------------------------------------------------------------
def conservation(model, samples: Sequence, methods: Iterable[str] | None = None, progress: Progress | None = None,
                 **options) -> dict[str, dict]:
    """Sum of relevances vs the explained logit, per method, over the samples.

    Returns
    -------
    ``{method: {"sums": [...], "logits": [...], "mean_abs_error": e, "mean_rel_error": r}}``.
    """
    out: dict[str, dict] = {}
    for _, sample, name in each_sample(samples, methods, progress):
        e = explain(model, method=name, **sample, **options.get(name, {}))
        row = out.setdefault(name, {"sums": [], "logits": []})
        row["sums"].append(e.total)
        row["logits"].append(e.logit)
    for row in out.values():
        sums, logits = np.array(row["sums"]), np.array(row["logits"])
        row["mean_abs_error"] = float(np.mean(np.abs(sums - logits)))
        row["mean_rel_error"] = float(np.mean(np.abs(sums - logits) / np.maximum(np.abs(logits), 1e-12)))
    return out


# ------------------------------------------------------------------------------------------------
# Faithfulness by perturbation
# ------------------------------------------------------------------------------------------------
@dataclass
class FlipCurves:
    """Target logit while flipping units most-relevant-first and least-relevant-first.

    ``fractions: (K+1,)`` share of units flipped; ``morf``, ``lerf``: (K+1,) target logits;
    areas by the trapezoid rule over ``fractions``; ``delta = area_lerf - area_morf`` (higher is better).
    """

    fractions: np.ndarray
    morf: np.ndarray
    lerf: np.ndarray

    @property
    def area_morf(self) -> float:
        return float(np.trapezoid(self.morf, self.fractions))

    @property
    def area_lerf(self) -> float:
        return float(np.trapezoid(self.lerf, self.fractions))

    @property
    def delta(self) -> float:
        return self.area_lerf - self.area_morf


def flip_curves(model, explanation: Explanation, input_ids=None, pixel_values=None, steps: int = 10,
                baseline="zero", batch_size: int = 16) -> FlipCurves:
    """Flip tokens / patches in MoRF and LeRF order in ``steps`` steps, replacing their embeddings.

    Parameters
    ----------
    explanation : the explanation to test (its ``relevance`` orders the units; its ``target`` is tracked).
    input_ids / pixel_values : the explained input.
    steps : K; step k flips ``round(k * n / K)`` units.
    baseline : replacement embedding: ``"zero"`` (default), ``"mean"``, a token id or a ``(H,)`` tensor.
    """
    if steps < 1:
        raise BadInputError("steps must be at least 1.")
    adapter = adapter_for(model)
    embeds = adapter.embed(input_ids, pixel_values)
    length = embeds.shape[1]
    units = adapter.unit_positions(length)
    rel = explanation.relevance.reshape(-1)
    if rel.shape[0] != units.shape[0]:
        raise BadInputError("The explanation does not belong to this input (lengths differ).")
    base = _baseline_embedding(adapter, embeds, baseline)
    order_morf = units[torch.argsort(rel, descending=True, stable=True)]
    order_lerf = units[torch.argsort(rel, descending=False, stable=True)]
    counts = [round(k * units.shape[0] / steps) for k in range(steps + 1)]
    batch = []
    for order in (order_morf, order_lerf):
        for c in counts:
            x = embeds.clone()
            x[0, order[:c]] = base[0, 0]
            batch.append(x)
    batch = torch.cat(batch)
    values = []
    with torch.no_grad(), lrp_rules(adapter.model, None):
        for i in range(0, batch.shape[0], batch_size):
            values.append(adapter.logits(batch[i:i + batch_size])[:, explanation.target])
    values = torch.cat(values).cpu().numpy()
    k = steps + 1
    fractions = np.array(counts, dtype=float) / units.shape[0]
    return FlipCurves(fractions=fractions, morf=values[:k], lerf=values[k:])


def faithfulness(model, samples: Sequence, methods: Iterable[str] | None = None, steps: int = 10,
                 baseline="zero", progress: Progress | None = None,
                 **options) -> dict[str, dict]:
    """Mean MoRF/LeRF areas and ``delta_af = A_LeRF - A_MoRF`` per method (higher is better).

    ``options`` maps a method name to its options, e.g. ``smoothgrad={"n_samples": 8}``.
    """
    out: dict[str, dict] = {}
    for _, sample, name in each_sample(samples, methods, progress):
        e = explain(model, method=name, **sample, **options.get(name, {}))
        inputs = {k: v for k, v in sample.items() if k in ("input_ids", "pixel_values")}
        c = flip_curves(model, e, steps=steps, baseline=baseline, **inputs)
        row = out.setdefault(name, {"area_morf": [], "area_lerf": [], "delta": [], "morf": [], "lerf": []})
        row["area_morf"].append(c.area_morf)
        row["area_lerf"].append(c.area_lerf)
        row["delta"].append(c.delta)
        row["morf"].append(c.morf)
        row["lerf"].append(c.lerf)
    for row in out.values():
        row["mean_area_morf"] = float(np.mean(row["area_morf"]))
        row["mean_area_lerf"] = float(np.mean(row["area_lerf"]))
        row["delta_af"] = float(np.mean(row["delta"]))
        row["morf"] = np.mean(row["morf"], axis=0).tolist()
        row["lerf"] = np.mean(row["lerf"], axis=0).tolist()
    return out


# ------------------------------------------------------------------------------------------------
# How concentrated a relevance map is
# ------------------------------------------------------------------------------------------------
def concentration(sequence_relevance: torch.Tensor, explained: int) -> tuple[float | None, float | None]:
    """``(share of |R| off the explained position, effective number of positions)`` of ``sequence_relevance: (L,)``.

    The explained position is the one whose state the output is read from (the last token of a language model or
    classifier, the class token of a Vision Mamba): a map whose |R| sits there mostly checks the residual path, not
    the mixing. The effective number is ``(sum |R|)^2 / sum R^2`` (1 when one position holds everything, L when all
    hold the same |R|). Both None for an all-zero map."""
    r = sequence_relevance.reshape(-1).double().abs()
    total = float(r.sum())
    if total == 0.0:
        return None, None
    return 1.0 - float(r[explained]) / total, total ** 2 / float((r ** 2).sum())


# ------------------------------------------------------------------------------------------------
# Long-range view and ground truth
# ------------------------------------------------------------------------------------------------
def top_k_distances(relevance: torch.Tensor, k: int = 10) -> np.ndarray:
    """Distances from the end (0 = last token) of the ``k`` most relevant tokens of ``relevance: (L,)``."""
    rel = relevance.reshape(-1)
    top = torch.topk(rel, min(k, rel.shape[0])).indices
    return (rel.shape[0] - 1 - top).cpu().numpy()


def long_range(model, samples: Sequence, methods: Iterable[str] | None = None, k: int = 10,
               progress: Progress | None = None, **options) -> dict[str, np.ndarray]:
    """For next-token prediction: all distances from the end of each method's top-``k`` tokens."""
    out: dict[str, list] = {}
    for _, sample, name in each_sample(samples, methods, progress):
        e = explain(model, method=name, **sample, **options.get(name, {}))
        out.setdefault(name, []).append(top_k_distances(e.relevance, k))
    return {name: np.concatenate(v) for name, v in out.items()}


def key_token_hit_rate(model, records: Sequence, methods: Iterable[str] | None = None, k: int = 1,
                       progress: Progress | None = None, **options) -> dict[str, float]:
    """How often each method puts a known key token in its top-``k``.

    ``records`` have ``.tokens``, ``.label`` and ``.key_positions`` (``core.data.synthetic.key_token_task``);
    the explained target is the record's label.
    """
    hits: dict[str, list] = {}
    records = list(records)
    for i, sample, name in each_sample(records, methods, progress):
        e = explain(model, method=name, **sample, **options.get(name, {}))
        top = set(torch.topk(e.relevance.reshape(-1), min(k, e.relevance.numel())).indices.tolist())
        hits.setdefault(name, []).append(bool(top & set(records[i].key_positions)))
    return {name: float(np.mean(v)) for name, v in hits.items()}


# ------------------------------------------------------------------------------------------------
# Summaries of per-sample values (None when there are none)
# ------------------------------------------------------------------------------------------------
def mean(values) -> float | None:
    return float(np.mean(values)) if len(values) else None


def sem(values) -> float | None:
    """Standard error of the mean (ddof 1); None below two values."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


def median(values) -> float | None:
    return float(np.median(values)) if len(values) else None
