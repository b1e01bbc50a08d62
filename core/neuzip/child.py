"""What a fresh process runs for :func:`core.neuzip.process.run_fresh`: one job of :data:`JOBS`, its keyword arguments
read as JSON from stdin, progress and then the result (or the error) written to stdout as JSON lines. At the end the
result gets ``process``: this process's peak RSS (``VmHWM``, from its start) and its RSS.

The memory cap, when there is one, is set before this package is imported (``run_fresh`` starts the interpreter with
a few lines that call :func:`set_limit` first), so it covers the whole process.
"""
from __future__ import annotations

import json
import sys
import traceback

from core.neuzip import process

__all__ = ["JOBS", "set_limit", "main"]


def _train_mode(**kw):
    from core.neuzip.train_step import run_mode

    return run_mode(**kw)


def _inference_memory(**kw):
    from core.neuzip.memory import inference_memory

    return inference_memory(**kw)


JOBS = {  # name -> the function a fresh process runs (its keyword arguments from the JSON; ``progress`` added)
    "train-mode": _train_mode,
    "inference-memory": _inference_memory,
}
assert tuple(JOBS) == process.JOBS, "core.neuzip.process.JOBS names the jobs run here"


def set_limit(kind: str, nbytes: int) -> None:
    """Cap this process's memory: ``as`` (RLIMIT_AS) or ``data`` (RLIMIT_DATA), ``nbytes`` bytes."""
    import resource

    which = {"as": resource.RLIMIT_AS, "data": resource.RLIMIT_DATA}[kind]
    resource.setrlimit(which, (int(nbytes), int(nbytes)))


def _status() -> dict:
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS", "VmPeak", "VmData"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return {"peak_rss_bytes": out.get("VmHWM"), "rss_bytes": out.get("VmRSS"), "peak_virtual_bytes": out.get("VmPeak"),
            "data_bytes": out.get("VmData")}


def _emit(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg, default=float) + "\n")
    sys.stdout.flush()


def main(job: str) -> int:
    spec = json.loads(sys.stdin.read() or "{}")
    try:
        import torch

        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))
        result = JOBS[job](**spec.get("kwargs", {}), progress=lambda f, m: _emit({"progress": [f, m]}))
        result = dict(result)
        result["process"] = {**result.get("process", {}), **_status()}
        _emit({"result": result})
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as data
        from core.errors import BadInputError, Cancelled

        kind = "BadInputError" if isinstance(exc, BadInputError) else "Cancelled" if isinstance(exc, Cancelled) \
            else type(exc).__name__
        memory = isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc)
        _emit({"error": {"type": kind, "message": getattr(exc, "message", None) or str(exc),
                         "fix": getattr(exc, "fix", None), "memory_error": memory,
                         "process": _status()}})
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
