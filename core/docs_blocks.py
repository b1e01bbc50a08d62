"""Generated blocks of a docs page: Markdown written by code from committed results, between markers, so a page's
numbers cannot drift from the files they come from (a test renders the page and compares).

    <!-- generated:NAME (COMMAND) -->
    ...written by code...
    <!-- /generated:NAME (COMMAND) -->

    render(text, blocks, command)  -> text with every block present in it replaced by ``blocks[name]``
    names(text)                    -> the names of the blocks a page holds
"""
from __future__ import annotations

import re


def marker(name: str, command: str, end: bool = False) -> str:
    return f"<!-- {'/' if end else ''}generated:{name} ({command}) -->"


def names(text: str) -> list[str]:
    """The blocks ``text`` holds, in order (their opening markers)."""
    return re.findall(r"<!-- generated:([^ ]+) \(", text)


def render(text: str, blocks: dict[str, str], command: str) -> str:
    """``text`` with each block it holds (between its markers, written with ``command``) replaced by ``blocks[name]``;
    a block the page holds but ``blocks`` lacks is left as it is, a block ``blocks`` has but the page lacks is not
    added (the prose decides where a table goes)."""
    for name, body in blocks.items():
        start, end = marker(name, command), marker(name, command, end=True)
        if start not in text or end not in text:
            continue
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{body.strip()}\n{end}{tail}"
    return text
