"""Where a result comes from: the committed examples, the results cache, or computing it now.

:func:`lookup` answers ``(fingerprint, analysis, params)`` from the committed examples (an :class:`ExampleStore`,
read without loading any model), then from the results cache, then by computing (and caching) it; the
:class:`Found` it returns says which (``source``), and nothing else carries that. The fingerprint of a registered
model or a folder comes from its weight files (:func:`core.zoo.fingerprint`), so a precomputed example shows at once.
:func:`result_key` is the one key of a result (examples, cache and download files). :func:`precompute` runs a paper's
example calls afresh and writes every result they looked up as its example store: the one way examples are made.

The other jobs the runner once held live beside it: :mod:`core.progress` (progress and Stop), :mod:`core.files`
(atomic writes, result files, the downloads folder), :mod:`core.results` (:class:`~core.results.Result`) and
:mod:`core.checks` (number and thread-count checks).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from core.errors import BadInputError
from core.files import atomic_write

log = logging.getLogger("layerwise.examples")


def result_key(fingerprint: str, analysis: str, params: dict) -> str:
    """The key of a result, the same for the examples, the results cache and the download files."""
    from core.cache import cache_key
    return cache_key(fingerprint, analysis, params)


def example_checksum(entry: dict) -> str:
    """sha256 of an example entry's content (everything but its ``checksum``), as canonical JSON."""
    doc = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class ExampleStore:
    """Precomputed results committed with the project: one JSON file of cache entries
    ``{"model", "fingerprint", "analysis", "params", "data", "checksum"}``, keyed like the results cache.

    Read once (again when the file changes) and never written by the app; ``python -m core <paper> precompute``
    writes it with :meth:`write`, ``python -m core cache seal`` only writes the checksums of what is there. An entry
    whose checksum is missing or does not match its content is not served (one log line when the file is read): the
    request computes it instead.
    """

    FORMAT = "layerwise-examples/1"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._loaded: tuple[float, list[dict], dict[str, dict]] | None = None
        self._lock = threading.Lock()
        self.problem: str | None = None  # why the file could not be read (logged once per read), else None
        self._dropped: set[str] = set()  # keys of the entries not served (a checksum that does not match)

    @classmethod
    def from_entries(cls, entries: list[dict]) -> "ExampleStore":
        """A store held in memory (e.g. built from committed results kept in another layout)."""
        store = cls(os.devnull)
        index = {result_key(e["fingerprint"], e["analysis"], e["params"]): e for e in entries}
        store._loaded = (None, list(entries), index)
        return store

    def _load(self) -> tuple[list[dict], dict[str, dict]]:
        if self._loaded is not None and self._loaded[0] is None:  # from_entries
            return self._loaded[1], self._loaded[2]
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return [], {}
        with self._lock:
            if self._loaded is None or self._loaded[0] != mtime:
                self.problem = None
                try:
                    doc = json.loads(self.path.read_text())
                    if not isinstance(doc, dict) or doc.get("format") != self.FORMAT:
                        raise TypeError(f"not a {self.FORMAT} file")
                    entries = list(doc["entries"])
                except (OSError, ValueError, KeyError, TypeError) as err:  # a corrupt store: said, never silent
                    entries = []
                    self.problem = f"{type(err).__name__}: {str(err)[:120]}"
                    log.warning("%s could not be read (%s); its precomputed views are computed afresh when asked for",
                                self.path, self.problem)
                whole = [e for e in entries if isinstance(e, dict) and e.get("checksum") == example_checksum(e)]
                kept = {id(e) for e in whole}
                self._dropped = {_entry_key(e) for e in entries if isinstance(e, dict) and id(e) not in kept} - {None}
                if len(whole) < len(entries):
                    log.warning("%s: %d of %d entries not served (no checksum, or one that does not match their "
                                "content); they are computed when asked for", self.path, len(entries) - len(whole),
                                len(entries))
                entries = [{k: v for k, v in e.items() if k != "checksum"} for e in whole]
                index = {result_key(e["fingerprint"], e["analysis"], e["params"]): e for e in entries}
                self._loaded = (mtime, entries, index)
            return self._loaded[1], self._loaded[2]

    def not_served(self, key: str) -> str | None:
        """Why the entry ``key`` (:func:`result_key`) is not answered from this store although it was meant to be:
        the file could not be read, or the entry failed its checksum; None otherwise."""
        self._load()
        if self.problem:
            return f"the precomputed examples ({self.path.name}) could not be read"
        if key in self._dropped:
            return f"its precomputed entry in {self.path.name} failed its checksum"
        return None

    def entries(self, analysis: str | None = None) -> list[dict]:
        """The stored entries (of one analysis), in file order."""
        entries, _ = self._load()
        return [e for e in entries if analysis is None or e["analysis"] == analysis]

    def get(self, fingerprint: str, analysis: str, params: dict) -> dict | None:
        """The stored data for exactly this model fingerprint, analysis and parameters, or None."""
        return self._load()[1].get(result_key(fingerprint, analysis, params), {}).get("data")

    @classmethod
    def write(cls, path: str | os.PathLike, entries: list[dict]) -> Path:
        """Write ``entries`` (dicts with model, fingerprint, analysis, params, data) as an example store."""
        for e in entries:
            missing = {"model", "fingerprint", "analysis", "params", "data"} - set(e)
            if missing:
                raise BadInputError(f"an example entry lacks {', '.join(sorted(missing))}.")
        sealed = [{**e, "checksum": example_checksum(e)} for e in entries]
        doc = {"format": cls.FORMAT, "entries": sealed}
        return atomic_write(path, json.dumps(doc, separators=(",", ":"), default=str))

    @classmethod
    def seal(cls, path: str | os.PathLike, check_only: bool = False, schemas: Mapping[str, Any] | None = None) -> dict:
        """Write the checksum of every entry of the store at ``path`` from its content as it is (nothing is computed
        again), or with ``check_only`` just count them: ``{"entries", "unsealed", "schema_problems"}``. ``schemas``:
        ``{stored name: schema}`` (:func:`core.papers.stored_schemas`); the entries that do not fit theirs are listed,
        never fixed (such an entry needs its precompute command)."""
        from core.schema import problem

        doc = json.loads(Path(path).read_text())
        if doc.get("format") != cls.FORMAT:
            raise BadInputError(f"{path} is not an example store ({cls.FORMAT}).")
        entries = list(doc["entries"])
        unsealed = sum(e.get("checksum") != example_checksum(e) for e in entries)
        schema_problems = []
        for e in entries:
            schema = (schemas or {}).get(e["analysis"])
            found = problem(schema, e["data"]) if schema is not None else None
            if found:
                schema_problems.append(f"{e['analysis']} ({e.get('model')}): {found}")
        if unsealed and not check_only:
            cls.write(path, [{k: v for k, v in e.items() if k != "checksum"} for e in entries])
        return {"entries": len(entries), "unsealed": unsealed, "schema_problems": schema_problems}


def committed_stores() -> list[Path]:
    """Every example store committed with the project: each JSON file under ``assets/`` in the store format (each
    paper's ``examples.json``, the bias audit, each Mix-LN run's ``diagnostics.json``), found by its first bytes."""
    from core.paths import ASSETS_DIR

    head = f'{{"format":"{ExampleStore.FORMAT}"'.encode()
    stores = []
    for path in sorted(ASSETS_DIR.rglob("*.json")):
        try:
            with open(path, "rb") as fh:
                if fh.read(len(head)) == head:
                    stores.append(path)
        except OSError:
            continue
    return stores


_cache_lock = threading.Lock()
_caches: dict[str, Any] = {}
_recompute: dict[str, Any] = {"cache": None, "record": None}


@contextmanager
def recomputing():
    """Within the block every lookup ignores the examples and the user's cache and computes afresh, reusing only
    what it computed itself (a temporary cache): how ``precompute`` commands rebuild the examples."""
    from core.cache import ResultsCache

    with tempfile.TemporaryDirectory(prefix="layerwise-recompute-") as tmp:
        previous = _recompute["cache"]
        _recompute["cache"] = ResultsCache(tmp)
        try:
            yield
        finally:
            _recompute["cache"] = previous


def results_cache():
    """The shared :class:`core.cache.ResultsCache` of this process (one per cache folder)."""
    from core.cache import ResultsCache
    from core.paths import results_dir

    if _recompute["cache"] is not None:
        return _recompute["cache"]
    try:
        root = str(results_dir())
    except OSError:  # a read-only LAYERWISE_HOME: a cache that reads what it can, stores nothing and says why
        from core.paths import home_path
        root = str(home_path() / "results")
    with _cache_lock:
        if root not in _caches:
            _caches[root] = ResultsCache(root)
        return _caches[root]


@dataclass
class Found:
    """What :func:`lookup` found: the data, where it came from and its key; ``note``: why a view meant to be
    precomputed was not (said in its status)."""

    data: Any
    source: str  # "precomputed" | "cache" | "computed"
    key: str
    note: str = ""


def _entry_key(e: dict) -> str | None:
    try:
        return result_key(e["fingerprint"], e["analysis"], e["params"])
    except (KeyError, TypeError):
        return None


def has_fields(*keys: str) -> Callable[[Any], None]:
    """A result check for :func:`lookup`: the fields its view reads are there (a ``KeyError`` naming the missing)."""
    def check(data) -> None:
        missing = [k for k in keys if k not in data]
        if missing:
            raise KeyError(f"no {', '.join(missing)}")
    return check


def lookup(fingerprint: str, analysis: str, params: dict, compute: Callable[[], Any], *,
           examples: ExampleStore | None = None, cache: bool = True,
           check: Callable[[Any], Any] | None = None, model: str | None = None, tensors: bool = False,
           schema=None) -> Found:
    """The result of ``analysis`` with ``params`` on the model with ``fingerprint``: a committed example, else the
    results cache, else ``compute()`` (stored in the cache; computed once under concurrent requests).

    ``compute`` may raise :class:`Cancelled`; nothing is cached then. ``check(data)`` is what the caller does with
    the result next (e.g. build its view); it must not raise. ``schema`` (:mod:`core.schema`; the analysis' own,
    :attr:`core.analyses.Analysis.schema`) is checked too, on an example as on a cached result. A cached result
    that fails either, holds a NaN or infinite number, or whose checksum or record does not match, is dropped and
    recomputed; a computed one that fails is neither returned nor cached (:class:`core.cache.InvalidResultError`,
    one clear message). ``model`` names the model in an example entry that :func:`precompute` writes (default: the
    fingerprint).

    ``tensors=True``: a result that carries tensors (e.g. statistics a later step reuses): ``compute()`` returns a
    :class:`core.cache.CacheEntry`, ``check`` receives it and ``Found.data`` is it; such a result is never an example
    (neither answered from ``examples`` nor written by :func:`precompute`).
    """
    from core.cache import CacheEntry, check_entry
    from core.schema import problem

    key = result_key(fingerprint, analysis, params)
    schema = None if tensors else schema
    why = None
    if examples is not None and not tensors and _recompute["cache"] is None:
        data = examples.get(fingerprint, analysis, params)
        wrong = problem(schema, data) if data is not None and schema is not None else None
        if wrong:
            log.warning("the example %s of %s is not served (%s); it is computed instead", key, analysis, wrong)
            why = f"its precomputed entry does not fit its schema ({wrong})"
        elif data is not None:
            return Found(data, "precomputed", key)
        else:
            why = examples.not_served(key)
    make = compute if tensors else (lambda: CacheEntry(compute()))
    entry_check = check if tensors or check is None else (lambda entry: check(entry.data))
    if not cache:
        entry, hit = make(), False
        check_entry(entry, entry_check, analysis, schema)
    else:
        entry, hit = results_cache().get_or_compute(fingerprint, analysis, params, make, entry_check,
                                                    schema=schema)
    found = Found(entry if tensors else entry.data, "cache" if hit else "computed", key,
                  f"{why}, so this view was computed afresh" if why else "")
    if _recompute["record"] is not None and not tensors:
        _recompute["record"][key] = {"model": model or fingerprint, "fingerprint": fingerprint, "analysis": analysis,
                                     "params": params, "data": found.data}
    return found


def cached_entry(fingerprint: str, analysis: str, params: dict, compute, check=None):
    """``(CacheEntry, hit)`` from the results cache, for results that carry tensors (``compute() -> CacheEntry``);
    ``check(entry)`` as in :func:`lookup`."""
    return results_cache().get_or_compute(fingerprint, analysis, params, compute, check)


def digest(*parts) -> str:
    """A short stable hash of JSON-able parts (for keys of results without a model fingerprint)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def precompute(calls: Iterable[Callable[[], Any]], path: str | os.PathLike, keep: Callable[[dict], bool] | None = None,
               log: Callable[[str], Any] | None = None) -> Path:
    """Make a paper's examples: run each of ``calls`` (zero-argument callables, e.g. ``lambda: text_result(...)``)
    afresh (:func:`recomputing`: neither the examples nor the user's cache answer) and write every result their
    lookups returned, one entry per result key, as the example store at ``path``. ``keep(entry)`` keeps entries of
    the store already there (e.g. the parts of an example not measured again); the new ones win on equal keys."""
    path = Path(path)
    kept = [e for e in ExampleStore(path).entries() if keep(e)] if keep is not None else []
    recorded: dict[str, dict] = {}
    with recomputing():
        _recompute["record"] = recorded
        try:
            for call in calls:
                call()
                if log is not None:
                    log(f"{len(recorded)} results so far")
        finally:
            _recompute["record"] = None
    new_keys = set(recorded)
    entries = [e for e in kept if result_key(e["fingerprint"], e["analysis"], e["params"]) not in new_keys]
    return ExampleStore.write(path, entries + list(recorded.values()))


__all__ = ["ExampleStore", "committed_stores", "example_checksum", "Found", "lookup", "cached_entry", "has_fields", "result_key", "recomputing",
           "results_cache", "precompute", "digest"]
