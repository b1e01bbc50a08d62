"""Selective scan with the MambaLRP treatment: linear in ``u``, everything else a constant.

The Mamba-1 selective scan (``u: (B, D, L)``, state size ``N``) computes, per channel ``d``,

    h_t = exp(delta_t * A) * h_{t-1} + (delta_t * B_t) * u_t        h: (N,)
    y_t = C_t . h_t + D * u_t

MambaLRP treats the discretised ``A_bar = exp(delta * A)``, ``B_bar = delta * B`` and ``C`` as
constants, so ``y`` is a linear function of ``u`` and the backward pass needs only

    lambda_s = C_s * g_s + A_bar_{s+1} * lambda_{s+1}                (reverse scan)
    du_s     = B_bar_s . lambda_s + D * g_s

Four callables with one signature (``u, delta, A, B, C, D=None, delta_bias=None,
delta_softplus=False``), following state-spaces/mamba's ``selective_scan_fn`` / ``selective_scan_ref``:

* :func:`selective_scan_lrp_triton` -- Triton forward and backward; keeps the ``(BLOCK_D, N)`` state in
  registers and never materialises the ``(B, D, L, N)`` discretised tensors.
* :func:`selective_scan_lrp_ref` -- plain PyTorch twin (autograd through ``u`` only); it performs the
  same operations in the same order as transformers' ``MambaMixer`` so the values are bit-identical. It
  materialises ``(B, D, L, N)`` tensors and autograd records L steps, so it is the tests' oracle only.
* :func:`selective_scan_lrp_chunked` -- the kernel's algorithm in PyTorch for the CPU: blocks of the sequence
  with the state carried between them, the backward the same hand-written reverse scan; memory
  ``O(B D L + chunk B D N)``, values equal to the reference's.
* :func:`selective_scan_lrp` -- the public op: the kernel on CUDA, the chunked path elsewhere.

:func:`selective_scan_ref` is the ordinary (fully differentiable) scan, used when the MambaLRP rule is
switched off; :func:`selective_scan_chunked` computes the same in blocks with a hand-written backward, behind
:func:`selective_scan` (blocks bounded in memory) and :func:`selective_scan_train` (one block, its states kept
for the backward: training on CPU).
Triton is imported lazily, so importing this module never needs it.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kernels.dispatch import KernelCheck, register_check, use_triton

__all__ = [
    "selective_scan",
    "selective_scan_chunked",
    "selective_scan_lrp",
    "selective_scan_lrp_chunked",
    "selective_scan_lrp_ref",
    "selective_scan_lrp_triton",
    "selective_scan_ref",
    "selective_scan_train",
]


# ----------------------------------------------------------------------------------------------
# PyTorch reference twins
# ----------------------------------------------------------------------------------------------
def _scan_ref(u, delta, A, B, C, D, delta_bias, delta_softplus, constants: bool):
    """Shared body of the references; ``constants`` detaches A_bar, B_bar and C (the MambaLRP rule)."""
    batch, channels, length = u.shape
    input_dtype = u.dtype
    if delta_bias is not None:
        delta = delta + delta_bias.to(delta.dtype)[..., None]
    if delta_softplus:
        delta = F.softplus(delta)
    Bt = B.transpose(1, 2)  # (B, L, N)
    Ct = C.transpose(1, 2)  # (B, L, N)
    discrete_A = torch.exp(A[None, :, None, :] * delta[:, :, :, None])  # (B, D, L, N)
    discrete_B = delta[:, :, :, None] * Bt[:, None, :, :].float()  # (B, D, L, N)
    if constants:
        discrete_A, discrete_B, Ct = discrete_A.detach(), discrete_B.detach(), Ct.detach()
    deltaB_u = discrete_B * u[:, :, :, None].float()
    state = torch.zeros(batch, channels, A.shape[-1], dtype=input_dtype, device=u.device)
    outs = []
    for t in range(length):
        state = discrete_A[:, :, t] * state + deltaB_u[:, :, t]
        outs.append(torch.matmul(state.to(input_dtype), Ct[:, t, :].unsqueeze(-1))[:, :, 0])
    y = torch.stack(outs, dim=-1)
    if D is not None:
        y = y + u * (D.detach() if constants else D)[None, :, None]
    return y


def selective_scan_lrp_ref(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """Reference selective scan with A_bar, B_bar and C constant (gradient flows to ``u`` only).

    Parameters
    ----------
    u : (B, D, L) input of the scan (the SiLU'd conv output in Mamba).
    delta : (B, D, L) time steps, before ``delta_bias`` / softplus when those are given.
    A : (D, N) continuous state matrix (negative entries).
    B, C : (B, N, L) input-dependent projections.
    D : (D,) or None, skip weight.
    delta_bias : (D,) or None, added to ``delta`` before the softplus.
    delta_softplus : apply ``softplus`` to ``delta``.

    Returns
    -------
    y : (B, D, L), float32 for float32 inputs.
    """
    return _scan_ref(u, delta, A, B, C, D, delta_bias, delta_softplus, constants=True)


def selective_scan_ref(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """Ordinary selective scan, differentiable w.r.t. every input (same shapes as the LRP variant)."""
    return _scan_ref(u, delta, A, B, C, D, delta_bias, delta_softplus, constants=False)


# ----------------------------------------------------------------------------------------------
# Triton kernels (built lazily: decorating needs triton, and importing it is slow)
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# Chunked PyTorch path (CPU): the Triton kernel's algorithm with the state carried between blocks
# ----------------------------------------------------------------------------------------------
CHUNK_ELEMENTS = 1 << 22  # (T, B, D, N) elements of one block's discretised tensors (16 MiB in float32)


def _chunk_length(batch: int, channels: int, state_size: int, length: int, chunk: int | None) -> int:
    """Time steps per block: ``chunk`` if given, else as many as fit ``CHUNK_ELEMENTS`` (at least 1)."""
    if chunk is None:
        chunk = CHUNK_ELEMENTS // max(1, batch * channels * state_size)
    return max(1, min(int(chunk), length))


def _work_dtype(u: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, else float32 (the state and the arithmetic of the chunked path)."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


def _time_major(u, delta, B, C, delta_bias, delta_softplus):
    """``(B, D, L)`` / ``(B, N, L)`` inputs -> time-major ``(L, B, D)`` / ``(L, B, N)`` copies in the work dtype.

    ``delta`` gets its bias and softplus here, with the same operations as the reference.
    """
    delta = delta.detach()
    if delta_bias is not None:
        delta = delta + delta_bias.detach().to(delta.dtype)[..., None]
    if delta_softplus:
        delta = F.softplus(delta)
    work = _work_dtype(u)
    as_tm = lambda t: t.detach().to(work).permute(2, 0, 1).contiguous()  # noqa: E731
    return as_tm(u), as_tm(delta), as_tm(B), as_tm(C)


def _discretise(delta_t, A, u_t, B_t, t0, n, dA_out, h_out):
    """Block ``[t0, t0 + n)``: ``A_bar = exp(delta A)`` and ``B_bar u = (delta B) u`` into the ``(n, B, D, N)``
    buffers ``dA_out`` and ``h_out`` (the reference's operations, in its order)."""
    dt = delta_t[t0:t0 + n, :, :, None]  # (T, B, D, 1)
    dA = torch.mul(A, dt, out=dA_out).exp_()
    h = torch.mul(dt, B_t[t0:t0 + n, :, None, :], out=h_out).mul_(u_t[t0:t0 + n, :, :, None])
    return dA, h


def _recur(dA, h, start, scratch):
    """In place, ``h[i] = dA[i] * h[i-1] + h[i]`` over a block (``h[-1]`` is ``start``; None means zero): the
    reference's multiply, then add, so the same roundings. ``dA, h: (T, B, D, N)``."""
    for i in range(h.shape[0]):
        if i or start is not None:
            torch.mul(dA[i], h[i - 1] if i else start, out=scratch)
            h[i].add_(scratch)


def _scan_chunked_forward(u_t, delta_t, A, B_t, C_t, chunk, starts=None):
    """``y_t = C_t . h_t`` with ``h_t = exp(delta_t A) h_{t-1} + (delta_t B_t) u_t``, one block at a time.

    ``u_t, delta_t: (L, B, D)``, ``A: (D, N)``, ``B_t, C_t: (L, B, N)`` -> ``(L, B, D)``. Each block's outputs are one
    batched product with ``C``; with the reference's step operations the values equal its own bit for bit on CPU.
    Two ``(chunk, B, D, N)`` buffers serve every block. ``starts``, if given, ``(n_blocks, B, D, N)``, receives the
    state entering each block (zero for the first). Returns ``y_t`` and the last block's ``A_bar`` and states (the
    whole sequence's when one block covers it).
    """
    length, batch, channels = u_t.shape
    dA_buf = u_t.new_empty(chunk, batch, channels, A.shape[-1])
    h_buf = torch.empty_like(dA_buf)
    state = torch.zeros_like(dA_buf[0])  # h at the end of the previous block
    scratch = torch.empty_like(state)
    y_t = torch.empty_like(u_t)
    for k, t0 in enumerate(range(0, length, chunk)):
        n = min(chunk, length - t0)
        if starts is not None:
            starts[k] = state
        dA, h = _discretise(delta_t, A, u_t, B_t, t0, n, dA_buf[:n], h_buf[:n])
        _recur(dA, h, state if t0 else None, scratch)
        state.copy_(h[n - 1])
        y_t[t0:t0 + n] = torch.einsum("tbdn,tbn->tbd", h, C_t[t0:t0 + n])
    return y_t, dA_buf, h_buf


def _reverse_recur(dA, lam, carry, scratch):
    """In place, ``lam[i] += dA[i+1] * lam[i+1]`` from the block's end (``lam[-1] += carry``, the later blocks'
    ``A_bar_{s+1} lambda_{s+1}``); then ``carry = dA[0] * lam[0]`` for the block before."""
    lam[-1].add_(carry)
    for i in range(lam.shape[0] - 2, -1, -1):
        torch.mul(dA[i + 1], lam[i + 1], out=scratch)
        lam[i].add_(scratch)
    torch.mul(dA[0], lam[0], out=carry)


def _scan_chunked_backward(g_t, delta_t, A, B_t, C_t, chunk):
    """Gradient w.r.t. ``u`` of the scan with ``A_bar, B_bar, C`` constant (the Triton backward's recurrence).

    ``lambda_s = C_s g_s + A_bar_{s+1} lambda_{s+1}``, ``du_s = delta_s (B_s . lambda_s)``, run from the last block
    to the first with ``A_bar_{s+1} lambda_{s+1}`` carried across block boundaries. ``g_t: (L, B, D)`` -> ``(L, B, D)``.
    """
    length, batch, channels = g_t.shape
    dA_buf = g_t.new_empty(chunk, batch, channels, A.shape[-1])
    lam_buf = torch.empty_like(dA_buf)
    carry = torch.zeros_like(dA_buf[0])
    scratch = torch.empty_like(carry)
    du_t = torch.empty_like(g_t)
    for t0 in reversed(range(0, length, chunk)):
        n = min(chunk, length - t0)
        dt = delta_t[t0:t0 + n]
        dA = torch.mul(A, dt[..., None], out=dA_buf[:n]).exp_()
        lam = torch.mul(g_t[t0:t0 + n, :, :, None], C_t[t0:t0 + n, :, None, :], out=lam_buf[:n])  # C_s g_s
        _reverse_recur(dA, lam, carry, scratch)
        du_t[t0:t0 + n] = torch.einsum("tbdn,tbn->tbd", lam, B_t[t0:t0 + n]).mul_(dt)
    return du_t


class _SelectiveScanLRPChunked(torch.autograd.Function):
    """MambaLRP scan on any device without ``(B, D, L, N)`` tensors: blocks of ``chunk`` steps, state carried.

    Saves ``delta`` (after bias and softplus), ``B``, ``C`` time-major; the backward recomputes each block's
    ``A_bar``. Gradient for ``u`` only.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, delta_bias, delta_softplus, chunk):
        batch, channels, length = u.shape
        u_t, delta_t, B_t, C_t = _time_major(u, delta, B, C, delta_bias, delta_softplus)
        A = A.detach().to(u_t.dtype)
        chunk = _chunk_length(batch, channels, A.shape[-1], length, chunk)
        y = _scan_chunked_forward(u_t, delta_t, A, B_t, C_t, chunk)[0].permute(1, 2, 0).contiguous()
        if D is not None:
            y = y + u * D.detach()[None, :, None]
        ctx.save_for_backward(delta_t, A, B_t, C_t, None if D is None else D.detach())
        ctx.chunk = chunk
        return y.to(u.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        if not ctx.needs_input_grad[0]:
            return (None,) * 9
        delta_t, A, B_t, C_t, D = ctx.saved_tensors
        g_t = grad_y.to(A.dtype).permute(2, 0, 1).contiguous()
        du = _scan_chunked_backward(g_t, delta_t, A, B_t, C_t, ctx.chunk).permute(1, 2, 0).contiguous()
        if D is not None:
            du = du + grad_y.to(A.dtype) * D.to(A.dtype)[None, :, None]
        return (du.to(grad_y.dtype),) + (None,) * 8


def selective_scan_lrp_chunked(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False, chunk=None):
    """PyTorch selective scan with A_bar, B_bar and C constant, in blocks of the sequence; the CPU path.

    Same contract as :func:`selective_scan_lrp_ref` (its oracle), plus ``chunk``: time steps per block (default:
    as many as keep one block's ``(T, B, D, N)`` tensors at ``CHUNK_ELEMENTS`` elements). Memory is
    ``O(B D L + chunk B D N)`` instead of the reference's ``O(B D L N)`` and its autograd graph of L steps; the
    backward is the hand-written reverse scan of the Triton kernel. State and arithmetic in float32 (float64 for
    float64 inputs); for float32 inputs on CPU the values equal the reference's bit for bit, the gradient to
    float rounding.
    """
    if u.dim() != 3 or B.dim() != 3 or C.dim() != 3:
        raise ValueError("selective_scan_lrp_chunked expects u, delta: (B, D, L) and B, C: (B, N, L)")
    return _SelectiveScanLRPChunked.apply(u, delta.detach(), A.detach(), B.detach(), C.detach(),
                                          None if D is None else D.detach(),
                                          None if delta_bias is None else delta_bias.detach(),
                                          bool(delta_softplus), chunk)


def selective_scan_lrp(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The MambaLRP selective scan: the Triton kernel on CUDA tensors, the chunked PyTorch path elsewhere.

    Shapes as in :func:`selective_scan_lrp_ref`; returns ``y: (B, D, L)``. The reference itself (which
    materialises ``(B, D, L, N)`` tensors and records L autograd steps) is kept as the tests' oracle.
    """
    tensors = [t for t in (u, delta, A, B, C, D, delta_bias) if t is not None]
    if use_triton(*tensors, kernel="selective_scan_lrp"):
        return selective_scan_lrp_triton(u, delta, A, B, C, D, delta_bias, delta_softplus)
    return selective_scan_lrp_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus)


class _SelectiveScanChunked(torch.autograd.Function):
    """The ordinary scan ``y = scan(u, delta, A, B, C)`` (``delta`` after bias and softplus, no ``D`` term) with
    every gradient, without ``(B, D, L, N)`` tensors: the forward keeps the state entering each block, the backward
    recomputes one block's states from it and runs the reverse scan for ``lambda_t = dloss/dh_t``:

        du_t = delta_t (B_t . lambda_t)           ddelta_t = u_t (B_t . lambda_t) + sum_n A p_t
        dB_t = sum_d lambda_t delta_t u_t         dC_t = sum_d h_t g_t        dA = sum_t delta_t p_t

    with ``p_t = lambda_t * A_bar_t * h_{t-1}``. When one block covers the sequence (training: ``chunk`` = L), the
    forward's ``A_bar`` and states are kept and nothing is recomputed. Shapes as :func:`selective_scan_ref`, all in
    one work dtype.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, chunk):
        batch, channels, length = u.shape
        as_tm = lambda t: t.detach().permute(2, 0, 1).contiguous()  # noqa: E731
        u_t, delta_t, B_t, C_t = as_tm(u), as_tm(delta), as_tm(B), as_tm(C)
        chunk = _chunk_length(batch, channels, A.shape[-1], length, chunk)
        starts = u.new_empty(-(-length // chunk), batch, channels, A.shape[-1])
        y_t, dA, h = _scan_chunked_forward(u_t, delta_t, A.detach(), B_t, C_t, chunk, starts)
        kept = (dA, h) if chunk == length else (None, None)  # one block: its A_bar and states serve the backward
        ctx.save_for_backward(u_t, delta_t, A.detach(), B_t, C_t, starts, *kept)
        ctx.chunk = chunk
        return y_t.permute(1, 2, 0).contiguous()

    @staticmethod
    def backward(ctx, grad_y):
        u_t, delta_t, A, B_t, C_t, starts, kept_dA, kept_h = ctx.saved_tensors
        chunk = ctx.chunk
        g_t = grad_y.to(A.dtype).permute(2, 0, 1).contiguous()
        length, batch, channels = g_t.shape
        lam_buf = g_t.new_empty(chunk, batch, channels, A.shape[-1])
        if kept_h is None:
            dA_buf, h_buf = torch.empty_like(lam_buf), torch.empty_like(lam_buf)
        carry = torch.zeros_like(lam_buf[0])
        scratch = torch.empty_like(carry)
        du_t, ddelta_t = torch.empty_like(g_t), torch.empty_like(g_t)
        dB_t, dC_t = torch.empty_like(B_t), torch.empty_like(C_t)
        dA_sum = torch.zeros_like(A) if ctx.needs_input_grad[2] else None
        for k, t0 in reversed(list(enumerate(range(0, length, chunk)))):
            n = min(chunk, length - t0)
            blk = slice(t0, t0 + n)
            if kept_h is None:
                dA, h = _discretise(delta_t, A, u_t, B_t, t0, n, dA_buf[:n], h_buf[:n])
                _recur(dA, h, starts[k] if t0 else None, scratch)  # the block's states h_t, recomputed
            else:
                dA, h = kept_dA, kept_h
            dC_t[blk] = torch.einsum("tbdn,tbd->tbn", h, g_t[blk])
            lam = torch.mul(g_t[blk, :, :, None], C_t[blk, :, None, :], out=lam_buf[:n])
            _reverse_recur(dA, lam, carry, scratch)
            lam_b = torch.einsum("tbdn,tbn->tbd", lam, B_t[blk])
            du_t[blk] = lam_b * delta_t[blk]
            dB_t[blk] = torch.einsum("tbdn,tbd->tbn", lam, delta_t[blk] * u_t[blk])
            p = lam.mul_(dA)  # lambda_t * A_bar_t, times h_{t-1} below (h_{-1} = 0)
            p[1:].mul_(h[:-1])
            if t0:
                p[0].mul_(starts[k])
            else:
                p[0].zero_()
            ddelta_t[blk] = lam_b * u_t[blk] + torch.einsum("tbdn,dn->tbd", p, A)
            if dA_sum is not None:  # a product and a sum: einsum's (t, b) contraction copies p first, 8x slower
                dA_sum += p.mul_(delta_t[blk, :, :, None]).sum((0, 1))
        back = lambda t: t.permute(1, 2, 0)  # noqa: E731
        return back(du_t), back(ddelta_t), dA_sum, back(dB_t), back(dC_t), None


def selective_scan_chunked(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False, chunk=None):
    """The ordinary selective scan with every gradient, in blocks of the sequence; values as :func:`selective_scan_ref`.

    Same contract as :func:`selective_scan_ref` (its oracle), plus ``chunk`` (time steps per block, as in
    :func:`selective_scan_lrp_chunked`). Memory ``O(B D L + chunk B D N)``, time linear in L (the reference's
    autograd graph of L steps makes its backward quadratic); the backward recomputes each block's states once.
    ``delta_bias`` and the softplus stay ordinary autograd operations.
    """
    if u.dim() != 3 or B.dim() != 3 or C.dim() != 3:
        raise ValueError("selective_scan_chunked expects u, delta: (B, D, L) and B, C: (B, N, L)")
    if delta_bias is not None:
        delta = delta + delta_bias.to(delta.dtype)[..., None]
    if delta_softplus:
        delta = F.softplus(delta)
    work = _work_dtype(u)
    y = _SelectiveScanChunked.apply(u.to(work), delta.to(work), A.to(work), B.to(work), C.to(work), chunk)
    if D is not None:
        y = y + u * D[None, :, None]
    return y.to(u.dtype)


def selective_scan(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The ordinary selective scan (every input differentiable), for the baselines and the rule ablations: the
    chunked PyTorch path on every device (there is no Triton kernel for it). Shapes as :func:`selective_scan_ref`."""
    return selective_scan_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus)


def _check_inputs(device, dtype):
    g = torch.Generator().manual_seed(0)
    batch, channels, length, state = 2, 40, 37, 16
    u = torch.randn(batch, channels, length, generator=g)
    delta = 0.5 * torch.randn(batch, channels, length, generator=g)
    A = -torch.rand(channels, state, generator=g) - 0.1
    B, C = torch.randn(batch, state, length, generator=g), torch.randn(batch, state, length, generator=g)
    D, bias, grad = torch.randn(channels, generator=g), 0.1 * torch.randn(channels, generator=g), torch.randn_like(u)
    return tuple(t.to(device) for t in (u, delta, A, B, C, D, bias, grad))


def _check_run(fn, args):
    """The output and the relevance backward (gradient w.r.t. ``u``) for a fixed output gradient."""
    u, delta, A, B, C, D, bias, grad = args
    u = u.detach().clone().requires_grad_(True)
    y = fn(u, delta, A, B, C, D, bias, True)
    (du,) = torch.autograd.grad(y, u, grad)
    return y.detach(), du


register_check("selective_scan_lrp", KernelCheck(triton=selective_scan_lrp_triton, ref=selective_scan_lrp_ref,
                                                 inputs=_check_inputs, run=_check_run))


def selective_scan_train(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The ordinary selective scan for training (the recipes' :func:`core.lrp.recipes.fast_mixers`): the chunked
    scan in one block, whose backward reuses the forward's ``(L, B, D, N)`` states instead of recomputing them.
    Same signature and values as :func:`selective_scan_ref`."""
    return selective_scan_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus, chunk=u.shape[-1])
