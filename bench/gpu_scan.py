"""``bench/gpu.py`` rows of the MambaLRP selective scan: its tiles and pipelining depths against its twin, and against
``mamba_ssm``'s ``selective_scan_fn`` forward + backward (the target: <= 1.0x)."""
from __future__ import annotations

from gpu_common import RowContext, Timer, agrees, check_kernels, max_abs, self_check_of


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
        errors = {name: max(max_abs(y, y_r), max_abs(du, du_r)) for name in tiles for y, du in [contestants[name]()]}
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
               "self_check": self_check_of(checks, "selective_scan_lrp"), "median_s": medians,
               "rounds": timer.rounds, "cut_by_deadline": timer.cut,
               "peak_bytes": {"triton": timer.peak_bytes(default)}}
        if with_twin:
            out.update(ratio_triton_over_ref_twin=medians["triton"] / medians["ref_twin"],
                       max_abs_err_vs_twin=max(max_abs(y_k, y_r), max_abs(du_k, du_r)),
                       agrees_with_twin=agrees((y_k, du_k), (y_r, du_r)),
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
               "self_check": self_check_of(checks, "selective_scan_lrp")}
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
                   max_abs_err_y_mamba_ssm_vs_twin=max_abs(y_m, y_r), max_abs_err_vs_twin=max_abs(y_k, y_r),
                   agrees_with_twin=agrees(y_k, y_r),
                   peak_bytes={name: timer.peak_bytes(f) for name, f in contestants.items()},
                   notes=["mamba_ssm's backward computes the gradients of every input (the ordinary rule); the "
                          "MambaLRP backward needs only the gradient w.r.t. u (A_bar, B_bar, C constant)"])
        ctx.save(f"selective_scan_vs_mamba_ssm_L{length}", out)
