"""The embedded model mathneuro-tiny and its recipe: the quick recipe trains and saves a loadable model; the
committed model reaches its recorded held-out accuracies; pruning its MathNeuro set removes math and keeps sentiment;
the synthetic data are seeded and the held-out questions never appear in training."""
import json

import pytest
import torch

from core.data import load
from core.mathneuro import identify, intervened, math_accuracy, multiple_choice_accuracy, token_inputs
from core.mathneuro import recipe
from core.zoo import card_of, load_model, registered_names

pytestmark = pytest.mark.usefixtures("single_thread")
needs_model = pytest.mark.skipif(recipe.DEMO_NAME not in registered_names(), reason="mathneuro-tiny not committed")


def test_review_sentiment_is_seeded_balanced_and_held_out():
    a, b = recipe.review_sentiment(200, seed=3), recipe.review_sentiment(200, seed=3)
    assert a == b and a != recipe.review_sentiment(200, seed=4)
    assert sum(r.answer for r in a) == 100
    test, train = recipe.sentiment_split("test"), recipe.sentiment_split("train")
    assert len(test) == 1000 and not {r.question for r in test} & {r.question for r in train}
    # the verdict adjective alone decides the label
    for r in a[:50]:
        verdict = r.question.rsplit(".", 2)[-2]
        words = set(verdict.replace(",", " ").split())
        assert bool(words & set(recipe._POS)) == bool(r.answer) and bool(words & set(recipe._NEG)) != bool(r.answer)


def test_math_training_problems_add_no_held_out_question():
    base = load("arithmetic-words", "train")
    train = recipe.math_training_problems(6000)
    held = {p.question for s in ("validation", "test") for p in load("arithmetic-words", s)}
    assert len(train) == 6000 and train[:len(base)] == list(base)
    # the generated extras never repeat a validation/test question (the dataset's own train split repeats 8 of the
    # 300 test questions: short multiplication problems recur by chance)
    assert not held & {p.question for p in train[len(base):]}


@pytest.mark.slow
def test_quick_recipe_trains_and_saves_a_loadable_model(tmp_path):
    from transformers import AutoTokenizer
    out = tmp_path / "tiny"
    result = recipe.train_demo(out, quick=True, log=lambda m: None)
    assert result["loss_last"] < result["loss_first"] - 0.5  # it learns
    for f in ("config.json", "model.safetensors", "tokenizer.json", "card.json"):
        assert (out / f).is_file()
    card = json.loads((out / "card.json").read_text())
    assert card["kind"] == "causal-lm" and card["model_class"] == "hf" and card["license"] == "project"
    assert card["recipe"] == "python -m core mathneuro train-demo --quick"
    assert {"metric", "value", "dataset", "split", "math_accuracy", "sentiment_accuracy"} <= set(card["quality"])
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok.encode("Question: Ana has 3 eggs.\nAnswer: 3 + 4 = 7\n#### 7")
    assert ids[0] == tok.bos_token_id and tok.decode(ids[1:]) == "Question: Ana has 3 eggs.\nAnswer: 3 + 4 = 7\n#### 7"
    lm = load_model(str(out))
    assert type(lm.model).__name__ == "LlamaForCausalLM" and lm.card.parameters == result["training"]["parameters"]


@pytest.fixture(scope="module")
def tiny():
    return load_model(recipe.DEMO_NAME)


@needs_model
@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_committed_model_reaches_its_recorded_accuracies(tiny):
    q = card_of(recipe.DEMO_NAME).quality
    # sentiment reaches the 90% target; math does not (about 60%: multiplication is exact, sums and differences
    # are often off by one or two), which still leaves room to see pruning remove it
    assert q["math_accuracy"] >= 0.9 and q["sentiment_accuracy"] >= 0.9  # the bar: 90% on both
    math = math_accuracy(tiny.model, tiny.tokenizer, load("arithmetic-words", "test")[:100], max_new_tokens=24)
    senti = multiple_choice_accuracy(tiny.model, tiny.tokenizer, recipe.sentiment_split("test", 100))
    # the recorded figures are on 300 items; 100 items of the same split stay within a few points
    assert math["accuracy"] >= q["math_accuracy"] - 0.07
    assert senti["accuracy"] >= q["sentiment_accuracy"] - 0.07


@needs_model
@pytest.mark.slow
def test_pruning_the_mathneuro_set_removes_math_not_sentiment(tiny):
    model, tok = tiny.model, tiny.tokenizer
    m_in = token_inputs(tok, load("arithmetic-words", "train")[:100])
    n_in = token_inputs(tok, recipe.sentiment_split("train", 100))
    masks = identify(model, m_in, n_in, 0.05, "mathneuro")
    problems, reviews = load("arithmetic-words", "test")[:60], recipe.sentiment_split("test", 60)
    original = {n: p.detach().clone() for n, p in model.named_parameters()}

    def both(m):
        return (math_accuracy(m, tok, problems, max_new_tokens=24)["accuracy"],
                multiple_choice_accuracy(m, tok, reviews)["accuracy"])
    math0, senti0 = both(model)
    with intervened(model, masks, "prune") as view:
        math1, senti1 = both(view)
    assert math0 - math1 >= 0.2, (math0, math1)  # 96% -> 38% on the committed test figures
    assert senti0 - senti1 <= 0.05, (senti0, senti1)  # 100% -> 100%
    assert all(torch.equal(p, original[n]) for n, p in model.named_parameters())  # never written
