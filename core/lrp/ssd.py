"""Mamba-2's state-space dual (SSD) scan, chunk by chunk, with the MambaLRP treatment: linear in ``x``.

Per head ``h`` (of ``P`` channels, in group ``g`` of the ``G`` groups that share ``B`` and ``C``), with the decay
``a_t = dt_t * A_h`` (a scalar per head and step, ``A_h < 0``):

    state_t = exp(a_t) * state_{t-1} + dt_t * x_t B_t^T          state: (P, N)
    y_t     = state_t C_t + D_h * x_t

MambaLRP's rule for the selective SSM carries over: ``dt``, ``A``, ``B`` and ``C`` (the input-dependent decay and
projections) are constants, so ``y`` is a linear map of ``x``, ``y_t = sum_{s<=t} alpha[t, s] x_s + D x_t`` with the
hidden attention ``alpha[h, t, s] = (C_t . B_s) exp(a_{s+1} + ... + a_t) dt_s``, and relevance flows along the value
path only.

:func:`ssd_scan` computes it as the SSD paper's chunked algorithm (Dao and Gu, 2024; the same as transformers'
``mamba2_chunk_scan`` torch path, chunk for chunk): within a chunk of ``Q`` steps the ``(Q, Q)`` matrix ``alpha``
times ``x``; between chunks the ``(P, N)`` state carried from one chunk to the next. Memory ``O(B L Q H + B L/Q H P
N)``. :func:`ssd_ref` is the step-by-step recurrence above (the tests' oracle). Both compute in float32 for
half/bfloat16/float32 inputs and in float64 for float64 ones, and return that dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from core.lrp.rules import compute_dtype


def discretize(dt: torch.Tensor, dt_bias: torch.Tensor | None, limit=(0.0, float("inf"))) -> torch.Tensor:
    """``clamp(softplus(dt + dt_bias), *limit)`` as transformers' Mamba-2 mixers do; ``dt: (B, L, H)``."""
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    dt = F.softplus(dt)
    lo, hi = limit
    if lo > 0.0 or hi != float("inf"):
        dt = torch.clamp(dt, min=lo, max=hi)
    return dt


def _inputs(x, dt, A, B, C, D, constants: bool):
    cd = compute_dtype(x.dtype)
    if constants:
        dt, A, B, C = dt.detach(), A.detach(), B.detach(), C.detach()
        D = D.detach() if D is not None else None
    heads, groups = x.shape[2], B.shape[2]
    B = B.to(cd).repeat_interleave(heads // groups, dim=2)  # (b, L, H, N)
    C = C.to(cd).repeat_interleave(heads // groups, dim=2)
    return x.to(cd), dt.to(cd), A.to(cd), B, C, (D.to(cd) if D is not None else None)


def ssd_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
             D: torch.Tensor | None = None, chunk: int = 256, constants: bool = True) -> torch.Tensor:
    """The SSD scan in chunks of ``chunk`` steps.

    Parameters
    ----------
    x : (b, L, H, P) the scan input (the SiLU'd conv output, per head).
    dt : (b, L, H) time steps after bias, softplus and clamp (:func:`discretize`).
    A : (H,) negative decay rates; B, C : (b, L, G, N), ``G`` dividing ``H``.
    D : (H,) or None, skip weight.
    constants : MambaLRP's rule: ``dt``, ``A``, ``B``, ``C`` (and ``D``) detached, the gradient flows to ``x`` only.

    Returns
    -------
    y : (b, L, H, P) in the compute dtype (float32, or float64 for float64 inputs).
    """
    x, dt, A, B, C, D = _inputs(x, dt, A, B, C, D, constants)
    b, length, heads, _ = x.shape
    q = max(1, min(int(chunk), length))
    pad = (-length) % q
    if pad:  # zero steps: no input (dt = 0), no decay
        x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    n = (length + pad) // q
    xs = (x * dt[..., None]).reshape(b, n, q, heads, -1)  # dt_s x_s
    a = (dt * A).reshape(b, n, q, heads).permute(0, 1, 3, 2)  # (b, n, H, q) log-decay per step
    cum = a.cumsum(-1)  # (b, n, H, q): sum_{k <= t} a_k within the chunk
    Bc, Cc = B.reshape(b, n, q, heads, -1), C.reshape(b, n, q, heads, -1)
    # 1. within a chunk: y[t] = sum_{s <= t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    gap = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf"))  # (b, n, H, t, s)
    scores = torch.einsum("bcthn,bcshn->bchts", Cc, Bc) * torch.exp(gap)
    y = torch.einsum("bchts,bcshp->bcthp", scores, xs)
    # 2. the state each chunk leaves from its own inputs: sum_s exp(cum_end - cum_s) dt_s x_s B_s^T
    to_end = torch.exp(cum[..., -1:] - cum)  # (b, n, H, q)
    local = torch.einsum("bchs,bcshn,bcshp->bchpn", to_end, Bc, xs)
    # 3. carried between chunks: the state at each chunk's start
    states, carry = [], torch.zeros_like(local[:, 0])
    decay = torch.exp(cum[..., -1])  # (b, n, H): the whole chunk's decay
    for c in range(n):
        states.append(carry)
        carry = decay[:, c, :, None, None] * carry + local[:, c]
    start = torch.stack(states, dim=1)  # (b, n, H, P, N)
    # 4. what the carried state contributes: exp(cum_t) C_t . state_start
    y = y + torch.einsum("bcthn,bchpn,bcht->bcthp", Cc, start, torch.exp(cum))
    y = y.reshape(b, n * q, heads, -1)[:, :length]
    if D is not None:
        y = y + D[:, None] * x[:, :length]
    return y


def ssd_ref(x, dt, A, B, C, D=None, constants: bool = True) -> torch.Tensor:
    """The recurrence of the module docstring, one step at a time (same signature and result as :func:`ssd_scan`)."""
    x, dt, A, B, C, D = _inputs(x, dt, A, B, C, D, constants)
    b, length, heads, p = x.shape
    state = torch.zeros(b, heads, p, B.shape[-1], dtype=x.dtype, device=x.device)
    out = []
    for t in range(length):
        state = torch.exp(dt[:, t] * A)[..., None, None] * state + \
            dt[:, t, :, None, None] * x[:, t, :, :, None] * B[:, t, :, None, :]
        y = torch.einsum("bhpn,bhn->bhp", state, C[:, t])
        out.append(y + (D[:, None] * x[:, t] if D is not None else 0))
    return torch.stack(out, dim=1)


def hidden_attention_ssd(dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``alpha[b, h, t, s]`` of the module docstring, zero above the diagonal; ``(b, H, L, L)``. For tests."""
    heads, groups = dt.shape[-1], B.shape[2]
    B = B.repeat_interleave(heads // groups, dim=2)
    C = C.repeat_interleave(heads // groups, dim=2)
    cum = (dt * A).cumsum(1).transpose(1, 2)  # (b, H, L)
    length = dt.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=dt.device).tril()
    gap = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf"))
    return torch.einsum("bthn,bshn->bhts", C, B) * torch.exp(gap) * dt.transpose(1, 2)[:, :, None, :]
