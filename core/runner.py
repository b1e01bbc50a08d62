"""The one runner behind every tab and CLI command: where a result comes from, how long work reports progress and
stops, and how result files are written.

Lookup
    :func:`lookup` answers ``(fingerprint, analysis, params)`` from the committed examples (an :class:`ExampleStore`,
    read without loading any model), then from the results cache, then by computing (and caching) it. The
    fingerprint of a registered model or a folder comes from its weight files (:func:`core.zoo.fingerprint`), so a
    precomputed example shows at once.
Progress and cancellation
    One callable, ``progress(fraction, message)`` with ``fraction`` in [0, 1]; it may raise
    :class:`core.errors.Cancelled` to stop the work (the UI's Stop does so through :func:`cancellable`). Loops that
    count items adapt it with :func:`item_progress`; :func:`scaled` maps it onto a sub-range.
Files
    :func:`atomic_write` is the one way a file or folder is written (temp sibling, then rename). A :class:`Result`
    (status text, data, tables, figures) writes its JSON / CSV / HTML files with :meth:`Result.write` (the CLI's
    ``--out``) or :meth:`Result.files` (the tab's downloads, kept per result key so a repeat costs nothing).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from core.errors import BadInputError, Cancelled

Progress = Callable[[float, str], None]
SOURCES = {"precomputed": "precomputed example", "cache": "from the results cache", "computed": "computed now"}
FILES_MAX_BYTES = 512 * 1024**2
MAX_THREADS = 1024


def check_threads(n: int, *, zero_is_default: bool = False) -> int:
    """``n`` as a torch thread count (with ``zero_is_default``, 0 means torch's default), or
    :class:`BadInputError` for a count torch cannot take (negative, zero, absurdly large)."""
    low = 0 if zero_is_default else 1
    if not low <= n <= MAX_THREADS:
        raise BadInputError(f"--threads {n} is not a thread count.",
                            fix=f"give a number from {low} to {MAX_THREADS} (about the machine's cores).")
    return n


def check_number(value, what: str, lo: float | None = None, hi: float | None = None, *, whole: bool = False):
    """``value`` as a float (an int with ``whole``) in [lo, hi], or one :class:`BadInputError` naming ``what`` and the
    range: for NaN, infinity, a fraction where a whole number belongs, a word, a blank or a value out of range."""
    bounds = f" from {lo:g} to {hi:g}" if lo is not None and hi is not None else \
        f" of at least {lo:g}" if lo is not None else f" of at most {hi:g}" if hi is not None else ""
    kind = "a whole number" if whole else "a number"
    try:
        number = float(value)
        if isinstance(value, bool) or not math.isfinite(number) or (whole and not number.is_integer()):
            raise ValueError(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInputError(f"{what} = {value!r} is not {kind}.", fix=f"give {kind}{bounds}.") from None
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise BadInputError(f"{what} = {value!r} is out of range.", fix=f"give {kind}{bounds}.")
    return int(number) if whole else number


# ---- progress and cancellation --------------------------------------------------------------------------------
def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress`` (if any) with ``fraction`` clipped to [0, 1]; it may raise :class:`Cancelled`."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)


def scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """``progress`` seen through the sub-range [lo, hi] (a step of a longer job)."""
    if progress is None:
        return None
    return lambda fraction, message: report(progress, lo + (hi - lo) * fraction, message)


def item_progress(progress: Progress | None, what: str, lo: float = 0.0, hi: float = 1.0):
    """An adapter for loops that count items: ``(done, total, name=None) -> progress(fraction, message)``."""
    if progress is None:
        return None

    def step(done: int, total: int, name: str | None = None) -> None:
        label = f"{what} {done}/{total}" + (f": {name}" if name else "")
        report(progress, lo + (hi - lo) * done / max(total, 1), label)
    return step


def cancellable(progress: Progress | None, stopped: Callable[[], bool]) -> Progress:
    """A progress callable that raises :class:`Cancelled` once ``stopped()`` is true, else forwards to ``progress``."""
    def checked(fraction: float, message: str) -> None:
        if stopped():
            raise Cancelled("Stopped.", fix="Press the button again to restart.")
        report(progress, fraction, message)
    return checked


# ---- atomic files ---------------------------------------------------------------------------------------------
def atomic_write(path: str | os.PathLike, content: str | bytes | Callable[[Path], Any], *, folder: bool = False,
                 mode: int = 0o644) -> Path:
    """Write ``path`` so that a reader sees the old version or the whole new one, never a part.

    Parameters
    ----------
    path : the file (or, with ``folder=True``, the folder) to write; its parent must exist or is created.
    content : text, bytes, or ``writer(tmp_path)`` that writes the file (or fills the folder) at ``tmp_path``.
    folder : replace a whole folder (an existing one is moved aside, then removed).
    mode : permissions of the file (folders get 0o755 and their files ``mode``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        if isinstance(content, str):
            tmp.write_text(content, encoding="utf-8")
        elif isinstance(content, (bytes, bytearray)):
            tmp.write_bytes(content)
        else:
            content(tmp)
        if folder:
            tmp.chmod(0o755)
            for f in tmp.rglob("*"):
                f.chmod(0o755 if f.is_dir() else mode)
            old = None
            if path.exists():
                old = path.with_name(f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:6]}")
                os.replace(path, old)
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.chmod(mode)  # mkstemp makes it private; a result file is an ordinary file
            os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    return path


# ---- where a result comes from --------------------------------------------------------------------------------
def result_key(fingerprint: str, analysis: str, params: dict) -> str:
    """The key of a result, the same for the examples, the results cache and the download files."""
    from core.cache import cache_key
    return cache_key(fingerprint, analysis, params)


class ExampleStore:
    """Precomputed results committed with the project: one JSON file of cache entries
    ``{"model", "fingerprint", "analysis", "params", "data"}``, keyed like the results cache.

    Read once (again when the file changes) and never written by the app; ``python -m core <paper> precompute``
    writes it with :meth:`write`.
    """

    FORMAT = "layerwise-examples/1"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._loaded: tuple[float, list[dict], dict[str, dict]] | None = None
        self._lock = threading.Lock()

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
                try:
                    doc = json.loads(self.path.read_text())
                    entries = list(doc["entries"]) if doc.get("format") == self.FORMAT else []
                except (OSError, ValueError, KeyError, TypeError):
                    entries = []
                index = {result_key(e["fingerprint"], e["analysis"], e["params"]): e for e in entries}
                self._loaded = (mtime, entries, index)
            return self._loaded[1], self._loaded[2]

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
        doc = {"format": cls.FORMAT, "entries": entries}
        return atomic_write(path, json.dumps(doc, separators=(",", ":"), default=str))


_cache_lock = threading.Lock()
_caches: dict[str, Any] = {}
_recompute: dict[str, Any] = {"cache": None}


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
    """What :func:`lookup` found: the data, where it came from and its key."""

    data: Any
    source: str  # "precomputed" | "cache" | "computed"
    key: str


def has_fields(*keys: str) -> Callable[[Any], None]:
    """A result check for :func:`lookup`: the fields its view reads are there (a ``KeyError`` naming the missing)."""
    def check(data) -> None:
        missing = [k for k in keys if k not in data]
        if missing:
            raise KeyError(f"no {', '.join(missing)}")
    return check


def lookup(fingerprint: str, analysis: str, params: dict, compute: Callable[[], Any], *,
           examples: ExampleStore | None = None, cache: bool = True,
           check: Callable[[Any], Any] | None = None) -> Found:
    """The result of ``analysis`` with ``params`` on the model with ``fingerprint``: a committed example, else the
    results cache, else ``compute()`` (stored in the cache; computed once under concurrent requests).

    ``compute`` may raise :class:`Cancelled`; nothing is cached then. ``check(data)`` is what the caller does with
    the result next (e.g. build its view); it must not raise. A cached result that fails it, or holds a NaN or
    infinite number, is dropped and recomputed; a computed one that fails is neither returned nor cached
    (:class:`core.cache.InvalidResultError`, one clear message).
    """
    from core.cache import CacheEntry, check_entry

    key = result_key(fingerprint, analysis, params)
    if examples is not None and _recompute["cache"] is None:
        data = examples.get(fingerprint, analysis, params)
        if data is not None:
            return Found(data, "precomputed", key)
    entry_check = None if check is None else (lambda entry: check(entry.data))
    if not cache:
        data = compute()
        check_entry(CacheEntry(data), entry_check, analysis)
        return Found(data, "computed", key)
    entry, hit = results_cache().get_or_compute(fingerprint, analysis, params, lambda: CacheEntry(compute()),
                                                entry_check)
    return Found(entry.data, "cache" if hit else "computed", key)


def cached_entry(fingerprint: str, analysis: str, params: dict, compute, check=None):
    """``(CacheEntry, hit)`` from the results cache, for results that carry tensors (``compute() -> CacheEntry``);
    ``check(entry)`` as in :func:`lookup`."""
    return results_cache().get_or_compute(fingerprint, analysis, params, compute, check)


# ---- results and their files ----------------------------------------------------------------------------------
@dataclass
class Result:
    """What a service returns for one user action; the tab shows it, the CLI prints and writes it.

    Attributes
    ----------
    status : a one-paragraph Markdown text saying what was computed (and whether it was precomputed or cached).
    data : the JSON-able result (the ``.json`` file).
    tables : name -> rows (list of dicts), written as CSV: the first as ``<stem>.csv``, others ``<stem>-<name>.csv``.
    figures : name -> plotly figure, written as HTML (plotly.js inlined), named like the tables.
    views : name -> anything else a view shows that is not a file (an HTML heatmap, a summary table, choices).
    source : "precomputed", "cache" or "computed".
    key : the result key (the download files of a key are written once); None for results that are not cached.
    stem : the file name stem.
    downloads : which file types the tab offers (the CLI can write any of json, csv, html the result has).
    main_first : the first table / figure is the result's main one, written as ``<stem>.csv`` / ``<stem>.html``;
        False names every file ``<stem>-<name>`` (a page of several equal parts).
    """

    status: str
    data: Any
    tables: dict[str, list[dict]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    views: dict[str, Any] = field(default_factory=dict)
    source: str = "computed"
    key: str | None = None
    stem: str = "result"
    downloads: tuple[str, ...] = ("json", "csv", "html")
    main_first: bool = True

    def _names(self, kind: str, items: dict) -> dict[str, Any]:
        """The main table (figure) is ``<stem>.csv`` (``.html``), the others ``<stem>-<name>.csv``."""
        return {(f"{self.stem}.{kind}" if i == 0 and self.main_first else f"{self.stem}-{name}.{kind}"): value
                for i, (name, value) in enumerate(items.items())}

    def file_plan(self, kinds=("json", "csv", "html")) -> dict[str, tuple[str, Any]]:
        """``file name -> (kind, payload)`` of every file this result has, of the given kinds."""
        plan: dict[str, tuple[str, Any]] = {}
        if "json" in kinds:
            plan[f"{self.stem}.json"] = ("json", self.data)
        if "csv" in kinds:
            plan.update({n: ("csv", rows) for n, rows in self._names("csv", self.tables).items()})
        if "html" in kinds:
            plan.update({n: ("html", fig) for n, fig in self._names("html", self.figures).items()})
        return plan

    def write(self, out: str | os.PathLike) -> list[Path]:
        """The CLI's ``--out``: a folder gets every file; ``FILE.json|.csv|.html`` gets the data, the (first) table
        or the (first) figure. Raises :class:`BadInputError` for another suffix, a missing folder or a format this
        result lacks."""
        from core.figures import write_output

        out = Path(out)
        suffix = out.suffix.lower()
        if not suffix:
            if not out.is_dir():
                raise BadInputError(f"the folder {out} does not exist.", fix="create it first, or give FILE.json.")
            return [write_output(out / name, **_payload(kind, value)) for name, (kind, value) in
                    self.file_plan().items()]
        if suffix not in (".json", ".csv", ".html"):
            raise BadInputError(f"cannot write {out.name}: the output must end in .json, .csv or .html.")
        if suffix == ".csv" and not self.tables:
            raise BadInputError("this result has no table to write as CSV.", fix="write .json instead.")
        if suffix == ".html" and not self.figures:
            raise BadInputError("this result has no figure to write as HTML.", fix="write .json or .csv instead.")
        kind = suffix.lstrip(".")
        value = {"json": self.data, "csv": next(iter(self.tables.values()), None),
                 "html": next(iter(self.figures.values()), None)}[kind]
        return [write_output(out, **_payload(kind, value))]

    def files(self) -> list[str]:
        """The tab's downloads (the kinds in ``downloads``), written once per result key into the files folder."""
        plan = self.file_plan(self.downloads)
        if not plan:
            return []
        try:
            folder = files_dir() / (self.key or f"once-{uuid.uuid4().hex}")
            if not all((folder / name).is_file() for name in plan):
                from core.figures import write_output

                def fill(tmp: Path) -> None:
                    for name, (kind, value) in plan.items():
                        write_output(tmp / name, **_payload(kind, value))
                atomic_write(folder, fill, folder=True)
                _evict_files(folder)
            else:
                os.utime(folder)
        except OSError as err:  # a read-only or full LAYERWISE_HOME: the result is shown, without downloads
            from core.errors import storage_error
            problem = storage_error(err)
            if problem is None:
                raise
            import warnings
            warnings.warn(f"no download files: {problem}", RuntimeWarning, stacklevel=2)
            return []
        return [str(folder / name) for name in plan]


def _payload(kind: str, value) -> dict:
    return {"json": {"data": value}, "csv": {"rows": value}, "html": {"figure": value}}[kind]


def files_dir() -> Path:
    """Where the tabs' download files live (inside the user cache; ``app.py`` lets Gradio serve it)."""
    from core.paths import home
    path = home() / "files"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _evict_files(keep: Path, max_bytes: int = FILES_MAX_BYTES) -> None:
    folders = []
    for p in files_dir().iterdir():
        if p.is_dir() and not p.name.startswith("."):
            try:
                folders.append((p.stat().st_mtime, sum(f.stat().st_size for f in p.iterdir()), p))
            except OSError:
                continue
    total = sum(size for _, size, _ in folders)
    for _, size, path in sorted(folders):
        if total <= max_bytes:
            break
        if path != keep:
            shutil.rmtree(path, ignore_errors=True)
            total -= size


def source_text(source: str) -> str:
    """How a status text names where a result came from."""
    return SOURCES.get(source, source)


def digest(*parts) -> str:
    """A short stable hash of JSON-able parts (for keys of results without a model fingerprint)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


__all__ = ["Progress", "check_number", "report", "scaled", "item_progress", "cancellable", "atomic_write", "ExampleStore", "recomputing",
           "results_cache", "Found", "lookup", "cached_entry", "result_key", "Result", "files_dir", "source_text",
           "digest", "Cancelled"]
