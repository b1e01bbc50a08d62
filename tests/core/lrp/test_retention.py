"""Faithfulness at equal retention (core.lrp.retention): every method keeps the same expected share, only the order
of its relevances matters, and on a model that reads one position alone the explanation that ranks it first wins."""
import contextlib

import numpy as np
import pytest
import torch
from torch import nn

from core.errors import BadInputError
from core.lrp import retention
from core.lrp.methods import Explanation
from core.lrp.metrics import concentration


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_every_row_keeps_exactly_its_expected_share_and_follows_the_order(n):
    rel = torch.randn(n, generator=torch.Generator().manual_seed(n))
    grid = [0.05, 0.3, 0.5, 0.9]
    for first in (True, False):
        p = retention.keep_probabilities(rel, grid, most_relevant_first=first)
        assert p.shape == (4, n) and p.dtype == torch.float64
        np.testing.assert_allclose(p.mean(1).numpy(), grid, rtol=0, atol=1e-12)
        order = torch.argsort(rel, descending=first, stable=True)
        assert bool((p[:, order].diff(dim=1) <= 1e-15).all())  # first in the order kept most


def test_only_the_ranks_count_not_the_scale():
    """A method cannot buy retention with larger scores: any increasing transform of its relevances keeps the
    probabilities; ties go in position order; a small softness is the hard top-k."""
    rel = torch.tensor([0.3, -2.0, 5.0, 0.1, 0.0])
    p = retention.keep_probabilities(rel, [0.4])
    torch.testing.assert_close(p, retention.keep_probabilities(1000 * rel.exp() + 3, [0.4]), rtol=0, atol=0)
    flat = retention.keep_probabilities(torch.zeros(4), [0.5])
    assert bool((flat.diff(dim=1) < 0).all())
    hard = retention.keep_probabilities(torch.arange(10.0), [0.3], softness=1e-3)
    torch.testing.assert_close(hard, torch.tensor([[0.0] * 7 + [1.0] * 3], dtype=torch.float64), rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad", [[0.0], [1.0], [1.2]])
def test_a_share_outside_zero_one_is_refused(bad):
    with pytest.raises(BadInputError):
        retention.keep_probabilities(torch.ones(3), bad)


class _OnePosition(nn.Module):
    """A two-class 'model' over embeddings (1, L, H) whose logit reads position ``j`` alone."""

    def __init__(self, j: int):
        super().__init__()
        self.j = j

    def forward(self, embeds):
        s = embeds[:, self.j].sum(-1)
        return torch.stack([s, -s], dim=-1)


class _Adapter:
    kind = "classifier"

    def __init__(self, model, embeds):
        self.model, self._embeds = model, embeds

    def embed(self, input_ids, pixel_values):
        return self._embeds

    def unit_positions(self, length):
        return torch.arange(length)

    def logits(self, embeds):
        return self.model(embeds)


@pytest.fixture
def one_position(monkeypatch):
    embeds = torch.full((1, 6, 8), 0.5, dtype=torch.float64)
    model = _OnePosition(j=4)
    monkeypatch.setattr(retention, "adapter_for", lambda m: _Adapter(m, embeds))
    monkeypatch.setattr(retention, "lrp_rules", lambda model, rules: contextlib.nullcontext())
    return model


def _explanation(relevance):
    rel = torch.as_tensor(relevance, dtype=torch.float64)
    return Explanation(relevance=rel, logit=0.0, target=0, method="test", sequence_relevance=rel)


def test_the_explanation_that_ranks_the_read_position_first_is_the_faithful_one(one_position):
    right = retention.retention_scores(one_position, _explanation([0, 1, 2, 3, 9, 4]), seed=3)
    wrong = retention.retention_scores(one_position, _explanation([9, 8, 7, 6, 0, 5]), seed=3)
    assert right.defined and wrong.defined and right.p_full == wrong.p_full and right.p_empty == wrong.p_empty
    assert right.pi_soft_nc > wrong.pi_soft_nc + 0.3 and right.pi_soft_ns > wrong.pi_soft_ns + 0.3
    assert all(a >= b for a, b in zip(right.nc, wrong.nc)) and all(a >= b for a, b in zip(right.ns, wrong.ns))
    # the normalisation: nothing kept scores NS 0, everything removed NC 1, per the formulas
    d0 = right.p_full - right.p_empty
    assert right.nc == pytest.approx([max(0.0, right.p_full - q) / d0 for q in right.q_comprehensiveness])
    assert right.ns == pytest.approx([(d0 - max(0.0, right.p_full - q)) / d0 for q in right.q_sufficiency])


def test_sufficiency_of_an_order_is_comprehensiveness_of_its_reverse_under_the_same_draws(one_position):
    rel = [0.2, 1.5, -0.3, 0.9, 2.2, 0.0]
    a = retention.retention_scores(one_position, _explanation(rel), seed=5)
    b = retention.retention_scores(one_position, _explanation([-x for x in rel]), seed=5)
    assert a.q_sufficiency == b.q_comprehensiveness and a.q_comprehensiveness == b.q_sufficiency
    c = retention.retention_scores(one_position, _explanation(rel), seed=6)
    assert c.q_sufficiency != a.q_sufficiency  # another seed, other masks


def test_an_input_whose_prediction_needs_nothing_has_no_normalised_score(monkeypatch):
    embeds = torch.zeros((1, 4, 3), dtype=torch.float64)  # all-zero input: removing everything changes nothing
    monkeypatch.setattr(retention, "adapter_for", lambda m: _Adapter(m, embeds))
    monkeypatch.setattr(retention, "lrp_rules", lambda model, rules: contextlib.nullcontext())
    r = retention.retention_scores(_OnePosition(1), _explanation([1, 2, 3, 4]))
    assert not r.defined and r.nc is None and r.pi_soft_ns is None


def test_concentration_of_a_relevance_map():
    off, eff = concentration(torch.tensor([0.0, 0.0, 3.0]), explained=2)
    assert off == 0.0 and eff == 1.0
    off, eff = concentration(torch.tensor([1.0, -1.0, 1.0, 1.0]), explained=3)
    assert off == pytest.approx(0.75) and eff == pytest.approx(4.0)
    assert concentration(torch.zeros(3), explained=0) == (None, None)
