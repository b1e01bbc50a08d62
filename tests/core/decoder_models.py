"""Random-weight configs of the transformer decoders (and Zamba2, Jamba) MambaLRP explains with AttnLRP, tiny (quick
tests) and at the published sizes (slow tests, benchmarks).

Each tiny config switches on what makes its family differ (so a rule that ignored it would be caught): Mistral, Qwen2
and Gemma 2 / 3 a sliding window shorter than the test sequences, Qwen2 biases on q, k and v, Qwen3 and Gemma 3 norms
on q and k, OLMo 2 norms on the full q and k and after each block, Gemma 2 soft-capping of the scores and the logits
and Gemma's ``1 + weight`` norms around each block, Phi-3 one fused qkv and one fused gate_up projection and partial
rotary, SmolLM3 layers without RoPE, GPT-2 LayerNorm, GELU, Conv1D layers with biases and learned positions,
Qwen3-MoE a renormalised top-2 of 4 experts, Zamba2 shared attention blocks with per-layer LoRA adapters and the
embeddings concatenated in, Jamba Mamba-1 and attention layers with experts over all of whose softmax it routes.

Real sizes (``real(name)``): SmolLM2-135M's config as published (huggingface.co/HuggingFaceTB/SmolLM2-135M,
config.json; the same numbers the zoo's ``smollm2-135m`` carries: hidden 576, 30 layers, 9 / 3 heads of 64,
intermediate 1536, vocab 49152, tied, rope_theta 100000, rms eps 1e-5) and Llama-3.2-1B's
(huggingface.co/meta-llama/Llama-3.2-1B, config.json: hidden 2048, 16 layers, 32 / 8 heads of 64, intermediate
8192, vocab 128256, tied, rope_theta 500000 with llama3 scaling factor 32, rms eps 1e-5); Qwen2.5-0.5B's
(hidden 896, 24 layers, 14 / 2 heads, intermediate 4864, vocab 151936, tied, rope_theta 1e6, rms eps 1e-6, q/k/v
biases), Gemma-2-2B's (hidden 2304, 26 layers, 8 / 4 heads of 256, intermediate 9216, vocab 256000, sliding window
4096 on alternate layers, soft-capping 50 on the scores and 30 on the logits) and GPT-2's (124M: 768 wide, 12
layers, 12 heads, vocab 50257, 1024 learned positions, gelu_new).
"""
from __future__ import annotations

import torch

from tests.core.ssm2_models import TINY_VOCAB, _silence

IDS = {"vocab_size": TINY_VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
LLAMA = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64}
WINDOW = 4  # shorter than the test sequences: the sliding layers mask


def tiny_config(family: str):
    """A config of ``family`` (a key of :data:`FAMILIES`) with two layers (Zamba2 and Jamba: one of each kind they
    interleave) and 32 channels."""
    import transformers as T

    _silence()
    if family == "llama":
        return T.LlamaConfig(**LLAMA, tie_word_embeddings=False, **IDS)
    if family == "mistral":
        return T.MistralConfig(**LLAMA, head_dim=8, sliding_window=WINDOW, **IDS)
    if family == "qwen2":
        return T.Qwen2Config(**LLAMA, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                             layer_types=["full_attention", "sliding_attention"], **IDS)  # Qwen2 has q/k/v biases
    if family == "qwen3":
        return T.Qwen3Config(**LLAMA, head_dim=8, **IDS)
    if family == "qwen3-moe":
        return T.Qwen3MoeConfig(**LLAMA, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0], **IDS)
    if family == "gemma2":
        return T.Gemma2Config(**LLAMA, head_dim=8, query_pre_attn_scalar=12, sliding_window=WINDOW,
                              attn_logit_softcapping=1.5, final_logit_softcapping=2.0, **IDS)
    if family == "gemma3":
        return T.Gemma3TextConfig(**LLAMA, head_dim=8, query_pre_attn_scalar=12, sliding_window=WINDOW,
                                  layer_types=["sliding_attention", "full_attention"], **IDS)
    if family == "phi3":
        return T.Phi3Config(**LLAMA, partial_rotary_factor=0.5, **IDS)
    if family == "smollm3":
        return T.SmolLM3Config(**LLAMA, no_rope_layers=[1, 0], **IDS)
    if family == "olmo2":
        return T.Olmo2Config(**LLAMA, **IDS)
    if family == "gpt2":
        return T.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, activation_function="gelu_new",
                            **{k: v for k, v in IDS.items() if k != "pad_token_id"})
    if family == "zamba2":
        return T.Zamba2Config(hidden_size=32, num_hidden_layers=3, layers_block_type=["mamba", "hybrid", "hybrid"],
                              num_mem_blocks=1, use_shared_attention_adapter=True, adapter_rank=4, use_mem_rope=True,
                              mamba_d_state=4, mamba_headdim=8, n_mamba_heads=8, mamba_ngroups=1, mamba_d_conv=3,
                              num_attention_heads=4, num_key_value_heads=4, attention_head_dim=16,
                              intermediate_size=48, chunk_size=5, use_conv_bias=False, **IDS)
    if family == "jamba":
        return T.JambaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                             expert_layer_offset=0, num_experts=4, num_experts_per_tok=2, mamba_d_state=4,
                             mamba_d_conv=3, mamba_expand=2, mamba_dt_rank=4, mamba_conv_bias=False,
                             use_mamba_kernels=False, **IDS)
    raise ValueError(family)


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3-moe", "gemma2", "gemma3", "phi3", "smollm3", "olmo2", "gpt2",
            "zamba2", "jamba")


def build(config, seed: int = 0, dtype=torch.float64):
    """A causal LM of ``config`` with seeded random weights, eval mode, in ``dtype``: every norm weight drawn as
    ``1 + 0.2 N(0, 1)`` (Gemma's, stored around 0, as ``0.2 N``), every bias as ``0.1 N`` (so the ledger has biases
    to count: Qwen2's q/k/v, GPT-2's), Mamba's ``dt_bias`` / ``D`` perturbed."""
    import transformers as T

    from core.zoo.construction import constructing

    _silence()
    config._experts_implementation = "eager"  # the grouped-matmul experts refuse float64
    with constructing(seed=seed):
        model = T.AutoModelForCausalLM.from_config(config)
        g = torch.Generator().manual_seed(seed + 1)
        gemma = config.model_type.startswith("gemma")
        with torch.no_grad():
            for name, p in model.named_parameters():
                leaf = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
                if p.dim() == 1 and ("norm" in leaf or leaf.startswith("ln_")) and name.endswith(".weight"):
                    p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=g))
                elif name.endswith(".bias") and "dt_proj" not in name:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                elif name.endswith(("dt_bias", ".D")):
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


REAL = {
    "smollm2-135m": ("LlamaConfig", dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5, vocab_size=49152, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, bos_token_id=0, eos_token_id=0)),
    "llama-3.2-1b": ("LlamaConfig", dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5, vocab_size=128256, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "high_freq_factor": 4.0,
                         "low_freq_factor": 1.0, "original_max_position_embeddings": 8192},
        bos_token_id=128000, eos_token_id=128001)),
    "qwen2.5-0.5b": ("Qwen2Config", dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rms_norm_eps=1e-6, vocab_size=151936, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_sliding_window=False,
        bos_token_id=151643, eos_token_id=151643)),
    "gemma-2-2b": ("Gemma2Config", dict(
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
        head_dim=256, query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, max_position_embeddings=8192, rms_norm_eps=1e-6, vocab_size=256000,
        hidden_activation="gelu_pytorch_tanh", rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=0, bos_token_id=2, eos_token_id=1)),
    "gpt2": ("GPT2Config", dict(
        n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257, activation_function="gelu_new",
        layer_norm_epsilon=1e-5, bos_token_id=50256, eos_token_id=50256)),
}


def real(name: str, layers: int | None = None, vocab: int | None = None):
    """The config of ``name`` (a key of :data:`REAL`), cut to ``layers`` layers and ``vocab`` tokens when given."""
    import transformers as T

    _silence()
    cls, values = REAL[name]
    values = dict(values)
    if layers is not None:
        values["num_hidden_layers"] = layers
    if vocab is not None:
        values["vocab_size"] = vocab
    return getattr(T, cls)(**values)
