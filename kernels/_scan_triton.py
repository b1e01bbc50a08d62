"""The MambaLRP selective scan's Triton kernel (the forward, and the relevance backward run from the end) and its
launch.

One program per (batch row, block of ``BLOCK_D`` channels) holds the ``(BLOCK_D, N)`` state in registers and
walks the sequence in chunks of ``CHUNK`` steps (the backward from its end): each chunk's inputs are loaded as
tiles, its steps ``h -> A_bar h + b`` composed by a parallel (associative) scan along the chunk, and the state
carried in from the previous chunk applied to them. The ``(B, D, L, N)`` discretised tensors are never
materialised, and the backward needs no forward state (MambaLRP holds ``A_bar``, ``B_bar``, ``C`` constant).
The chunk loop is software-pipelined (:data:`STAGES` = 2: the next chunk's tiles are fetched with ``cp.async`` into
shared memory while this chunk's scan runs), and on CUDA the tile is the fastest of :data:`TILES` (the tiles that
compile without spills) on that device, timed once per shape class (:func:`tuned_tile`).
Triton is imported lazily (decorating needs it, and importing it is slow), so importing this module never needs it.
"""
from __future__ import annotations

import functools
import os
import threading

import torch


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    global _affine  # a jitted function calls others through its module's globals

    @triton.jit
    def _affine(a1, b1, a2, b2):
        # two steps h -> a h + b composed (the first, then the second): the scan's associative operator
        return a1 * a2, a2 * b1 + b2

    @triton.heuristics({
        "HAS_D": lambda args: args["D_ptr"] is not None,
        "HAS_DELTA_BIAS": lambda args: args["delta_bias_ptr"] is not None,
    })
    @triton.jit
    def _selective_scan_lrp_kernel(
        x_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, delta_bias_ptr, out_ptr,
        n_channels, length, state_size,
        stride_x_b, stride_x_d, stride_x_l,
        stride_delta_b, stride_delta_d, stride_delta_l,
        stride_A_d, stride_A_n,
        stride_B_b, stride_B_n, stride_B_l,
        stride_C_b, stride_C_n, stride_C_l,
        stride_out_b, stride_out_d, stride_out_l,
        REVERSE: tl.constexpr, DELTA_SOFTPLUS: tl.constexpr, HAS_D: tl.constexpr, HAS_DELTA_BIAS: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, PIPELINE: tl.constexpr,
    ):
        # forward (REVERSE=False): x = u, out = y, chunks from the start
        #     h_t = A_bar_t h_{t-1} + (delta_t u_t) B_t,                  y_t = C_t . h_t (+ D u_t)
        # relevance backward (REVERSE=True): x = g, out = du, chunks from the end
        #     lambda_t = A_bar_{t+1} lambda_{t+1} + g_t C_t,              du_t = delta_t (B_t . lambda_t) (+ D g_t)
        # A chunk of CHUNK steps is loaded as (BLOCK_D, CHUNK) / (BLOCK_N, CHUNK) tiles; its (BLOCK_D, BLOCK_N, CHUNK)
        # steps h -> a h + b are composed by a parallel scan along the chunk, then applied to the state carried in
        # from the previous chunk (kept in registers). Nothing of size L x N is written to memory.
        pid_b = tl.program_id(0)
        pid_d = tl.program_id(1)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        offs_c = tl.arange(0, CHUNK)
        mask_d = offs_d < n_channels
        mask_n = offs_n < state_size
        A = tl.load(A_ptr + offs_d[:, None] * stride_A_d + offs_n[None, :] * stride_A_n,
                    mask=mask_d[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        if HAS_D:
            Dv = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        if HAS_DELTA_BIAS:
            db = tl.load(delta_bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        carry = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)  # h before the chunk, or lambda after it
        x_base = x_ptr + pid_b * stride_x_b + offs_d[:, None] * stride_x_d
        dt_base = delta_ptr + pid_b * stride_delta_b + offs_d[:, None] * stride_delta_d
        B_base = B_ptr + pid_b * stride_B_b + offs_n[:, None] * stride_B_n
        C_base = C_ptr + pid_b * stride_C_b + offs_n[:, None] * stride_C_n
        out_base = out_ptr + pid_b * stride_out_b + offs_d[:, None] * stride_out_d
        n_chunks = tl.cdiv(length, CHUNK)
        for i in tl.range(0, n_chunks, num_stages=PIPELINE):  # PIPELINE > 1: the next chunks' loads in flight
            if REVERSE:
                t = (n_chunks - 1 - i) * CHUNK + offs_c
            else:
                t = i * CHUNK + offs_c
            mask_t = t < length
            mask_dt = mask_d[:, None] & mask_t[None, :]
            mask_nt = mask_n[:, None] & mask_t[None, :]
            x = tl.load(x_base + t[None, :] * stride_x_l, mask=mask_dt, other=0.0).to(tl.float32)
            dt = tl.load(dt_base + t[None, :] * stride_delta_l, mask=mask_dt, other=0.0).to(tl.float32)
            if HAS_DELTA_BIAS:
                dt = dt + db[:, None]
            if DELTA_SOFTPLUS:
                dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt)
            if REVERSE:
                # step t of the reverse scan multiplies by A_bar_{t+1}: delta one step on (any value past the end:
                # it multiplies the zero lambda_L)
                dt_next = tl.load(dt_base + (t[None, :] + 1) * stride_delta_l,
                                  mask=mask_d[:, None] & (t[None, :] + 1 < length), other=0.0).to(tl.float32)
                if HAS_DELTA_BIAS:
                    dt_next = dt_next + db[:, None]
                if DELTA_SOFTPLUS:
                    dt_next = tl.where(dt_next <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt_next, 20.0))), dt_next)
                Ct = tl.load(C_base + t[None, :] * stride_C_l, mask=mask_nt, other=0.0).to(tl.float32)
                a = tl.exp(dt_next[:, None, :] * A[:, :, None])
                b = x[:, None, :] * Ct[None, :, :]
                pa, pb = tl.associative_scan((a, b), axis=2, combine_fn=_affine, reverse=True)
                state = pa * carry[:, :, None] + pb  # lambda_t, (BLOCK_D, BLOCK_N, CHUNK)
                Bt = tl.load(B_base + t[None, :] * stride_B_l, mask=mask_nt, other=0.0).to(tl.float32)
                out = tl.sum(state * Bt[None, :, :], axis=1) * dt
                carry = tl.sum(tl.where(offs_c[None, None, :] == 0, state, 0.0), axis=2)
            else:
                Bt = tl.load(B_base + t[None, :] * stride_B_l, mask=mask_nt, other=0.0).to(tl.float32)
                a = tl.exp(dt[:, None, :] * A[:, :, None])
                b = (dt * x)[:, None, :] * Bt[None, :, :]
                pa, pb = tl.associative_scan((a, b), axis=2, combine_fn=_affine)
                state = pa * carry[:, :, None] + pb  # h_t
                Ct = tl.load(C_base + t[None, :] * stride_C_l, mask=mask_nt, other=0.0).to(tl.float32)
                out = tl.sum(state * Ct[None, :, :], axis=1)
                carry = tl.sum(tl.where(offs_c[None, None, :] == CHUNK - 1, state, 0.0), axis=2)
            if HAS_D:
                out = out + Dv[:, None] * x
            tl.store(out_base + t[None, :] * stride_out_l, out.to(out_ptr.dtype.element_ty), mask=mask_dt)

    return _selective_scan_lrp_kernel


def scan_kernel():
    """The scan's Triton kernel (a ``triton.heuristics`` wrapper around the ``JITFunction``): for
    ``bench/aot_sm90.py``, which compiles it for sm_90 without a GPU."""
    return _kernel()


CHUNK = 32  # steps per chunk (the parallel scan's length)
# ---- set from the first GPU run (2026-11-27, H200; bench/gpu.py selective_scan times each tile and depth) ---------
TILE_ELEMENTS = 2048  # BLOCK_D x BLOCK_N x CHUNK: 4 x 16 x 32 at N = 16, the fastest tile at L = 2048 and 8192
# (0.78 / 2.55 ms; 8x32, the default before, 1.26x / 1.49x slower; 4x64 0.99x / 1.08x; 16x16 1.50x / 1.84x)
STAGES = 2  # software pipelining of the chunk loop (tl.range num_stages): 8x32 took 1.32x / 1.57x at 1 stage,
# 1.23x / 1.47x at 3 (within noise of 2)
WARPS = 4
# (BLOCK_D, CHUNK) tiles at N = 16 that compile for sm_90 without spills under Triton 3.6 and 3.9
# (bench/aot_sm90.py: at most 246 registers; 8x64, 16x32 and 2x128 spill); on CUDA the fastest is chosen per device,
# the first is the default where nothing was timed
TILES = ((4, 32), (8, 32), (16, 16), (4, 64))
AUTOTUNE = True  # on CUDA, time TILES once per device and shape class and keep the fastest
TILE_ENV = "LAYERWISE_SCAN_TILE"  # e.g. "4x32": this tile everywhere, no timing


def scan_config(channels: int, state_size: int, length: int, block_d: int | None = None,
                chunk: int | None = None) -> tuple[int, int, int]:
    """``(BLOCK_D, BLOCK_N, CHUNK)`` of a launch: powers of two; by default CHUNK steps (fewer for a shorter
    sequence) and as many channels as keep a tile at :data:`TILE_ELEMENTS` (4 x 16 x 32 at Mamba's N = 16). On
    CUDA the launch asks :func:`tuned_tile` first. ``bench/gpu.py`` times every tile of :data:`TILES`."""
    import triton

    block_n = triton.next_power_of_2(state_size)
    chunk = chunk or max(2, min(CHUNK, triton.next_power_of_2(length)))
    if block_d is None:
        block_d = max(2, min(triton.next_power_of_2(channels), TILE_ELEMENTS // (block_n * chunk)))
    for name, value in (("block_d", block_d), ("chunk", chunk)):
        if value < 2 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 2, got {value}")
    return block_d, block_n, chunk


_tuned: dict[tuple, tuple[int, int]] = {}
_tuning_lock = threading.Lock()


def _forced_tile() -> tuple[int, int] | None:
    value = os.environ.get(TILE_ENV, "").strip().lower()
    if not value:
        return None
    try:
        block_d, chunk = (int(v) for v in value.split("x"))
    except ValueError:
        raise ValueError(f"{TILE_ENV}={value!r}: write BLOCK_DxCHUNK, e.g. 4x32") from None
    return block_d, chunk


def tuned_tile(x: torch.Tensor, state_size: int) -> tuple[int, int] | None:
    """``(BLOCK_D, CHUNK)`` for a scan of ``x: (B, D, L)`` with ``state_size`` N: ``LAYERWISE_SCAN_TILE`` when set;
    on CUDA (with :data:`AUTOTUNE`) the fastest of :data:`TILES` for this device, batch, channels, N and length class
    (the next power of two of L up to 4096), timed once (forward and relevance backward on random inputs of that
    shape, CUDA events, median of 3 after one untimed call) and kept for the process; None elsewhere (the default
    of :func:`scan_config`). The timing syncs the host once per shape class, never per layer after that."""
    forced = _forced_tile()
    if forced is not None:
        return forced
    if not AUTOTUNE or not x.is_cuda or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return None
    batch, channels, length = x.shape
    if length < CHUNK:
        return None
    import triton

    key = (str(x.device), batch, channels, state_size, min(4096, triton.next_power_of_2(length)))
    tile = _tuned.get(key)
    if tile is None:
        with _tuning_lock:
            tile = _tuned.get(key) or _time_tiles(x.device, batch, channels, state_size, key[-1])
            _tuned[key] = tile
    return tile


def tuning_results() -> dict:
    """Every tile chosen so far: ``{(device, B, D, N, length class): (BLOCK_D, CHUNK)}``."""
    return dict(_tuned)


def _time_tiles(device, batch: int, channels: int, state: int, length: int) -> tuple[int, int]:
    g = torch.Generator(device="cpu").manual_seed(0)
    u = torch.randn(batch, channels, length, generator=g).to(device)
    delta = (0.5 * torch.randn(batch, channels, length, generator=g)).to(device)
    A = (-torch.rand(channels, state, generator=g) - 0.5).to(device)
    B, C = (torch.randn(batch, state, length, generator=g).to(device) for _ in range(2))
    D, bias = torch.randn(channels, generator=g).to(device), (0.1 * torch.randn(channels, generator=g)).to(device)
    out = torch.empty_like(u)
    times = {}
    with torch.no_grad():
        for tile in TILES:
            def run(tile=tile):
                _launch(False, u, delta, A, B, C, D, bias, True, out, tile)
                _launch(True, u, delta, A, B, C, D, bias, True, out, tile)
            try:
                run()  # compiles
            except Exception:  # a tile this device cannot run is not a candidate
                continue
            laps = []
            for _ in range(3):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                laps.append(start.elapsed_time(end))
            times[tile] = sorted(laps)[1]
    if not times:
        return TILES[0]
    return min(times, key=times.get)


def _launch(reverse, x, delta, A, B, C, D, delta_bias, delta_softplus, out, config):
    """One program per batch row and block of channels; ``reverse``: the relevance backward (x = g, out = du).
    ``config``: ``(block_d, chunk[, stages])``, None entries for the defaults (on CUDA: :func:`tuned_tile`)."""
    batch, channels, length = x.shape
    import triton

    block_d, chunk, stages = (tuple(config) + (None,))[:3]
    if block_d is None and chunk is None:
        block_d, chunk = tuned_tile(x, A.shape[-1]) or (None, None)
    stages = STAGES if stages is None else int(stages)
    block_d, block_n, chunk = scan_config(channels, A.shape[-1], length, block_d, chunk)
    grid = (batch, triton.cdiv(channels, block_d))
    _kernel()[grid](
        x, delta, A, B, C, D, delta_bias, out,
        channels, length, A.shape[-1],
        x.stride(0), x.stride(1), x.stride(2),
        delta.stride(0), delta.stride(1), delta.stride(2),
        A.stride(0), A.stride(1),
        B.stride(0), B.stride(1), B.stride(2),
        C.stride(0), C.stride(1), C.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        REVERSE=bool(reverse), DELTA_SOFTPLUS=bool(delta_softplus), BLOCK_D=block_d, BLOCK_N=block_n, CHUNK=chunk,
        PIPELINE=stages, num_warps=WARPS, num_stages=stages,
    )
    return out


class _SelectiveScanLRP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, delta_bias, delta_softplus, config):
        delta, A, B, C = delta.detach(), A.detach(), B.detach(), C.detach()
        D = None if D is None else D.detach().contiguous()
        delta_bias = None if delta_bias is None else delta_bias.detach().contiguous()
        y = torch.empty_like(u)
        _launch(False, u, delta, A, B, C, D, delta_bias, delta_softplus, y, config)
        ctx.save_for_backward(delta, A, B, C, D, delta_bias)
        ctx.delta_softplus, ctx.config = delta_softplus, config
        return y

    @staticmethod
    def backward(ctx, grad_y):
        delta, A, B, C, D, delta_bias = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        du = torch.empty_like(grad_y)
        _launch(True, grad_y, delta, A, B, C, D, delta_bias, ctx.delta_softplus, du, ctx.config)
        return du, None, None, None, None, None, None, None, None


def selective_scan_lrp_triton(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False, *, block_d=None,
                              chunk=None, stages=None):
    """Triton selective scan with A_bar, B_bar and C constant; same contract as the reference.

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (tests). The backward
    returns the gradient w.r.t. ``u`` only. ``y`` has the dtype of ``u``; the state is float32. ``block_d`` and
    ``chunk`` override the launch's tile (:func:`scan_config`; powers of two; by default the tile
    :func:`tuned_tile` chose for the device), ``stages`` its pipelining depth (:data:`STAGES`), for tuning.
    """
    if u.dim() != 3 or B.dim() != 3 or C.dim() != 3:
        raise ValueError("selective_scan_lrp_triton expects u, delta: (B, D, L) and B, C: (B, N, L)")
    return _SelectiveScanLRP.apply(u, delta, A, B, C, D, delta_bias, bool(delta_softplus), (block_d, chunk, stages))
