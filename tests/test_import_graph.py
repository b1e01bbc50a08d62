"""tools/import_graph.py on a hand-made house of a few files: it finds the circle that runs through an import inside a
function, each upward arrow with its line, every function-local import, the imports by a listed name, and the
papers named by hand; the test of the real tree is tests/test_imports.py."""
from __future__ import annotations

import json
import textwrap

import pytest

from tools import import_graph

PAPERS = {"alpha": "Alpha", "beta": "Beta"}

FILES = {
    "app.py": "import ui\n",
    "core/__init__.py": "",
    # shared: a hand list of the papers, an upward arrow inside a function (it closes a circle), a literal
    # import_module of a paper (a second arrow) and gradio in a method (a third)
    "core/shared.py": """\
        PAPERS = ("alpha", "beta")


        def package(tab):
            if tab == "alpha":
                import core.alpha as package
            return package


        def load():
            import importlib
            return importlib.import_module("core.beta.model")


        class Box:
            def show(self):
                import gradio
                return gradio
        """,
    "core/alpha/__init__.py": "from core.alpha.views import ANALYSES\n",
    "core/alpha/views.py": "from core.shared import package\nfrom . import model\n\nANALYSES = {}\n",
    "core/alpha/model.py": "import math\n",
    "core/beta/__init__.py": "",
    "core/beta/model.py": "from ..alpha import model as alpha_model\n",  # relative, sideways
    # the registry may import the papers; its listed import_module is followed
    "core/papers.py": """\
        import importlib

        MODULES = {"alpha": "core.alpha", "beta": "core.beta"}


        def load(name):
            return importlib.import_module(MODULES[name])
        """,
    "kernels/__init__.py": "",
    "kernels/op.py": "def f():\n    from core import shared\n    return shared\n",
    "ui/__init__.py": """\
        import importlib

        TABS = ("ui.tab",)
        for name in TABS:
            importlib.import_module(name)
        """,
    "ui/tab.py": "def build():\n    from app import main\n    return main\n",
    "ui/tabs/alpha/batch.py": 'ID = "alpha-batch"\n',  # a paper's own tab names its paper: not a hand list
    "tools/shot.py": 'SHOTS = {"alpha": "?tab=alpha&example=x"}\n',
    # a deferred import that keeps torch out of import time, and one that keeps nothing out
    "core/heavy.py": "import torch\n\nX = torch\n",
    "core/light.py": "X = 1\n",
    "core/uses.py": "def a():\n    from core.heavy import X\n    return X\n\n\ndef b():\n    from core.light import X\n"
                    "    return X\n",
}


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    """The hand-made house on disk and its report (written and read once for the module's tests)."""
    root = tmp_path_factory.mktemp("house")
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root, import_graph.build(root, PAPERS).report()


def test_finds_the_circle_through_a_function_local_import(house):
    root, r = house
    # the paper's circle, and the one ui/tab.py's upward arrow to app.py closes
    assert [c["files"] for c in r["circles"]] == [["app.py", "ui/__init__.py", "ui/tab.py"],
                                                  ["core/alpha/__init__.py", "core/alpha/views.py", "core/shared.py"]]
    inside = {(i["file"], i["line"], i["local"]) for i in r["circles"][1]["imports"]}
    assert inside == {("core/shared.py", 6, True), ("core/alpha/__init__.py", 1, False),
                      ("core/alpha/views.py", 1, False)}
    # at import time there is no circle: only the deferred imports close them
    assert r["circles_module_level"] == []


def test_finds_each_upward_arrow_with_its_line_and_leaves_the_registry_alone(house):
    root, r = house
    found = sorted((u["rule"], u["file"], u["line"], u["to"] or u["target"]) for u in r["upward"])
    assert found == [("core imports the UI", "core/shared.py", 17, "gradio"),
                     ("kernels import core or the UI", "kernels/op.py", 2, "core/shared.py"),
                     ("shared core imports a paper", "core/shared.py", 6, "core/alpha/__init__.py"),
                     ("shared core imports a paper", "core/shared.py", 12, "core/beta/model.py"),
                     ("ui imports app", "ui/tab.py", 2, "app.py")]
    assert r["summary"]["upward_pairs"] == 5
    # a relative import between two papers is followed (sideways, not upward)
    assert [(s["file"], s["to"]) for s in r["sideways"]] == [("core/beta/model.py", "core/alpha/model.py")]


def test_counts_every_function_local_import_and_follows_listed_names(house):
    root, r = house
    local = r["function_local"]
    # core: shared.py 4 (core.alpha, importlib, gradio in a method, the import_module of a literal), the registry's
    # import_module over MODULES (one statement, two targets), uses.py 2; kernels 1; ui 1
    assert local["by_root"] == {"core": 7, "kernels": 1, "ui": 1} and local["statements"] == 9
    assert local["by_file"]["core/shared.py"] == {"statements": 4, "project": 2}
    sites = [s for s in import_graph.build(root, PAPERS).sites if s.file == "core/papers.py" and s.local]
    assert sorted(s.to for s in sites) == ["core/alpha/__init__.py", "core/beta/__init__.py"]
    ui = [s for s in import_graph.build(root, PAPERS).sites if s.file == "ui/__init__.py" and s.to]
    assert [(s.to, s.local) for s in ui] == [("ui/tab.py", False)]  # a module-level loop over TABS
    assert r["dynamic"] == []


def test_finds_the_function_local_imports_that_buy_no_laziness(house):
    root, r = house
    # core/uses.py's a() keeps torch out of its import time; b() and the others keep nothing out (the registry's own
    # deferred imports of the papers are by design)
    assert sorted((x["file"], x["line"]) for x in r["lazy_without_reason"]) == [
        ("core/shared.py", 6), ("core/shared.py", 12), ("core/uses.py", 7), ("kernels/op.py", 2), ("ui/tab.py", 2)]
    heavy = import_graph.build(root, PAPERS).heavy_at_import()
    assert heavy["core/heavy.py"] == {"torch"} and heavy["core/uses.py"] == set()


def test_finds_the_papers_named_by_hand(house):
    root, r = house
    places = {(h["file"], h["line"], h["kind"], tuple(h["papers"])) for h in r["hand_lists"]}  # the registry aside
    assert places == {("core/shared.py", 1, "tuple", ("alpha", "beta")),
                      ("core/shared.py", 5, "compare", ("alpha",)),
                      ("core/shared.py", 12, "string", ("beta",)),  # the literal of an import_module
                      ("tools/shot.py", 1, "dict keys", ("alpha",))}


def test_the_command_line_prints_words_and_json(house, capsys):
    root, _ = house
    assert import_graph.main(["--root", str(root), "--papers", "alpha=Alpha,beta"]) == 0
    words = capsys.readouterr().out
    assert "circles between files: 2 (6 files)" in words and "core/shared.py:6 (in package): import core.alpha" in words
    assert import_graph.main(["--root", str(root), "--json", "--papers", "alpha,beta"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["circles"] == 2 and doc["summary"]["upward"] == 5
    assert import_graph.main(["--root", str(root / "nowhere")]) == 2
