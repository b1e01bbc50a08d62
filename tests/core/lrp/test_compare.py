"""One text on two models side by side (core.lrp.compare): the word sums on a hand-made tokenization, the request's
checks, the view's numbers against the explanations they come from, the command line, and the precomputed pair."""
import json

import pytest

import core.lrp as lrp
from core.errors import BadInputError
from core.lrp.compare import locality, token_spans, word_relevance
from core.zoo import registered_names

pytestmark = pytest.mark.usefixtures("single_thread")
needs = pytest.mark.skipif(not {"mamba-lm", "mamba-sentiment"} <= set(registered_names()),
                           reason="embedded Mamba models not committed")


def test_tokens_are_summed_per_word_and_tokens_outside_the_text_kept_apart():
    text = "Unbelievably  good, film"
    pieces = ["<s>", "Un", "believ", "ably", "  good", ",", " film", "</s>"]
    assert token_spans(text, pieces) == [None, (0, 2), (2, 8), (8, 12), (14, 18), (18, 19), (20, 24), None]
    words, outside = word_relevance(text, pieces, [5.0, 1.0, 2.0, -0.5, 3.0, 0.25, -4.0, -1.0])
    assert words == [2.5, 3.25, -4.0] and outside == 6.0
    loc = locality(words)  # from the end: 4.0, 3.25, 2.5 of 9.75
    assert loc["share_last_word"] == pytest.approx(4.0 / 9.75) and loc["words_for_half"] == 2
    assert loc["share_last_3_words"] == pytest.approx(1.0) and loc["cumulative_from_end"][-1] == pytest.approx(1.0)


@pytest.mark.parametrize("raw, match", [
    ({"models": ["mamba-lm"], "text": "a"}, "two different models"),
    ({"models": "mamba-lm,mamba-lm", "text": "a"}, "two different models"),
    ({"models": "mamba-lm,mamba-sentiment", "text": "  "}, "empty"),
    ({"models": "mamba-lm,mamba-sentiment", "text": "a", "method": "nope"}, "Unknown method"),
    ({"models": "mamba-lm,mamba-sentiment", "text": "a", "method": ["mambalrp", "random"]}, "one method"),
])
def test_bad_requests_name_the_fix(raw, match):
    with pytest.raises(BadInputError, match=match):
        lrp.compare_result(**raw)


@needs
def test_each_side_is_its_own_explanation_summed_per_word(tmp_path, capsys):
    text = "It is not a bad film, but the ending is a complete mess."
    res = lrp.compare_result("mamba-lm,mamba-sentiment", text)
    sides = res.data["models"]
    assert [s["model"] for s in sides] == ["mamba-lm", "mamba-sentiment"] and res.data["words"] == text.split()
    for s in sides:
        single = lrp.text_result(s["model"], text, ["mambalrp"]).data
        assert s["tokens"] == single["tokens"] and s["target"] == single["target"]
        assert s["relevance"] == pytest.approx(single["methods"]["mambalrp"]["relevance"], abs=1e-6)
        in_text = sum(r for t, r in zip(s["tokens"], s["relevance"]) if t != "<|endoftext|>")
        assert sum(s["words"]) == pytest.approx(in_text, abs=1e-6)
        assert s["total"] == pytest.approx(s["logit"], rel=1e-4)  # bias-free Mambas conserve
    assert sides[1]["outside_text"] > 0  # the classifier reads its final EOS
    assert "compare" in res.figures and len(res.tables["words"]) == len(res.data["words"])
    assert set(res.frame()["table"]) == {"words", "models"}
    from core.cli import main

    assert main(["lrp", "compare", "--models", "mamba-lm,mamba-sentiment", "--text", text, "--json",
                 "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["words"] == sides[0]["words"]
    assert (tmp_path / "lrp-compare.html").exists() and (tmp_path / "lrp-compare-models.csv").exists()
    assert main(["lrp", "compare", "--models", "mamba-lm", "--text", text]) == 2


def test_the_side_by_side_links_open_the_precomputed_pair():
    from core import examples

    names = [e.name for e in examples.examples("lrp")]
    assert {"compare-1", "compare-2", "flow-smollm2-1", "smollm2-1"} <= set(names)
    view = examples.default_view("lrp", "compare-1")
    assert view.query() == "?tab=lrp&example=compare-1&model_a=smollm2-135m&model_b=mamba-lm"
    from core.lrp.service import EXAMPLES

    stored = EXAMPLES.entries("lrp/compare")
    assert [e["model"] for e in stored] == ["smollm2-135m+mamba-lm"] * 2
    for e in stored:
        kinds = [s["structure"] for s in e["data"]["models"]]
        assert kinds == ["attention", "ssm"] and e["data"]["models"][0]["family"] == "Llama"
