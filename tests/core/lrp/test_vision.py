"""The project's Vision Mamba and sequence classifier: structure, safetensors round trip, MambaLRP on images."""
import pytest
import torch
from transformers import MambaConfig

from core.errors import BadInputError, ModelLoadError
from core.lrp import MambaSequenceClassifier, VisionMamba, VisionMambaConfig, explain, lrp_rules
from core.lrp.rules import LRPRules

pytestmark = pytest.mark.usefixtures("single_thread")

CFG = VisionMambaConfig(image_size=16, patch_size=4, hidden_size=16, num_layers=2, state_size=4, num_classes=3,
                        use_conv_bias=False)


@pytest.fixture(scope="module")
def vim():
    torch.manual_seed(0)
    model = VisionMamba(CFG).eval()
    with torch.no_grad():
        model.head.bias.zero_()  # a head bias would absorb relevance
    return model


def pixels(seed=0):
    return torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_class_token_sits_in_the_middle(vim):
    assert CFG.num_patches == 16 and CFG.cls_position == 8
    seq = vim.embed(pixels())
    assert seq.shape == (1, 17, 16)
    expected = vim.cls_token[0, 0] + vim.pos_embed[0, 8]
    torch.testing.assert_close(seq[0, 8], expected)


def test_both_scan_directions_reach_the_class_token(vim):
    x = vim.embed(pixels()).requires_grad_(True)
    logit = vim.forward_embeddings(x)[0, 0]
    (g,) = torch.autograd.grad(logit, x)
    per_pos = g.abs().sum(-1)[0]
    assert per_pos[:8].min() > 0 and per_pos[9:].min() > 0  # patches before and after the class token
    # the branches share in_proj/out_proj and have their own SSM parameters
    mixer = vim.layers[0].mixer
    assert not hasattr(mixer, "in_proj_b") and mixer.A_b_log.shape == mixer.A_log.shape


@pytest.mark.parametrize("gamma", [None, 0.0])
def test_mambalrp_on_images_conserves_and_maps_to_the_patch_grid(vim, gamma):
    opts = {} if gamma is None else {"gamma": gamma}  # default for images: LRP-gamma 0.25
    e = explain(vim, pixel_values=pixels(1), **opts)
    assert e.relevance.shape == (4, 4) and e.sequence_relevance.shape == (17,)
    assert e.total == pytest.approx(e.logit, rel=1e-4, abs=1e-5)
    with torch.no_grad():
        assert e.logit == pytest.approx(float(vim(pixels(1))[0, e.target]), rel=1e-6, abs=1e-6)
    patches = torch.cat([e.sequence_relevance[:8], e.sequence_relevance[9:]])
    torch.testing.assert_close(e.relevance.reshape(-1), patches)


def test_default_gamma_for_images_differs_from_lrp0(vim):
    a = explain(vim, pixel_values=pixels(2))
    b = explain(vim, pixel_values=pixels(2), gamma=0.0)
    assert not torch.allclose(a.relevance, b.relevance)


def test_rules_leave_vision_outputs_unchanged(vim):
    x = vim.embed(pixels(3))
    with torch.no_grad():
        ref = vim.forward_embeddings(x)
    with lrp_rules(vim, LRPRules.mambalrp(0.25)):
        out = vim.forward_embeddings(x.clone().requires_grad_(True))
    assert torch.equal(out, ref)
    assert not any("forward" in m.__dict__ for m in vim.modules())


def test_every_method_works_on_images(vim):
    from core.lrp import METHODS

    fast = {"smoothgrad": {"n_samples": 2}, "integrated_gradients": {"n_steps": 4}}
    for name in METHODS:
        e = explain(vim, pixel_values=pixels(4), method=name, target=1, **fast.get(name, {}))
        assert e.relevance.shape == (4, 4) and torch.isfinite(e.relevance).all(), name


def test_wrong_image_size_is_a_bad_input(vim):
    with pytest.raises(BadInputError, match="expects"):
        explain(vim, pixel_values=torch.zeros(1, 3, 20, 20))
    with pytest.raises(BadInputError, match="input_ids"):
        explain(vim, input_ids=torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(BadInputError, match="out of range"):
        explain(vim, pixel_values=pixels(), target=3)


def test_safetensors_round_trip(vim, tmp_path):
    vim.save_pretrained(tmp_path / "vim")
    assert (tmp_path / "vim" / "model.safetensors").is_file()
    loaded = VisionMamba.from_pretrained(tmp_path / "vim")
    assert loaded.config == CFG
    with torch.no_grad():
        assert torch.equal(loaded(pixels()), vim(pixels()))
    torch.manual_seed(0)
    clf = MambaSequenceClassifier(MambaConfig(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1),
                                  num_labels=2).eval()
    clf.save_pretrained(tmp_path / "clf")
    clf2 = MambaSequenceClassifier.from_pretrained(tmp_path / "clf")
    ids = torch.arange(6)[None]
    with torch.no_grad():
        assert torch.equal(clf(ids), clf2(ids))
    with pytest.raises(ModelLoadError):
        VisionMamba.from_pretrained(tmp_path / "clf")
