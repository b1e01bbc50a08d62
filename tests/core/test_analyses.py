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


def test_the_schema_travels_on_the_analysis(tmp_path, fresh_cache):
    """``find`` checks what its :class:`Analysis` says a stored result holds (no registry keyed by another name): a
    committed example that misses a field of the analysis' schema is computed instead; without the schema it is
    served as it is."""
    from core.analyses import find
    from core.runner import ExampleStore
    from core.schema import Int, Rec

    entry = {"model": "toy", "fingerprint": "fp-toy", "analysis": "toy/count", "params": {}, "data": {"m": 1}}
    store = ExampleStore(ExampleStore.write(tmp_path / "examples.json", [entry]))
    status = lambda d, shown: "a toy"  # noqa: E731
    strict = {"count": Analysis(_Request, status, lambda r, p: {"count": 1}, stored_as="toy/count",
                                schema=Rec({"count": Int}))}
    loose = {"count": Analysis(_Request, status, lambda r, p: {"count": 1}, stored_as="toy/count")}
    found = find(strict, "count", _Request("toy"), examples=store)
    assert (found.source, found.data) == ("computed", {"count": 1})
    fresh_cache.clear()
    found = find(loose, "count", _Request("toy"), examples=store)
    assert (found.source, found.data) == ("precomputed", {"m": 1})
