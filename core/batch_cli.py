"""The ``<paper> batch`` command of a batch kind (:mod:`core.batch` is the engine it runs): its arguments, its
progress bar and summary line, and its registration in the CLI."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.batch import CHUNK, BatchKind, parts_dir, run, to_csv
from core.errors import BadInputError


def _arguments(k: BatchKind):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--in", dest="source", required=True, metavar="FILE",
                       help=f"the inputs: .csv with a {k.column!r} column (and a header row) or .jsonl with a "
                            f"{k.column!r} field per line; other columns are carried into the output")
        p.add_argument("--out", required=True, metavar="FILE.parquet", help="the results (one row per input)")
        p.add_argument("--restart", action="store_true",
                       help="discard an unfinished (or finished) batch at --out and start afresh")
        p.add_argument("--chunk", type=int, default=CHUNK,
                       help=f"rows per part file (default {CHUNK}): what an interruption can lose at most")
        p.add_argument("--csv", default=None, metavar="FILE.csv", help="also write the results as CSV")
        p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
        k.arguments(p)
    return add


def _runner(k: BatchKind):
    def run_command(args: argparse.Namespace) -> dict:
        from core.checks import check_threads
        from core.cli_common import ProgressBar, emit, set_threads

        check_threads(args.threads)
        if args.chunk < 1:
            raise BadInputError("--chunk must be at least 1.")
        if args.csv is not None and Path(args.csv).suffix.lower() != ".csv":
            raise BadInputError(f"--csv {args.csv}: the file must end in .csv.")
        set_threads(args.threads)
        bar = ProgressBar()
        try:
            summary = run(k, args.source, args.out, bar, restart=args.restart, chunk=args.chunk,
                          **k.from_args(args))
        except KeyboardInterrupt:
            bar.close()
            print(f"interrupted: the finished rows are kept in {parts_dir(Path(args.out))}; run the same command "
                  "to compute the rest.", file=sys.stderr)
            raise
        bar.close()
        if args.csv:
            summary["csv"] = str(to_csv(args.out, args.csv))
        rate = f", {summary['rows_per_second']} rows/s" if summary.get("rows_per_second") else ""
        text = (f"{summary['rows']} rows -> {summary['out']}: {summary['finished_before']} done before, "
                f"{summary['done_now']} now ({summary['computed']} computed, {summary['cache']} from the cache, "
                f"{summary['precomputed']} precomputed, {summary['errors']} refused) in {summary['seconds']} s{rate}"
                + (f"; dropped {len(summary['parts_dropped'])} damaged part file(s), their rows computed again: "
                   f"{'; '.join(summary['parts_dropped'])}" if summary.get("parts_dropped") else ""))
        emit(args, summary, text)
        return summary
    return run_command


def register(groups, k: BatchKind) -> None:
    """Add ``<group> batch`` for batch kind ``k`` to the CLI registry (``core.cli_common.CommandGroups``)."""
    groups.command(k.group, "batch", f"{k.label} for every row of a CSV / JSONL file, into one Parquet file "
                   f"(resumable){': ' + k.example if k.example else ''}", _arguments(k))(_runner(k))
