"""What every row of ``bench/gpu.py`` shares: its deadline and partial results (:class:`RowContext`), interleaved
timing with CUDA events (:class:`Timer`: medians, peaks, host syncs, host-to-device copies, profiles), the kernels'
self-checks, and the switches a row flips (a kernel mode forced, the fused decode turned off)."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, tie_word_embeddings=True)
MAMBA_130M = dict(vocab_size=50280, hidden_size=768, num_hidden_layers=24, state_size=16, expand=2, conv_kernel=4)
SMOKE_MAMBA = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=4)
SMOKE_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=256,
                   rms_norm_eps=1e-5, tie_word_embeddings=True)
TOPK_PROPORTION = 0.05  # core.mathneuro.service's default proportion
DEFAULT_BUDGET = 480
GRACE_S = 15  # a row's deadline comes this long before it is killed: time to save what it measured
MIN_ROW_S = 30  # a row is not started with less than this left


def log(msg: str) -> None:
    print(f"... {msg}", file=sys.stderr, flush=True)


# ---- a row's deadline and its partial results -------------------------------------------------------------------
class RowContext:
    """What a row gets besides its sizes: a deadline (``time.time()`` seconds) checked between timing rounds and
    parts, and :meth:`save` to record its results so far (a killed row keeps them)."""

    def __init__(self, deadline: float, path: Path | None = None):
        self.deadline, self.path, self.results = deadline, path, {}

    def past(self) -> bool:
        return time.time() > self.deadline

    def save(self, name: str, result: dict) -> None:
        self.results[name] = result
        if self.path is not None:
            from core.files import atomic_write

            atomic_write(self.path, json.dumps(self.results, default=str))


# ---- timing -----------------------------------------------------------------------------------------------------
class Timer:
    """Interleaved medians of several callables on one device (CUDA events on CUDA, perf_counter elsewhere)."""

    def __init__(self, device, repeats: int, warmup: int, ctx: RowContext | None = None):
        import torch

        self.torch, self.device, self.repeats, self.warmup = torch, device, repeats, warmup
        self.cuda = device.type == "cuda"
        self.ctx = ctx

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _once(self, fn) -> float:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def medians(self, fns: dict, repeats: dict | None = None, warmups: dict | None = None) -> dict:
        """``{name: median seconds}``; ``repeats`` / ``warmups`` may lower the rounds / warm-up calls of a slow
        contestant. Every contestant gets at least one timed round; past the row's deadline no further round starts
        (:attr:`cut` says so)."""
        repeats, warmups = repeats or {}, warmups or {}
        for name, fn in fns.items():
            for _ in range(warmups.get(name, self.warmup)):
                fn()
        self.sync()
        times = {name: [] for name in fns}
        self.cut = False
        for r in range(self.repeats):
            if r and self.ctx is not None and self.ctx.past():
                self.cut = True
                break
            for name, fn in fns.items():
                if r < repeats.get(name, self.repeats):
                    times[name].append(self._once(fn))
        self.rounds = {name: len(t) for name, t in times.items()}
        return {name: statistics.median(t) for name, t in times.items()}

    def allocated_by(self, fn) -> int | None:
        """CUDA memory that ``fn()`` leaves allocated (None off CUDA)."""
        if not self.cuda:
            fn()
            return None
        torch = self.torch
        self.sync()
        before = torch.cuda.memory_allocated(self.device)
        fn()
        self.sync()
        return int(torch.cuda.memory_allocated(self.device) - before)

    def host_to_device_copies(self, fn) -> int | None:
        """Host-to-device memory copies one call of ``fn`` makes (torch profiler; None off CUDA)."""
        if not self.cuda:
            return None
        from torch.profiler import ProfilerActivity, profile

        fn()
        self.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            self.sync()
        return sum(e.count for e in prof.key_averages() if "HtoD" in e.key)

    def host_syncs(self, fn) -> dict:
        """The host syncs one call of ``fn`` makes, by op and line (:class:`tests.syncs.HostSyncs`; off CUDA the
        ops on CPU tensors wait for nothing and are not counted)."""
        from tests.syncs import HostSyncs

        fn()
        with HostSyncs() as syncs:
            fn()
        self.sync()
        return {"count": syncs.count, "by_line": dict(syncs.by_line())}

    def profile(self, fn, top: int = 12) -> dict:
        """Where one call of ``fn`` spends its time (torch profiler, after one untimed call): the ``top`` ops by
        self time on the device (CUDA) or the CPU, kernel launches and host syncs."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        fn()
        self.sync()
        with profile(activities=activities) as prof:
            fn()
            self.sync()
        events = prof.key_averages()
        where = "device" if self.cuda else "cpu"
        attr = next(a for a in (f"self_{where}_time_total", "self_cuda_time_total", "self_cpu_time_total")
                    if hasattr(events[0], a)) if len(events) else "self_cpu_time_total"
        ranked = sorted(events, key=lambda e: getattr(e, attr), reverse=True)
        total = sum(getattr(e, attr) for e in events)
        count = lambda *names: sum(e.count for e in events if e.key in names)  # noqa: E731
        return {"by": f"{where} self time", "total_ms": total / 1e3,
                "top": [{"op": e.key, "calls": e.count, "self_ms": getattr(e, attr) / 1e3,
                         "share": getattr(e, attr) / total if total else 0.0} for e in ranked[:top]],
                "kernel_launches": count("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"),
                "host_syncs": count("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense")}

    def peak_bytes(self, fn) -> int | None:
        """Peak CUDA memory of one call above what was allocated before it (None off CUDA)."""
        if not self.cuda:
            return None
        torch = self.torch
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        fn()
        self.sync()
        return int(torch.cuda.max_memory_allocated(self.device) - before)


def max_abs(a, b) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max().item()) if a.numel() else 0.0


def agrees(got, want) -> bool:
    """Within the dispatch self-check's dtype-aware tolerance (exact for integer and bool results)."""
    from kernels.dispatch import compare

    return compare(got, want) is None


def check_kernels(device, names) -> list[dict]:
    """The self-check of each kernel in ``names`` on ``device`` (every dtype it is used with), recorded as verdicts."""
    import kernels.checks  # noqa: F401 (every kernel imported: each registers its check)
    from kernels import dispatch

    key = dispatch.device_key(device)
    rows = []
    for name in names:
        for dtype in dispatch.CHECKS[name].dtypes:
            verdict = dispatch.self_check_results().get((name, key, str(dtype)))  # decided by an earlier row
            if verdict is None:
                verdict = dispatch.self_check(name, key, dtype)
                with dispatch._lock:
                    dispatch._verdicts[(name, key, str(dtype))] = verdict
            rows.append({"kernel": name, "device": key, "dtype": str(dtype).replace("torch.", ""),
                         "ok": verdict["ok"], "reason": verdict["reason"], "used": dispatch.CHECKS[name].auto})
    return rows


def self_check_of(rows: list[dict], *kernels: str) -> dict:
    mine = [r for r in rows if r["kernel"] in kernels]
    return {"ok": bool(mine) and all(r["ok"] for r in mine),
            "rows": {f"{r['kernel']}/{r['dtype']}": (r["reason"] or "ok") for r in mine}}


def forced(mode: str, fn):
    """``fn`` run with ``LAYERWISE_KERNELS=mode``."""
    def run():
        before = os.environ.get("LAYERWISE_KERNELS")
        os.environ["LAYERWISE_KERNELS"] = mode
        try:
            return fn()
        finally:
            os.environ.pop("LAYERWISE_KERNELS") if before is None else os.environ.update(LAYERWISE_KERNELS=before)
    return run


def unfused(fn):
    """``fn`` run without the fused decode + merge kernel: the exponent decode, then the bit merge, then a copy into
    the buffer (the NeuZip decode path before the first GPU run), to measure what the fusion buys."""
    def run():
        import core.neuzip.codec as codec

        fused = codec.fused_decode_bf16
        codec.fused_decode_bf16 = lambda *args, **kwargs: None  # "not applicable": the two-kernel path
        try:
            return fn()
        finally:
            codec.fused_decode_bf16 = fused
    return run


def extras(ctx: RowContext, name: str, result: dict, parts: dict) -> None:
    """Save ``result`` (a row's timed part), then add each of ``parts`` (``{key: thunk}``: profiles, peaks, sync
    counts) to it and save it again, until the row's deadline passes (the keys left out: ``not_measured``)."""
    ctx.save(name, result)
    for key, part in parts.items():
        if ctx.past():
            result.setdefault("not_measured", []).append(key)
            continue
        result[key] = part()
        ctx.save(name, result)
    ctx.save(name, result)
