"""The Mix-LN decoder: placements against their formulas, Pre-LN against transformers' Llama,
hidden states, save/load, config validation and the Mix-LN boundary floor(alpha * L)."""
import json
import math

import pytest
import torch

from core.errors import BadInputError, ModelLoadError
from core.mixln import NORMS, MixLNConfig, MixLNForCausalLM, estimate_memory_bytes
from core.mixln.model import rotary_cos_sin


pytestmark = pytest.mark.usefixtures("single_thread")


def tiny(norm="pre", layers=2, **kw):
    base = dict(vocab_size=50, hidden_size=32, num_layers=layers, num_heads=4, intermediate_size=48, norm=norm)
    base.update(kw)
    return MixLNConfig(**base)


def _randomise_norms(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))


def _ids(b=2, t=9, vocab=50, seed=0):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def _n(v, w, eps):
    """RMSNorm written out."""
    return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("kv_heads,tied", [(4, False), (2, True)])
def test_pre_ln_matches_transformers_llama(kv_heads, tied):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = MixLNForCausalLM(tiny("pre", num_kv_heads=kv_heads, tie_word_embeddings=tied)).eval()
    _randomise_norms(model)
    llama = LlamaForCausalLM(model.to_llama_config()).eval()
    llama.load_state_dict(model.state_dict(), strict=True)
    ids = _ids()
    ours = model(ids, labels=ids, output_hidden_states=True)
    theirs = llama(ids, labels=ids, output_hidden_states=True)
    torch.testing.assert_close(ours.logits, theirs.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, atol=1e-6, rtol=1e-6)
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3
    for a, b in zip(ours.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", ["pre", "post", "deepnorm", "sandwich"])
def test_one_layer_placement_matches_formula(norm):
    torch.manual_seed(1)
    model = MixLNForCausalLM(tiny(norm, layers=1)).eval()
    _randomise_norms(model)
    ids = _ids()
    layer, eps = model.model.layers[0], model.config.rms_norm_eps
    cos, sin = rotary_cos_sin(model.config, ids.shape[1], "cpu", torch.float32)
    attn = lambda v: layer.self_attn(v, cos, sin)  # noqa: E731
    mlp = layer.mlp
    w = {name: mod.weight for name, mod in layer.named_children() if name.endswith("layernorm")}
    x = model.model.embed_tokens(ids)
    if norm == "pre":          # h = x + Attn(N(x)); y = h + MLP(N(h))
        h = x + attn(_n(x, w["input_layernorm"], eps))
        y = h + mlp(_n(h, w["post_attention_layernorm"], eps))
    elif norm == "post":       # h = N(x + Attn(x)); y = N(h + MLP(h))
        h = _n(x + attn(x), w["post_attention_layernorm"], eps)
        y = _n(h + mlp(h), w["post_feedforward_layernorm"], eps)
    elif norm == "deepnorm":   # h = N(a x + Attn(x)); y = N(a h + MLP(h)), a = 2 sqrt(2) (the Mix-LN authors')
        a = 2 * 2 ** 0.5
        h = _n(a * x + attn(x), w["post_attention_layernorm"], eps)
        y = _n(a * h + mlp(h), w["post_feedforward_layernorm"], eps)
    else:                      # x + N(F(N(x)))
        h = x + _n(attn(_n(x, w["input_layernorm"], eps)), w["post_attention_layernorm"], eps)
        y = h + _n(mlp(_n(h, w["pre_feedforward_layernorm"], eps)), w["post_feedforward_layernorm"], eps)
    expected = model.lm_head(_n(y, model.model.norm.weight, eps))
    out = model(ids, output_hidden_states=True)
    torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.hidden_states[1], _n(y, model.model.norm.weight, eps), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("alpha,layers,k", [(0.25, 8, 2), (0.25, 4, 1), (0.2, 4, 0), (0.5, 3, 1), (0.0, 5, 0),
                                            (1.0, 5, 5), (0.29, 100, 29), (0.7, 10, 7), (0.999, 4, 3)])
def test_mix_ln_boundary_is_floor_alpha_times_layers(alpha, layers, k):
    config = tiny("mix", layers=layers, post_ln_ratio=alpha)
    assert config.num_post_ln_layers == k == math.floor(round(alpha * layers, 9))
    assert config.layer_norms() == ["post"] * k + ["pre"] * (layers - k)
    if layers <= 10:
        model = MixLNForCausalLM(config)
        for i, layer in enumerate(model.model.layers):
            assert layer.placement == ("post" if i < k else "pre")
            assert hasattr(layer, "input_layernorm") == (i >= k)          # Pre-LN norms the branch input
            assert hasattr(layer, "post_feedforward_layernorm") == (i < k)  # Post-LN norms after the add


def test_mix_ln_layers_behave_as_post_then_pre():
    torch.manual_seed(2)
    mix = MixLNForCausalLM(tiny("mix", layers=4, post_ln_ratio=0.5)).eval()
    ids = _ids()
    states = mix(ids, output_hidden_states=True).hidden_states
    cos, sin = rotary_cos_sin(mix.config, ids.shape[1], "cpu", torch.float32)
    eps = mix.config.rms_norm_eps
    for i, layer in enumerate(mix.model.layers):
        x = states[i]
        if i < 2:
            h = _n(x + layer.self_attn(x, cos, sin), layer.post_attention_layernorm.weight, eps)
            y = _n(h + layer.mlp(h), layer.post_feedforward_layernorm.weight, eps)
            # a Post-LN layer's output has unit RMS (norm weights are ones at init)
            torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(y.shape[:2]), atol=1e-4, rtol=0)
        else:
            h = x + layer.self_attn(_n(x, layer.input_layernorm.weight, eps), cos, sin)
            y = h + layer.mlp(_n(h, layer.post_attention_layernorm.weight, eps))
        if i + 1 < 4:
            torch.testing.assert_close(states[i + 1], y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", NORMS)
def test_hidden_states_count_shape_and_chain(norm):
    torch.manual_seed(3)
    model = MixLNForCausalLM(tiny(norm, layers=3)).eval()
    ids = _ids(b=2, t=7)
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == 4
    assert all(h.shape == (2, 7, 32) for h in out.hidden_states)
    assert out.logits.shape == (2, 7, 50)
    embedded = model.model.embed_tokens(ids)
    if norm == "peri":  # Peri-LN normalises the embedding output: the first state is after that norm
        embedded = model.model.embed_norm(embedded)[0]
    torch.testing.assert_close(out.hidden_states[0], embedded)
    cos, sin = rotary_cos_sin(model.config, 7, "cpu", torch.float32)
    for i in range(2):
        torch.testing.assert_close(model.model.layers[i](out.hidden_states[i], cos, sin), out.hidden_states[i + 1])
    last = model.model.layers[2](out.hidden_states[2], cos, sin)
    torch.testing.assert_close(model.model.norm(last)[0], out.hidden_states[3])
    torch.testing.assert_close(model.lm_head(out.hidden_states[3]), out.logits)
    assert model(ids).hidden_states is None


def test_right_padding_does_not_change_real_tokens():
    torch.manual_seed(6)
    model = MixLNForCausalLM(tiny("mix", layers=2, post_ln_ratio=0.5)).eval()
    ids = _ids(b=2, t=8)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    padded = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(padded[0], model(ids[:1]).logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded[1, :5], model(ids[1:, :5]).logits[0], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(padded).all()
    left = torch.ones(1, 8, dtype=torch.long)
    left[0, :3] = 0
    assert torch.isfinite(model(ids[:1], attention_mask=left).logits).all()   # no NaN from all-padding rows


def test_loss_is_shifted_next_token_cross_entropy_and_ignores_minus_100():
    model = MixLNForCausalLM(tiny()).eval()
    ids = _ids(b=1, t=6)
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    logp = out.logits.log_softmax(-1)[0]
    picks = [-logp[t, ids[0, t + 1]] for t in range(5) if t + 1 != 3]
    torch.testing.assert_close(out.loss, torch.stack(picks).mean())


@pytest.mark.parametrize("norm,tied", [("mix", False), ("sandwich", True), ("deepnorm", False)])
def test_save_load_round_trip_is_bit_exact(tmp_path, norm, tied):
    torch.manual_seed(4)
    model = MixLNForCausalLM(tiny(norm, layers=4, tie_word_embeddings=tied)).eval()
    _randomise_norms(model)
    model.save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert saved["norm"] == norm and saved["num_layers"] == 4 and saved["model_type"] == "mixln"
    loaded = MixLNForCausalLM.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == model.config
    ids = _ids()
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    for (k, a), (k2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    if tied:
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


def test_load_from_wrong_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        MixLNForCausalLM.from_pretrained(tmp_path)


def _xavier_std(lin, gain):
    fan_out, fan_in = lin.weight.shape
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


@pytest.mark.parametrize("layers", [4, 12, 24])
def test_deepnorm_constants_follow_the_mix_ln_authors_code(layers):
    """pixeli99/MixLN, NORM_TYPE=deeppost: residual x 2.8284271247461903 at every depth; v, o and the MLP
    Xavier-normal with gain (8L)^(1/4); q and k Xavier-normal with gain 1; the rest N(0, 0.02)."""
    config = tiny("deepnorm", layers=layers, hidden_size=64, intermediate_size=128, num_heads=4)
    assert config.deepnorm_formula == "mixln"
    assert config.deepnorm_alpha == 2.8284271247461903 == pytest.approx(8 ** 0.5)
    assert config.deepnorm_gain == pytest.approx((8 * layers) ** 0.25)
    model = MixLNForCausalLM(config)
    for layer in model.model.layers:
        assert layer.residual_scale == config.deepnorm_alpha
    weights = {n: torch.cat([getattr(getattr(l, part), n).weight.flatten() for l in model.model.layers])
               for part, names in (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
                                   ("mlp", ("gate_proj", "up_proj", "down_proj"))) for n in names}
    layer = model.model.layers[0]
    gain = (8 * layers) ** 0.25
    for name, g in (("q_proj", 1.0), ("k_proj", 1.0), ("v_proj", gain), ("o_proj", gain)):
        assert weights[name].std().item() == pytest.approx(_xavier_std(getattr(layer.self_attn, name), g), rel=0.05)
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert weights[name].std().item() == pytest.approx(_xavier_std(getattr(layer.mlp, name), gain), rel=0.05)
    assert model.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("layers", [4, 24])
def test_deepnorm_constants_of_the_deepnet_paper(layers):
    """DeepNet (Wang et al. 2022), decoder-only: a = (2L)^(1/4), Xavier gain b = (8L)^(-1/4) on v, o and MLP."""
    config = tiny("deepnorm", layers=layers, hidden_size=64, intermediate_size=128, num_heads=4,
                  deepnorm_formula="deepnet")
    assert config.deepnorm_alpha == pytest.approx((2 * layers) ** 0.25)
    assert config.deepnorm_gain == pytest.approx((8 * layers) ** -0.25)
    model = MixLNForCausalLM(config)
    v = torch.cat([l.self_attn.v_proj.weight.flatten() for l in model.model.layers])
    q = torch.cat([l.self_attn.q_proj.weight.flatten() for l in model.model.layers])
    lin = model.model.layers[0].self_attn.v_proj
    assert v.std().item() == pytest.approx(_xavier_std(lin, (8 * layers) ** -0.25), rel=0.05)
    assert q.std().item() == pytest.approx(_xavier_std(lin, 1.0), rel=0.05)
    assert model.model.layers[0].residual_scale == pytest.approx((2 * layers) ** 0.25)
    with pytest.raises(BadInputError, match="DeepNorm formula"):
        tiny("deepnorm", deepnorm_formula="deepnorm2")


def test_embedding_init_std_is_its_own_setting():
    torch.manual_seed(0)
    model = MixLNForCausalLM(tiny("pre", hidden_size=64, intermediate_size=128, num_heads=4,
                                  embedding_init_std=(2 / 5) ** 0.5))
    assert model.model.embed_tokens.weight.std().item() == pytest.approx((2 / 5) ** 0.5, rel=0.05)
    assert model.model.layers[0].self_attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    default = MixLNForCausalLM(tiny("pre", hidden_size=64, intermediate_size=128, num_heads=4))
    assert default.model.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)
    with pytest.raises(BadInputError, match="embedding_init_std"):
        tiny("pre", embedding_init_std=-1.0)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_alpha_outside_unit_interval_is_rejected(alpha):
    with pytest.raises(BadInputError) as err:
        tiny("mix", post_ln_ratio=alpha)
    assert "[0, 1]" in err.value.message and err.value.fix


@pytest.mark.parametrize("kw", [dict(norm="layer"), dict(hidden_size=30), dict(num_layers=0), dict(num_heads=5),
                                dict(num_kv_heads=3)])
def test_bad_configs_are_rejected(kw):
    with pytest.raises(BadInputError):
        tiny(**kw)


def test_model_too_large_for_memory_is_rejected_before_allocating():
    config = MixLNConfig(vocab_size=50000, hidden_size=16384, num_layers=400, num_heads=128,
                         intermediate_size=65536)
    assert estimate_memory_bytes(config) > 1e12
    with pytest.raises(BadInputError, match="GiB") as err:
        MixLNForCausalLM(config)
    assert "fewer layers" in err.value.fix


def test_parameter_count_formula_matches_model():
    for norm, tied in [("pre", False), ("sandwich", True), ("mix", False)]:
        config = tiny(norm, layers=3, tie_word_embeddings=tied, num_kv_heads=2)
        assert MixLNForCausalLM(config).num_parameters() == config.num_parameters()


@pytest.mark.parametrize("norm", ["mix", "deepnorm", "sandwich"])
def test_model_through_triton_kernels_matches_reference(monkeypatch, norm):
    """What CUDA training runs: every norm through the fused Triton op (interpreted on CPU here)."""
    import kernels.rmsnorm as rk
    if rk.triton is None:
        pytest.skip("triton not installed")
    torch.manual_seed(7)
    model = MixLNForCausalLM(tiny(norm, layers=2, post_ln_ratio=0.5))
    _randomise_norms(model)
    ids = _ids(b=2, t=6)

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        out = model(ids, labels=ids)
        out.loss.backward()
        return out.loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}

    ref_loss, ref_grads = loss_and_grads()
    calls = []
    real = rk.add_rmsnorm_triton
    monkeypatch.setattr(rk, "use_triton", lambda *t, kernel: True)
    monkeypatch.setattr(rk, "add_rmsnorm_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    tri_loss, tri_grads = loss_and_grads()
    assert len(calls) == 2 * (2 if norm != "sandwich" else 4) + 1
    torch.testing.assert_close(tri_loss, ref_loss, atol=1e-5, rtol=1e-5)
    for k in ref_grads:
        torch.testing.assert_close(tri_grads[k], ref_grads[k], atol=1e-5, rtol=1e-4, msg=k)


def test_every_field_a_placement_sets_has_its_default_in_the_registry():
    """placements.py answers a saved run's missing config field from MODEL_DEFAULTS (it cannot import the config,
    which imports it): every field a variant sets is there, equal to MixLNConfig's default."""
    import dataclasses

    from core.mixln.config import MixLNConfig
    from core.mixln.placements import MODEL_DEFAULTS, PLACEMENTS

    fields = {f.name: f.default for f in dataclasses.fields(MixLNConfig)}
    set_by_variants = {k for p in PLACEMENTS.values() for k, _ in (p.model or ())}
    assert set_by_variants and set_by_variants <= set(MODEL_DEFAULTS)
    assert all(MODEL_DEFAULTS[k] == fields[k] for k in MODEL_DEFAULTS)
