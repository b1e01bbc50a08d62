"""Memory as the machine sees it: jobs run in fresh Python processes, and the machine they ran on.

The tensor ledger (:class:`core.neuzip.memtrack.MemoryTracker`: live tensor bytes, the paper's analogue of its CUDA
peak) says what a method needs; the operating system sees the process: Python, the libraries, the heap and the holes
in it, the loader's copies, the codec. Each such measurement runs in a fresh process (:func:`run_fresh`), so that no
run inherits another's heap or imports, and reports that process's peak RSS (``VmHWM``, the whole process from its
start) beside the tensor figure.

:func:`run_fresh` runs one of the jobs of :mod:`core.neuzip.child` (an explicit registry) in a new interpreter
(``sys.executable``, this repository first on its path) with its keyword arguments as JSON on stdin; the child reports progress lines, then its result
(or its error: a :class:`core.errors.BadInputError` comes back as one, anything else as a ``RuntimeError`` with the
child's last lines); a Stop (:class:`core.errors.Cancelled` from ``progress``) ends the child. ``limit`` runs the
child under a memory cap (:func:`cap_note` says which).

:func:`machine` is what every run records: the CPU model, ``torch.backends.cpu.get_cpu_capability()`` (the speed of
bf16 matrix products depends on it), cores, platform, torch, the GPU.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from core.errors import BadInputError, Cancelled
from core.paths import REPO_ROOT

__all__ = ["run_fresh", "machine", "cpu_model", "LIMITS", "cap_note", "ChildFailed", "MIB"]

MIB = 2 ** 20
JOBS = ("train-mode", "inference-memory")  # what a fresh process can run (core.neuzip.child runs each; a test checks)
LIMITS = ("as", "data")  # RLIMIT_AS (address space), RLIMIT_DATA (data segment and private writable mappings)


class ChildFailed(RuntimeError):
    """A fresh process ended without a result (``exit_code``; ``memory_error`` when it ran out of memory under a
    cap: a ``MemoryError`` in Python or an allocation failure in torch, or the kernel's kill; ``process``: its peak
    RSS and sizes when it could still say them)."""

    def __init__(self, message: str, exit_code: int | None = None, memory_error: bool = False,
                 process: dict | None = None):
        super().__init__(message)
        self.exit_code, self.memory_error, self.process = exit_code, memory_error, process or {}


_BOOT = ("import sys\n"  # the cap first, then the child module (its package imports torch)
         "if len(sys.argv) > 2:\n"
         "    import resource\n"
         "    n = int(sys.argv[3])\n"
         "    resource.setrlimit({'as': resource.RLIMIT_AS, 'data': resource.RLIMIT_DATA}[sys.argv[2]], (n, n))\n"
         "sys.argv = sys.argv[:2]\n"
         "import runpy\n"
         "runpy.run_module('core.neuzip.child', run_name='__main__', alter_sys=True)\n")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: str = "cpu") -> dict:
    """What a run records about the machine it ran on."""
    out = {"cpu_model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
           "processor": platform.processor() or platform.machine()}
    if torch.device(device).type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out


def cap_note(limit: tuple[str, int] | None) -> str:
    """In words: the memory cap a child runs under."""
    if limit is None:
        return "no cap"
    kind, nbytes = limit
    what = {"as": "RLIMIT_AS (address space: every mapping counts, reserved or touched)",
            "data": "RLIMIT_DATA (heap and private writable mappings, touched or not)"}[kind]
    return f"{what} of {nbytes / MIB:,.0f} MiB"


def run_fresh(job: str, kwargs: dict, progress=None, threads: int | None = None, limit: tuple[str, int] | None = None,
              env: dict | None = None, timeout: float | None = None) -> dict:
    """Run ``job`` (a name of :data:`JOBS`) with ``kwargs`` in a fresh Python process; its result
    dict, with ``process``: the child's peak RSS (``peak_rss_bytes``, VmHWM at its end: the whole process), its RSS at
    the end, its exit code, and the cap it ran under. ``threads``: torch threads in the child (default: this
    process's); ``limit``: ``("as" | "data", bytes)``, a memory cap set in the child before it imports anything.

    Raises
    ------
    BadInputError
        The job refused its input (the child's message).
    Cancelled
        ``progress`` raised it (a Stop): the child is ended first.
    ChildFailed
        The child ended without a result (e.g. killed, or out of memory under ``limit``).
    """
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; one of {', '.join(JOBS)}")
    if limit is not None and (limit[0] not in LIMITS or int(limit[1]) <= 0):
        raise ValueError(f"limit must be (one of {LIMITS}, bytes), got {limit!r}")
    spec = {"kwargs": kwargs, "threads": torch.get_num_threads() if threads is None else int(threads)}
    command = [sys.executable, "-c", _BOOT, job] + ([] if limit is None else [limit[0], str(int(limit[1]))])
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in child_env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(command, cwd=str(REPO_ROOT), env=child_env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        timer = threading.Timer(timeout, proc.kill) if timeout else None
        if timer:
            timer.start()
        result = error = None
        try:
            proc.stdin.write(json.dumps(spec))
            proc.stdin.close()
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "progress" in msg and progress is not None:
                    progress(*msg["progress"])
                elif "result" in msg:
                    result = msg["result"]
                elif "error" in msg:
                    error = msg["error"]
            code = proc.wait()
        except BaseException:  # a Stop (Cancelled), Ctrl-C: the child goes too
            proc.kill()
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
        err.seek(0)
        tail = err.read()[-3000:]
    if error is not None:
        if error.get("type") == "BadInputError":
            raise BadInputError(error["message"], fix=error.get("fix"))
        if error.get("type") == "Cancelled":
            raise Cancelled(error["message"])
        raise ChildFailed(f"{job} failed in its process: {error.get('type')}: {error.get('message')}", code,
                          error.get("memory_error", False), error.get("process"))
    if result is None:
        killed = code is not None and code < 0
        raise ChildFailed(f"{job} ended without a result (exit code {code}"
                          + (", killed by a signal" if killed else "") + f"). Its last lines:\n{tail}", code,
                          memory_error="MemoryError" in tail or "alloc" in tail.lower() or code == -9)
    result.setdefault("process", {})["exit_code"] = code
    result["process"]["cap"] = cap_note(limit)
    return result
