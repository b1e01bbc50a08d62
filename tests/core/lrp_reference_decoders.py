"""A slow reference for AttnLRP on the transformer decoders (and Zamba2, Jamba), as tests/core/lrp_reference.py is for
the SSM families: each family's forward written out by hand from the model's weights, every rule an explicit
linearisation from detached copies, then plain autograd. Nothing here calls the rules' code or a module's forward
(except the rotary tables, constants, and the embedding lookup with Gemma's scale).

The pieces (from tests/core/lrp_reference.py): the identity rule ``x * const(act(x) / x)`` for activations and for
Gemma 2's soft-capping, the uniform rule ``(a b' + a' b) / 2`` for ``q . k``, ``softmax x v``, ``act(gate) * up`` and
``router weight x expert``, the LN-rule (the normaliser a constant) for RMSNorm, Gemma's ``1 + weight`` norm and
LayerNorm (whose centring is linear), softmax as itself. Attention goes head by head with the causal mask (within a
sliding window where the layer has one), the experts token by token, GPT-2's Conv1D as ``x @ W + b``.

``reference_relevance(model, ids, target)`` -> (per-token relevance, logit), float64.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.core.lrp_reference import _conv, _half, _half_mm, _ident, _linear, _rms, _rotate, mamba2_mixer


def _is_gemma(mod) -> bool:
    return type(mod).__name__.startswith("Gemma")


def _norm(mod, x):
    """RMSNorm (Gemma's with ``1 + weight``) or LayerNorm, the normaliser detached."""
    if isinstance(mod, torch.nn.LayerNorm):
        centred = x - x.mean(-1, keepdim=True)
        std = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + mod.eps).detach()
        return centred / std * mod.weight + mod.bias
    eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", 1e-6))
    return _rms(x, (1.0 + mod.weight) if _is_gemma(mod) else mod.weight, eps)


def _conv1d(x, layer):
    """GPT-2's Conv1D: ``x @ W + b`` with ``W: (in, out)``."""
    return x @ layer.weight + layer.bias


def _adapter(seq, x):
    """A Zamba2 LoRA adapter (two bias-free linear layers), or nothing (``nn.Identity`` slots are unused)."""
    if isinstance(seq, torch.nn.Identity):
        return 0.0
    return x @ seq[0].weight.T @ seq[1].weight.T


def _softcap(x, cap):
    return x if cap is None else _ident(x, lambda t: torch.tanh(t / cap) * cap)


def _window(m):
    """The layer's sliding window: the module's own (Qwen2, Gemma: None on full layers), else its config's
    (Mistral: every layer)."""
    if hasattr(m, "sliding_window"):
        return m.sliding_window
    return getattr(m.config, "sliding_window", None)


def attention(m, h, rope, layer_idx=None):
    """Causal multi-head attention of any of the decoders, head by head; ``h: (L, H)``."""
    length, d = h.shape[0], m.head_dim
    if hasattr(m, "c_attn"):  # GPT-2
        q, k, v = _conv1d(h, m.c_attn).chunk(3, dim=-1)
    elif hasattr(m, "qkv_proj"):  # Phi-3
        qkv = _linear(h, m.qkv_proj)
        nq = m.config.num_attention_heads * d
        q, k, v = qkv[:, :nq], qkv[:, nq:nq + m.num_key_value_heads * d], qkv[:, nq + m.num_key_value_heads * d:]
    else:
        q, k, v = _linear(h, m.q_proj), _linear(h, m.k_proj), _linear(h, m.v_proj)
        if getattr(m.config, "use_shared_attention_adapter", False):  # Zamba2
            slot = m.layer_dic[layer_idx]
            q = q + _adapter(m.linear_q_adapter_list[slot], h)
            k = k + _adapter(m.linear_k_adapter_list[slot], h)
            v = v + _adapter(m.linear_v_adapter_list[slot], h)
    q_norm, k_norm = getattr(m, "q_norm", None), getattr(m, "k_norm", None)
    whole = q_norm is not None and q_norm.weight.shape[0] == q.shape[-1]  # OLMo 2: over all heads at once
    if whole:
        q, k = _norm(q_norm, q), _norm(k_norm, k)
    q, k, v = q.reshape(length, -1, d), k.reshape(length, -1, d), v.reshape(length, -1, d)
    if q_norm is not None and not whole:  # Qwen3, Gemma 3: per head
        q, k = _norm(q_norm, q), _norm(k_norm, k)
    if rope is not None and getattr(m, "use_rope", True):
        cos, sin = rope
        q, k = _rotate(q, cos[:, None], sin[:, None]), _rotate(k, cos[:, None], sin[:, None])
    heads, kv = q.shape[1], k.shape[1]
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    window = _window(m)
    if window:
        mask = mask & ~torch.ones(length, length, dtype=torch.bool).tril(-window)
    outs = []
    for i in range(heads):
        j = i // (heads // kv)
        scores = _softcap(_half_mm(q[:, i], k[:, j].T) * m.scaling, getattr(m, "attn_logit_softcapping", None))
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        outs.append(_half_mm(probs, v[:, j]))
    out = torch.cat(outs, dim=-1)
    return _conv1d(out, m.c_proj) if hasattr(m, "c_proj") else _linear(out, m.o_proj)


def mlp(m, h, layer_idx=None):
    """Any of the decoders' MLPs: gated (``gate_proj``, ``up_proj``), fused (Phi-3, Zamba2 with its adapter), GPT-2's."""
    if hasattr(m, "c_fc"):
        return _conv1d(_ident(_conv1d(h, m.c_fc), m.act), m.c_proj)
    if hasattr(m, "gate_up_proj"):
        gu = _linear(h, m.gate_up_proj)
        if hasattr(m, "gate_up_proj_adapter_list"):
            gu = gu + _adapter(m.gate_up_proj_adapter_list[m.layer_dic[layer_idx]], h)
        gate, up = gu.chunk(2, dim=-1)
        act = getattr(m, "act_fn", None) or m.activation_fn
        return _linear(_half(_ident(gate, act), up), m.down_proj)
    return _linear(_half(_ident(_linear(h, m.gate_proj), m.act_fn), _linear(h, m.up_proj)), m.down_proj)


def moe(m, h, softmax_first):
    """Top-k experts token by token: softmax over the chosen logits, or (``softmax_first``) over all of them."""
    router = getattr(m, "router", None) or m.gate
    experts = m.experts
    out = []
    for t in range(h.shape[0]):
        logits = h[t] @ router.weight.T
        if softmax_first and not getattr(router, "norm_topk_prob", False):
            w, idx = torch.softmax(logits, dim=-1).topk(router.top_k)
        else:
            top, idx = logits.topk(router.top_k)
            w = torch.softmax(top, dim=-1)
        acc = torch.zeros_like(h[t])
        for slot, e in enumerate(idx.tolist()):
            g, u = (experts.gate_up_proj[e] @ h[t]).chunk(2)
            acc = acc + _half(experts.down_proj[e] @ _half(_ident(g, experts.act_fn), u), w[slot])
        out.append(acc)
    return torch.stack(out)


def jamba_mixer(m, h):
    """Jamba's Mamba-1 mixer: RMS norms (with weights) on dt, B and C, all on the detached selection path."""
    p = _linear(h, m.in_proj)
    inner = p.shape[-1] // 2
    x, z = p[:, :inner], p[:, inner:]
    u = _ident(_conv(x, m.conv1d.weight, m.conv1d.bias), F.silu)
    r, n = m.dt_proj.weight.shape[1], m.A_log.shape[1]
    sel = (u @ m.x_proj.weight.T).detach()

    def norm(mod, v):
        return mod.weight * v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)

    dt, B, C = norm(m.dt_layernorm, sel[:, :r]), norm(m.b_layernorm, sel[:, r:r + n]), norm(m.c_layernorm, sel[:, r + n:])
    delta = F.softplus(dt @ m.dt_proj.weight.T + m.dt_proj.bias).detach()
    A = -torch.exp(m.A_log).detach()
    state = torch.zeros(inner, n, dtype=h.dtype)
    ys = []
    for t in range(h.shape[0]):
        state = torch.exp(delta[t][:, None] * A) * state + (delta[t][:, None] * B[t][None, :]) * u[t][:, None]
        ys.append(state @ C[t] + m.D * u[t])
    return _linear(_half(torch.stack(ys), _ident(z, F.silu)), m.out_proj)


def _rope(body, h, layer_type=None):
    rot = getattr(body, "rotary_emb", None)
    if rot is None:
        return None
    pos = torch.arange(h.shape[0])[None]
    cos, sin = rot(h[None], pos, layer_type) if layer_type else rot(h[None], pos)
    return cos[0].to(h.dtype), sin[0].to(h.dtype)


def _ff(layer, x):
    ff = getattr(layer, "mlp", None) or layer.feed_forward
    kind = type(ff).__name__
    if kind.endswith(("SparseMoeBlock",)):
        return moe(ff, x, softmax_first=True)
    return mlp(ff, x)


def hidden_states(model, e):
    """The last hidden state (after the final norm); ``e: (L, H)`` the input embeddings as the model receives them."""
    name = type(model).__name__
    if name == "GPT2LMHeadModel":
        body = model.transformer
        h = e + body.wpe.weight[:e.shape[0]]  # learned positions: a constant
        for block in body.h:
            h = h + attention(block.attn, _norm(block.ln_1, h), None)
            h = h + mlp(block.mlp, _norm(block.ln_2, h))
        return _norm(body.ln_f, h)
    body = model.model
    h = e
    if name == "Zamba2ForCausalLM":
        rope = _rope(body, h)
        for i, layer in enumerate(body.layers):
            if hasattr(layer, "shared_transformer"):
                block = layer.shared_transformer
                x = _norm(block.input_layernorm, torch.cat([h, e], dim=-1))
                x = _norm(block.pre_ff_layernorm, attention(block.self_attn, x, rope, i))
                t = _linear(mlp(block.feed_forward, x, i), layer.linear)
                mamba = layer.mamba_decoder
                h = h + mamba2_mixer(mamba.mamba, _norm(mamba.input_layernorm, h + t))
            else:
                h = h + mamba2_mixer(layer.mamba, _norm(layer.input_layernorm, h))
        return _norm(body.final_layernorm, h)
    if name == "JambaForCausalLM":
        rope = None
        for layer in body.layers:
            x = _norm(layer.input_layernorm, h)
            h = h + (jamba_mixer(layer.mamba, x) if hasattr(layer, "mamba") else attention(layer.self_attn, x, rope))
            h = h + _ff(layer, _norm(layer.pre_ff_layernorm, h))
        return _norm(body.final_layernorm, h)
    types = getattr(model.config, "layer_types", None)
    for i, layer in enumerate(body.layers):
        rope = _rope(body, h, types[i] if name == "Gemma3ForCausalLM" else None)
        if name in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):  # sandwich norms
            h = h + _norm(layer.post_attention_layernorm, attention(layer.self_attn, _norm(layer.input_layernorm, h),
                                                                    rope))
            h = h + _norm(layer.post_feedforward_layernorm, _ff(layer, _norm(layer.pre_feedforward_layernorm, h)))
        elif name == "Olmo2ForCausalLM":  # norms after each block only
            h = h + _norm(layer.post_attention_layernorm, attention(layer.self_attn, h, rope))
            h = h + _norm(layer.post_feedforward_layernorm, _ff(layer, h))
        else:  # pre-norm: Llama, Mistral, Qwen2/3, Qwen3-MoE, Phi-3, SmolLM3
            h = h + attention(layer.self_attn, _norm(layer.input_layernorm, h), rope)
            h = h + _ff(layer, _norm(layer.post_attention_layernorm, h))
    return _norm(body.norm, h)


def reference_relevance(model, ids: torch.Tensor, target: int) -> tuple[torch.Tensor, float]:
    """Per-token relevance and the explained logit by the hand-written linearisation (float64 model)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        e = model.get_input_embeddings()(ids)[0].detach().clone().requires_grad_(True)  # Gemma's scale included
        z = hidden_states(model, e)[-1] @ model.get_output_embeddings().weight[target]
        logit = _softcap(z, getattr(model.config, "final_logit_softcapping", None))
        (g,) = torch.autograd.grad(logit, e)
    finally:
        for p in params:
            p.requires_grad_(True)
    return (e.detach() * g).sum(-1), float(logit.detach())
