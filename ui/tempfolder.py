"""Gradio's temp folder, bounded by size (issue 42): every distinct explanation added about 4.85 MB to it (its
downloads, the HTML figure with plotly inside), and only Gradio's hourly sweep of files older than an hour bounded it.

:func:`keep_bounded` (``app.py`` calls it once the app is up) sweeps the folder every :data:`SWEEP_SECONDS` and after
every heavy event (:func:`ui.lanes.bound_heavy`): while it holds more than :func:`max_temp_bytes`
(``LAYERWISE_MAX_TEMP_MB``, default 512), the least recently written files go first. A file written in the last
:data:`GRACE_SECONDS` stays (the answer that names it may still be on its way), so the folder can pass the cap by what
the events of those seconds wrote, until the next sweep. An evicted download is computed again on the next request
(results live in the results cache and the app's own files folder, which has its own cap).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

DEFAULT_TEMP_MB = 512
SWEEP_SECONDS = 15.0
GRACE_SECONDS = 10.0

_folder: Path | None = None
_lock = threading.Lock()


def max_temp_bytes() -> int:
    """The cap on Gradio's temp folder: ``LAYERWISE_MAX_TEMP_MB`` (default 512) megabytes."""
    try:
        mb = float(os.environ.get("LAYERWISE_MAX_TEMP_MB", DEFAULT_TEMP_MB))
    except ValueError:
        mb = DEFAULT_TEMP_MB
    return int((mb if mb > 0 else DEFAULT_TEMP_MB) * 1e6)


def folder_bytes(folder: str | os.PathLike) -> int:
    """Bytes of the files under ``folder``."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def sweep(folder: str | os.PathLike | None = None, max_bytes: int | None = None,
          grace: float = GRACE_SECONDS) -> dict:
    """Remove the least recently written files of ``folder`` (default: the one :func:`keep_bounded` watches) until
    it holds at most ``max_bytes`` (default :func:`max_temp_bytes`), sparing files younger than ``grace`` seconds,
    then the folders left empty; returns ``{"before", "after", "removed"}`` (bytes, bytes, files)."""
    folder = Path(folder) if folder is not None else _folder
    if folder is None or not folder.is_dir():
        return {"before": 0, "after": 0, "removed": 0}
    cap = max_temp_bytes() if max_bytes is None else int(max_bytes)
    with _lock:
        files = []
        for root, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                files.append((st.st_mtime, st.st_size, path))
        before = total = sum(size for _, size, _ in files)
        removed, now = 0, time.time()
        for mtime, size, path in sorted(files):
            if total <= cap:
                break
            if now - mtime < grace:
                continue
            parent = os.path.dirname(path)
            try:
                settled = now - os.stat(parent).st_mtime >= grace  # not a folder Gradio just made to write into
                os.unlink(path)
            except OSError:
                continue
            total -= size
            removed += 1
            try:  # the file's folder (one per hash) goes too once empty
                if settled and parent != str(folder) and not os.listdir(parent):
                    os.rmdir(parent)
            except OSError:
                pass
        return {"before": before, "after": total, "removed": removed}


def keep_bounded(folder: str | os.PathLike, every: float = SWEEP_SECONDS) -> threading.Thread:
    """Watch ``folder`` (Gradio's temp folder): sweep it now, every ``every`` seconds and after each heavy event."""
    global _folder
    _folder = Path(folder)

    def loop():
        while True:
            try:
                sweep()
            except OSError:
                pass
            time.sleep(every)

    thread = threading.Thread(target=loop, name="layerwise-temp-sweep", daemon=True)
    thread.start()
    return thread


def after_event() -> None:
    """A heavy event ended (:func:`ui.lanes.bound_heavy`): sweep if a folder is watched."""
    if _folder is not None:
        try:
            sweep()
        except OSError:
            pass


__all__ = ["keep_bounded", "sweep", "after_event", "folder_bytes", "max_temp_bytes", "DEFAULT_TEMP_MB"]
