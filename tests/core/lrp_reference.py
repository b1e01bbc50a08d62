"""A slow reference for the MambaLRP / AttnLRP rules on Mamba-2, Falcon-Mamba and the hybrids: each family's forward
written out by hand, with every rule as an explicit linearisation built from detached copies, then plain autograd.

Nothing here calls the rules' code (:mod:`core.lrp`): the conv is a loop over taps, the SSM the step-by-step
recurrence, attention a loop over heads, the experts a loop over tokens; only the model's weights (and its rotary
cos/sin, a constant) are read. The pieces:

- SiLU (any activation): ``x * c`` with ``c = act(x) / x`` detached (identity rule);
- a product ``a * b`` (the SSM gate, the gated MLP, router weight x expert, q.k, softmax x v):
  ``(a * b.detach() + a.detach() * b) / 2`` (half / uniform rule);
- RMSNorm: ``x * r`` with ``r = rsqrt(mean(x^2) + eps)`` detached (LN-rule);
- the selective scan: ``dt``, ``A``, ``B``, ``C`` detached, the recurrence linear in ``x``;
- softmax: itself (AttnLRP's softmax rule is its gradient).

``reference_relevance(model, ids, target)`` -> (per-token relevance, logit), float64.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _ident(x, fn):
    c = (fn(x) / x).detach()
    return x * c


def _half(a, b):
    return 0.5 * (a * b.detach() + a.detach() * b)


def _half_mm(a, b):
    return 0.5 * (a @ b.detach() + a.detach() @ b)


def _rms(x, w, eps):
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).detach()
    return w * (x * r)


def _group_rms(x, w, eps, groups):
    shape = x.shape
    g = x.reshape(*shape[:-1], groups, shape[-1] // groups)
    r = torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps).detach()
    return w * (g * r).reshape(shape)


def _conv(x, weight, bias):
    """Causal depthwise conv by taps: ``x: (L, C)``, ``weight: (C, 1, K)``."""
    length, k = x.shape[0], weight.shape[-1]
    out = torch.zeros_like(x) + (bias if bias is not None else 0)
    for t in range(length):
        for j in range(k):
            s = t - (k - 1) + j
            if s >= 0:
                out[t] = out[t] + weight[:, 0, j] * x[s]
    return out


def _linear(x, lin):
    return F.linear(x, lin.weight, lin.bias)


# ---- SSM mixers ----------------------------------------------------------------------------------------------------
def mamba2_mixer(m, h):
    """``h: (L, H)`` -> ``(L, H)``, any Mamba-2 mixer of transformers (Falcon-H1's multipliers included)."""
    if hasattr(m, "ssm_in_multiplier"):
        h = h * m.ssm_in_multiplier
    p = _linear(h, m.in_proj)
    if getattr(m, "mup_vector", None) is not None:
        p = p * m.mup_vector[0, 0]
    heads, hd, groups, n = m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size
    inner = heads * hd
    z, xbc, dt = p[:, :inner], p[:, inner:2 * inner + 2 * groups * n], p[:, 2 * inner + 2 * groups * n:]
    xbc = _ident(_conv(xbc, m.conv1d.weight, m.conv1d.bias), F.silu)
    x, B, C = xbc[:, :inner], xbc[:, inner:inner + groups * n], xbc[:, inner + groups * n:]
    dt = F.softplus(dt + m.dt_bias).clamp(*getattr(m, "time_step_limit", (0.0, float("inf")))).detach()
    A = -torch.exp(m.A_log).detach()
    B, C = B.detach().reshape(-1, groups, n), C.detach().reshape(-1, groups, n)
    per = heads // groups
    ys = []
    state = [torch.zeros(hd, n, dtype=h.dtype) for _ in range(heads)]
    for t in range(h.shape[0]):
        row = []
        for k in range(heads):
            g = k // per
            xk = x[t, k * hd:(k + 1) * hd]
            state[k] = torch.exp(dt[t, k] * A[k]) * state[k] + dt[t, k] * xk[:, None] * B[t, g][None, :]
            row.append(state[k] @ C[t, g] + m.D[k] * xk)
        ys.append(torch.cat(row))
    y = torch.stack(ys)
    gate = _ident(z, F.silu)
    if getattr(m, "mamba_rms_norm", True):
        norm = m.norm
        groups_n = getattr(norm, "n_groups", None) or inner // norm.group_size
        if getattr(norm, "norm_before_gate", False):
            y = _half(_group_rms(y, norm.weight, norm.variance_epsilon, groups_n), gate)
        else:
            y = _group_rms(_half(y, gate), norm.weight, norm.variance_epsilon, groups_n)
    else:
        y = _half(y, gate)
    return _linear(y, m.out_proj)


def falcon_mamba_mixer(m, h):
    """Mamba-1 with RMS norms on dt, B and C (all detached with the selection path)."""
    p = _linear(h, m.in_proj)
    inner = p.shape[-1] // 2
    x, z = p[:, :inner], p[:, inner:]
    u = _ident(_conv(x, m.conv1d.weight, m.conv1d.bias), F.silu)
    r, n = m.dt_proj.weight.shape[1], m.A_log.shape[1]
    sel = F.linear(u, m.x_proj.weight).detach()
    eps = m.rms_eps
    norm = lambda v: v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)  # noqa: E731
    dt, B, C = norm(sel[:, :r]), norm(sel[:, r:r + n]), norm(sel[:, r + n:])
    delta = F.softplus(dt @ m.dt_proj.weight.T + m.dt_proj.bias).detach()
    A = -torch.exp(m.A_log).detach()
    state = torch.zeros(inner, n, dtype=h.dtype)
    ys = []
    for t in range(h.shape[0]):
        state = torch.exp(delta[t][:, None] * A) * state + (delta[t][:, None] * B[t][None, :]) * u[t][:, None]
        ys.append(state @ C[t] + m.D * u[t])
    return _linear(_half(torch.stack(ys), _ident(z, F.silu)), m.out_proj)


# ---- attention, MLPs --------------------------------------------------------------------------------------------
def _rotate(x, cos, sin):
    d = cos.shape[-1]
    xr, xp = x[..., :d], x[..., d:]
    half = xr.shape[-1] // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    return torch.cat([xr * cos + rotated * sin, xp], dim=-1)


def attention(m, h, rope=None, key_multiplier=1.0):
    """Causal multi-head attention, head by head; ``rope``: (cos, sin) of shape (L, d_rot) or None."""
    length = h.shape[0]
    d = m.head_dim
    q = _linear(h, m.q_proj).reshape(length, -1, d)
    k = _linear(h, m.k_proj).reshape(length, -1, d) * key_multiplier
    v = _linear(h, m.v_proj).reshape(length, -1, d)
    if rope is not None:
        cos, sin = rope
        q, k = _rotate(q, cos[:, None], sin[:, None]), _rotate(k, cos[:, None], sin[:, None])
    heads, kv = q.shape[1], k.shape[1]
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    outs = []
    for i in range(heads):
        j = i // (heads // kv)
        scores = _half_mm(q[:, i], k[:, j].T) * m.scaling
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        outs.append(_half_mm(probs, v[:, j]))
    return _linear(torch.cat(outs, dim=-1), m.o_proj)


def gated_mlp(m, h):
    return _linear(_half(_ident(_linear(h, m.gate_proj), m.act_fn), _linear(h, m.up_proj)), m.down_proj)


def falcon_h1_mlp(m, h):
    a = _ident(_linear(h, m.gate_proj) * m.gate_multiplier, m.act_fn)
    return _linear(_half(_linear(h, m.up_proj), a), m.down_proj) * m.down_multiplier


def granite_mlp(m, h):
    gu = _linear(h, m.input_linear)
    g, u = gu[:, :gu.shape[-1] // 2], gu[:, gu.shape[-1] // 2:]
    return _linear(_half(_ident(g, m.activation), u), m.output_linear)


def granite_moe(m, h):
    router, experts = m.router, m.experts
    out = []
    for t in range(h.shape[0]):
        logits = h[t] @ router.weight.T
        top, idx = logits.topk(router.top_k)
        w = torch.softmax(top, dim=-1)
        acc = torch.zeros_like(h[t])
        for slot, e in enumerate(idx.tolist()):
            gu = experts.gate_up_proj[e] @ h[t]
            g, u = gu[:gu.shape[0] // 2], gu[gu.shape[0] // 2:]
            y = experts.down_proj[e] @ _half(_ident(g, experts.act_fn), u)
            acc = acc + _half(y, w[slot])
        out.append(acc)
    return torch.stack(out)


def relu2_mlp(m, h):
    return _linear(_ident(_linear(h, m.up_proj), m.act_fn), m.down_proj)


def _norm(mod, x):
    return _rms(x, mod.weight, getattr(mod, "variance_epsilon", getattr(mod, "eps", 1e-6)))


def _rope(model_body, h):
    rot = getattr(model_body, "rotary_emb", None)
    if rot is None:
        return None
    pos = torch.arange(h.shape[0])[None]
    cos, sin = rot(h[None], pos)
    return cos[0].to(h.dtype), sin[0].to(h.dtype)


# ---- whole models -------------------------------------------------------------------------------------------------
def hidden_states(model, e):
    """The last hidden state (after the final norm), ``e: (L, H)`` input embeddings as the model receives them."""
    name = type(model).__name__
    ssm_only = {"Mamba2ForCausalLM": mamba2_mixer, "FalconMambaForCausalLM": falcon_mamba_mixer}
    if name in ssm_only:
        h = e
        for layer in model.backbone.layers:
            h = h + ssm_only[name](layer.mixer, _norm(layer.norm, h))
        return _norm(model.backbone.norm_f, h)
    body = model.model
    rope = _rope(body, e)
    if name == "BambaForCausalLM":
        h = e
        for layer in body.layers:
            x = _norm(layer.input_layernorm, h)
            h = h + (mamba2_mixer(layer.mamba, x) if layer.block_type == "linear_attention" else
                     attention(layer.self_attn, x, rope))
            h = h + gated_mlp(layer.feed_forward, _norm(layer.pre_ff_layernorm, h))
        return _norm(body.final_layernorm, h)
    if name == "GraniteMoeHybridForCausalLM":
        h = e * body.embedding_multiplier
        for layer in body.layers:
            x = _norm(layer.input_layernorm, h)
            mixed = mamba2_mixer(layer.mamba, x) if layer.mamba is not None else attention(layer.self_attn, x, rope)
            h = h + mixed * layer.residual_multiplier
            x = _norm(layer.post_attention_layernorm, h)
            ff = granite_mlp(layer.shared_mlp, x)
            if layer.has_experts:
                ff = granite_moe(layer.block_sparse_moe, x) + ff
            h = h + ff * layer.residual_multiplier
        return _norm(body.norm, h)
    if name == "NemotronHForCausalLM":
        h = e
        for layer in body.layers:
            x = _norm(layer.norm, h)
            kind = layer.block_type
            h = h + (mamba2_mixer(layer.mixer, x) if kind == "linear_attention" else
                     attention(layer.mixer, x, rope) if kind == "full_attention" else relu2_mlp(layer.mixer, x))
        return _norm(body.norm_f, h)
    if name == "FalconH1ForCausalLM":
        h = e
        for layer in body.layers:
            x = _norm(layer.input_layernorm, h)
            ssm = mamba2_mixer(layer.mamba, x) * layer.ssm_out_multiplier
            att = attention(layer.self_attn, x * layer.attention_in_multiplier, rope,
                            layer.self_attn.key_multiplier) * layer.attn_out_multiplier
            h = h + ssm + att
            h = h + falcon_h1_mlp(layer.feed_forward, _norm(layer.pre_ff_layernorm, h))
        return _norm(body.final_layernorm, h)
    raise ValueError(name)


def logit_of(model, hidden_last, target):
    name = type(model).__name__
    z = hidden_last @ model.lm_head.weight[target]
    if name == "GraniteMoeHybridForCausalLM":
        z = z / model.config.logits_scaling
    if name == "FalconH1ForCausalLM":
        z = z * model.model.lm_head_multiplier
    return z


def reference_relevance(model, ids: torch.Tensor, target: int) -> tuple[torch.Tensor, float]:
    """Per-token relevance and the explained logit by the hand-written linearisation (float64 model)."""
    emb = model.get_input_embeddings().weight[ids[0]].detach().clone()
    if type(model).__name__ == "FalconH1ForCausalLM":
        emb = emb * model.model.embedding_multiplier
    e = emb.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        logit = logit_of(model, hidden_states(model, e)[-1], target)
        (g,) = torch.autograd.grad(logit, e)
    finally:
        for p in params:
            p.requires_grad_(True)
    return (e.detach() * g).sum(-1), float(logit.detach())
