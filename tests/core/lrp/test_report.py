"""The MambaLRP pages' tables and verdict lines are generated from the committed evaluations (core.lrp.report): the
pages hold exactly what the files say, every word follows core.stats.word, and missing results name their command."""
import json

import pytest

from core import docs_blocks
from core.lrp import report, verdicts
from core.lrp.committed import EVALUATION_DIR, EVALUATION_ITEMS
from core.stats import WORDS


@pytest.fixture(scope="module")
def blocks():
    return report.blocks()


@pytest.mark.parametrize("page", report.PAGES)
def test_the_pages_hold_the_blocks_of_the_committed_files(page, blocks):
    text = (report.DOCS / page).read_text()
    assert text == docs_blocks.render(text, blocks, report.COMMAND), f"python -m core lrp docs rewrites {page}"
    held = docs_blocks.names(text)
    assert held and set(held) <= set(blocks)


def test_every_verdict_in_the_blocks_is_a_word_of_the_rule_with_its_comparison(blocks):
    res = json.loads((EVALUATION_DIR / f"{EVALUATION_ITEMS['sentiment-mamba2'][0]}.json").read_text())
    c = verdicts.paired_against(res)["lrp_ln"]
    line = next(x for x in blocks["ablation"].splitlines() if "`mamba2-sentiment`" in x)
    assert c.text() in line and c.delta < 0 and "**opposite**" in line  # issue 47: the LN rule ahead on Mamba-2
    words = [w for w in WORDS if f"**{w}**" in blocks["ablation"] + blocks["key-token-paired"]]
    assert words and all(w in WORDS for w in words)


def test_a_missing_result_names_the_command_that_makes_it(tmp_path):
    out = report.blocks(folder=tmp_path)
    assert "precompute-evaluation --only agreement-smollm2 --docs" in out["agreement-smollm2-135m"]
    assert "precompute-evaluation --only sentiment --docs" in out["faithfulness-mamba-sentiment"]


def test_render_replaces_only_the_marked_blocks():
    cmd = "cmd"
    text = f"a\n{docs_blocks.marker('x', cmd)}\nold\n{docs_blocks.marker('x', cmd, end=True)}\nb\n"
    assert docs_blocks.render(text, {"x": "new", "y": "unused"}, cmd) == text.replace("old", "new")
    assert docs_blocks.names(text) == ["x"]


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
