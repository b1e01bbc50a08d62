"""Batch runs: one analysis over every row of a file, into one Parquet file, resumable and in bounded memory.

    python -m core lrp batch --model mamba-sentiment --in texts.csv --out results.parquet
    python -m core mathneuro batch --in prompts.jsonl --out scores.parquet
    python -m core neuzip batch --in models.csv --out tradeoff.parquet

A *batch kind* (:class:`BatchKind`, each paper's ``core/<paper>/batch.py`` defines its ``KIND``, exported as its
package's ``BATCH``; :func:`core.papers.batch_kinds` lists them) says which input column it reads (``text``, ``prompt``,
``model``), which settings it takes, how it prepares once (:attr:`BatchKind.open`: e.g. load the model and check it)
and how it computes one output row (:attr:`BatchKind.row`, through the paper's service, so each row is looked up in
the committed examples and the results cache like a single request, and cached when computed). :func:`run` is the
one engine every kind shares:

- the input (CSV with a header, or JSON Lines) is streamed twice: once to count and hash it (and to refuse a missing
  column or a broken line before any work), once to compute; other input columns are carried into the output;
- finished rows go, every ``chunk`` rows (and at least every :data:`FLUSH_SECONDS`), into a new part file in
  ``<out>.parts/``, each written atomically; a stopped, interrupted or killed run keeps every part it wrote, and the
  same command later computes only the rows no part holds (its ``manifest.json`` must match: same kind, settings and
  input file, else one clear message). A row whose input the analysis refuses gets its message in ``error``;
- when every row is done the parts are merged, one at a time, into ``<out>`` (atomically) and the parts removed;
  the kind, settings, input file (name, SHA-256, rows) and the columns' meanings are in the Parquet metadata under
  ``layerwise``, and the model is a column too.

Memory stays bounded by one chunk of rows plus one part file: no input or result is ever held whole.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from core.errors import BadInputError, Cancelled, LayerwiseError
from core.files import atomic_write, check_in
from core.progress import report, scaled

FORMAT = "layerwise-batch/1"
INPUT_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
CHUNK = 16  # rows per part file: what a kill can lose at most
FLUSH_SECONDS = 30.0  # and a part at least this often, for slow rows
MERGE_ROWS = 1024  # rows per row group of the merged file
MAX_FIELD_CHARS = 16 * 1024**2  # a CSV cell may hold this many characters (texts are cut where they are explained)
# the columns every batch output has, around the kind's own: (name, arrow type name, meaning)
HEAD = (("index", "int64", "0-based row of the input file (header and blank lines not counted)"),)
TAIL = (("error", "string", "why the row has no result (the analysis's own message), else null"),
        ("source", "string", "where the row's result came from: precomputed, cache or computed"),
        ("attempt", "int32", "which run of the batch computed the row (1 = the first; a resumed run counts on)"),
        ("seconds", "float64", "time to answer the row"))


@dataclass(frozen=True)
class Column:
    """One output column of a batch kind: its name, Arrow type (``string``, ``int64``, ``int32``, ``float64``,
    ``bool``, ``list<string>``, ``list<float64>``, ``list<int32>``) and what it holds."""

    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class BatchKind:
    """One kind of batch: reads ``column`` of every input row and computes one output row.

    settings : ``settings(**raw) -> dict``: the raw settings checked (JSON-able; part of the resume check).
    columns : ``columns(settings) -> [Column]``: the kind's output columns (between ``index`` + input and ``error``).
    open : ``open(settings, progress) -> (context, provenance)``: done once per run (load and check the model);
        ``provenance`` (JSON-able, e.g. the model fingerprint) goes into the metadata.
    row : ``row(context, value, settings, progress) -> (values by column, source)``; raises
        :class:`LayerwiseError` for an input it refuses (recorded in ``error``).
    arguments, from_args : the CLI flags of the settings and ``args -> raw settings``.
    """

    name: str
    group: str
    label: str
    column: str
    settings: Callable[..., dict]
    columns: Callable[[dict], list[Column]]
    open: Callable[[dict, Any], tuple[Any, dict]]
    row: Callable[[Any, str, dict, Any], tuple[dict, str]]
    arguments: Callable[[argparse.ArgumentParser], None]
    from_args: Callable[[argparse.Namespace], dict]
    example: str = ""  # the CLI help's example line


# ---- the input file ---------------------------------------------------------------------------------------------
def input_format(path: Path) -> str:
    fmt = INPUT_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise BadInputError(f"cannot read {path.name}: a batch reads .csv (with a header row) or .jsonl files.",
                            fix="save the inputs as CSV or JSON Lines.")
    return fmt


def _records(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of every data row, streamed; a broken line is a clear error."""
    csv.field_size_limit(MAX_FIELD_CHARS)
    try:
        with open(path, newline="" if fmt == "csv" else None, encoding="utf-8-sig") as fh:
            if fmt == "csv":
                reader = csv.DictReader(fh)
                try:
                    for record in reader:
                        if None in record:  # more cells than the header names
                            raise BadInputError(f"{path.name}, line {reader.line_num}: more cells than the header has "
                                                "columns.", fix="quote cells that contain commas.")
                        if any(v not in (None, "") for v in record.values()):
                            yield reader.line_num, record
                except csv.Error as err:
                    raise BadInputError(f"{path.name}, line {reader.line_num}: not valid CSV ({err}).",
                                        fix="save the file as CSV with a header row.") from None
            else:
                for number, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError as err:
                        raise BadInputError(f"{path.name}, line {number}: not JSON ({err.args[0][:80]}).",
                                            fix="write one JSON object per line.") from None
                    if not isinstance(record, dict):
                        raise BadInputError(f"{path.name}, line {number}: a {type(record).__name__}, not an object.",
                                            fix='write one object per line, e.g. {"text": "..."}.')
                    yield number, record
    except UnicodeDecodeError:
        raise BadInputError(f"{path.name} is not UTF-8 text.", fix="save it as UTF-8 CSV or JSON Lines.") from None
    except FileNotFoundError:
        raise BadInputError(f"no input file {path}.", fix="check the path given to --in.") from None
    except IsADirectoryError:
        raise BadInputError(f"{path} is a folder, not an input file.", fix="give a .csv or .jsonl file.") from None


@dataclass
class InputFile:
    """What :func:`scan` found: the file's SHA-256, its rows, and the columns carried into the output."""

    path: Path
    format: str
    sha256: str
    rows: int
    extra: list[str]

    def describe(self) -> dict:
        return {"name": self.path.name, "format": self.format, "sha256": self.sha256, "rows": self.rows}


def scan(path, column: str, max_rows: int | None = None) -> InputFile:
    """Count, hash and check ``path`` (streamed): every row must have ``column``; at most ``max_rows`` rows."""
    path = check_in(path)  # a FIFO or a device would block the read below
    fmt = input_format(path)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise BadInputError(f"no input file {path}.", fix="check the path given to --in.") from None
    except IsADirectoryError:
        raise BadInputError(f"{path} is a folder, not an input file.", fix="give a .csv or .jsonl file.") from None
    rows, extra = 0, None
    for number, record in _records(path, fmt):
        if column not in record:
            raise BadInputError(f"{path.name}, line {number}: no {column!r} column (it has "
                                f"{', '.join(map(str, record)) or 'none'}).",
                                fix=f"name the column of the inputs {column!r}.")
        if extra is None:
            extra = [k for k in record if k != column]
        rows += 1
        if max_rows is not None and rows > max_rows:
            raise BadInputError(f"{path.name} has more than {max_rows:,} rows, the most a batch here takes.",
                                fix="split it, or run `python -m core ... batch` on the command line (no limit).")
    if rows == 0:
        raise BadInputError(f"{path.name} has no rows.", fix=f"give one {column!r} per row.")
    return InputFile(path, fmt, digest.hexdigest(), rows, extra or [])


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)


# ---- parts and the merged file ------------------------------------------------------------------------------------
def _arrow(type_name: str):
    import pyarrow as pa

    simple = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
              "bool": pa.bool_()}
    if type_name.startswith("list<"):
        return pa.list_(simple[type_name[5:-1]])
    return simple[type_name]


@dataclass
class Plan:
    """The output of one batch: its columns (in order) and what the metadata records."""

    kind: BatchKind
    settings: dict
    input: InputFile
    columns: list[Column]
    carried: dict[str, str] = field(default_factory=dict)  # input column -> output column

    def schema(self, meta: dict | None = None):
        import pyarrow as pa

        schema = pa.schema([(c.name, _arrow(c.type)) for c in self.columns])
        return schema.with_metadata({b"layerwise": json.dumps(meta).encode()}) if meta else schema

    def manifest(self) -> dict:
        return {"format": FORMAT, "kind": self.kind.name, "settings": self.settings, "input": self.input.describe()}


def plan(k: BatchKind, settings: dict, found: InputFile) -> Plan:
    own = k.columns(settings)
    taken = {c[0] for c in HEAD + TAIL} | {c.name for c in own} | {k.column}
    carried = {}
    for name in found.extra:
        out = str(name)
        while out in taken:
            out = "input_" + out
        carried[name] = out
        taken.add(out)
    columns = [Column(*c) for c in HEAD] + [Column(k.column, "string", f"the input's {k.column!r}")]
    columns += [Column(out, "string", f"the input's {name!r} column, as text") for name, out in carried.items()]
    columns += own + [Column(*c) for c in TAIL]
    return Plan(k, settings, found, columns, carried)


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def _part_files(parts: Path) -> list[Path]:
    return sorted(parts.glob("part-*.parquet"))


def finished_rows(parts: Path, p: "Plan | None" = None, rows: int | None = None,
                  dropped: list[str] | None = None) -> set[int]:
    """The input rows the part files in ``parts`` hold. A part is dropped (its rows are computed again, and its name
    and why go to ``dropped``) when it cannot be read, when its columns are not the batch's (``p``: another version
    or kind wrote it), when an index is outside the input's ``rows`` or repeats within it, or when it repeats a row
    an earlier part holds (a duplicated part gave "65 of 60 rows"): what is merged is each row once."""
    import pyarrow.parquet as pq

    done: set[int] = set()
    want = p.schema() if p is not None else None
    for f in _part_files(parts):
        why = None
        try:
            schema = pq.read_schema(f)
            if want is not None and [(x.name, x.type) for x in schema] != [(x.name, x.type) for x in want]:
                why = "its columns are not this batch's"
            else:
                index = pq.read_table(f, columns=["index"]).column("index").to_pylist()
                if any(not isinstance(i, int) or i < 0 or (rows is not None and i >= rows) for i in index):
                    why = f"it holds a row index outside 0-{(rows or 1) - 1}"
                elif len(set(index)) != len(index):
                    why = "it holds a row twice"
                elif done & set(index):
                    why = "it repeats rows of an earlier part"
        except Exception:  # noqa: BLE001 - a damaged part (not written by atomic_write) is recomputed
            why = "it cannot be read"
        if why is None:
            done.update(index)
            continue
        f.unlink(missing_ok=True)
        if dropped is not None:
            dropped.append(f"{f.name} ({why})")
    return done


def _write_part(parts: Path, p: Plan, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    number = max([int(f.stem.split("-")[1]) for f in _part_files(parts)] + [0]) + 1
    table = pa.Table.from_pylist(rows, schema=p.schema())
    return atomic_write(parts / f"part-{number:06d}.parquet", lambda tmp: pq.write_table(table, str(tmp)))


def _merge(parts: Path, out: Path, p: Plan, meta: dict) -> None:
    """The part files, in input order, as one Parquet file at ``out`` (atomic), a few parts in memory at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = _part_files(parts)
    firsts = [(pq.read_table(f, columns=["index"]).column("index")[0].as_py(), f) for f in files]
    schema = p.schema(meta)

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(str(tmp), schema) as writer:
            pending, size = [], 0
            for _, f in sorted(firsts, key=lambda x: x[0]):
                table = pq.read_table(f).cast(p.schema())
                pending.append(table)
                size += table.num_rows
                if size >= MERGE_ROWS:
                    writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))
                    pending, size = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))

    atomic_write(out, write)


def read_meta(path) -> dict:
    """The ``layerwise`` metadata of a batch output (kind, settings, input, provenance, columns)."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(str(path)).metadata or {}).get(b"layerwise")
    return json.loads(raw) if raw else {}


# ---- the engine ----------------------------------------------------------------------------------------------------
def _check_out(out: Path) -> None:
    if out.suffix.lower() != ".parquet":
        raise BadInputError(f"cannot write {out.name}: a batch writes a .parquet file.", fix="use --out NAME.parquet.")
    if not out.parent.is_dir():
        raise BadInputError(f"the folder {out.parent} does not exist.", fix="create it or write elsewhere.")
    if out.is_dir():
        raise BadInputError(f"{out} is a folder.", fix="give a file name ending in .parquet.")


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def run(k: BatchKind, source, out, progress=None, *, restart: bool = False, chunk: int = CHUNK,
        max_rows: int | None = None, **raw_settings) -> dict:
    """Run batch kind ``k`` (a paper's ``BATCH``) over ``source`` (CSV / JSON Lines)
    into ``out`` (``.parquet``); resumes a run that ``out``'s part folder holds. ``progress(fraction, message)`` may
    raise :class:`Cancelled` (Stop): the rows finished so far are kept, and :class:`Cancelled` carries the summary in
    ``partial``; ``max_rows`` caps the input (the app's limit). Returns the summary:
    ``out, kind, rows, finished_before, done_now, computed, cache, precomputed, errors, attempt, seconds,
    rows_per_second`` (``rows_per_second``: of the rows answered in this run)."""
    t0 = time.perf_counter()
    if not isinstance(k, BatchKind):
        raise TypeError(f"batch.run takes a BatchKind (a paper's BATCH), got {k!r}")
    out, source = Path(out), Path(source)
    _check_out(out)
    settings = k.settings(**raw_settings)
    found = scan(source, k.column, max_rows)
    p = plan(k, settings, found)
    manifest = p.manifest()
    parts = parts_dir(out)
    summary = {"out": str(out), "kind": k.name, "rows": found.rows, "finished_before": 0, "done_now": 0,
               "computed": 0, "cache": 0, "precomputed": 0, "errors": 0, "attempt": 1}
    if restart:
        shutil.rmtree(parts, ignore_errors=True)
        out.unlink(missing_ok=True)
    if out.exists() and not parts.exists():
        old = read_meta(out)
        if _same({x: old.get(x) for x in manifest}, manifest):  # already complete: nothing to do
            summary.update(finished_before=found.rows, attempt=old.get("attempts", 1), seconds=0.0,
                           rows_per_second=None)
            report(progress, 1.0, f"{k.label}: all {found.rows} rows were done already")
            return summary
        raise BadInputError(f"{out.name} holds the results of another batch (other settings or input).",
                            fix="give another --out, or add --restart to replace it.")
    if (parts / "manifest.json").exists():
        try:
            held = json.loads((parts / "manifest.json").read_text())
        except (OSError, ValueError):
            held = {}
        if not _same({x: held.get(x) for x in manifest}, manifest):
            raise BadInputError(f"{parts.name} holds an unfinished batch with other settings or another input.",
                                fix="run that batch's own command to finish it, give another --out, or add "
                                    "--restart to start this one afresh.")
        summary["attempt"] = int(held.get("attempts", 1)) + 1
    else:  # a new batch (a part folder without a manifest holds nothing yet)
        parts.mkdir(exist_ok=True)
        held = {}
    dropped: list[str] = []
    done = finished_rows(parts, p, found.rows, dropped)
    summary["finished_before"] = len(done)
    if dropped:  # repaired, and said: their rows are computed again
        summary["parts_dropped"] = dropped
        report(progress, len(done) / found.rows, f"{k.label}: dropped {len(dropped)} damaged part file"
               f"{'s' * (len(dropped) > 1)} ({'; '.join(dropped[:3])}); their rows are computed again")
    report(progress, len(done) / found.rows, f"{k.label}: preparing ({len(done)} of {found.rows} rows done before)")
    context, provenance = (k.open(settings, progress) if len(done) < found.rows else
                           (None, held.get("provenance", {})))
    if done and held.get("provenance") not in (None, provenance):
        raise BadInputError(f"{parts.name} holds rows computed with other weights ({held['provenance']}).",
                            fix="add --restart to start afresh with the model as it is now, or give another --out.")
    atomic_write(parts / "manifest.json", json.dumps({**manifest, "attempts": summary["attempt"],
                                                      "provenance": provenance}))
    buffer: list[dict] = []
    last_flush, every = time.perf_counter(), max(1, found.rows // 100)

    def flush() -> None:
        nonlocal buffer, last_flush
        if buffer:
            _write_part(parts, p, buffer)
        buffer, last_flush = [], time.perf_counter()

    answered_t0 = time.perf_counter()
    try:
        index = -1
        for _, record in _records(source, found.format):
            index += 1
            if index in done:
                continue
            r0 = time.perf_counter()
            value = _text(record.get(k.column))
            row = {"index": index, k.column: value, **{o: _text(record.get(i)) for i, o in p.carried.items()}}
            try:
                before = len(done) + summary["done_now"]  # the row's share of the bar (a slow row reports within)
                share = scaled(progress, before / found.rows, (before + 1) / found.rows)
                values, where = k.row(context, value, settings, share)
                row.update(values, error=None, source=where)
                summary[where] += 1
            except Cancelled:
                raise
            except LayerwiseError as err:
                row.update(error=str(err), source=None)
                summary["errors"] += 1
            row.update(attempt=summary["attempt"], seconds=time.perf_counter() - r0)
            buffer.append(row)
            summary["done_now"] += 1
            if len(buffer) >= chunk or time.perf_counter() - last_flush >= FLUSH_SECONDS:
                flush()
            finished = len(done) + summary["done_now"]
            shown = finished - finished % every if finished < found.rows else finished
            report(progress, finished / found.rows, f"{k.label}: {shown} of {found.rows} rows")
    except (Cancelled, KeyboardInterrupt) as stop:
        flush()  # every finished row is kept; the same command resumes
        summary.update(seconds=round(time.perf_counter() - t0, 2), stopped=True)
        if isinstance(stop, Cancelled):
            raise Cancelled(f"Stopped after {len(done) + summary['done_now']} of {found.rows} rows; they are kept, "
                            "and running the batch again computes only the rest.", partial=summary) from None
        raise
    flush()
    elapsed = time.perf_counter() - answered_t0
    meta = {**manifest, "attempts": summary["attempt"], "provenance": provenance,
            "columns": {c.name: c.doc for c in p.columns},
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    _merge(parts, out, p, meta)
    shutil.rmtree(parts, ignore_errors=True)
    report(progress, 1.0, f"{k.label}: {found.rows} rows written to {out.name}")
    summary.update(seconds=round(time.perf_counter() - t0, 2),
                   rows_per_second=round(summary["done_now"] / elapsed, 3) if summary["done_now"] and elapsed else None)
    return summary


def to_csv(parquet, csv_path) -> Path:
    """A batch output as CSV (list cells as JSON text), streamed one row group at a time, written atomically."""
    import pyarrow.parquet as pq

    source = pq.ParquetFile(str(parquet))

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(source.schema_arrow.names)
            for g in range(source.num_row_groups):
                for row in source.read_row_group(g).to_pylist():
                    writer.writerow([json.dumps(v) if isinstance(v, list) else v for v in row.values()])

    return atomic_write(csv_path, write)


__all__ = ["BatchKind", "Column", "run", "scan", "read_meta", "to_csv", "parts_dir",
           "finished_rows", "CHUNK", "FORMAT"]
