"""Public mode (issue 38): a reference to anything the server does not list gets one message, the same whatever it
names, and nothing on the server is looked at to give it; local mode still opens folders.

The app-level version (every endpoint of a running ``app.py --public``) is ``tests/fuzz/test_public_app.py``.
"""
from __future__ import annotations

import builtins
import io
import os
import shutil
from pathlib import Path

import pytest

from core.errors import BadInputError, ModelLoadError, NotOffered
from core.paths import ASSETS_DIR
from core.zoo.hub import PAPER_CHECKPOINTS, PUBLIC_REFUSAL


@pytest.fixture
def public(monkeypatch):
    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    monkeypatch.delenv("LAYERWISE_HUB_MODELS", raising=False)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, str]:
    """Server paths of every kind: a file, a folder, a folder holding a model that loads, a run folder, a missing
    path, traversal and absolute strings."""
    import transformers  # noqa: F401  (imported before the file system is watched: its imports stat a lot)

    from core.zoo import load_model
    load_model("mathneuro-tiny")
    root = tmp_path_factory.mktemp("planted")
    (root / "secret.txt").write_text("not for visitors\n")
    (root / "folder").mkdir()
    shutil.copytree(ASSETS_DIR / "models" / "mathneuro-tiny", root / "model")
    shutil.copytree(ASSETS_DIR / "mixln" / "pre-ln", root / "run", ignore=shutil.ignore_patterns("seed-*"))
    return {"file": str(root / "secret.txt"), "folder": str(root / "folder"), "model": str(root / "model"),
            "run": str(root / "run"), "missing": str(root / "nothing-here"), "traversal": "../../../../../etc/passwd",
            "dots": "../" * 12 + str(root / "model").lstrip("/"), "absolute": "/etc", "home": "~",
            "hub-shaped": "etc/passwd", "assets": "assets/models", "run-traversal": "../../../" + str(root / "run"),
            "root": str(root)}


@pytest.fixture
def watched(monkeypatch, planted):
    """Every stat, listing and open of a path under the planted folder (or naming ``/etc``), recorded."""
    seen = []
    roots = (planted["root"], os.path.realpath(planted["root"]), "/etc")

    def spy(fn, name):
        def wrapped(path, *args, **kwargs):
            text = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if text and any(text == r or text.startswith(r + "/") for r in roots):
                seen.append((name, text))
            return fn(path, *args, **kwargs)
        return wrapped

    for mod, name in ((os, "stat"), (os, "lstat"), (os, "listdir"), (os, "scandir"), (os, "open"),
                      (builtins, "open"), (io, "open")):
        monkeypatch.setattr(mod, name, spy(getattr(mod, name), f"{mod.__name__}.{name}"))
    return seen


REFS = ("file", "folder", "model", "run", "missing", "traversal", "dots", "absolute", "home", "hub-shaped",
        "assets", "run-traversal")


def test_every_server_path_gets_the_same_message_and_nothing_is_looked_at(public, planted, watched):
    from core.zoo import fingerprint, load_model, resolve

    messages = set()
    for kind in REFS:
        for fn in (resolve, load_model, fingerprint):
            with pytest.raises(NotOffered) as err:
                fn(planted[kind])
            messages.add(str(err.value))
    assert len(messages) == 1, messages
    (message,) = messages
    assert message.startswith(PUBLIC_REFUSAL) and "mathneuro-tiny" in message  # the fix lists what is offered
    assert not any(planted["root"] in message for message in messages)
    assert watched == [], watched[:5]  # no stat, listing or open of anything the references named
    assert resolve("mathneuro-tiny")[0] == "registered" and load_model("mathneuro-tiny").card.name == "mathneuro-tiny"


def test_local_mode_still_opens_a_folder(monkeypatch, planted):
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    from core.zoo import load_model, resolve

    assert resolve(planted["model"]) == ("local", Path(planted["model"]))
    assert load_model(planted["model"]).card.source == "local"
    with pytest.raises(ModelLoadError, match="is a file"):  # the local messages tell these apart, as before
        resolve(planted["file"])


def test_a_run_is_a_committed_name_in_public_mode(public, planted, watched):
    from core.mixln.folders import ASSETS, resolve_run
    from core.mixln.requests import _subject

    assert resolve_run("pre-ln") == Path(ASSETS) / "pre-ln"
    assert resolve_run(Path(ASSETS) / "pre-ln") == Path(ASSETS) / "pre-ln"  # the app's own code passes folders
    messages = set()
    for kind in REFS:
        with pytest.raises(NotOffered) as err:
            resolve_run(planted[kind])
        messages.add(str(err.value))
        with pytest.raises(NotOffered):  # a diagnostics subject: not a run, so a model, so the same refusal
            from core.zoo import load_model
            load_model(_subject(planted[kind])[0])
    with pytest.raises(NotOffered):
        resolve_run(Path(planted["run"]))  # a folder outside the committed runs, even from code
    assert len(messages) == 1 and messages.pop().startswith(PUBLIC_REFUSAL)
    assert _subject("mathneuro-tiny") == ("mathneuro-tiny", None)  # a model name falls through to the zoo
    assert watched == [], watched[:5]


def test_the_refusal_is_both_a_model_error_and_an_input_error():
    assert issubclass(NotOffered, ModelLoadError) and issubclass(NotOffered, BadInputError)


def test_the_hub_allow_list_is_explicit_in_public_mode(public, monkeypatch):
    from core.zoo import resolve
    from core.zoo.hub import allowed_hub_models, offered_models

    assert allowed_hub_models() == tuple(PAPER_CHECKPOINTS)
    monkeypatch.setenv("LAYERWISE_HUB_MODELS", "*")  # lifts the list locally, not in public mode
    assert allowed_hub_models() == tuple(PAPER_CHECKPOINTS)
    monkeypatch.setenv("LAYERWISE_HUB_MODELS", "state-spaces/mamba-130m-hf")
    assert resolve("state-spaces/mamba-130m-hf") == ("hub", None)
    with pytest.raises(NotOffered):
        resolve("HuggingFaceTB/SmolLM2-135M")  # off the list: the same one message as a path
    monkeypatch.setenv("LAYERWISE_ONLINE", "0")
    assert "state-spaces/mamba-130m-hf" not in offered_models()  # offline, nothing from the hub is offered
    monkeypatch.setenv("LAYERWISE_ONLINE", "1")
    assert offered_models()[-1] == "state-spaces/mamba-130m-hf"
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    monkeypatch.setenv("LAYERWISE_HUB_MODELS", "*")
    assert allowed_hub_models() is None


def test_a_deep_link_naming_a_folder_shows_the_default_with_the_one_message(public, planted, watched):
    import core.examples as ex

    notices = set()
    for kind in REFS:
        o = ex.resolve({"tab": "neuzip", "example": "tradeoff", "model": planted[kind]})
        assert o.view.values["model"] == ex.default_view("neuzip", "tradeoff").values["model"]
        notices.add(o.notice)
    assert len(notices) == 1 and PUBLIC_REFUSAL.rstrip(".") in notices.pop()
    assert ex.resolve({"tab": "neuzip", "example": "tradeoff", "model": "mathneuro-tiny"}).notice == ""
    assert watched == [], watched[:5]


MIXLN_REFS = ("mixln:../models/mathneuro-tiny", "mixln:../../assets/models/mamba-sentiment", "mixln:/etc",
              "mixln:~", "mixln:pre-ln/../../models/mathneuro-tiny", "mixln:./pre-ln", "MIXLN:pre-ln")


def test_a_mixln_prefix_is_a_committed_run_name_never_a_path(public, planted, watched):
    """Issue 42, item 1: NeuZip's live training took ``mixln:`` followed by any path and joined it under assets/mixln
    (``mixln:../models/x``, ``mixln:/any/folder`` opened that folder's config and weights, and the error told a
    folder with config.json from anything else). Now the text after the prefix is looked up among the committed runs;
    anything else gets the one message, before the request is made and before anything is opened."""
    from core.neuzip.requests import TrainingRequest
    from core.neuzip.training import build_model, source_reference

    refs = MIXLN_REFS + tuple("mixln:" + planted[k] for k in ("run", "model", "folder", "file", "missing", "dots"))
    messages = set()
    for ref in refs:
        for fn in (lambda r: TrainingRequest.parse(r, ["lomo"]), source_reference, build_model):
            with pytest.raises(NotOffered) as err:
                fn(ref)
            messages.add(str(err.value))
    from core.zoo import fingerprint, load_model, resolve

    for ref in refs:  # any other model input: the zoo's door is the same check
        for fn in (resolve, load_model, fingerprint):
            with pytest.raises(NotOffered) as err:
                fn(ref)
            messages.add(str(err.value))
    assert len(messages) == 1 and messages.pop().startswith(PUBLIC_REFUSAL)
    assert watched == [], watched[:5]
    found = source_reference("mixln:depth-24/pre-ln/seed-1")  # a committed run, by its name
    assert found.kind == "mixln-run" and found.folder == ASSETS_DIR / "mixln" / "depth-24" / "pre-ln" / "seed-1"
    assert TrainingRequest.parse("mixln:pre-ln", ["lomo"]).ref == "mixln:pre-ln"


def test_locally_a_mixln_prefix_also_takes_a_run_folder(monkeypatch, planted):
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    from core.neuzip.training import source_reference

    assert source_reference("mixln:" + planted["run"]).folder == Path(planted["run"])
    assert source_reference("mixln:pre-ln").folder == ASSETS_DIR / "mixln" / "pre-ln"
    with pytest.raises(BadInputError, match="unknown run"):
        source_reference("mixln:" + planted["model"])  # a model folder is not a run
    assert source_reference("tiny-llama").kind == "random"


def test_no_module_reads_a_reference_prefix_by_hand():
    """Every prefixed reference (``mixln:<run>``) goes through core.references.check_reference with its Registry; a
    prefix tested by hand elsewhere (how NeuZip's training joined ``mixln:`` to a path) would skip the check."""
    import re

    repo = Path(__file__).resolve().parents[2]
    by_hand = re.compile(r"""startswith\(\s*["'][a-z][a-z0-9_-]*:["']""")
    allowed = {("ui/widgets.py", "data:")}  # a URL scheme (an inline image), not a reference
    found = []
    for path in sorted((repo / "core").rglob("*.py")) + sorted((repo / "ui").rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        for line in path.read_text().splitlines():
            for m in by_hand.finditer(line):
                prefix = m.group(0).split("(", 1)[1].strip().strip("'\"")
                if rel != "core/references.py" and (rel, prefix) not in allowed:
                    found.append(f"{rel}: {line.strip()}")
    assert not found, found
