"""The documentation holds together: README.md and every page of docs/ link only to files, images and headings that
exist, every page is reachable from the README, and the images are small. Pure Python, quick; the mkdocs build
(``mkdocs build --strict``, the site ``mkdocs serve`` shows) runs in the slow tier.

An anchor must be the heading's slug both as GitHub (and the Hugging Face Space card) writes it and as mkdocs writes
it, so a link works wherever the page is read.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
IMAGE_BYTES = 200_000  # a screenshot is a small PNG (1280 x 800 at most, downscaled)

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"<(?:img|a)\s[^>]*(?:src|href)=\"([^\"]+)\"")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return [REPO / "README.md"] + sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are examples, not links)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text)


def headings(text: str) -> list[str]:
    """The text of every heading outside code blocks, inline markup dropped (``code``, *emphasis*, [links](..))."""
    out = []
    for line in re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S).splitlines():
        m = HEADING.match(line)
        if m:
            title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))
            out.append(re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", title))
    return out


def github_slug(title: str) -> str:
    """GitHub's anchor: lower case, punctuation dropped (letters, digits, ``_``, ``-`` and spaces kept), spaces as
    ``-``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def mkdocs_slug(title: str) -> str:
    """Python-Markdown's toc anchor (mkdocs): ASCII only, punctuation dropped, runs of spaces and ``-`` as one
    ``-``."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(path: Path, slug) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for title in headings(path.read_text()):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}{'-' if slug is github_slug else '_'}{n}")
    return out


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    return LINK.findall(text) + HTML_SRC.findall(text) + REFERENCE.findall(text)


def problems(path: Path) -> list[str]:
    """What is broken in one page: a relative link to nothing, a missing image, an anchor no heading has."""
    out = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... (not checked: no network)
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}: {target}"
        if REPO not in dest.parents and dest != REPO:
            out.append(f"{where} points outside the repository")
            continue
        if DOCS in path.parents and DOCS not in dest.parents:
            out.append(f"{where} leaves docs/ (the site holds docs/ only: name the file in words or in `code`)")
            continue
        if not dest.exists():
            out.append(f"{where}: no such file")
            continue
        if anchor:
            if dest.suffix != ".md":
                out.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(dest, github_slug) or (DOCS in dest.parents and
                                                               anchor not in anchors(dest, mkdocs_slug)):
                out.append(f"{where}: no heading with that anchor as GitHub and mkdocs both write it (GitHub's: "
                           f"{', '.join(sorted(anchors(dest, github_slug)))})")
    return out


def test_every_link_image_and_anchor_resolves():
    broken = [p for page in pages() for p in problems(page)]
    assert not broken, "\n".join(broken)


def test_the_checker_finds_a_broken_link_a_missing_image_and_a_missing_anchor(tmp_path, monkeypatch):
    """The check itself, on a hand-made tree: each kind of breakage is reported, and the good links are not."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "DOCS", tmp_path / "docs")
    (tmp_path / "README.md").write_text("# Readme\n")
    (tmp_path / "docs" / "images").mkdir(parents=True)
    (tmp_path / "docs" / "images" / "a.png").write_bytes(b"\x89PNG")
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## The GPU path: *fast*, `kernels/`\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\n## Set up\n\n"
                    "[ok](other.md#the-gpu-path-fast-kernels) [self](#set-up) ![img](images/a.png) [web](https://x.y)\n"
                    "[gone](missing.md) ![gone](images/b.png) [bad anchor](other.md#nope) [bad self](#nope)\n"
                    "[up](../README.md) `[in code](nothing.md)`\n\n```\n[in a block](nothing.md)\n```\n")
    found = problems(page)
    assert len(found) == 5, found
    assert any("../README.md leaves docs/" in p for p in found)
    assert sum("no such file" in p for p in found) == 2 and sum("no heading" in p for p in found) == 2
    assert any("missing.md" in p for p in found) and any("images/b.png" in p for p in found)


def test_slugs_follow_github_and_mkdocs():
    assert github_slug("At the papers' sizes, on a CPU") == "at-the-papers-sizes-on-a-cpu"
    assert github_slug("Online: the papers' own checkpoints and datasets") == \
        "online-the-papers-own-checkpoints-and-datasets"
    assert github_slug("a - b") == "a---b" and mkdocs_slug("a - b") == "a-b"
    assert mkdocs_slug("Models & data") == "models-data" == github_slug("Models & data").replace("--", "-")


def test_every_page_is_reachable_from_the_readme():
    """A page nothing links to cannot be found: each one is linked from the README or from a page linked so."""
    seen, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in links(page):
            dest = (page.parent / target.partition("#")[0]).resolve()
            if dest.suffix == ".md" and dest.is_file():
                todo.append(dest)
    orphans = [str(p.relative_to(REPO)) for p in DOCS.rglob("*.md") if p.resolve() not in seen]
    assert not orphans, f"no page links to {orphans}: add a line to docs/index.md (see its 'Adding a page')"


def test_images_are_small_and_used():
    images = sorted((DOCS / "images").glob("*")) if (DOCS / "images").is_dir() else []
    big = [f"{p.name}: {p.stat().st_size:,} bytes" for p in images if p.stat().st_size > IMAGE_BYTES]
    assert not big, f"images over {IMAGE_BYTES:,} bytes: {big}"
    used = {(page.parent / t.partition("#")[0]).resolve() for page in pages() for t in links(page)}
    unused = [p.name for p in images if p.resolve() not in used]
    assert not unused, f"images no page shows: {unused}"


def test_the_pictures_show_the_views_as_they_are():
    """Each picture of a view (README, docs) was taken of the view as it is now: tools/screenshots.json records the
    fingerprint of the view each picture shows (its chart's JSON and caption, or the registries' tables) and of the
    picture itself; a view that changed without its picture fails here, naming the command that takes it again."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("layerwise_screenshots", REPO / "tools" / "screenshots.py")
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    problems = screenshots.stale()
    assert not problems, "pictures older than their views:\n" + "\n".join(problems)


def test_the_readme_stays_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 220


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: a broken link, a missing image or anchor, or a page outside the site fails it."""
    mkdocs = shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -r requirements-dev.txt)")
    run = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "mambalrp" / "index.html").is_file()
