"""core.analyses: a known answer of the one answer() path, without loading a model."""
from __future__ import annotations

from dataclasses import dataclass

from core.analyses import Analysis, answer


@dataclass(frozen=True)
class _Request:
    model: str

    @classmethod
    def parse(cls, model):
        return cls(model)

    def key(self):
        return self.model, "fp-toy", {}


def test_a_named_result_stored_without_its_model_is_checked_as_it_is_shown(fresh_cache):
    """A named analysis whose data leaves the model out (NeuZip's bit fields are stored so) is checked, served and
    cached with the name it is shown with: the check does not refuse it for the missing name."""
    calls = []

    def compute(request, progress):
        calls.append(request)
        return {"n": 3}

    registry = {"toy": Analysis(_Request, lambda d, shown: f"{d['n']} of {d['model']} ({shown.source_text})",
                                compute, stored_as="toy/named", named=True)}
    first = answer(registry, "toy", _Request("some/model"))
    again = answer(registry, "toy", _Request("other-name"))
    assert first.status == "3 of some/model (computed now)" and first.data == {"model": "some/model", "n": 3}
    assert (again.source, again.data["model"], len(calls)) == ("cache", "other-name", 1)
