"""How ``bench/gpu.py`` runs a row: here until its deadline, or in its own process killed at its limit (a crashed kernel
or a hang cannot take the other rows with it), and what it saved either way."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_common import GRACE_S, RowContext, Timer

def device_of(args):
    import torch

    return torch.device("cpu") if args.smoke else torch.device(args.device)


def run_row(row, args, deadline: float, path: Path | None, sizes: dict) -> dict:
    """Run ``row`` here until ``deadline``; its comparisons (the finished ones if it raises)."""
    device = device_of(args)
    ctx = RowContext(deadline, path)
    timer = Timer(device, args.repeats, args.warmup, ctx)
    save = ctx.save
    name = "cpu (smoke)" if args.smoke else __import__("torch").cuda.get_device_name(device)
    ctx.save = lambda key, result: save(key, {**result, "device_name": name})
    try:
        row.fn(ctx, timer, device, sizes)
    except Exception as exc:  # one broken row must not hide the others; the exit code says so
        import traceback

        ctx.save(f"{row.name}_error", {"error": f"{type(exc).__name__}: {exc}",
                                       "traceback": traceback.format_exc()[-3000:]})
    return ctx.results


def child_args(args) -> list[str]:
    out = ["--device", args.device, "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    return out + (["--smoke"] if args.smoke else [])


RUNNING: dict = {}  # the row process running now (stopped with this one: see main's SIGTERM handler)


def run_isolated(row, args, limit: float, script: Path) -> dict:
    """``row`` in its own process, killed (with its process group) at ``limit`` seconds; what it saved."""
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        path = Path(tmp) / "row.json"
        deadline = time.time() + max(1.0, limit - GRACE_S)
        cmd = [sys.executable, str(script), "--row", row.name, "--row-out", str(path),
               "--deadline", f"{deadline:.3f}", *child_args(args)]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
        RUNNING["child"] = child
        killed = False
        try:
            code = child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = True
            os.killpg(child.pid, signal.SIGKILL)
            code = child.wait()
        finally:
            RUNNING.pop("child", None)
        results = json.loads(path.read_text()) if path.exists() else {}
    if killed:
        results = results or {row.name: {}}
        for result in results.values():
            result.update(killed=True, limit_s=round(limit, 1))
    elif code != 0 and not any("error" in r for r in results.values()):
        results[f"{row.name}_error"] = {"error": f"the row's process exited with code {code}"}
    return results


def wait_for(marker: str | None, until: float) -> bool:
    """Whether ``marker`` exists, waiting for it until ``until`` (``time.time()``); True without a marker."""
    if not marker:
        return True
    while not Path(marker).exists():
        if time.time() >= until:
            return False
        time.sleep(2)
    return True
