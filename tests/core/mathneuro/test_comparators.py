"""The MathNeuro comparators' limits: a non-math score at chance, at the ceiling or beyond uniform guessing cannot
show a side effect, and the charts and status say so (hand-made cases, and the committed examples)."""
import math

import pytest

from core.data.records import MultipleChoice
from core.mathneuro import figures
from core.mathneuro.service import EXAMPLES
from core.mathneuro.views import view
from core.runner import Found
from core.mathneuro.tasks import limitation, reference_levels


class FakeTokenizer:
    def __len__(self):
        return 637


def test_reference_levels_by_hand():
    two = MultipleChoice(question="q", choices=("a", "b"), answer=0, subject="s", passage=None)
    four = MultipleChoice(question="q", choices=("a", "b", "c", "d"), answer=0, subject="s", passage=None)
    assert reference_levels("accuracy", [two, four], FakeTokenizer()) == {"chance": pytest.approx(37.5)}
    assert reference_levels("loss", [two], FakeTokenizer()) == {"uniform_loss": pytest.approx(math.log(637))}


def test_limitation_by_hand():
    assert "ceiling" in limitation("accuracy", 100.0, {"chance": 50.0})
    assert "chance" in limitation("accuracy", 52.0, {"chance": 50.0})
    assert limitation("accuracy", 80.0, {"chance": 50.0}) is None          # room both ways: a usable comparator
    assert "ln V = 6.46" in limitation("loss", 17.8, {"uniform_loss": math.log(637)})
    assert limitation("loss", 3.0, {"uniform_loss": math.log(637)}) is None
    assert limitation("loss", 17.8, {}) is None                            # no level known: nothing claimed


def _example(analysis):
    entry = next((e for e in EXAMPLES.entries(f"mathneuro-{analysis}")), None)
    if entry is None:
        pytest.skip("no committed MathNeuro examples")
    return entry["data"]


def test_committed_effect_marks_the_comparators_limits():
    data = _example("effect")
    assert "levels" in data, "stale examples: python -m core mathneuro precompute"
    fig = figures.effect_figure(data)
    notes = [a.text for a in fig.layout.annotations if a.text.startswith("Comparator limit")]
    shapes = [s for s in fig.layout.shapes if s.line.dash == "dot"]
    expected = [nm for nm in data["params"]["nonmath"]
                if limitation(data["metrics"][nm], data["before"][nm], data["levels"][nm])]
    assert len(notes) == len(expected) and len(shapes) >= len(expected)
    status = view("effect", Found(data, "precomputed", "")).status
    for nm in expected:
        assert nm in status.split("Limits of the comparators:")[1]
    levels = data["levels"]
    for nm in data["params"]["nonmath"]:  # the levels recorded are the ones the metric implies
        assert set(levels[nm]) == ({"chance"} if data["metrics"][nm] == "accuracy" else {"uniform_loss"})
