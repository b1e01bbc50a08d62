"""core.stats: known answers, agreement with scipy's own tests, the exact permutation p by hand, the verdict rule."""
import math

import numpy as np
import pytest
from scipy import stats as st

from core.stats import RULE, WORDS, paired, permutation_p, welch, word


def test_welch_known_answer_and_scipy():
    c = welch([1, 2, 3], [4, 5, 6])
    assert c.delta == -3 and c.se == pytest.approx(math.sqrt(2 / 3)) and c.df == pytest.approx(4.0)
    ref = st.ttest_ind([1, 2, 3], [4, 5, 6], equal_var=False)
    assert c.t == pytest.approx(ref.statistic) and c.p == pytest.approx(ref.pvalue)
    # fully separated 3 vs 3: the exact permutation p is 2 of 20 relabellings, never below 0.10
    assert c.p_exact == pytest.approx(0.10)
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 7), rng.normal(0.5, 2, 5)
    c, ref = welch(a, b), st.ttest_ind(a, b, equal_var=False)
    assert c.t == pytest.approx(ref.statistic) and c.p == pytest.approx(ref.pvalue) and c.df == pytest.approx(ref.df)


def test_permutation_by_hand():
    # 2 vs 2: [0, 1] against [10, 11]: of the 6 splits only the observed one and its mirror are this extreme
    assert permutation_p([0, 1], [10, 11]) == pytest.approx(2 / 6)
    # sign flips of three positive differences: all + and all - are the extremes of 8
    assert permutation_p([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    assert permutation_p(list(range(30)), list(range(30))) is None  # too many to enumerate


def test_paired_matches_scipy_and_needs_same_inputs():
    rng = np.random.default_rng(1)
    a = rng.normal(size=40)
    b = a - 0.1 + rng.normal(scale=0.2, size=40)
    c, ref = paired(a, b), st.ttest_rel(a, b)
    assert c.t == pytest.approx(ref.statistic) and c.p == pytest.approx(ref.pvalue) and c.df == 39
    assert c.delta == pytest.approx(float(np.mean(a - b))) and c.p_exact is None
    with pytest.raises(ValueError):
        paired([1, 2, 3], [1, 2])


def test_one_value_is_not_resolved_and_borrows_nothing():
    c = welch([4.9], [4.8, 4.9, 5.0])
    assert not c.resolved and c.se is None and c.p is None and "not resolved" in c.text()
    assert word(c, "lower") == "not resolved"


def test_rule():
    strong = welch([1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9, 2.05])  # a far below b, 4 a side
    assert strong.p < 0.05
    assert word(strong, "lower") == "reproduced" and word(strong, "higher") == "opposite"
    assert word(strong, "tied") == "not reproduced" and word(strong, "lower", one_model=True) == "one model"
    # significant with 2 a side is at most suggestive (the rule wants 3 seeds a side)
    two = welch([1.0, 1.01], [2.0, 2.01])
    assert two.p < 0.05 and word(two, "lower") == "suggestive" and word(two, "higher") == "suggestive, opposite"
    # the committed runs at embedding std 0.02, seeds 0-2 (Mix-LN 0.25 against Pre-LN): -0.040 +- 0.014, t -2.97,
    # Welch df 2.1, p 0.093: suggestive, not reproduced
    mix = welch([4.8804, 4.8783, 4.8742], [4.9402, 4.8936, 4.9203])
    assert mix.delta == pytest.approx(-0.0404, abs=1e-4) and mix.df == pytest.approx(2.1, abs=0.05)
    assert mix.p == pytest.approx(0.093, abs=0.002) and word(mix, "lower") == "suggestive"
    tie = welch([1.0, 1.2, 0.9], [1.05, 1.1, 0.95])
    assert word(tie, "tied") == "consistent" and word(tie, "lower") == "not reproduced"
    assert set(WORDS) == {w for w, _ in RULE} and len(WORDS) == 9
    # a difference in the claimed direction below the size the claim states: "too small", whatever its p; against
    # the claim the size changes nothing
    assert word(strong, "lower", too_small=True) == "too small" and word(strong, "higher", too_small=True) == "opposite"
    assert word(tie, "lower", too_small=True) == "not reproduced"
    with pytest.raises(ValueError):
        word(tie, "down")


def test_text():
    c = welch([1, 2, 3], [4, 5, 6])
    assert c.text(2) == "-3.00 ± 0.82 (t = -3.67, df 4.0, p = 0.021; exact p = 0.10)"
