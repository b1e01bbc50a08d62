"""The committed run sets summarised over seeds: what the charts and the README quote, each with its spread and n.

- :func:`seed_runs`       every seed of one placement in one run set (seed 0 first)
- :func:`compare_table`   one row per run folder: final held-out loss / perplexity over its seeds, size, steps, status
- :func:`sweep_table`     final held-out perplexity vs Mix-LN alpha over seeds, 12 layers then 24
- :func:`seed_table`      final held-out loss / perplexity per placement: mean, std (ddof 1), min, max, n
- :func:`loss_bands`      held-out loss and perplexity curves per placement: mean, min, max over seeds per step
- :func:`lr_sweep_table`  final held-out loss per placement and peak learning rate (one seed)
- :func:`depth_profiles`  per-layer angular distance d(h_l, h_l+1), weight-gradient norm at the end of training and
                          loss increase when the layer is skipped, per placement and depth, over seeds

A seed that diverged has no final loss: it is counted in ``diverged`` and left out of the mean (so ``n`` is the
number of finished seeds). Everything reads the run folders; nothing is trained or evaluated here.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from core.errors import BadInputError
from core.stats import Comparison, welch
from core.mixln.folders import Run, list_runs, load_run, run_examples
from core.mixln.placements import placement_label
from core.mixln.recipe import ASSETS, LR_SWEEP, RECIPE, RECIPE_TRAIN, RUN_SETS, SWEEP, Job, recipe_label
from core.mixln.requests import RUN_SAMPLES, RUN_WINDOWS


def spread(values) -> dict:
    """{mean, std (ddof 1, 0 for a single value), min, max, n} of the finite values (None when there is none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "min": float(v.min()),
            "max": float(v.max()), "n": int(len(v))}


def mean_std_text(mean, std, n, nd: int = 3, seeds: bool = False) -> str:
    """``4.960 ± 0.007 (n = 3)``; a single value has no spread to show: ``4.946 (n = 1)`` (``seeds``: ``n = 3
    seeds``)."""
    if mean is None:
        return "no finished seed"
    unit = (" seeds" if n != 1 else " seed") if seeds else ""
    spread_part = f" ± {std:.{nd}f}" if n is not None and n > 1 and std is not None else ""
    return f"{mean:.{nd}f}{spread_part} (n = {n}{unit})"


def difference(a: dict, b: dict, prefix: str = "eval_loss") -> Comparison | None:
    """``a`` minus ``b`` over seeds (rows with ``<prefix>_per_seed``): Welch's comparison of the per-seed values
    (:func:`core.stats.welch`: difference, its standard error, t, Welch df, p and the exact permutation p). A side with
    one seed has no spread of its own and borrows none: the comparison is not resolved. None where a side has no
    finished seed."""
    va = [v for v in a.get(f"{prefix}_per_seed") or [] if v is not None and math.isfinite(v)]
    vb = [v for v in b.get(f"{prefix}_per_seed") or [] if v is not None and math.isfinite(v)]
    return welch(va, vb) if va and vb else None


def _check_set(set_name: str) -> None:
    if set_name not in RUN_SETS:
        raise BadInputError(f"unknown run set {set_name!r}.", fix=f"use one of: {', '.join(RUN_SETS)}.")


def seed_runs(name: str, set_name: str = "main", root: str | os.PathLike = ASSETS,
              lr: float | None = None) -> list[Run]:
    """The runs of placement ``name`` in ``set_name`` that exist under ``root``, one per seed (seed order)."""
    _check_set(set_name)
    lr = RECIPE_TRAIN["lr"] if lr is None else lr
    out = []
    for seed in RUN_SETS[set_name].seeds_of(name):
        folder = Path(root) / Job(set_name, name, seed, lr).relative_folder
        if (folder / "run.json").is_file() and (folder / "history.json").is_file():
            out.append(load_run(folder, root))
    return out


_label = recipe_label  # labels come from the placement registry


def seed_table(set_name: str = "main", root: str | os.PathLike = ASSETS) -> list[dict]:
    """One row per placement of the set: final held-out loss and perplexity over its seeds."""
    _check_set(set_name)
    rows = []
    for name in RUN_SETS[set_name].placements:
        group = seed_runs(name, set_name, root)
        if not group:
            continue
        loss = spread([r.meta.get("final_eval_loss") for r in group])
        ppl = spread([r.meta.get("final_eval_perplexity") for r in group])
        m = group[0].meta
        rows.append({"run": name, "label": _label(name), "norm": RECIPE[name]["norm"], "alpha": m["alpha"],
                     "layers": m["model"]["num_layers"], "width": m["model"]["hidden_size"],
                     "steps": m["train"]["steps"], "lr": m["train"]["lr"],
                     "seeds": [r.meta["train"]["seed"] for r in group],
                     "n": loss["n"], "diverged": sum(r.meta.get("status") == "diverged" for r in group),
                     "eval_loss_mean": loss["mean"], "eval_loss_std": loss["std"], "eval_loss_min": loss["min"],
                     "eval_loss_max": loss["max"], "eval_perplexity_mean": ppl["mean"],
                     "eval_perplexity_std": ppl["std"], "eval_perplexity_min": ppl["min"],
                     "eval_perplexity_max": ppl["max"],
                     "eval_loss_per_seed": [r.meta.get("final_eval_loss") for r in group],
                     "eval_perplexity_per_seed": [r.meta.get("final_eval_perplexity") for r in group]})
    return rows


def sweep_rows(root: str | os.PathLike = ASSETS, set_name: str = "main") -> list[dict]:
    """The alpha sweep of a run set: final held-out perplexity per alpha over seeds, sorted by alpha."""
    by_run = {r["run"]: r for r in seed_table(set_name, root)}
    rows = []
    for alpha, name in sorted(SWEEP.items()):
        if name in by_run:
            r = by_run[name]
            rows.append({**r, "set": set_name, "alpha": alpha,
                         "post_ln_layers": math.floor(alpha * r["layers"] + 1e-9)})
    return rows


def _curve_stats(histories: list[dict], key: str, field: str) -> dict:
    """Per step present in every history: mean / min / max over the histories of ``history[key][*][field]``."""
    series = [{r["step"]: r[field] for r in h.get(key, [])} for h in histories]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = [[s[t] for s in series] for t in steps]
    stats = [spread(v) for v in values]
    return {"steps": steps, "mean": [s["mean"] for s in stats], "min": [s["min"] for s in stats],
            "max": [s["max"] for s in stats], "std": [s["std"] for s in stats], "n": [s["n"] for s in stats]}


def loss_bands(names: list[str] | None = None, set_name: str = "main",
               root: str | os.PathLike = ASSETS) -> list[dict]:
    """Per placement: {run, label, norm, alpha, n, diverged, eval_loss, eval_perplexity, train_loss}, each curve
    a {steps, mean, min, max, std, n} dict over the seeds (steps every seed reached)."""
    _check_set(set_name)
    out = []
    for name in names or RUN_SETS[set_name].placements:
        group = seed_runs(name, set_name, root)
        if not group:
            continue
        hist = [r.history for r in group]
        out.append({"run": name, "label": _label(name), "norm": RECIPE[name]["norm"],
                    "alpha": RECIPE[name]["alpha"], "n": len(group),
                    "diverged": sum(h.get("status") == "diverged" for h in hist),
                    "eval_loss": _curve_stats(hist, "eval", "loss"),
                    "eval_perplexity": _curve_stats(hist, "eval", "perplexity"),
                    "train_loss": _curve_stats(hist, "train", "loss")})
    return out


def lr_sweep_table(root: str | os.PathLike = ASSETS) -> list[dict]:
    """One row per placement and peak learning rate (seed 0): status and final held-out loss / perplexity."""
    rows = []
    for name in RUN_SETS["lr-sweep"].placements:
        for lr in LR_SWEEP:
            set_name = "main" if lr == RECIPE_TRAIN["lr"] else "lr-sweep"
            group = [r for r in seed_runs(name, set_name, root, lr) if r.meta["train"]["seed"] == 0]
            if not group:
                continue
            m = group[0].meta
            rows.append({"run": name, "label": _label(name), "norm": RECIPE[name]["norm"], "alpha": m["alpha"], "lr": lr,
                         "status": m.get("status"), "diverged_at": group[0].history.get("diverged_at"),
                         "eval_loss": m.get("final_eval_loss"), "eval_perplexity": m.get("final_eval_perplexity")})
    return rows


def run_diagnostic(folder: Path, analysis: str) -> dict | None:
    """A run's precomputed ``analysis`` (its diagnostics.json) on the default windows of a run (RUN_SAMPLES spread
    over its held-out stream), or None: a seed whose weights were dropped before the diagnostics moved to those
    windows keeps only its old ones (the first 8 windows, all Wikipedia), which are not mixed in."""
    store = run_examples(folder)
    if store is None:
        return None
    return next((e["data"] for e in store.entries(analysis) if e["params"].get("corpus") == RUN_WINDOWS
                 and e["params"].get("samples") == RUN_SAMPLES), None)


def _per_layer(values: list[list[float | None]]) -> dict:
    stats = [spread(v) for v in zip(*values)] if values else []
    return {"mean": [s["mean"] for s in stats], "min": [s["min"] for s in stats], "max": [s["max"] for s in stats],
            "std": [s["std"] for s in stats], "n": min((s["n"] for s in stats), default=0)}


def depth_profiles(names: list[str] | None = None, sets: tuple[str, ...] = ("main", "depth-24"),
                   root: str | os.PathLike = ASSETS) -> list[dict]:
    """Per run set and placement: per-layer angular distance d(h_l, h_l+1) (last token, held-out windows),
    weight-gradient L2 norm at the last logged step, and held-out loss increase when the layer is skipped,
    each {mean, min, max, std, n} over the seeds."""
    out = []
    for set_name in sets:
        _check_set(set_name)
        for name in names or RUN_SETS[set_name].placements:
            if name not in RUN_SETS[set_name].placements:
                continue
            group = seed_runs(name, set_name, root)
            if not group:
                continue
            angular, removal, grads = [], [], []
            for r in group:
                ang = run_diagnostic(r.folder, "mixln/angular")
                rem = run_diagnostic(r.folder, "mixln/removal")
                if ang is not None:
                    angular.append(ang["raw"][0])
                if rem is not None:
                    removal.append(rem["loss_increase"])
                logs = r.history.get("grad_norms", [])
                if logs and r.meta.get("status") == "finished":
                    grads.append(logs[-1]["param"])
            layers = group[0].meta["model"]["num_layers"]
            out.append({"set": set_name, "run": name, "label": _label(name), "norm": RECIPE[name]["norm"],
                        "alpha": RECIPE[name]["alpha"], "layers": layers, "n": len(group),
                        "diverged": sum(r.meta.get("status") == "diverged" for r in group),
                        "grad_step": (group[0].history.get("grad_norms") or [{}])[-1].get("step"),
                        "angular": _per_layer(angular), "grad_norm": _per_layer(grads),
                        "removal": _per_layer(removal)})
    return out


def compare_table(runs: list[str] | None = None, root=ASSETS) -> list[dict]:
    """One row per run folder of ``root`` (committed runs by default): norm placement, alpha, size, steps, the
    final held-out loss and perplexity over its seeds (mean, std with ddof 1, min, max; ``n_seeds`` finished
    seeds, ``diverged`` seeds that diverged; a run without seed folders is its own single seed), wall time."""
    rows = []
    for name in runs or list_runs(root):
        r = load_run(name, root)
        m = r.meta
        group = seed_runs(name, "main", root) if name in RECIPE and r.folder.parent == Path(root) else [r]
        loss = spread([g.meta.get("final_eval_loss") for g in group])
        ppl = spread([g.meta.get("final_eval_perplexity") for g in group])
        rows.append({"run": name, "norm": placement_label(r.placement), "placement": r.placement, "alpha": m["alpha"],
                     "layers": m["model"]["num_layers"], "width": m["model"]["hidden_size"],
                     "steps": m.get("steps_done"), "lr": m["train"]["lr"], "status": m.get("status"),
                     "n_seeds": loss["n"], "diverged": sum(g.meta.get("status") == "diverged" for g in group),
                     "eval_loss_mean": _round(loss["mean"], 4), "eval_loss_std": _round(loss["std"], 4),
                     "eval_loss_min": _round(loss["min"], 4), "eval_loss_max": _round(loss["max"], 4),
                     "eval_perplexity_mean": _round(ppl["mean"], 2), "eval_perplexity_std": _round(ppl["std"], 2),
                     "eval_perplexity_min": _round(ppl["min"], 2), "eval_perplexity_max": _round(ppl["max"], 2),
                     "eval_loss_per_seed": [g.meta.get("final_eval_loss") for g in group],
                     "wall_s": m.get("wall_seconds"), "label": r.label})
    return rows


def sweep_table(root=ASSETS, runs: list[str] | None = None, sets: tuple[str, ...] = ("main", "depth-24")) -> list[dict]:
    """Final held-out perplexity vs alpha over seeds (:func:`sweep_rows`), 12 layers then 24,
    each sorted by alpha; ``runs`` keeps only those placements."""
    rows = [r for s in sets for r in sweep_rows(root, s)]
    return [r for r in rows if runs is None or r["run"] in runs]


def _round(x, nd):
    return None if x is None or not math.isfinite(x) else round(x, nd)
