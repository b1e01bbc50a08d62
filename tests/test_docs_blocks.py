"""tools/docs.py, the one writer of the docs' generated blocks: every page holds exactly what the committed results
say (a page that drifts fails here), every block a page holds is made by its source, and the renderer replaces only
what lies between a block's markers."""
from __future__ import annotations

import pytest

from tools import docs


@pytest.fixture(scope="module")
def pages():
    return docs.rendered()


def test_every_page_holds_the_blocks_of_the_committed_results(pages):
    stale = [path.name for path, (old, new) in pages.items() if old != new]
    assert not stale, f"run `python tools/docs.py` ({', '.join(stale)} differ from the committed results)"


def test_every_block_a_page_holds_is_made_by_its_source(pages):
    made = {source: set(docs.blocks(source)) for source in set(docs.PAGES.values())}
    for page, source in docs.PAGES.items():
        held = docs.names((docs.REPO / page).read_text())
        assert held, f"{page} holds no generated block"
        assert set(held) <= made[source], f"{page}: {set(held) - made[source]} has no source"


def test_render_replaces_only_the_marked_blocks():
    text = f"a\n{docs.marker('x')}\nold\n{docs.marker('x', end=True)}\nb\n{docs.marker('z')}\nkept\n"
    assert docs.render(text, {"x": "new", "y": "unused", "z": "unclosed"}) == text.replace("old", "new")
    assert docs.names(text) == ["x", "z"]


def test_the_check_writes_nothing_and_says_what_is_stale(tmp_path, monkeypatch, capsys):
    for page in docs.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((docs.REPO / page).read_text())
    stale = tmp_path / "docs" / "mixln-reproduces.md"
    text = stale.read_text()
    start = text.index(docs.marker("claims")) + len(docs.marker("claims"))
    stale.write_text(text[:start] + "\n| a hand-typed row |" + text[start:])
    monkeypatch.setattr(docs, "REPO", tmp_path)
    real = docs.rendered
    monkeypatch.setattr(docs, "rendered", lambda: real(tmp_path))
    assert docs.main(["--check"]) == 1
    assert "docs/mixln-reproduces.md" in capsys.readouterr().out and "hand-typed" in stale.read_text()
    assert docs.main([]) == 0 and "hand-typed" not in stale.read_text()
    assert docs.main(["--check"]) == 0
