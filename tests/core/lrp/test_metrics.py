"""Conservation, faithfulness by perturbation, the long-range view and the ground-truth hit rate."""
import numpy as np
import pytest
import torch
from transformers import MambaConfig, MambaForCausalLM

from core.errors import BadInputError
from core.progress import cancellable
from core.lrp import METHODS, MambaSequenceClassifier, Method, explain
from core.lrp.methods import Explanation
from core.lrp.metrics import (conservation, faithfulness, flip_curves, key_token_hit_rate, long_range,
                              top_k_distances)

pytestmark = pytest.mark.usefixtures("single_thread")

@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=40, hidden_size=16, state_size=4, num_hidden_layers=2, use_conv_bias=False)
    return MambaForCausalLM(cfg).eval()


def ids(seed, length=8):
    return torch.randint(0, 40, (1, length), generator=torch.Generator().manual_seed(seed))


def test_flip_curves_start_clean_end_fully_flipped_and_integrate(lm):
    x = ids(0)
    e = explain(lm, x)
    c = flip_curves(lm, e, input_ids=x, steps=4)
    assert c.fractions.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert c.morf[0] == pytest.approx(e.logit, abs=1e-5) and c.lerf[0] == pytest.approx(e.logit, abs=1e-5)
    with torch.no_grad():
        all_zero = lm(inputs_embeds=torch.zeros(1, 8, 16), use_cache=False).logits[0, -1, e.target]
    assert c.morf[-1] == pytest.approx(float(all_zero), abs=1e-5) == c.lerf[-1]
    # two flipped tokens (MoRF): the most relevant two replaced by zeros
    top2 = torch.topk(e.relevance, 2).indices
    emb = lm.backbone.embeddings(x).detach()
    emb[0, top2] = 0
    with torch.no_grad():
        expected = lm(inputs_embeds=emb, use_cache=False).logits[0, -1, e.target]
    assert c.morf[1] == pytest.approx(float(expected), abs=1e-5)
    assert c.area_morf == pytest.approx(float(np.trapezoid(c.morf, c.fractions)))
    assert c.delta == pytest.approx(c.area_lerf - c.area_morf)


def test_flip_curves_baseline_is_configurable(lm):
    x = ids(1)
    e = explain(lm, x)
    zero = flip_curves(lm, e, input_ids=x, steps=2)
    token = flip_curves(lm, e, input_ids=x, steps=2, baseline=0)
    assert zero.morf[0] == pytest.approx(token.morf[0]) and zero.morf[-1] != pytest.approx(token.morf[-1])
    with pytest.raises(BadInputError):
        flip_curves(lm, e, input_ids=x, baseline="nonsense")


def test_conservation_report_per_method(lm):
    samples = [{"input_ids": ids(s)} for s in range(3)]
    report = conservation(lm, samples, methods=["mambalrp", "gradient_x_input"])
    assert len(report["mambalrp"]["sums"]) == 3
    assert report["mambalrp"]["mean_rel_error"] < 1e-4
    assert report["gradient_x_input"]["mean_rel_error"] > 1e-2


def test_faithfulness_runner_reports_delta_and_supports_cancel(lm):
    samples = [{"input_ids": ids(s)} for s in range(2)]
    seen = []
    res = faithfulness(lm, samples, methods=["mambalrp", "random"], steps=4, progress=lambda f, m: seen.append(f))
    assert set(res) == {"mambalrp", "random"} and seen[-1] == pytest.approx(1.0)
    for row in res.values():
        assert row["delta_af"] == pytest.approx(row["mean_area_lerf"] - row["mean_area_morf"])
        assert len(row["morf"]) == 5
    stopped = faithfulness(lm, samples, methods=["mambalrp"], steps=2, progress=cancellable(None, lambda: True))
    assert stopped == {}
    with pytest.raises(BadInputError):
        faithfulness(lm, samples, methods=["nope"])


def test_top_k_distances_and_long_range(lm):
    rel = torch.tensor([5.0, 0.0, 1.0, 4.0])
    assert top_k_distances(rel, 2).tolist() == [3, 0]
    dist = long_range(lm, [{"input_ids": ids(s, 12)} for s in range(2)], methods=["mambalrp"], k=10)
    assert dist["mambalrp"].shape == (20,) and dist["mambalrp"].min() >= 0 and dist["mambalrp"].max() <= 11


def test_key_token_hit_rate_with_an_oracle_and_the_registry(monkeypatch):
    from core.data.synthetic import KEY_NEGATIVE, KEY_POSITIVE, key_token_task

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=16, hidden_size=16, state_size=4, num_hidden_layers=1)
    clf = MambaSequenceClassifier(cfg, num_labels=2).eval()
    records = key_token_task(n=4, seed=0, length=8, vocab_size=16)
    keys = clf.backbone.embeddings.weight[[KEY_NEGATIVE, KEY_POSITIVE]].detach()

    def oracle(adapter, embeds, target, **options):  # relevance 1 where the embedding is a key token's
        hit = (embeds[0, :, None, :] == keys[None]).all(-1).any(-1).float()
        return hit, 0.0, int(target)

    monkeypatch.setitem(METHODS, "oracle", Method("Oracle", oracle, "test only"))
    rates = key_token_hit_rate(clf, records, methods=["oracle", "random"], k=1)
    assert rates["oracle"] == 1.0 and 0.0 <= rates["random"] <= 1.0
    e = explain(clf, torch.tensor([records[0].tokens]), method="oracle", target=records[0].label)
    assert isinstance(e, Explanation) and int(e.relevance.argmax()) == records[0].key_positions[0]
