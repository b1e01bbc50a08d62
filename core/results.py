"""What a service returns for one user action: a :class:`Result` (status text, data, tables, figures, views) that the
tab shows and the CLI prints, and the files both write from it (JSON, CSV, HTML; :meth:`Result.write` for the CLI's
``--out``, :meth:`Result.files` for the tab's downloads, kept per result key so a repeat costs nothing).
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


def _payload(kind: str, value) -> dict:
    return {"json": {"data": value}, "csv": {"rows": value}, "html": {"figure": value}}[kind]


def source_text(source: str) -> str:
    """How a status text names where a result came from."""
    return SOURCES.get(source, source)


__all__ = ["Result", "SOURCES", "source_text"]
