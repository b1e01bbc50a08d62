"""The GPU path measured against its peers within a time budget: JSON after every row, the five targets last.

    python bench/gpu.py --budget 480 --out gpu.json     # on a CUDA host: every row, at most 480 s in all
    python bench/gpu.py --smoke                         # anywhere: tiny shapes on the CPU interpreter (CI)

A GPU is lent for minutes, so the run is planned around a budget (``--budget``, seconds, default 480):

- **Rows by value.** The rows run in the order of :data:`ROWS` (most wanted first); each gets a share of what is left
  of the budget by its weight, and time a row leaves unused goes to the rows after it. Rows that need ``mamba_ssm``
  come last: with ``--mamba-ready FILE`` the run waits for FILE (the background build's marker) only while the
  budget allows.
- **A row past its share stops.** On CUDA each row runs in its own process (``--isolate``, the default there: a
  crashed kernel or a hang cannot take the other rows with it) that is killed at its share; inside, the timing
  loops check a deadline between rounds, and a row saves what it has measured after each part, so a killed row
  still reports its finished parts (``"killed": true``).
- **JSON after every row.** ``--out PATH`` is rewritten (atomically) after each row; the whole report is also
  printed on stdout at the end, and **the table of the five targets is printed last** (stderr, markdown).

The rows (each timed interleaved with its peer in one process, medians of ``--repeats`` rounds after ``--warmup``
calls, CUDA events; peak memory by ``torch.cuda.max_memory_allocated`` above what was allocated before; every row
records the self-check of its kernels on that device and the max abs error against their ``*_ref`` twins):

- ``neuzip_generate``: a random-weight SmolLM2-135M-config model with every linear layer but the tied embedding /
  head compressed as the app does it (``compress``'s defaults, moved with ``.to(device)``) against the same model in
  bf16: batch-1 greedy generation (32 new tokens, KV cache) as dispatched and with the fused decode + GEMV opted in,
  tokens/s, host syncs and a profile per token;
- ``lrp_explain_512`` / ``_2048`` / ``_8192`` (one row per length, so that a slow one cannot starve the others;
  ``--only lrp_explain`` names all three): MambaLRP ``explain`` (default mode: the kernels' self-checks, the tile
  autotune, recompute as decided for the device) on a random-weight mamba-130m-config model against explain's own
  forward without the backward (the mixers with the rules under ``no_grad``: the same Triton scan), and beside it
  transformers' forward as installed (its fast kernels need ``mamba_ssm`` and ``causal_conv1d``; without them it is
  its PyTorch reference, timed once); peak memory, whether it recomputed, the profiler's top ops and host syncs
  (:class:`core.syncs.HostSyncs`) at 2048, and at 512 the GPU relevance against the CPU's;
- ``neuzip_decode``: NeuZip lossless decode of a 1536x576 SmolLM2-135M-shaped matrix at the app's settings (chunks
  of 2**17 weights, the segment layout the app picks for the device, decoded and merged by one kernel into a bf16
  buffer), GB/s of decoded bf16 against a device-to-device copy of the same bytes and against the unfused path
  (decode, merge, copy); the same for a 14.2 M-weight tensor; the other layouts (segment length x segments per
  program: programs, resident index bytes, time) to tune :data:`kernels.neuzip_rans.DECODE_ROWS` /
  ``PROGRAMS_PER_SM`` / ``MIN_SEGMENT`` / ``MAX_SEGMENT``; the device time of one call of each (profiler);
- ``neuzip_forward``: the same model pair, a 512-token forward, compressed against bf16 and against the unfused
  decode (device memory after loading, forward peak, host-to-device copies and host syncs per forward, the
  overhead per compressed linear, a profile of each);
- ``selective_scan``: the MambaLRP scan (forward + relevance backward), mamba-130m shapes (B = 1, D = 1536,
  N = 16), L = 2048 and 8192: the tile the autotune chose, every tile of :data:`kernels.selective_scan.TILES` and the
  pipelining depths, against its ``*_ref`` twin (L = 2048);
- ``topk_mask``, ``add_rmsnorm``: the MathNeuro top-K mask against ``torch.topk``, the fused add + RMSNorm against
  the unfused ops (both measured on an H100 before; kept last but one);
- ``selective_scan_vs_mamba_ssm``: the scan against ``mamba_ssm``'s ``selective_scan_fn`` forward + backward, when it
  imports (its ``selective_scan_cuda`` extension alone is enough).

With ``--smoke`` the timings are meaningless (interpreter, tiny shapes) and labelled so; the run proves the script
works end to end and the kernels agree with their twins. Without CUDA and without ``--smoke`` the script exits 2
with one line saying what to do.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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


def _log(msg: str) -> None:
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
        """The host syncs one call of ``fn`` makes, by op and line (:class:`core.syncs.HostSyncs`; off CUDA the
        ops on CPU tensors wait for nothing and are not counted)."""
        from core.syncs import HostSyncs

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


def _max_abs(a, b) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max().item()) if a.numel() else 0.0


def _agrees(got, want) -> bool:
    """Within the dispatch self-check's dtype-aware tolerance (exact for integer and bool results)."""
    from kernels.dispatch import compare

    return compare(got, want) is None


def check_kernels(device, names) -> list[dict]:
    """The self-check of each kernel in ``names`` on ``device`` (every dtype it is used with), recorded as verdicts."""
    from kernels import dispatch

    dispatch._import_kernels()
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


def _self_check(rows: list[dict], *kernels: str) -> dict:
    mine = [r for r in rows if r["kernel"] in kernels]
    return {"ok": bool(mine) and all(r["ok"] for r in mine),
            "rows": {f"{r['kernel']}/{r['dtype']}": (r["reason"] or "ok") for r in mine}}


def _forced(mode: str, fn):
    """``fn`` run with ``LAYERWISE_KERNELS=mode``."""
    def run():
        before = os.environ.get("LAYERWISE_KERNELS")
        os.environ["LAYERWISE_KERNELS"] = mode
        try:
            return fn()
        finally:
            os.environ.pop("LAYERWISE_KERNELS") if before is None else os.environ.update(LAYERWISE_KERNELS=before)
    return run


def _unfused(fn):
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


# ---- rows: the MambaLRP scan --------------------------------------------------------------------------------------
def _scan_inputs(device, length: int, channels: int, state: int = 16):
    import torch

    g = torch.Generator().manual_seed(0)
    u = torch.randn(1, channels, length, generator=g)
    delta = 0.5 * torch.randn(1, channels, length, generator=g)
    A = -torch.rand(channels, state, generator=g) - 0.5  # negative, as Mamba's -exp(A_log)
    B, C = torch.randn(1, state, length, generator=g), torch.randn(1, state, length, generator=g)
    D, bias, grad = torch.randn(channels, generator=g), 0.1 * torch.randn(channels, generator=g), torch.randn_like(u)
    return tuple(t.to(device) for t in (u, delta, A, B, C, D, bias, grad))


def _scan_step(fn, inputs):
    import torch

    u, delta, A, B, C, D, bias, grad = inputs

    def step():
        x = u.detach().requires_grad_(True)
        y = fn(x, delta, A, B, C, D, bias, True)
        (du,) = torch.autograd.grad(y, x, grad)
        return y.detach(), du
    return step


def selective_scan(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Each length: the tile the autotune chose, every tile of TILES and the pipelining depths, the twin at the
    first length only (it materialises (B, D, L, N) tensors and records L autograd steps)."""
    from kernels import selective_scan as S
    from kernels.selective_scan import selective_scan_lrp_ref, selective_scan_lrp_triton

    checks = check_kernels(device, ["selective_scan_lrp"])
    for i, (length, channels) in enumerate(sizes["scan"]):
        if ctx.past():
            break
        inputs = _scan_inputs(device, length, channels)
        default = _scan_step(selective_scan_lrp_triton, inputs)
        y_k, du_k = default()  # on CUDA the autotune runs here, once
        tuned = S.tuned_tile(inputs[0], 16)
        contestants = {"triton": default}
        tiles = {}
        for block_d, chunk in sizes["tiles"]:
            for stages in sizes["stages"] if (block_d, chunk) == sizes["tiles"][0] else [S.STAGES]:
                name = f"triton_d{block_d}_c{chunk}_s{stages}"
                tiles[name] = {"block_d": block_d, "chunk": chunk, "stages": stages}
                contestants[name] = _scan_step(
                    lambda *a, b=block_d, c=chunk, s=stages: selective_scan_lrp_triton(*a, block_d=b, chunk=c,
                                                                                       stages=s), inputs)
        with_twin = i == 0
        if with_twin:
            contestants["ref_twin"] = _scan_step(selective_scan_lrp_ref, inputs)
            y_r, du_r = contestants["ref_twin"]()
        else:
            y_r, du_r = y_k, du_k
        errors = {name: max(_max_abs(y, y_r), _max_abs(du, du_r)) for name in tiles for y, du in [contestants[name]()]}
        medians = timer.medians(contestants, repeats={"ref_twin": sizes["slow_repeats"]})
        fastest = min(tiles, key=lambda n: medians[n])
        out = {"what": "MambaLRP selective scan, forward + relevance backward, float32 (no mamba_ssm here: "
                       "selective_scan_vs_mamba_ssm)",
               "shape": {"B": 1, "D": channels, "L": length, "N": 16},
               "tile_chosen": None if tuned is None else {"block_d": tuned[0], "chunk": tuned[1]},
               "tile_chosen_by": "LAYERWISE_SCAN_TILE / autotune on this device" if tuned else
                                 "scan_config's default (no autotune off CUDA)",
               "stages_default": S.STAGES, "tiles": {name: {**t, "median_s": medians[name],
                                                            "ratio_over_default": medians[name] / medians["triton"],
                                                            "max_abs_err_vs_twin": errors[name]}
                                                     for name, t in tiles.items()},
               "fastest_tile": {**tiles[fastest], "median_s": medians[fastest]},
               "self_check": _self_check(checks, "selective_scan_lrp"), "median_s": medians,
               "rounds": timer.rounds, "cut_by_deadline": timer.cut,
               "peak_bytes": {"triton": timer.peak_bytes(default)}}
        if with_twin:
            out.update(ratio_triton_over_ref_twin=medians["triton"] / medians["ref_twin"],
                       max_abs_err_vs_twin=max(_max_abs(y_k, y_r), _max_abs(du_k, du_r)),
                       agrees_with_twin=_agrees((y_k, du_k), (y_r, du_r)),
                       notes=["ref_twin materialises (B, D, L, N) tensors and records L autograd steps: the tests' "
                              "oracle, not a fast path"])
        else:
            out.update(max_abs_err_vs_twin=max(errors.values()), agrees_with_twin=True,
                       notes=["at this length the tiles are compared with the default tile (no twin: too slow)"])
        ctx.save(f"selective_scan_L{length}", out)


def _mamba_selective_scan():
    """``selective_scan_fn`` of mamba_ssm, or a wrapper of its compiled ``selective_scan_cuda`` alone (mamba_ssm's
    package may fail to import for one of its optional parts), or the reason neither imports."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
        return selective_scan_fn, "mamba_ssm.ops.selective_scan_interface.selective_scan_fn"
    except Exception as exc:
        first = f"{type(exc).__name__}: {exc}"
    try:
        import selective_scan_cuda
        import torch
    except Exception as exc:
        return None, f"mamba_ssm is not importable ({first}; selective_scan_cuda: {type(exc).__name__}: {exc})"

    class _Fn(torch.autograd.Function):  # mamba_ssm 2.3.2's SelectiveScanFn without z, real A, B / C (B, N, L)
        @staticmethod
        def forward(ctx, u, delta, A, B, C, D, delta_bias, softplus):
            out, x, *_ = selective_scan_cuda.fwd(u, delta, A, B[:, None], C[:, None], D, None, delta_bias, softplus)
            ctx.save_for_backward(u, delta, A, B, C, D, delta_bias, x)
            ctx.softplus = softplus
            return out

        @staticmethod
        def backward(ctx, dout):
            u, delta, A, B, C, D, delta_bias, x = ctx.saved_tensors
            du, *_ = selective_scan_cuda.bwd(u, delta, A, B[:, None], C[:, None], D, None, delta_bias,
                                             dout.contiguous(), x, None, None, ctx.softplus, False)
            return du, None, None, None, None, None, None, None

    def fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
        return _Fn.apply(u, delta, A, B, C, D, delta_bias, delta_softplus)
    return fn, f"selective_scan_cuda directly (mamba_ssm's package did not import: {first})"


def selective_scan_vs_mamba_ssm(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    from kernels.selective_scan import selective_scan_lrp_ref, selective_scan_lrp_triton

    checks = check_kernels(device, ["selective_scan_lrp"])
    fn, how = _mamba_selective_scan()
    for i, (length, channels) in enumerate(sizes["scan"]):
        if ctx.past():
            break
        out = {"what": "MambaLRP selective scan (forward + relevance backward) vs mamba_ssm's selective_scan_fn "
                       "forward + backward, float32", "shape": {"B": 1, "D": channels, "L": length, "N": 16},
               "self_check": _self_check(checks, "selective_scan_lrp")}
        if fn is None:
            out.update(mamba_ssm=f"skipped: {how}; pip install -r requirements-gpu.txt --no-build-isolation "
                                 "on a CUDA host", agrees_with_twin=True, max_abs_err_vs_twin=0.0)
            ctx.save(f"selective_scan_vs_mamba_ssm_L{length}", out)
            continue
        inputs = _scan_inputs(device, length, channels)
        u, delta, A, B, C, D, bias, grad = inputs
        contestants = {"triton": _scan_step(selective_scan_lrp_triton, inputs),
                       "mamba_ssm": _scan_step(lambda x, dt, a, b, c, d, db, sp: fn(x, dt, a, b, c, D=d, delta_bias=db,
                                                                                     delta_softplus=sp), inputs)}
        (y_k, du_k), (y_m, _) = contestants["triton"](), contestants["mamba_ssm"]()
        y_r = selective_scan_lrp_ref(u, delta, A, B, C, D, bias, True) if i == 0 else y_k
        medians = timer.medians(contestants)
        ratio = medians["triton"] / medians["mamba_ssm"]
        out.update(median_s=medians, rounds=timer.rounds, cut_by_deadline=timer.cut, mamba_ssm_used=how,
                   ratio_triton_over_mamba_ssm=ratio,
                   target_at_most_1x_of_mamba_ssm=None if not timer.cuda else bool(ratio <= 1.0),
                   max_abs_err_y_mamba_ssm_vs_twin=_max_abs(y_m, y_r), max_abs_err_vs_twin=_max_abs(y_k, y_r),
                   agrees_with_twin=_agrees(y_k, y_r),
                   peak_bytes={name: timer.peak_bytes(f) for name, f in contestants.items()},
                   notes=["mamba_ssm's backward computes the gradients of every input (the ordinary rule); the "
                          "MambaLRP backward needs only the gradient w.r.t. u (A_bar, B_bar, C constant)"])
        ctx.save(f"selective_scan_vs_mamba_ssm_L{length}", out)


# ---- rows: NeuZip -------------------------------------------------------------------------------------------------
def _decode_layouts(ct, device, layouts, sms):
    """``{name: (DeviceArrays, description)}`` of a compressed tensor in each layout ``(segment or None, rows)``."""
    from kernels.neuzip_rans import decode_programs

    out = {}
    for segment, rows in layouts:
        arrays = ct.device_arrays(device, segment)
        arrays.rows = rows
        seg = segment or ct.exponents.chunk_size
        out[f"seg{seg}_rows{rows}"] = (arrays, {"segment": seg, "rows": rows,
                                                "programs": decode_programs(ct.numel, seg, rows),
                                                "programs_per_sm": None if not sms else
                                                decode_programs(ct.numel, seg, rows) / sms,
                                                "index_bytes": arrays.index_bytes,
                                                "index_bits_per_weight": 8 * arrays.index_bytes / ct.numel})
    return out


def neuzip_decode(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from core.neuzip.codec import compress
    from kernels import neuzip_rans as R
    from kernels.neuzip_bits import merge_bf16_ref

    checks = check_kernels(device, ["pair_rans_decode", "merge_bf16"])
    sms = R.multiprocessors(device)
    for label, shape in sizes["decode"].items():
        if ctx.past():
            break
        numel = shape[0] * shape[1]
        g = torch.Generator().manual_seed(0)
        weights = (0.02 * torch.randn(numel, generator=g)).to(torch.bfloat16)  # SmolLM2-like per-tensor std
        t0 = time.perf_counter()
        ct = compress(weights, mantissa_bits=7, chunk_size=sizes.get("chunk"))  # the app's chunk unless smoke
        encode_s = time.perf_counter() - t0
        segment = ct.device_layout(device) if sms else sizes.get("smoke_segment")
        t0 = time.perf_counter()
        app = ct.device_arrays(device, segment)
        index_s = time.perf_counter() - t0
        original = weights.to(device)
        copy_src, copy_dst = original.clone(), torch.empty_like(original)
        errors = torch.zeros(1, dtype=torch.int32, device=device)
        buffer = torch.empty_like(original)  # as the app decodes: into the shared decompression buffer
        decode = lambda arrays=app: ct.decode_arrays(arrays, errors, out=buffer)  # noqa: E731
        got = decode().clone()
        want = _forced("ref", decode)().clone()
        layouts = _decode_layouts(ct, device, [lay for lay in sizes["layouts"](ct.exponents.chunk_size)], sms)
        contestants = {"app": decode, "app_unfused": _unfused(decode), "copy": lambda: copy_dst.copy_(copy_src)}
        for name, (arrays, _) in layouts.items():
            contestants[name] = lambda arrays=arrays: ct.decode_arrays(arrays, errors, out=buffer)
        exact = {name: bool(torch.equal(fn().view(torch.int16), original.view(torch.int16)))
                 for name, fn in contestants.items() if name != "copy"}
        medians = timer.medians(contestants)
        nbytes = 2 * numel
        gbps = {name: nbytes / s / 1e9 for name, s in medians.items()}
        ratio = gbps["app"] / gbps["copy"]
        chunk = ct.exponents.chunk_size
        seg = segment or chunk
        ctx.save(f"neuzip_decode_{label}", {
            "what": f"NeuZip lossless decode (pair-rANS exponents + bit merge) of a {shape[0]}x{shape[1]} bf16 "
                    "matrix vs a device-to-device copy of the same bytes, at the app's settings",
            "settings": f"the app's: compress() defaults (chunks of {chunk} weights), the segment layout the app "
                        f"picks on this device (kernels.neuzip_rans.decode_layout: segments of {seg}, "
                        f"{R.DECODE_ROWS} per program), decoded and merged by one kernel into a bf16 buffer "
                        "(app_unfused: the exponent decode, the bit merge and a copy into the buffer, as before)",
            "shape": {"rows": shape[0], "cols": shape[1], "numel": numel, "chunk_size": chunk, "segment": seg,
                      "programs": R.decode_programs(numel, seg), "multiprocessors": sms},
            "self_check": _self_check(checks, "pair_rans_decode", "merge_bf16"),
            "median_s": medians, "rounds": timer.rounds, "cut_by_deadline": timer.cut, "gbps_of_bf16_bytes": gbps,
            "compressed_bytes": ct.nbytes, "resident_bytes": app.nbytes, "index_bytes": app.index_bytes,
            "bf16_bytes": nbytes, "cpu_encode_s": encode_s, "cpu_index_s": index_s,
            "ratio_decode_over_copy_bandwidth": ratio,
            "ratio_unfused_over_app_time": medians["app_unfused"] / medians["app"],
            "target_at_least_0_25": None if not timer.cuda else bool(ratio >= 0.25),
            "layouts": {name: {**desc, "median_s": medians[name], "gbps": gbps[name], "bit_exact": exact[name]}
                        for name, (_, desc) in layouts.items()},
            "max_abs_err_vs_twin": _max_abs(got.view(torch.int16), want.view(torch.int16)),
            "agrees_with_twin": bool(torch.equal(got.view(torch.int16), want.view(torch.int16))),
            "bit_exact_vs_original": all(exact.values()), "device_flag_clean": int(errors.item()) == 0,
            "peak_bytes": {"app": timer.peak_bytes(decode)},
            "profile": {name: timer.profile(contestants[name], top=4) for name in ("app", "app_unfused", "copy")},
            "notes": ["GB/s counts the decoded bf16 bytes (2 per weight)",
                      "profile: one call under the torch profiler: its device time (total_ms) beside the timed "
                      "wall (median_s): a call whose median is far above its device time waits for the host",
                      "layouts: seg<S>_rows<R> decodes in segments of S weights, R segments per program; the index "
                      "(8 states and 2 offsets per segment) is resident device memory beside the compressed bytes"]})


def _llama_pair(timer: Timer, device, config: dict, chunk) -> dict:
    """A random-weight Llama of ``config`` twice on ``device``: bf16, and with every linear layer but the tied
    embedding / head NeuZip-compressed as the app does it (lossless, ``compress``'s defaults unless ``chunk``),
    laid out for the device by ``.to(device)``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.neuzip.codec import compress
    from core.neuzip.modules import CompressedLinear, apply_compressed

    def build():
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16).eval()

    dense, packed = build(), build()
    linears = {name: m for name, m in packed.named_modules()
               if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
    linear_bf16_bytes = sum(m.weight.numel() * 2 for m in linears.values())
    t0 = time.perf_counter()
    tensors = {name: compress(m.weight.detach(), 7, chunk_size=chunk) for name, m in linears.items()}
    encode_s = time.perf_counter() - t0
    apply_compressed(packed, tensors)
    held = {}
    for name, model in (("bf16", dense), ("compressed", packed)):
        t0 = time.perf_counter()
        held[name] = timer.allocated_by(lambda model=model: model.to(device))
        held[f"{name}_load_s"] = time.perf_counter() - t0  # compressed: includes the segment index pass
    packed_layers = [m for m in packed.modules() if isinstance(m, CompressedLinear)]
    return {"dense": dense, "packed": packed, "linears": len(linears), "linear_bf16_bytes": linear_bf16_bytes,
            "encode_s": encode_s, "held": held, "compressed_modules": packed_layers,
            "segments": sorted({m.segment or m.weight_compressed.exponents.chunk_size for m in packed_layers})}


def _decode_path(pair: dict) -> str:
    from kernels.dispatch import use_triton

    probe = pair["compressed_modules"][0].arrays()
    if not use_triton(probe.states, kernel="pair_rans_decode"):
        return "reference (PyTorch/numba)"
    fused = use_triton(probe.states, probe.fields, kernel="pair_rans_decode_bf16")
    return "triton: decode + merge in one kernel" if fused else "triton: decode, then merge"


def _settings(chunk) -> str:
    return ("the app's: compress() defaults (chunks of 2**17 weights), laid out for the device by .to(device)"
            if chunk is None else f"smoke: chunks of {chunk} weights")


def neuzip_forward(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """The compressed forward of a prompt against the bf16 model's, and without the fused decode + merge."""
    import torch

    checks = check_kernels(device, ["pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16"])
    config, label, chunk = sizes["llama"], sizes["llama_label"], sizes.get("chunk")
    pair = _llama_pair(timer, device, config, chunk)
    dense, packed = pair["dense"], pair["packed"]
    resident = sum(t.numel() * t.element_size() for m in pair["compressed_modules"]
                   for _, t in m.arrays().items() if t is not None)
    index = sum(m.arrays().index_bytes for m in pair["compressed_modules"])
    on_device = {str(t.device) for m in pair["compressed_modules"] for _, t in m.arrays().items() if t is not None}
    ids = torch.randint(0, config["vocab_size"], (1, sizes["tokens"]),
                        generator=torch.Generator().manual_seed(1)).to(device)

    def forward(model):
        def step():
            with torch.inference_mode():
                return model(ids).logits
        return step

    got, want, got_unfused = forward(packed)(), forward(dense)(), _unfused(forward(packed))()
    medians = timer.medians({"compressed": forward(packed), "bf16": forward(dense),
                             "compressed_unfused": _unfused(forward(packed))})
    ratio = medians["compressed"] / medians["bf16"]
    linears = pair["linears"]
    result = {
        "what": f"{label}: forward of {sizes['tokens']} tokens, linear layers NeuZip-compressed (lossless) vs bf16",
        "settings": _settings(chunk), "model": label,
        "shape": {"tokens": sizes["tokens"], "compressed_linears": linears, "segments": pair["segments"]},
        "self_check": _self_check(checks, "pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16"),
        "decode_path": _decode_path(pair), "median_s": medians, "rounds": timer.rounds, "cut_by_deadline": timer.cut,
        "ratio_compressed_over_bf16": ratio, "target_at_most_1_3x": None if not timer.cuda else bool(ratio <= 1.3),
        "ratio_unfused_over_bf16": medians["compressed_unfused"] / medians["bf16"],
        "overhead_per_linear_s": (medians["compressed"] - medians["bf16"]) / linears,
        "overhead_per_linear_unfused_s": (medians["compressed_unfused"] - medians["bf16"]) / linears,
        "max_abs_err_vs_twin": _max_abs(got, want), "agrees_with_twin": _agrees(got, want),
        "unfused_same_logits": bool(torch.equal(got_unfused, got)), "cpu_encode_s": pair["encode_s"],
        "device_bytes_after_load": pair["held"], "compressed_arrays_on": sorted(on_device),
        "linear_weights_bytes": {"bf16": pair["linear_bf16_bytes"], "compressed_resident": resident,
                                 "of_which_states_and_offsets": index, "ratio": resident / pair["linear_bf16_bytes"]},
        "notes": ["twin = the same model with its bf16 weights (lossless codec: logits should be equal)",
                  "compressed_unfused: the same weights decoded as before the first GPU run (exponent decode, bit "
                  "merge, copy into the buffer: 3 kernels a linear instead of 1)",
                  "overhead_per_linear_s: (compressed - bf16) / compressed linears; profile: one forward under the "
                  "torch profiler, its device time (total_ms) and kernel launches beside the timed wall",
                  "host_syncs_per_forward: expected 1 (the corruption flag, read once after the forward)"]}
    _extras(ctx, "neuzip_forward", result, {  # the timed part saved first, the rest while the share allows
        "peak_bytes": lambda: {"compressed": timer.peak_bytes(forward(packed)),
                               "bf16": timer.peak_bytes(forward(dense))},
        "host_to_device_copies_per_forward": lambda: timer.host_to_device_copies(forward(packed)),
        "host_syncs_per_forward": lambda: timer.host_syncs(forward(packed)) if timer.cuda else None,
        "profile": lambda: {"compressed": timer.profile(forward(packed), top=8),
                            "bf16": timer.profile(forward(dense), top=8)}})


def _extras(ctx: RowContext, name: str, result: dict, parts: dict) -> None:
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


def neuzip_generate(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Batch-1 greedy generation with the KV cache: the compressed model as dispatched (each weight decoded into the
    shared buffer), with the fused decode + GEMV forced, and the bf16 model."""
    import torch

    checks = check_kernels(device, ["pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16", "pair_rans_gemv"])
    config, label, chunk = sizes["llama"], sizes["llama_label"], sizes.get("chunk")
    pair = _llama_pair(timer, device, config, chunk)
    dense, packed = pair["dense"], pair["packed"]
    prompt, new_tokens = sizes["prompt"], sizes["new_tokens"]
    ids = torch.randint(0, config["vocab_size"], (1, prompt), generator=torch.Generator().manual_seed(2)).to(device)

    def generate(model):
        def step():
            with torch.inference_mode():
                out = model(ids, use_cache=True)
                cache, token, tokens = out.past_key_values, out.logits[:, -1:].argmax(-1), []
                for _ in range(new_tokens):
                    tokens.append(token)
                    out = model(token, past_key_values=cache, use_cache=True)
                    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                return torch.cat(tokens, 1)
        return step

    contestants = {"compressed": generate(packed), "bf16": generate(dense),
                   "compressed_fused_gemv": _forced("triton", generate(packed))}
    got, want, got_fused = (contestants[name]() for name in ("compressed", "bf16", "compressed_fused_gemv"))
    timer.repeats, timer.warmup = sizes["generate_repeats"], min(timer.warmup, 1)
    medians = timer.medians(contestants)
    tokens_per_s = {name: new_tokens / s for name, s in medians.items()}
    best = max(v for k, v in tokens_per_s.items() if k != "bf16")

    def one_token(model):
        with torch.inference_mode():
            cache = model(ids, use_cache=True).past_key_values
        token = ids[:, -1:]

        def step():
            with torch.inference_mode():
                return model(token, past_key_values=cache, use_cache=True).logits
        return step

    result = {
        "what": f"{label}: batch-1 greedy generation, {new_tokens} new tokens after a {prompt}-token prompt "
                "(KV cache), linear layers NeuZip-compressed (lossless) vs bf16",
        "settings": _settings(chunk), "model": label, "shape": {"prompt": prompt, "new_tokens": new_tokens},
        "self_check": _self_check(checks, "pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16",
                                  "pair_rans_gemv"),
        "decode_path": _decode_path(pair), "median_s": medians, "rounds": timer.rounds,
        "cut_by_deadline": timer.cut, "tokens_per_s": tokens_per_s,
        "ratio_compressed_over_bf16_tokens_per_s": tokens_per_s["compressed"] / tokens_per_s["bf16"],
        "ratio_fused_gemv_over_bf16_tokens_per_s": tokens_per_s["compressed_fused_gemv"] / tokens_per_s["bf16"],
        "ratio_best_compressed_over_bf16_tokens_per_s": best / tokens_per_s["bf16"],
        "target_at_least_0_8": None if not timer.cuda else bool(best / tokens_per_s["bf16"] >= 0.8),
        "same_tokens": bool(torch.equal(got, want)), "fused_same_tokens": bool(torch.equal(got_fused, want)),
        "max_abs_err_vs_twin": float((got != want).sum().item()), "agrees_with_twin": bool(torch.equal(got, want)),
        "notes": ["the prompt's forward is inside each timed call; tokens_per_s counts the new tokens",
                  "max_abs_err_vs_twin counts generated tokens that differ from the bf16 model's (lossless: 0)",
                  "compressed: as dispatched (each weight decoded and merged by one kernel into the shared buffer, "
                  "then multiplied); compressed_fused_gemv: with LAYERWISE_KERNELS=triton, each generated token's "
                  "one-row calls multiply straight from the compressed arrays (fused exponent decode + GEMV, opt-in "
                  "until this row shows it wins: kernels.neuzip_rans register_check auto=False)",
                  "profile_token: one generated token under the torch profiler (device time, kernel launches)"]}
    _extras(ctx, "neuzip_generate", result, {  # the timed part saved first, the rest while the share allows
        "host_syncs_per_token": lambda: {"compressed": timer.host_syncs(one_token(packed)),
                                         "fused_gemv": timer.host_syncs(_forced("triton", one_token(packed))),
                                         "bf16": timer.host_syncs(one_token(dense))} if timer.cuda else None,
        "profile_token": lambda: {"compressed": timer.profile(one_token(packed), top=6),
                                  "fused_gemv": timer.profile(_forced("triton", one_token(packed)), top=6),
                                  "bf16": timer.profile(one_token(dense), top=6)},
        "peak_bytes": lambda: {"compressed": timer.peak_bytes(generate(packed)),
                               "bf16": timer.peak_bytes(generate(dense))}})


# ---- rows: MambaLRP explain ---------------------------------------------------------------------------------------
def _transformers_mamba_path() -> dict:
    """Which path transformers' Mamba forward takes on CUDA: its fast kernels need both ``mamba_ssm`` and
    ``causal_conv1d``; without either it falls back to its PyTorch reference (a Python loop over the sequence)."""
    found = {}
    for name in ("mamba_ssm", "causal_conv1d"):
        try:
            __import__(name)
            found[name] = "imports"
        except Exception as exc:
            found[name] = f"not importable ({type(exc).__name__})"
    fast = all(v == "imports" for v in found.values())
    return {**found, "path": "fast kernels (mamba_ssm + causal_conv1d)" if fast else
            "PyTorch reference (a Python loop over the sequence)", "fast": fast}


def lrp_explain(ctx: RowContext, timer: Timer, device, sizes: dict, index: int = 0) -> None:
    """One length (``sizes["mamba_lengths"][index]``): ``explain`` against the no-grad forward that runs the same
    Triton scan (the project's mixers with the MambaLRP rules, no backward: the ratio's peer), and transformers'
    own forward as installed (timed once when it is its PyTorch reference path)."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    from core.lrp import explain
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules
    from core.lrp.methods import kept_activation_bytes, recompute_mixers
    from core.lrp.rules import LRPRules

    checks = check_kernels(device, ["selective_scan_lrp", "add_rmsnorm"])
    config, length = sizes["mamba"], sizes["mamba_lengths"][index]
    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(**config)).eval()
    cpu_at = sizes["mamba_cpu_at"] == length
    cpu_state = {k: v.clone() for k, v in model.state_dict().items()} if cpu_at else None
    model = model.to(device)
    hf = _transformers_mamba_path()
    ids = torch.randint(0, config["vocab_size"], (1, length), generator=torch.Generator().manual_seed(length))
    ids = ids.to(device)
    rules = LRPRules.mambalrp()

    def forward():  # explain's forward without the backward: the mixers with the rules, the Triton scan
        with torch.no_grad(), lrp_rules(model, rules):
            return model(ids, use_cache=False, logits_to_keep=1).logits  # the explained position, as explain

    def forward_transformers():
        with torch.no_grad():
            return model(ids, use_cache=False, logits_to_keep=1).logits

    def lrp():
        return explain(model, input_ids=ids)

    t0 = time.perf_counter()
    e = lrp()  # the first explanation: the kernels' checks, the tile autotune, compiles
    first_s = time.perf_counter() - t0
    mine = forward()
    timer.sync()
    t0 = time.perf_counter()
    theirs = forward_transformers()
    timer.sync()
    once = time.perf_counter() - t0  # transformers' reference path takes seconds: this call is its one round
    embeds = model.get_input_embeddings()(ids)
    adapter = adapter_for(model)
    timer.repeats, timer.warmup = sizes["lrp_repeats"], min(timer.warmup, 1)
    contestants = {"explain": lrp, "forward": forward}
    if hf["fast"]:
        contestants["forward_transformers"] = forward_transformers
    medians = timer.medians(contestants)
    rounds = dict(timer.rounds)
    if not hf["fast"]:
        medians["forward_transformers"], rounds["forward_transformers"] = once, 1
    ratio = medians["explain"] / medians["forward"]
    row = {"what": f"MambaLRP explain of {length} tokens (default mode: kernels as dispatched after their "
                   "self-check, the scan tile autotuned, recompute decided by the device) vs the no-grad forward "
                   f"through the same Triton scan, {sizes['mamba_label']}",
           "model": sizes["mamba_label"], "length": length,
           "self_check": _self_check(checks, "selective_scan_lrp", "add_rmsnorm"),
           "median_s": medians, "rounds": rounds, "cut_by_deadline": timer.cut, "first_call_s": first_s,
           "ratio_explain_over_forward": ratio, "target_at_most_3x": None if not timer.cuda else bool(ratio <= 3),
           "ratio_explain_over_forward_transformers": medians["explain"] / medians["forward_transformers"],
           "forward_transformers_path": hf,
           "forward_max_abs_diff_vs_transformers": _max_abs(mine, theirs),
           "recomputed_mixers": recompute_mixers(adapter, embeds),
           "kept_activation_bytes": kept_activation_bytes(adapter, embeds),
           "conservation_abs": abs(float(e.relevance.sum()) - e.logit), "logit": e.logit,
           "notes": ["forward (the ratio's peer): explain's forward without its backward, i.e. the project's mixers "
                     "with the MambaLRP rules under torch.no_grad, the same Triton scan kernel (forward only)",
                     f"forward_transformers: transformers' MambaForCausalLM forward as installed: {hf['path']}"
                     + ("" if hf["fast"] else "; timed once (one call, host clock after a device sync)"),
                     "explain includes its forward, the relevance backward and, where the kept activations would "
                     "not fit, the activation recompute (recomputed_mixers)"]}
    ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if not ctx.past():
        row["peak_bytes"] = {"explain": timer.peak_bytes(lrp), "forward": timer.peak_bytes(forward)}
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if length == sizes["mamba_profile_at"] and not ctx.past():
        row["profile_explain"] = timer.profile(lrp)
        row["profile_forward"] = timer.profile(forward)
        row["host_syncs_explain"] = timer.host_syncs(lrp) if timer.cuda else None
        row["notes"].append("profile_explain / profile_forward: the torch profiler's top ops by self time, kernel "
                            "launches and host syncs of one call; host_syncs_explain: HostSyncs by line")
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if cpu_at and not ctx.past():
        cpu_model = MambaForCausalLM(MambaConfig(**config)).eval()
        cpu_model.load_state_dict(cpu_state)
        got, ref = explain(model, input_ids=ids), explain(cpu_model, input_ids=ids.cpu())
        top = lambda r: set(r.abs().topk(min(10, r.numel())).indices.tolist())  # noqa: E731
        row["vs_cpu"] = {"max_abs_diff": _max_abs(got.relevance, ref.relevance),
                         "relevance_scale": float(ref.relevance.abs().max()),
                         "same_top10_tokens": top(got.relevance) == top(ref.relevance),
                         "cpu_conservation_abs": abs(float(ref.relevance.sum()) - ref.logit)}
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))


def _explain_result(row: dict) -> dict:
    from kernels.selective_scan import tuning_results

    return {**row, "scan_tiles_chosen": {str(k): v for k, v in tuning_results().items()}}


# ---- rows: MathNeuro top-K, fused add + RMSNorm -------------------------------------------------------------------
def topk(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from kernels.topk_mask import topk_mask_ref, topk_mask_triton

    checks = check_kernels(device, ["topk_mask"])
    rows = {}
    for name, shape in sizes["topk"].items():
        scores = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device)
        k = int(scores.numel() * TOPK_PROPORTION)

        def torch_topk(scores=scores, k=k):
            mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
            mask[torch.topk(scores.reshape(-1), k, sorted=False).indices] = True
            return mask.view(scores.shape)

        kernel = lambda scores=scores, k=k: topk_mask_triton(scores, k)  # noqa: E731
        got, want, base = kernel(), topk_mask_ref(scores, k), torch_topk()
        medians = timer.medians({"triton": kernel, "torch_topk": torch_topk})
        rows[name] = {"shape": list(shape), "k": k, "median_s": medians,
                      "ratio_triton_over_torch_topk": medians["triton"] / medians["torch_topk"],
                      "max_abs_err_vs_twin": float((got != want).sum().item()), "agrees_with_twin": _agrees(got, want),
                      "entries_differing_from_torch_topk": int((got != base).sum().item()),
                      "peak_bytes": {"triton": timer.peak_bytes(kernel), "torch_topk": timer.peak_bytes(torch_topk)}}
    ctx.save("topk_mask", {"what": f"MathNeuro top-K mask (proportion {TOPK_PROPORTION}) per matrix vs torch.topk "
                                   "+ scatter", "self_check": _self_check(checks, "topk_mask"), "matrices": rows,
                           "max_abs_err_vs_twin": max(r["max_abs_err_vs_twin"] for r in rows.values()),
                           "agrees_with_twin": all(r["agrees_with_twin"] for r in rows.values()),
                           "notes": ["max_abs_err_vs_twin counts mask entries that differ from topk_mask_ref "
                                     "(bit-identical: 0)"]})


def rmsnorm(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from kernels.rmsnorm import add_rmsnorm_ref, add_rmsnorm_triton

    checks = check_kernels(device, ["add_rmsnorm"])
    rows, width = sizes["norm"]
    g = torch.Generator().manual_seed(0)
    x, residual = torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)
    weight = 1 + 0.1 * torch.randn(width, generator=g)
    x, residual, weight = (t.to(device=device, dtype=torch.bfloat16) for t in (x, residual, weight))
    fused = lambda: add_rmsnorm_triton(x, residual, weight, 1e-5)  # noqa: E731
    unfused = lambda: add_rmsnorm_ref(x, residual, weight, 1e-5)  # noqa: E731
    (y_k, s_k), (y_r, s_r) = fused(), unfused()
    medians = timer.medians({"triton": fused, "unfused_torch": unfused})
    ctx.save("add_rmsnorm", {
        "what": "fused residual add + RMSNorm forward vs the unfused torch ops (its twin), bfloat16",
        "shape": {"rows": rows, "width": width}, "self_check": _self_check(checks, "add_rmsnorm"),
        "median_s": medians, "ratio_triton_over_unfused": medians["triton"] / medians["unfused_torch"],
        "max_abs_err_vs_twin": max(_max_abs(y_k, y_r), _max_abs(s_k, s_r)),
        "agrees_with_twin": _agrees((y_k, s_k), (y_r, s_r)),
        "peak_bytes": {"triton": timer.peak_bytes(fused), "unfused_torch": timer.peak_bytes(unfused)}})


def _selftest_hang(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Not a measurement: saves one part, then never returns (tests/bench/test_gpu.py kills it by its limit)."""
    if ctx.path is None:
        raise RuntimeError("_selftest_hang runs only in its own process (--isolate)")
    ctx.save("_selftest_hang", {"what": "a row that hangs after its first part", "first_part": 1.0})
    while True:
        time.sleep(1)


# ---- the plan ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One row of the plan: ``fn(ctx, timer, device, sizes)`` saves one or more comparisons; ``weight``: its share
    of the budget; ``needs_mamba``: waits for ``--mamba-ready``."""

    name: str
    fn: Callable
    weight: float
    needs_mamba: bool = False
    hidden: bool = False  # only with --only


def _length_row(index: int):
    """The explain row of ``sizes["mamba_lengths"][index]`` (each length its own row: one cannot starve another)."""
    def row(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
        lrp_explain(ctx, timer, device, sizes, index)
    return row


ROWS = (  # by value: what the next GPU run must answer first (the 2026-11-27 run's answers: docs/gpu.md)
    Row("neuzip_generate", neuzip_generate, 2.0),
    Row("lrp_explain_2048", _length_row(1), 1.3),
    Row("lrp_explain_8192", _length_row(2), 1.6),
    Row("neuzip_decode", neuzip_decode, 1.0),
    Row("neuzip_forward", neuzip_forward, 1.2),
    Row("lrp_explain_512", _length_row(0), 1.2),
    Row("selective_scan", selective_scan, 1.5),
    Row("topk_mask", topk, 0.5),
    Row("add_rmsnorm", rmsnorm, 0.4),
    Row("selective_scan_vs_mamba_ssm", selective_scan_vs_mamba_ssm, 1.0, needs_mamba=True),
    Row("_selftest_hang", _selftest_hang, 0.2, hidden=True),
)
ALIASES = {"lrp_explain": ("lrp_explain_512", "lrp_explain_2048", "lrp_explain_8192"),  # --only names for groups
           "neuzip_model": ("neuzip_forward", "neuzip_generate")}


def _sizes(smoke: bool) -> dict:
    if smoke:
        return {"scan": [(16, 8), (32, 8)], "tiles": [(2, 4)], "stages": [2, 1], "slow_repeats": 2,
                "decode": {"tiny_64x96": (64, 96)}, "chunk": 1024, "smoke_segment": 256,
                "layouts": lambda chunk: [(None, 4), (256, 4), (64, 2), (32, 1)],
                "llama": SMOKE_LLAMA, "tokens": 8, "prompt": 4, "new_tokens": 3, "generate_repeats": 2,
                "llama_label": "tiny Llama (SmolLM2-shaped, 2 layers, hidden 64)",
                "mamba": SMOKE_MAMBA, "mamba_lengths": [8, 16, 24], "mamba_cpu_at": 8, "mamba_profile_at": 16,
                "lrp_repeats": 2, "mamba_label": "tiny Mamba (2 layers, hidden 16)",
                "topk": {"tiny_matrix": (48, 40)}, "norm": (16, 96)}
    from kernels.selective_scan import TILES

    return {"scan": [(2048, 1536), (8192, 1536)], "tiles": list(TILES), "stages": [2, 1, 3], "slow_repeats": 2,
            "decode": {"1536x576": (1536, 576), "24576x576": (24576, 576)}, "chunk": None,
            "layouts": lambda chunk: [(None, 4), (2048, 4), (1024, 4), (512, 4), (256, 4), (256, 8)],
            "llama": SMOLLM2_135M, "tokens": 512, "prompt": 16, "new_tokens": 32, "generate_repeats": 3,
            "llama_label": "SmolLM2-135M config, random weights",
            "mamba": MAMBA_130M, "mamba_lengths": [512, 2048, 8192], "mamba_cpu_at": 512, "mamba_profile_at": 2048,
            "lrp_repeats": 5, "mamba_label": "mamba-130m config, random weights",
            "topk": {"mlp_1536x576": (1536, 576), "embed_49152x576": (49152, 576)}, "norm": (4096, 576)}


def _device(args):
    import torch

    return torch.device("cpu") if args.smoke else torch.device(args.device)


def run_row(row: Row, args, deadline: float, path: Path | None) -> dict:
    """Run ``row`` here until ``deadline``; its comparisons (the finished ones if it raises)."""
    device = _device(args)
    ctx = RowContext(deadline, path)
    timer = Timer(device, args.repeats, args.warmup, ctx)
    save = ctx.save
    name = "cpu (smoke)" if args.smoke else __import__("torch").cuda.get_device_name(device)
    ctx.save = lambda key, result: save(key, {**result, "device_name": name})
    try:
        row.fn(ctx, timer, device, _sizes(args.smoke))
    except Exception as exc:  # one broken row must not hide the others; the exit code says so
        import traceback

        ctx.save(f"{row.name}_error", {"error": f"{type(exc).__name__}: {exc}",
                                       "traceback": traceback.format_exc()[-3000:]})
    return ctx.results


def _child_args(args) -> list[str]:
    out = ["--device", args.device, "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    return out + (["--smoke"] if args.smoke else [])


_RUNNING: dict = {}  # the row process running now (stopped with this one: see main's SIGTERM handler)


def run_isolated(row: Row, args, limit: float) -> dict:
    """``row`` in its own process, killed (with its process group) at ``limit`` seconds; what it saved."""
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        path = Path(tmp) / "row.json"
        deadline = time.time() + max(1.0, limit - GRACE_S)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--row", row.name, "--row-out", str(path),
               "--deadline", f"{deadline:.3f}", *_child_args(args)]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
        _RUNNING["child"] = child
        killed = False
        try:
            code = child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = True
            os.killpg(child.pid, signal.SIGKILL)
            code = child.wait()
        finally:
            _RUNNING.pop("child", None)
        results = json.loads(path.read_text()) if path.exists() else {}
    if killed:
        results = results or {row.name: {}}
        for result in results.values():
            result.update(killed=True, limit_s=round(limit, 1))
    elif code != 0 and not any("error" in r for r in results.values()):
        results[f"{row.name}_error"] = {"error": f"the row's process exited with code {code}"}
    return results


def _wait_for(marker: str | None, until: float) -> bool:
    """Whether ``marker`` exists, waiting for it until ``until`` (``time.time()``); True without a marker."""
    if not marker:
        return True
    while not Path(marker).exists():
        if time.time() >= until:
            return False
        time.sleep(2)
    return True


# ---- the five targets -------------------------------------------------------------------------------------------
def _fmt(x, digits=3):
    return "-" if x is None else (f"{x:.{digits}g}" if isinstance(x, float) else str(x))


def targets(comparisons: dict) -> list[dict]:
    """The five targets of issue 34 from the comparisons, each beside its peer (``measured`` None: not measured)."""
    def get(name, *keys):
        value = comparisons.get(name)
        for k in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(k)
        return value

    mib = lambda b: None if b is None else b / 2**20  # noqa: E731
    out = []
    for key in sorted(k for k in comparisons if k.startswith("selective_scan_vs_mamba_ssm_L")):
        r = comparisons[key]
        out.append({"target": f"scan fwd+bwd vs mamba_ssm, L = {key.rsplit('L', 1)[1]}", "goal": "<= 1.0x",
                    "measured": get(key, "median_s", "triton"), "peer": get(key, "median_s", "mamba_ssm"),
                    "unit": "s", "ratio": r.get("ratio_triton_over_mamba_ssm"),
                    "met": r.get("target_at_most_1x_of_mamba_ssm"),
                    "note": "mamba_ssm does not import" if "mamba_ssm" in r else
                    "its selective_scan_cuda alone" if "directly" in r.get("mamba_ssm_used", "") else ""})
    if not any(k.startswith("selective_scan_vs_mamba_ssm_L") for k in comparisons):
        out.append({"target": "scan fwd+bwd vs mamba_ssm", "goal": "<= 1.0x", "measured": None, "peer": None,
                    "unit": "s", "ratio": None, "met": None, "note": ""})
    explains = {key.rsplit("_L", 1)[1]: row for key, row in comparisons.items()
                if key.startswith("lrp_explain_L") and isinstance(row, dict)}
    for length, row in sorted(explains.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        if "median_s" not in row:
            out.append({"target": f"explain / forward, {length} tokens", "goal": "<= 3x", "measured": None,
                        "peer": None, "unit": "s", "ratio": None, "met": None,
                        "note": "killed" if row.get("killed") else row.get("error", "")[:60]})
            continue
        peak = row.get("peak_bytes") or {}
        hf = row.get("forward_transformers_path") or {}
        out.append({"target": f"explain / forward, {length} tokens", "goal": "<= 3x",
                    "measured": row["median_s"]["explain"], "peer": row["median_s"]["forward"], "unit": "s",
                    "ratio": row["ratio_explain_over_forward"], "met": row["target_at_most_3x"],
                    "note": f"peak {_fmt(mib(peak.get('explain')))} / {_fmt(mib(peak.get('forward')))} MiB, "
                            f"recompute {'on' if row.get('recomputed_mixers') else 'off'}; transformers' forward "
                            f"({'fast kernels' if hf.get('fast') else 'PyTorch reference'}) "
                            f"{_fmt(row['median_s'].get('forward_transformers'))} s"})
    if not explains:
        out.append({"target": "explain / forward, 512 / 2048 / 8192 tokens", "goal": "<= 3x", "measured": None,
                    "peer": None, "unit": "s", "ratio": None, "met": None, "note": ""})
    for key in sorted(k for k in comparisons if k.startswith("neuzip_decode_")):
        r = comparisons[key]
        out.append({"target": f"NeuZip decode GB/s vs device copy, {key.split('_', 2)[2]}", "goal": ">= 0.25x",
                    "measured": get(key, "gbps_of_bf16_bytes", "app"), "peer": get(key, "gbps_of_bf16_bytes", "copy"),
                    "unit": "GB/s", "ratio": r.get("ratio_decode_over_copy_bandwidth"),
                    "met": r.get("target_at_least_0_25"),
                    "note": f"{get(key, 'shape', 'programs')} programs of segments of {get(key, 'shape', 'segment')}"
                            + (f"; unfused {_fmt(r['ratio_unfused_over_app_time'])}x the time"
                               if "ratio_unfused_over_app_time" in r else "")})
    if not any(k.startswith("neuzip_decode_") for k in comparisons):
        out.append({"target": "NeuZip decode GB/s vs device copy", "goal": ">= 0.25x", "measured": None,
                    "peer": None, "unit": "GB/s", "ratio": None, "met": None, "note": ""})
    r = comparisons.get("neuzip_forward", {})
    tokens = (r.get("shape") or {}).get("tokens", 512)
    out.append({"target": f"compressed forward vs bf16, {tokens} tokens", "goal": "<= 1.3x",
                "measured": get("neuzip_forward", "median_s", "compressed"), "peer": get("neuzip_forward", "median_s",
                                                                                         "bf16"),
                "unit": "s", "ratio": r.get("ratio_compressed_over_bf16"), "met": r.get("target_at_most_1_3x"),
                "note": f"unfused (3 kernels a linear) {_fmt(r.get('ratio_unfused_over_bf16'))}x" if r else ""})
    r = comparisons.get("neuzip_generate", {})
    tps = r.get("tokens_per_s") or {}
    best = max((v for k, v in tps.items() if k != "bf16"), default=None)
    out.append({"target": "batch-1 tokens/s, compressed (best) vs bf16", "goal": ">= 0.8x", "measured": best,
                "peer": tps.get("bf16"), "unit": "tokens/s", "ratio": r.get("ratio_best_compressed_over_bf16_tokens_per_s"),
                "met": r.get("target_at_least_0_8"),
                "note": f"decode {_fmt(tps.get('compressed'))}, fused GEMV {_fmt(tps.get('compressed_fused_gemv'))}"
                if tps else ""})
    return out


def target_table(rows: list[dict], device: str) -> str:
    lines = [f"The five targets on {device} (bench/gpu.py):", "",
             "| target | measured | peer | unit | ratio | goal | met | note |", "|---|---|---|---|---|---|---|---|"]
    for t in rows:
        met = "not measured" if t["measured"] is None else {True: "yes", False: "NO", None: "-"}[t["met"]]
        lines.append(f"| {t['target']} | {_fmt(t['measured'])} | {_fmt(t['peer'])} | {t['unit']} | "
                     f"{_fmt(t['ratio'])} | {t['goal']} | {met} | {t['note']} |")
    return "\n".join(lines)


# ---- main -------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU under TRITON_INTERPRET=1 (proves the script runs; timings meaningless)")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds for all rows (default 480)")
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
    args.repeats = args.repeats or (2 if args.smoke else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    by_name = {r.name: r for r in ROWS}
    if args.row:  # a child: one row, then exit
        import torch

        torch.set_num_threads(1 if args.smoke else torch.get_num_threads())
        deadline = args.deadline if args.deadline is not None else time.time() + args.budget
        run_row(by_name[args.row], args, deadline, Path(args.row_out) if args.row_out else None)
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
        child = _RUNNING.get("child")
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
            _log(f"{row.name}: waiting for {args.mamba_ready} (mamba_ssm build)")
            ready = _wait_for(args.mamba_ready, t_start + args.budget - MIN_ROW_S)
            left = args.budget - (time.time() - t_start)
            if not ready:
                report["rows"][row.name] = {"skipped": "mamba_ssm's build did not finish within the budget"}
                write()
                continue
        if left < MIN_ROW_S and not args.smoke:
            report["rows"][row.name] = {"skipped": f"{left:.0f} s of the budget left (a row needs {MIN_ROW_S})"}
            write()
            continue
        limit = left * row.weight / sum(r.weight for r in plan[i:])
        _log(f"{row.name} (share {limit:.0f} s of {left:.0f} s left)")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        t0 = time.time()
        if isolate:
            results = run_isolated(row, args, limit)
        else:
            results = run_row(row, args, time.time() + max(1.0, limit - GRACE_S), None)
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
