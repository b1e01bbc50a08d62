"""Mamba mixer forwards with the MambaLRP rules wired in (values identical to the original forward).

:func:`ssm_branch` is one selective-SSM branch (conv -> SiLU -> selective scan -> gate) written as a
function of the branch's parameters; :func:`mamba_mixer_forward` runs transformers' ``MambaMixer`` with
it (the same operations as ``MambaMixer.forward`` without a cache; Falcon-Mamba's ``FalconMambaMixer`` too, whose
RMS norms on ``dt``, ``B`` and ``C`` sit on the selection path the rule keeps constant) and
:func:`bimamba_mixer_forward` the project's bidirectional Vision Mamba mixer. :func:`mamba2_mixer_forward` runs
a Mamba-2 mixer (transformers' ``Mamba2Mixer`` and its copies in Bamba, Granite 4.0-H, Nemotron-H, Zamba2, and
Falcon-H1's with its multipliers) on :func:`core.lrp.ssd.ssd_scan`. ``rules=None`` reproduces the original network.

With a ``record`` list, every branch appends a :class:`ScanRecord` (what the hidden attention needs).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from core.lrp import rules as R
from core.lrp.ssd import discretize, ssd_scan
from kernels.selective_scan import selective_scan, selective_scan_lrp


@dataclass
class ScanRecord:
    """One selective scan of one forward pass (batch first).

    Attributes
    ----------
    layer : index of the mixer in the model (order of ``model.modules()``).
    u : (B, D, L) scan input.
    delta : (B, D, L) time steps after bias and softplus (detached).
    A : (D, N) continuous state matrix (detached).
    B, C : (B, N, L) input-dependent projections (detached).
    D : (D,) skip weight (detached).
    y : (B, D, L) scan output ``sum_s alpha[t, s] u_s + D u_t`` (in the autograd graph).
    flipped : True for the backward branch of a bidirectional mixer (sequence order reversed).
    """

    layer: int
    u: torch.Tensor
    delta: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor
    y: torch.Tensor
    flipped: bool = False


class _ConvInputGradient(torch.autograd.Function):
    """``F.conv1d`` (the same call, the same values) whose backward computes the input's gradient only and keeps
    only the weight; autograd's own conv keeps its input, here a view of the whole in_proj output."""

    @staticmethod
    def forward(ctx, x, weight, bias, padding, groups):
        ctx.save_for_backward(weight)
        ctx.shape, ctx.padding, ctx.groups = x.shape, padding, groups
        return F.conv1d(x, weight, bias, padding=padding, groups=groups)

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        dx = torch.nn.grad.conv1d_input(ctx.shape, weight, grad, padding=ctx.padding, groups=ctx.groups)
        return dx, None, None, None, None


def causal_conv(x: torch.Tensor, conv: nn.Conv1d, gamma: float = 0.0, ledger=None) -> torch.Tensor:
    """Depthwise causal conv of ``x: (B, D, L)`` as in transformers' ``causal_conv1d_fn`` (no activation).

    ``ledger``: a :class:`core.lrp.trace.Ledger` that notes the bias (the relevance it absorbs)."""
    length, kernel = x.shape[-1], conv.weight.shape[-1]
    channels = conv.weight.shape[0]
    x = x.to(conv.weight.dtype)
    frozen = not any(p is not None and p.requires_grad for p in (conv.weight, conv.bias))
    if frozen and x.requires_grad and torch.is_grad_enabled():  # gradient to x only: keep no activation
        z = _ConvInputGradient.apply(x, conv.weight, conv.bias, kernel - 1, channels)
    else:
        z = F.conv1d(x, conv.weight, conv.bias, padding=kernel - 1, groups=channels)
    if gamma:
        # applied to the unsliced output so that the result keeps the original memory layout
        # (CPU kernels downstream take a different, bitwise different, path for other layouts)
        def bias_free(inp, w):
            return F.conv1d(inp, w, None, padding=kernel - 1, groups=channels)

        bias = None if conv.bias is None else conv.bias[:, None]
        z = R.gamma_rule(z, bias, bias_free, x, conv.weight, gamma)
    if ledger is not None and conv.bias is not None:
        ledger.bias(z, conv.bias[:, None])
    return z[..., :length]


def ssm_branch(x: torch.Tensor, z: torch.Tensor, conv: nn.Conv1d, x_proj: nn.Linear, dt_proj: nn.Linear,
               A_log: torch.Tensor, D: torch.Tensor, rules: R.LRPRules | None,
               record: list | None = None, layer: int = 0, flipped: bool = False, scan=None, select=None,
               ledger=None) -> torch.Tensor:
    """One selective-SSM branch: ``gate(scan(silu(conv(x))), silu(z))``.

    Parameters
    ----------
    x, z : (B, D, L) the two halves of ``in_proj``'s output (scan input before the conv, gate).
    conv, x_proj, dt_proj, A_log, D : the branch's parameters (transformers' ``MambaMixer`` layout).
    rules : the MambaLRP rules, or None for the original computation.
    scan : the selective scan, with ``selective_scan_ref``'s signature; default: ``selective_scan_lrp`` when
        ``rules.ssm`` is on, else ``selective_scan`` (training passes ``selective_scan_train``).
    select : ``select(time_step, B, C) -> (time_step, B, C)`` on ``x_proj``'s ``(B, L, .)`` outputs (Falcon-Mamba's
        RMS norms), or None.
    ledger : notes the conv bias (:class:`core.lrp.trace.Ledger`), or None.

    Returns
    -------
    (B, D, L) gated scan output, in the dtype of ``x``.
    """
    dtype = x.dtype
    gamma = rules.gamma_conv if rules is not None else 0.0
    u = R.silu(causal_conv(x, conv, gamma, ledger), rules).to(dtype)
    state_size = A_log.shape[-1]
    rank = dt_proj.weight.shape[1]
    time_step, B, C = torch.split(x_proj(u.transpose(1, 2)), [rank, state_size, state_size], dim=-1)
    if select is not None:
        time_step, B, C = select(time_step, B, C)
    time_step = dt_proj.weight @ time_step.transpose(1, 2)
    dt_bias = dt_proj.bias.float() if dt_proj.bias is not None else None
    A = -torch.exp(A_log.float())
    B, C = B.transpose(1, 2), C.transpose(1, 2)
    if scan is None:
        scan = selective_scan_lrp if (rules is not None and rules.ssm) else selective_scan
    y = scan(u, time_step, A, B, C, D.float(), dt_bias, True)
    if record is not None:
        delta = time_step.detach()
        if dt_bias is not None:
            delta = delta + dt_bias.detach()[..., None]
        record.append(ScanRecord(layer=layer, u=u, delta=F.softplus(delta), A=A.detach(), B=B.detach(),
                                 C=C.detach(), D=D.detach().float(), y=y, flipped=flipped))
    if rules is None:
        return y * F.silu(z)
    return R.gate(y, R.silu(z, rules), rules)


def _falcon_select(mixer):
    """Falcon-Mamba's RMS norms on ``dt``, ``B`` and ``C`` (no weights), or None for a plain Mamba mixer."""
    if not hasattr(mixer, "b_layernorm"):
        return None
    return lambda t, b, c: (mixer.dt_layernorm(t), mixer.b_layernorm(b), mixer.c_layernorm(c))


def mamba_mixer_forward(mixer: nn.Module, hidden_states: torch.Tensor, rules: R.LRPRules | None,
                        record: list | None = None, layer: int = 0, scan=None, ledger=None) -> torch.Tensor:
    """transformers' ``MambaMixer.forward`` (full sequence, no cache) with the rules; ``(B, L, H) -> (B, L, H)``.
    ``FalconMambaMixer`` too: its norms on ``dt``, ``B`` and ``C`` are applied where it applies them.

    ``scan``: the selective scan of :func:`ssm_branch` (default: chosen by the rules)."""
    dtype = hidden_states.dtype
    g_in = rules.gamma_in_proj if rules is not None else 0.0
    g_out = rules.gamma_out_proj if rules is not None else 0.0
    projected = R.linear(hidden_states, mixer.in_proj, g_in).transpose(1, 2)
    x, z = projected.chunk(2, dim=1)
    s = ssm_branch(x, z, mixer.conv1d, mixer.x_proj, mixer.dt_proj, mixer.A_log, mixer.D, rules,
                   record, layer, scan=scan, select=_falcon_select(mixer), ledger=ledger)
    return R.linear(s.transpose(1, 2).to(dtype), mixer.out_proj, g_out)


def bimamba_mixer_forward(mixer: nn.Module, hidden_states: torch.Tensor, rules: R.LRPRules | None,
                          record: list | None = None, layer: int = 0, scan=None) -> torch.Tensor:
    """Bidirectional mixer (shared in_proj/out_proj, a forward and a flipped branch); ``(B, L, H) -> (B, L, H)``.

    ``out = out_proj((branch_f(xz) + flip(branch_b(flip(xz)))) / 2)``.
    """
    dtype = hidden_states.dtype
    g_in = rules.gamma_in_proj if rules is not None else 0.0
    g_out = rules.gamma_out_proj if rules is not None else 0.0
    projected = R.linear(hidden_states, mixer.in_proj, g_in).transpose(1, 2)
    x, z = projected.chunk(2, dim=1)
    fwd = ssm_branch(x, z, mixer.conv1d, mixer.x_proj, mixer.dt_proj, mixer.A_log, mixer.D, rules,
                     record, layer, scan=scan)
    bwd = ssm_branch(x.flip(-1), z.flip(-1), mixer.conv1d_b, mixer.x_proj_b, mixer.dt_proj_b,
                     mixer.A_b_log, mixer.D_b, rules, record, layer, flipped=True, scan=scan).flip(-1)
    s = (fwd + bwd) / 2
    return R.linear(s.transpose(1, 2).to(dtype), mixer.out_proj, g_out)


def _norm_groups(norm: nn.Module, channels: int) -> int:
    if hasattr(norm, "n_groups"):  # Falcon-H1
        return int(norm.n_groups)
    return channels // int(getattr(norm, "group_size", channels))


def mamba2_mixer_forward(mixer: nn.Module, hidden_states: torch.Tensor, rules: R.LRPRules | None,
                         record: list | None = None, layer: int = 0, ledger=None) -> torch.Tensor:
    """transformers' Mamba-2 mixer forward (full sequence, no cache) with the rules; ``(B, L, H) -> (B, L, H)``.

    ``in_proj -> (z, xBC, dt)``; ``xBC -> causal conv -> SiLU -> (x, B, C)``; the SSD scan
    (:func:`core.lrp.ssd.ssd_scan`; with ``rules.ssm`` dt, A, B and C constant); the gated RMSNorm
    (:func:`core.lrp.rules.gated_rms_norm`); ``out_proj``. Falcon-H1's ``ssm_in_multiplier`` and ``mup_vector`` scale
    the input and ``in_proj``'s output, and its mixer may have no norm (then ``y * silu(z)`` with the gate rule).
    With a ``record``, one :class:`ScanRecord` per group of heads (per head: ``delta`` is ``dt``, ``A`` the head's
    rate over the ``N`` states), which is what the hidden-attention methods need."""
    dtype = hidden_states.dtype
    g_in = rules.gamma_in_proj if rules is not None else 0.0
    g_out = rules.gamma_out_proj if rules is not None else 0.0
    batch, length, _ = hidden_states.shape
    heads, head_dim, groups, state = mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size
    inner = heads * head_dim
    h = hidden_states
    if hasattr(mixer, "ssm_in_multiplier"):
        h = h * mixer.ssm_in_multiplier
    projected = R.linear(h, mixer.in_proj, g_in)
    if getattr(mixer, "mup_vector", None) is not None:
        projected = projected * mixer.mup_vector
    conv_dim = inner + 2 * groups * state
    gate, xbc, dt = projected.split([projected.shape[-1] - conv_dim - heads, conv_dim, heads], dim=-1)
    xbc = causal_conv(xbc.transpose(1, 2), mixer.conv1d, rules.gamma_conv if rules is not None else 0.0, ledger)
    xbc = R.silu(xbc, rules).to(dtype).transpose(1, 2)
    x, B, C = xbc.split([inner, groups * state, groups * state], dim=-1)
    dt = discretize(dt, mixer.dt_bias, tuple(mixer.time_step_limit))
    A = -torch.exp(mixer.A_log.to(R.compute_dtype(dtype)))  # float32 as transformers; float64 for float64
    B, C = B.reshape(batch, length, groups, state), C.reshape(batch, length, groups, state)
    y = ssd_scan(x.reshape(batch, length, heads, head_dim), dt, A, B, C, mixer.D, mixer.chunk_size,
                 constants=rules is not None and rules.ssm)
    if record is not None:
        y = _record_heads(record, layer, x, dt, A, B, C, mixer.D, y, heads, groups, state)
    y = y.reshape(batch, length, inner)
    norm = getattr(mixer, "norm", None) if getattr(mixer, "mamba_rms_norm", True) else None
    if norm is not None:
        y = R.gated_rms_norm(y, gate, norm.weight, norm.variance_epsilon, _norm_groups(norm, inner),
                             bool(getattr(norm, "norm_before_gate", False)), rules)
    elif rules is None:
        y = y * F.silu(gate.to(y.dtype))
    else:
        y = R.gate(y, R.silu(gate.to(y.dtype), rules), rules)
    return R.linear(y.to(dtype), mixer.out_proj, g_out)


def _record_heads(record, layer, x, dt, A, B, C, D, y, heads, groups, state):
    """One :class:`ScanRecord` per group: its heads as the channels (all channels of a head share one hidden
    attention), ``u`` and ``y`` over the group's channels (``(b, P * heads_per_group, L)``). Returns ``y`` rebuilt from
    the records' ``y`` (so the gradient reaches them)."""
    per = heads // groups
    batch, length = x.shape[:2]
    xs = x.reshape(batch, length, heads, -1)
    parts = []
    for g in range(groups):
        hs = slice(g * per, (g + 1) * per)
        y_g = y[:, :, hs].reshape(batch, length, -1).transpose(1, 2)
        parts.append(y_g.transpose(1, 2).reshape(batch, length, per, -1))
        record.append(ScanRecord(
            layer=layer, u=xs[:, :, hs].reshape(batch, length, -1).transpose(1, 2),
            delta=dt[:, :, hs].detach().float().transpose(1, 2), A=A[hs].detach()[:, None].expand(per, state).float(),
            B=B[:, :, g].detach().float().transpose(1, 2), C=C[:, :, g].detach().float().transpose(1, 2),
            D=D[hs].detach().float(), y=y_g))
    return torch.cat(parts, dim=2)
