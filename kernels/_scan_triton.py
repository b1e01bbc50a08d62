"""The MambaLRP selective scan's Triton kernels (forward and relevance backward) and their launch.

One program holds a ``(BLOCK_D, N)`` block of the state in registers and walks the sequence (the backward
from its end), so the ``(B, D, L, N)`` discretised tensors are never materialised. Triton is imported
lazily (decorating needs it, and importing it is slow), so importing this module never needs it.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.heuristics({
        "HAS_D": lambda args: args["D_ptr"] is not None,
        "HAS_DELTA_BIAS": lambda args: args["delta_bias_ptr"] is not None,
    })
    @triton.jit
    def _selective_scan_lrp_fwd_kernel(
        u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, delta_bias_ptr, y_ptr,
        n_channels, length, state_size,
        stride_u_b, stride_u_d, stride_u_l,
        stride_delta_b, stride_delta_d, stride_delta_l,
        stride_A_d, stride_A_n,
        stride_B_b, stride_B_n, stride_B_l,
        stride_C_b, stride_C_n, stride_C_l,
        stride_y_b, stride_y_d, stride_y_l,
        DELTA_SOFTPLUS: tl.constexpr, HAS_D: tl.constexpr, HAS_DELTA_BIAS: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_d = tl.program_id(1)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        mask_d = offs_d < n_channels
        mask_n = offs_n < state_size
        A = tl.load(A_ptr + offs_d[:, None] * stride_A_d + offs_n[None, :] * stride_A_n,
                    mask=mask_d[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        if HAS_D:
            Dv = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        if HAS_DELTA_BIAS:
            db = tl.load(delta_bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        h = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        u_base = u_ptr + pid_b * stride_u_b + offs_d * stride_u_d
        dt_base = delta_ptr + pid_b * stride_delta_b + offs_d * stride_delta_d
        B_base = B_ptr + pid_b * stride_B_b + offs_n * stride_B_n
        C_base = C_ptr + pid_b * stride_C_b + offs_n * stride_C_n
        y_base = y_ptr + pid_b * stride_y_b + offs_d * stride_y_d
        for t in range(0, length):
            u = tl.load(u_base + t * stride_u_l, mask=mask_d, other=0.0).to(tl.float32)
            dt = tl.load(dt_base + t * stride_delta_l, mask=mask_d, other=0.0).to(tl.float32)
            if HAS_DELTA_BIAS:
                dt = dt + db
            if DELTA_SOFTPLUS:
                dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt)
            Bt = tl.load(B_base + t * stride_B_l, mask=mask_n, other=0.0).to(tl.float32)
            Ct = tl.load(C_base + t * stride_C_l, mask=mask_n, other=0.0).to(tl.float32)
            dA = tl.exp(dt[:, None] * A)
            h = dA * h + (dt * u)[:, None] * Bt[None, :]
            y = tl.sum(h * Ct[None, :], axis=1)
            if HAS_D:
                y = y + Dv * u
            tl.store(y_base + t * stride_y_l, y.to(y_ptr.dtype.element_ty), mask=mask_d)

    @triton.heuristics({
        "HAS_D": lambda args: args["D_ptr"] is not None,
        "HAS_DELTA_BIAS": lambda args: args["delta_bias_ptr"] is not None,
    })
    @triton.jit
    def _selective_scan_lrp_bwd_kernel(
        g_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, delta_bias_ptr, du_ptr,
        n_channels, length, state_size,
        stride_g_b, stride_g_d, stride_g_l,
        stride_delta_b, stride_delta_d, stride_delta_l,
        stride_A_d, stride_A_n,
        stride_B_b, stride_B_n, stride_B_l,
        stride_C_b, stride_C_n, stride_C_l,
        stride_du_b, stride_du_d, stride_du_l,
        DELTA_SOFTPLUS: tl.constexpr, HAS_D: tl.constexpr, HAS_DELTA_BIAS: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_d = tl.program_id(1)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        mask_d = offs_d < n_channels
        mask_n = offs_n < state_size
        A = tl.load(A_ptr + offs_d[:, None] * stride_A_d + offs_n[None, :] * stride_A_n,
                    mask=mask_d[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        if HAS_D:
            Dv = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        if HAS_DELTA_BIAS:
            db = tl.load(delta_bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        lam = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        dA_next = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        g_base = g_ptr + pid_b * stride_g_b + offs_d * stride_g_d
        dt_base = delta_ptr + pid_b * stride_delta_b + offs_d * stride_delta_d
        B_base = B_ptr + pid_b * stride_B_b + offs_n * stride_B_n
        C_base = C_ptr + pid_b * stride_C_b + offs_n * stride_C_n
        du_base = du_ptr + pid_b * stride_du_b + offs_d * stride_du_d
        for i in range(0, length):
            t = length - 1 - i
            g = tl.load(g_base + t * stride_g_l, mask=mask_d, other=0.0).to(tl.float32)
            dt = tl.load(dt_base + t * stride_delta_l, mask=mask_d, other=0.0).to(tl.float32)
            if HAS_DELTA_BIAS:
                dt = dt + db
            if DELTA_SOFTPLUS:
                dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt)
            Bt = tl.load(B_base + t * stride_B_l, mask=mask_n, other=0.0).to(tl.float32)
            Ct = tl.load(C_base + t * stride_C_l, mask=mask_n, other=0.0).to(tl.float32)
            lam = dA_next * lam + g[:, None] * Ct[None, :]
            du = tl.sum(lam * Bt[None, :], axis=1) * dt
            if HAS_D:
                du = du + Dv * g
            tl.store(du_base + t * stride_du_l, du.to(du_ptr.dtype.element_ty), mask=mask_d)
            dA_next = tl.exp(dt[:, None] * A)

    return _selective_scan_lrp_fwd_kernel, _selective_scan_lrp_bwd_kernel


def _launch(kernel, first, delta, A, B, C, D, delta_bias, delta_softplus, out):
    batch, channels, length = first.shape
    state_size = A.shape[-1]
    import triton

    block_n = triton.next_power_of_2(state_size)
    block_d = max(1, min(triton.next_power_of_2(channels), max(16, 2048 // block_n), 64))
    grid = (batch, triton.cdiv(channels, block_d))
    kernel[grid](
        first, delta, A, B, C, D, delta_bias, out,
        channels, length, state_size,
        first.stride(0), first.stride(1), first.stride(2),
        delta.stride(0), delta.stride(1), delta.stride(2),
        A.stride(0), A.stride(1),
        B.stride(0), B.stride(1), B.stride(2),
        C.stride(0), C.stride(1), C.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        DELTA_SOFTPLUS=bool(delta_softplus), BLOCK_D=block_d, BLOCK_N=block_n,
    )
    return out


class _SelectiveScanLRP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, delta_bias, delta_softplus):
        fwd, _ = _kernels()
        delta, A, B, C = delta.detach(), A.detach(), B.detach(), C.detach()
        D = None if D is None else D.detach().contiguous()
        delta_bias = None if delta_bias is None else delta_bias.detach().contiguous()
        y = torch.empty_like(u)
        _launch(fwd, u, delta, A, B, C, D, delta_bias, delta_softplus, y)
        ctx.save_for_backward(delta, A, B, C, D, delta_bias)
        ctx.delta_softplus = delta_softplus
        return y

    @staticmethod
    def backward(ctx, grad_y):
        _, bwd = _kernels()
        delta, A, B, C, D, delta_bias = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        du = torch.empty_like(grad_y)
        _launch(bwd, grad_y, delta, A, B, C, D, delta_bias, ctx.delta_softplus, du)
        return du, None, None, None, None, None, None, None


def selective_scan_lrp_triton(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """Triton selective scan with A_bar, B_bar and C constant; same contract as the reference.

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (tests). The backward
    returns the gradient w.r.t. ``u`` only. ``y`` has the dtype of ``u``; the state is float32.
    """
    if u.dim() != 3 or B.dim() != 3 or C.dim() != 3:
        raise ValueError("selective_scan_lrp_triton expects u, delta: (B, D, L) and B, C: (B, N, L)")
    return _SelectiveScanLRP.apply(u, delta, A, B, C, D, delta_bias, bool(delta_softplus))
