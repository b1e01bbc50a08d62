"""core.neuzip's service: the committed example answers without loading the model, a repeated measurement is a cache
hit, and the registry gives every setting a label, a family and a style."""
import time

import pytest
import torch

import core.neuzip as nz
from core.errors import LayerwiseError
from core.zoo import card_of


def test_the_committed_example_answers_without_loading(fresh_cache):
    from core.zoo import clear_loaded, loading

    if not card_of(nz.EXAMPLE_MODEL).ready:
        pytest.skip("smollm2-135m not prepared")
    clear_loaded()
    t0 = time.perf_counter()
    weights = nz.weights_result(nz.EXAMPLE_MODEL, 7, None)
    tradeoff = nz.tradeoff_result(nz.EXAMPLE_MODEL, block_size=128, words=2000)
    assert weights.source == tradeoff.source == "precomputed" and time.perf_counter() - t0 < 5
    assert not loading._loaded  # the fingerprint came from the weight files, the model was never loaded
    parts, shown = nz.example_parts()
    assert set(parts) == {"histograms", "table", "tradeoff", "throughput"} and shown["tradeoff"].files()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    return folder


def test_a_repeated_measurement_is_a_cache_hit(tiny_folder, fresh_cache):
    first = nz.table_result(str(tiny_folder), 3, 32)
    second = nz.table_result(str(tiny_folder), 3, 32)
    assert (first.source, second.source) == ("computed", "cache") and second.data == first.data
    assert first.tables["table"][0]["layer"] == "total" and second.files() == first.files()


def test_every_setting_is_labelled_by_the_registry():
    for s in nz.default_settings((7, 3), 64, baselines=True):
        label = nz.setting_label(s)
        assert label and nz.TRADEOFF_METHODS[s["method"]].view(s)[1]
    assert nz.setting_label({"method": "neuzip", "k": 3, "block_size": 64}) == "NeuZip k=3, B=64"
    with pytest.raises(LayerwiseError, match="unknown method"):
        nz.setting_label({"method": "no-such-format"})
