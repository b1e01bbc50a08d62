"""Every paper's main action on the papers' hub ids, through the CLI, against the local hub stand-in.

MambaLRP explains ``state-spaces/mamba-130m-hf`` (whose embedding is padded past its tokenizer); MathNeuro, Mix-LN
and NeuZip run on a Llama under ``HuggingFaceTB/SmolLM2-135M``. Tiny random weights with the real file layout.
"""
import json

import pytest

from tests.core.test_online import cli
from tests.hub_repos import LLAMA_ID, MAMBA_ID, PADDING

pytestmark = pytest.mark.slow


def test_mambalrp_explains_the_hub_mamba_and_conserves(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "lrp", "explain", "--model", MAMBA_ID, "--text",
               "The quick brown fox jumps over the lazy dog", "--method", "mambalrp,gradient_x_input", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    m = doc["methods"]["mambalrp"]
    assert abs(m["total"] + m["absorbed"] - m["logit"]) < 1e-3 * max(1.0, abs(m["logit"]))
    assert len(m["relevance"]) == len(doc["tokens"]) > 5


def test_an_id_past_the_tokenizer_reads_as_id_n(hub_stand_in, tmp_path):
    card = json.loads(cli(hub_stand_in, tmp_path, "models", "card", MAMBA_ID, "--json").stdout)
    n_tokens = int(card["tokenizer"].split()[0])
    padded = n_tokens + PADDING - 1
    proc = cli(hub_stand_in, tmp_path, "lrp", "explain", "--model", MAMBA_ID, "--text", "hello world",
               "--method", "mambalrp", "--target", str(padded), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["target"] == padded and doc["target_name"] == f"<id {padded}>"


def test_mathneuro_identifies_on_a_hub_llama(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "mathneuro", "identify", "--model", LLAMA_ID, "-n", "4", "-K", "0.05",
               "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["model"] == LLAMA_ID and 0 < doc["selected"] <= 0.05 * doc["total"]
    assert sum(m["selected"] for m in doc["matrices"]) == doc["selected"]
    assert all(m["selected"] <= 0.05 * m["total"] + 1 for m in doc["matrices"])
    assert any("layers.1.mlp" in m["name"] for m in doc["matrices"])


def test_mixln_angular_distance_of_a_hub_llama(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "mixln", "angular", "--model", LLAMA_ID, "--samples", "2", "--seq", "32",
               "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["subject"] == LLAMA_ID and doc["num_layers"] == 2
    values = [v for row in doc["raw"] for v in row if v is not None]
    assert len(values) == 3 and all(0 <= v <= 1 for v in values)


def test_neuzip_tradeoff_of_a_hub_llama_on_hub_wikitext(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "neuzip", "tradeoff", "--model", LLAMA_ID, "--k", "7", "3", "--no-baselines",
               "--words", "200", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["dataset"] == "wikitext-2" and doc["words"] > 0
    points = {p["label"]: p for p in doc["points"]}
    bf16, lossless = points["bf16"], points["NeuZip k=7 (lossless)"]
    assert lossless["perplexity"] == bf16["perplexity"] and lossless["memory_bytes"] < bf16["memory_bytes"]
    assert 8 < lossless["bits_per_weight"] < 16


def test_mambalrp_explains_the_hub_transformer_and_conserves(hub_stand_in, tmp_path):
    """Issue 45: a transformer from the hub (the stand-in's Llama) is explained too (AttnLRP on its attention), the
    relevances plus what the softmaxes and biases absorbed adding up to the logit; it was refused before."""
    proc = cli(hub_stand_in, tmp_path, "lrp", "explain", "--model", LLAMA_ID, "--text", "The quick brown fox jumps",
               "--method", "mambalrp", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout)["methods"]["mambalrp"]
    assert abs(m["total"] + m["absorbed"] - m["logit"]) < 1e-3 * max(1.0, abs(m["logit"]))
