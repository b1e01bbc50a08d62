"""Comparisons with their evidence, and the words a verdict may use: written once, used by every paper's verdicts.

A comparison is the difference of two means with its standard error, t, degrees of freedom and two-sided p, and at
small n the exact permutation p beside it:

- :func:`welch`           two independent samples (e.g. seeds of two placements): Welch's t and Welch-Satterthwaite df
- :func:`paired`          the same inputs under two conditions (e.g. two explainers on the same sentences)
- :func:`permutation_p`   exact two-sided permutation p (every relabelling for independent samples, every sign flip
  for paired ones); None where there are too many to enumerate
- :func:`word`            the verdict word the evidence allows (:data:`RULE`)

Nothing here knows a paper; a paper's claims call these and print :meth:`Comparison.text`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

# The rule a verdict word follows (docs/statistics.md prints it):
RULE = (
    ("not resolved", "a side has fewer than two values, or its spread is borrowed from the other side"),
    ("one model", "a mechanism measured on one trained model (spread over inputs of that model only)"),
    ("reproduced", "p < 0.05, at least 3 values a side, in the claimed direction"),
    ("opposite", "p < 0.05, at least 3 values a side, against the claimed direction"),
    ("too small", "in the claimed direction at p < 0.10 or |t| > 2, but smaller than the size the claim states "
                  "(a claim of a many-fold effect, e.g. layers that are idle or gradients that vanish, met by a few per "
                  "cent)"),
    ("suggestive", "p < 0.10 or |t| > 2 without the above, in the claimed direction"),
    ("suggestive, opposite", "p < 0.10 or |t| > 2 without the above, against the claimed direction"),
    ("not reproduced", "a claimed difference not found (neither of the above)"),
    ("consistent", "a claimed tie: no difference found (p >= 0.10); absence of evidence, not proof of equality"),
)
WORDS = tuple(w for w, _ in RULE)
ALPHA, SUGGESTIVE_ALPHA, MIN_N = 0.05, 0.10, 3
_MAX_ENUMERATION = 200_000


@dataclass(frozen=True)
class Comparison:
    """``a`` minus ``b``: ``delta`` (difference of means, or mean of paired differences), its standard error, t,
    degrees of freedom, two-sided p from t (None where it cannot be computed), the exact permutation p where it
    could be enumerated, the sizes, and the kind of test (``"welch"`` / ``"paired"``)."""

    delta: float
    se: float | None
    t: float | None
    df: float | None
    p: float | None
    n_a: int
    n_b: int
    test: str
    p_exact: float | None = None

    @property
    def resolved(self) -> bool:
        """Whether both sides have a spread of their own (two or more values each)."""
        return self.p is not None

    def text(self, nd: int = 3, unit: str = "") -> str:
        """``-0.040 ± 0.014 (t = -2.97, df 2.1, p = 0.097; exact p = 0.10)``, or ``+0.05 (n 1 vs 3: not resolved)``
        (a paired comparison of one input: ``(n 1: not resolved)``); ``unit`` follows the numbers (``nats``)."""
        unit = f" {unit}" if unit else ""
        head = f"{self.delta:+.{nd}f}"
        if not self.resolved:
            n = f"n {self.n_a}" if self.test == "paired" else f"n {self.n_a} vs {self.n_b}"
            return f"{head}{unit} ({n}: not resolved)"
        ex = f"; exact p = {_p(self.p_exact)}" if self.p_exact is not None else ""
        return f"{head} ± {self.se:.{nd}f}{unit} (t = {self.t:.2f}, df {self.df:.1f}, p = {_p(self.p)}{ex})"

    def as_dict(self) -> dict:
        return {"delta": self.delta, "se": self.se, "t": self.t, "df": self.df, "p": self.p, "p_exact": self.p_exact,
                "n_a": self.n_a, "n_b": self.n_b, "test": self.test}


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def _values(x) -> np.ndarray:
    v = np.asarray(list(x), dtype=np.float64).reshape(-1)
    return v[np.isfinite(v)]


def welch(a, b, exact: bool = True) -> Comparison:
    """Mean of ``a`` minus mean of ``b`` (independent samples): se = sqrt(s_a^2/n_a + s_b^2/n_b), Welch's t, the
    Welch-Satterthwaite df and the two-sided p of Student's t at that df. A side with one value leaves se, t, df and
    p None (no spread of its own: nothing is borrowed). ``exact``: the permutation p as well, where enumerable."""
    a, b = _values(a), _values(b)
    if not len(a) or not len(b):
        raise ValueError("welch: each side needs at least one value")
    delta = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return Comparison(delta, None, None, None, None, len(a), len(b), "welch")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        t, df, p = (0.0 if delta == 0 else math.copysign(math.inf, delta)), float(len(a) + len(b) - 2), \
            (1.0 if delta == 0 else 0.0)
    else:
        t = delta / se
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2
        p = float(2 * _st.t.sf(abs(t), df))
    return Comparison(delta, se, float(t), float(df), p, len(a), len(b), "welch",
                      permutation_p(a, b) if exact else None)


def paired(a, b, exact: bool = True) -> Comparison:
    """Mean over inputs of ``a[i] - b[i]`` (the same inputs under two conditions): se of the differences' mean,
    t, df = n - 1, two-sided p; the exact sign-flip p as well where enumerable."""
    a, b = np.asarray(list(a), dtype=np.float64), np.asarray(list(b), dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired: {a.shape} against {b.shape}: the same inputs are needed on both sides")
    d = a - b
    d = d[np.isfinite(d)]
    if not len(d):
        raise ValueError("paired: no finite differences")
    delta = float(d.mean())
    if len(d) < 2:
        return Comparison(delta, None, None, None, None, 1, 1, "paired")
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    df = float(len(d) - 1)
    if se == 0.0:
        t, p = (0.0 if delta == 0 else math.copysign(math.inf, delta)), (1.0 if delta == 0 else 0.0)
    else:
        t = delta / se
        p = float(2 * _st.t.sf(abs(t), df))
    return Comparison(delta, se, float(t), df, p, len(d), len(d), "paired",
                      permutation_p(d, None) if exact else None)


def permutation_p(a, b=None) -> float | None:
    """Exact two-sided permutation p of the difference of means: with ``b``, over every relabelling of the pooled
    values into groups of the same sizes; without, ``a`` holds paired differences and the p is over every sign
    flip. The share of arrangements at least as extreme as the observed one (the observed one included), so it
    never goes below 1 / (number of arrangements): 0.10 for 3 against 3. None where there are more than
    200,000 arrangements (use the t-test's p)."""
    a = _values(a)
    if b is None:
        n = len(a)
        if n == 0 or 2 ** n > _MAX_ENUMERATION:
            return None
        obs = abs(a.sum())
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        sums = np.abs(signs @ a)
        return float(np.mean(sums >= obs - 1e-12 * max(1.0, obs)))
    b = _values(b)
    pooled, na = np.concatenate([a, b]), len(a)
    if math.comb(len(pooled), na) > _MAX_ENUMERATION or not na or not len(b):
        return None
    obs = abs(a.mean() - b.mean())
    total, count, extreme = pooled.sum(), 0, 0
    for idx in itertools.combinations(range(len(pooled)), na):
        sa = pooled[list(idx)].sum()
        diff = abs(sa / na - (total - sa) / len(b))
        count += 1
        extreme += diff >= obs - 1e-12 * max(1.0, obs)
    return extreme / count


def word(c: Comparison, expected: str, one_model: bool = False, too_small: bool = False) -> str:
    """The verdict word the evidence allows (:data:`RULE`): ``expected`` is the claim's direction for ``a - b``,
    ``"lower"``, ``"higher"`` or ``"tied"``; ``one_model`` marks a mechanism measured on one trained model;
    ``too_small``: the difference is below the size the claim states (the caller's threshold, e.g. a mechanism's
    25 % of the compared value), which turns a difference in the claimed direction into "too small"."""
    if expected not in ("lower", "higher", "tied"):
        raise ValueError(f"expected must be lower, higher or tied, not {expected!r}")
    if one_model:
        return "one model"
    if not c.resolved:
        return "not resolved"
    significant = c.p < ALPHA and min(c.n_a, c.n_b) >= MIN_N
    hint = c.p < SUGGESTIVE_ALPHA or abs(c.t) > 2
    observed = "lower" if c.delta < 0 else "higher"
    if expected == "tied":
        return "not reproduced" if significant else "consistent" if not hint else "suggestive, opposite"
    if too_small and (significant or hint) and observed == expected:
        return "too small"
    if significant:
        return "reproduced" if observed == expected else "opposite"
    if hint:
        return "suggestive" if observed == expected else "suggestive, opposite"
    return "not reproduced"
