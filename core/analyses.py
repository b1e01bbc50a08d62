"""What an analysis is, once for the four papers: :class:`Analysis`, and the one way it is answered, :func:`answer`.

An analysis is a kind of result a tab shows and a command prints: how it is asked for (its request type, which
parses the raw inputs once), how it is computed (``compute(request, progress) -> data``), how it is kept (its cache
policy: the name it is stored under in the committed examples and the results cache, or none), how it is shown
(status text, tables, figures, other views, the file stem) and which links open it (its inputs and examples).
Each paper lists its analyses in one registry, ``ANALYSES`` in ``core/<paper>/views.py`` (name -> Analysis), and
answers them through one function of its service, ``analysis_result(name, ...)``, which calls :func:`answer` with
the paper's committed example store.

:func:`answer` parses nothing itself: ``request_for(registry, name, *raw, **raw)`` parses; ``answer`` finds the
result (:func:`find`: a committed example, the results cache, or ``compute``) and shows it (:func:`view`).

The view callables all take ``(data, shown)``: ``shown`` (:class:`Shown`) holds the request that asked, where the
result came from and the view options (e.g. a log axis), so a view never needs another signature.

The link types live here too (:class:`Param`, an input a link or a command line sets; :class:`Example`, one view a
speaker shows): :mod:`core.examples` resolves links into them, and an analysis may carry its own examples.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from core.budget import charge_request
from core.errors import BadInputError, Cancelled
from core.figures import fit
from core.progress import report, scaled
from core.results import Result, source_text
from core.runner import ExampleStore, Found, digest, lookup, result_key
from core.schema import Schema

KINDS = ("choice", "multi", "number", "text", "flag")


# ---- the link and command-line inputs of a view -------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One input of a view, as it appears in a link (``name=value``), in the view's input controls and on the
    command line (``python -m core analyses run PAPER NAME --set name=value``).

    kind: ``choice`` (one of ``choices``; with ``open``, any other value too, e.g. a model folder, except in public
    mode, where an open value must be a model the server offers: :func:`core.zoo.hub.offered_models`), ``multi`` (a
    comma-separated subset of ``choices``), ``number`` (within ``low``..``high``; ``whole`` for integers), ``text``
    (any non-empty text), ``flag`` (0 / 1).
    """

    name: str
    label: str
    kind: str = "choice"
    choices: tuple = ()
    open: bool = False
    low: float | None = None
    high: float | None = None
    whole: bool = False
    none: str | None = None  # the word for "no value" of a choice (e.g. B=none: no normaliser)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Param {self.name}: kind must be one of {KINDS}")

    def parse(self, raw) -> Any:
        """The value of ``raw`` (a query string, or a value already parsed), or :class:`BadInputError`."""
        text = ",".join(map(str, raw)) if isinstance(raw, (list, tuple)) else str(raw).strip()
        if self.kind == "flag":
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off", ""):
                return False
            raise BadInputError(f"{self.name}={text} is not 0 or 1.")
        if self.kind == "multi":
            items = [t.strip() for t in text.split(",") if t.strip()]
            unknown = [t for t in items if t not in map(str, self.choices)]
            if not items or unknown:
                what = f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not among" if unknown else \
                    "names none of"
                raise BadInputError(f"{self.name}={text} {what} {', '.join(map(str, self.choices))}.")
            by_text = {str(c): c for c in self.choices}
            return [by_text[t] for t in dict.fromkeys(items)]
        if self.kind == "number":
            try:
                value = float(text)
            except ValueError:
                raise BadInputError(f"{self.name}={text} is not a number.") from None
            if math.isnan(value) or (self.low is not None and value < self.low) or \
                    (self.high is not None and value > self.high) or (self.whole and not value.is_integer()):
                span = f"{self.low:g} to {self.high:g}" if self.low is not None and self.high is not None else "range"
                raise BadInputError(f"{self.name}={text} is outside {span}" + (" (whole numbers)" if self.whole
                                                                                 else "") + ".")
            return int(value) if self.whole else value
        if not text:
            raise BadInputError(f"{self.name} is empty.")
        if self.kind == "text":
            return text
        if self.none is not None and text.lower() == self.none:
            return None
        for c in self.choices:
            if text == str(c) or (isinstance(c, str) and text.lower() == c.lower()):
                return c
        if self.open:
            from core.settings import is_public
            if is_public():  # a public server takes only what it lists: no folder, whatever the link says
                from core.zoo.hub import not_offered, offered_models
                if text not in offered_models():
                    raise not_offered()
            return text
        shown = ", ".join(self.none if c is None else str(c) for c in self.choices)
        raise BadInputError(f"{self.name}={text} is not one of {shown}.")

    def format(self, value) -> str:
        """``value`` as it is written in a link."""
        if self.kind == "flag":
            return "1" if value else "0"
        if self.kind == "multi":
            return ",".join(map(str, value))
        if value is None:
            return self.none or ""
        if self.kind == "number":
            return f"{value:g}" if isinstance(value, float) else str(value)
        return str(value)


@dataclass(frozen=True)
class Example:
    """One view of a tab: ``show(progress=None, **values) -> Result`` draws ``figure`` of the result.

    ``defaults`` are the values of the precomputed result (answered at once); ``params`` the inputs a link may set.
    An example carried by an :class:`Analysis` (its ``examples``) leaves ``show`` and ``params`` out: it shows that
    analysis, answered with the values, and its inputs are the analysis' ``inputs``.
    """

    name: str
    title: str
    figure: str
    show: Callable[..., Result] | None = None
    params: tuple[Param, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        missing = [p.name for p in self.params if p.name not in self.defaults]
        if missing:
            raise ValueError(f"example {self.name}: no default for {', '.join(missing)}")


# ---- what an analysis is ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shown:
    """How a result is being shown: the ``request`` that asked for it (None for a stored result shown as it is),
    where it came from (``source``: precomputed, cache, computed) and the view ``options`` (e.g. ``log_x``)."""

    request: Any = None
    source: str = "computed"
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def source_text(self) -> str:
        """The source in words (``precomputed example``, ``from the results cache``, ``computed now``)."""
        return source_text(self.source)


def _nothing(data, shown: Shown) -> dict:
    return {}


def _same(data):
    return data


@dataclass(frozen=True)
class Analysis:
    """One kind of result: how it is asked for, computed, kept and shown.

    Asked and computed
        request : its request type: ``parse(*raw, **raw)`` checks the raw inputs (one :class:`BadInputError` per bad
            input) and returns a frozen request; a stored analysis' request also has ``key() -> (model name,
            fingerprint, params)``; ``notice`` (optional) is said through the progress before any work.
        compute : ``compute(request, progress) -> data`` (JSON-able; may raise :class:`core.errors.Cancelled`, whose
            ``partial`` data is shown, uncached). An analysis made of other results may return a
            :class:`core.runner.Found` it assembled itself. None: the analysis is only shown (its action builds the
            data, e.g. a live run that streams).
    Kept (the cache policy)
        stored_as : its name in the committed examples and the results cache (looked up by the request's key);
            None: computed on every request, never stored.
        cached : False: looked up in neither (measured each time, e.g. timings; the result has no key, so its files
            are written afresh) but still recorded by ``precompute``. A result not stored is keyed by its content.
        schema : what a stored result must hold before its view reads it (:mod:`core.schema`: every field the
            view reads, with its type): checked on a committed example as on a cached or computed result, which is
            computed again (or refused) when it does not fit. Set with ``stored_as``.
        assembled : its compute looks up one stored result per subject itself (under ``stored_as``, checked with
            ``schema``) and returns the :class:`core.runner.Found` it assembled (e.g. Mix-LN's layer removal, one
            result per run); ``find`` then calls it directly.
        parts : an analysis made of other analyses of the same registry (``request.parts() -> {part: request}``),
            each found on its own; its data is ``{part: data}``.
        named : the result names the model it was asked for (results are stored by the weights' fingerprint, so
            another name of the same weights, e.g. a folder, gets its own name).
    Shown
        status : ``(data, shown) -> Markdown``, one paragraph: what was computed, on what, and where it came from.
        tables, figures, views : ``(data, shown) -> {name: rows / plotly figure / anything else}``; the first table
            and figure are the result's main ones (``<stem>.csv``, ``<stem>.html``).
        stem : the file name stem, or ``(data, shown) -> stem``.
        json : ``data -> what the JSON file holds`` (default: the data).
        downloads : the file kinds the tab offers; main_first: see :class:`core.results.Result`.
    Linked
        inputs : the :class:`Param` a link or ``python -m core analyses run`` may set (named like ``request.parse``'s
            keywords); examples : the views of this analysis a speaker shows (:class:`Example` without ``show``),
            listed on the tab's stage and opened by ``?tab=<paper>&example=<name>``.
    """

    request: type
    status: Callable[[Any, Shown], str]
    compute: Callable[[Any, Any], Any] | None = None
    stored_as: str | None = None
    cached: bool = True
    schema: Schema | None = None
    assembled: bool = False
    parts: tuple[str, ...] = ()
    named: bool = False
    tables: Callable[[Any, Shown], dict] = _nothing
    figures: Callable[[Any, Shown], dict] = _nothing
    views: Callable[[Any, Shown], dict] = _nothing
    stem: str | Callable[[Any, Shown], str] = "result"
    json: Callable[[Any], Any] = _same
    downloads: tuple[str, ...] = ("json", "csv", "html")
    main_first: bool = True
    inputs: tuple[Param, ...] = ()
    examples: tuple[Example, ...] = ()


Registry = Mapping[str, Analysis]
Examples = ExampleStore | Callable[[str, Any], ExampleStore | None] | None


def entry(analyses: Registry, name: str) -> Analysis:
    """The analysis ``name`` of a registry, or one clear message naming the others."""
    if name not in analyses:
        raise BadInputError(f"Unknown analysis {name!r}.", fix=f"Use one of: {', '.join(analyses)}.")
    return analyses[name]


def request_for(analyses: Registry, name: str, *raw, **named):
    """The request of analysis ``name`` parsed from the raw inputs (one :class:`BadInputError` per bad input)."""
    return entry(analyses, name).request.parse(*raw, **named)


def view(a: Analysis, found: Found, request=None, options: Mapping | None = None) -> Result:
    """What analysis ``a`` shows of ``found`` (asked for by ``request``; ``options``: view options, merged over the
    request's own ``options()`` when it has them): status, JSON data, tables, figures, views and the files."""
    opts = {**(request.options() if callable(getattr(request, "options", None)) else {}), **(options or {})}
    shown, data = Shown(request, found.source, opts), found.data
    figures = {name: fit(fig) for name, fig in a.figures(data, shown).items()}  # the house layout at talk size
    status = a.status(data, shown) + (f"\n\n*Note: {found.note}.*" if getattr(found, "note", "") else "")
    return Result(status, a.json(data), tables=a.tables(data, shown), figures=figures,
                  views=a.views(data, shown), source=found.source, key=found.key,
                  stem=a.stem(data, shown) if callable(a.stem) else a.stem, downloads=a.downloads,
                  main_first=a.main_first)


def _check(a: Analysis, request, options, model: str | None = None) -> Callable[[Any], None]:
    """What :func:`core.runner.lookup` checks before it caches or serves a result, beside the analysis' schema: its
    view is built (of the result named ``model``, as it will be shown, for an analysis whose result names its model:
    some are stored without the name, e.g. NeuZip's bit fields)."""
    def check(data) -> None:
        view(a, named(Found(data, "cache", None), model), request, options)
    return check


def named(found: Found, model: str | None) -> Found:
    """A result that names the model it was asked for (see :attr:`Analysis.named`)."""
    data = found.data
    if model is None or not isinstance(data, dict) or not isinstance(data.get("model", ""), str) or \
            data.get("model") == model:
        return found
    return Found({"model": model, **data} if "model" not in data else {**data, "model": model}, found.source,
                 found.key, found.note)


def together(name: str, fingerprint: str, parts: Mapping[str, Found]) -> Found:
    """The found parts of analysis ``name`` as one result: their data by part, the freshest source, one key."""
    sources = {f.source for f in parts.values()}
    return Found({p: f.data for p, f in parts.items()},
                 next(s for s in ("computed", "cache", "precomputed") if s in sources),
                 result_key(fingerprint, name, {"parts": [f.key for f in parts.values()]}),
                 "; ".join(dict.fromkeys(f.note for f in parts.values() if f.note)))


def _store(examples: Examples, name: str, request) -> ExampleStore | None:
    return examples(name, request) if callable(examples) else examples


def find(analyses: Registry, name: str, request, *, examples: Examples = None, progress=None,
         use_cache: bool = True, options: Mapping | None = None, check: Callable[[Any], Any] | None = None) -> Found:
    """The result of analysis ``name`` for ``request``: a committed example (``examples``: the paper's store, or
    ``(name, request) -> store``), the results cache or ``compute`` (see :class:`Analysis` for the policy); the
    request's notice, if any, is said through ``progress`` first. ``check(data)`` is what a stored or computed result
    must pass to be served or cached (default: its fields are there and its view is built; a caller that never shows
    the result, e.g. a batch row, may pass a lighter one)."""
    a = entry(analyses, name)
    notice = getattr(request, "notice", "")
    if notice:
        report(progress, 0.0, notice)
    use_cache = use_cache and getattr(request, "cache", True) and a.cached
    if a.parts:
        parts = request.parts()
        found = [find(analyses, p, parts[p], examples=examples, progress=scaled(progress, i / len(a.parts),
                                                                                  (i + 1) / len(a.parts)),
                      use_cache=use_cache) for i, p in enumerate(a.parts)]
        return together(name, request.key()[1], dict(zip(a.parts, found)))
    if a.compute is None:
        raise ValueError(f"analysis {name!r} has no compute function: its action builds the data")

    def compute():
        charge_request(request)  # priced before it runs, against the one budget (public mode; core.budget)
        return a.compute(request, progress)
    try:
        if a.stored_as is None or a.assembled:
            data = compute()
            if isinstance(data, Found):
                return data
            return Found(data, "computed", result_key(digest(data), name, {}))
        model, fingerprint, params = request.key()
        found = lookup(fingerprint, a.stored_as, params, compute,
                       examples=_store(examples, name, request) if use_cache else None, cache=use_cache,
                       check=check or _check(a, request, options, model if a.named else None), model=model,
                       schema=a.schema)
    except Cancelled as stop:
        if stop.partial is None:
            raise
        return Found(stop.partial, "computed", None)  # what it finished; not cached
    if not a.cached:  # measured each time: no key, its files are written afresh
        found = Found(found.data, found.source, None, found.note)
    return named(found, model) if a.named else found


def answer(analyses: Registry, name: str, request, *, examples: Examples = None, progress=None,
           use_cache: bool = True, options: Mapping | None = None) -> Result:
    """Analysis ``name`` of ``analyses`` for the parsed ``request`` (:func:`request_for`), found (:func:`find`) and
    shown (:func:`view`)."""
    found = find(analyses, name, request, examples=examples, progress=progress, use_cache=use_cache,
                 options=options)
    return view(entry(analyses, name), found, request, options)


def result_function(analyses: Registry, examples: Examples = None) -> Callable[..., Result]:
    """The one function a paper answers its analyses with (its package's ``analysis_result``), made once for every
    paper: ``analysis_result(name, *raw, progress=None, use_cache=True, view_options=None, request=None, **raw)``
    parses the raw inputs with the analysis' request type (or takes ``request``, already parsed), then finds
    (``examples``: the paper's committed store, or ``(name, request) -> store``; the results cache; compute) and shows
    it (``view_options``: e.g. ``log_x``; named so that a request's own ``options`` input, e.g. MambaLRP's per-method
    options, is an input like any other)."""
    def analysis_result(name: str, *raw, progress=None, use_cache: bool = True, view_options: Mapping | None = None,
                        request=None, **named) -> Result:
        if request is None:
            request = request_for(analyses, name, *raw, **named)
        elif raw or named:
            raise TypeError("analysis_result takes raw inputs or a parsed request, not both")
        return answer(analyses, name, request, examples=examples, progress=progress, use_cache=use_cache,
                      options=view_options)
    return analysis_result


def view_function(analyses: Registry) -> Callable[..., Result]:
    """The one view wrapper of a paper (its ``views.view``): ``view(name, found, request=None, **options)`` shows what
    was ``found`` for analysis ``name`` (:func:`view`)."""
    def view_of(name: str, found: Found, request=None, **options) -> Result:
        return view(entry(analyses, name), found, request, options)
    return view_of


def inputs_of(a: Analysis, name: str, pairs: list[str]) -> dict:
    """The values of ``INPUT=VALUE`` pairs (the command line's ``--set``), parsed by the analysis' :attr:`inputs`
    over the values of its first example; one clear message for a pair without ``=``, an unknown input, a bad value,
    or an analysis that cannot be answered from its inputs."""
    if a.compute is None and not a.parts:
        raise BadInputError(f"{name} is shown by its own action (it streams or writes files), not answered by name.",
                            fix="use its paper's command (python -m core <paper> --help).")
    by_name = {p.name: p for p in a.inputs}
    values = dict(a.examples[0].defaults) if a.examples else {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key.strip():
            raise BadInputError(f"--set {pair!r} is not INPUT=VALUE.", fix="e.g. --set model=mathneuro-tiny")
        if key.strip() not in by_name:
            raise BadInputError(f"{name} has no input {key.strip()!r}.",
                                fix=f"its inputs: {', '.join(by_name) or 'none (run it without --set)'}.")
        values[key.strip()] = by_name[key.strip()].parse(raw)
    try:
        inspect.signature(a.request.parse).bind(**values)
    except TypeError as err:
        raise BadInputError(f"{name} needs inputs it does not declare ({err}).",
                            fix="use its paper's command (python -m core <paper> --help).") from None
    return values


def linked(analyses: Registry, answer_name: Callable[..., Result]) -> tuple[Example, ...]:
    """The examples the analyses of a registry carry, as views a link opens: each shows its analysis through
    ``answer_name(name, progress=None, **values)`` (the paper's ``analysis_result``), its inputs the analysis'."""
    out = []
    for name, a in analyses.items():
        for e in a.examples:
            def show(progress=None, _name=name, **values):
                return answer_name(_name, progress=progress, **values)
            out.append(replace(e, show=show, params=e.params or a.inputs))
    return tuple(out)


__all__ = ["Analysis", "Shown", "Param", "Example", "Registry", "entry", "request_for", "find", "answer", "view",
           "result_function", "view_function", "linked", "named", "together", "inputs_of"]
