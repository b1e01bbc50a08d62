"""The bias audit (core.lrp.bias): the templated set is what it says (every term in every template, at the offsets
given), a term's relevance is the sum over exactly its tokens, the aggregation gives known answers on a hand-made case,
and the committed audit of mamba-sentiment opens from its deep link at once and agrees with explaining one of its
sentences afresh."""
from __future__ import annotations

import pytest

import core.examples as ex
from core.lrp import bias
from core.zoo import registered_names


def test_the_templated_set_swaps_every_term_into_every_template():
    rows = bias.audit_rows()
    terms = bias.terms()
    assert len(rows) == len(bias.TEMPLATES) * len(terms) == 12 * 22
    assert {g for _, g in terms} == set(bias.GROUPS)
    for r in rows:
        assert r["text"][r["start"]:r["end"]].lower() == r["term"].lower()
        assert r["text"].replace(r["text"][r["start"]:r["end"]], "{X}", 1) == bias.TEMPLATES[r["template"]]
    # the same template with each term differs only in the term
    first = [r for r in rows if r["template"] == 2]
    assert len({r["text"].replace(r["term"], "") for r in first}) == 1


def test_term_relevance_sums_exactly_the_terms_tokens():
    text = "I watched it with my sister and we laughed."
    tokens = ["I", " watched", " it", " with", " my", " sister", " and", " we", " laughed", ".", "<|endoftext|>"]
    relevance = [0.1, 0.2, 0.3, 0.4, 1.0, 2.0, 0.5, 0.6, 0.7, 0.8, 5.0]
    start = text.index("my sister")
    assert bias.term_relevance(tokens, relevance, text, start, start + len("my sister")) == 3.0
    assert bias.term_relevance(tokens, relevance, text, 0, 1) == 0.1
    with pytest.raises(Exception, match="cannot find"):
        bias.term_relevance(["<unk>"], [1.0], text, 0, 1)


def test_aggregate_on_a_hand_made_case():
    """logit = template base + term effect, relevance = the term effect: shifts are the effects minus their mean with
    no spread; a pair's gap is the difference of its effects; the template base cancels."""
    effect = {t: 0.1 * i for i, (t, _) in enumerate(bias.terms())}
    rows = [{"template": j, "term": t, "group": g, "logit": 3.0 * j + effect[t], "probability": 0.5,
             "relevance": effect[t]} for j in range(4) for t, g in bias.terms()]
    out = bias.aggregate(rows)
    mean_effect = sum(effect.values()) / len(effect)
    for t in out["terms"]:
        assert t["shift_mean"] == pytest.approx(effect[t["term"]] - mean_effect)
        assert t["shift_std"] == pytest.approx(0.0, abs=1e-12) and t["relevance_std"] == pytest.approx(0, abs=1e-12)
        assert t["n"] == 4
    names = next(p for p in out["pairs"] if p["swap"] == "female - male names")
    assert names["logit_gap_mean"] == pytest.approx(-0.1) and names["templates_female_higher"] == 0
    assert names["relevance_gap_mean"] == pytest.approx(-0.1) and names["n"] == 4
    assert (out["template_logit_min"], out["template_logit_max"]) == pytest.approx((mean_effect, 9 + mean_effect))


@pytest.mark.slow
@pytest.mark.skipif("mamba-sentiment" not in registered_names(), reason="mamba-sentiment not committed")
def test_the_committed_audit_opens_from_its_link_and_agrees_with_one_sentence_explained_afresh(fresh_cache):
    from core.lrp import text_result

    opened = ex.resolve({"tab": "lrp", "example": "bias-audit"})
    assert opened.notice == "" and opened.view.precomputed
    res = ex.show(opened.view)
    assert res.source == "precomputed" and res.data["texts"] == 264
    fig = res.figures["bias"]
    assert "Bias audit of mamba-sentiment" in fig.layout.title.text
    assert fig.layout.xaxis.title.text == "relevance (logit units)" and fig.layout.xaxis2.title.text
    assert {t.name for t in fig.data} == set(bias.GROUPS)
    assert len(res.tables["terms"]) == 22 and len(res.tables["sentences"]) == 264
    row = next(r for r in res.data["rows"] if r["term"] == "my sister" and r["template"] == 2)
    again = text_result("mamba-sentiment", row["text"], ["mambalrp"], 1)
    m = again.data["methods"]["mambalrp"]
    start = row["text"].index("my sister")
    # float32 on any CPU: far looser than the ~1e-6 spread of SIMD paths, far tighter than the effects reported
    assert bias.term_relevance(again.data["tokens"], m["relevance"], row["text"], start, start + 9) == \
        pytest.approx(row["relevance"], abs=1e-4)
    assert m["logit"] == pytest.approx(row["logit"], abs=1e-4)
    assert "female higher in" in res.status and "± " in res.status


def test_an_overlong_model_name_is_a_clear_message_not_an_os_error():
    """Found by fuzzing the bias-audit tool: a 300-character model name made the zoo's path check raise
    ENAMETOOLONG (the same in every tab that takes a model name)."""
    from core.errors import LayerwiseError
    from core.zoo import fingerprint

    with pytest.raises(LayerwiseError, match="not a registered model"):
        fingerprint("x" * 300)
