"""The results cache: heavy results on disk, keyed by model fingerprint + analysis + parameters.

An entry is one safetensors file: its tensors plus a JSON document in the metadata. Writes go through
:func:`core.runner.atomic_write` (a temp file in the same folder, renamed into place), so a reader sees
either the whole entry or none. :meth:`ResultsCache.get_or_compute` holds an exclusive ``flock`` per key,
so concurrent requests (threads or processes) for the same key compute it once. Past ``max_bytes``
the least recently used entries are evicted.

Faults: a file that cannot be read as an entry (truncated, garbage, cut short by a killed writer) is a miss and
is recomputed.

Poison: a result is checked before it is stored (:func:`check_entry`: JSON data with finite numbers only, tensors
with data and finite values, the analysis' schema (:mod:`core.schema`: every field its view reads, ``None`` only where
the view shows it as missing), plus the caller's ``check``, e.g. building the view that shows it); a result that fails
is not stored and the request gets one clear message (:class:`InvalidResultError`). Each entry records what it was
computed for (model fingerprint, analysis, parameters), so :meth:`ResultsCache.clear` can remove the entries of one
analysis or one model, and a checksum of its content (:func:`entry_checksum`: data, tensors and that record). An entry
read back is served only if its checksum matches, its record is the one asked for (not another model's or analysis'
entry under this name) and it passes the same checks; any other (written by an older version, by hand, a value
changed on disk) is dropped with one log line and recomputed, never served. A folder that cannot be written (read-only, no permission, full disk) never fails a request:
entries are still read where they can be, results are computed and returned without being stored, and a
warning says why (``disabled`` holds the reason when the folder cannot even be created).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import math

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from core.errors import Cancelled, LayerwiseError, storage_error
from core.paths import results_dir
from core.files import atomic_write

log = logging.getLogger("layerwise.cache")

DEFAULT_MAX_BYTES = 2 * 1024**3


@dataclass
class CacheEntry:
    """A cached result: JSON-able ``data`` and named ``tensors``."""

    data: Any
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class InvalidResultError(LayerwiseError):
    """A computed result that must not be shown or cached: a NaN or infinite number, a tensor without data (meta),
    or a field its view needs is missing."""


def _bad_number(value, where: str) -> str | None:
    """Where in ``value`` (JSON-able data) the first non-finite number or non-JSON value sits, or None."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is {value}"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where} has a key {k!r} that is not text"
            found = _bad_number(v, f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _bad_number(v, f"{where}[{i}]")
            if found:
                return found
        return None
    return f"{where} is a {type(value).__name__}, not JSON data"


def entry_problem(entry: "CacheEntry", check: Callable[["CacheEntry"], Any] | None = None,
                  schema=None) -> str | None:
    """Why ``entry`` must not be stored or served, or None when it is fine: a non-finite number (or a value that is
    not JSON) in its data, a field that does not fit ``schema`` (:mod:`core.schema`), a tensor on the meta device (no
    data), a NaN or infinite tensor value, or ``check(entry)`` raising (e.g. the view that shows the result fails)."""
    if not isinstance(entry, CacheEntry):
        return f"a {type(entry).__name__}, not a cache entry"
    found = _bad_number(entry.data, "data")
    if found:
        return found
    if schema is not None:
        from core.schema import problem
        found = problem(schema, entry.data)
        if found:
            return found
    for name, t in entry.tensors.items():
        if not isinstance(t, torch.Tensor):
            return f"tensor {name} is a {type(t).__name__}"
        if t.is_meta:
            return f"tensor {name} has no data (meta device)"
        if (t.is_floating_point() or t.is_complex()) and t.numel() and not bool(torch.isfinite(t).all()):
            return f"tensor {name} holds NaN or infinite values"
    if check is not None:
        try:
            check(entry)
        except (Cancelled, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to show the result is the finding
            return f"it cannot be shown ({type(exc).__name__}: {exc})"
    return None


def check_entry(entry: "CacheEntry", check: Callable[["CacheEntry"], Any] | None = None, what: str = "",
                schema=None) -> None:
    """Raise :class:`InvalidResultError` when :func:`entry_problem` finds one."""
    problem = entry_problem(entry, check, schema)
    if problem:
        raise InvalidResultError(f"the result{' of ' + what if what else ''} is not valid ({problem[:300]}), so it "
                                 "was neither shown nor cached.",
                                 fix="try other settings; if it happens again with these, report it as a bug.")


def cache_key(fingerprint: str, analysis: str, params: dict) -> str:
    """A stable key: sha256 of the canonical JSON of (fingerprint, analysis, params)."""
    doc = json.dumps({"model": fingerprint, "analysis": analysis, "params": params}, sort_keys=True, default=str)
    return f"{analysis.replace('/', '-')}-{hashlib.sha256(doc.encode()).hexdigest()[:32]}"


CHECKSUM_VERSION = "layerwise-cache/2"


def entry_checksum(data_json: str, about_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over what an entry holds, as stored: its data and record (the JSON texts of its metadata) and every
    tensor (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256(CHECKSUM_VERSION.encode())
    for text in (data_json, about_json):
        h.update(len(text).to_bytes(8, "little") + text.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class ResultsCache:
    """A size-capped on-disk cache of :class:`CacheEntry` objects."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else results_dir()
        self.disabled: str | None = None  # why nothing can be stored (a read-only folder), or None
        self.problem: str | None = None  # the last storage problem met (e.g. a full disk), or None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            self.disabled = self._storage_problem(err)
        env_cap = os.environ.get("LAYERWISE_CACHE_MAX_BYTES")
        self.max_bytes = int(max_bytes if max_bytes is not None else (env_cap or DEFAULT_MAX_BYTES))
        self._thread_lock = threading.Lock()

    def _storage_problem(self, err: OSError) -> str:
        """Warn (once per distinct problem) that results are not stored, and return why; other errors propagate."""
        problem = storage_error(err)
        if problem is None:
            raise err
        text = f"results are not cached: {problem}"
        if text != self.problem:
            self.problem = text
            log.warning(text)
            warnings.warn(text, RuntimeWarning, stacklevel=3)
        return text

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.safetensors"

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key``, or None (also for an unreadable file, which is removed). Not checked: see
        :meth:`checked` for entries that are checked before they are served."""
        found = self._read(key)
        return found[0] if found is not None else None

    def _read(self, key: str) -> tuple[CacheEntry, dict] | None:
        """``(entry, its metadata)`` for ``key``, or None (an unreadable file is removed: a miss, never an error)."""
        path = self._path(key)
        try:
            tensors = load_file(path)
            with safe_open(path, framework="pt") as fh:
                meta = fh.metadata() or {}
            entry = CacheEntry(json.loads(meta.get("data", "null")), dict(tensors))
        except FileNotFoundError:
            return None
        except (SafetensorError, OSError, ValueError, json.JSONDecodeError):
            self.drop(key, "the file cannot be read as an entry (truncated or corrupt)")
            return None
        try:
            os.utime(path)  # mark as recently used
        except OSError:
            pass  # read-only: the entry is still good
        return entry, meta

    def put(self, key: str, entry: CacheEntry, about: dict | None = None) -> None:
        """Write ``entry`` atomically, then evict old entries beyond the size cap. ``about`` (what the entry was
        computed for: fingerprint, analysis, params) is stored beside it for :meth:`clear`."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in entry.tensors.items()}
        meta = {"data": json.dumps(entry.data, allow_nan=False)}
        if about is not None:
            meta["about"] = json.dumps(about, sort_keys=True, default=str)
        meta["checksum"] = entry_checksum(meta["data"], meta.get("about", ""), tensors)
        atomic_write(self._path(key), lambda tmp: save_file(tensors, str(tmp), metadata=meta))
        self.evict()

    def store(self, key: str, entry: CacheEntry, about: dict | None = None) -> bool:
        """:meth:`put`, except that a folder that cannot be written (read-only, full) only warns; True if stored."""
        if self.disabled:
            return False
        try:
            self.put(key, entry, about)
        except OSError as err:
            self._storage_problem(err)
            return False
        return True

    @contextmanager
    def _locked(self, key: str):
        lock_path = self.root / f".{key}.lock"
        try:
            with self._thread_lock:
                fh = open(lock_path, "a+")
        except OSError as err:  # a read-only folder: compute without the lock (at worst twice)
            self._storage_problem(err)
            yield
            return
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    def drop(self, key: str, why: str = "") -> None:
        """Remove the entry of ``key`` (a read-only folder keeps it; it is still never served), with one log line."""
        log.warning("dropped the cached result %s%s; it is computed again", key, f": {why}" if why else "")
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError:
            pass

    def checked(self, key: str, check: Callable[[CacheEntry], Any] | None = None, schema=None) -> CacheEntry | None:
        """The entry of ``key`` if it is whole and passes :func:`entry_problem` (with ``check`` and ``schema``); an
        entry that fails is dropped (:meth:`drop`: one log line) and is a miss. Whole: its checksum matches its
        content (:func:`entry_checksum`) and its record names what ``key`` is the key of."""
        found = self._read(key)
        if found is None:
            return None
        entry, meta = found
        problem = self._integrity_problem(key, entry, meta) or entry_problem(entry, check, schema)
        if problem:
            self.drop(key, problem)
            return None
        return entry

    @staticmethod
    def _integrity_problem(key: str, entry: CacheEntry, meta: dict) -> str | None:
        """Why an entry read back is not the whole entry of ``key``: no checksum (an older version wrote it), one
        that does not match its content (changed on disk), or a record of another model, analysis or parameters."""
        if "checksum" not in meta or "about" not in meta:
            return "it has no checksum (written by an older version)"
        if meta["checksum"] != entry_checksum(meta.get("data", "null"), meta["about"], entry.tensors):
            return "its checksum does not match its content (changed on disk)"
        try:
            about = json.loads(meta["about"])
            owner = cache_key(about["fingerprint"], about["analysis"], about["params"])
        except (ValueError, KeyError, TypeError):
            return "its record of what it was computed for cannot be read"
        if owner != key:
            return (f"it was computed for another model or analysis ({str(about.get('analysis'))[:60]} of "
                    f"{str(about.get('fingerprint'))[:30]}), not for this request")
        return None

    def get_or_compute(self, fingerprint: str, analysis: str, params: dict, compute: Callable[[], CacheEntry],
                       check: Callable[[CacheEntry], Any] | None = None, schema=None) -> tuple[CacheEntry, bool]:
        """Return ``(entry, hit)``; on a miss run ``compute`` once even under concurrent callers.

        A stored entry is served only if it is whole and passes :func:`entry_problem` with ``check`` and ``schema``
        (:meth:`checked`; else it is dropped and recomputed); a computed one is stored only if it passes, else
        :class:`InvalidResultError` is raised and nothing is stored."""
        key = cache_key(fingerprint, analysis, params)
        entry = self.checked(key, check, schema)
        if entry is not None:
            return entry, True
        with self._locked(key):
            entry = self.checked(key, check, schema)  # another caller may have filled it while we waited
            if entry is not None:
                return entry, True
            entry = compute()
            check_entry(entry, check, analysis, schema)
            self.store(key, entry, {"fingerprint": fingerprint, "analysis": analysis, "params": params})
            return entry, False

    def entries(self) -> list[Path]:
        return sorted(self.root.glob("*.safetensors"))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.entries() if p.exists())

    def evict(self) -> int:
        """Remove least recently used entries until the cache fits ``max_bytes``; return how many."""
        files = []
        for p in self.entries():
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        removed = 0
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            try:
                path.unlink(missing_ok=True)
            except OSError:
                break
            total -= size
            removed += 1
        return removed

    def about(self, path: Path) -> dict | None:
        """What the entry at ``path`` was computed for (fingerprint, analysis, params), or None when it does not say
        (written before entries recorded it, or unreadable)."""
        try:
            with safe_open(str(path), framework="pt") as fh:
                raw = (fh.metadata() or {}).get("about")
            return json.loads(raw) if raw else None
        except (SafetensorError, OSError, ValueError):
            return None

    def clear(self, analysis: str | None = None, fingerprint: str | None = None) -> dict:
        """Delete entries; return what was removed (``entries``, ``bytes``; with a filter also ``kept``).

        Without filters every entry and lock file goes. With ``analysis`` (e.g. ``mathneuro-layers``; a name ending
        in ``*`` is a prefix, e.g. ``mathneuro-*``) and/or ``fingerprint`` (a model's, :func:`core.zoo.fingerprint`),
        only the entries recorded for them go; entries that do not record what they were computed for are kept when
        a model is named, and matched by their file name when only an analysis is named."""
        if analysis is None and fingerprint is None:
            n, freed = 0, 0
            for p in list(self.root.iterdir()):
                if p.suffix in (".safetensors", ".lock", ".tmp") and p.is_file():
                    freed += p.stat().st_size
                    p.unlink(missing_ok=True)
                    n += p.suffix == ".safetensors"
            return {"entries": n, "bytes": freed}

        def analysis_matches(name: str) -> bool:
            wanted = analysis.replace("/", "-")  # file names spell the analysis with - for /
            name = name.replace("/", "-")
            return name.startswith(wanted[:-1]) if wanted.endswith("*") else name == wanted

        n, freed, kept = 0, 0, 0
        for p in self.entries():
            about = self.about(p)
            if about is None:  # an entry from before entries recorded their model: its analysis is in its name
                hit = fingerprint is None and analysis_matches(p.stem[:-33])
            else:
                hit = (analysis is None or analysis_matches(str(about.get("analysis")))) and (
                    fingerprint is None or about.get("fingerprint") == fingerprint)
            if not hit:
                kept += 1
                continue
            try:
                size = p.stat().st_size
                p.unlink()
            except FileNotFoundError:
                continue
            n, freed = n + 1, freed + size
        return {"entries": n, "bytes": freed, "kept": kept}

    def info(self) -> dict:
        return {"root": str(self.root), "entries": len(self.entries()), "bytes": self.size_bytes(),
                "max_bytes": self.max_bytes, "problem": self.disabled or self.problem}
