"""Layer diagnostics: angular distance known answers, the heatmap layout, layer removal with an
identity layer, per-layer gradient norms against autograd done by hand; on the Mix-LN model and on a
transformers Llama."""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from core.errors import BadInputError
from core.mixln import (MixLNConfig, MixLNForCausalLM, angular_distance, angular_distance_heatmap, evaluate_loss,
                        find_decoder_layers, hidden_states_of, layer_gradient_norms, layer_removal,
                        mean_angular_distance, skip_layer)


pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_model(norm="pre", layers=3, seed=0):
    torch.manual_seed(seed)
    return MixLNForCausalLM(MixLNConfig(vocab_size=40, hidden_size=16, num_layers=layers, num_heads=2,
                                        intermediate_size=32, norm=norm)).eval()


def ids(n=4, t=8, seed=0):
    return torch.randint(0, 40, (n, t), generator=torch.Generator().manual_seed(seed))


def states(*vectors):
    """Each vector becomes a hidden state (1, 1, D)."""
    return [torch.tensor(v, dtype=torch.float32).view(1, 1, -1) for v in vectors]


def make_identity(layer):
    """A Pre-LN layer whose attention and MLP outputs are zero is exactly the identity."""
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()


# ---- angular distance -------------------------------------------------------------------------

def test_angular_distance_known_answers():
    d = angular_distance(states([1, 0, 0], [0, 2, 0], [3, 0, 0], [-1, 0, 0], [1, math.sqrt(3), 0]))
    assert d.shape == (5, 5)
    assert d[0, 1] == pytest.approx(0.5, abs=1e-6)       # orthogonal
    assert d[0, 2] == pytest.approx(0.0, abs=1e-6)       # same direction, other length
    assert d[0, 3] == pytest.approx(1.0, abs=1e-6)       # opposite
    assert d[0, 4] == pytest.approx(1 / 3, abs=1e-6)     # 60 degrees
    assert d[1, 3] == pytest.approx(0.5, abs=1e-6)
    assert torch.equal(d, d.t()) and torch.all(d.diagonal() == 0)


def test_angular_distance_picks_the_position_and_averages_the_batch():
    # batch of 2, 2 positions: at the last position sample 0 is identical, sample 1 opposite -> mean 0.5
    a = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]])
    b = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [-1.0, 0.0]]])
    assert angular_distance([a, b])[0, 1] == pytest.approx(0.5, abs=1e-6)
    # first position: sample 0 orthogonal (0.5), sample 1 identical (0) -> 0.25
    assert angular_distance([a, b], position=0)[0, 1] == pytest.approx(0.25, abs=1e-6)
    # all tokens: (0.5 + 0 + 0 + 1) / 4
    assert angular_distance([a, b], position=None)[0, 1] == pytest.approx(0.375, abs=1e-6)


def test_heatmap_layout_and_scaling():
    d = torch.tensor([[0.0, 0.1, 0.3, 0.6], [0.1, 0.0, 0.2, 0.4], [0.3, 0.2, 0.0, 0.5], [0.6, 0.4, 0.5, 0.0]])
    hm = angular_distance_heatmap(d)
    assert hm.block_sizes == [1, 2, 3] and hm.first_layers == [0, 1, 2]
    for n in (1, 2, 3):
        for l in range(3):
            if l + n <= 3:
                assert hm.raw[n - 1, l] == d[l, l + n]
            else:
                assert math.isnan(hm.raw[n - 1, l]) and math.isnan(hm.scaled[n - 1, l])
    torch.testing.assert_close(hm.scaled[0], torch.tensor([0.0, 0.25, 1.0]))   # (0.1, 0.2, 0.5) -> [0, 1]
    torch.testing.assert_close(hm.scaled[1, :2], torch.tensor([0.0, 1.0]))     # (0.3, 0.4)
    g = angular_distance_heatmap(d, scale="global").scaled
    assert g[2, 0] == pytest.approx(1.0) and g[0, 0] == pytest.approx(0.0)     # 0.6 is max, 0.1 is min


def test_mean_angular_distance_on_model_and_identity_layer():
    model = tiny_model(layers=3)
    make_identity(model.model.layers[1])
    d = mean_angular_distance(model, ids(), batch_size=3)
    assert d.shape == (4, 4)
    assert d[1, 2] == pytest.approx(0.0, abs=1e-4)     # layer 1 is identity: its input equals its output
    assert d[0, 1] > 1e-3
    # averaging over batches of 3 and 1 equals the one-batch answer
    torch.testing.assert_close(d, angular_distance(model(ids(), output_hidden_states=True).hidden_states))


# ---- layer removal ----------------------------------------------------------------------------

def test_layer_removal_identity_layer_costs_nothing_and_model_is_restored():
    model = tiny_model(layers=3)
    make_identity(model.model.layers[1])
    tokens = ids()
    before = model(tokens).logits
    originals = list(model.model.layers)
    calls = []
    result = layer_removal(model, tokens, batch_size=2, progress=lambda f, m: calls.append((f, m)))
    assert result.loss_increase[1] == pytest.approx(0.0, abs=1e-6)
    assert abs(result.loss_increase[0]) > 1e-4 and abs(result.loss_increase[2]) > 1e-4
    assert result.baseline_loss == pytest.approx(evaluate_loss(model, tokens))
    assert result.perplexities[0] == pytest.approx(math.exp(result.losses[0]))
    assert calls == [(pytest.approx(k / 3), f"skipped layer {k}/3") for k in (1, 2, 3)]
    assert list(model.model.layers) == originals and torch.equal(model(tokens).logits, before)


def test_skip_layer_restores_after_an_error():
    model = tiny_model(layers=2)
    original = model.model.layers[0]
    with pytest.raises(RuntimeError):
        with skip_layer(model, 0):
            assert model.model.layers[0] is not original
            raise RuntimeError("boom")
    assert model.model.layers[0] is original
    with pytest.raises(BadInputError):
        with skip_layer(model, 5):
            pass


def _llama_twin(model):
    from transformers import LlamaForCausalLM
    llama = LlamaForCausalLM(model.to_llama_config()).eval()
    llama.load_state_dict(model.state_dict())
    return llama


def test_layer_removal_on_transformers_llama_matches_our_pre_ln_twin():
    model = tiny_model("pre", layers=3, seed=1)
    make_identity(model.model.layers[2])
    llama = _llama_twin(model)
    assert find_decoder_layers(llama) is llama.model.layers
    tokens = ids(seed=1)
    ours, theirs = layer_removal(model, tokens), layer_removal(llama, tokens)
    assert theirs.loss_increase[2] == pytest.approx(0.0, abs=1e-6)
    for a, b in zip(ours.losses, theirs.losses):
        assert a == pytest.approx(b, abs=1e-5)
    assert all(isinstance(m, type(llama.model.layers[0])) for m in llama.model.layers)  # restored


# ---- gradient norms ---------------------------------------------------------------------------

def _norms_by_hand(model, tokens):
    model.zero_grad(set_to_none=True)
    out = model(tokens, labels=tokens, output_hidden_states=True)
    for h in out.hidden_states:
        h.retain_grad()
    out.loss.backward()
    layers = find_decoder_layers(model)
    param = [math.sqrt(sum(float(p.grad.pow(2).sum()) for p in layer.parameters())) for layer in layers]
    inputs = [float(out.hidden_states[i].grad.norm()) for i in range(len(layers))]
    model.zero_grad(set_to_none=True)
    return param, inputs


@pytest.mark.parametrize("norm", ["post", "mix"])
def test_layer_gradient_norms_match_autograd_by_hand(norm):
    model = tiny_model(norm, layers=4)
    tokens = ids()
    got = layer_gradient_norms(model, tokens)
    assert all(p.grad is None for p in model.parameters())   # the model's .grad is left alone
    param, inputs = _norms_by_hand(model, tokens)
    assert got.param == pytest.approx(param, rel=1e-5) and got.input == pytest.approx(inputs, rel=1e-5)
    assert len(got.param) == len(got.input) == 4 and all(v > 0 for v in got.param)


def test_layer_gradient_norms_on_transformers_llama_match_twin():
    model = tiny_model("pre", layers=2, seed=2)
    llama = _llama_twin(model)
    tokens = ids(seed=2)
    a, b = layer_gradient_norms(model, tokens), layer_gradient_norms(llama, tokens)
    assert a.param == pytest.approx(b.param, rel=1e-4) and a.input == pytest.approx(b.input, rel=1e-4)
    assert a.loss == pytest.approx(b.loss, rel=1e-6)


# ---- bad input --------------------------------------------------------------------------------

class _NoHiddenStates(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])
        self.emb = nn.Embedding(10, 4)

    def forward(self, input_ids, **kwargs):
        return SimpleNamespace(logits=self.emb(input_ids), hidden_states=None)


def test_model_without_hidden_states_is_a_clear_error():
    with pytest.raises(BadInputError, match="hidden states"):
        hidden_states_of(_NoHiddenStates(), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(BadInputError, match="hidden states"):
        layer_gradient_norms(_NoHiddenStates(), torch.zeros(1, 3, dtype=torch.long))


def test_empty_corpus_is_a_clear_error():
    model = tiny_model()
    with pytest.raises(BadInputError, match="empty"):
        evaluate_loss(model, torch.zeros(0, 8, dtype=torch.long))
    with pytest.raises(BadInputError, match="empty"):
        layer_removal(model, [])
