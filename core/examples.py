"""The views a speaker shows: every paper's precomputed examples in one registry, and the links that open them.

A *view* is a tab, one of its examples and the inputs that define it. Its link is a query string::

    ?tab=neuzip&example=tradeoff&model=smollm2-135m&B=128&log=0

Each paper lists its examples in ``core/<paper>/examples.py`` (``EXAMPLE_VIEWS``): a name for the link, a title for
the picker, the figure it draws, and its inputs (:class:`Param`) with the values of the precomputed result as their
defaults; an analysis may carry examples of its own (:attr:`core.analyses.Analysis.examples`), listed after them. :func:`examples` is the one registry the app, its tests and the README list from; :func:`resolve` turns a
query into a view (an unknown tab, example or input, or a bad value, becomes one line of notice and the default is
used instead); :meth:`View.query` writes the link back; :func:`show` draws it (the precomputed values answer at
once, without loading a model; other values are computed, with ``progress(fraction, message)``, which may stop it).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlencode

from core import papers
from core.analyses import KINDS, Example, Param, linked  # noqa: F401  (the link types, defined with Analysis)
from core.errors import BadInputError
from core.results import Result, source_text

CUT_KEYS = ("cut", "ignored", "ignored_n")  # what shorten_query adds about the part of a long link it dropped
RESERVED = ("tab", "example", "view", *CUT_KEYS)  # query keys that are not inputs of a view
LINK_MAX_CHARS = 2048  # the longest query string a link may have (the longest a view writes is under 300)
_PART_MAX_CHARS = 512  # a longer name=value part of a long link is dropped whole
VIEWS = ("talk", "lab", "api", "settings", "api-recorder")  # view=: the presenter view, the lab, and Gradio's own


@dataclass(frozen=True)
class View:
    """What is on screen: a tab, one of its examples, and the values of its inputs."""

    tab: str
    example: Example
    values: Mapping[str, Any]

    def query(self, talk: bool = False) -> str:
        """The link of this view, ``?tab=...&example=...&<input>=...`` (every input, so a link keeps its meaning
        when a default changes); ``talk`` adds ``view=talk``."""
        pairs = [("tab", self.tab), ("example", self.example.name)]
        pairs += [(p.name, p.format(self.values[p.name])) for p in self.example.params]
        return "?" + urlencode(pairs + ([("view", "talk")] if talk else []), safe=",/:")

    @property
    def precomputed(self) -> bool:
        """Whether these are the values of the precomputed result."""
        return all(self.values[p.name] == self.example.defaults[p.name] for p in self.example.params)

    def caption(self, res: Result) -> str:
        """One line of Markdown under the chart: the example and where its result came from (the stage and the
        static site both show it)."""
        source = ("committed runs" if self.precomputed else "computed now") if res.source == "computed" else \
            source_text(res.source)
        return f"**{self.example.title}** · *{source}*"

    def status(self, res: Result) -> str:
        """The inputs of the view, then the result's own account of itself (Markdown)."""
        return (f"Inputs: {self.label()}.\n\n" if self.example.params else "") + res.status

    def label(self) -> str:
        """The inputs in words, e.g. ``model smollm2-135m, B 128, log memory axis``."""
        words = [(p.label if self.values[p.name] else f"no {p.label}") if p.kind == "flag" else
                 f"{p.label} {p.format(self.values[p.name]).replace(',', ', ') or '-'}" for p in self.example.params]
        return "; ".join(words)


def __getattr__(name: str):
    if name == "PAPERS":  # the tabs with examples, by their tab id (= the package name): core.papers' list
        return papers.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _package(tab: str):
    """The paper package of a tab (:mod:`core.papers`), imported when first asked for (it pulls in torch)."""
    return papers.paper(tab).package()


def _views(tab: str) -> tuple[Example, ...]:
    """A tab's examples: its own views (``core/<paper>/examples.py``), then the examples its analyses carry
    (:attr:`core.analyses.Analysis.examples`, shown through the paper's ``analysis_result``)."""
    package = _package(tab)
    return tuple(package.EXAMPLE_VIEWS) + linked(package.ANALYSES, package.analysis_result)


_registry: dict[str, tuple[Example, ...]] = {}


def examples(tab: str) -> tuple[Example, ...]:
    """The examples of a tab (``lrp``, ``mathneuro``, ``mixln``, ``neuzip``), in picker order."""
    if tab not in papers.names():
        raise BadInputError(f"no examples for tab {tab!r}.", fix=f"use one of {', '.join(papers.names())}.")
    if tab not in _registry:
        found = _views(tab)
        names = [e.name for e in found]
        if len(set(names)) != len(names):
            raise ValueError(f"core.{tab}.EXAMPLE_VIEWS repeats a name: {names}")
        _registry[tab] = found
    return _registry[tab]


def registry() -> dict[str, tuple[Example, ...]]:
    """Every tab's examples: ``{tab: (Example, ...)}``."""
    return {tab: examples(tab) for tab in papers.names()}


def example(tab: str, name: str) -> Example:
    for e in examples(tab):
        if e.name == name:
            return e
    raise BadInputError(f"no example {name!r} in {tab}.", fix=f"use one of {', '.join(e.name for e in examples(tab))}.")


def default_view(tab: str, name: str | None = None) -> View:
    """The precomputed view of an example (the tab's first when ``name`` is None)."""
    e = example(tab, name) if name else examples(tab)[0]
    return View(tab, e, dict(e.defaults))


def view(tab: str, name: str, values: Mapping[str, Any] | None = None) -> View:
    """The view of example ``name`` with ``values`` (parsed and checked; the rest default), or BadInputError."""
    e = example(tab, name)
    given = dict(values or {})
    unknown = [k for k in given if k not in {p.name for p in e.params}]
    if unknown:
        raise BadInputError(f"{tab} / {name} has no input {', '.join(unknown)}.",
                            fix=f"its inputs: {', '.join(p.name for p in e.params) or 'none'}.")
    return View(tab, e, {p.name: p.parse(given[p.name]) if p.name in given else e.defaults[p.name]
                         for p in e.params})


@dataclass
class Opened:
    """What a link opens: the tab to select (None: the link names none), the view drawn there (None for a tab without
    examples) and the notice about what in the link was not understood (empty when everything was)."""

    tab: str | None
    view: View | None
    notice: str = ""


def _tab_id(raw: str, tabs: Mapping[str, str]) -> str | None:
    """A tab id from its id or title, case and punctuation aside (``neuzip``, ``NeuZip``, ``Mix-LN``)."""
    def key(s):
        return "".join(ch for ch in s.lower() if ch.isalnum())
    return next((t for t, title in tabs.items() if key(raw) in (key(t), key(title))), None)


def resolve(query: Mapping[str, str], tabs: Mapping[str, str] | None = None) -> Opened:
    """The view a link opens. ``query``: its parameters; ``tabs``: every tab of the app, id -> title (tabs without
    examples may be opened, e.g. ``models_data``). Nothing in a link fails: each part not understood is named in the
    notice (one line) and replaced by its default."""
    tabs = dict(tabs or {t: t for t in papers.names()})
    query = {k: v for k, v in query.items() if not k.startswith("__") and k != "deep_link"}  # Gradio's and Spaces'
    problems: list[str] = []
    if any(k in query for k in CUT_KEYS):  # a long link the server cut (shorten_query): say what it used and dropped
        cut = _cut_notice(query, [k for k in query if k not in CUT_KEYS])
        problems.append(cut or "its cut=, ignored= and ignored_n= are not the server's")
    raw_tab, raw_example = query.get("tab", "").strip(), query.get("example", "").strip()
    tab = _tab_id(raw_tab, tabs) if raw_tab else None
    if raw_tab and tab is None:
        problems.append(f"no tab {raw_tab!r} (tabs: {', '.join(tabs)})")
    if tab is None and raw_example:  # an example named without (or with a wrong) tab: the tab that has it
        owners = [t for t in papers.names() if t in tabs and any(e.name == raw_example for e in examples(t))]
        tab = owners[0] if len(owners) == 1 else None
    inputs = {k: v for k, v in query.items() if k not in RESERVED}
    shown = query.get("view", "").strip()
    if shown and shown not in VIEWS:
        problems.append(f"view={shown} is not talk or lab")
    if tab is None:
        if raw_example:
            problems.append(f"no example {raw_example!r}")
        if inputs:
            problems.append(f"ignored {_some(sorted(inputs))} (a link names a tab: ?tab=...&example=...)")
        return Opened(None, None, _notice(problems))
    if tab not in papers.names():
        if raw_example:
            problems.append(f"{tabs[tab]} has no examples")
        if inputs:
            problems.append(f"ignored {_some(sorted(inputs))}")
        return Opened(tab, None, _notice(problems))
    names = [e.name for e in examples(tab)]
    if raw_example and raw_example not in names:
        problems.append(f"no example {raw_example!r} in {tabs[tab]} (examples: {', '.join(names)})")
        raw_example = ""
    e = example(tab, raw_example) if raw_example else examples(tab)[0]
    by_key = {p.name.lower(): p for p in e.params}
    values = dict(e.defaults)
    unknown = []
    for key, raw in inputs.items():
        p = by_key.get(key.lower())
        if p is None:
            unknown.append(repr(key[:40]))
            continue
        try:
            values[p.name] = p.parse(raw)
        except BadInputError as err:
            problems.append(f"{err.message.rstrip('.')[:300]}; showing {p.name}={p.format(e.defaults[p.name])}")
    if unknown:
        problems.append(f"{e.name} has no input{'s' if len(unknown) > 1 else ''} {_some(unknown)}"
                        + (f" (inputs: {', '.join(p.name for p in e.params)})" if e.params else ""))
    return Opened(tab, View(tab, e, values), _notice(problems))


def _some(names: list[str], shown: int = 5) -> str:
    """``a, b, c`` or, past ``shown`` names, ``a, b, c, d, e and 12 more`` (a notice stays one short line)."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def shorten_query(raw: str, limit: int = LINK_MAX_CHARS) -> str:
    """A query string over ``limit`` characters cut to fit: its ``name=value`` parts in order (``tab``, ``example``
    and ``view`` first), each kept whole while they fit and dropped when longer than 512 characters, then ``cut=``
    the original length, ``ignored=`` the first names dropped and ``ignored_n=`` how many parts were (what
    :func:`resolve` puts in the link's notice). Reads at most the first 4,096 parts of ``raw``; the rest is counted."""
    from urllib.parse import quote, unquote_plus

    parts = raw.split("&", 4096)
    rest = parts.pop() if len(parts) > 4096 else ""
    ignored_n = rest.count("&") + (1 if rest else 0)

    def key(part: str) -> str:
        return unquote_plus(part.split("=", 1)[0][:64]).strip().lower()

    ordered = sorted((p for p in parts if p), key=lambda p: key(p) not in ("tab", "example", "view"))
    room = limit - 200  # what cut=, ignored= and ignored_n= may take
    kept, ignored = [], []
    for part in ordered:
        if key(part) not in CUT_KEYS and len(part) <= _PART_MAX_CHARS and len(part) + 1 <= room:
            kept.append(part)
            room -= len(part) + 1
        else:
            ignored_n += 1
            name = re.sub(r"[^\w.-]", "", key(part))[:24] or "?"
            if name not in ignored and len(ignored) < 3:
                ignored.append(name)
    tail = [f"cut={len(raw)}", f"ignored={quote(','.join(ignored))}", f"ignored_n={ignored_n}"]
    return "&".join(kept + tail)


def _cut_notice(query: Mapping[str, str], kept: list[str]) -> str | None:
    """What a link cut by :func:`shorten_query` lost, in words; None when it was not cut (or says nonsense)."""
    length, count = query.get("cut", ""), query.get("ignored_n", "")
    if not (length.isdigit() and count.isdigit()):
        return None
    names = [n for n in query.get("ignored", "").split(",") if n][:3]
    dropped = f"{int(count):,} part{'s' if int(count) != 1 else ''}" + (f" ({', '.join(names)}"
                                                                          f"{', ...' if int(count) > len(names) else ''})"
                                                                          if names else "")
    used = _some(kept, 8) if kept else "nothing"
    return (f"it had {int(length):,} characters, more than the {LINK_MAX_CHARS:,} a link may have: used {used}; "
            f"ignored {dropped}")


def _notice(problems: list[str]) -> str:
    return ("This link: " + "; ".join(problems) + ".") if problems else ""


_shown: dict[tuple[str, str], Result] = {}
_shown_lock = threading.Lock()


def show(v: View, progress=None) -> Result:
    """The result of a view (the service's Result; ``figures[v.example.figure]`` is the chart). A precomputed view is
    built once per process and kept (its figures never change), so showing it again costs nothing."""
    key = (v.tab, v.example.name)
    if v.precomputed and key in _shown:
        return _shown[key]
    res = v.example.show(progress=progress, **v.values)
    if v.example.figure not in res.figures:
        raise ValueError(f"{v.tab} / {v.example.name}: the result has no figure {v.example.figure!r}")
    if v.precomputed:
        with _shown_lock:
            _shown.setdefault(key, res)
    return res


__all__ = ["PAPERS", "RESERVED", "LINK_MAX_CHARS", "shorten_query", "Param", "Example", "View", "Opened", "examples", "registry", "example",
           "default_view", "view", "resolve", "show"]
