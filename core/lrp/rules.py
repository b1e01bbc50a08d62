"""The MambaLRP propagation rules, each as a forward whose value is unchanged but whose gradient is rewired.

Gradient x input over a network built from these pieces is LRP: every piece is (locally) linear in its
input with the values of the original network, so the relevances of the input embeddings sum to the
explained logit (conservation) once constant-adding biases are removed.

The same pieces carry AttnLRP (Achtibat et al., ICML 2024) for the attention layers and MLPs of the hybrids: the
identity rule for element-wise activations (:func:`activation`), the uniform rule for the bilinear products
(:func:`gate` for element-wise products, :func:`share` for q.k and attention x value), the identity rule for norms
(the normaliser a constant, as the LN-rule), and the softmax as published (its gradient: see
:mod:`core.lrp.blocks`).

Every rule uses :func:`with_gradient_of`: the returned tensor has exactly the values of the original
computation and the gradient of a surrogate. ``rules=None`` everywhere means "the original network".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F


GAMMA_LAYERS = ("in_proj", "out_proj", "conv")  # the layer kinds LRP-gamma can apply to
MAX_GAMMA = 1000.0  # LRP-gamma is refused above this: at 1e300 the boosted sums overflow float32 and the relevances
                    # and the explained logit become NaN (issue 22); the published value is 0.25


@dataclass(frozen=True)
class LRPRules:
    """Which MambaLRP rules are on; each can be switched off for the ablation.

    Attributes
    ----------
    silu : identity rule for SiLU, ``x * const(sigmoid(x))`` (after the conv and on the gate).
    ssm : selective SSM with ``A_bar``, ``B_bar`` and ``C`` constant (no relevance to x_proj/dt_proj).
    gate : half rule for ``y * silu(z)``: ``s/2 + const(s/2)``, half to ``y``, half to the gate.
    norm : LN-rule for RMSNorm / LayerNorm: the normaliser is a constant.
    gamma_in_proj, gamma_out_proj, gamma_conv : generalised LRP-gamma for that layer kind; 0 is LRP-0.
    """

    silu: bool = True
    ssm: bool = True
    gate: bool = True
    norm: bool = True
    gamma_in_proj: float = 0.0
    gamma_out_proj: float = 0.0
    gamma_conv: float = 0.0

    @classmethod
    def mambalrp(cls, gamma: float = 0.0) -> "LRPRules":
        """All rules on; ``gamma`` (e.g. 0.25) applied to in_proj, out_proj and conv."""
        return cls(gamma_in_proj=gamma, gamma_out_proj=gamma, gamma_conv=gamma)

    @classmethod
    def ln_only(cls) -> "LRPRules":
        """Only the LN-rule (the "LRP (LN-rule)" baseline of the paper)."""
        return cls(silu=False, ssm=False, gate=False, norm=True)

    @classmethod
    def none(cls) -> "LRPRules":
        """No rule: gradient x input of the original network."""
        return cls(silu=False, ssm=False, gate=False, norm=False)

    def with_options(self, **options) -> "LRPRules":
        """A copy with the given fields replaced (unknown names raise ``TypeError``)."""
        return replace(self, **options)

    @classmethod
    def from_toggles(cls, silu: bool = True, ssm: bool = True, gate: bool = True, norm: bool = True,
                     gamma: float | None = None, gamma_layers=GAMMA_LAYERS, *, default_gamma: float = 0.0
                     ) -> "LRPRules":
        """The rules as a user switches them (the paper's ablation), translated once.

        Parameters
        ----------
        silu, ssm, gate, norm : each rule on or off.
        gamma : LRP-gamma for the layers in ``gamma_layers`` (the others get LRP-0); None or "" keeps
            ``default_gamma`` on all three (the model's default: 0 for text, 0.25 for images).
        gamma_layers : a subset of :data:`GAMMA_LAYERS` (``in_proj``, ``out_proj``, ``conv``).

        Raises
        ------
        BadInputError
            A gamma that is not a number from 0 to :data:`MAX_GAMMA`, or an unknown layer.
        """
        from core.errors import BadInputError

        if gamma is None or gamma == "":
            gammas = dict.fromkeys(GAMMA_LAYERS, float(default_gamma))
        else:
            try:
                g = float(gamma)
            except (TypeError, ValueError):
                raise BadInputError(f"gamma must be a number >= 0, got {gamma!r}.", fix="Try 0 (LRP-0) or 0.25.") \
                    from None
            if not math.isfinite(g) or not 0 <= g <= MAX_GAMMA:
                raise BadInputError(f"gamma must be a number from 0 to {MAX_GAMMA:g}, got {gamma!r}.",
                                    fix="Try 0 (LRP-0) or 0.25.")
            layers = set(gamma_layers or [])
            unknown = sorted(layers - set(GAMMA_LAYERS))
            if unknown:
                raise BadInputError(f"Unknown gamma layer(s): {', '.join(unknown)}.", fix=f"Use {', '.join(GAMMA_LAYERS)}.")
            gammas = {layer: (g if layer in layers else 0.0) for layer in GAMMA_LAYERS}
        return cls(silu=bool(silu), ssm=bool(ssm), gate=bool(gate), norm=bool(norm),
                   **{f"gamma_{layer}": v for layer, v in gammas.items()})

    def changes(self, default_gamma: float = 0.0) -> dict:
        """The fields that differ from all rules on with ``default_gamma`` (``{}`` for MambaLRP as published)."""
        base = LRPRules.mambalrp(default_gamma)
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(base, f.name)}


def with_gradient_of(value: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """Exactly the values of ``value``, the gradient of ``surrogate`` (which must be close to ``value``)."""
    return value.detach() + (surrogate - surrogate.detach())


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a norm or softmax computes in: float32 for half, bfloat16 and float32 inputs (as transformers does),
    float64 for float64 (so a float64 explanation stays float64 end to end)."""
    return torch.promote_types(dtype, torch.float32)


class _Scaled(torch.autograd.Function):
    """``x`` itself, its gradient multiplied by a constant ``fraction`` (no graph of its own: one multiplication in the
    backward pass)."""

    @staticmethod
    def forward(ctx, x, fraction):
        ctx.fraction = fraction
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.fraction, None


class _Linearised(torch.autograd.Function):
    """``fn(x)`` whose gradient is ``grad * slope`` with ``slope = slope_fn(x, fn(x))`` a constant: the identity rule
    ``x * const(slope)`` as one saved tensor and one multiplication in the backward pass (instead of the graph of
    ``value.detach() + (x * slope - (x * slope).detach())``; the same values and, up to rounding, the same gradient)."""

    @staticmethod
    def forward(ctx, x, fn, slope_fn):
        y = fn(x)
        ctx.save_for_backward(slope_fn(x, y))
        return y

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return grad * slope, None, None


def _unbroadcast(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``grad`` summed over the dimensions a factor of ``shape`` was broadcast along."""
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    dims = [i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1]
    return grad.sum(dims, keepdim=True) if dims else grad


class _HalfProduct(torch.autograd.Function):
    """``a * b`` whose gradient is ``grad * b / 2`` for ``a`` and ``grad * a / 2`` for ``b``: the half (uniform) rule
    of a product, with broadcasting."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        half = grad * 0.5
        ga = _unbroadcast(half * b, a.shape) if ctx.needs_input_grad[0] else None
        gb = _unbroadcast(half * a, b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


def share(x: torch.Tensor, fraction: float) -> torch.Tensor:
    """``x`` unchanged, its gradient scaled by ``fraction``: the uniform rule of a product, applied to its factor.

    For ``s = a @ b`` the uniform rule gives each factor half of the relevance, which is gradient x input with
    half of each factor's gradient; AttnLRP applies it to ``q . k`` and to ``softmax x v`` (LXT scales ``q`` and ``k``
    by a quarter instead of scaling the probabilities too: the same gradient, since the softmax's backward is linear;
    here each product's factors are scaled, so the softmax sees the relevance the rule gives it)."""
    return _Scaled.apply(x, fraction)


def _ratio(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y / x``, 0 where ``x`` is 0."""
    return torch.where(x == 0, 0.0, y / x)


def activation(x: torch.Tensor, fn, rules: LRPRules | None) -> torch.Tensor:
    """``fn(x)`` for an element-wise activation; with ``rules.silu`` the identity rule ``x * const(fn(x) / x)``
    (relevance passes through unchanged; 0 where ``x`` is 0)."""
    if rules is None or not rules.silu:
        return fn(x)
    return _Linearised.apply(x, fn, _ratio)


# ---------------------------------------------------------------------------------------------
# Element-wise rules
# ---------------------------------------------------------------------------------------------
def silu(x: torch.Tensor, rules: LRPRules | None) -> torch.Tensor:
    """SiLU; with ``rules.silu`` the identity rule ``x * const(sigmoid(x))``. Any shape."""
    if rules is None or not rules.silu:
        return F.silu(x)
    return _Linearised.apply(x, F.silu, lambda t, _: torch.sigmoid(t))


def gate(y: torch.Tensor, g: torch.Tensor, rules: LRPRules | None) -> torch.Tensor:
    """Product ``y * g``; with ``rules.gate`` the half rule ``s/2 + const(s/2)``.

    The gradient is then ``g/2`` for ``y`` and ``y/2`` for ``g``, so each factor receives half of the
    relevance ``s``.
    """
    if rules is None or not rules.gate:
        return y * g
    return _HalfProduct.apply(y, g)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, rules: LRPRules | None,
             offset: float | None = None) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm`` / ``MambaRMSNorm`` (same operations; in float64 for float64 inputs); with
    ``rules.norm`` the LN-rule. ``offset``: Gemma's norm, ``normed * (offset + weight)`` in the compute dtype before
    the cast back (Gemma 2 and 3 store ``weight`` around 0 and use ``offset = 1``).

    ``x: (..., H)``; the LN-rule makes ``rsqrt(mean(x^2) + eps)`` a constant, so the map is linear.
    """
    input_dtype = x.dtype
    h = x.to(compute_dtype(input_dtype))
    constant = rules is not None and rules.norm
    variance = (h.detach() if constant else h).pow(2).mean(-1, keepdim=True)
    scale = torch.rsqrt(variance + eps)
    if offset is not None:
        return (h * scale * (offset + weight.to(h.dtype))).to(input_dtype)
    return weight * (h * scale).to(input_dtype)


def softcap(x: torch.Tensor, cap: float | None, rules: LRPRules | None) -> torch.Tensor:
    """Gemma 2's soft-capping ``cap * tanh(x / cap)`` (of attention scores, of the final logits); ``cap`` None: ``x``.
    With ``rules.silu`` the identity rule of an element-wise activation (AttnLRP): the relevance passes unchanged, so
    a capped logit is explained by relevances that sum to the capped value."""
    if cap is None:
        return x
    return activation(x, lambda t: torch.tanh(t / cap) * cap, rules)


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, groups: int,
                   norm_before_gate: bool, rules: LRPRules | None) -> torch.Tensor:
    """Mamba-2's gated RMSNorm ``norm(y * silu(z))`` (``norm_before_gate``: ``norm(y) * silu(z)``), normalised over
    ``groups`` equal groups of channels, as transformers' ``MambaRMSNormGated`` (and Falcon-H1's); in the compute dtype
    of ``y`` (:func:`compute_dtype`), returned in ``y``'s dtype. With the rules: SiLU identity rule on the gate, half
    rule on the product, LN-rule on the normaliser (MambaLRP's treatment of the Mamba-1 gate, then its norm).

    ``y, z: (..., D)``, ``weight: (D,)``."""
    dtype, cd = y.dtype, compute_dtype(y.dtype)
    y, g = y.to(cd), silu(z.to(cd), rules)
    constant = rules is not None and rules.norm

    def normed(h):
        grouped = h.reshape(*h.shape[:-1], groups, h.shape[-1] // groups)
        variance = (grouped.detach() if constant else grouped).pow(2).mean(-1, keepdim=True)
        return (grouped * torch.rsqrt(variance + eps)).reshape(h.shape)

    if norm_before_gate:
        return gate(weight * normed(y).to(dtype), g.to(dtype), rules).to(dtype)
    return weight * normed(gate(y, g, rules)).to(dtype)


def layer_norm(x: torch.Tensor, module: torch.nn.LayerNorm, rules: LRPRules | None) -> torch.Tensor:
    """``nn.LayerNorm``; with ``rules.norm`` the LN-rule (the standard deviation is a constant)."""
    y = F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)
    if rules is None or not rules.norm:
        return y
    dims = tuple(range(-len(module.normalized_shape), 0))
    centred = x - x.mean(dim=dims, keepdim=True)
    std = torch.sqrt(x.var(dim=dims, unbiased=False, keepdim=True) + module.eps).detach()
    surrogate = centred / std
    if module.weight is not None:
        surrogate = surrogate * module.weight
    if module.bias is not None:
        surrogate = surrogate + module.bias
    return with_gradient_of(y, surrogate)


# ---------------------------------------------------------------------------------------------
# Linear layers: LRP-0 (plain gradient) or the generalised LRP-gamma
# ---------------------------------------------------------------------------------------------
def gamma_rule(z: torch.Tensor, bias: torch.Tensor | None, layer, x: torch.Tensor, weight: torch.Tensor,
               gamma: float) -> torch.Tensor:
    """Generalised LRP-gamma for a layer ``z = layer(x, weight) + bias`` bilinear in (x, weight).

    ``bias`` must already broadcast against ``z`` (or be None); ``layer(x, weight)`` is the bias-free map.

    For an output with ``z_j > 0`` the positive contributions ``(x_i w_ij)^+`` are boosted by
    ``(1 + gamma)``, for ``z_j < 0`` the negative ones, so

        R_i = sum_j (x_i w_ij + gamma (x_i w_ij)^{+/-}) / (z_j + gamma sum_i' (x_i' w_i'j)^{+/-}) R_j

    which handles inputs of both signs. Implemented as ``z_mod * const(z / z_mod)``; ``|z_mod| >= |z|``
    so the ratio lies in [0, 1]. ``z`` is returned with its exact values.
    """
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    weight = weight.detach()
    wp, wn = weight.clamp(min=0), weight.clamp(max=0)
    z0 = layer(x, weight)
    pos = layer(xp, wp) + layer(xn, wn)  # sum of the positive products x_i w_ij
    neg = layer(xp, wn) + layer(xn, wp)  # sum of the negative products
    z_mod = z0 + gamma * torch.where(z > 0, pos, neg)
    if bias is not None:
        z_mod = z_mod + bias.detach()  # the bias keeps its own (unboosted) share
    z_ref = z_mod.detach()
    safe = torch.where(z_ref == 0, torch.ones_like(z_ref), z_ref)
    ratio = torch.where(z_ref == 0, torch.zeros_like(z_ref), z.detach() / safe)
    return with_gradient_of(z, z_mod * ratio)


def linear(x: torch.Tensor, module: torch.nn.Linear, gamma: float = 0.0) -> torch.Tensor:
    """``module(x)`` for ``x: (..., in)``; LRP-0 when ``gamma == 0``, else the generalised gamma rule."""
    z = module(x)
    if not gamma:
        return z
    return gamma_rule(z, module.bias, F.linear, x, module.weight, gamma)
