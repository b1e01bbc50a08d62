"""The evaluation's method comparisons are paired over the same inputs (core.stats.paired) and their verdict words
follow core.stats.word's rule with the paper's direction (MambaLRP more faithful), each with its p."""
import numpy as np

from core.lrp import verdicts
from core.stats import paired, word


def _res(**per_input):
    faith = {m: {"delta": list(v), "delta_af": float(np.mean(v)),
                 "delta_af_sem": float(np.std(v, ddof=1) / np.sqrt(len(v)))} for m, v in per_input.items()}
    return {"methods": list(per_input), "labels": {m: m for m in per_input}, "faithfulness": faith,
            "n_done": len(next(iter(per_input.values())))}


def test_a_paired_difference_is_judged_where_independent_errors_would_call_a_tie():
    """Two methods 0.01 apart with per-input spreads of 0.1 overlap by their standard errors, but on the same
    inputs MambaLRP is ahead on each one: paired, the difference is clear (t ~ 12)."""
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.1, 40)
    res = _res(mambalrp=base + 0.01 + rng.normal(0, 0.005, 40), lrp_ln=base, random=rng.normal(0, 0.1, 40))
    c = verdicts.paired_against(res)["lrp_ln"]
    expected = paired(res["faithfulness"]["mambalrp"]["delta"], base)
    assert (c.delta, c.se, c.t, c.df, c.p) == (expected.delta, expected.se, expected.t, expected.df, expected.p)
    assert word(c, "higher") == "reproduced" and c.p < 1e-6 and c.df == 39
    text = verdicts.headline(res)
    assert "ahead of 2 of 2 at p < 0.05" in text and "mambalrp" in text


def test_the_word_follows_the_rule_and_carries_its_p():
    rng = np.random.default_rng(1)
    base = rng.normal(0.8, 0.1, 150)
    res = _res(mambalrp=base, lrp_ln=base + 0.016 + rng.normal(0, 0.02, 150))  # the LN rule ahead: against the claim
    c = verdicts.paired_against(res)["lrp_ln"]
    assert c.delta < 0 and c.p < 0.05
    assert verdicts.verdict(c).startswith("opposite (p = ")
    row = next(r for r in verdicts.comparison_rows(res) if r["method"] == "lrp_ln")
    assert row["ΔA^F: MambaLRP more faithful?"] == verdicts.verdict(c)
    assert row["MambaLRP − it, ΔA^F"] == c.text()
    assert "lrp_ln" in verdicts.headline(res) and "**opposite**" in verdicts.headline(res)


def test_inputs_without_a_score_are_left_out_of_both_sides():
    res = _res(mambalrp=[0.3, 0.5, 0.7, 0.2], random=[0.1, 0.2, 0.3, 0.0])
    for m, v in (("mambalrp", [0.9, None, 0.8, 0.7]), ("random", [0.5, None, 0.4, 0.6])):
        res["faithfulness"][m]["pi_soft_nc_per_input"] = v
        res["faithfulness"][m]["pi_soft_nc"] = float(np.mean([x for x in v if x is not None]))
        res["faithfulness"][m]["pi_soft_nc_sem"] = 0.1
    c = verdicts.paired_against(res, "pi_soft_nc")["random"]
    assert c.n_a == 3 and abs(c.delta - np.mean([0.4, 0.4, 0.1])) < 1e-12
    assert verdicts.metrics_of(res) == ["delta_af", "pi_soft_nc"]


def test_no_reference_method_no_comparison():
    res = _res(lrp_ln=[0.1, 0.2, 0.3], random=[0.0, 0.1, 0.0])
    assert verdicts.paired_against(res) == {}
    assert verdicts.headline(res).startswith("Highest ΔA^F") and "paired" not in verdicts.headline(res)
