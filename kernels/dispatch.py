"""The one rule that picks a Triton kernel or its PyTorch reference twin, and the self-check behind it.

A Triton kernel is used only where it can run (every tensor on CUDA, triton importable) and only after it
has proved itself there: the first time a kernel would run on a device (per kernel, device and dtype),
:func:`use_triton` runs it and its ``*_ref`` twin on a small input built by the kernel's registered
:class:`KernelCheck`. If the kernel fails to compile or run, or its result differs from the twin beyond a
dtype-aware tolerance, one warning is logged (logger ``layerwise.kernels``) and the twin is used for that
kernel, device and dtype from then on. The verdicts are kept for the life of the process
(:func:`self_check_results`), keyed by the normalised device (:func:`device_key`: ``"cuda"``, ``"cuda:0"`` and
``torch.device("cuda", 0)`` are one key), so :func:`check_all` / :func:`warm` (``python -m core kernels check``,
the app's start on a CUDA host) decide the verdicts that a model's tensors later ask for.

A self-check can be asked for from inside a model's forward or backward (the first scan of an explanation).
It then runs isolated from what surrounds it: gradients on and no inference mode, its own identity saved-tensor
hooks (so an activation checkpoint around the caller never stores, and later recomputes, the check's tensors),
and no lock held while it runs. While one call checks a kernel, any other call for the same kernel, device and
dtype (another thread, or autograd's device thread running a backward for it) uses the twin at once instead of
waiting: a check can never wait on itself. Entry points that know their device call :func:`warm` first, so on a
GPU the checks run once, before the model does.

``LAYERWISE_KERNELS`` forces a path (tests, benchmarks, debugging):

- ``auto`` (default): Triton on CUDA after a passing self-check, the reference elsewhere;
- ``ref``: the reference everywhere;
- ``triton``: Triton on CUDA without the self-check (benchmarks that must time the kernel itself).

Kernel modules register their check at import with :func:`register_check`; this module never imports them.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

log = logging.getLogger("layerwise.kernels")

MODES = ("auto", "ref", "triton")


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when ``triton`` imports and its kernels can run here: a CUDA device torch can use, or the interpreter
    (``TRITON_INTERPRET=1``, the tests), or ``LAYERWISE_TRITON_AOT=1`` (``bench/aot_sm90.py``: the kernels compiled
    ahead of time for a GPU this host does not have). On a host with none of these, triton is not even imported (it is
    optional there): importing it costs a process about 67 MiB of RSS (libtriton) for kernels that cannot run."""
    if not (interpreting() or torch.cuda.is_available() or os.environ.get("LAYERWISE_TRITON_AOT") == "1"):
        return False
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def interpreting() -> bool:
    """True under ``TRITON_INTERPRET=1``: kernels then run on CPU tensors (slowly), for tests."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def mode() -> str:
    """The ``LAYERWISE_KERNELS`` setting (``auto`` when unset); an unknown value is refused."""
    value = os.environ.get("LAYERWISE_KERNELS", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"LAYERWISE_KERNELS={value!r}: use one of {', '.join(MODES)}")
    return value


# ---- the self-check ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelCheck:
    """How to test one kernel against its twin on a device.

    Attributes
    ----------
    triton : the Triton wrapper, e.g. ``topk_mask_triton``.
    ref : the plain-PyTorch twin with the same signature.
    inputs : ``(device, dtype) -> tuple`` of positional arguments, small (the check runs once per process).
    run : ``(fn, args) -> tensor or tuple of tensors`` to compare; default ``fn(*args)``. Use it to compare
        gradients too (run forward and backward and return both).
    dtypes : the dtypes the kernel is used with; a call in another dtype is checked with the first one.
    auto : False for a kernel measured slower than the library call its twin makes, or not yet shown to beat it
        (``auto`` mode then runs the twin on CUDA too; ``LAYERWISE_KERNELS=triton`` and the checks still run the
        kernel). ``why`` says the measurement, or what is missing.
    """

    triton: Callable
    ref: Callable
    inputs: Callable[[torch.device, torch.dtype], tuple]
    run: Callable[[Callable, tuple], Any] | None = None
    dtypes: tuple = (torch.float32,)
    auto: bool = True
    why: str = ""


# Tolerances by dtype for the self-check (relative, absolute); integer and bool results must be equal.
TOLERANCE = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}

CHECKS: dict[str, KernelCheck] = {}
_verdicts: dict[tuple[str, str, str], dict] = {}
_checking: set[tuple[str, str, str]] = set()  # verdicts being decided right now (by any thread)
_lock = threading.Lock()                      # guards the two above; never held while a check runs


def device_key(device: torch.device | str) -> str:
    """One spelling per device for the verdicts: ``"cpu"``, ``"cuda:0"`` (``"cuda"`` is the current CUDA device)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        device = torch.device("cuda", index)
    return str(device)


def register_check(name: str, check: KernelCheck) -> None:
    """Register the self-check of kernel ``name`` (called once by the kernel's module at import)."""
    CHECKS[name] = check


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare(got, want) -> str | None:
    """``None`` when ``got`` matches ``want`` (tensors, tuples of tensors, or plain values), else what differs."""
    got, want = _as_tuple(got), _as_tuple(want)
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, torch.Tensor):
            if g != w:
                return f"output {i}: {g!r} != {w!r}"
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {getattr(g, 'dtype', type(g))} {tuple(getattr(g, 'shape', ()))} against " \
                   f"{w.dtype} {tuple(w.shape)}"
        g, w = g.detach().cpu(), w.detach().cpu()
        if w.is_floating_point():
            rtol, atol = TOLERANCE.get(w.dtype, (1e-4, 1e-5))
            if not torch.allclose(g.float(), w.float(), rtol=rtol, atol=atol, equal_nan=True):
                err = (g.float() - w.float()).abs().nan_to_num(float("inf")).max().item()
                return f"output {i}: max |difference| {err:.3g} beyond rtol {rtol:g}, atol {atol:g}"
        elif not torch.equal(g, w):
            return f"output {i}: {int((g != w).sum())} of {w.numel()} entries differ"
    return None


def _isolated():
    """The context a self-check runs in, whatever surrounds the call: gradients on, no inference mode, and identity
    saved-tensor hooks on top of any a caller pushed (e.g. ``torch.utils.checkpoint``'s), so the check's own
    backward never unpacks through them."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.enable_grad())
    stack.enter_context(torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t))
    return stack


def self_check(name: str, device: torch.device, dtype: torch.dtype) -> dict:
    """Run kernel ``name`` and its twin on the check's small input; return ``{"ok", "reason"}``."""
    check = CHECKS[name]
    dtype = dtype if dtype in check.dtypes else check.dtypes[0]
    run = check.run or (lambda fn, args: fn(*args))
    try:
        with _isolated():
            args = check.inputs(torch.device(device), dtype)
            want = run(check.ref, args)
            got = run(check.triton, args)
            reason = compare(got, want)
    except Exception as exc:  # a kernel that does not compile or crashes is exactly what the check is for
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return {"ok": reason is None, "reason": reason or ""}


def _key_dtype(tensors) -> torch.dtype:
    floats = [t.dtype for t in tensors if t.is_floating_point()]
    return floats[0] if floats else tensors[0].dtype


def _decide(name: str, key: tuple[str, str, str], device: str, dtype: torch.dtype) -> dict | None:
    """Run the self-check behind ``key`` unless it is decided or being decided; the verdict, or None while another
    call is deciding it. The lock guards only the bookkeeping, never the check itself."""
    with _lock:
        verdict = _verdicts.get(key)
        if verdict is not None or key in _checking:
            return verdict
        _checking.add(key)
    try:
        verdict = self_check(name, device, dtype)
    finally:
        with _lock:
            _checking.discard(key)
            if verdict is not None:
                _verdicts[key] = verdict
    if not verdict["ok"]:
        log.warning("Triton kernel %r failed its self-check on %s (%s): %s. Using its PyTorch reference "
                    "twin from now on (set LAYERWISE_KERNELS=triton to force the kernel).",
                    name, device, dtype, verdict["reason"])
    return verdict


def kernel_trusted(name: str, device: torch.device | str, dtype: torch.dtype) -> bool:
    """The verdict of the self-check of ``name`` on ``device`` / ``dtype``, running it the first time. While the
    check is running (in this or another thread) the answer is False: that call uses the twin, it never waits."""
    device = device_key(device)
    verdict = _decide(name, (name, device, str(dtype)), device, dtype)
    return verdict is not None and verdict["ok"]


def warm(device: torch.device | str, names=None) -> list[dict]:
    """Decide the verdicts of the kernels ``names`` (default: every registered one; :mod:`kernels.checks` imports them
    all) on ``device`` for every dtype each is used
    with, before any model runs; verdicts already decided are kept. Call it at the entry points that put work on
    a CUDA device; a no-op elsewhere (the twins run there) and in the ``ref`` / ``triton`` modes."""
    if mode() != "auto" or not triton_available() or torch.device(device).type != "cuda":
        return []
    device = device_key(device)
    rows = []
    for name in sorted(n for n in CHECKS if CHECKS[n].auto) if names is None else names:
        for dtype in CHECKS[name].dtypes:
            verdict = _decide(name, (name, device, str(dtype)), device, dtype)
            rows.append({"kernel": name, "device": device, "dtype": str(dtype).replace("torch.", ""),
                         "ok": bool(verdict and verdict["ok"])})
    return rows


def self_check_results() -> dict[tuple[str, str, str], dict]:
    """Every self-check run so far: ``(kernel, device, dtype) -> {"ok", "reason"}``."""
    with _lock:
        return dict(_verdicts)


def reset_self_checks() -> None:
    """Forget every verdict (tests, or after changing the environment)."""
    with _lock:
        _verdicts.clear()


def check_all(device: torch.device | str | None = None) -> list[dict]:
    """Run every registered kernel's self-check (:mod:`kernels.checks` imports them all) on ``device`` (default: CUDA when present, else the CPU, which works only
    under ``TRITON_INTERPRET=1``) for each dtype it is used with; one row per kernel and dtype.

    The verdicts are recorded as if the kernels had been used, so a failing kernel is not used afterwards.
    """
    import time

    device = device_key(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for name, check in sorted(CHECKS.items()):
        for dtype in check.dtypes:
            t0 = time.perf_counter()
            verdict = self_check(name, device, dtype)
            with _lock:
                _verdicts[(name, device, str(dtype))] = verdict
            rows.append({"kernel": name, "device": device, "dtype": str(dtype).replace("torch.", ""),
                         "ok": verdict["ok"], "reason": verdict["reason"], "used": check.auto,
                         "seconds": round(time.perf_counter() - t0, 3)})
    return rows


def cannot_check(device: torch.device | str) -> tuple[str, str] | None:
    """Why the kernels cannot be checked on ``device`` here, as ``(message, fix)``, or None when they can (triton
    installed; a CUDA device that torch sees, or the CPU under ``TRITON_INTERPRET=1``)."""
    device = torch.device(device)
    if not triton_available():
        return ("triton is not installed, so the PyTorch twins run everywhere.",
                "pip install -r requirements.txt (it pins triton) to use the kernels on CUDA.")
    if device.type == "cpu" and not interpreting():
        return ("no CUDA device here: Layerwise uses the kernels' PyTorch twins on the CPU.",
                "run on a CUDA machine, or check the kernels interpreted on the CPU (slow): "
                "TRITON_INTERPRET=1 python -m core kernels check")
    if device.type == "cuda" and not torch.cuda.is_available():
        return (f"--device {device}: torch sees no CUDA device.",
                "install the CUDA build of torch 2.13.0 (see the README), or leave --device out.")
    return None


def device_eligible(tensors) -> bool:
    """True when Triton can run on these tensors: all of them on CUDA."""
    return bool(tensors) and all(t.is_cuda for t in tensors)


def use_triton(*tensors: torch.Tensor, kernel: str) -> bool:
    """Run the Triton kernel ``kernel`` on ``tensors``, or its reference?

    Triton only where it can run (:func:`device_eligible`: all tensors on CUDA, triton importable); in the
    default ``auto`` mode only after the kernel passed its self-check on that device and dtype. Dispatch
    never sends CPU tensors to Triton (tests call the ``*_triton`` wrappers directly under the interpreter).
    """
    tensors = tuple(t for t in tensors if t is not None)
    chosen = mode()
    if chosen == "ref" or not triton_available() or not device_eligible(tensors):
        return False
    if kernel not in CHECKS:
        raise KeyError(f"kernel {kernel!r} has no registered self-check (kernels.dispatch.register_check)")
    if chosen == "triton":
        return True
    if not CHECKS[kernel].auto:
        return False
    return kernel_trusted(kernel, tensors[0].device, _key_dtype(tensors))
