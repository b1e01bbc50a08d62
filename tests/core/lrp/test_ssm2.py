"""MambaLRP for Mamba-2, Falcon-Mamba and the hybrids (Bamba, Granite 4.0-H, Nemotron-H, Falcon-H1) on tiny random
models in float64: the SSD scan against its recurrence and transformers' scan, the forward values unchanged,
conservation measured with what biases and softmaxes absorb, agreement with the hand-written linearisation of
tests/core/lrp_reference.py, and the model left as it was."""
import copy
import json

import pytest
import torch
import torch.nn.functional as F

from core.errors import BadInputError
from core.lrp import LRPRules, explain
from core.lrp.adapters import adapter_for
from core.lrp.context import lrp_rules
from core.lrp.flow import relevance_flow
from core.lrp.ssd import discretize, hidden_attention_ssd, ssd_ref, ssd_scan
from tests.core.lrp_reference import reference_relevance
from tests.core.ssm2_models import FAMILIES, build, tiny_config

pytestmark = pytest.mark.usefixtures("single_thread")

GROUPED = ("mamba2", "granite", "nemotron-h", "falcon-h1")  # tried with 2 groups of B, C
HYBRIDS = ("bamba", "granite", "granite-moe", "nemotron-h", "falcon-h1")
FLOAT32_LOGITS = ("mamba2", "falcon-mamba", "nemotron-h")  # their LM heads return .float() logits: the explained
# logit of a float64 model is rounded to float32 there (6e-8 of it); the relevances themselves stay float64


def _tolerance(family):
    return 1e-7 if family in FLOAT32_LOGITS else 1e-10


def _ids(length=9, seed=1):
    return torch.randint(3, 64, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models():
    """family -> (bias-free model, model with conv biases and grouped B/C where the family has groups)."""
    return {f: (build(tiny_config(f)), build(tiny_config(f, conv_bias=True, groups=2 if f in GROUPED else 1), seed=3))
            for f in FAMILIES}


# ---- the SSD scan --------------------------------------------------------------------------------------------------
def test_ssd_chunks_equal_the_recurrence_the_hidden_attention_and_transformers():
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    g = torch.Generator().manual_seed(0)
    b, length, heads, p, groups, n = 2, 23, 4, 3, 2, 5
    x = torch.randn(b, length, heads, p, generator=g, dtype=torch.float64).requires_grad_(True)
    raw = torch.randn(b, length, heads, generator=g, dtype=torch.float64)
    bias = 0.3 * torch.randn(heads, generator=g, dtype=torch.float64)
    A = -torch.rand(heads, generator=g, dtype=torch.float64) - 0.2
    B, C = (torch.randn(b, length, groups, n, generator=g, dtype=torch.float64) for _ in range(2))
    D = torch.randn(heads, generator=g, dtype=torch.float64)
    dt = discretize(raw, bias)
    ref = ssd_ref(x, dt, A, B, C, D)
    for chunk in (1, 4, 8, 23, 64):  # one step, padded chunks, exactly one chunk, longer than the sequence
        torch.testing.assert_close(ssd_scan(x, dt, A, B, C, D, chunk), ref, rtol=1e-12, atol=1e-12)
    alpha = hidden_attention_ssd(dt, A, B, C)  # (b, h, t, s)
    assert torch.all(alpha.triu(1) == 0)
    torch.testing.assert_close(torch.einsum("bhts,bshp->bthp", alpha, x) + D[:, None] * x, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn(ref.shape, generator=g, dtype=torch.float64)  # the gradient is alpha^T: the rule's linear map
    (gx,) = torch.autograd.grad((ssd_scan(x, dt, A, B, C, D, 8) * w).sum(), x)
    torch.testing.assert_close(gx, torch.einsum("bhts,bthp->bshp", alpha, w) + D[:, None] * w, rtol=1e-12, atol=1e-12)
    theirs = mamba2_chunk_scan(x.detach().float(), raw.float(), A.float(), B.float(), C.float(), chunk_size=8,
                               D=D.float(), dt_bias=bias.float(), dt_softplus=True)
    torch.testing.assert_close(theirs.double(), ref.detach(), rtol=1e-5, atol=1e-5)


def test_with_the_ssm_rule_only_x_gets_a_gradient():
    g = torch.Generator().manual_seed(1)
    x, dt = torch.randn(1, 6, 2, 3, generator=g).requires_grad_(True), F.softplus(torch.randn(1, 6, 2, generator=g))
    A, D = -torch.rand(2, generator=g), torch.randn(2, generator=g)
    B, C = (torch.randn(1, 6, 1, 4, generator=g).requires_grad_(True) for _ in range(2))
    dt.requires_grad_(True)
    y = ssd_scan(x, dt, A, B, C, D, 4, constants=True)
    grads = torch.autograd.grad(y.sum(), [x, dt, B, C], allow_unused=True)
    assert grads[0] is not None and all(gr is None for gr in grads[1:])
    assert all(gr is not None for gr in torch.autograd.grad(ssd_scan(x, dt, A, B, C, D, 4, constants=False).sum(),
                                                             [x, dt, B, C]))


# ---- whole models --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_the_rules_leave_the_forward_values_as_they_were(models, family):
    model = models[family][1]
    ids = _ids()
    with torch.no_grad():
        original = model(input_ids=ids).logits[0, -1]
    adapter = adapter_for(model)
    for rules in (None, LRPRules.mambalrp()):
        with torch.no_grad(), lrp_rules(adapter.model, rules):
            ours = adapter.logits(adapter.embed(ids))[0]
        # the original computes its scan, norms and softmax in float32 (and sdpa attention): that rounding only
        torch.testing.assert_close(ours, original.to(ours.dtype), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_relevance_plus_what_biases_and_softmaxes_absorb_is_the_logit_in_float64(models, family):
    free, biased = models[family]
    for model in (free, biased):
        flow = relevance_flow(model, input_ids=_ids())
        # measured: 1e-17 .. 1e-15 of the logit (1e-9 .. 3e-8 where the head rounds the logit to float32)
        assert abs(flow.residual) <= _tolerance(family) * abs(flow.logit)
    free_flow = relevance_flow(free, input_ids=_ids())
    assert free_flow.absorbed["bias"] == 0.0
    assert relevance_flow(biased, input_ids=_ids()).absorbed["bias"] != 0.0  # the conv biases absorb a share
    if family not in HYBRIDS:  # no bias, no softmax: the relevances alone sum to the logit
        assert abs(free_flow.total - free_flow.logit) <= _tolerance(family) * abs(free_flow.logit)
    else:
        assert free_flow.absorbed["softmax"] != 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rules_agree_with_the_hand_written_linearisation(models, family):
    for model in models[family]:
        ids = _ids(length=7, seed=2)
        flow = relevance_flow(model, input_ids=ids)
        ref, logit = reference_relevance(model, ids, flow.target)
        scale = float(ref.abs().max())
        # Falcon-Mamba's own RMS norms on dt, B, C round to float32 (a constant of the rule): 1e-9 of the scale
        tol = 1e-8 if family == "falcon-mamba" else 1e-10
        torch.testing.assert_close(flow.relevance, ref, rtol=0, atol=tol * scale)
        assert abs(flow.logit - logit) <= 1e-7 * abs(logit)  # float32 logits of some heads


def test_each_block_conserves_and_the_attention_blocks_lose_what_the_softmax_absorbs(models):
    flow = relevance_flow(models["nemotron-h"][0], input_ids=_ids())  # mamba, mlp, attention, mlp; no bias
    kinds = [b["kind"] for b in flow.blocks]
    assert kinds == ["ssm", "mlp", "attention", "mlp"]
    lost = 0.0
    for b in flow.blocks:
        gap = sum(b["out"]) - sum(b["in"])
        if b["kind"] == "attention":
            lost += gap
        else:
            assert abs(gap) <= 1e-10 * abs(sum(b["out"])) + 1e-14
    assert lost == pytest.approx(flow.absorbed["softmax"], rel=1e-8, abs=1e-14)
    by_kind = flow.by_kind()
    assert set(by_kind) == {"ssm", "attention", "mlp"} and len(by_kind["ssm"]) == 9


def test_falcon_h1_splits_a_layer_between_its_parallel_attention_and_ssm(models):
    flow = relevance_flow(models["falcon-h1"][0], input_ids=_ids())
    layer0 = [b for b in flow.blocks if b["layer"] == 0]
    assert sorted(b["kind"] for b in layer0) == ["attention", "mlp", "ssm"]
    both = [b for b in layer0 if b["kind"] in ("ssm", "attention")]
    assert all(abs(sum(b["out"])) > 0 for b in both)  # the sum rule gives each branch its share


@pytest.mark.parametrize("family", ["mamba2", "granite-moe"])
def test_explain_returns_float64_relevance_for_a_float64_model(models, family):
    """``explain`` keeps a float64 model's relevances in float64 (it used to round them to float32): they equal the
    ledger's float64 relevances exactly, and the gradient methods stay float64 too."""
    model = models[family][0]
    ids = _ids()
    e, flow = explain(model, input_ids=ids), relevance_flow(model, input_ids=ids)
    assert e.relevance.dtype == torch.float64 and e.sequence_relevance.dtype == torch.float64
    torch.testing.assert_close(e.sequence_relevance, flow.relevance, rtol=0, atol=1e-13 * float(
        flow.relevance.abs().max()))
    for method in ("gradient_x_input", "smoothgrad", "integrated_gradients"):
        assert explain(model, input_ids=ids, method=method, **({"n_samples": 2} if method == "smoothgrad" else
                       {"n_steps": 2} if method == "integrated_gradients" else {})).relevance.dtype == torch.float64
    assert explain(model, input_ids=ids, method="random").relevance.dtype == torch.float64


def test_explain_conserves_in_float32_within_the_measured_bound():
    model = build(tiny_config("granite-moe"), dtype=torch.float32)
    wide = build(tiny_config("granite-moe"), dtype=torch.float64)
    ids = _ids(16)
    e32, flow64 = explain(model, input_ids=ids), relevance_flow(wide, input_ids=ids)
    # float32 against float64: measured 1e-7 .. 1e-6 of the largest relevance on these models
    assert float((e32.sequence_relevance.double() - flow64.relevance).abs().max()) <= 1e-4 * float(
        flow64.relevance.abs().max())
    assert abs(e32.absorbed - sum(flow64.absorbed.values())) <= 1e-4 * abs(flow64.logit)


@pytest.mark.parametrize("family", ["mamba2", "bamba", "falcon-h1"])
def test_the_model_is_left_as_it_was(models, family):
    model = models[family][1]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    configs = [(m, m.config, m.config._attn_implementation) for m in model.modules() if hasattr(m, "q_proj")]
    flags = [p.requires_grad for p in model.parameters()]
    explain(model, input_ids=_ids(), method="mambalrp")
    explain(model, input_ids=_ids(), method="gradient_x_input")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(m.config is c and c._attn_implementation == impl for m, c, impl in configs)
    assert not any("forward" in m.__dict__ or "_layerwise_ctx" in m.__dict__ for m in model.modules())


def test_the_ablation_switches_reach_the_new_blocks(models):
    model = models["granite-moe"][0]
    ids = _ids()
    base = explain(model, input_ids=ids)
    for switch in ("gate", "silu", "norm", "ssm"):
        off = explain(model, input_ids=ids, **{switch: False})
        assert not torch.allclose(off.relevance, base.relevance), switch
    plain = explain(model, input_ids=ids, method="gradient_x_input")
    nothing = explain(model, input_ids=ids, rules=LRPRules.none())
    torch.testing.assert_close(plain.relevance, nothing.relevance)


def test_other_families_are_refused_with_a_clear_message():
    """A causal LM without rules (OPT: learned positions with an offset, ReLU MLP) is named in the refusal."""
    import transformers as T

    from core.zoo.construction import constructing

    cfg = T.OPTConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2,
                      word_embed_proj_dim=16, max_position_embeddings=32)
    with constructing():
        model = T.OPTForCausalLM(cfg).eval()
    with pytest.raises(BadInputError, match="OPTForCausalLM"):
        explain(model, input_ids=_ids())


def test_a_hybrid_sequence_classifier_explains_and_round_trips(tmp_path, models):
    from core.lrp import SequenceClassifier

    cfg = copy.deepcopy(tiny_config("granite-moe"))
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    clf = SequenceClassifier(cfg, num_labels=2, head_bias=False).eval()
    clf.save_pretrained(tmp_path / "m")
    again = SequenceClassifier.from_pretrained(tmp_path / "m")
    ids = _ids()
    torch.testing.assert_close(again(input_ids=ids), clf(input_ids=ids), rtol=0, atol=0)
    flow = relevance_flow(clf.double(), input_ids=ids, target=1)
    assert abs(flow.residual) <= 1e-10 * abs(flow.logit)
    assert adapter_for(clf).kind == "classifier"


# ---- at the published checkpoints' layer shapes ---------------------------------------------------------------------
REAL_LAYERS = {"mamba2-130m": 2, "falcon-mamba-7b": 1, "granite-4.0-h-tiny": 2, "falcon-h1-0.5b": 1, "bamba-9b": 2}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REAL_LAYERS))
def test_conservation_at_the_real_layer_shapes(name):
    """One or two layers at each checkpoint's width (ssm2_models.REAL says where the numbers come from; an interleaved
    hybrid keeps a Mamba-2 and an attention layer), 32 tokens, float64: relevance + absorbed = logit to 1e-10 (1e-7
    where the head returns float32 logits; measured 1e-16 .. 3e-8), and float32 within 1e-5 of float64 (measured
    4e-8 .. 2.3e-7 of the largest relevance). Peak memory 0.6 GB (mamba2-130m) .. 4.8 GB (bamba-9b)."""
    import gc

    from tests.core.ssm2_models import real

    model = build(real(name, REAL_LAYERS[name], 1024), dtype=torch.float64)
    ids = torch.randint(3, 1024, (1, 32), generator=torch.Generator().manual_seed(0))
    flow = relevance_flow(model, input_ids=ids)
    tol = 1e-7 if name.startswith(("mamba2", "falcon-mamba")) else 1e-10
    assert abs(flow.residual) <= tol * abs(flow.logit)
    assert abs(flow.total + sum(flow.absorbed.values()) - flow.logit) <= 1e-4 * abs(flow.logit)
    assert (flow.absorbed["softmax"] != 0) == (name in ("granite-4.0-h-tiny", "falcon-h1-0.5b", "bamba-9b"))
    e32 = explain(model.float(), input_ids=ids)
    assert float((e32.sequence_relevance.double() - flow.relevance).abs().max()) <= 1e-5 * float(
        flow.relevance.abs().max())
    del model
    gc.collect()


# ---- the real checkpoints' loading path, through the hub stand-in ----------------------------------------------------
_LOAD_ALL = """
import json, sys
from core.lrp import inputs
from core.lrp.flow import relevance_flow
out = {}
for repo in sys.argv[1:]:
    loaded = inputs.load(repo)
    ids, pieces, _ = inputs.tokenize(loaded, "The function returns a list of")
    flow = relevance_flow(loaded.model, input_ids=ids)
    out[repo] = {"class": type(loaded.model).__name__, "source": loaded.card.source, "tokens": len(pieces),
                 "logit": flow.logit, "total": flow.total, "residual": flow.residual, "absorbed": flow.absorbed,
                 "kinds": sorted({b["kind"] for b in flow.blocks})}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_each_family_loads_from_the_hub_and_is_explained(hub_stand_in, tmp_path):
    """A config + random safetensors + tokenizer per family under its checkpoint's id (tests/hub_repos.SSM2_IDS), and
    a transformer (HuggingFaceTB/SmolLM2-135M as the stand-in serves it: a tiny Llama), downloaded through the stand-in
    by the zoo's loader (one process for all seven), then the CLI explains one."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO, online_env
    from tests.core.test_online import cli
    from tests.hub_repos import LLAMA_ID, SSM2_IDS

    proc = subprocess.run([sys.executable, "-c", _LOAD_ALL, *SSM2_IDS, LLAMA_ID], cwd=REPO, capture_output=True,
                          text=True, env=online_env(hub_stand_in, tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for repo, family in {**SSM2_IDS, LLAMA_ID: "llama"}.items():
        r = res[repo]
        assert r["source"] == "hub" and r["tokens"] > 3
        assert abs(r["residual"]) <= 1e-4 * abs(r["logit"])  # float32 checkpoints: measured 1e-8 .. 1e-7
        assert ("attention" in r["kinds"]) == (family in HYBRIDS or family == "llama")
    assert res[LLAMA_ID]["kinds"] == ["attention", "mlp"] and res[LLAMA_ID]["class"] == "LlamaForCausalLM"
    explained = cli(hub_stand_in, tmp_path, "lrp", "explain", "--model", "AntonV/mamba2-130m-hf", "--text",
                    "The function returns a list of", "--json")
    assert explained.returncode == 0, explained.stderr[-2000:]
    out = json.loads(explained.stdout)
    assert abs(out["total"] - out["logit"]) <= 1e-4 * abs(out["logit"])  # bias-free Mamba-2: nothing absorbed


# ---- the rollout methods, the key-token families, the recipes, the layer-type view ---------------------------------
def test_a_hybrid_rollout_takes_its_attention_layers_in_layer_order(models, monkeypatch):
    import core.lrp.methods as methods

    seen = {}
    real_rollout = methods.rollout

    def spy(mats):
        seen["n"] = len(mats)
        return real_rollout(mats)

    monkeypatch.setattr(methods, "rollout", spy)
    model = models["bamba"][0]  # mamba, attention, mamba
    for name in ("attention_rollout", "mamba_attr"):
        e = explain(model, input_ids=_ids(), method=name)
        assert seen["n"] == 3 and torch.isfinite(e.relevance).all()
    row = explain(model, input_ids=_ids(), method="attention_rollout").relevance
    assert float(row.sum()) == pytest.approx(1.0, abs=1e-5)  # a row of the rolled-out (row-stochastic) matrix


def test_key_token_requests_name_their_family_and_refuse_others():
    from core.lrp.eval_requests import KeyTokenRequest

    paper = KeyTokenRequest.parse(10, None, 1)
    assert paper.key()[0] == "key-token" and "family" not in paper.key()[2]  # the committed Mamba-1 key unchanged
    hybrid = KeyTokenRequest.parse(10, None, 1, family="hybrid")
    assert hybrid.key()[:2] == ("key-token-hybrid", "key-token-hybrid-0") and hybrid.key()[2]["family"] == "hybrid"
    with pytest.raises(BadInputError, match="family"):
        KeyTokenRequest.parse(10, None, 1, family="zamba")


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["sentiment-mamba2", "sentiment-hybrid"])
def test_quick_family_recipes_train_save_and_conserve(tmp_path, recipe):
    from core.lrp import recipes
    from core.zoo import load_model

    cfg = recipes.recipe_for(recipe, seed=1, quick=True)
    metrics = recipes.train_sentiment(cfg, tmp_path / "m", recipe_command="x")
    assert 0 <= metrics["accuracy"] <= 1
    loaded = load_model(str(tmp_path / "m"))
    assert type(loaded.model).__name__ == "SequenceClassifier"
    flow = relevance_flow(loaded.model.double(), input_ids=loaded.tokenizer("a fine film", return_tensors="pt")[
        "input_ids"])
    # Mamba2Model keeps its residual stream in float32 (residual_in_fp32, on by default): 1e-8 of the logit
    assert abs(flow.residual) <= (1e-7 if recipe.endswith("mamba2") else 1e-10) * abs(flow.logit)
    kinds = {b["kind"] for b in flow.blocks}
    assert kinds == ({"ssm"} if recipe.endswith("mamba2") else {"ssm", "attention", "mlp"})


def test_the_layer_view_of_an_embedded_model(tmp_path):
    import core.lrp as lrp
    from core.cli import main

    res = lrp.flow_result("mamba2-sentiment", "A dull, lifeless film.")
    assert "layer-flow" in res.figures and [r["kind"] for r in res.tables["blocks"]] == ["SSM layers"] * 2
    assert sum(res.views["shares"].values()) == pytest.approx(1.0)
    assert abs(res.data["residual"]) <= 1e-5 * abs(res.data["logit"])  # float32 model
    assert "no attention layers" in res.status
    out = tmp_path / "flow.json"
    assert main(["lrp", "explain", "--layers", "--model", "mamba2-sentiment", "--text", "A dull, lifeless film.",
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["blocks"]
    assert main(["lrp", "explain", "--layers", "--model", "mamba2-sentiment", "--text", "  "]) == 2


def test_the_new_views_are_registered_with_deep_links():
    from core import examples

    names = [e.name for e in examples.examples("lrp")]
    assert {"mamba2-1", "hybrid-1", "flow-1", "flow-2"} <= set(names)
    opened = examples.resolve({"tab": "lrp", "example": "flow-1", "model": "mamba2-sentiment"})
    assert opened.view.values["model"] == "mamba2-sentiment" and not opened.notice
    assert examples.default_view("lrp", "flow-1").query().startswith("?tab=lrp&example=flow-1&model=hybrid-sentiment")


@pytest.mark.parametrize("family", ["granite-moe", "falcon-h1"])
def test_recomputing_each_mixer_in_the_backward_changes_nothing(models, family, monkeypatch):
    import core.lrp.methods as methods

    model = models[family][1]
    kept = explain(model, input_ids=_ids(12))
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", -1)  # every mixer (SSM and attention) recomputed
    assert methods.recompute_mixers(adapter_for(model), adapter_for(model).embed(_ids(12)))
    again = explain(model, input_ids=_ids(12))
    torch.testing.assert_close(again.sequence_relevance, kept.sequence_relevance, rtol=1e-12, atol=1e-12)


def test_blocks_that_read_one_input_each_get_their_own_share(models):
    """Granite's experts and shared MLP read the same normed tensor: each block's input relevance is its own."""
    flow = relevance_flow(models["granite-moe"][0], input_ids=_ids())
    for b in flow.blocks:
        if b["label"].startswith("Shared MLP"):  # no softmax, no bias: what comes out goes in
            assert sum(b["in"]) == pytest.approx(sum(b["out"]), rel=1e-9, abs=1e-15)
    moe = [b for b in flow.blocks if b["label"] == "Mixture of experts"]
    absorbed_by_routers = sum(sum(b["out"]) - sum(b["in"]) for b in moe)
    attention = [b for b in flow.blocks if b["kind"] == "attention"]
    absorbed_by_attention = sum(sum(b["out"]) - sum(b["in"]) for b in attention)
    assert absorbed_by_routers + absorbed_by_attention == pytest.approx(flow.absorbed["softmax"], rel=1e-8)
