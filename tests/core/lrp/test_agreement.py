"""The subject-verb agreement ground truth (core.lrp.agreement): generated sentences whose spans are the nouns, ranks
and exact chance by hand, and one evaluation path for any language model explain() accepts (tiny random Mamba-1 and
Granite-hybrid LMs here, no per-family code), a method that does not apply reported as such."""
from types import SimpleNamespace

import pytest
import torch

from core.data.synthetic import AGREEMENT_TEMPLATES, agreement_sentences
from core.errors import BadInputError
from core.lrp import agreement, verdicts
from core.lrp.methods import Explanation
from core.lrp.views import agreement_rows

pytestmark = pytest.mark.usefixtures("single_thread")


def test_generated_sentences_put_the_spans_on_the_nouns_and_the_verb_agrees_with_the_subject():
    records = agreement_sentences(36, seed=2)
    assert agreement_sentences(36, seed=2) == records and agreement_sentences(36, seed=3) != records
    assert {r.template for r in records} == set(AGREEMENT_TEMPLATES)
    assert sum(r.plural for r in records) == 18  # the two numbers alternate, balanced
    singular = {" is", " was", " has"}
    for r in records:
        subject, attractor = r.text[slice(*r.subject)], r.text[slice(*r.attractor)]
        assert subject != attractor and " " not in subject and subject.isalpha()
        assert r.subject[1] < r.attractor[0] <= len(r.text)
        assert (r.verb in singular) != r.plural and (r.wrong in singular) == r.plural
    assert len({r.subject[0] for r in records}) > 3  # the lead-ins move the subject


def test_subject_rank_and_exact_chance_by_hand():
    rel = torch.tensor([0.1, 0.9, 0.5, 0.9, -1.0])
    assert agreement.subject_rank(rel, [1]) == 1 and agreement.subject_rank(rel, [3]) == 2  # a tie: earlier first
    assert agreement.subject_rank(rel, [4, 0]) == 4
    mrr, point = agreement.chance(4, 1)
    assert mrr == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) and point == 0.25
    mrr, point = agreement.chance(3, 2)  # best rank 1 with probability 2/3, else 2
    assert mrr == pytest.approx(2 / 3 + 1 / 6) and point == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def word_tokenizer():
    from core.data.tokenizers import fast_tokenizer, train_word_tokenizer

    texts = [r.text + r.verb + r.wrong for r in agreement_sentences(400, seed=0)]
    return fast_tokenizer(train_word_tokenizer(texts, min_count=1))


def _tiny_lm(family: str, vocab: int):
    from tests.core.ssm2_models import build, tiny_config

    if family == "mamba":
        from transformers import MambaConfig, MambaForCausalLM

        torch.manual_seed(0)
        return MambaForCausalLM(MambaConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, state_size=4,
                                            expand=2, use_bias=False, use_conv_bias=False)).double().eval()
    return build(tiny_config(family, vocab=vocab))


def _request(model, tokenizer, methods, n=12):
    loaded = SimpleNamespace(model=model, tokenizer=tokenizer, fingerprint="tiny")
    from core.lrp.requests import method_options as _method_options
    return SimpleNamespace(model="tiny", n=n, seed=1, methods=methods, options=_method_options(methods, None),
                           loaded=loaded)


@pytest.mark.parametrize("family", ["mamba", "granite"])
def test_any_language_model_explain_accepts_is_evaluated_the_same_way(word_tokenizer, family):
    model = _tiny_lm(family, len(word_tokenizer))
    res = agreement.evaluate_agreement(_request(model, word_tokenizer, ["mambalrp", "gradient_x_input"]))
    assert res["complete"] and res["n_explainable"] == 12 and res["dropped_tokenizer"] == 0
    assert res["n_done"] == res["n_agreeing"] == round(res["agreement_accuracy"] * 12) > 0
    for s in res["sentences"]:  # the ground-truth positions are the subject's and the attractor's tokens
        ids = word_tokenizer(s["text"])["input_ids"]
        words = [word_tokenizer.decode([ids[p]]).strip() for p in s["subject_positions"] + s["attractor_positions"]]
        record = next(r for r in agreement_sentences(12, seed=1) if r.text == s["text"])
        assert words == [record.text[slice(*record.subject)], record.text[slice(*record.attractor)]]
        assert s["margin"] > 0
    for m, sc in res["scores"].items():
        lengths = [len(word_tokenizer(s["text"])["input_ids"]) for s in res["sentences"]]
        assert all(1 <= r <= n for r, n in zip(sc["rank"], lengths))
        assert sc["mrr"] == pytest.approx(sum(1 / r for r in sc["rank"]) / len(sc["rank"]))
        assert sc["pointing_accuracy"] == pytest.approx(sum(r == 1 for r in sc["rank"]) / len(sc["rank"]))
    assert 0 < res["chance"]["pointing_accuracy"] < res["chance"]["mrr"] < 1


def test_an_oracle_finds_every_subject_and_a_method_that_does_not_apply_says_so(word_tokenizer, monkeypatch):
    model = _tiny_lm("mamba", len(word_tokenizer))
    real = agreement.explain

    def fake(model, input_ids=None, target=None, method="mambalrp", **options):
        if method == "mamba_attr":
            raise BadInputError("no hidden attention in this model")
        e = real(model, input_ids=input_ids, target=target, method="gradient_x_input")
        if method == "mambalrp":  # an oracle: all relevance on the subject (found from the text)
            text = word_tokenizer.decode(input_ids[0])
            record = next(r for r in agreement_sentences(12, seed=1) if r.text.strip() == text.strip())
            _, (subject,) = agreement._spans(word_tokenizer, record.text, [record.subject])
            rel = torch.zeros(input_ids.shape[1], dtype=torch.float64)
            rel[subject] = 1.0
            return Explanation(rel, e.logit, e.target, method, rel)
        return e

    monkeypatch.setattr(agreement, "explain", fake)
    res = agreement.evaluate_agreement(_request(model, word_tokenizer, ["mambalrp", "gradient_x_input", "mamba_attr"]))
    assert res["scores"]["mambalrp"]["mrr"] == 1.0 and res["scores"]["mambalrp"]["pointing_accuracy"] == 1.0
    assert "mamba_attr" in res["refused"] and "mamba_attr" not in res["scores"]
    rows = {r["method"]: r for r in agreement_rows(res)}
    assert rows["MambaAttr"]["MRR"].startswith("does not apply")
    c = verdicts.against({m: s["reciprocal_rank"] for m, s in res["scores"].items()})["gradient_x_input"]
    assert c.delta >= 0 and rows["Gradient x Input"]["MambaLRP − it, MRR"] == c.text()


def test_a_model_that_is_not_a_language_model_is_refused(word_tokenizer):
    from core.lrp.eval_requests import AgreementRequest

    with pytest.raises(BadInputError, match="language model"):
        AgreementRequest.parse("mamba-sentiment", 3)
