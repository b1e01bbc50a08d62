"""The results cache: heavy results on disk, keyed by model fingerprint + analysis + parameters.

An entry is one safetensors file: its tensors plus a JSON document in the metadata. Writes go through
:func:`core.runner.atomic_write` (a temp file in the same folder, renamed into place), so a reader sees
either the whole entry or none. :meth:`ResultsCache.get_or_compute` holds an exclusive ``flock`` per key,
so concurrent requests (threads or processes) for the same key compute it once. Past ``max_bytes``
the least recently used entries are evicted.

Faults: a file that cannot be read as an entry (truncated, garbage, cut short by a killed writer) is a miss and
is recomputed. A folder that cannot be written (read-only, no permission, full disk) never fails a request:
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

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from core.errors import storage_error
from core.paths import results_dir
from core.runner import atomic_write

log = logging.getLogger("layerwise.cache")

DEFAULT_MAX_BYTES = 2 * 1024**3


@dataclass
class CacheEntry:
    """A cached result: JSON-able ``data`` and named ``tensors``."""

    data: Any
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def cache_key(fingerprint: str, analysis: str, params: dict) -> str:
    """A stable key: sha256 of the canonical JSON of (fingerprint, analysis, params)."""
    doc = json.dumps({"model": fingerprint, "analysis": analysis, "params": params}, sort_keys=True, default=str)
    return f"{analysis.replace('/', '-')}-{hashlib.sha256(doc.encode()).hexdigest()[:32]}"


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
        """The entry for ``key``, or None (also for an unreadable file, which is removed)."""
        path = self._path(key)
        try:
            tensors = load_file(path)
            with safe_open(path, framework="pt") as fh:
                meta = fh.metadata() or {}
            entry = CacheEntry(json.loads(meta.get("data", "null")), dict(tensors))
        except FileNotFoundError:
            return None
        except (SafetensorError, OSError, ValueError, json.JSONDecodeError):
            try:
                path.unlink(missing_ok=True)  # a corrupt entry is a miss, never an error
            except OSError:
                pass  # a read-only folder keeps it; it stays a miss
            return None
        try:
            os.utime(path)  # mark as recently used
        except OSError:
            pass  # read-only: the entry is still good
        return entry

    def put(self, key: str, entry: CacheEntry) -> None:
        """Write ``entry`` atomically, then evict old entries beyond the size cap."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in entry.tensors.items()}
        meta = {"data": json.dumps(entry.data)}
        atomic_write(self._path(key), lambda tmp: save_file(tensors, str(tmp), metadata=meta))
        self.evict()

    def store(self, key: str, entry: CacheEntry) -> bool:
        """:meth:`put`, except that a folder that cannot be written (read-only, full) only warns; True if stored."""
        if self.disabled:
            return False
        try:
            self.put(key, entry)
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

    def get_or_compute(self, fingerprint: str, analysis: str, params: dict,
                       compute: Callable[[], CacheEntry]) -> tuple[CacheEntry, bool]:
        """Return ``(entry, hit)``; on a miss run ``compute`` once even under concurrent callers."""
        key = cache_key(fingerprint, analysis, params)
        entry = self.get(key)
        if entry is not None:
            return entry, True
        with self._locked(key):
            entry = self.get(key)  # another caller may have filled it while we waited
            if entry is not None:
                return entry, True
            entry = compute()
            self.store(key, entry)
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

    def clear(self) -> dict:
        """Delete every entry and lock file; return what was removed."""
        n, freed = 0, 0
        for p in list(self.root.iterdir()):
            if p.suffix in (".safetensors", ".lock", ".tmp") and p.is_file():
                freed += p.stat().st_size
                p.unlink(missing_ok=True)
                n += p.suffix == ".safetensors"
        return {"entries": n, "bytes": freed}

    def info(self) -> dict:
        return {"root": str(self.root), "entries": len(self.entries()), "bytes": self.size_bytes(),
                "max_bytes": self.max_bytes, "problem": self.disabled or self.problem}
