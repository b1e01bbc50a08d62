"""The GPU path measured against its peers within a time budget: JSON after every row, the targets last.

    python bench/gpu.py --budget 300 --out gpu.json     # on a CUDA host: every row, at most 300 s in all
    python bench/gpu.py --smoke                         # anywhere: tiny shapes on the CPU interpreter (CI)

A GPU is lent for minutes, so the run is planned around a budget (``--budget``, seconds):

- **Rows by value, each with its own seconds.** The rows run in the order of :data:`ROWS` (most wanted first); each
  has its own time budget on an H200 (``Row.seconds``), scaled by what the budget has left over what the rows left
  need (time a row leaves unused goes to the rows after it). Rows that need ``mamba_ssm`` come last: with
  ``--mamba-ready FILE`` the run waits for FILE (the background build's marker) only while the budget allows.
- **A row past its limit stops.** On CUDA each row runs in its own process (``--isolate``, the default there) that is
  killed at its limit; inside, the timing loops check a deadline between rounds, and a row saves what it has measured
  after each part, so a killed row still reports its finished parts (``"killed": true``).
- **JSON after every row.** ``--out PATH`` is rewritten (atomically) after each row; the whole report is also printed
  on stdout at the end, and **the table of the targets is printed last** (stderr, markdown).

One file per row (each timed interleaved with its peer in one process, medians of ``--repeats`` rounds after
``--warmup`` calls, CUDA events; every row records the self-check of its kernels on that device and the error against
their ``*_ref`` twins):

- ``bench/gpu_generate.py`` ``neuzip_generate``: batch-1 greedy generation, compressed SmolLM2-135M config against
  bf16, each eager and CUDA-graph-captured (the fused decode + GEMV too); the ratio against the captured bf16;
- ``bench/gpu_neuzip.py`` ``neuzip_forward``: a 512-token forward, compressed against bf16, eager and captured;
  ``neuzip_decode``: the decode's GB/s against a device copy, the app's layout and others;
- ``bench/gpu_train.py`` ``neuzip_train``: vanilla / LOMO / LOMO + NeuZip at the llama-1b configuration, a few steps,
  allocated and reserved device memory and speed beside the paper's Table 1 ratios;
- ``bench/gpu_lrp.py`` ``lrp_explain_512`` / ``_2048`` / ``_8192``: MambaLRP ``explain`` against its own forward;
- ``bench/gpu_scan.py`` ``selective_scan`` (tiles, depths) and ``selective_scan_vs_mamba_ssm``;
- ``bench/gpu_misc.py`` ``topk_mask``, ``add_rmsnorm`` (measured before; kept last).

``bench/gpu_common.py`` holds the timer and the row context, ``bench/gpu_runner.py`` the process per row,
``bench/gpu_targets.py`` the targets' table. With ``--smoke`` the timings are meaningless (interpreter, tiny shapes)
and labelled so; the run proves the script works end to end and the kernels agree with their twins. Without CUDA and
without ``--smoke`` the script exits 2 with one line saying what to do.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the row modules beside this file

from gpu_common import (GRACE_S, MAMBA_130M, MIN_ROW_S, SMOKE_LLAMA, SMOKE_MAMBA, SMOLLM2_135M, RowContext,  # noqa: E402
                        Timer, extras, log)
from gpu_generate import neuzip_generate  # noqa: E402
from gpu_lrp import lrp_explain  # noqa: E402
from gpu_misc import rmsnorm, selftest_hang, topk  # noqa: E402
from gpu_neuzip import neuzip_decode, neuzip_forward  # noqa: E402
from gpu_runner import RUNNING, run_isolated, run_row, wait_for  # noqa: E402
from gpu_scan import selective_scan, selective_scan_vs_mamba_ssm  # noqa: E402
from gpu_targets import target_table, targets  # noqa: E402
from gpu_train import neuzip_train  # noqa: E402

__all__ = ["ROWS", "ALIASES", "Row", "RowContext", "Timer", "extras", "main", "sizes", "target_table", "targets"]

DEFAULT_BUDGET = 300
SMOKE_BUDGET = 900  # the interpreter on a shared 2-core machine: every row should finish (timings meaningless)


@dataclass(frozen=True)
class Row:
    """One row of the plan: ``fn(ctx, timer, device, sizes)`` saves one or more comparisons; ``seconds``: its own time
    budget on an H200 (process start, model build and compiles included); ``needs_mamba``: waits for
    ``--mamba-ready``."""

    name: str
    fn: Callable
    seconds: float
    needs_mamba: bool = False
    hidden: bool = False  # only with --only


def _length_row(index: int):
    """The explain row of ``sizes["mamba_lengths"][index]`` (each length its own row: one cannot starve another)."""
    def row(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
        lrp_explain(ctx, timer, device, sizes, index)
    return row


ROWS = (  # by value: what the next GPU run must answer first (what the 2026-11-27 runs left open: docs/gpu.md)
    Row("neuzip_generate", neuzip_generate, 50),
    Row("neuzip_forward", neuzip_forward, 35),
    Row("neuzip_train", neuzip_train, 60),
    Row("neuzip_decode", neuzip_decode, 20),
    Row("lrp_explain_2048", _length_row(1), 30),
    Row("selective_scan_vs_mamba_ssm", selective_scan_vs_mamba_ssm, 25, needs_mamba=True),
    Row("lrp_explain_8192", _length_row(2), 35),
    Row("lrp_explain_512", _length_row(0), 30),
    Row("selective_scan", selective_scan, 40),
    Row("topk_mask", topk, 15),
    Row("add_rmsnorm", rmsnorm, 10),
    Row("_selftest_hang", selftest_hang, 10, hidden=True),
)
SESSION = ("neuzip_generate", "neuzip_forward", "neuzip_train", "neuzip_decode", "lrp_explain_2048",
           "selective_scan_vs_mamba_ssm")  # bench/gpu_session.sh's rows: the five targets and the training row
ALIASES = {"lrp_explain": ("lrp_explain_512", "lrp_explain_2048", "lrp_explain_8192"),  # --only names for groups
           "neuzip_model": ("neuzip_forward", "neuzip_generate"), "session": SESSION}


def sizes(smoke: bool) -> dict:
    """Every row's shapes: the papers' real configurations on a GPU, tiny ones in --smoke."""
    if smoke:
        return {"scan": [(16, 8), (32, 8)], "tiles": [(2, 4)], "stages": [2, 1], "slow_repeats": 2,
                "decode": {"tiny_64x96": (64, 96)}, "chunk": 1024, "smoke_segment": 256,
                "layouts": lambda chunk: [(None, 4), (256, 4), (64, 2), (32, 1)],
                "llama": SMOKE_LLAMA, "tokens": 8, "prompt": 4, "new_tokens": 3, "generate_repeats": 2,
                "llama_label": "tiny Llama (SmolLM2-shaped, 2 layers, hidden 64)",
                "train_model": "tiny-llama", "train_steps": 2, "train_seq": 16,
                "mamba": SMOKE_MAMBA, "mamba_lengths": [8, 16, 24], "mamba_cpu_at": 8, "mamba_profile_at": 16,
                "lrp_repeats": 2, "mamba_label": "tiny Mamba (2 layers, hidden 16)",
                "topk": {"tiny_matrix": (48, 40)}, "norm": (16, 96)}
    from kernels.selective_scan import TILES

    return {"scan": [(2048, 1536), (8192, 1536)], "tiles": list(TILES), "stages": [2, 1, 3], "slow_repeats": 2,
            "decode": {"1536x576": (1536, 576), "24576x576": (24576, 576)}, "chunk": None,
            "layouts": lambda chunk: [(None, 4), (2048, 4), (1024, 4), (512, 4), (256, 4), (256, 8)],
            "llama": SMOLLM2_135M, "tokens": 512, "prompt": 16, "new_tokens": 32, "generate_repeats": 3,
            "llama_label": "SmolLM2-135M config, random weights",
            "train_model": "llama-1b", "train_steps": 4, "train_seq": 256,
            "mamba": MAMBA_130M, "mamba_lengths": [512, 2048, 8192], "mamba_cpu_at": 512, "mamba_profile_at": 2048,
            "lrp_repeats": 5, "mamba_label": "mamba-130m config, random weights",
            "topk": {"mlp_1536x576": (1536, 576), "embed_49152x576": (49152, 576)}, "norm": (4096, 576)}


# ---- main -------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU under TRITON_INTERPRET=1 (proves the script runs; timings meaningless)")
    ap.add_argument("--budget", type=float, default=None,
                    help=f"seconds for all rows (default {DEFAULT_BUDGET:.0f}; smoke {SMOKE_BUDGET:.0f}); each row gets "
                         "its own seconds (ROWS), scaled by what is left over what the rows left need")
    ap.add_argument("--out", default=None, help="write the JSON report here after every row")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="each row in its own process, killed at its share (default: on CUDA yes, --smoke no)")
    ap.add_argument("--mamba-ready", default=os.environ.get("LAYERWISE_MAMBA_READY"),
                    help="a file whose existence says mamba_ssm is built: the rows needing it wait for it while the "
                         "budget allows")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds per comparison (default 20; smoke 2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 3; smoke 1)")
    ap.add_argument("--only", default="", help="comma-separated rows to run, in that order (" +
                    ", ".join(r.name for r in ROWS if not r.hidden) + "; or " +
                    ", ".join(f"{k} for {' + '.join(v)}" for k, v in ALIASES.items()) + "); default all, by value")
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--row-out", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    args.budget = args.budget or (SMOKE_BUDGET if args.smoke else DEFAULT_BUDGET)
    args.repeats = args.repeats or (2 if args.smoke else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    by_name = {r.name: r for r in ROWS}
    if args.row:  # a child: one row, then exit
        import torch

        torch.set_num_threads(1 if args.smoke else torch.get_num_threads())
        deadline = args.deadline if args.deadline is not None else time.time() + args.budget
        run_row(by_name[args.row], args, deadline, Path(args.row_out) if args.row_out else None, sizes(args.smoke))
        return 0
    import torch

    if not args.smoke and (torch.device(args.device).type != "cuda" or not torch.cuda.is_available()):
        print(f"bench/gpu.py: no CUDA device ({args.device!r}, torch {torch.__version__}, cuda available: "
              f"{torch.cuda.is_available()}); run it on a GPU host with CUDA torch, or pass --smoke for the CPU "
              "interpreter run", file=sys.stderr)
        return 2
    only = [r for n in args.only.split(",") if n.strip() for r in ALIASES.get(n.strip(), (n.strip(),))]
    unknown = [n for n in only if n not in by_name]
    if unknown:
        print(f"bench/gpu.py: unknown row(s) {', '.join(unknown)}; rows: "
              f"{', '.join(r.name for r in ROWS if not r.hidden)}", file=sys.stderr)
        return 2
    plan = [by_name[n] for n in dict.fromkeys(only)] if only else [r for r in ROWS if not r.hidden]
    isolate = (not args.smoke) if args.isolate is None else args.isolate
    torch.set_num_threads(1 if args.smoke else torch.get_num_threads())
    # the device's name comes from the rows: with isolated rows this process never creates a CUDA context (a GPU in
    # exclusive-process mode takes one process at a time)
    device_name = "cpu (smoke)" if args.smoke else None if isolate else torch.cuda.get_device_name(args.device)
    report = {
        "benchmark": "bench/gpu.py", "mode": "smoke" if args.smoke else "gpu", "timings_meaningful": not args.smoke,
        "timing_note": ("SMOKE RUN: CPU, TRITON_INTERPRET=1, tiny shapes; the timings and ratios are meaningless, "
                        "only the errors against the twins and the self-check mean something") if args.smoke else
                       f"medians of up to {args.repeats} interleaved rounds after {args.warmup} warm-up calls, CUDA "
                       "events; a row past its share of the budget stops early (rounds, cut_by_deadline, killed)",
        "device": device_name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": __import__("triton").__version__, "python": platform.python_version(),
        "budget_s": args.budget, "isolated_rows": isolate, "plan": [r.name for r in plan],
        "rows": {}, "comparisons": {}, "failed": [], "self_check": [],
    }

    def write():
        if args.out:
            from core.files import atomic_write

            atomic_write(args.out, json.dumps(report, indent=1, default=str))

    def stop(signum, frame):  # e.g. the session's timeout: take the row process along, keep what is written
        child = RUNNING.get("child")
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        report["stopped_by_signal"] = signum
        write()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    t_start = time.time()
    write()
    for i, row in enumerate(plan):
        left = args.budget - (time.time() - t_start)
        if row.needs_mamba and args.mamba_ready and not Path(args.mamba_ready).exists():
            log(f"{row.name}: waiting for {args.mamba_ready} (mamba_ssm build)")
            ready = wait_for(args.mamba_ready, t_start + args.budget - MIN_ROW_S)
            left = args.budget - (time.time() - t_start)
            if not ready:
                report["rows"][row.name] = {"skipped": "mamba_ssm's build did not finish within the budget"}
                write()
                continue
        if left < MIN_ROW_S and not args.smoke:
            report["rows"][row.name] = {"skipped": f"{left:.0f} s of the budget left (a row needs {MIN_ROW_S})"}
            write()
            continue
        limit = left * row.seconds / sum(r.seconds for r in plan[i:])  # its seconds, scaled to what is left
        log(f"{row.name} (share {limit:.0f} s of {left:.0f} s left)")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        t0 = time.time()
        if isolate:
            results = run_isolated(row, args, limit, Path(__file__).resolve())
        else:
            results = run_row(row, args, time.time() + max(1.0, limit - GRACE_S), None, sizes(args.smoke))
        wall = round(time.time() - t0, 1)
        report["rows"][row.name] = {"wall_s": wall, "limit_s": round(limit, 1), "comparisons": sorted(results),
                                    "killed": any(r.get("killed") for r in results.values()),
                                    "load_average_before": load,
                                    "mamba_build_unfinished": bool(args.mamba_ready) and not Path(args.mamba_ready).exists()}
        for name, result in results.items():
            report["comparisons"][name] = result
            if report["device"] is None and result.get("device_name"):
                report["device"] = device_name = result["device_name"]
            if "error" in result:
                report["failed"].append(name)
            for check in (result.get("self_check") or {}).get("rows", {}).items():
                kernel, dtype = check[0].split("/")
                entry = {"kernel": kernel, "dtype": dtype, "ok": check[1] == "ok", "reason": "" if check[1] == "ok"
                         else check[1]}
                if entry not in report["self_check"]:
                    report["self_check"].append(entry)
        if report["rows"][row.name]["killed"]:
            report["failed"].append(row.name)
        write()
    report["wall_s"] = round(time.time() - t_start, 1)
    report["targets"] = targets(report["comparisons"])
    write()
    print(json.dumps(report, indent=1, default=str))
    sys.stdout.flush()
    print(target_table(report["targets"], report["device"] or args.device), file=sys.stderr, flush=True)
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
