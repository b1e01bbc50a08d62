"""The selective scan in blocks of the sequence on any device (the CPU path): the Triton kernel's algorithm in
PyTorch, the state carried between blocks, memory ``O(B D L + chunk B D N)``.

Two autograd functions share the forward (the reference's step operations, so its values bit for bit) and the
reverse scan ``lambda_s = C_s g_s + A_bar_{s+1} lambda_{s+1}``: the MambaLRP scan (gradient for ``u`` only) and the
ordinary scan (every gradient: the one hand-written ordinary-scan backward, for the baselines, the ablations and
training).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# the forward and the reverse scan, shared
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


# ----------------------------------------------------------------------------------------------
# the MambaLRP scan: gradient for u only
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# the ordinary scan: every gradient
# ----------------------------------------------------------------------------------------------
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
