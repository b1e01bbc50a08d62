"""Model configs of the families MambaLRP explains beyond Mamba-1, tiny (quick tests) and at the published checkpoints'
layer shapes (slow tests, benchmarks), with random weights.

Where each real number comes from (the hubs are not reachable here; every value was read from the page named):

- ``mamba2-130m`` (state-spaces/mamba2-130m): d_model 768, 24 layers, d_state 128, headdim 64, expand 2, ngroups 1,
  conv 4, chunk 256, vocab 50277 (padded to 50288 by the checkpoint's pad_vocab_size_multiple 16) -- the issue's
  numbers; mamba_ssm's Mamba2 defaults (headdim 64, ngroups 1, chunk 256, conv bias on).
- ``falcon-mamba-7b`` (huggingface.co/tiiuae/falcon-mamba-7b/blob/main/config.json): hidden 4096, intermediate 8192,
  64 layers, state 16, time_step_rank 256, conv 4, conv bias on, no projection bias, vocab 65024, mixer_rms_eps 1e-6
  (the pre-decay checkpoint's config.json; 1e-6 is also transformers' default).
- ``granite-4.0-h-tiny`` (IBM's Ollama library ``granite4:tiny-h`` GGUF metadata, ollama.com/library/granite4:tiny-h;
  the same numbers in third-party copies of its config.json): hidden 1536, 40 layers (attention at 5, 15, 25, 35),
  12 query / 4 key-value heads, 64 experts of intermediate 512, 6 per token, shared MLP 1024, Mamba-2 48 heads x 64,
  d_state 128, 1 group, conv 4, attention scale 0.0078125, embedding x 12, residual x 0.22, logits / 6, vocab 100352.
- ``falcon-h1-0.5b`` (transformers' FalconH1 docs table: depth 36, dim 1024, 8 / 2 heads, 24 Mamba heads, d_head
  64 / 64, d_state 128; the remaining values from the config.json of a Falcon-H1-0.5B fine-tune,
  huggingface.co/MerlinSafety/HybridIntelligence-0.5B): intermediate 2048, head_dim 64, mamba_d_ssm 1536, 1 group,
  conv 4, no gated norm (mamba_rms_norm false), its muP multipliers; vocab 32784 in the docs (65537 for the larger
  ones).
- ``bamba-9b`` (huggingface.co/ibm-fms/Bamba-9B/blob/main/config.json): hidden 4096, 32 layers, attention at 9, 18,
  27 (32 heads, 8 kv, rotary on 64 of 128 channels), intermediate 14336, Mamba-2 128 heads x 64, d_state 128,
  expand 2, 1 group, conv 4, conv bias on, vocab 128256.

At real width the tests keep one or two layers (one of each kind a hybrid has) and a small vocabulary (the embedding
is not a layer shape; 65k-128k rows of 4096 in float64 would take 2-4 GB). ``real(name, layers, vocab)`` builds
them.
"""
from __future__ import annotations

import torch

TINY_VOCAB = 64


def _silence():
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)


def tiny_config(family: str, conv_bias: bool = False, groups: int = 1, fp32_residual: bool = False,
                vocab: int = TINY_VOCAB):
    """A few-channel config of ``family`` (``mamba2``, ``falcon-mamba``, ``bamba``, ``granite``, ``granite-moe``,
    ``nemotron-h``, ``falcon-h1``); bias-free unless ``conv_bias``; ``groups`` Mamba-2 groups (B, C shared by
    ``heads / groups`` heads). ``fp32_residual``: Mamba-2's and Falcon-Mamba's ``residual_in_fp32`` (their default;
    it rounds the residual stream of a float64 model to float32, so the float64 tests switch it off)."""
    import transformers as T

    _silence()
    ids = {"vocab_size": vocab, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if family == "mamba2":
        return T.Mamba2Config(hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, head_dim=8, num_heads=4,
                              n_groups=groups, conv_kernel=3, use_conv_bias=conv_bias, use_bias=False, chunk_size=5,
                              residual_in_fp32=fp32_residual, **ids)
    if family == "falcon-mamba":
        return T.FalconMambaConfig(hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=3,
                                   time_step_rank=3, use_conv_bias=conv_bias, use_bias=False,
                                   residual_in_fp32=fp32_residual, **ids)
    mamba2 = {"mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 4, "mamba_n_groups": groups, "mamba_expand": 2,
              "mamba_d_conv": 3, "mamba_conv_bias": conv_bias, "mamba_proj_bias": False, "mamba_chunk_size": 5}
    attn = {"num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": False}
    if family == "bamba":
        return T.BambaConfig(hidden_size=16, num_hidden_layers=3, attn_layer_indices=[1], intermediate_size=24,
                             mlp_bias=False, partial_rotary_factor=0.5, **mamba2, **attn, **ids)
    if family in ("granite", "granite-moe"):
        moe = {"num_local_experts": 4, "num_experts_per_tok": 2} if family == "granite-moe" else \
            {"num_local_experts": 0, "num_experts_per_tok": 0}
        return T.GraniteMoeHybridConfig(
            hidden_size=16, num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"], intermediate_size=12,
            shared_intermediate_size=24, attention_multiplier=0.25, embedding_multiplier=2.0, residual_multiplier=0.5,
            logits_scaling=3.0, position_embedding_type="rope", **moe, **mamba2, **attn, **ids)
    if family == "nemotron-h":
        return T.NemotronHConfig(hidden_size=16, layers_block_type=["mamba", "mlp", "attention", "mlp"],
                                 intermediate_size=24, mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=4,
                                 n_groups=groups, conv_kernel=3, use_conv_bias=conv_bias, use_bias=False,
                                 chunk_size=5, head_dim=4, mlp_bias=False, residual_in_fp32=fp32_residual,
                                 **attn, **ids)
    if family == "falcon-h1":
        return T.FalconH1Config(hidden_size=16, num_hidden_layers=2, intermediate_size=24, head_dim=4,
                                mamba_d_ssm=32, mamba_rms_norm=True, mamba_norm_before_gate=False, mlp_bias=False,
                                projectors_bias=False, key_multiplier=0.7, attention_out_multiplier=0.9,
                                ssm_out_multiplier=0.8, embedding_multiplier=1.5, lm_head_multiplier=0.5,
                                ssm_in_multiplier=1.2, mlp_multipliers=[0.9, 0.6],
                                ssm_multipliers=[1.1, 0.9, 1.0, 1.2, 0.8], **mamba2, **attn, **ids)
    raise ValueError(family)


FAMILIES = ("mamba2", "falcon-mamba", "bamba", "granite", "granite-moe", "nemotron-h", "falcon-h1")


def build(config, seed: int = 0, dtype=torch.float64):
    """A causal LM of ``config`` with seeded random weights (every norm weight and A, D, dt bias perturbed too, so no
    parameter sits at a value that would hide a rule), in ``dtype``, eval mode."""
    import transformers as T

    from core.zoo.construction import constructing

    _silence()
    config._experts_implementation = "eager"  # the grouped-matmul experts refuse float64
    with constructing(seed=seed):
        model = T.AutoModelForCausalLM.from_config(config)
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("norm.weight", "layernorm.weight")) or ".norm." in name:
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                elif name.endswith(("dt_bias", ".D")):
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
                elif name.endswith("conv1d.bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


REAL = {  # name -> (transformers config class, its published values)
    "mamba2-130m": ("Mamba2Config", dict(
        hidden_size=768, num_hidden_layers=24, state_size=128, expand=2, head_dim=64, num_heads=24, n_groups=1,
        conv_kernel=4, use_conv_bias=True, use_bias=False, chunk_size=256, vocab_size=50288, tie_word_embeddings=True)),
    "falcon-mamba-7b": ("FalconMambaConfig", dict(
        hidden_size=4096, intermediate_size=8192, num_hidden_layers=64, state_size=16, time_step_rank=256,
        conv_kernel=4, use_conv_bias=True, use_bias=False, mixer_rms_eps=1e-6, vocab_size=65024,
        tie_word_embeddings=False)),
    "granite-4.0-h-tiny": ("GraniteMoeHybridConfig", dict(
        hidden_size=1536, num_hidden_layers=40,
        layer_types=["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)], num_attention_heads=12,
        num_key_value_heads=4, intermediate_size=512, shared_intermediate_size=1024, num_local_experts=64,
        num_experts_per_tok=6, mamba_n_heads=48, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1,
        mamba_expand=2, mamba_d_conv=4, mamba_conv_bias=True, mamba_proj_bias=False, mamba_chunk_size=256,
        attention_multiplier=0.0078125, embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=6.0,
        position_embedding_type="nope", vocab_size=100352, tie_word_embeddings=True)),
    "falcon-h1-0.5b": ("FalconH1Config", dict(
        hidden_size=1024, num_hidden_layers=36, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        intermediate_size=2048, mamba_d_ssm=1536, mamba_n_heads=24, mamba_d_head=64, mamba_d_state=128,
        mamba_n_groups=1, mamba_d_conv=4, mamba_conv_bias=True, mamba_proj_bias=False, mamba_rms_norm=False,
        mamba_norm_before_gate=False, mamba_chunk_size=128, attention_in_multiplier=1.0,
        attention_out_multiplier=0.9375, key_multiplier=0.390625, embedding_multiplier=5.656854249492381,
        lm_head_multiplier=0.0390625, mlp_multipliers=[0.8838834764831844, 0.5859375], vocab_size=32784)),
    "bamba-9b": ("BambaConfig", dict(
        hidden_size=4096, num_hidden_layers=32, attn_layer_indices=[9, 18, 27], num_attention_heads=32,
        num_key_value_heads=8, partial_rotary_factor=0.5, intermediate_size=14336, mamba_n_heads=128,
        mamba_d_head=64, mamba_d_state=128, mamba_expand=2, mamba_n_groups=1, mamba_d_conv=4, mamba_conv_bias=True,
        mamba_proj_bias=False, mamba_chunk_size=256, vocab_size=128256)),
}
HYBRID_REAL = ("granite-4.0-h-tiny", "bamba-9b")  # interleaved: cut to one Mamba-2 layer then one attention layer


def real(name: str, layers: int | None = None, vocab: int | None = None):
    """The config of ``name`` (a key of :data:`REAL`) cut to ``layers`` layers (an interleaved hybrid keeps a Mamba-2
    layer then an attention layer) and ``vocab`` tokens; every layer's shapes as published."""
    import transformers as T

    _silence()
    cls, values = REAL[name]
    values = dict(values)
    if vocab is not None:
        values["vocab_size"] = vocab
    if layers is not None:
        values["num_hidden_layers"] = layers
        if "layer_types" in values:
            values["layer_types"] = (["mamba", "attention"] * layers)[:layers]
        if "attn_layer_indices" in values:
            values["attn_layer_indices"] = [1] if layers > 1 else []
    return getattr(T, cls)(**values)
