"""The MambaLRP training recipes, the committed models they made, and ``python -m core lrp``.

* the training-only selective scan agrees with the reference (values and gradients);
* the quick recipes run and write folders that load back (through the zoo too);
* the committed assets load through ``core.zoo.load_model`` and reach their recorded held-out figures
  on a subset, within a sampling margin;
* ``lrp explain`` on the committed sentiment model conserves relevance; bad input exits with code 2.
"""
import json
import math

import pytest
import torch

from core.cli import main
from core.lrp import MambaSequenceClassifier, VisionMamba, VisionMambaConfig, explain, recipes
from core.paths import ASSETS_DIR
from core.zoo import load_model
from core.zoo.card import read_card_file

pytestmark = pytest.mark.usefixtures("single_thread")

ASSET_NAMES = ("mamba-sentiment", "mamba-lm", "vision-mamba-mnist")


# ------------------------------------------------------------------------------------------------
# the training scan
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["classifier", "vision"])
def test_fast_mixers_reproduce_the_model_and_restore_it(which):
    from transformers import MambaConfig

    torch.manual_seed(0)
    if which == "classifier":
        model = MambaSequenceClassifier(MambaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                                    state_size=4, use_conv_bias=False), 2, head_bias=False)
        x = {"input_ids": torch.randint(0, 50, (3, 9))}
    else:
        model = VisionMamba(VisionMambaConfig(image_size=8, patch_size=4, in_channels=1, hidden_size=16,
                                              num_layers=2, state_size=4, num_classes=3))
        x = {"pixel_values": torch.rand(3, 1, 8, 8)}
    ref = model(**x)
    ref_grads = torch.autograd.grad(ref.square().sum(), list(model.parameters()))
    with recipes.fast_mixers(model):
        out = model(**x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for g, g_ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-5)
    assert all("forward" not in vars(m) for m in model.modules())  # the patch is gone


# ------------------------------------------------------------------------------------------------
# quick recipes
# ------------------------------------------------------------------------------------------------
def test_quick_vision_recipe_is_seeded_and_saves_a_loadable_folder(tmp_path):
    cfg = recipes.recipe_for("vision", seed=3, quick=True)
    m1 = recipes.train_vision(cfg, tmp_path / "a", recipe_command="x")
    m2 = recipes.train_vision(cfg, tmp_path / "b", recipe_command="x")
    assert m1["accuracy"] == m2["accuracy"] and 0 <= m1["accuracy"] <= 1
    a, b = VisionMamba.from_pretrained(tmp_path / "a"), VisionMamba.from_pretrained(tmp_path / "b")
    for (k, v), (_, w) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(v, w), k
    assert float(a.head.bias.detach().abs().max()) == 0.0  # held at zero: relevance is conserved
    card = read_card_file(tmp_path / "a")
    assert card["model_class"] == "core.lrp:VisionMamba" and card["quality"]["value"] == m1["accuracy"]
    assert not list(tmp_path.glob(".a.*"))  # no staging folder left behind


@pytest.mark.slow
def test_quick_sentiment_and_lm_recipes_save_folders_the_zoo_loads(tmp_path):
    from transformers import AutoTokenizer, MambaForCausalLM

    assert main(["lrp", "train", "lm", "--quick", "--out", str(tmp_path / "lm"), "--threads", "1"]) == 0
    lm = load_model(str(tmp_path / "lm"), use_cache=False)
    assert isinstance(lm.model, MambaForCausalLM) and lm.card.kind == "causal-lm"
    tok = AutoTokenizer.from_pretrained(tmp_path / "lm")
    assert tok("hello world")["input_ids"] == lm.tokenizer("hello world")["input_ids"]

    metrics = recipes.train_sentiment(recipes.recipe_for("sentiment", quick=True, init_from=str(tmp_path / "lm")),
                                      tmp_path / "sent")
    loaded = load_model(str(tmp_path / "sent"), use_cache=False)
    assert isinstance(loaded.model, MambaSequenceClassifier) and loaded.model.head.bias is None
    ids = loaded.tokenizer("a fine film")["input_ids"]
    assert ids[-1] == loaded.tokenizer.convert_tokens_to_ids(recipes.EOS)  # the head reads the final EOS
    # the backbone started from the LM's (same vocabulary), and the card records what was measured
    assert loaded.model.get_input_embeddings().num_embeddings == lm.model.get_input_embeddings().num_embeddings
    assert loaded.card.quality["value"] == metrics["accuracy"]


def test_quick_word_level_sentiment_recipe_is_fast_seeded_and_conserves_relevance(tmp_path):
    cfg = recipes.recipe_for("sentiment", seed=1, quick=True)
    assert cfg.tokenizer == "word-split" and cfg.init_from == "" and cfg.extra_data == ""
    # the smoke run stays a smoke run: one epoch over 256 texts with a 1-layer, 16-wide model
    assert (cfg.epochs, cfg.train_limit, cfg.eval_limit, cfg.num_layers, cfg.hidden_size) == (1, 256, 100, 1, 16)
    m1 = recipes.train_sentiment(cfg, tmp_path / "a", recipe_command="x")
    m2 = recipes.train_sentiment(cfg, tmp_path / "b", recipe_command="x")
    assert m1["accuracy"] == m2["accuracy"] and 0 <= m1["accuracy"] <= 1
    assert m1["lexicon_words_initialised"] > 1000  # the VADER lexicon's words are in the vocabulary
    loaded = load_model(str(tmp_path / "a"), use_cache=False)
    assert isinstance(loaded.model, MambaSequenceClassifier) and loaded.model.head.bias is None
    assert loaded.model.backbone.layers[0].mixer.conv1d.bias is None
    tokens = loaded.tokenizer.convert_ids_to_tokens(loaded.tokenizer("a gorgeous film, qqzzx.")["input_ids"])
    assert tokens == ["a", "gorgeous", "film", ",", recipes.UNK, ".", recipes.EOS]  # lowercased words, no spaces
    text = "The Film is good, and the story is bad."  # the offsets give back the text as typed (case, spaces)
    enc = loaded.tokenizer(text, return_offsets_mapping=True)
    assert loaded.tokenizer.convert_ids_to_tokens(enc["input_ids"])[:2] == ["the", "film"]
    assert [text[a:b] for a, b in enc["offset_mapping"][:2]] == ["The", "Film"]
    ids = loaded.tokenizer("a witty, moving film", return_tensors="pt")["input_ids"]
    exp = explain(loaded.model, input_ids=ids, method="mambalrp")
    assert float(exp.relevance.sum()) == pytest.approx(exp.logit, rel=1e-3, abs=1e-3)


def test_split_word_tokenizer_lowercases_and_drops_spaces():
    tok = recipes.train_word_tokenizer(["Good film.", "good FILM!", "bad film"], min_count=2, extra_words=["awful"],
                                       split=True)
    assert {"good", "film", "awful"} <= set(tok.get_vocab()) and "bad" not in tok.get_vocab()
    assert tok.encode("GOOD  film...").tokens == ["good", "film", recipes.UNK]
    assert tok.encode("ＧＯＯＤ film").tokens[0] == "good"  # NFKC folds full-width letters


def test_word_tokenizer_and_extra_sentences():
    texts = ["Good film.", "good FILM!", "bad film", "Good"]
    tok = recipes.train_word_tokenizer(texts, min_count=2, extra_words=["awful", "a b"])
    vocab = tok.get_vocab()
    assert vocab[recipes.EOS] == 0 and vocab[recipes.UNK] == 1
    assert {"ĠGood", "Ġfilm", "Ġawful"} <= set(vocab) and "Ġbad" not in vocab and "Ġgood" not in vocab
    assert tok.decode(tok.encode("Good film awful").ids) == " Good film awful"
    lower = recipes.train_word_tokenizer(texts, min_count=2, extra_words=["awful", "a b"], lowercase=True).get_vocab()
    assert {"Ġgood", "Ġfilm", "Ġawful"} <= set(lower) and "Ġbad" not in lower and "ĠGood" not in lower
    assert recipes.word_form("ĠGood") == "good"
    extra = recipes.extra_sentiment_records("tweets")
    assert len(extra) > 3000 and {r.label for r in extra} == {0, 1}
    assert all(r.score != 0 and r.label == int(r.score > 0) for r in extra)
    with pytest.raises(Exception, match="unknown extra"):
        recipes.extra_sentiment_records("imdb")


def test_bad_recipe_and_bad_init_folder_exit_2(tmp_path, capsys):
    assert main(["lrp", "train", "vision", "--init-from", str(tmp_path)]) == 2
    assert main(["lrp", "train", "sentiment", "--quick", "--init-from", str(tmp_path), "--out",
                 str(tmp_path / "o")]) == 2
    assert "mamba-lm folder" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as exc:
        main(["lrp", "train", "resnet"])
    assert exc.value.code == 2


# ------------------------------------------------------------------------------------------------
# committed assets
# ------------------------------------------------------------------------------------------------
def _asset_card(name):
    folder = ASSETS_DIR / "models" / name
    if not (folder / "card.json").exists():
        pytest.fail(f"{folder} is missing: retrain with its recipe")
    return read_card_file(folder)


def test_committed_models_are_listed_ready_with_cards(capsys):
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name in ASSET_NAMES:
        card = _asset_card(name)
        assert rows[name]["status"] == "ready", name
        assert card["recipe"].startswith("python -m core lrp train") and card["license"] == "project"
        assert card["quality"]["split"] == "test"
        assert (ASSETS_DIR / "models" / name / "model.safetensors").stat().st_size < 12e6


def test_committed_sentiment_model_reaches_its_recorded_accuracy():
    import core.data as data

    card = _asset_card("mamba-sentiment")
    loaded = load_model("mamba-sentiment")
    assert isinstance(loaded.model, MambaSequenceClassifier) and loaded.tokenizer is not None
    acc = recipes.classifier_accuracy(loaded.model, loaded.tokenizer, data.load("movie-sentiment", "test", limit=200))
    # 200 of the 1,057 test sentences: a binomial standard error of about 0.03
    assert acc >= card["quality"]["value"] - 0.08, acc


def test_committed_sentiment_model_beats_the_tfidf_baseline():
    card = _asset_card("mamba-sentiment")
    q = card["quality"]
    assert q["dataset"] == "movie-sentiment" and q["split"] == "test" and q["n"] == 1057
    # TF-IDF + logistic regression trained on the movie-sentiment train split, scored on the same test split
    assert q["value"] > q["baseline_tfidf_logreg"], q
    assert card["training"]["accuracy"] == q["value"] and card["recipe"] in card["origin"]
    if card["training"].get("extra_data"):  # augmented training data: the same-data baseline is on the card
        assert "baseline_tfidf_logreg_same_data" in q


def test_committed_vision_model_reaches_its_accuracy():
    card = _asset_card("vision-mamba-mnist")
    loaded = load_model("vision-mamba-mnist")
    assert isinstance(loaded.model, VisionMamba) and loaded.tokenizer is None
    x, y = recipes.mnist_tensors("test", limit=200)
    acc = recipes.image_accuracy(loaded.model, x, y)
    assert acc >= card["quality"]["value"] - 0.05, acc


def test_committed_lm_reaches_its_perplexity():
    from core.zoo.quality import token_perplexity

    card = _asset_card("mamba-lm")
    loaded = load_model("mamba-lm")
    ppl = token_perplexity(loaded.model, loaded.tokenizer, recipes.paragraph_texts("test")[:20], window=256,
                           max_tokens=1024)
    assert math.isfinite(ppl["perplexity"]) and ppl["perplexity"] < 1.5 * card["quality"]["value"]
    assert ppl["perplexity"] < loaded.model.config.vocab_size / 4  # far better than uniform guessing


# ------------------------------------------------------------------------------------------------
# lrp explain
# ------------------------------------------------------------------------------------------------
def test_cli_explain_on_the_sentiment_model_conserves_relevance(capsys):
    _asset_card("mamba-sentiment")
    text = "A gorgeous, witty and deeply moving film."
    assert main(["lrp", "explain", "--model", "mamba-sentiment", "--text", text, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rel = [t["relevance"] for t in out["tokens"]]
    loaded = load_model("mamba-sentiment")
    pieces = [t["text"] for t in out["tokens"]]
    assert len(pieces) == len(loaded.tokenizer.tokenize(text)) + 1 and pieces[-1] == recipes.EOS
    assert "".join(pieces[:-1]) == text  # the heatmap shows the text as typed
    assert out["target"] == int(loaded.model(loaded.tokenizer(text, return_tensors="pt")["input_ids"]).argmax())
    assert out["target_name"] in ("negative", "positive")
    assert sum(rel) == pytest.approx(out["logit"], rel=1e-3, abs=1e-3)  # bias-free model: nothing absorbed
    # the same numbers as the Python API, for the other class too
    ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"]
    other = explain(loaded.model, input_ids=ids, target=1 - out["target"])
    assert float(other.relevance.sum()) == pytest.approx(other.logit, rel=1e-3, abs=1e-3)
    assert main(["lrp", "explain", "--model", "mamba-sentiment", "--text", text, "--target", "1"]) == 0
    assert "sum of relevances" in capsys.readouterr().out


def test_cli_explain_bad_input_exits_2(capsys):
    assert main(["lrp", "explain", "--model", "no-such-model", "--text", "hi"]) == 2
    assert "no-such-model" in capsys.readouterr().err
    if (ASSETS_DIR / "models" / "mamba-sentiment" / "card.json").exists():
        for extra in (["--target", "7"], ["--method", "nope"]):
            assert main(["lrp", "explain", "--model", "mamba-sentiment", "--text", "fine", *extra]) == 2
        assert main(["lrp", "explain", "--model", "mamba-sentiment", "--text", "  "]) == 2
        err = capsys.readouterr().err
        assert "out of range" in err and "Unknown method" in err
