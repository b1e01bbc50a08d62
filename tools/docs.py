"""The docs' generated blocks, written from committed results: the one writer of the docs tree (the compute package
gives the Markdown and knows no page).

    python tools/docs.py            # rewrite every generated block of docs/ and README.md
    python tools/docs.py --check    # exit 1 (naming the pages) if a page does not hold what the results say

A generated block is Markdown written by code between two markers, so a page's numbers cannot drift from the files
they come from (tests/test_docs_blocks.py renders every page and compares)::

    <!-- generated:NAME (python tools/docs.py) -->
    ...written by code...
    <!-- /generated:NAME (python tools/docs.py) -->

Where each block comes from: MambaLRP's (docs/mambalrp.md, docs/mambalrp-ssm2.md) from the committed evaluations
(:func:`core.lrp.report.blocks`); Mix-LN's what-reproduces tables (docs/mixln-reproduces.md) and the README's table and
sentences from the committed runs (:func:`core.mixln.reproduces.markdown`). The prose decides where a block goes: a
block a page lacks is not added.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

COMMAND = "python tools/docs.py"
# page (relative to the repository) -> where its blocks come from
PAGES = {"docs/mambalrp.md": "lrp", "docs/mambalrp-ssm2.md": "lrp", "docs/mixln-reproduces.md": "mixln",
         "README.md": "mixln"}


def marker(name: str, end: bool = False, command: str = COMMAND) -> str:
    return f"<!-- {'/' if end else ''}generated:{name} ({command}) -->"


def names(text: str) -> list[str]:
    """The blocks ``text`` holds, in order (their opening markers)."""
    return re.findall(r"<!-- generated:([^ ]+) \(", text)


def render(text: str, blocks: dict[str, str], command: str = COMMAND) -> str:
    """``text`` with each block it holds (between its markers) replaced by ``blocks[name]``; a block the page holds
    but ``blocks`` lacks is left as it is, a block ``blocks`` has but the page lacks is not added."""
    for name, body in blocks.items():
        start, end = marker(name, command=command), marker(name, end=True, command=command)
        if start not in text or end not in text:
            continue
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{body.strip()}\n{end}{tail}"
    return text


def blocks(source: str, lrp_folder=None, mixln_root=None) -> dict[str, str]:
    """Every block of one source (``lrp`` or ``mixln``), by name; ``lrp_folder`` / ``mixln_root``: other committed
    results than the project's (tests)."""
    if source == "lrp":
        from core.lrp import report
        return report.blocks(lrp_folder)
    from core.mixln import reproduces
    return reproduces.markdown() if mixln_root is None else reproduces.markdown(mixln_root)


def rendered(repo: Path = REPO, **folders) -> dict[Path, tuple[str, str]]:
    """``{page: (text now, text with every block rendered)}`` for every page of :data:`PAGES`."""
    made: dict[str, dict[str, str]] = {}
    out = {}
    for page, source in PAGES.items():
        if source not in made:
            made[source] = blocks(source, **folders)
        path = repo / page
        text = path.read_text()
        out[path] = (text, render(text, made[source]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page would change")
    args = ap.parse_args(argv)
    stale = []
    for path, (old, new) in rendered().items():
        if new != old:
            stale.append(path.relative_to(REPO).as_posix())
            if not args.check:
                path.write_text(new)
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "every generated block holds what the results say")
        return 1 if stale else 0
    print("rewrote " + (", ".join(stale) if stale else "nothing (every block was current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
