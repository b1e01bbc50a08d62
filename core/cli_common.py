"""What every command group of ``python -m core`` shares: the registry of commands (:class:`CommandGroups`), the
output (``--json`` or text, ``--out`` files: :func:`emit`), plain-text tables, the progress bar and ``--threads``.

The paper groups (``core/<paper>/cli.py``) import this module, never :mod:`core.cli`, which lists them: so the
imports flow one way (``core.cli -> core.<paper>.cli -> core.cli_common``).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable


class CommandGroups:
    """The one registry of CLI commands: ``group -> {command: (help, add_arguments, run)}``."""

    def __init__(self) -> None:
        self.groups: dict[str, tuple[str, dict]] = {}

    def group(self, name: str, help: str) -> None:
        self.groups.setdefault(name, (help, {}))

    def command(self, group: str, name: str, help: str, add_arguments: Callable | None = None):
        def wrap(run: Callable[[argparse.Namespace], object]):
            self.groups[group][1][name] = (help, add_arguments, run)
            return run
        return wrap


def emit_text(args: argparse.Namespace, result, text: Callable[[object], str]) -> None:
    """Print ``result`` as JSON (``--json``) or ``text(result)``."""
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(text(result))


def progress_line(msg: str) -> None:
    """One line of progress on stderr (``... msg``)."""
    print(f"... {msg}", file=sys.stderr, flush=True)


def table(rows: list[dict], cols: list[str] | None = None) -> str:
    """Rows as a plain-text table (the columns of the first row unless ``cols`` is given)."""
    cols = cols or (list(rows[0]) if rows else [])
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(lines)


class ProgressBar:
    """The CLI's progress display, a ``progress(fraction, message)`` callable (:mod:`core.runner`'s convention):
    one redrawn bar on a terminal, one line per new message in a log."""

    def __init__(self) -> None:
        import time
        self._clock = time.perf_counter
        self.t0 = self._clock()
        self.tty = sys.stderr.isatty()
        self.last = ""

    def __call__(self, fraction: float, message: str) -> None:
        if message.startswith("note: "):  # said once, on its own line, before the bar goes on
            print(("\n" if self.tty and self.last else "") + message, file=sys.stderr, flush=True)
            self.last = message
            return
        filled = int(30 * max(0.0, min(1.0, fraction)))
        line = (f"[{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:5.1f}% {self._clock() - self.t0:6.0f}s "
                f"{message}")
        if self.tty:
            print("\r" + line[:120].ljust(120), end="", file=sys.stderr, flush=True)
        elif "window" not in message and message != self.last:  # a log: one line per step
            print(line, file=sys.stderr, flush=True)
        self.last = message

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def set_threads(n: int, *, zero_is_default: bool = False) -> None:
    """Apply ``--threads n`` to torch (``core.runner.check_threads``); with ``zero_is_default``, 0 keeps torch's
    default."""
    import torch

    from core.checks import check_threads

    if check_threads(n, zero_is_default=zero_is_default):
        torch.set_num_threads(n)


def emit(args: argparse.Namespace, data, text: str, result=None) -> None:
    """Print ``data`` as JSON (``--json``) or ``text``; with ``--out``, first write ``result``'s files there."""
    out = getattr(args, "out", None)
    if out and result is not None:
        written = [str(p) for p in result.write(out)]
        data = {**data, "written": written} if isinstance(data, dict) else data
        text += "".join(f"\nwritten to {w}" for w in written)
    print(json.dumps(data, indent=1, default=str) if args.json else text)
