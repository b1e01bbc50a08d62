"""AttnLRP for the transformer decoders (Llama / SmolLM2, Mistral, Qwen2, Qwen3, Qwen3-MoE, Gemma 2, Gemma 3, Phi-3,
SmolLM3, OLMo 2, GPT-2) and the hybrids Zamba2 and Jamba, on tiny random models in float64 (tests/core/decoder_models.py):
the forward values unchanged, conservation with what biases, learned positions and softmaxes absorb, every block
conserving on its own, agreement with the hand-written linearisation of tests/core/lrp_reference_decoders.py, the
model left as it was, and the command line on saved folders of six of them."""
import copy
import json

import pytest
import torch

from core.lrp import LRPRules, explain
from core.lrp.adapters import adapter_for
from core.lrp.blocks import block_of
from core.lrp.context import lrp_rules
from core.lrp.flow import relevance_flow
from tests.core.decoder_models import FAMILIES, build, tiny_config
from tests.core.lrp_reference_decoders import reference_relevance

pytestmark = pytest.mark.usefixtures("single_thread")

BIASED = ("qwen2", "gpt2", "zamba2")  # q/k/v biases; Conv1D and LayerNorm biases and learned positions; conv biases
FOLDERS = ("llama", "qwen2", "gemma2", "gpt2", "zamba2", "jamba")  # the command-line families


def _ids(length=9, seed=1):
    return torch.randint(3, 64, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models():
    return {f: build(tiny_config(f)) for f in FAMILIES}


def _without_block_biases(model):
    """A copy whose linear, Conv1D and conv biases are 0 (LayerNorm biases and learned positions kept: outside the
    blocks)."""
    bare = copy.deepcopy(model)
    with torch.no_grad():
        for name, m in bare.named_modules():
            if type(m).__name__ in ("Linear", "Conv1D", "Conv1d") and getattr(m, "bias", None) is not None:
                m.bias.zero_()
    return bare


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rules_leave_the_forward_values_as_they_were(models, family):
    model = models[family]
    ids = _ids()
    with torch.no_grad():
        original = model(input_ids=ids).logits[0, -1]
    adapter = adapter_for(model)
    for rules in (None, LRPRules.mambalrp()):
        with torch.no_grad(), lrp_rules(adapter.model, rules):
            ours = adapter.logits(adapter.embed(ids))[0]
        # transformers' norms and softmaxes compute in float32 (measured: 1e-8 of these logits)
        torch.testing.assert_close(ours, original.to(ours.dtype), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_relevance_plus_what_is_absorbed_is_the_logit_and_agrees_with_the_hand_written_rules(models, family):
    model = models[family]
    ids = _ids(seed=2)
    flow = relevance_flow(model, input_ids=ids)
    assert abs(flow.residual) <= 1e-10 * abs(flow.logit)  # measured 0 .. 5e-16
    assert (flow.absorbed["bias"] != 0.0) == (family in BIASED)
    assert flow.absorbed["softmax"] != 0.0
    ref, logit = reference_relevance(model, ids, flow.target)
    torch.testing.assert_close(flow.relevance, ref, rtol=0, atol=1e-10 * float(ref.abs().max()))  # measured 6e-16
    assert flow.logit == pytest.approx(logit, rel=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_block_conserves_and_attention_and_routers_lose_what_their_softmaxes_absorb(models, family):
    flow = relevance_flow(_without_block_biases(models[family]), input_ids=_ids())
    lossy = 0.0
    for b in flow.blocks:
        gap = sum(b["out"]) - sum(b["in"])
        if b["kind"] == "attention" or b["label"].startswith("Mixture of experts"):
            lossy += gap
        else:  # SSM mixers and MLPs: what comes out goes in
            assert abs(gap) <= 1e-10 * max(abs(v) for v in b["out"]) + 1e-15, (b["name"], gap)
    assert lossy == pytest.approx(flow.absorbed["softmax"], rel=1e-8, abs=1e-15)
    assert {"attention", "mlp"} <= {b["kind"] for b in flow.blocks}


def test_gemma2_explains_its_capped_logit_and_the_cap_is_a_rule():
    model = build(tiny_config("gemma2"))
    ids = _ids()
    e = explain(model, input_ids=ids)
    with torch.no_grad():
        capped = model(input_ids=ids).logits[0, -1, e.target]
    assert e.logit == pytest.approx(float(capped), rel=1e-6) and abs(e.logit) < 2.0  # within the cap of 2
    plain = explain(model, input_ids=ids, silu=False)  # the identity rules off: the caps' own gradient
    assert not torch.allclose(plain.relevance, e.relevance)


@pytest.mark.parametrize("family", ["gemma2", "gpt2", "zamba2"])
def test_the_model_is_left_as_it_was(models, family):
    model = models[family]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    configs = [(m, m.config, m.config._attn_implementation) for m in model.modules() if block_of(m) == "attention"]
    explain(model, input_ids=_ids())
    relevance_flow(model, input_ids=_ids())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(m.config is c and c._attn_implementation == impl for m, c, impl in configs)
    assert not any(k in m.__dict__ for m in model.modules() for k in ("forward", "_layerwise_ctx", "_layerwise_rules"))
    assert not any(m._forward_hooks for m in model.modules())


def test_zamba2_traces_each_use_of_its_shared_block_in_its_own_layer(models):
    flow = relevance_flow(models["zamba2"], input_ids=_ids())
    layers = {b["layer"]: sorted(k["kind"] for k in flow.blocks if k["layer"] == b["layer"]) for b in flow.blocks}
    assert layers == {0: ["ssm"], 1: ["attention", "mlp", "ssm"], 2: ["attention", "mlp", "ssm"]}


def test_a_transformer_rollout_uses_its_softmax_attention(models):
    e = explain(models["llama"], input_ids=_ids(), method="attention_rollout")
    assert float(e.relevance.sum()) == pytest.approx(1.0, abs=1e-6)  # a row of the row-stochastic rollout
    attr = explain(models["llama"], input_ids=_ids(), method="mamba_attr")
    assert torch.isfinite(attr.relevance).all() and float(attr.relevance.abs().sum()) > 0


# ---- the command line on saved folders -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Six families saved as float32 safetensors folders with a tokenizer (the hub stand-in's), as a user saves them."""
    from tests.hub_repos import tokenizer

    root, tok = tmp_path_factory.mktemp("decoders"), tokenizer(vocab_size=300)
    out = {}
    for family in FOLDERS:
        cfg = tiny_config(family)
        cfg.vocab_size = len(tok)
        build(cfg, dtype=torch.float32).save_pretrained(root / family)
        tok.save_pretrained(root / family)
        out[family] = root / family
    return out


@pytest.mark.slow
@pytest.mark.parametrize("family", FOLDERS)
def test_the_cli_explains_a_saved_folder_of_each_family(folders, family, capsys):
    from core.cli import main

    text = "The function returns a list of"
    assert main(["lrp", "explain", "--json", "--model", str(folders[family]), "--text", text]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["lrp", "explain", "--layers", "--json", "--model", str(folders[family]), "--text", text]) == 0
    traced = json.loads(capsys.readouterr().out)
    logit, total, absorbed = traced["logit"], traced["total"], sum(traced["absorbed"].values())
    assert abs(logit - total - absorbed) <= 1e-3 * abs(logit)  # float32: measured 1e-7 .. 1e-6
    assert plain["logit"] == pytest.approx(logit, rel=1e-5) and plain["total"] == pytest.approx(total, rel=1e-3)
    assert len(plain["tokens"]) == len(traced["tokens"]) > 3


@pytest.mark.slow
def test_batch_the_agent_tool_and_the_long_table_take_a_transformer_folder(folders, tmp_path):
    """No family branch anywhere after the model: the batch command, the MCP tool and ``Result.frame()``."""
    import pandas as pd

    import core.lrp as lrp
    from core.cli import main
    from ui import tools

    folder, text = str(folders["llama"]), "The function returns a list of"
    source = tmp_path / "texts.jsonl"
    source.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": "a second line of text"}) + "\n")
    assert main(["lrp", "batch", "--model", folder, "--in", str(source), "--out", str(tmp_path / "out.parquet")]) == 0
    rows = pd.read_parquet(tmp_path / "out.parquet")
    assert len(rows) == 2 and all(len(r) == n for r, n in zip(rows["mambalrp_relevance"], rows["n_tokens"]))
    answer = json.loads(tools.lrp_relevance(folder, text, ["mambalrp"]))
    assert [r["token"] for r in answer["tables"]["relevance"]] == list(rows.loc[0, "tokens"])
    long = lrp.text_result(folder, text, ["mambalrp"]).frame()
    assert set(long["measure"]) >= {"mambalrp"} and len(long) >= len(rows.loc[0, "tokens"])


# ---- at the published size (the hub stand-in serves a transformer too: tests/core/lrp/test_ssm2.py) -------------------
@pytest.mark.slow
def test_smollm2_at_its_real_layer_shapes_conserves():
    """Two of SmolLM2-135M's layers at its real width (576, 9 / 3 heads of 64, MLP 1536; vocabulary cut to 1024), 32
    tokens, float64: relevance + absorbed = logit to 1e-10 (measured 1e-16), float32 within 1e-5 of float64 (measured
    3e-7 of the largest relevance). The whole model: bench/lrp.py --parts decoder_conservation."""
    from tests.core.decoder_models import real

    model = build(real("smollm2-135m", 2, 1024))
    ids = torch.randint(3, 1024, (1, 32), generator=torch.Generator().manual_seed(0))
    flow = relevance_flow(model, input_ids=ids)
    assert abs(flow.residual) <= 1e-10 * abs(flow.logit) and flow.absorbed["softmax"] != 0
    e32 = explain(model.float(), input_ids=ids)
    assert float((e32.sequence_relevance.double() - flow.relevance).abs().max()) <= 1e-5 * float(
        flow.relevance.abs().max())
