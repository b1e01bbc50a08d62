"""Analyses of identified parameter sets, as plain data (lists of dict rows) for tables, plots and JSON.

- :func:`layer_distribution`: count and share of selected parameters per layer and module type;
- :func:`intervention_effects`: metrics before/after pruning (or scaling) each method's set;
- :func:`proportion_sweep`: selected count (and metrics) as K varies, statistics collected once;
- :func:`scale_factor_sweep`: metrics as the scale factor varies;
- :func:`consistency`: overlap of sets identified from random subsets of 1..N samples, per K;
- :func:`drill_down`: one weight matrix's mask, downsampled for a heatmap.

``evaluate`` arguments are functions ``model -> {metric: float}`` (see
:func:`core.mathneuro.evaluation.evaluator`). Interventions inside the sweeps are applied to a private
view (:func:`core.mathneuro.interventions.intervened`); ``model`` is never written.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError
from core.mathneuro.interventions import intervened, resolve_factor
from core.mathneuro.methods import (Masks, Statistics, collect, get_method, mathneuro_matrix, random_matrix,
                                    select, wanda_matrix)
from core.mathneuro.scoring import check_factor, check_proportion, collect_column_norms, scored_linears
from core.progress import Progress, item_progress, scaled
from core.zoo.placement import compute_device, weight_of

Evaluate = Callable[[nn.Module], dict[str, float]]

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


def module_kind(name: str) -> tuple[int | None, str, str]:
    """(layer index or None, module type, group) of a parameter name.

    >>> module_kind("model.layers.3.self_attn.q_proj.weight")
    (3, 'q_proj', 'attention')
    """
    match = _LAYER.search(name)
    layer = int(match.group(1)) if match else None
    parts = name.split(".")
    module = parts[-2] if len(parts) >= 2 else parts[-1]
    group = "attention" if module in ATTENTION else "mlp" if module in MLP else \
        "head" if module in ("lm_head", "head") else "other"
    return layer, module, group


def selection_summary(masks: Masks) -> dict:
    """Totals and per-matrix counts: {"selected", "total", "share", "matrices": [{name, selected, total, share}]}."""
    rows = []
    for name, mask in masks.items():
        sel, tot = int(mask.sum()), mask.numel()
        rows.append({"name": name, "selected": sel, "total": tot, "share": sel / tot if tot else 0.0})
    selected, total = sum(r["selected"] for r in rows), sum(r["total"] for r in rows)
    return {"selected": selected, "total": total, "share": selected / total if total else 0.0, "matrices": rows}


def overlap(a: Masks, b: Masks) -> dict:
    """Sizes of two sets over the names they share, their intersection, union and Jaccard index."""
    inter = union = size_a = size_b = 0
    for name in a.keys() & b.keys():
        ma, mb = a[name], b[name].to(a[name].device)
        inter += int((ma & mb).sum())
        union += int((ma | mb).sum())
        size_a += int(ma.sum())
        size_b += int(mb.sum())
    return {"a": size_a, "b": size_b, "intersection": inter, "union": union,
            "jaccard": inter / union if union else 1.0}


def layer_distribution(masks: Masks) -> list[dict]:
    """Selected parameters per (layer, module type), in name order.

    Returns
    -------
    rows {"layer": int | None, "module": e.g. "q_proj", "group": attention|mlp|head|other,
          "selected": int, "total": int, "share": selected / total,
          "share_of_selected": selected / all selected}
    """
    cells: dict[tuple, list[int]] = {}
    for name, mask in masks.items():
        key = module_kind(name)
        cell = cells.setdefault(key, [0, 0])
        cell[0] += int(mask.sum())
        cell[1] += mask.numel()
    all_selected = sum(c[0] for c in cells.values())
    rows = [{"layer": layer, "module": module, "group": group, "selected": sel, "total": tot,
             "share": sel / tot if tot else 0.0, "share_of_selected": sel / all_selected if all_selected else 0.0}
            for (layer, module, group), (sel, tot) in cells.items()]
    order = {m: i for i, m in enumerate(ATTENTION + MLP)}
    rows.sort(key=lambda r: (r["layer"] is None, r["layer"] or 0, order.get(r["module"], 99), r["module"]))
    return rows


def intervention_effects(model: nn.Module, masks_by_method: dict[str, Masks], evaluate: Evaluate,
                         mode: str = "prune", factor: float | None = None,
                         progress: Progress | None = None) -> list[dict]:
    """Each metric before and after intervening on each method's set (points for the pruning-effect plot).

    Returns
    -------
    rows {"method", "metric", "before", "after", "change": after - before, "selected"}
    """
    resolve_factor(mode, factor)
    before = evaluate(model)
    rows, step = [], item_progress(progress, "interventions")
    for i, (method, masks) in enumerate(masks_by_method.items()):
        with intervened(model, masks, mode, factor) as view:
            after = evaluate(view)
        selected = selection_summary(masks)["selected"]
        for metric, value in before.items():
            rows.append({"method": method, "metric": metric, "before": value, "after": after[metric],
                         "change": after[metric] - value, "selected": selected})
        if step is not None:
            step(i + 1, len(masks_by_method))
    return rows


def _check_values(values, what: str, check) -> list[float]:
    values = list(values) if values is not None else []
    if not values:
        raise BadInputError(f"Give at least one {what}.")
    return [check(v, f"Each {what}") for v in values]


def proportion_sweep(model: nn.Module, math_inputs: Iterable[torch.Tensor], nonmath_inputs: Iterable[torch.Tensor],
                     proportions: Sequence[float], *, method: str = "mathneuro", seed: int = 0,
                     evaluate: Evaluate | None = None, mode: str = "prune", factor: float | None = None,
                     statistics: Statistics | None = None, max_length: int | None = None,
                     progress: Progress | None = None) -> list[dict]:
    """Size of the identified set (and metrics after the intervention) for each K.

    The forward passes run once (or not at all when ``statistics`` is given): the first half of ``progress``, the
    proportions the second.

    Returns
    -------
    rows {"proportion", "selected", "total", "share", **metrics}
    """
    proportions = _check_values(proportions, "proportion", check_proportion)
    resolve_factor(mode, factor)
    if statistics is None:
        statistics = collect(model, math_inputs, nonmath_inputs, method, max_length=max_length,
                             progress=scaled(progress, 0.0, 0.5))
    rows, step = [], item_progress(progress, "proportions", 0.5, 1.0)
    for i, k in enumerate(proportions):
        masks = select(model, statistics, k, method, seed)
        summary = selection_summary(masks)
        row = {"proportion": k, "selected": summary["selected"], "total": summary["total"], "share": summary["share"]}
        if evaluate is not None:
            with intervened(model, masks, mode, factor) as view:
                row.update(evaluate(view))
        rows.append(row)
        if step is not None:
            step(i + 1, len(proportions))
    return rows


def scale_factor_sweep(model: nn.Module, masks: Masks, factors: Sequence[float], evaluate: Evaluate,
                       progress: Progress | None = None) -> list[dict]:
    """Metrics with the selected parameters scaled by each factor (factor 1.0 is the unmodified model).

    Returns
    -------
    rows {"factor", **metrics}
    """
    factors = _check_values(factors, "scale factor", check_factor)
    rows, step = [], item_progress(progress, "scale factors")
    for i, f in enumerate(factors):
        with intervened(model, masks, "scale", f) as view:
            rows.append({"factor": f, **evaluate(view)})
        if step is not None:
            step(i + 1, len(factors))
    return rows


def consistency(model: nn.Module, math_inputs: Iterable[torch.Tensor], nonmath_inputs: Iterable[torch.Tensor],
                sample_counts: Sequence[int] | None = None, proportions: Sequence[float] = (0.01, 0.05, 0.1),
                *, repeats: int = 3, seed: int = 0, method: str = "mathneuro", max_length: int | None = None,
                progress: Progress | None = None) -> list[dict]:
    """How stable the identified set is when it is found from fewer samples.

    For each sample count n and proportion K, ``repeats`` random subsets of n math and n non-math
    samples (seeded, without replacement) give sets A_r, compared with the set F found from all
    samples. Per-sample column norms are kept, (N, d_in) per matrix; the forward passes run once and
    masks are formed one matrix at a time.

    Parameters
    ----------
    sample_counts : counts in [1, N] (N = the smaller dataset); default 1, 2, 4, ... and N
    method : "mathneuro", "wanda" or "random"

    Returns
    -------
    rows {"samples", "proportion", "overlap_with_full": mean |A ∩ F| / |F|,
          "jaccard_with_full": mean Jaccard(A, F), "pairwise_jaccard": mean Jaccard(A_r, A_s) over pairs,
          "selected": mean |A|, "selected_full": |F|}
    """
    if method not in ("mathneuro", "wanda", "random"):
        get_method(method)
        raise BadInputError(f"Consistency is measured for mathneuro, wanda and random, not {method!r}.")
    proportions = _check_values(proportions, "proportion", check_proportion)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise BadInputError(f"repeats must be a positive integer, got {repeats!r}.")
    math_n = collect_column_norms(model, math_inputs, what="math", max_length=max_length, per_sample=True,
                                  progress=scaled(progress, 0.0, 0.25))
    non_n = collect_column_norms(model, nonmath_inputs, what="non-math", max_length=max_length, per_sample=True,
                                 progress=scaled(progress, 0.25, 0.5))
    n_max = min(math_n.samples, non_n.samples)
    if sample_counts is None:
        sample_counts = sorted({min(2**i, n_max) for i in range(n_max.bit_length())} | {n_max})
    counts = list(sample_counts)
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= n_max for c in counts):
        raise BadInputError(f"Sample counts must be integers in [1, {n_max}], got {counts!r}.")

    gen = torch.Generator().manual_seed(int(seed))
    subsets = {(n, r): (torch.randperm(math_n.samples, generator=gen)[:n],
                        torch.randperm(non_n.samples, generator=gen)[:n])
               for n in counts for r in range(repeats)}
    # running sums per (n, K): [|A∩F|, |A∪F|, |F|, |A|, pairwise inter, pairwise union]
    acc = {(n, k): [0] * 6 for n in counts for k in proportions}

    def matrix_mask(weight, m_sum, n_sum, k, name):
        if method == "wanda":
            return wanda_matrix(weight, m_sum, k)
        sel = mathneuro_matrix(weight, m_sum, n_sum, k)
        return sel if method == "mathneuro" else random_matrix(weight.shape, int(sel.sum()), seed, name, weight.device)

    linears, step = scored_linears(model), item_progress(progress, "matrices", 0.5, 1.0)
    for j, (name, layer) in enumerate(linears.items()):
        w, m_all, n_all = weight_of(layer).to(compute_device(layer)), math_n.sums[name], non_n.sums[name]
        for k in proportions:
            full = matrix_mask(w, m_all.sum(0), n_all.sum(0), k, name)
            full_count = int(full.sum())
            for n in counts:
                sets = []
                for r in range(repeats):
                    mi, ni = subsets[(n, r)]
                    sub = matrix_mask(w, m_all[mi.to(m_all.device)].sum(0), n_all[ni.to(n_all.device)].sum(0), k,
                                      f"{name}#{r}" if method == "random" else name)
                    a = acc[(n, k)]
                    a[0] += int((sub & full).sum())
                    a[1] += int((sub | full).sum())
                    a[2] += full_count
                    a[3] += int(sub.sum())
                    for prev in sets:
                        a[4] += int((sub & prev).sum())
                        a[5] += int((sub | prev).sum())
                    sets.append(sub)
        if step is not None:
            step(j + 1, len(linears))

    rows = []
    for n in counts:
        for k in proportions:
            inter, union, full_total, sel_total, p_inter, p_union = acc[(n, k)]
            full_size = full_total // repeats
            rows.append({"samples": n, "proportion": k,
                         "overlap_with_full": inter / full_total if full_total else 1.0,
                         "jaccard_with_full": inter / union if union else 1.0,
                         "pairwise_jaccard": (p_inter / p_union if p_union else 1.0) if repeats > 1 else math.nan,
                         "selected": sel_total / repeats, "selected_full": full_size})
    return rows


def drill_down(masks: Masks, name: str, max_cells: int = 64) -> dict:
    """One weight matrix's mask, downsampled for a heatmap.

    Parameters
    ----------
    masks : identified masks
    name : parameter name
    max_cells : at most this many cells per side (adaptive average pooling)

    Returns
    -------
    {"name", "shape": [d_out, d_in], "selected", "total", "share",
     "grid": (rows x cols) list of lists, each cell the share of selected entries in its block,
     "row_edges": [0, ..., d_out], "col_edges": [0, ..., d_in]} (cell i spans edges[i]..edges[i+1];
     adaptive pooling may make neighbouring cells overlap by one entry when sizes do not divide).
    """
    if name not in masks:
        raise BadInputError(f"No mask for {name!r}.", fix="Pick one of the identified matrices.")
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise BadInputError(f"max_cells must be a positive integer, got {max_cells!r}.")
    mask = masks[name]
    mat = mask.reshape(mask.shape[0], -1) if mask.dim() >= 2 else mask.reshape(1, -1)
    rows, cols = mat.shape
    out = (min(rows, max_cells), min(cols, max_cells))
    grid = F.adaptive_avg_pool2d(mat.float().cpu()[None, None], out)[0, 0]

    def edges(size: int, cells: int) -> list[int]:
        return [(i * size) // cells for i in range(cells)] + [size]

    selected = int(mask.sum())
    return {"name": name, "shape": list(mat.shape), "selected": selected, "total": mask.numel(),
            "share": selected / mask.numel() if mask.numel() else 0.0, "grid": grid.tolist(),
            "row_edges": edges(rows, out[0]), "col_edges": edges(cols, out[1])}
