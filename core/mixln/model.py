"""A LLaMA-style decoder whose norm placement is chosen per layer: Pre-LN, Post-LN, Mix-LN, DeepNorm,
Sandwich-LN, Peri-LN or LayerNorm Scaling (see :mod:`core.mixln.config`). Read it top to bottom.

Parameter names follow transformers' Llama (``model.layers.3.self_attn.q_proj.weight``), so a Pre-LN
model's weights load unchanged into ``LlamaForCausalLM``. The norms a layer owns depend on its placement:

- pre, lns:       input_layernorm (before attention), post_attention_layernorm (before the MLP)  [Llama]; LayerNorm
                  Scaling multiplies both norms' outputs by 1 / sqrt(index + 1) (``norm_scale``, no parameter)
- post, deepnorm: post_attention_layernorm (after attention + residual), post_feedforward_layernorm
                  (after MLP + residual)
- sandwich:       input_layernorm, post_attention_layernorm (on the attention output),
                  pre_feedforward_layernorm, post_feedforward_layernorm (on the MLP output)      [Gemma 2]
- peri:           sandwich layers, and the model's ``embed_norm`` on the embedding output          [Peri-LN]

Every residual-add followed by a norm goes through the fused op :func:`kernels.rmsnorm.add_rmsnorm`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.errors import BadInputError, ModelLoadError
from core.mixln.config import MixLNConfig, check_fits
from core.mixln.rng import normal_float64
from core.files import atomic_write
from kernels.rmsnorm import add_rmsnorm


class RMSNorm(nn.Module):
    """y = N(x + scale * residual); returns (y, x + scale * residual). x: (B, T, D)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                residual_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        return add_rmsnorm(x, residual, self.weight, self.eps, residual_scale)


# ---- rotary position embedding ---------------------------------------------------------------------

def rotary_cos_sin(config: MixLNConfig, seq_len: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: (T, head_dim), the half-split layout of transformers' Llama; computed in float32 (float64 for a
    float64 model), returned in ``dtype``."""
    acc = torch.promote_types(dtype, torch.float32)
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, config.head_dim, 2, device=device,
                                                         dtype=torch.int64).to(acc) / config.head_dim))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=acc), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# ---- the two branches ------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, config: MixLNConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, D); mask: None (causal) or (B, 1, T, T) bool, True where a query may attend."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.num_kv_heads != self.num_heads:
            k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            v = v.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: MixLNConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ---- one decoder layer, five placements ------------------------------------------------------------

class DecoderLayer(nn.Module):
    def __init__(self, config: MixLNConfig, placement: str, index: int = 0):
        """``placement``: this layer's (``config.layer_norms()[index]``); ``index``: 0 for the first layer."""
        super().__init__()
        self.placement = placement
        # LayerNorm Scaling: the authors' code multiplies each pre-norm output by 1 / sqrt(layer_index + 1), with
        # layer_index 0 for the first layer (lmsdss/LayerNorm-Scaling, modeling_llama.py); 1.0 everywhere else
        self.norm_scale = 1.0 / math.sqrt(index + 1) if placement == "lns" else 1.0
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        d, eps = config.hidden_size, config.rms_norm_eps
        if placement in ("pre", "lns", "sandwich"):
            self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        if placement == "sandwich":
            self.pre_feedforward_layernorm = RMSNorm(d, eps)
        if placement in ("post", "deepnorm", "sandwich"):
            self.post_feedforward_layernorm = RMSNorm(d, eps)
        self.residual_scale = config.deepnorm_alpha if placement == "deepnorm" else 1.0

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        if self.placement == "pre":
            # h = x + Attn(N(x)); y = h + MLP(N(h))
            a = self.self_attn(self.input_layernorm(x)[0], cos, sin, mask)
            n, h = self.post_attention_layernorm(a, x)
            return h + self.mlp(n)
        if self.placement == "lns":
            # h = x + Attn(s * N(x)); y = h + MLP(s * N(h)); s = 1 / sqrt(index + 1)
            a = self.self_attn(self.input_layernorm(x)[0] * self.norm_scale, cos, sin, mask)
            n, h = self.post_attention_layernorm(a, x)
            return h + self.mlp(n * self.norm_scale)
        if self.placement in ("post", "deepnorm"):
            # h = N(scale * x + Attn(x)); y = N(scale * h + MLP(h)); scale = 1 for Post-LN
            h = self.post_attention_layernorm(self.self_attn(x, cos, sin, mask), x, self.residual_scale)[0]
            return self.post_feedforward_layernorm(self.mlp(h), h, self.residual_scale)[0]
        # sandwich: h = x + N(Attn(N(x))); y = h + N(MLP(N(h)))
        h = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x)[0], cos, sin, mask))[0]
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)[0]))[0]


# ---- the model -------------------------------------------------------------------------------------

@dataclass
class CausalLMOutput:
    """loss: () or None; logits: (B, T, V); hidden_states: L+1 tensors (B, T, D) or None."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class MixLNModel(nn.Module):
    def __init__(self, config: MixLNConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(config, p, i) for i, p in enumerate(config.layer_norms())])
        if config.embedding_norm:  # Peri-LN: the embedding output is normalised too
            self.embed_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, output_hidden_states: bool = False,
                attention_mask: torch.Tensor | None = None):
        """input_ids: (B, T) -> last hidden state (B, T, D), and the L+1 hidden states when asked:
        the input of each layer, then the final normalised output. ``attention_mask`` (B, T), 1 for real
        tokens and 0 for padding, keeps padding out of every real token's attention."""
        t = input_ids.shape[1]
        if t > self.config.max_position_embeddings:
            raise BadInputError(f"sequence of {t} tokens is longer than the model's "
                                f"{self.config.max_position_embeddings} positions.", fix="use shorter sequences.")
        x = self.embed_tokens(input_ids)
        if self.config.embedding_norm:
            x = self.embed_norm(x)[0]
        cos, sin = rotary_cos_sin(self.config, t, x.device, x.dtype)
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            mask = causal & attention_mask.bool()[:, None, None, :]
            mask = mask | torch.eye(t, dtype=torch.bool, device=x.device)  # a padding query sees itself: no NaN
        states = []
        for layer in self.layers:
            if output_hidden_states:
                states.append(x)
            x = layer(x, cos, sin, mask)
        x = self.norm(x)[0]
        if output_hidden_states:
            states.append(x)
        return x, (tuple(states) if output_hidden_states else None)


class MixLNForCausalLM(nn.Module):
    """``MixLNForCausalLM(config)``; ``forward(input_ids, labels=None, output_hidden_states=False)``."""

    def __init__(self, config: MixLNConfig):
        super().__init__()
        check_fits(config)  # parameters alone must fit before anything is allocated
        self.config = config
        self.model = MixLNModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.reset_parameters()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """Normal(0, initializer_range) for every Linear, Normal(0, embedding_std) for the embedding, ones for
        norms; DeepNorm layers draw their query/key weights Xavier-normal with gain 1 and their value, output
        and MLP weights Xavier-normal with gain ``config.deepnorm_gain`` (see :mod:`core.mixln.config`). The draws
        are torch's float32 ones; a float64 model gets the same draws computed in float64, the same on every CPU
        (:func:`core.mixln.rng.normal_float64`)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                s = self.config.embedding_std if isinstance(module, nn.Embedding) else std
                module.weight.copy_(initial_normal(module.weight.shape, s, gen, module.weight.dtype))
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
        for layer in self.model.layers:
            if layer.placement == "deepnorm":
                attn, mlp = layer.self_attn, layer.mlp
                for lin, gain in ((attn.q_proj, 1.0), (attn.k_proj, 1.0), (attn.v_proj, self.config.deepnorm_gain),
                                  (attn.o_proj, self.config.deepnorm_gain), (mlp.gate_proj, self.config.deepnorm_gain),
                                  (mlp.up_proj, self.config.deepnorm_gain), (mlp.down_proj, self.config.deepnorm_gain)):
                    lin.weight.copy_(xavier_normal(lin.weight.shape, gain, gen, lin.weight.dtype))

    @property
    def layers(self) -> nn.ModuleList:
        return self.model.layers

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                output_hidden_states: bool = False, attention_mask: torch.Tensor | None = None,
                **unused) -> CausalLMOutput:
        """input_ids, labels: (B, T). ``labels`` are shifted inside (as transformers does); -100 is ignored.
        Other transformers keywords (``use_cache``, ``return_dict``) are accepted and ignored."""
        h, states = self.model(input_ids, output_hidden_states, attention_mask)
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = causal_lm_loss(logits, labels)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=states)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    # ---- save / load: a folder with config.json + model.safetensors -----------------------------
    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (the tied head is stored once)."""
        from safetensors.torch import save_file
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        atomic_write(folder / "model.safetensors",
                     lambda tmp: save_file(state, str(tmp), metadata={"format": "pt", "model_type": "mixln"}))
        self.config.save(folder)
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> "MixLNForCausalLM":
        from safetensors.torch import load_file
        folder = Path(folder)
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise ModelLoadError(f"no model.safetensors in {folder}.",
                                 fix="point to a folder written by MixLNForCausalLM.save_pretrained().")
        from core.zoo.construction import constructing

        with constructing():
            model = cls(MixLNConfig.load(folder))
        state = load_file(str(weights), device="cpu")
        if model.config.tie_word_embeddings:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ModelLoadError(f"weights in {folder} do not match its config.json "
                                 f"(missing {missing[:3]}, unexpected {unexpected[:3]}).",
                                 fix="save the model again with save_pretrained().")
        return model.to(device)

    def to_llama_config(self):
        """The transformers ``LlamaConfig`` of the same size (Pre-LN weights load into it unchanged)."""
        from transformers import LlamaConfig
        c = self.config
        return LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                           num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                           num_key_value_heads=c.num_kv_heads, max_position_embeddings=c.max_position_embeddings,
                           rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
                           initializer_range=c.initializer_range, tie_word_embeddings=c.tie_word_embeddings,
                           attention_bias=False, mlp_bias=False, attn_implementation="sdpa")


def initial_normal(shape: torch.Size, std: float, generator: torch.Generator | None = None,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normal(0, ``std``) initial values of ``shape``: torch's float32 draw, or for a float64 weight the same draw
    computed in float64 (:func:`core.mixln.rng.normal_float64`: the same values on every CPU, where torch's float32
    draw differs between AVX2 / AVX-512 and other CPUs). Either consumes the same words of ``generator``."""
    if dtype == torch.float64:
        return normal_float64(shape, std, generator)
    return torch.empty(shape).normal_(0.0, std, generator=generator)


def xavier_normal(shape: torch.Size, gain: float, generator: torch.Generator | None = None,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normal(0, gain * sqrt(2 / (fan_in + fan_out))) for a Linear weight of ``shape`` (out, in)."""
    fan_out, fan_in = shape
    return initial_normal(shape, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator, dtype)


def upcast(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 (from bfloat16 or float16), float64 kept: sums and losses of a float64 run stay float64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy in float32 (float64 for float64 logits): logits (B, T, V) at t predict labels (B, T)
    at t + 1; -100 ignored. The labels are shifted (padded with -100) rather than the logits, which would copy
    (B, T, V)."""
    shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
    return F.cross_entropy(upcast(logits.reshape(-1, logits.shape[-1])), shifted.reshape(-1),
                           ignore_index=-100, reduction=reduction)
