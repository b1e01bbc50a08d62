"""The MambaLRP selective scan's Triton kernel (the forward, and the relevance backward run from the end) and its
launch.

One program holds a ``(BLOCK_D, N)`` block of the state in registers and walks the sequence (the backward
from its end), so the ``(B, D, L, N)`` discretised tensors are never materialised. Triton is imported
lazily (decorating needs it, and importing it is slow), so importing this module never needs it.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

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
        BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        # forward (REVERSE=False): x = u, out = y, from the start
        #     h_t = A_bar_t h_{t-1} + (delta_t u_t) B_t,                  y_t = C_t . h_t (+ D u_t)
        # relevance backward (REVERSE=True): x = g, out = du, from the end
        #     lambda_t = A_bar_{t+1} lambda_{t+1} + g_t C_t,              du_t = delta_t (B_t . lambda_t) (+ D g_t)
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
        state = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)  # h, or lambda
        dA_next = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)  # A_bar_{t+1} (the backward)
        x_base = x_ptr + pid_b * stride_x_b + offs_d * stride_x_d
        dt_base = delta_ptr + pid_b * stride_delta_b + offs_d * stride_delta_d
        B_base = B_ptr + pid_b * stride_B_b + offs_n * stride_B_n
        C_base = C_ptr + pid_b * stride_C_b + offs_n * stride_C_n
        out_base = out_ptr + pid_b * stride_out_b + offs_d * stride_out_d
        for i in range(0, length):
            if REVERSE:
                t = length - 1 - i
            else:
                t = i
            x = tl.load(x_base + t * stride_x_l, mask=mask_d, other=0.0).to(tl.float32)
            dt = tl.load(dt_base + t * stride_delta_l, mask=mask_d, other=0.0).to(tl.float32)
            if HAS_DELTA_BIAS:
                dt = dt + db
            if DELTA_SOFTPLUS:
                dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt)
            Bt = tl.load(B_base + t * stride_B_l, mask=mask_n, other=0.0).to(tl.float32)
            Ct = tl.load(C_base + t * stride_C_l, mask=mask_n, other=0.0).to(tl.float32)
            if REVERSE:
                state = dA_next * state + x[:, None] * Ct[None, :]
                out = tl.sum(state * Bt[None, :], axis=1) * dt
                dA_next = tl.exp(dt[:, None] * A)
            else:
                dA = tl.exp(dt[:, None] * A)
                state = dA * state + (dt * x)[:, None] * Bt[None, :]
                out = tl.sum(state * Ct[None, :], axis=1)
            if HAS_D:
                out = out + Dv * x
            tl.store(out_base + t * stride_out_l, out.to(out_ptr.dtype.element_ty), mask=mask_d)

    return _selective_scan_lrp_kernel


def _launch(reverse, x, delta, A, B, C, D, delta_bias, delta_softplus, out):
    """One program per batch row and block of channels; ``reverse``: the relevance backward (x = g, out = du)."""
    batch, channels, length = x.shape
    state_size = A.shape[-1]
    import triton

    block_n = triton.next_power_of_2(state_size)
    block_d = max(1, min(triton.next_power_of_2(channels), max(16, 2048 // block_n), 64))
    grid = (batch, triton.cdiv(channels, block_d))
    _kernel()[grid](
        x, delta, A, B, C, D, delta_bias, out,
        channels, length, state_size,
        x.stride(0), x.stride(1), x.stride(2),
        delta.stride(0), delta.stride(1), delta.stride(2),
        A.stride(0), A.stride(1),
        B.stride(0), B.stride(1), B.stride(2),
        C.stride(0), C.stride(1), C.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        REVERSE=bool(reverse), DELTA_SOFTPLUS=bool(delta_softplus), BLOCK_D=block_d, BLOCK_N=block_n,
    )
    return out


class _SelectiveScanLRP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, delta_bias, delta_softplus):
        delta, A, B, C = delta.detach(), A.detach(), B.detach(), C.detach()
        D = None if D is None else D.detach().contiguous()
        delta_bias = None if delta_bias is None else delta_bias.detach().contiguous()
        y = torch.empty_like(u)
        _launch(False, u, delta, A, B, C, D, delta_bias, delta_softplus, y)
        ctx.save_for_backward(delta, A, B, C, D, delta_bias)
        ctx.delta_softplus = delta_softplus
        return y

    @staticmethod
    def backward(ctx, grad_y):
        delta, A, B, C, D, delta_bias = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        du = torch.empty_like(grad_y)
        _launch(True, grad_y, delta, A, B, C, D, delta_bias, ctx.delta_softplus, du)
        return du, None, None, None, None, None, None, None


def selective_scan_lrp_triton(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """Triton selective scan with A_bar, B_bar and C constant; same contract as the reference.

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (tests). The backward
    returns the gradient w.r.t. ``u`` only. ``y`` has the dtype of ``u``; the state is float32.
    """
    if u.dim() != 3 or B.dim() != 3 or C.dim() != 3:
        raise ValueError("selective_scan_lrp_triton expects u, delta: (B, D, L) and B, C: (B, N, L)")
    return _SelectiveScanLRP.apply(u, delta, A, B, C, D, delta_bias, bool(delta_softplus))
