"""The MambaLRP pages' tables and verdict lines are generated from the committed evaluations (core.lrp.report): the
pages hold exactly what the files say, every word follows core.stats.word, and missing results name their command."""
import json

import pytest

from core.lrp import report, verdicts
from core.lrp.committed import EVALUATION_DIR, EVALUATION_ITEMS
from core.stats import WORDS


@pytest.fixture(scope="module")
def blocks():
    return report.blocks()


def test_every_verdict_in_the_blocks_is_a_word_of_the_rule_with_its_comparison(blocks):
    res = json.loads((EVALUATION_DIR / f"{EVALUATION_ITEMS['sentiment-mamba2'][0]}.json").read_text())
    c = verdicts.paired_against(res)["lrp_ln"]
    line = next(x for x in blocks["ablation"].splitlines() if "`mamba2-sentiment`" in x)
    assert c.text() in line and c.delta < 0 and "**opposite**" in line  # issue 47: the LN rule ahead on Mamba-2
    words = [w for w in WORDS if f"**{w}**" in blocks["ablation"] + blocks["key-token-paired"]]
    assert words and all(w in WORDS for w in words)


def test_a_missing_result_names_the_command_that_makes_it(tmp_path):
    out = report.blocks(folder=tmp_path)
    assert "precompute-evaluation --only agreement-smollm2` computes it" in out["agreement-smollm2-135m"]
    assert "precompute-evaluation --only sentiment` computes it" in out["faithfulness-mamba-sentiment"]
    assert "`python tools/docs.py` writes this block" in out["faithfulness-mamba-sentiment"]


def test_a_model_that_barely_agrees_is_said_so_beside_its_scores():
    from core.lrp.agreement import MIN_AGREEMENT, caveat
    res = {"agreement_accuracy": 0.463, "agreeing_plural_share": 0.08}
    text = caveat(res)
    assert "46.3%" in text and "92% of the sentences it gets right have a singular subject" in text
    assert caveat({**res, "agreement_accuracy": MIN_AGREEMENT}) is None
    committed = json.loads((EVALUATION_DIR / f"{EVALUATION_ITEMS['agreement'][0]}.json").read_text())
    assert (caveat(committed) is not None) == (committed["agreement_accuracy"] < MIN_AGREEMENT)
    if caveat(committed):
        assert caveat(committed) in report.agreement_block("agreement")
