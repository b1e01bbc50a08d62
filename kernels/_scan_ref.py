"""The selective scan's plain-PyTorch twins (:mod:`kernels.selective_scan`'s oracles).

Both run transformers' ``MambaMixer`` operations in its order (so their values are bit-identical to it): they
materialise ``(B, D, L, N)`` tensors and autograd records L steps, so they are the tests' and benchmarks'
references, not a path the models take.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


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
