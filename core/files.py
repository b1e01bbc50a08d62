"""Files: the one way a file or folder is written (:func:`atomic_write`: a temp sibling, then a rename), the writer of
result files (:func:`write_output`: JSON, CSV, HTML, Parquet), and the folder of the tabs' download files
(:func:`files_dir`, kept under :data:`FILES_MAX_BYTES`, least recently used first out).
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from core.errors import BadInputError

FILES_MAX_BYTES = 512 * 1024**2


def atomic_write(path: str | os.PathLike, content: str | bytes | Callable[[Path], Any], *, folder: bool = False,
                 mode: int = 0o644) -> Path:
    """Write ``path`` so that a reader sees the old version or the whole new one, never a part.

    Parameters
    ----------
    path : the file (or, with ``folder=True``, the folder) to write; its parent must exist or is created.
    content : text, bytes, or ``writer(tmp_path)`` that writes the file (or fills the folder) at ``tmp_path``.
    folder : write a folder: a new one appears whole (a rename); into an existing one, each entry written replaces
        its namesake (one rename each, all undone if one fails) and every other entry of the folder stays: a folder
        the user named never loses what this write did not make (issue 42).
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
            if path.is_dir():  # its own entries replace their namesakes; whatever else the folder holds stays
                _merge_into(tmp, path)
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                os.replace(tmp, path)
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


def _merge_into(new: Path, folder: Path) -> None:
    """Move every entry of ``new`` into ``folder``, replacing its namesakes (moved aside first, and put back if a move
    fails); the folder's other entries are not touched."""
    aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    moved: list[tuple[Path, Path | None]] = []  # (destination, its old entry set aside, or None)
    try:
        for entry in sorted(new.iterdir()):
            dest = folder / entry.name
            kept = None
            if dest.exists() or dest.is_symlink():
                kept = aside / entry.name
                os.replace(dest, kept)
            moved.append((dest, kept))
            os.replace(entry, dest)
    except BaseException:
        for dest, kept in reversed(moved):
            if dest.exists() and not dest.is_symlink() and dest.is_dir():
                shutil.rmtree(dest, ignore_errors=True)
            elif dest.exists() or dest.is_symlink():
                dest.unlink()
            if kept is not None:
                os.replace(kept, dest)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def write_output(path: str | os.PathLike, data=None, rows: list[dict] | None = None,
                 figure=None, frame=None, meta: dict | None = None, plotly_js: bool | str = True) -> Path:
    """Write ``data`` (``.json``), ``rows`` (``.csv``), ``figure`` (``.html``; ``plotly_js``: see
    :func:`core.figures.figure_html`) or a ``pandas.DataFrame`` ``frame`` (``.csv``, or ``.parquet`` with ``meta``
    as JSON under the file's ``layerwise`` metadata key) to ``path`` atomically.

    Raises :class:`BadInputError` for another suffix, a missing folder, or a format the result lacks.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv", ".html", ".parquet"):
        raise BadInputError(f"cannot write {path.name}: the output must end in .json, .csv, .html or .parquet.")
    if not path.parent.is_dir():
        raise BadInputError(f"the folder {path.parent} does not exist.", fix="create it or write elsewhere.")
    if frame is not None:
        if suffix == ".csv":
            return atomic_write(path, frame.to_csv(index=False))
        if suffix == ".parquet":
            return atomic_write(path, lambda tmp: write_parquet(frame, tmp, meta))
    if suffix == ".parquet":
        raise BadInputError("this result has no table to write as Parquet.", fix="write .json instead.")
    if suffix == ".json":
        text = json.dumps(data, indent=1, default=str)
    elif suffix == ".csv":
        if rows is None:
            raise BadInputError("this result has no table to write as CSV.", fix="write .json instead.")
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        if figure is None:
            raise BadInputError("this result has no figure to write as HTML.", fix="write .json or .csv instead.")
        from core.figures import figure_html
        text = figure_html(figure, plotly_js)
    return atomic_write(path, text)


def write_parquet(frame, path: str | os.PathLike, meta: dict | None = None) -> None:
    """``frame`` as one Parquet file at ``path`` (not atomic: :func:`write_output` calls it on a temp file), with
    ``meta`` as JSON under the ``layerwise`` key of the file's metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if meta:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               b"layerwise": json.dumps(meta, default=str).encode()})
    pq.write_table(table, str(path))


# what names a file (not a folder) on a command's --out
FILE_SUFFIXES = (".json", ".csv", ".html", ".parquet", ".safetensors")


def _out_problem(out: str, reason: str) -> BadInputError:
    return BadInputError(f"cannot write --out {out}: {reason}.",
                         fix="give --out a new file (FILE.json, .csv, .html, ...) or a folder in a place you can write.")


def _special(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (a FIFO, a device, a socket), else
    None. Reading a FIFO blocks until a writer comes, and a device never ends."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def check_out(out, overwrite: bool = False, adds: bool = False) -> Path:
    """The ``--out`` path of a CLI command, checked before any work: not empty, not under a file, not a folder where a
    file is named (``x.json``), not a FIFO or a device, not an existing folder that holds anything (unless
    ``overwrite``: then only the command's own files replace their namesakes, :func:`atomic_write`; ``adds``: a
    command that continues a run in its folder), and in a place this process can create files in (probed with a
    temporary file, then removed: a read-only or virtual file system such as ``/proc``, a missing permission).
    Raises :class:`BadInputError` (exit 2, one line) otherwise."""
    text = str(out) if out is not None else ""
    if not text.strip():
        raise BadInputError("--out is empty.", fix="give a file (FILE.json, .csv, .html) or a folder.")
    if "\x00" in text:
        raise BadInputError("--out holds a NUL character.", fix="give a plain path.")
    path = Path(text)
    try:
        special = _special(path)
        if special:
            raise _out_problem(text, f"it is {special}, not a file or a folder")
        if path.is_dir() and path.suffix.lower() in FILE_SUFFIXES:
            raise _out_problem(text, "it is a folder, and a file is named")
        if path.is_dir() and not (overwrite or adds) and next(path.iterdir(), None) is not None:
            held = sorted(p.name for p in path.iterdir())
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3:,} more" if len(held) > 3 else "")
            raise BadInputError(f"--out {text} is a folder that already holds {len(held):,} "
                                f"entr{'y' if len(held) == 1 else 'ies'} ({shown}); "
                                "nothing was written.", fix="give a new or empty folder, or add --overwrite (only this "
                                "command's own files are replaced; nothing else in the folder is touched).")
        nearest = path
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if nearest != path and not nearest.is_dir():
            raise _out_problem(text, f"{nearest} is a file, not a folder")
        folder = path if path.is_dir() else path.parent if nearest == path else nearest
        fd, probe = tempfile.mkstemp(prefix=".layerwise-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise _out_problem(text, (err.strerror or type(err).__name__).lower()) from None
    return path


def check_in(path, what: str = "--in") -> Path:
    """An input file a command reads: refused in one line when it is a FIFO, a device or a socket (reading one would
    block or never end); a missing file or a folder is the reader's to report."""
    path = Path(path)
    special = _special(path)
    if special:
        raise BadInputError(f"cannot read {what} {path}: it is {special}, not a file.", fix="give a regular file.")
    return path


def out_error(exc: BaseException, out) -> BadInputError | None:
    """The one-line :class:`BadInputError` for an ``OSError`` met while writing ``--out`` (the file, its temporary
    sibling, a file inside it, or a folder above it), or None for an error about anything else."""
    if not isinstance(exc, OSError) or out is None or not str(out).strip():
        return None
    target = os.path.abspath(str(out))
    for name in (getattr(exc, "filename", None), getattr(exc, "filename2", None)):
        if not name:
            continue
        where = os.path.abspath(os.fsdecode(name))
        sibling = os.path.dirname(where) == os.path.dirname(target) and os.path.basename(where).startswith(
            "." + os.path.basename(target))
        if where == target or where.startswith(target + os.sep) or target.startswith(where + os.sep) or sibling:
            return _out_problem(str(out), (exc.strerror or type(exc).__name__).lower())
    return None


def files_dir() -> Path:
    """Where the tabs' download files live (inside the user cache; ``app.py`` lets Gradio serve it)."""
    from core.paths import home
    path = home() / "files"
    path.mkdir(parents=True, exist_ok=True)
    return path


def evict_files(keep: Path, max_bytes: int = FILES_MAX_BYTES) -> None:
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


__all__ = ["atomic_write", "write_output", "write_parquet", "check_out", "check_in", "out_error", "files_dir", "evict_files",
           "FILES_MAX_BYTES"]

