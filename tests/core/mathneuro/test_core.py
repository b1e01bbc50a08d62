"""MathNeuro method core: scores against a slow re-implementation, selection, methods, interventions, files."""
import math

import pytest
import torch
from torch import nn

import core.mathneuro as mn
from core.errors import BadInputError
from core.mathneuro import lape, methods
from core.mathneuro.interventions import Restore

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_llama(tied: bool = False, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=48,
                      tie_word_embeddings=tied)
    return LlamaForCausalLM(cfg).eval()


def samples(n, length=9, seed=0, low=0, high=64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(low, high, (1, length + i % 3), generator=g) for i in range(n)]


def snapshot(model):
    """Bit patterns of every parameter and buffer, and every module's training flag."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    flags = [m.training for m in model.modules()]
    return state, flags


def assert_same(model, snap):
    state, flags = snap
    now = model.state_dict()
    assert now.keys() == state.keys()
    for k, v in state.items():
        assert now[k].dtype == v.dtype
        assert torch.equal(now[k].view(torch.uint8) if v.dim() else now[k], v.view(torch.uint8) if v.dim() else v), k
    assert [m.training for m in model.modules()] == flags
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


class EmbedLinear(nn.Module):
    """Hand-made model: token embedding (not scored) followed by one linear layer."""

    def __init__(self, emb: torch.Tensor, weight: torch.Tensor):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(emb, freeze=False)
        self.lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(weight)

    def forward(self, ids):
        return self.lin(self.emb(ids))


# ----------------------------------------------------------------------------------------------
# Which layers, scores, accumulation
# ----------------------------------------------------------------------------------------------
def test_scored_linears_untied_and_tied():
    untied = tiny_llama()
    names = list(mn.scored_linears(untied))
    assert "lm_head.weight" in names and "model.layers.1.mlp.down_proj.weight" in names
    assert len(names) == 2 * 7 + 1
    assert not any("embed" in n or "norm" in n for n in names)
    params = dict(untied.named_parameters())
    assert all(n in params for n in names)
    tied = tiny_llama(tied=True)
    assert "lm_head.weight" not in mn.scored_linears(tied) and len(mn.scored_linears(tied)) == 14


def test_statistics_and_masks_come_from_one_list_of_distinct_weights():
    """Statistics and masks are built over one list (:func:`scored_linears`, a tied or repeated weight once, under
    the name of its first appearance, matched by identity): a module that reuses a scored matrix adds no entry, and
    statistics collected on a model whose head is tied never meet an untied twin silently. That twin is what a load
    racing another load produced (issue 22): selection failed with a bare KeyError 'lm_head.weight'; now it names
    the matrices that differ."""
    tied = tiny_llama(tied=True)
    tied.extra_head = tied.lm_head  # the same module under a second name: still one entry
    names = list(mn.scored_linears(tied))
    assert "lm_head.weight" not in names and "extra_head.weight" not in names and len(names) == 14
    stats = mn.collect(tied, samples(3), samples(3, seed=1))
    assert set(stats.math.sums) == set(names) == set(mn.select(tied, stats, 0.1))
    untied = tiny_llama(tied=False)
    for method in ("mathneuro", "wanda", "random"):
        with pytest.raises(BadInputError, match="lm_head.weight"):
            mn.select(untied, stats, 0.1, method)


def test_scores_equal_slow_reimplementation():
    model = tiny_llama()
    data = samples(3)
    # capture every input of every scored linear, per sample, with separate hooks
    captured = {n: [] for n in mn.scored_linears(model)}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: captured[n].append(a[0].detach().clone()))
               for n, m in mn.scored_linears(model).items()]
    with torch.no_grad():
        for ids in data:
            model(ids)
    for h in handles:
        h.remove()
    norms = mn.collect_column_norms(model, data)
    assert norms.samples == 3 and norms.tokens == sum(d.shape[1] for d in data)
    for name, layer in mn.scored_linears(model).items():
        w = layer.weight.detach().double()
        slow = torch.zeros_like(w)
        for x in captured[name]:  # explicit per-sample |W_ij| * ||X_j||_2
            x = x.reshape(-1, w.shape[1]).double()
            for j in range(w.shape[1]):
                slow[:, j] += w[:, j].abs() * math.sqrt(float((x[:, j] ** 2).sum()))
        fast = mn.importance_scores(layer.weight, norms.sums[name])
        assert fast.dtype == torch.float32
        torch.testing.assert_close(fast.double(), slow, rtol=1e-5, atol=1e-6)


class SharedInput(nn.Module):
    """Two linears on one input tensor, modified in place between them (shared-input reuse must notice)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)
        self.c = nn.Linear(4, 2)

    def forward(self, ids):
        x = self.emb(ids)
        y = self.a(x) + self.b(x)
        x.mul_(-2.0)
        return self.c(x), y


def test_column_norms_with_shared_and_in_place_modified_inputs():
    model = SharedInput()
    data = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 4]])]
    norms = mn.collect_column_norms(model, data)
    with torch.no_grad():
        xs = [model.emb(ids)[0] for ids in data]
    expect = sum(x.norm(dim=0) for x in xs)
    torch.testing.assert_close(norms.sums["a.weight"], expect)
    torch.testing.assert_close(norms.sums["b.weight"], expect)
    torch.testing.assert_close(norms.sums["c.weight"], 2 * expect)
    with torch.inference_mode():
        inf = mn.collect_column_norms(model, data)
    torch.testing.assert_close(inf.sums["c.weight"], 2 * expect)


def test_accumulator_is_one_d_in_vector_per_matrix_and_scores_formed_once(monkeypatch):
    model = tiny_llama()
    norms = mn.collect_column_norms(model, samples(5))
    for name, layer in mn.scored_linears(model).items():
        assert norms.sums[name].shape == (layer.in_features,) and norms.sums[name].dtype == torch.float32
    per = mn.collect_column_norms(model, samples(5), per_sample=True)
    assert all(per.sums[n].shape == (5, v.shape[0]) for n, v in norms.sums.items())
    torch.testing.assert_close(per.subset(range(5)).sums["lm_head.weight"], norms.sums["lm_head.weight"])

    # identify forms scores only after all forward passes, once per matrix and dataset
    passes, calls = [], []
    model.register_forward_pre_hook(lambda m, a: passes.append(1))
    real = methods.importance_scores
    monkeypatch.setattr(methods, "importance_scores",
                        lambda w, c: (calls.append((len(passes), tuple(c.shape))), real(w, c))[1])
    mn.identify(model, samples(4), samples(3, seed=1), 0.1)
    assert len(calls) == 2 * len(mn.scored_linears(model))
    assert all(p == 7 for p, _ in calls)  # after the 4 + 3 forward passes
    assert all(len(shape) == 1 for _, shape in calls)


def test_wanda_masks_are_top_share_of_each_matrix():
    model = tiny_llama()
    data = samples(3)
    k = 0.13
    masks = mn.identify(model, data, samples(2, seed=3), k, method="wanda")
    norms = mn.collect_column_norms(model, data)
    for name, layer in mn.scored_linears(model).items():
        m = masks[name]
        assert m.dtype == torch.bool and m.shape == layer.weight.shape
        assert int(m.sum()) == int(m.numel() * k)
        s = mn.importance_scores(layer.weight, norms.sums[name])
        assert s[m].min() >= s[~m].max()


# ----------------------------------------------------------------------------------------------
# Methods
# ----------------------------------------------------------------------------------------------
def hand_made():
    weight = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    emb = torch.tensor([[3.0, 1.0, 0.0, 0.0],    # token 0: "math"
                        [1.0, 0.0, 0.0, 2.0]])   # token 1: "non-math"
    return EmbedLinear(emb, weight)


def test_mathneuro_is_math_topk_minus_nonmath_topk_hand_made():
    model = hand_made()
    math_in, non_in = [torch.tensor([[0]])], [torch.tensor([[1]])]
    # math scores |W| * [3,1,0,0]:   [[3,2,0,0],[12,3,0,0],[3,1,0,0]] -> top 3: (1,0)=12, then ties of 3 at
    #   flat 0, 5, 8 -> lowest indices (0,0), (1,1)
    # non-math |W| * [1,0,0,2]:      [[1,0,0,8],[4,0,0,2],[1,0,0,2]]  -> (0,3)=8, (1,0)=4, tie of 2 at 7, 11 -> (1,3)
    wanda = torch.zeros(3, 4, dtype=torch.bool)
    wanda[1, 0] = wanda[0, 0] = wanda[1, 1] = True
    expected = wanda.clone()
    expected[1, 0] = False
    got = mn.identify(model, math_in, non_in, 0.25)
    assert list(got) == ["lin.weight"]
    assert torch.equal(got["lin.weight"], expected)
    assert torch.equal(mn.identify(model, math_in, non_in, 0.25, method="wanda")["lin.weight"], wanda)
    rnd = mn.identify(model, math_in, non_in, 0.25, method="random")["lin.weight"]
    assert int(rnd.sum()) == int(expected.sum())


def test_random_has_mathneuro_counts_and_is_seeded():
    model = tiny_llama()
    a, b = samples(3), samples(3, seed=5)
    ref = mn.identify(model, a, b, 0.2)
    r0 = mn.identify(model, a, b, 0.2, method="random", seed=0)
    r0b = mn.identify(model, a, b, 0.2, method="random", seed=0)
    r1 = mn.identify(model, a, b, 0.2, method="random", seed=1)
    for n in ref:
        assert int(r0[n].sum()) == int(ref[n].sum())
        assert torch.equal(r0[n], r0b[n])
    assert any(not torch.equal(r0[n], r1[n]) for n in ref if 0 < int(ref[n].sum()) < ref[n].numel())


def test_registry_lists_all_methods_and_identify_contract():
    assert set(mn.METHODS) == {"mathneuro", "wanda", "random", "lape"}
    model = tiny_llama()
    names = list(mn.scored_linears(model))
    params = dict(model.named_parameters())
    for method in mn.METHODS:
        masks = mn.identify(model, samples(2), samples(2, seed=1), 0.1, method=method)
        assert list(masks) == names
        assert all(m.dtype == torch.bool and m.shape == params[n].shape for n, m in masks.items())
    # statistics are collected once and reused for several K
    stats = mn.collect(model, samples(2), samples(2, seed=1))
    assert torch.equal(mn.select(model, stats, 0.1)["lm_head.weight"],
                       mn.identify(model, samples(2), samples(2, seed=1), 0.1)["lm_head.weight"])


def _counts(rates_math, rates_non, tokens=20):
    """Firing counts whose per-token probabilities are the given rates (tokens chosen so they are exact)."""
    return (lape.FiringCounts({"mlp": torch.tensor([round(r * tokens) for r in rates_math])}, tokens=tokens),
            lape.FiringCounts({"mlp": torch.tensor([round(r * tokens) for r in rates_non])}, tokens=tokens))


def test_lape_neuron_entropy_hand_made():
    ent = lape.neuron_entropy(torch.tensor([1.0, 0.5, 0.0, 0.2]), torch.tensor([0.0, 0.5, 0.0, 0.9]))
    p = 0.2 / 1.1
    torch.testing.assert_close(ent[:2], torch.tensor([0.0, math.log(2)]))
    assert math.isinf(ent[2]) and ent[3] == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)))


def test_lape_selection_follows_the_authors_definition_by_hand():
    """Ten neurons, two datasets; the answer worked out by hand from LAPE.py's activation():
    sorted, the 20 probabilities are 0 0 0 0 .05 .1 .1 .1 .2 .2 .3 .3 .4 .5 .5 .6 .6 .8 .9 .9."""
    rm = [0.9, 0.5, 0.0, 0.2, 0.8, 0.1, 0.3, 0.1, 0.0, 0.6]
    rn = [0.0, 0.5, 0.0, 0.9, 0.4, 0.1, 0.2, 0.3, 0.05, 0.6]
    m, n = _counts(rm, rn)
    probs = torch.tensor([rm, rn]).T
    assert lape.kth_smallest(probs, 0.75) == pytest.approx(0.5)     # round(0.75 * 20) = 15th smallest
    assert lape.kth_smallest(probs, 0.95) == pytest.approx(0.9)     # 19th smallest
    # filter 0.75: only neurons with a probability > 0.5 stay: 0 (H 0), 3 (H 0.474), 4 (H 0.637), 9 (H ln 2).
    # K = 0.3 takes round(3) = 3 of lowest entropy: 0, 3, 4; the bar (0.5) keeps those with p_math > 0.5: 0, 4.
    got = lape.math_neurons(m, n, 0.3, filter_rate=0.75, activation_bar_ratio=0.75)["mlp"]
    assert got.nonzero().flatten().tolist() == [0, 4]
    # a lower bar (0.1, the 6th smallest = 0.1) lets neuron 3 in too (p_math 0.2 > 0.1)
    got = lape.math_neurons(m, n, 0.3, filter_rate=0.75, activation_bar_ratio=0.3)["mlp"]
    assert got.nonzero().flatten().tolist() == [0, 3, 4]
    # the authors' defaults (0.95): the bar is 0.9 and nothing is above it, so no neuron is math
    assert not lape.math_neurons(m, n, 0.3)["mlp"].any()
    # without the filter (rate 0.05 keeps every neuron that fires above the 1st smallest, 0) neuron 8 (0 vs
    # 0.05, entropy 0) is taken before 3 and 4, and is not math
    got = lape.math_neurons(m, n, 0.3, filter_rate=0.05, activation_bar_ratio=0.75)["mlp"]
    assert got.nonzero().flatten().tolist() == [0]


def test_lape_defaults_are_the_authors_and_reach_the_registry():
    assert (lape.FILTER_RATE, lape.ACTIVATION_BAR_RATIO) == (0.95, 0.95)
    assert mn.METHODS["lape"].options == {"filter_rate": 0.95, "activation_bar_ratio": 0.95}
    rm = [1.0] + [0.1] * 9                       # one clear outlier: above the 19th smallest (0.1)
    rn = [0.0] + [0.1] * 9
    m, n = _counts(rm, rn)
    assert lape.math_neurons(m, n, 0.1)["mlp"].nonzero().flatten().tolist() == [0]
    with pytest.raises(BadInputError, match="filter_rate"):
        lape.math_neurons(m, n, 0.1, filter_rate=1.5)


def test_lape_counts_and_masks_follow_neurons():
    model = tiny_llama()
    data = samples(2)
    counts = lape.collect_firing_counts(model, data)
    for i, layer in enumerate(model.model.layers):  # slow count from captured gate outputs
        outs = []
        h = layer.mlp.gate_proj.register_forward_hook(lambda m, a, o: outs.append(o))
        with torch.no_grad():
            for ids in data:
                model(ids)
        h.remove()
        slow = sum((layer.mlp.act_fn(o) > 0).reshape(-1, o.shape[-1]).sum(0) for o in outs)
        assert torch.equal(counts.positive[f"model.layers.{i}.mlp"], slow)
    stats = mn.collect(model, data, samples(2, seed=9, high=8), "lape")
    neurons = lape.math_neurons(stats.math, stats.nonmath, 0.3, filter_rate=0.5, activation_bar_ratio=0.5)
    masks = mn.select(model, stats, 0.3, "lape", options={"filter_rate": 0.5, "activation_bar_ratio": 0.5})
    assert torch.equal(masks["model.layers.0.mlp.down_proj.weight"],
                       mn.identify(model, data, samples(2, seed=9, high=8), 0.3, method="lape",
                                   options={"filter_rate": 0.5, "activation_bar_ratio": 0.5})[
                           "model.layers.0.mlp.down_proj.weight"])
    for i in range(2):
        pre = f"model.layers.{i}."
        cols = neurons[f"model.layers.{i}.mlp"]
        assert torch.equal(masks[pre + "mlp.down_proj.weight"], cols[None, :].expand(16, -1))
        assert not masks[pre + "mlp.gate_proj.weight"].any() and not masks[pre + "mlp.up_proj.weight"].any()
        assert not masks[pre + "self_attn.q_proj.weight"].any()
    assert sum(int(masks[f"model.layers.{i}.mlp.down_proj.weight"].all(0).sum()) for i in range(2)) > 0
    with pytest.raises(BadInputError, match="no option"):
        mn.select(model, stats, 0.3, "lape", options={"bar": 0.5})


def test_lape_scaling_through_masks_is_the_authors_activation_scaling():
    """LAPE.py multiplies act_fn(gate_proj(x))[..., j] of each math neuron by a scalar; scaling the masked
    down_proj columns by the same scalar gives the same logits (prune: scalar 0)."""
    from core.mathneuro.interventions import intervened
    model = tiny_llama()
    data = samples(2)
    stats = mn.collect(model, data, samples(2, seed=9, high=8), "lape")
    opts = {"filter_rate": 0.5, "activation_bar_ratio": 0.5}
    masks = mn.select(model, stats, 0.3, "lape", options=opts)
    neurons = lape.math_neurons(stats.math, stats.nonmath, 0.3, **opts)
    assert sum(int(v.sum()) for v in neurons.values()) > 0
    ids = data[0]
    for scalar in (0.0, 1.7):
        handles = []
        for i, layer in enumerate(model.model.layers):
            cols = neurons[f"model.layers.{i}.mlp"]

            def hook(module, args, output, cols=cols):
                out = output.clone()
                out[..., cols] = out[..., cols] * scalar
                return out
            assert isinstance(layer.mlp.act_fn, nn.Module)
            handles.append(layer.mlp.act_fn.register_forward_hook(hook))
        with torch.no_grad():
            authors = model(ids).logits
        for h in handles:
            h.remove()
        mode = ("prune", None) if scalar == 0 else ("scale", scalar)
        with torch.no_grad(), intervened(model, masks, *mode) as view:
            ours = view(ids).logits
        torch.testing.assert_close(ours, authors, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# Bad input never modifies the model
# ----------------------------------------------------------------------------------------------
def test_bad_inputs_give_clear_errors_and_leave_model_untouched():
    model = tiny_llama()
    model.train()
    model.model.layers[0].eval()  # mixed flags must come back exactly
    snap = snapshot(model)
    good = samples(2)
    bad_cases = [
        dict(math_inputs=[], nonmath_inputs=good, proportion=0.1),
        dict(math_inputs=good, nonmath_inputs=iter(()), proportion=0.1),
        dict(math_inputs=good, nonmath_inputs=good, proportion=0.0),
        dict(math_inputs=good, nonmath_inputs=good, proportion=1.5),
        dict(math_inputs=good, nonmath_inputs=good, proportion=float("nan")),
        dict(math_inputs=good, nonmath_inputs=good, proportion=True),
        dict(math_inputs=good, nonmath_inputs=good, proportion=0.1, method="nope"),
        dict(math_inputs=good, nonmath_inputs=[torch.randint(0, 64, (1, 49))], proportion=0.1),  # > context 48
        dict(math_inputs=good, nonmath_inputs=[torch.randint(0, 64, (2, 5))], proportion=0.1),
        dict(math_inputs=good, nonmath_inputs=[torch.tensor([[1, 64]])], proportion=0.1),
        dict(math_inputs=good, nonmath_inputs=[torch.rand(1, 4)], proportion=0.1),
    ]
    for case in bad_cases:
        with pytest.raises(BadInputError) as err:
            mn.identify(model, **case)
        assert err.value.message
        assert_same(model, snap)
    # over-long texts are fine when truncation is asked for
    masks = mn.identify(model, good, [torch.randint(0, 64, (1, 60))], 0.1, max_length=48)
    assert len(masks) == 15
    assert_same(model, snap)
    with pytest.raises(BadInputError, match="no linear layers"):
        mn.identify(nn.Sequential(nn.Embedding(5, 3), nn.LayerNorm(3)), good, good, 0.1)


def test_cancel_from_progress_removes_hooks_and_restores_flags():
    model = tiny_llama()
    model.train()
    snap = snapshot(model)

    heard = []

    def progress(fraction, message):  # core.progress.Progress: the one shape
        heard.append((fraction, message))
        if message == "math samples 2/4":
            raise KeyboardInterrupt("cancelled")
    with pytest.raises(KeyboardInterrupt):
        mn.identify(model, samples(4), samples(4), 0.1, progress=progress)
    assert_same(model, snap)
    assert heard == [(0.125, "math samples 1/4"), (0.25, "math samples 2/4")]  # math is the first half


# ----------------------------------------------------------------------------------------------
# Interventions and files
# ----------------------------------------------------------------------------------------------
def some_masks(model):
    return mn.identify(model, samples(2), samples(2, seed=1), 0.2)


@pytest.mark.parametrize("mode,factor", [("prune", None), ("scale", 1.1), ("scale", -3.7)])
def test_intervention_applies_and_restores_bit_exact(mode, factor):
    model = tiny_llama()
    masks = some_masks(model)
    snap = snapshot(model)
    with mn.intervened(model, masks, mode, factor) as view:
        params = dict(view.named_parameters())
        mult = 0.0 if mode == "prune" else factor
        for name, mask in masks.items():
            before = snap[0][name]
            assert torch.equal(params[name][mask], before[mask] * mult)
            assert torch.equal(params[name][~mask], before[~mask])
        assert any(mask.any() for mask in masks.values())
        assert_same(model, snap)  # the shared model is never written, not even inside the block
    assert_same(model, snap)
    # the in-place variant (for a model nobody else uses) writes the same values and restores them exactly
    undo = mn.apply_intervention(model, masks, mode, factor)
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    undo.restore()
    assert_same(model, snap)


def test_model_untouched_after_errors_mid_intervention(monkeypatch):
    model = tiny_llama()
    masks = some_masks(model)
    snap = snapshot(model)
    # an error inside the block
    with pytest.raises(RuntimeError):
        with mn.intervened(model, masks, "scale", 2.0) as _view:
            raise RuntimeError("evaluation failed")
    assert_same(model, snap)
    # an error half-way through applying (third matrix)
    real = Restore.record
    calls = []

    def failing(self, param, mask):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return real(self, param, mask)
    monkeypatch.setattr(Restore, "record", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        mn.apply_intervention(model, masks, "prune")
    monkeypatch.setattr(Restore, "record", real)
    assert_same(model, snap)
    # bad masks or factors are refused before anything changes
    bad = dict(masks)
    bad["model.layers.1.mlp.up_proj.weight"] = torch.ones(3, 3, dtype=torch.bool)
    for args in [(bad, "prune", None), ({**masks, "nope.weight": masks["lm_head.weight"]}, "prune", None),
                 (masks, "scale", float("inf")), (masks, "scale", float("nan")), (masks, "scale", None),
                 (masks, "shrink", 0.5)]:
        with pytest.raises(BadInputError):
            with mn.intervened(model, *args) as _view:
                pass
        assert_same(model, snap)


def test_intervened_copy_and_checkpoint(tmp_path):
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM
    model = tiny_llama()
    masks = some_masks(model)
    snap = snapshot(model)
    clone = mn.intervened_copy(model, masks, "prune")
    assert_same(model, snap)
    w = dict(clone.named_parameters())["lm_head.weight"]
    assert (w[masks["lm_head.weight"]] == 0).all()
    out = mn.save_checkpoint(clone, tmp_path / "pruned")
    reloaded = LlamaForCausalLM.from_pretrained(out)
    for k, v in clone.state_dict().items():
        assert torch.equal(reloaded.state_dict()[k], v), k
    # the in-place variant saves the same weights and restores the model
    out2 = mn.save_intervened_checkpoint(model, masks, tmp_path / "pruned2", "prune")
    assert_same(model, snap)
    a, b = load_file(str(out / "model.safetensors")), load_file(str(out2 / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a plain module gets a bare safetensors file
    plain = hand_made()
    mn.save_checkpoint(plain, tmp_path / "plain")
    assert torch.equal(load_file(str(tmp_path / "plain" / "model.safetensors"))["lin.weight"], plain.lin.weight)


def test_masks_save_load_round_trip(tmp_path):
    model = tiny_llama()
    masks = some_masks(model)
    path = mn.save_masks(masks, tmp_path / "masks" / "m.safetensors", {"method": "mathneuro", "proportion": 0.2})
    loaded = mn.load_masks(path, model)
    assert loaded.keys() == masks.keys()
    assert all(loaded[n].dtype == torch.bool and torch.equal(loaded[n], masks[n]) for n in masks)
    assert mn.mask_metadata(path) == {"method": "mathneuro", "proportion": "0.2"}
    assert [p.name for p in path.parent.iterdir()] == ["m.safetensors"]  # no temporary left behind
    with pytest.raises(BadInputError):
        mn.load_masks(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BadInputError):
        mn.load_masks(tmp_path / "junk.safetensors")
    with pytest.raises(BadInputError):
        mn.load_masks(path, hand_made())
