"""MambaLRP through explain(): conservation, unchanged forward values, the model left as it was, bad input."""
import pytest
import torch
from transformers import MambaConfig, MambaForCausalLM, MambaModel

from core.errors import BadInputError
from core.lrp import METHODS, LRPRules, MambaSequenceClassifier, explain, lrp_rules

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB, LENGTH = 48, 10


def tiny_config(conv_bias=False, layers=2):
    return MambaConfig(vocab_size=VOCAB, hidden_size=16, state_size=4, num_hidden_layers=layers, expand=2,
                       conv_kernel=4, use_conv_bias=conv_bias)


def tiny_lm(conv_bias=False, seed=0):
    torch.manual_seed(seed)
    return MambaForCausalLM(tiny_config(conv_bias)).eval()


def ids(seed=0, length=LENGTH):
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def _rel_close(a, b, tol=1e-4):
    return abs(a - b) <= tol * max(1.0, abs(b))


@pytest.mark.parametrize("gamma", [0.0, 0.25])
def test_mambalrp_conserves_the_logit_without_biases(lm, gamma):
    for seed in range(3):
        e = explain(lm, ids(seed), method="mambalrp", gamma=gamma)
        assert e.relevance.shape == (LENGTH,)
        assert _rel_close(e.total, e.logit), (e.total, e.logit)
        assert abs(e.absorbed) < 1e-4 * max(1.0, abs(e.logit))


def test_explained_logit_is_the_raw_logit_of_the_target_at_the_last_position(lm):
    x = ids(1)
    with torch.no_grad():
        logits = lm(x, use_cache=False).logits[0, -1]
    e = explain(lm, x)
    assert e.target == int(logits.argmax())
    assert e.logit == pytest.approx(float(logits.max()), rel=1e-6, abs=1e-6)
    e7 = explain(lm, x, target=7)
    assert e7.target == 7 and e7.logit == pytest.approx(float(logits[7]), rel=1e-6, abs=1e-6)


def test_conservation_for_bare_backbone_and_classifier():
    torch.manual_seed(1)
    backbone = MambaModel(tiny_config()).eval()
    e = explain(backbone, ids(2), target=3)
    assert _rel_close(e.total, e.logit)
    clf = MambaSequenceClassifier(tiny_config(), num_labels=3, head_bias=False).eval()
    e = explain(clf, ids(3), target=2)
    assert e.target == 2 and _rel_close(e.total, e.logit)
    with torch.no_grad():
        assert e.logit == pytest.approx(float(clf(ids(3))[0, 2]), rel=1e-6, abs=1e-6)


def test_conv_bias_absorbs_relevance_and_is_reported():
    lm_b = tiny_lm(conv_bias=True)
    with torch.no_grad():
        for layer in lm_b.backbone.layers:
            layer.mixer.conv1d.bias.normal_(0, 0.5)
    e = explain(lm_b, ids(4))
    assert e.total + e.absorbed == pytest.approx(e.logit)
    assert abs(e.absorbed) > 1e-3


def test_switching_rules_off_breaks_conservation(lm):
    x = ids(5)
    full = explain(lm, x)
    for rule in ("silu", "ssm", "gate", "norm"):
        e = explain(lm, x, **{rule: False})
        assert not torch.allclose(e.relevance, full.relevance, atol=1e-6), rule
        assert e.logit == pytest.approx(full.logit)
    # with every rule off it is plain gradient x input, which does not conserve
    plain = explain(lm, x, rules=LRPRules.none())
    assert not _rel_close(plain.total, full.logit, 1e-2)
    gxi = explain(lm, x, method="gradient_x_input")
    torch.testing.assert_close(plain.relevance, gxi.relevance)


@pytest.mark.parametrize("biases", [False, True])
def test_rules_leave_forward_values_unchanged(lm, biases):
    if biases:  # conv bias and in_proj/out_proj biases
        torch.manual_seed(4)
        cfg = tiny_config(conv_bias=True)
        cfg.use_bias = True
        lm = MambaForCausalLM(cfg).eval()
        with torch.no_grad():
            for p in lm.parameters():
                if p.dim() == 1 and p.abs().sum() == 0:
                    p.normal_(0, 0.3)
    x = ids(6)
    emb = lm.backbone.embeddings(x).detach()
    with torch.no_grad():
        reference = lm(inputs_embeds=emb, use_cache=False).logits
    for rules in (LRPRules.mambalrp(), LRPRules.mambalrp(0.25), LRPRules.ln_only(), LRPRules.none()):
        inp = emb.clone().requires_grad_(True)
        with lrp_rules(lm, rules):
            out = lm(inputs_embeds=inp, use_cache=False).logits
        assert torch.equal(out, reference), rules


def _snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {name: (m.training, "forward" in m.__dict__) for name, m in model.named_modules()})


def test_model_is_restored_after_explain_and_after_an_error():
    model = tiny_lm(seed=3).train()  # training mode must survive too
    x = ids(7)
    state, flags = _snapshot(model)
    with torch.no_grad():
        before = model(x, use_cache=False).logits
    for name in METHODS:
        explain(model, x, method=name, **({"n_samples": 2} if name == "smoothgrad" else {}),
                **({"n_steps": 4} if name == "integrated_gradients" else {}))
    with pytest.raises(RuntimeError):
        with lrp_rules(model, LRPRules.mambalrp()):
            raise RuntimeError("boom")
    state2, flags2 = _snapshot(model)
    assert flags2 == flags and all(m.training for m in model.modules())
    assert state2.keys() == state.keys() and all(torch.equal(state[k], state2[k]) for k in state)
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        after = model(x, use_cache=False).logits
    assert torch.equal(before, after)


def test_every_registered_method_returns_one_finite_value_per_token(lm):
    x = ids(8)
    fast = {"smoothgrad": {"n_samples": 4}, "integrated_gradients": {"n_steps": 8}}
    for name in METHODS:
        e = explain(lm, x, method=name, target=5, **fast.get(name, {}))
        assert e.relevance.shape == (LENGTH,) and torch.isfinite(e.relevance).all(), name
        assert e.target == 5 and e.method == name
    r1 = explain(lm, x, method="random", seed=1).relevance
    assert torch.equal(r1, explain(lm, x, method="random", seed=1).relevance)
    for name in ("attention_rollout", "mamba_attr"):
        roll = explain(lm, x, method=name).relevance  # a row of a product of row-stochastic matrices
        assert roll.sum() == pytest.approx(1.0, abs=1e-5) and (roll >= 0).all()


def test_integrated_gradients_is_complete(lm):
    x = ids(9)
    e = explain(lm, x, method="integrated_gradients", n_steps=64)
    with torch.no_grad():
        zero = lm(inputs_embeds=torch.zeros(1, LENGTH, 16), use_cache=False).logits[0, -1, e.target]
    assert e.total == pytest.approx(e.logit - float(zero), rel=0.05, abs=0.05)


def test_bad_input_raises_a_clear_error(lm):
    with pytest.raises(BadInputError, match="empty"):
        explain(lm, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(BadInputError, match="Unknown method"):
        explain(lm, ids(), method="shap")
    with pytest.raises(BadInputError, match="out of range"):
        explain(lm, ids(), target=VOCAB)
    with pytest.raises(BadInputError, match="out of range"):
        explain(lm, ids(), target=-1)
    with pytest.raises(BadInputError, match="Mamba"):
        explain(torch.nn.Linear(3, 3), ids())
    with pytest.raises(BadInputError, match="pixel_values"):
        explain(lm, pixel_values=torch.zeros(1, 3, 8, 8))
    with pytest.raises(BadInputError, match="Token ids"):
        explain(lm, torch.tensor([[VOCAB + 5]]))
    with pytest.raises(BadInputError, match="Unknown option"):
        explain(lm, ids(), method="gradient_x_input", bogus=1)
    with pytest.raises(BadInputError):
        explain(lm, ids(), target=1.5)
    with pytest.raises(BadInputError, match="gamma"):
        explain(lm, ids(), gamma=-0.5)


_KERNEL_IN_RECOMPUTE = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from transformers import MambaConfig, MambaForCausalLM
import kernels.dispatch as dispatch
import core.lrp.methods as methods
from core.lrp import explain
methods.RECOMPUTE_ABOVE_BYTES = 0                     # every mixer recomputed in the backward (checkpointing)
torch.manual_seed(0)
model = MambaForCausalLM(MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, state_size=4, expand=2,
                                     conv_kernel=4, use_bias=False, use_conv_bias=False)).eval()
ids = torch.randint(0, 64, (1, 8))
twin = explain(model, input_ids=ids)                  # CPU tensors: the PyTorch twins
dispatch.device_eligible = lambda tensors: bool(tensors)  # now the CPU stands in for a GPU: kernels + self-checks
got = explain(model, input_ids=ids)
print(json.dumps({"logit": got.logit, "sum": float(got.relevance.sum()),
                  "diff": float((got.relevance - twin.relevance).abs().max()),
                  "checked": sorted(k[0] for k in dispatch.self_check_results())}))
"""


@pytest.mark.slow
def test_a_kernel_self_check_inside_a_recomputed_mixer_does_not_deadlock(tmp_path):
    """The GPU deadlock, reproduced on the CPU: the first explanation with activation checkpointing asks for the scan
    kernel's self-check inside the checkpointed forward; the check's backward must not recompute the mixer through the
    caller's hooks and wait for itself. It returns in seconds, conserving the logit, with the kernels' relevance."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    script = tmp_path / "recompute.py"
    script.write_text(_KERNEL_IN_RECOMPUTE)
    try:
        out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120,
                             env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail("explain() with a self-check inside a recomputed mixer did not return within 120 s (deadlock)")
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert abs(r["sum"] - r["logit"]) <= 1e-5 * abs(r["logit"])
    assert r["diff"] <= 1e-4 and "selective_scan_lrp" in r["checked"]
