"""Model loading from folders, committed assets and the packaged SmolLM2; cards; every bad-input path."""
import json
import shutil

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from core import paths
from core.errors import ModelLoadError
from core.zoo import card_of, clear_loaded, list_cards, load_model, module_fingerprint, registry
from core.zoo.safetensors_check import read_header


@pytest.fixture(autouse=True)
def fresh():
    clear_loaded()
    yield
    clear_loaded()


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def folder(tmp_path):
    model = tiny_llama()
    out = tmp_path / "tiny"
    model.save_pretrained(out)
    return out, model


def test_local_folder_loads_identical_model(folder):
    path, original = folder
    loaded = load_model(str(path))
    ids = torch.randint(0, 64, (1, 10))
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, original(ids).logits)
    n = sum(p.numel() for p in original.parameters() if p.data_ptr() != original.lm_head.weight.data_ptr()) \
        if original.config.tie_word_embeddings else sum(p.numel() for p in original.parameters())
    assert loaded.card.parameters == n and loaded.card.source == "local" and loaded.card.dtype == "F32"
    assert loaded.card.size_bytes == (path / "model.safetensors").stat().st_size


def test_fingerprint_follows_the_weights(folder, tmp_path):
    path, _ = folder
    a = load_model(str(path), use_cache=False).fingerprint
    assert a == load_model(str(path), use_cache=False).fingerprint
    other = tmp_path / "other"
    tiny_llama(seed=1).save_pretrained(other)
    assert load_model(str(other), use_cache=False).fingerprint != a


def test_fingerprint_follows_the_config_too(tmp_path):
    """The same weights under another config are another model (issue 22: a folder whose config names an unknown
    architecture was answered with mathneuro-tiny's cached result). A plain copy of a registered model's folder keeps
    the registered fingerprint, so it shares the precomputed examples and the cached results."""
    from core.zoo import fingerprint

    if "mathneuro-tiny" not in registry.registered_names():
        pytest.skip("mathneuro-tiny not committed")
    registered = fingerprint("mathneuro-tiny")
    copy = tmp_path / "copy"
    shutil.copytree(paths.ASSETS_DIR / "models" / "mathneuro-tiny", copy)
    assert fingerprint(str(copy)) == fingerprint(str(copy) + "/./.") == registered
    assert load_model(str(copy), use_cache=False).fingerprint == registered
    original = (copy / "config.json").read_bytes()
    config = json.loads(original)
    seen = {registered}
    for change in ({"architectures": ["NoSuchArchForCausalLM"], "model_type": "nosucharch"},
                   {"rms_norm_eps": 0.1}):
        (copy / "config.json").write_text(json.dumps({**config, **change}))
        fp = fingerprint(str(copy))
        assert fp.startswith(registered) and fp not in seen  # weights the same, the model not
        seen.add(fp)
    (copy / "config.json").write_bytes(original)
    assert fingerprint(str(copy)) == registered
    tokens = json.loads((copy / "tokenizer.json").read_text())
    first = next(iter(tokens["model"]["vocab"]))
    tokens["model"]["vocab"][first + "x"] = tokens["model"]["vocab"].pop(first)
    (copy / "tokenizer.json").write_text(json.dumps(tokens))
    assert fingerprint(str(copy)) not in seen  # another tokenizer turns text into other ids


def test_module_fingerprint_sees_in_memory_changes():
    m = tiny_llama()
    before = module_fingerprint(m)
    with torch.no_grad():
        m.model.layers[0].mlp.down_proj.weight[0, 0] += 1
    assert module_fingerprint(m) != before


def test_loaded_models_are_reused(folder):
    path, _ = folder
    assert load_model(str(path)) is load_model(str(path))


def test_pickle_only_folder_is_refused_by_default(folder, tmp_path):
    path, original = folder
    pk = tmp_path / "pickled"
    pk.mkdir()
    shutil.copy(path / "config.json", pk / "config.json")
    torch.save(original.state_dict(), pk / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as err:
        load_model(str(pk))
    assert "pickle" in err.value.message and "safetensors" in err.value.fix and "--allow-pickle" in err.value.fix


def test_folder_without_weights(tmp_path, folder):
    path, _ = folder
    empty = tmp_path / "noweights"
    empty.mkdir()
    shutil.copy(path / "config.json", empty / "config.json")
    with pytest.raises(ModelLoadError, match="no model weights"):
        load_model(str(empty))


@pytest.mark.parametrize("damage", ["truncate", "header", "short"])
def test_corrupt_safetensors_is_named(folder, damage):
    path, _ = folder
    f = path / "model.safetensors"
    raw = f.read_bytes()
    if damage == "truncate":
        f.write_bytes(raw[:-100])
    elif damage == "header":
        f.write_bytes(raw[:8] + b"{not json" + raw[17:])
    else:
        f.write_bytes(raw[:5])
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path))
    assert "model.safetensors" in err.value.message and "delete" in err.value.fix


def test_header_reader_matches_the_file(folder):
    path, original = folder
    header = read_header(path / "model.safetensors")
    assert set(header) == {k for k in original.state_dict() if k != "lm_head.weight" or
                           not original.config.tie_word_embeddings}


def test_hub_id_offline_names_the_fix():
    with pytest.raises(ModelLoadError) as err:
        load_model("state-spaces/mamba-130m-hf")
    assert "offline" in err.value.message and "--online" in err.value.fix


def test_hub_id_online_goes_to_the_hub_loader(monkeypatch, folder):
    path, original = folder
    from core.zoo import loading

    seen = {}

    def fake_load_hf(location, kind, dtype, trust_remote_code, allow_pickle, hub):
        seen.update(location=location, trust=trust_remote_code, pickle=allow_pickle, hub=hub)
        return original, None, "no tokenizer files", "causal-lm"

    monkeypatch.setenv("LAYERWISE_ONLINE", "1")
    monkeypatch.setattr(loading, "_load_hf", fake_load_hf)
    lm = load_model("some-org/some-model", use_cache=False)
    assert seen == {"location": "some-org/some-model", "trust": False, "pickle": False, "hub": True}
    assert lm.card.source == "hub" and lm.card.parameters > 0 and len(lm.fingerprint) == 24


@pytest.mark.parametrize("ref", ["", "definitely not a model", "./missing-folder"])
def test_unknown_references(ref):
    with pytest.raises(ModelLoadError):
        load_model(ref)


def test_a_file_is_not_a_model(folder):
    path, _ = folder
    with pytest.raises(ModelLoadError, match="is a file"):
        load_model(str(path / "config.json"))


@pytest.fixture
def assets(tmp_path, monkeypatch, folder):
    """A fake assets/ tree with one committed project model."""
    path, original = folder
    root = tmp_path / "assets"
    shutil.copytree(path, root / "models" / "tiny-lm")
    card = {"title": "Tiny LM", "kind": "causal-lm", "recipe": "python -m core demo train-tiny",
            "quality": {"metric": "accuracy", "value": 0.93, "dataset": "arithmetic-words", "split": "test"}}
    (root / "models" / "tiny-lm" / "card.json").write_text(json.dumps(card))
    monkeypatch.setattr(registry, "ASSETS_DIR", root)
    return root, original


def test_committed_assets_are_registered_with_their_card(assets):
    _, original = assets
    names = [c.name for c in list_cards()]
    assert "tiny-lm" in names and "smollm2-135m" in names
    card = card_of("tiny-lm")
    assert card.source == "assets" and card.ready and card.recipe.startswith("python -m core")
    assert card.quality_text() == "accuracy 0.93 on arithmetic-words/test"
    ids = torch.randint(0, 64, (1, 6))
    with torch.no_grad():
        assert torch.equal(load_model("tiny-lm").model(ids).logits, original(ids).logits)


@pytest.mark.parametrize("named", ["os:system", "core.cache:ResultsCache", "core.lrp:explain", "core.lrp",
                                   "core.lrp:VisionMamba:x", ""])
def test_only_registered_layerwise_classes_may_be_named_in_a_card(assets, named):
    root, _ = assets
    card_path = root / "models" / "tiny-lm" / "card.json"
    card = json.loads(card_path.read_text())
    card["model_class"] = named
    card_path.write_text(json.dumps(card))
    with pytest.raises(ModelLoadError, match="not a Layerwise class") as err:
        load_model("tiny-lm", use_cache=False)
    assert "core.lrp:VisionMamba" in err.value.fix


def test_every_registered_model_class_loads_from_a_folder():
    from core.zoo.registry import MODEL_CLASSES
    for named, model_class in MODEL_CLASSES.items():
        cls = model_class()  # the class itself, imported when asked for (not found by its name)
        assert callable(getattr(cls, "from_pretrained"))
        assert named.endswith(f":{cls.__name__}") and cls.__module__.startswith(named.partition(":")[0])


def test_missing_packaged_model_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERWISE_HOME", str(tmp_path))
    card = card_of("smollm2-135m")
    assert not card.ready and card.fix == "python -m core models prepare smollm2-135m"
    with pytest.raises(ModelLoadError, match="not prepared"):
        load_model("smollm2-135m")


@pytest.mark.slow
def test_packaged_smollm2_is_a_working_llama():
    card = card_of("smollm2-135m")
    assert card.ready, "run `python -m core models prepare` first"
    assert 134e6 < card.parameters < 135e6 and card.dtype == "F32"
    assert 5 < card.quality["value"] < 40  # measured token perplexity on held-out Wikipedia paragraphs
    lm = load_model("smollm2-135m")
    assert type(lm.model).__name__ == "LlamaForCausalLM" and lm.tokenizer is not None
    ids = lm.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        nxt = lm.model(ids).logits[0, -1].argmax()
    assert "Paris" in lm.tokenizer.decode(nxt)
    assert paths.models_dir() in (paths.models_dir() / "smollm2-135m").parents


def test_token_texts_name_ids_past_the_tokenizer():
    from tests.hub_repos import tokenizer

    from core.zoo import token_texts
    tok = tokenizer(300)
    n = len(tok)
    ids = tok("the cat")["input_ids"]
    assert token_texts(tok, ids) == [tok.decode([i]) for i in ids]
    assert token_texts(tok, [n, n + 2]) == [f"<id {n}>", f"<id {n + 2}>"]
