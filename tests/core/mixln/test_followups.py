"""The follow-ups as placements: LayerNorm Scaling and Peri-LN against their definitions, DeepNorm's two sets of
constants as two registry entries, and the registry that every view lists them from."""
import math

import pytest
import torch

from core.mixln import NORMS, PLACEMENTS, MixLNConfig, MixLNForCausalLM
from core.mixln.model import rotary_cos_sin
from core.mixln.placements import placement_colour, placement_label, placement_model, placement_of

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny(norm, layers=3, **kw):
    base = dict(vocab_size=50, hidden_size=32, num_layers=layers, num_heads=4, intermediate_size=48, norm=norm)
    return MixLNConfig(**{**base, **kw})


def _n(v, w, eps):
    return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w


def _randomise_norms(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))


def _ids(b=2, t=9, seed=0):
    return torch.randint(0, 50, (b, t), generator=torch.Generator().manual_seed(seed))


def test_lns_scales_each_pre_norm_output_by_one_over_sqrt_of_layer_number():
    """h = x + Attn(N(x) / sqrt(l + 1)); y = h + MLP(N(h) / sqrt(l + 1)), l = 0 for the first layer (the authors'
    modeling_llama.py: 1 / math.sqrt(self.layer_index + 1), layer_index from range(num_hidden_layers)), written out
    layer by layer against the model."""
    torch.manual_seed(3)
    model = MixLNForCausalLM(tiny("lns", layers=4)).eval()
    _randomise_norms(model)
    ids, eps = _ids(), model.config.rms_norm_eps
    cos, sin = rotary_cos_sin(model.config, ids.shape[1], "cpu", torch.float32)
    x = model.model.embed_tokens(ids)
    out = model(ids, output_hidden_states=True)
    for l, layer in enumerate(model.model.layers):
        torch.testing.assert_close(out.hidden_states[l], x, atol=1e-5, rtol=1e-5)
        s = 1 / math.sqrt(l + 1)
        h = x + layer.self_attn(s * _n(x, layer.input_layernorm.weight, eps), cos, sin)
        x = h + layer.mlp(s * _n(h, layer.post_attention_layernorm.weight, eps))
    torch.testing.assert_close(out.logits, model.lm_head(_n(x, model.model.norm.weight, eps)), atol=1e-5, rtol=1e-5)
    assert [layer.norm_scale for layer in model.model.layers] == [1 / math.sqrt(l + 1) for l in range(4)]


def test_lns_adds_no_parameter_and_differs_from_pre_ln_only_after_the_first_layer():
    pre, lns = (MixLNForCausalLM(tiny(n, layers=3)) for n in ("pre", "lns"))
    assert [(k, v.shape) for k, v in pre.state_dict().items()] == [(k, v.shape) for k, v in lns.state_dict().items()]
    assert lns.num_parameters() == pre.num_parameters() == lns.config.num_parameters()
    lns.load_state_dict(pre.state_dict())
    ids = _ids()
    a, b = pre(ids, output_hidden_states=True), lns(ids, output_hidden_states=True)
    torch.testing.assert_close(a.hidden_states[1], b.hidden_states[1], atol=0, rtol=0)  # layer 0: scale 1, bit-exact
    assert not torch.allclose(a.hidden_states[2], b.hidden_states[2])                 # layer 1: scaled by 1/sqrt(2)


def test_peri_ln_normalises_both_sublayers_input_and_output_and_the_embedding():
    """y = x + N(Attn(N(x))), then + N(MLP(N(.))), and x_0 = N(embedding), written out layer by layer."""
    torch.manual_seed(5)
    model = MixLNForCausalLM(tiny("peri", layers=2)).eval()
    _randomise_norms(model)
    ids, eps = _ids(), model.config.rms_norm_eps
    cos, sin = rotary_cos_sin(model.config, ids.shape[1], "cpu", torch.float32)
    x = _n(model.model.embed_tokens(ids), model.model.embed_norm.weight, eps)
    out = model(ids, output_hidden_states=True)
    for l, layer in enumerate(model.model.layers):
        torch.testing.assert_close(out.hidden_states[l], x, atol=1e-5, rtol=1e-5)
        h = x + _n(layer.self_attn(_n(x, layer.input_layernorm.weight, eps), cos, sin),
                   layer.post_attention_layernorm.weight, eps)
        x = h + _n(layer.mlp(_n(h, layer.pre_feedforward_layernorm.weight, eps)),
                   layer.post_feedforward_layernorm.weight, eps)
    torch.testing.assert_close(out.logits, model.lm_head(_n(x, model.model.norm.weight, eps)), atol=1e-5, rtol=1e-5)
    assert model.num_parameters() == model.config.num_parameters()


@pytest.mark.parametrize("weight", ["self_attn.o_proj", "mlp.down_proj", "embed"])
def test_peri_ln_output_norms_make_each_sublayer_scale_free(weight):
    """Scaling a sub-layer's output projection (or the embedding) by 8 changes nothing when its output is
    normalised: true of Peri-LN for attention, MLP and the embedding, false of Sandwich-LN for the embedding and of
    Pre-LN for all three (so a missing output norm fails this)."""
    ids = _ids()

    def logits(norm, scaled):
        torch.manual_seed(11)
        model = MixLNForCausalLM(tiny(norm, layers=2, rms_norm_eps=1e-12)).double().eval()
        if scaled:
            with torch.no_grad():
                if weight == "embed":
                    model.model.embed_tokens.weight.mul_(8)
                for layer in model.model.layers:
                    if weight != "embed":
                        part, name = weight.split(".")
                        getattr(getattr(layer, part), name).weight.mul_(8)
        return model(ids).logits

    # the norm computes its statistics in float32 (kernels.rmsnorm), so "nothing" is to float32 rounding
    torch.testing.assert_close(logits("peri", True), logits("peri", False), atol=1e-5, rtol=1e-4)
    assert (logits("pre", True) - logits("pre", False)).abs().max() > 1e-2
    if weight == "embed":
        assert (logits("sandwich", True) - logits("sandwich", False)).abs().max() > 1e-2


def test_deepnorm_two_ways_are_two_registry_entries_with_their_own_label_and_colour():
    assert placement_model("deepnet") == ("deepnorm", {"deepnorm_formula": "deepnet"})
    assert placement_model("deepnorm") == ("deepnorm", {})  # the config's own formula stands
    assert placement_of("deepnorm", {"deepnorm_formula": "deepnet"}) == "deepnet"
    assert placement_of("deepnorm", {"deepnorm_formula": "mixln"}) == "deepnorm"
    assert placement_of("deepnorm") == "deepnorm"
    labels = {placement_label("deepnorm", model={"deepnorm_formula": f}) for f in ("mixln", "deepnet")}
    assert labels == {"DeepNorm (Mix-LN authors' constants)", "DeepNorm (DeepNet's formula)"}
    assert placement_colour("deepnorm") != placement_colour("deepnorm", model={"deepnorm_formula": "deepnet"})
    assert "deepnet" not in NORMS and "deepnorm" in NORMS  # a variant is not a model norm of its own


def test_the_registry_gives_every_entry_its_own_label_and_colour():
    assert len({p.label for p in PLACEMENTS.values()}) == len(PLACEMENTS)
    assert len({p.colour for p in PLACEMENTS.values()}) == len(PLACEMENTS)
    assert {"lns", "peri", "deepnet"} <= set(PLACEMENTS)
    assert set(NORMS) == {p.norm or n for n, p in PLACEMENTS.items()}


def test_a_deepnet_run_records_its_constants_and_reads_back_as_its_entry(tmp_path):
    from core.mixln.folders import load_run
    from core.mixln.launch import train_run
    from core.mixln.recipe import ASSETS

    meta = train_run(tmp_path / "run", "deepnet", 1.0, dict(vocab_size=512, hidden_size=32, num_layers=2, num_heads=2,
                                                            intermediate_size=48),
                     dict(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, grad_log_every=1),
                     ASSETS / "tokenizer.json", keep_checkpoints=False)
    assert meta["norm"] == "deepnorm" and meta["model"]["deepnorm_formula"] == "deepnet"
    assert meta["settings"]["deepnorm"]["alpha"] == pytest.approx(4 ** 0.25)
    run = load_run(tmp_path / "run")
    assert run.placement == "deepnet" and run.label == "DeepNorm (DeepNet's formula)"
