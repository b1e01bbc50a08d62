"""The paper registry (core/papers.py, issue 44): the papers are listed once, and a fifth paper is one entry there (plus
its package and its tab): the command line, the links' examples, batch runs, the site's titles and the app's tab list
all find it."""
from __future__ import annotations

import types

import pytest

from core import papers
from core.analyses import Example
from core.batch import BatchKind, Column
from core.errors import BadInputError
from core.results import Result


def _toy_package() -> types.ModuleType:
    """A paper package with the face every paper has: ANALYSES, analysis_result, EXAMPLE_VIEWS, BATCH."""
    pkg = types.ModuleType("toy_paper")

    def show(progress=None, **values):
        return Result(data={"answer": 42}, status="the toy's answer", source="precomputed")

    pkg.ANALYSES = {}
    pkg.analysis_result = lambda name, *a, **k: None
    pkg.EXAMPLE_VIEWS = (Example("answer", "The toy's answer", "answer", show=show),)
    pkg.BATCH = BatchKind("toy", "toy", "the toy's answer", "text", lambda **raw: dict(raw),
                          lambda s: [Column("answer", "int32", "the answer")], lambda s, progress=None: (None, {}),
                          lambda ctx, text, s, progress=None: ({"answer": 42}, "computed"),
                          lambda p: None, lambda args: {})
    return pkg


@pytest.fixture
def toy(monkeypatch):
    pkg = _toy_package()
    cli = types.ModuleType("toy_paper.cli")
    registered = []

    def register(groups):
        registered.append(True)
        groups.command("toy", "answer", "print the toy's answer", lambda p: None)(lambda args: print(42))
    cli.register = register
    entry = papers.Paper("toy", "Toy Paper", "Toy Paper: a fifth paper in one entry", lambda: pkg, lambda: cli)
    monkeypatch.setattr(papers, "PAPERS", [*papers.PAPERS, entry])
    import core.examples as ex

    monkeypatch.setattr(ex, "_registry", {})
    return types.SimpleNamespace(package=pkg, registered=registered)


def test_the_four_papers_are_listed_once_with_their_titles():
    assert papers.names() == ("lrp", "mathneuro", "mixln", "neuzip")
    assert papers.titles() == {"lrp": "MambaLRP", "mathneuro": "MathNeuro", "mixln": "Mix-LN", "neuzip": "NeuZip"}
    with pytest.raises(BadInputError, match="no paper 'nope'.*lrp, mathneuro, mixln, neuzip"):
        papers.paper("nope")


def test_a_fifth_paper_is_one_entry(toy):
    """The toy entry reaches the CLI (its group listed, its commands registered only when it is run), the links'
    examples, batch runs, the site's titles and the app's tab list."""
    import core.examples as ex
    from core.cli import build_registry
    from core.site import paper_titles

    assert "toy" in ex.PAPERS
    assert [e.name for e in ex.examples("toy")] == ["answer"]
    opened = ex.resolve({"tab": "toy", "example": "answer"}, {t: t for t in ex.PAPERS})
    assert opened.view.tab == "toy" and opened.view.example.name == "answer"
    assert "toy" in build_registry().groups
    assert toy.registered == []  # listed, not imported
    build_registry("toy")
    assert toy.registered == [True]
    assert papers.batch_kind("toy") is toy.package.BATCH and "toy" in papers.batch_kinds()
    assert paper_titles()["toy"] == "Toy Paper"

    ui = pytest.importorskip("ui")
    assert ui.tab_modules()[-1] == "ui.tabs.toy"


def test_model_cards_name_the_papers_classes_through_the_registry():
    """The zoo (below the papers) reads the classes a card may name from core.model_classes, which core.papers
    fills: the same four names, each loading its paper's class."""
    from core.model_classes import MODEL_CLASSES

    assert set(MODEL_CLASSES) == {"core.lrp:MambaSequenceClassifier", "core.lrp:SequenceClassifier",
                                  "core.lrp:VisionMamba", "core.mixln:MixLNForCausalLM"}
    assert MODEL_CLASSES["core.mixln:MixLNForCausalLM"]().__name__ == "MixLNForCausalLM"
