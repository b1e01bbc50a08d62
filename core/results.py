"""What a service returns for one user action: a :class:`Result` (status text, data, tables, figures, views) that the
tab shows and the CLI prints, and the files both write from it (JSON, CSV, HTML; :meth:`Result.write` for the CLI's
``--out``, :meth:`Result.files` for the tab's downloads, kept per result key so a repeat costs nothing).

Every result with tables also has them as one *long-format* table (:meth:`Result.frame`, :func:`long_frame`), the
same for every paper: one row per number, ``table, record, <key columns>, measure, value``. The downloads hold it
as ``<stem>-long.csv`` and ``<stem>-long.parquet`` beside the wide tables (docs/mcp-and-batch.md lists the columns).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BadInputError
from core import files as _files
from core.files import atomic_write, evict_files, write_output

SOURCES = {"precomputed": "precomputed example", "cache": "from the results cache", "computed": "computed now"}

# ---- the long format: one row per number --------------------------------------------------------------------------
LONG_COLUMNS = ("table", "record", "measure", "value")  # the fixed columns; key columns sit between record and measure
# numeric columns that say *which* thing a row is about (a position, a layer, a setting), not a measurement: they stay
# key columns in the long table, as every text, flag and list column does
KEY_NAMES = frozenset({"position", "row", "col", "row_block", "layer", "first_layer", "layers", "block_size", "width",
                       "step", "steps", "seed", "samples", "n", "k", "value", "proportion", "factor", "alpha", "lr",
                       "index", "template"})


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(v):
    """A key cell as a table holds it: lists and dicts as JSON text, everything else as it is."""
    import json
    return json.dumps(v, default=str) if isinstance(v, (list, tuple, dict)) else v


def long_frame(tables: dict[str, list[dict]]):
    """``tables`` (name -> rows) as one long-format ``pandas.DataFrame``: a row per number of every table.

    Columns: ``table`` (the table's name), ``record`` (the row's 0-based index in it), the key columns (every column
    that is not a measurement: text, flags, lists (as JSON text), and the numeric columns named in :data:`KEY_NAMES`;
    a key column named like a fixed column gets a trailing ``_``), ``measure`` (the measured column's name) and
    ``value`` (float64; NaN where the table had none). Pivoting one table's rows on ``record`` x ``measure`` gives its
    numeric columns back exactly."""
    import math

    import pandas as pd

    out, keys_seen = [], {}
    for name, rows in tables.items():
        columns = list(dict.fromkeys(k for row in rows for k in row))
        measures = [c for c in columns if c not in KEY_NAMES and all(row.get(c) is None or _is_number(row.get(c))
                                                                      for row in rows)
                    and any(_is_number(row.get(c)) for row in rows)]
        keys = [c for c in columns if c not in measures]
        for c in keys:
            keys_seen.setdefault(c + "_" if c in LONG_COLUMNS else c, None)
        for i, row in enumerate(rows):
            ids = {(c + "_" if c in LONG_COLUMNS else c): _cell(row.get(c)) for c in keys}
            for m in measures:
                v = row.get(m)
                out.append({"table": name, "record": i, **ids, "measure": m,
                            "value": float(v) if v is not None and math.isfinite(float(v)) else math.nan})
    columns = ["table", "record", *keys_seen, "measure", "value"]
    frame = pd.DataFrame(out, columns=columns)
    frame["record"] = frame["record"].astype("int64")
    frame["value"] = frame["value"].astype("float64")
    return frame


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
    downloads : which file types the tab offers (the CLI can write any of json, csv, html the result has); ``csv``
        includes the long-format table as ``<stem>-long.csv`` and ``<stem>-long.parquet``.
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

    def frame(self):
        """The result's tables as one long-format ``pandas.DataFrame`` (:func:`long_frame`): the table the downloads
        hold as ``<stem>-long.csv`` / ``.parquet``; empty (with the fixed columns) for a result without tables."""
        return long_frame(self.tables)

    def file_plan(self, kinds=("json", "csv", "html")) -> dict[str, tuple[str, Any]]:
        """``file name -> (kind, payload)`` of every file this result has, of the given kinds (``csv``: the wide
        tables and the long-format table as CSV and Parquet)."""
        plan: dict[str, tuple[str, Any]] = {}
        if "json" in kinds:
            plan[f"{self.stem}.json"] = ("json", self.data)
        if "csv" in kinds:
            plan.update({n: ("csv", rows) for n, rows in self._names("csv", self.tables).items()})
            if self.tables:
                plan[f"{self.stem}-long.csv"] = ("long", self)
                plan[f"{self.stem}-long.parquet"] = ("long", self)
        if "html" in kinds:
            plan.update({n: ("html", fig) for n, fig in self._names("html", self.figures).items()})
        return plan

    def write(self, out: str | os.PathLike) -> list[Path]:
        """The CLI's ``--out``: a folder gets every file; ``FILE.json|.csv|.html`` gets the data, the (first) table
        or the (first) figure, ``FILE.parquet`` the long-format table. Raises :class:`BadInputError` for another
        suffix, a missing folder or a format this result lacks."""
        out = Path(out)
        suffix = out.suffix.lower()
        if not suffix:
            if not out.is_dir():
                raise BadInputError(f"the folder {out} does not exist.", fix="create it first, or give FILE.json.")
            return [write_output(out / name, **_payload(kind, value)) for name, (kind, value) in
                    self.file_plan().items()]
        if suffix not in (".json", ".csv", ".html", ".parquet"):
            raise BadInputError(f"cannot write {out.name}: the output must end in .json, .csv, .html or .parquet.")
        if suffix == ".parquet":
            if not self.tables:
                raise BadInputError("this result has no table to write as Parquet.", fix="write .json instead.")
            return [write_output(out, **_payload("long", self))]
        if suffix == ".csv" and not self.tables:
            raise BadInputError("this result has no table to write as CSV.", fix="write .json instead.")
        if suffix == ".html" and not self.figures:
            raise BadInputError("this result has no figure to write as HTML.", fix="write .json or .csv instead.")
        kind = suffix.lstrip(".")
        value = {"json": self.data, "csv": next(iter(self.tables.values()), None),
                 "html": next(iter(self.figures.values()), None)}[kind]
        return [write_output(out, **_payload(kind, value))]

    def write_files(self, folder: str | os.PathLike, plotly_js: bool | str = True) -> list[Path]:
        """The downloads (the kinds in ``downloads``, named as :meth:`files` names them) written into the existing
        ``folder``; ``plotly_js``: how an HTML figure gets plotly.js (:func:`core.figures.figure_html`)."""
        return [write_output(Path(folder) / name, **_payload(kind, value, plotly_js))
                for name, (kind, value) in self.file_plan(self.downloads).items()]

    def files(self) -> list[str]:
        """The tab's downloads (the kinds in ``downloads``), written once per result key into the files folder."""
        plan = self.file_plan(self.downloads)
        if not plan:
            return []
        try:
            folder = _files.files_dir() / (self.key or f"once-{uuid.uuid4().hex}")
            if not all((folder / name).is_file() for name in plan):
                def fill(tmp: Path) -> None:
                    for name, (kind, value) in plan.items():
                        write_output(tmp / name, **_payload(kind, value))
                atomic_write(folder, fill, folder=True)
                evict_files(folder)
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


def _payload(kind: str, value, plotly_js: bool | str = True) -> dict:
    if kind == "long":
        return {"frame": value.frame(), "meta": {"stem": value.stem, "source": value.source, "key": value.key}}
    return {"json": {"data": value}, "csv": {"rows": value}, "html": {"figure": value, "plotly_js": plotly_js}}[kind]


def source_text(source: str) -> str:
    """How a status text names where a result came from."""
    return SOURCES.get(source, source)


__all__ = ["Result", "SOURCES", "source_text", "long_frame", "LONG_COLUMNS", "KEY_NAMES"]
