"""The one registry of blocks the rules rewrite: for each, which classes it covers, what it is, and its forward with
the rules (the same values as the original forward, the rewired gradient).

=================  =========  =====================================================================================
entry              kind       rule
=================  =========  =====================================================================================
``mamba``          ssm        MambaLRP (Jafari et al., 2024): SiLU identity rule, selective SSM with A, B, C, dt
                              constant, half rule on the gate (transformers' ``MambaMixer``; Jamba's mixer, whose
                              RMS norms on dt, B and C sit on the constant selection path)
``falcon-mamba``   ssm        the same; Falcon-Mamba's RMS norms on dt, B and C sit on the constant selection path
``bimamba``        ssm        the same on both directions of the project's Vision Mamba mixer
``mamba2``         ssm        MambaLRP carried over to Mamba-2: causal conv linear, SiLU identity rule, the SSD
                              scan with dt, A, B, C constant (:mod:`core.lrp.ssd`), gated RMSNorm = half rule on
                              ``y * silu(z)`` + LN-rule (Mamba-2, Bamba, Granite 4.0-H, Nemotron-H, Zamba2,
                              Falcon-H1)
``attention``      attention  AttnLRP (Achtibat et al., 2024): uniform rule on ``q . k`` and ``softmax x v`` (half
                              of the gradient to each factor; LXT's quarter for q and k, the same gradient), softmax
                              as published (its gradient; it absorbs what the ledger notes), projections LRP-0,
                              Gemma 2's soft-capping of the scores the identity rule (every decoder family of
                              :data:`core.lrp.adapters.FAMILIES`: its own forward, RoPE, q/k norms, GQA, windows)
``gated-mlp``      mlp        AttnLRP: identity rule on the activation, uniform rule on ``act(gate) * up`` (also
                              with one fused ``gate_up`` projection: Phi-3, Granite's shared MLP, Zamba2's with its
                              per-layer LoRA adapters)
``mlp``            mlp        AttnLRP: identity rule on the activation (Nemotron-H's squared ReLU, GPT-2's GELU)
``moe``            mlp        AttnLRP: each expert a gated MLP, uniform rule on ``router weight x expert output``,
                              the router's softmax as published (over the chosen experts: Granite, Qwen3-MoE's
                              renormalised top-k; over all experts: Jamba)
``rms-norm``       norm       LN-rule / AttnLRP identity rule: the normaliser a constant (Gemma's ``1 + weight`` too)
``layer-norm``     norm       the same for ``nn.LayerNorm``; its bias absorbs its share (the ledger notes it)
=================  =========  =====================================================================================

A block is matched by the qualified name of its class or of a base class (``module.Class``), so no modeling
module is imported to look for it. Each ``forward(ctx, module, *args, **kwargs)`` gets the
:class:`RuleContext` of the explanation: the rules (None: the original computation), the scan record, the
ledger and trace, and the module's layer index.

Parallel blocks (Falcon-H1: attention and the SSM read the same normed input and their outputs are summed) need no
entry of their own: gradient x input splits the relevance of a sum in proportion to each term's contribution, which
is LRP's sum rule.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from core.lrp import rules as R
from core.lrp.mixer import bimamba_mixer_forward, mamba2_mixer_forward, mamba_mixer_forward

ATTENTION_IMPLEMENTATION = "layerwise_lrp"  # the name the attention function is registered under in transformers
KINDS = {  # what a block is, as views name and colour it
    "ssm": ("SSM layers", "#0072B2"),
    "attention": ("attention layers", "#D55E00"),
    "mlp": ("MLPs / experts", "#009E73"),
    "norm": ("norms", "#64748b"),
}


@dataclass
class RuleContext:
    """What a block's forward needs from the explanation: ``rules`` (None: the original computation), ``record`` (a
    list of :class:`core.lrp.mixer.ScanRecord`, or None), ``ledger`` / ``trace`` (:mod:`core.lrp.trace`, or None),
    ``layer`` (the module's layer index), ``name`` (its path in the model), ``attention`` (a list that collects
    ``(layer, probabilities (B, h, L, S))`` of each attention layer for the rollout methods, or None)."""

    rules: Any
    record: list | None = None
    ledger: Any = None
    trace: Any = None
    layer: int = 0
    name: str = ""
    attention: list | None = None


@dataclass(frozen=True)
class Block:
    """A registry entry: ``label`` and ``kind`` (``ssm``, ``attention``, ``mlp``, ``norm``) for views, ``classes``
    (qualified class names), ``forward(ctx, module, *args, **kwargs)``, ``rule`` (one line, for the docs and views),
    ``mixer`` (a sequence mixer: counted as a layer by the progress, recomputed when memory asks for it)."""

    label: str
    kind: str
    classes: tuple[str, ...]
    forward: Callable
    rule: str
    mixer: bool = False
    short: str = ""  # a chart's row name ("Mamba-2", "attention", "experts"); the label when empty

    @property
    def name(self) -> str:
        return self.short or self.label


# ---- SSM mixers ---------------------------------------------------------------------------------------------------
def _no_cache(cache_params=None, attention_mask=None, **kwargs) -> None:
    from core.errors import BadInputError

    if cache_params is not None or (attention_mask is not None and not bool(torch.all(attention_mask == 1))):
        raise BadInputError("MambaLRP explains one unpadded sequence without a cache.",
                            fix="Call the model without cache_params / padding.")


def _mamba(ctx, module, hidden_states, cache_params=None, attention_mask=None, **kwargs):
    _no_cache(cache_params, attention_mask)
    return mamba_mixer_forward(module, hidden_states, ctx.rules, ctx.record, ctx.layer, ledger=ctx.ledger)


def _bimamba(ctx, module, hidden_states):
    return bimamba_mixer_forward(module, hidden_states, ctx.rules, ctx.record, ctx.layer)


def _mamba2(ctx, module, hidden_states, cache_params=None, attention_mask=None, **kwargs):
    _no_cache(cache_params, attention_mask)
    return mamba2_mixer_forward(module, hidden_states, ctx.rules, ctx.record, ctx.layer, ledger=ctx.ledger)


# ---- attention ----------------------------------------------------------------------------------------------------
def _attention(ctx, module, *args, **kwargs):
    """The attention module's own forward (projections, RoPE, its multipliers) with :func:`attention_function` as its
    attention implementation (set on the module's private config copy by :mod:`core.lrp.context`)."""
    if kwargs.get("past_key_values") is not None:
        from core.errors import BadInputError
        raise BadInputError("MambaLRP explains one sequence without a cache.",
                            fix="Call the model with use_cache=False.")
    return type(module).forward(module, *args, **kwargs)


def attention_function(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0,
                       softcap: float | None = None, sliding_window: int | None = None, **kwargs):
    """Eager attention (transformers' ``eager_attention_forward``: GQA, scaling, Gemma 2's soft-capping, mask, softmax,
    dropout off) with AttnLRP's rules when the module's :class:`RuleContext` has them. ``query: (B, h, L, d)``,
    ``key, value: (B, h_kv, S, d)`` -> ``(B, L, h, d)`` and the probabilities ``(B, h, L, S)``. The softmax runs in
    float32 (float64 for float64 inputs). Without a mask (transformers leaves it out where the causal one is all
    there is) the causal mask, within ``sliding_window`` when one is given."""
    ctx = module.__dict__.get("_layerwise_ctx") or RuleContext(None)
    rules = ctx.rules
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    uniform = rules is not None and rules.gate  # the uniform rule on q.k and on softmax x v: half to each factor
    if uniform:
        query, key, value = R.share(query, 0.5), R.share(key, 0.5), R.share(value, 0.5)
    # the scale on q (L x d) rather than on the scores (L x S): the same values to rounding, one pass less each way
    scores = R.softcap(torch.matmul(query * scaling, key.transpose(2, 3)), softcap, rules)
    length, source = scores.shape[-2:]
    if attention_mask is None:  # in place: neither the product's nor the cap's backward reads its output
        if length > 1:
            scores.masked_fill_(_hidden(length, source, sliding_window or 0, scores.device), float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask[..., :source], float("-inf"))
    else:
        scores = scores + attention_mask[..., :source].to(scores.dtype)
    probs = torch.softmax(scores.to(R.compute_dtype(query.dtype)), dim=-1).to(query.dtype)
    if ctx.ledger is not None:
        ctx.ledger.softmax(scores, probs)
    if ctx.attention is not None:
        ctx.attention.append((ctx.layer, probs))
    out = torch.matmul(R.share(probs, 0.5) if uniform else probs, value)
    return out.transpose(1, 2).contiguous(), probs


@functools.lru_cache(maxsize=2)  # the last masks used (one model's windowed and full layers)
def _hidden(length: int, source: int, window: int, device: torch.device) -> torch.Tensor:
    """``(length, source)``: True where a query may not see a key (after it, or ``window`` or more before it)."""
    ones = torch.ones(length, source, dtype=torch.bool, device=device)
    allowed = ones.tril(source - length)
    if window:
        allowed = allowed & ~ones.tril(source - length - window)
    return ~allowed


@functools.lru_cache(maxsize=1)
def register_attention() -> str:
    """Register :func:`attention_function` with transformers once (a new name; nothing else changes)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_IMPLEMENTATION, attention_function)
    return ATTENTION_IMPLEMENTATION


# ---- MLPs and mixtures of experts ----------------------------------------------------------------------------------
def _gated_mlp(ctx, module, x):
    """``down(act(gate(x)) * up(x))`` (Llama and every decoder that copies its MLP; Bamba, Jamba)."""
    a = R.activation(module.gate_proj(x), module.act_fn, ctx.rules)
    return module.down_proj(_product(a, module.up_proj(x), ctx.rules))


def _fused_mlp(ctx, module, x, layer_idx=None):
    """One projection split into ``(gate, up)``, then ``down(act(gate) * up)``: Phi-3 (``gate_up_proj``), Granite
    4.0-H's shared MLP (``input_linear`` / ``output_linear``) and Zamba2's shared MLP, whose ``gate_up_proj`` gets the
    per-layer LoRA adapter of decoder layer ``layer_idx`` added (a linear map: LRP-0)."""
    proj = getattr(module, "gate_up_proj", None) or module.input_linear
    g = proj(x)
    adapters = getattr(module, "gate_up_proj_adapter_list", None)
    if adapters is not None:
        g = g + adapters[module.layer_dic[layer_idx]](x)
    gate, up = g.chunk(2, dim=-1)
    act = next(getattr(module, a) for a in ("act_fn", "activation_fn", "activation") if hasattr(module, a))
    out = getattr(module, "down_proj", None) or module.output_linear
    return out(_product(R.activation(gate, act, ctx.rules), up, ctx.rules))


def _falcon_h1_mlp(ctx, module, x):
    """Falcon-H1: ``down(up(x) * act(gate(x) * m_gate)) * m_down``."""
    a = R.activation(module.gate_proj(x) * module.gate_multiplier, module.act_fn, ctx.rules)
    return module.down_proj(_product(module.up_proj(x), a, ctx.rules)) * module.down_multiplier


def _plain_mlp(ctx, module, x):
    """``down(act(up(x)))``: Nemotron-H's squared ReLU (``up_proj`` / ``down_proj``), GPT-2's GELU over its Conv1D
    layers (``c_fc`` / ``c_proj``; dropout off in eval)."""
    up, down = (module.up_proj, module.down_proj) if hasattr(module, "up_proj") else (module.c_fc, module.c_proj)
    act = getattr(module, "act_fn", None) or module.act
    return down(R.activation(up(x), act, ctx.rules))


def _product(a, b, rules):
    return a * b if rules is None else R.gate(a, b, rules)


def _sparse_moe(ctx, module, layer_input, softmax_first: bool = False):
    """A sparse mixture of experts: per token the router's top-k experts, each a gated MLP,
    ``sum_k weight_k x expert_k(x)`` with the uniform rule on each product. The router (``module.router``, or
    ``module.gate`` in Qwen3-MoE) takes the softmax over the chosen logits (Granite 4.0-H; Qwen3-MoE with
    ``norm_topk_prob``, whose renormalised top-k of the full softmax has the same values), or with ``softmax_first``
    over all experts and keeps the chosen probabilities as they are (Jamba; Qwen3-MoE without renormalising). The
    softmax is taken as published and noted in the ledger."""
    batch, length, width = layer_input.shape
    h = layer_input.reshape(-1, width)
    router, experts = getattr(module, "router", None) or module.gate, module.experts
    logits = F.linear(h, router.weight.to(h.dtype))
    if softmax_first and not getattr(router, "norm_topk_prob", False):
        probs = torch.softmax(logits.to(R.compute_dtype(h.dtype)), dim=-1)
        if ctx.ledger is not None:
            ctx.ledger.softmax(logits, probs)
        weights, index = probs.topk(router.top_k, dim=-1)
        weights = weights.to(h.dtype)
    else:
        top, index = logits.topk(router.top_k, dim=-1)
        weights = torch.softmax(top.to(R.compute_dtype(h.dtype)), dim=-1).to(h.dtype)
        if ctx.ledger is not None:
            ctx.ledger.softmax(top, weights)
    out = torch.zeros_like(h)
    for e in torch.unique(index).tolist():
        token, slot = torch.where(index == e)
        gate, up = F.linear(h[token], experts.gate_up_proj[e]).chunk(2, dim=-1)
        y = F.linear(_product(R.activation(gate, experts.act_fn, ctx.rules), up, ctx.rules), experts.down_proj[e])
        out = out.index_add(0, token, _product(y, weights[token, slot, None], ctx.rules))
    return out.reshape(batch, length, width)


# ---- norms --------------------------------------------------------------------------------------------------------
def _rms_norm(ctx, module, hidden_states):
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
    return R.rms_norm(hidden_states, module.weight, eps, ctx.rules)


def _gemma_rms_norm(ctx, module, x):
    """Gemma 2 / 3: ``normed * (1 + weight)``."""
    return R.rms_norm(x, module.weight, module.eps, ctx.rules, offset=1.0)


def _layer_norm(ctx, module, x):
    out = R.layer_norm(x, module, ctx.rules)
    if ctx.ledger is not None and module.bias is not None:
        ctx.ledger.bias(out, module.bias)
    return out


LINEAR_LAYERS = ("torch.nn.modules.linear.Linear", "transformers.pytorch_utils.Conv1D")  # whose bias the ledger notes


def has_bias(module: nn.Module) -> bool:
    """Whether ``module`` is a linear layer (``nn.Linear``, GPT-2's ``Conv1D``) with a bias: a constant it adds."""
    return getattr(module, "bias", None) is not None and any(
        _qualified(cls) in LINEAR_LAYERS for cls in type(module).__mro__)


def _tf(model: str, *classes: str) -> tuple[str, ...]:
    return tuple(f"transformers.models.{model}.modeling_{model}.{c}" for c in classes)


# the decoder families' classes, per kind of block (transformers.models.<module>.modeling_<module>.<prefix><Kind>)
_DECODERS = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "qwen3_moe": "Qwen3Moe",
             "smollm3": "SmolLM3", "olmo2": "Olmo2", "phi3": "Phi3", "gemma2": "Gemma2", "gemma3": "Gemma3"}
_GATED = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "smollm3", "olmo2", "gemma2", "gemma3")


def _each(kind: str, modules) -> tuple[str, ...]:
    return tuple(c for m in modules for c in _tf(m, _DECODERS[m] + kind))


_GATED_RULE = "AttnLRP: identity rule on the activation, uniform rule on the product"
BLOCKS: dict[str, Block] = {
    "mamba": Block("Mamba mixer", "ssm", _tf("mamba", "MambaMixer") + _tf("jamba", "JambaMambaMixer"), _mamba,
                   "MambaLRP: SiLU identity, A/B/C/dt constant, half rule on the gate", mixer=True, short="Mamba"),
    "falcon-mamba": Block("Falcon-Mamba mixer", "ssm", _tf("falcon_mamba", "FalconMambaMixer"), _mamba,
                          "MambaLRP; the RMS norms on dt, B, C are on the constant selection path", mixer=True,
                          short="Mamba"),
    "bimamba": Block("Bidirectional Mamba mixer", "ssm", ("core.lrp.models.BiMambaMixer",), _bimamba,
                     "MambaLRP on both scan directions", mixer=True, short="BiMamba"),
    "mamba2": Block("Mamba-2 mixer (SSD)", "ssm",
                    _tf("mamba2", "Mamba2Mixer") + _tf("bamba", "BambaMixer")
                    + _tf("granitemoehybrid", "GraniteMoeHybridMambaLayer") + _tf("nemotron_h", "NemotronHMamba2Mixer")
                    + _tf("zamba2", "Zamba2MambaMixer") + _tf("falcon_h1", "FalconH1Mixer"), _mamba2,
                    "MambaLRP: conv linear, SiLU identity, SSD with A/B/C/dt constant, gated norm = half rule + "
                    "LN-rule", mixer=True, short="Mamba-2"),
    "attention": Block("Attention", "attention",
                       _tf("bamba", "BambaAttention") + _tf("granitemoehybrid", "GraniteMoeHybridAttention")
                       + _tf("falcon_h1", "FalconH1Attention") + _tf("nemotron_h", "NemotronHAttention")
                       + _tf("zamba2", "Zamba2Attention") + _tf("jamba", "JambaAttention")
                       + _tf("gpt2", "GPT2Attention") + _each("Attention", _DECODERS), _attention,
                       "AttnLRP: uniform rule on q.k and softmax x v, softmax as published, soft-capping identity",
                       mixer=True, short="attention"),
    "gated-mlp": Block("Gated MLP", "mlp", _tf("bamba", "BambaMLP") + _tf("jamba", "JambaMLP") + _each("MLP", _GATED),
                       _gated_mlp, _GATED_RULE, short="MLP"),
    "fused-mlp": Block("Gated MLP (one gate_up projection)", "mlp", _tf("phi3", "Phi3MLP") + _tf("zamba2", "Zamba2MLP"),
                       _fused_mlp, _GATED_RULE, short="MLP"),
    "falcon-h1-mlp": Block("Gated MLP (Falcon-H1)", "mlp", _tf("falcon_h1", "FalconH1MLP"), _falcon_h1_mlp,
                           _GATED_RULE, short="MLP"),
    "granite-mlp": Block("Shared MLP (Granite 4.0-H)", "mlp", _tf("granitemoehybrid", "GraniteMoeHybridMLP"),
                         _fused_mlp, _GATED_RULE, short="shared MLP"),
    "mlp": Block("MLP", "mlp", _tf("nemotron_h", "NemotronHMLP") + _tf("gpt2", "GPT2MLP"), _plain_mlp,
                 "AttnLRP: identity rule on the activation", short="MLP"),
    "moe": Block("Mixture of experts", "mlp", _tf("granitemoehybrid", "GraniteMoeHybridMoE"), _sparse_moe,
                 "AttnLRP: experts as gated MLPs, uniform rule on router weight x expert output", short="experts"),
    "moe-softmax-first": Block(
        "Mixture of experts (softmax over all experts)", "mlp",
        _tf("qwen3_moe", "Qwen3MoeSparseMoeBlock") + _tf("jamba", "JambaSparseMoeBlock"),
        functools.partial(_sparse_moe, softmax_first=True),
        "AttnLRP: experts as gated MLPs, uniform rule on router weight x expert output", short="experts"),
    "rms-norm": Block("RMSNorm", "norm",
                      _tf("mamba", "MambaRMSNorm") + _tf("mamba2", "Mamba2RMSNorm")
                      + _tf("falcon_mamba", "FalconMambaRMSNorm") + _tf("bamba", "BambaRMSNorm")
                      + _tf("granitemoehybrid", "GraniteMoeHybridRMSNorm") + _tf("falcon_h1", "FalconH1RMSNorm")
                      + _tf("nemotron_h", "NemotronHRMSNorm") + _tf("zamba2", "Zamba2RMSNorm")
                      + _tf("jamba", "JambaRMSNorm") + _each("RMSNorm", [m for m in _DECODERS if "gemma" not in m]),
                      _rms_norm, "LN-rule (AttnLRP identity rule): the normaliser a constant"),
    "gemma-rms-norm": Block("RMSNorm (Gemma: 1 + weight)", "norm", _each("RMSNorm", ["gemma2", "gemma3"]),
                            _gemma_rms_norm, "LN-rule (AttnLRP identity rule): the normaliser a constant"),
    "layer-norm": Block("LayerNorm", "norm", ("torch.nn.modules.normalization.LayerNorm",), _layer_norm,
                        "LN-rule: the standard deviation a constant; the bias absorbs its share"),
}

_BY_CLASS = {cls: name for name, block in BLOCKS.items() for cls in block.classes}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def block_of(module: nn.Module) -> str | None:
    """The registry name of the block ``module`` is (its class or a base class listed), or None."""
    for cls in type(module).__mro__:
        name = _BY_CLASS.get(_qualified(cls))
        if name is not None:
            return name
    return None


def sequence_mixers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of every sequence mixer of ``model`` (SSM mixers and attention layers), in order."""
    out = []
    for path, m in model.named_modules():
        name = block_of(m)
        if name is not None and BLOCKS[name].mixer:
            out.append((path, m))
    return out
