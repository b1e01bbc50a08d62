"""Method comparisons of a faithfulness evaluation, paired over the same inputs, with the verdict word of
:func:`core.stats.word` and its p: one place for the tab's status, its table, the CLI and the generated docs.

The claim checked is the MambaLRP paper's (its Tables 2 and 3): MambaLRP is more faithful than each other method,
and than each ablated variant (LRP with the LN-rule only). Every comparison is MambaLRP minus the other method, per
input, on the inputs both were scored on (:func:`core.stats.paired`: mean difference, its standard error, t, df =
n - 1, p); the word follows :data:`core.stats.RULE` with the claimed direction "higher". The evidence is one
trained model per row: the spread is over that model's inputs, not over models.

    against({method: per-input values}) -> {method: Comparison}   MambaLRP minus each other method
    paired_against(res, metric)  -> the same for a metric of an evaluation result
    comparison_rows(res)         -> one row per method and metric (the table)
    headline(res)                -> the status sentence
"""
from __future__ import annotations

import math

from core.stats import Comparison, paired, word

REFERENCE = "mambalrp"
CLAIM = "higher"  # the paper's direction for MambaLRP minus any other method
METRICS = {  # name -> (label, per-input key, mean key, standard-error key) in an evaluation's faithfulness[method]
    "delta_af": ("ΔA^F", "delta", "delta_af", "delta_af_sem"),
    "pi_soft_nc": ("π-Soft-NC", "pi_soft_nc_per_input", "pi_soft_nc", "pi_soft_nc_sem"),
    "pi_soft_ns": ("π-Soft-NS", "pi_soft_ns_per_input", "pi_soft_ns", "pi_soft_ns_sem"),
}


def metrics_of(res: dict) -> list[str]:
    """The metrics an evaluation result holds (ΔA^F always; the equal-retention pair when it was scored)."""
    faith = res.get("faithfulness") or {}
    first = next(iter(faith.values()), {})
    return [m for m, (_, key, _, _) in METRICS.items() if key in first]


def _values(row: dict, metric: str) -> list[float]:
    return [math.nan if v is None else float(v) for v in row[METRICS[metric][1]]]


def against(per_input: dict[str, list], reference: str = REFERENCE, exact: bool = False) -> dict[str, Comparison]:
    """``reference`` minus each other method, paired over the inputs: ``per_input`` maps a method to its values in
    input order (None or NaN where an input has no value: left out for both); ``exact``: the sign-flip permutation p
    as well (small n, e.g. seeds)."""
    if reference not in per_input:
        return {}
    ref = [math.nan if v is None else float(v) for v in per_input[reference]]
    out = {}
    for m, values in per_input.items():
        if m == reference:
            continue
        try:
            out[m] = paired(ref, [math.nan if v is None else float(v) for v in values], exact=exact)
        except ValueError:  # no input scored by both
            continue
    return out


def paired_against(res: dict, metric: str = "delta_af", reference: str = REFERENCE) -> dict[str, Comparison]:
    """``reference`` minus each other method on ``metric`` of an evaluation result, paired over the inputs (those
    without a score, e.g. no normalised retention score, are left out for both)."""
    faith = res.get("faithfulness") or {}
    return against({m: _values(row, metric) for m, row in faith.items()}, reference)


def verdict(c: Comparison) -> str:
    """The word for "MambaLRP is more faithful" on this comparison, with its p: ``reproduced (p = 1e-64)``."""
    w = word(c, CLAIM)
    return w if c.p is None else f"{w} (p = {p_text(c.p)})"


def p_text(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def mean_text(row: dict, metric: str, nd: int = 3) -> str:
    _, _, mean_key, sem_key = METRICS[metric]
    if row.get(mean_key) is None:
        return "-"
    sem = row.get(sem_key)
    return f"{row[mean_key]:.{nd}f}" + (f" ± {sem:.{nd}f}" if sem is not None else "")


def comparison_rows(res: dict, labels: dict | None = None) -> list[dict]:
    """One row per method (in the result's order): per metric its mean ± standard error, MambaLRP minus it (paired:
    difference ± se, t, df, p) and the verdict word with its p. MambaLRP's own row leaves the comparison empty."""
    faith = res.get("faithfulness") or {}
    labels = labels or res.get("labels") or {}
    metrics = metrics_of(res)
    comparisons = {metric: paired_against(res, metric) for metric in metrics}
    rows = []
    for m in res["methods"]:
        if m not in faith:
            continue
        row = {"method": labels.get(m, m)}
        for metric in metrics:
            label = METRICS[metric][0]
            row[label] = mean_text(faith[m], metric)
            c = comparisons[metric].get(m)
            row[f"MambaLRP − it, {label}"] = c.text() if c is not None else ""
            row[f"{label}: MambaLRP more faithful?"] = verdict(c) if c is not None else ""
        rows.append(row)
    return rows


def headline(res: dict, labels: dict | None = None) -> str:
    """The status sentence: the highest ΔA^F, then the paper's claim checked against every other method, paired
    (how many comparisons are "reproduced", and each one that is not, with its difference and p); the same for
    π-Soft-NC / NS when the result has them."""
    faith = res.get("faithfulness") or {}
    labels = labels or res.get("labels") or {}
    scored = [m for m in faith if faith[m].get("delta_af") is not None]
    if not scored:
        return ""
    best = max(scored, key=lambda m: faith[m]["delta_af"])
    parts = [f"Highest ΔA^F (± standard error over inputs): **{labels.get(best, best)}** "
             f"({mean_text(faith[best], 'delta_af')})."]
    for metric in metrics_of(res):
        comparisons = paired_against(res, metric)
        if not comparisons:
            continue
        label, n = METRICS[metric][0], next(iter(comparisons.values())).n_a
        words = {m: word(c, CLAIM) for m, c in comparisons.items()}
        held = [m for m, w in words.items() if w == "reproduced"]
        others = [f"{labels.get(m, m)} {c.text()}: **{words[m]}**" for m, c in comparisons.items() if m not in held]
        head = (f"{label}, MambaLRP minus each method paired over the same inputs (n = {n}): ahead of "
                f"{len(held)} of {len(comparisons)} at p < 0.05")
        parts.append(head + (f"; {'; '.join(others)}." if others else "."))
    return " ".join(parts)
