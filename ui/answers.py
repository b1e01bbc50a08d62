"""What every agent tool (:mod:`ui.tools`) answers with, and the progress it reports: :func:`answer` turns a
``core.results.Result`` into one JSON text, :func:`progress_steps` is the ``progress`` a tool hands to ``core``."""
from __future__ import annotations

import json
from urllib.parse import quote

import gradio as gr

from core.results import LONG_COLUMNS, Result
from ui.stopping import watch

MAX_TABLE_ROWS = 500  # rows of one table in an answer (the files hold every row)


def _root(request: gr.Request | None) -> str:
    """The app's address as the caller sees it (behind a proxy too), or "" (links are then relative)."""
    headers = dict(getattr(request, "headers", None) or {})
    host = (headers.get("x-forwarded-host") or headers.get("host") or "").split(",")[0].strip()
    if not host:
        return ""
    scheme = (headers.get("x-forwarded-proto") or "http").split(",")[0].strip()
    return f"{scheme}://{host}"


def answer(res: Result, request: gr.Request | None = None, **extra) -> str:
    """A result as the JSON text every tool answers with: ``status`` (Markdown), ``source`` (precomputed / cache /
    computed), ``extra`` fields, ``tables`` (name -> rows, at most :data:`MAX_TABLE_ROWS` each; ``truncated`` names
    the longer ones), ``long_table`` (the columns of :meth:`Result.frame`, in the files as ``*-long.csv`` /
    ``.parquet``) and ``files`` (name, url)."""
    root = _root(request)
    files = [{"name": f.rsplit("/", 1)[-1], "url": f"{root}/gradio_api/file={quote(f)}"} for f in res.files()]
    frame_columns = list(res.frame().columns) if res.tables else list(LONG_COLUMNS)
    payload = {"status": res.status, "source": res.source, **extra,
               "tables": {name: rows[:MAX_TABLE_ROWS] for name, rows in res.tables.items()},
               "truncated": {name: len(rows) for name, rows in res.tables.items() if len(rows) > MAX_TABLE_ROWS},
               "figures": list(res.figures), "long_table": {"columns": frame_columns}, "files": files}
    return json.dumps(payload, default=str)


def progress_steps(request: gr.Request | None, progress):
    """The ``progress(fraction, message)`` a tool hands to ``core``: gradio's progress in steps of 100 (an MCP client
    reads "step k of 100"), stopped by its owner's Stop or when its client leaves (:func:`ui.stopping.watch`)."""
    return watch(request, lambda fraction, message: progress((int(round(100 * fraction)), 100), desc=message))


__all__ = ["answer", "progress_steps", "MAX_TABLE_ROWS"]
