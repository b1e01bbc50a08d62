"""Fused residual-add + RMSNorm, forward and backward, beside its plain-PyTorch twin.

    s = x + residual_scale * residual        (s = x when residual is None)
    y = s / sqrt(mean(s^2, -1) + eps) * weight

Both ``y`` and ``s`` are returned: Pre-LN needs ``s`` as the new residual stream and ``y`` as the next
branch's input; Post-LN and DeepNorm (``residual_scale = (2L)^(1/4)``) use only ``y``. Statistics are
computed in float32 for float32 and narrower inputs and in float64 for float64 ones (:func:`stats_dtype`: a float64
run is float64 end to end, its rounding the same on any CPU); ``y`` and ``s`` come back in the dtype
``x + residual`` would have (so a bfloat16 branch output added to a float32 residual stream under autocast stays
float32). Float64 always takes the reference (the Triton kernels compute in float32).

- :func:`add_rmsnorm_ref`    plain PyTorch (autograd does the backward)
- :func:`add_rmsnorm_triton` the Triton kernels behind a ``torch.autograd.Function``
- :func:`add_rmsnorm`        picks one with :func:`kernels.dispatch.use_triton` (Triton only on CUDA)
"""
from __future__ import annotations

import torch

from kernels.dispatch import KernelCheck, register_check, triton_available, use_triton

triton = tl = None
if triton_available():  # imported only where its kernels can run (CPU-only hosts use the reference: no libtriton)
    import triton
    import triton.language as tl


# ---- reference -------------------------------------------------------------------------------------

def add_rmsnorm_ref(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
                    residual_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: (..., N); weight: (N,). Returns (y, s), both (..., N) in the dtype of ``x + residual``."""
    acc = stats_dtype(_out_dtype(x, residual))
    if residual is None:
        sa, s = x.to(acc), x
    else:
        r = residual.to(acc) if residual_scale == 1.0 else residual.to(acc) * residual_scale
        sa = x.to(acc) + r
        s = sa.to(_out_dtype(x, residual))
    y = sa * torch.rsqrt(sa.pow(2).mean(-1, keepdim=True) + eps) * weight.to(acc)
    return y.to(s.dtype), s


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the statistics are computed in: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def _out_dtype(x: torch.Tensor, residual: torch.Tensor | None) -> torch.dtype:
    return x.dtype if residual is None else torch.promote_types(x.dtype, residual.dtype)


# ---- Triton kernels --------------------------------------------------------------------------------

if triton is not None:

    @triton.heuristics({"HAS_RESIDUAL": lambda args: args["R"] is not None})
    @triton.jit
    def _add_rmsnorm_fwd_kernel(X, R, W, Y, S, RSTD, stride_x, stride_r, stride_y, stride_s, N, eps, residual_scale,
                                HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr):
        # one program per row
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        s = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            r = tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
            s = s + residual_scale * r
            tl.store(S + row * stride_s + cols, s.to(S.dtype.element_ty), mask=mask)
        rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / N + eps)
        tl.store(RSTD + row, rstd)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (s * rstd * w).to(Y.dtype.element_ty), mask=mask)

    @triton.heuristics({"HAS_DS_OUT": lambda args: args["DS_OUT"] is not None})
    @triton.jit
    def _add_rmsnorm_bwd_kernel(X, R, W, DY, DS_OUT, DS, DW_PARTIAL, RSTD, stride_x, stride_r, stride_dy,
                                stride_dso, stride_ds, M, N, residual_scale, rows_per_program,
                                HAS_RESIDUAL: tl.constexpr, HAS_DS_OUT: tl.constexpr, BLOCK_N: tl.constexpr):
        # each program walks a block of rows and keeps its partial sum of dweight in registers;
        # s is recomputed from x and residual in float32 exactly as in the forward
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
        row_start = pid * rows_per_program
        row_end = tl.minimum(row_start + rows_per_program, M)
        for row in range(row_start, row_end):
            s = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                s = s + residual_scale * tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + row)
            xhat = s * rstd
            dw += dy * xhat
            wdy = dy * w
            c = tl.sum(xhat * wdy, axis=0) / N
            ds = (wdy - xhat * c) * rstd
            if HAS_DS_OUT:
                ds += tl.load(DS_OUT + row * stride_dso + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(DS + row * stride_ds + cols, ds, mask=mask)
        tl.store(DW_PARTIAL + pid * N + cols, dw, mask=mask)


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    t = t.reshape(-1, n)
    return t if t.stride(-1) == 1 else t.contiguous()


def _block_n(n: int, element_size: int) -> int:
    block = triton.next_power_of_2(n)
    if block > 65536 // element_size:
        raise ValueError(f"add_rmsnorm: feature size {n} is too large for one Triton block")
    return block


def _num_warps(block_n: int) -> int:
    return min(max(block_n // 256, 1), 8)


def add_rmsnorm_fwd(x, residual, weight, eps, residual_scale):
    """Triton forward on 2-D rows. Returns (y, s, rstd): y, s (M, N) in the dtype of x + residual (s is x
    when there is no residual), rstd (M,) float32."""
    m, n = x.shape
    dtype = _out_dtype(x, residual)
    y = torch.empty((m, n), dtype=dtype, device=x.device)
    s = torch.empty((m, n), dtype=dtype, device=x.device) if residual is not None else x
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    block = _block_n(n, x.element_size())
    _add_rmsnorm_fwd_kernel[(m,)](
        x, residual, weight, y, s, rstd, x.stride(0), residual.stride(0) if residual is not None else 0,
        y.stride(0), s.stride(0), n, eps, residual_scale, BLOCK_N=block, num_warps=_num_warps(block))
    return y, s, rstd


def add_rmsnorm_bwd(dy, ds_out, x, residual, weight, rstd, residual_scale):
    """Triton backward on 2-D rows. Returns (ds, dweight): ds (M, N) float32 = dL/dx, dweight (N,) float32."""
    m, n = x.shape
    ds = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if x.is_cuda:
        programs = torch.cuda.get_device_properties(x.device).multi_processor_count * 2
    else:  # the interpreter runs programs one after another: few programs, long row loops
        programs = 4
    programs = max(1, min(programs, m))
    rows_per_program = triton.cdiv(m, programs)
    dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    block = _block_n(n, x.element_size())
    _add_rmsnorm_bwd_kernel[(programs,)](
        x, residual, weight, dy, ds_out, ds, dw_partial, rstd, x.stride(0),
        residual.stride(0) if residual is not None else 0, dy.stride(0),
        ds_out.stride(0) if ds_out is not None else 0, ds.stride(0), m, n, residual_scale, rows_per_program,
        HAS_RESIDUAL=residual is not None, BLOCK_N=block, num_warps=_num_warps(block))
    return ds, dw_partial.sum(0)


class _AddRMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, residual_scale):
        shape, n = x.shape, x.shape[-1]
        x2 = _rows(x, n)
        r2 = _rows(residual, n) if residual is not None else None
        w = weight if weight.is_contiguous() else weight.contiguous()
        y, s, rstd = add_rmsnorm_fwd(x2, r2, w, eps, residual_scale)
        ctx.save_for_backward(x2, r2, w, rstd)
        ctx.set_materialize_grads(False)  # an unused s (Post-LN) arrives as None: no zero tensor is read
        ctx.residual_scale = residual_scale
        ctx.shape = shape
        ctx.dtypes = (x.dtype, residual.dtype if residual is not None else None, weight.dtype)
        if residual is None:
            return y.reshape(shape)
        return y.reshape(shape), s.reshape(shape)

    @staticmethod
    def backward(ctx, dy, ds_out=None):
        x2, r2, w, rstd = ctx.saved_tensors
        n = x2.shape[-1]
        dy2 = _rows(dy, n) if dy is not None else torch.zeros_like(x2)
        dso2 = _rows(ds_out, n) if ds_out is not None else None
        ds, dw = add_rmsnorm_bwd(dy2, dso2, x2, r2, w, rstd, ctx.residual_scale)
        x_dtype, r_dtype, w_dtype = ctx.dtypes
        dx = ds.to(x_dtype).reshape(ctx.shape)
        dr = (ds * ctx.residual_scale).to(r_dtype).reshape(ctx.shape) if r2 is not None else None
        return dx, dr, dw.to(w_dtype), None, None


def add_rmsnorm_triton(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
                       residual_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as :func:`add_rmsnorm_ref`, through the Triton kernels (CUDA, or CPU under
    ``TRITON_INTERPRET=1``). Differentiable in x, residual and weight."""
    if triton is None:
        raise RuntimeError("add_rmsnorm_triton needs triton; use add_rmsnorm_ref")
    if residual is None:
        return _AddRMSNormFn.apply(x, None, weight, float(eps), float(residual_scale)), x
    return _AddRMSNormFn.apply(x, residual, weight, float(eps), float(residual_scale))


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
                residual_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual-add + RMSNorm: Triton on CUDA tensors, the reference elsewhere. Returns (y, s)."""
    tensors = (x, weight) if residual is None else (x, residual, weight)
    if _out_dtype(x, residual) != torch.float64 and use_triton(*tensors, kernel="add_rmsnorm"):
        return add_rmsnorm_triton(x, residual, weight, eps, residual_scale)
    return add_rmsnorm_ref(x, residual, weight, eps, residual_scale)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Plain RMSNorm through the dispatching op. x: (..., N) -> (..., N)."""
    return add_rmsnorm(x, None, weight, eps)[0]


def _check_inputs(device, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 96, generator=g)
    residual = torch.randn(2, 5, 96, generator=g)
    weight = 1 + 0.1 * torch.randn(96, generator=g)
    dy = torch.randn(2, 5, 96, generator=g)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, residual, weight, dy))


def _check_run(fn, args):
    """Forward (y, s) and the gradients of ``<y, dy> + <s, dy>`` w.r.t. x, residual and weight."""
    x, residual, weight, dy = (t.detach().clone().requires_grad_(t is not args[3]) for t in args)
    y, s = fn(x, residual, weight, 1e-6, 0.5)
    torch.autograd.backward((y, s), (dy, dy))
    return y.detach(), s.detach(), x.grad, residual.grad, weight.grad


register_check("add_rmsnorm", KernelCheck(triton=add_rmsnorm_triton, ref=add_rmsnorm_ref, inputs=_check_inputs,
                                          run=_check_run, dtypes=(torch.float32, torch.bfloat16, torch.float16)))
