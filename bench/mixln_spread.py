"""Mix-LN prefixes across CPU paths: how far the first training steps of a committed run move when torch takes another
kernel path, in float64 and in float32. What the reproducibility tests' tolerances derive from. Prints JSON.

    python bench/mixln_spread.py [--jobs main:deepnorm:1 main:mix-ln-0.25:0@10 ...] [--paths native avx2 ...]
    python bench/mixln_spread.py --write     # also store it in assets/mixln/prefix_spread.json (the tests read it;
                                             # runs measured before and not measured now are kept)
    python bench/mixln_spread.py --smoke     # 2 steps, 2 paths, one run: the script runs end to end (CI)

Each path is a fresh process (the kernel choices are made when torch starts), at the niceness of this one (run it
with ``nice -n 10`` on a shared machine):

- ``native``     this CPU's kernels, 1 thread: the path that recorded the committed runs and prefixes
- ``threads-2``  2 torch threads (other reduction splits)
- ``no-mkldnn``  torch.backends.mkldnn off (oneDNN kernels replaced by ATen's)
- ``avx2``       an AVX2 CPU: ``ATEN_CPU_CAPABILITY=avx2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
                 ``ONEDNN_MAX_CPU_ISA=AVX2``
- ``avx``        an AVX-only CPU: ``ATEN_CPU_CAPABILITY=default`` (torch's scalar/default kernels, libm),
                 ``MKL_ENABLE_INSTRUCTIONS=AVX``, ``ONEDNN_MAX_CPU_ISA=AVX``
- ``mkl-compat`` MKL's conditional-numerical-reproducibility baseline path (``MKL_CBWR=COMPATIBLE``)

On each path it trains the run's float64 prefix (:func:`core.mixln.retrain.float64_prefix`) and its float32 prefix
(the run as committed, first ``--steps`` steps) and reports, per run, path and quantity (training losses, global
gradient norms, per-layer gradient norms at step 1, held-out loss), the largest relative difference:

- ``float64_spread``  float64 prefix against the native one (cross-path rounding in float64)
- ``float32_spread``  float32 prefix against the native float32 one (cross-path rounding in float32)
- ``float32_drift``   float32 prefix against the native float64 one (float32 rounding itself)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from anywhere

PATHS = {
    "native": {},
    "threads-2": {"threads": 2},
    "no-mkldnn": {"mkldnn": False},
    "avx2": {"env": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}},
    "avx": {"env": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX"}},
    "mkl-compat": {"env": {"MKL_CBWR": "COMPATIBLE"}},
}
# the runs the tests train again (tests/core/mixln/test_runs.py), each with the steps it is trained for there
# (``@N``; default the recorded 50): DeepNorm (its constants amplify rounding the most) for the whole prefix, Pre-LN
# and Post-LN layers at 12 layers (Mix-LN 0.25) and 24 layers for 10 steps
JOBS = ("main:deepnorm:1", "main:mix-ln-0.25:0@10", "depth-24:pre-ln:1@10")
WRITTEN = REPO / "assets" / "mixln" / "prefix_spread.json"


def parse_job(text: str):
    from core.mixln.recipe import RECIPE_TRAIN, Job
    parts = text.split(":")
    return Job(parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0,
               float(parts[3]) if len(parts) > 3 else RECIPE_TRAIN["lr"])


def prefix(job_text: str, dtype: str, steps: int) -> dict:
    """One prefix of one run in this process: float64 (the recorded prefix) or float32 (the run as committed)."""
    from core.mixln import runs
    job = parse_job(job_text)
    if dtype == "float64":
        return runs.float64_prefix(job, steps=steps)
    spec = runs.RECIPE[job.name]
    hist = runs.train_run(None, spec["norm"], spec["alpha"], job.model,
                          {**job.train, "steps": steps, "eval_every": steps}, runs.ASSETS / "tokenizer.json")
    return {"steps": steps, "dtype": "float32", "loss": [r["loss"] for r in hist["train"]],
            "grad_norm": [r["grad_norm"] for r in hist["train"]], "grad_norms_step1": hist["grad_norms"][0]["param"],
            "eval_loss": hist["eval"][-1]["loss"]}


def worker(a) -> None:
    import torch
    torch.set_num_threads(a.threads)
    with torch.backends.mkldnn.flags(enabled=not a.no_mkldnn):
        out = {"capability": torch.backends.cpu.get_cpu_capability(),
               "prefixes": {dtype: prefix(a.worker, dtype, a.steps) for dtype in a.dtypes}}
    print(json.dumps(out))


def run_path(name: str, job: str, steps: int, dtypes: list[str]) -> dict:
    spec = PATHS[name]
    env = {**os.environ, **spec.get("env", {}), "OMP_NUM_THREADS": str(spec.get("threads", 1))}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", job, "--steps", str(steps),
           "--threads", str(spec.get("threads", 1)), "--dtypes", *dtypes]
    cmd += ["--no-mkldnn"] if spec.get("mkldnn") is False else []
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"path {name}, run {job}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def split_steps(job: str, steps: int) -> tuple[str, int]:
    """``set:placement:seed[:lr][@steps]`` -> (the run, its steps; ``steps`` when not given)."""
    run, _, n = job.partition("@")
    return run, int(n) if n else steps


def measure(jobs: list[str], paths: list[str], steps: int, dtypes: list[str], done=None) -> dict:
    """Per run: its prefixes on every path compared with the native ones; ``done(report so far)`` after each path."""
    from core.mixln.retrain import prefix_changes
    report = {}
    for job in jobs:
        job, steps_here = split_steps(job, steps)
        got = {}
        for name in paths:
            t0 = time.perf_counter()
            got[name] = run_path(name, job, steps_here, dtypes)
            print(f"... {job} {name} ({got[name]['capability']}): {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
            ref = got["native"]["prefixes"]
            row = {"steps": steps_here, "capability": {n: got[n]["capability"] for n in got}}
            for dtype in dtypes:
                row[f"{dtype}_spread"] = {n: prefix_changes(got[n]["prefixes"][dtype], ref[dtype])
                                          for n in got if n != "native"}
            if "float32" in dtypes and "float64" in dtypes:
                row["float32_drift"] = {n: prefix_changes(got[n]["prefixes"]["float32"], ref["float64"]) for n in got}
            report[job] = row
            if done is not None:
                done(report)
    return report


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), help="runs as set:placement:seed[:lr][@steps]")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps of a prefix whose run gives none (default: the recorded 50)")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--write", action="store_true", help=f"store the report in {WRITTEN.relative_to(REPO)}")
    ap.add_argument("--partial", default=None, help="a file to keep the report so far in, after each path")
    ap.add_argument("--smoke", action="store_true", help="2 steps, the native and avx paths, one run (CI)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--no-mkldnn", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.smoke:
        a.jobs, a.paths, a.steps, a.write = [JOBS[0] + "@2"], ["native", "avx"], 2, False
    if "native" not in a.paths:
        a.paths = ["native", *a.paths]
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    from core.mixln.retrain import CHECK_STEPS
    a.steps = a.steps or CHECK_STEPS
    if a.worker:
        return worker(a)
    t0 = time.perf_counter()

    def keep(so_far: dict) -> None:
        if a.partial:
            Path(a.partial).write_text(json.dumps(make_report(a, so_far, t0), indent=1) + "\n")
    runs = measure(a.jobs, a.paths, a.steps, a.dtypes, keep)
    report = make_report(a, runs, t0)
    if a.write:
        before = json.loads(WRITTEN.read_text())["runs"] if WRITTEN.is_file() else {}
        report = make_report(a, {**before, **runs}, t0)  # the runs measured before and not now are kept
        WRITTEN.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


def make_report(a, runs: dict, t0: float) -> dict:
    import torch
    paths = sorted({n for r in runs.values() for n in r["capability"]}, key=list(PATHS).index)
    return {
        "mode": "smoke" if a.smoke else "full",
        "what": "largest relative difference over a prefix's training losses, gradient norms, per-layer gradient "
                "norms at step 1 and held-out loss: float64_spread / float32_spread against the native path's "
                "prefix of the same dtype, float32_drift against the native float64 prefix",
        "paths": {n: PATHS[n] for n in paths}, "runs": runs,
        "worst": {key: max((v for r in runs.values() for q in r.get(key, {}).values() for v in q.values()),
                           default=None) for key in ("float64_spread", "float32_spread", "float32_drift")},
        "machine": {"cpu": _cpu_name(), "torch": torch.__version__, "python": platform.python_version()},
        "seconds": round(time.perf_counter() - t0, 1),
        "timings_meaningful": False,
        "timing_note": "a numerical measurement: the seconds are meaningless (nice 10, one thread, shared machine)",
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
