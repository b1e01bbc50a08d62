"""Fixtures shared by the core tests."""
from collections import Counter

import pytest
import torch


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A local Hugging Face folder (config.json + model.safetensors, bf16 Llama), without a tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    return folder


class Launch:
    """A Triton kernel's stand-in: ``kernel[grid](...)`` counts the launch and computes nothing."""

    def __init__(self, name: str, launched: Counter):
        self.name, self.launched = name, launched

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launched.update([self.name])


@pytest.fixture(params=["twins", "triton"])
def path(request, monkeypatch):
    """``twins``: dispatch as usual (meta tensors are not CUDA: the twins run). ``triton``: every kernel forced
    (``LAYERWISE_KERNELS=triton``), meta tensors eligible, each launch a stub; yields the launch counts."""
    launched = Counter()
    if request.param == "triton":
        import kernels._rans_kernel as rans
        import kernels._scan_triton as scan
        import kernels.dispatch as dispatch
        import kernels.neuzip_bits as bits
        import kernels.neuzip_encode as encode
        import kernels.rmsnorm as rmsnorm

        monkeypatch.setenv("LAYERWISE_KERNELS", "triton")
        monkeypatch.setattr(dispatch, "device_eligible",
                            lambda tensors: bool(tensors) and all(t.is_cuda or t.is_meta for t in tensors))
        monkeypatch.setattr(rans, "_pair_rans_decode_kernel", Launch("rans", launched))
        monkeypatch.setattr(bits, "_merge_bf16_kernel", Launch("merge", launched))
        monkeypatch.setattr(bits, "_split_bf16_kernel", Launch("split", launched))
        monkeypatch.setattr(encode, "_pair_rans_encode_kernel", Launch("encode", launched))
        monkeypatch.setattr(scan, "_kernel", lambda: Launch("scan", launched))
        for name in ("_add_rmsnorm_fwd_kernel", "_add_rmsnorm_bwd_kernel"):
            monkeypatch.setattr(rmsnorm, name, Launch("rmsnorm", launched))
    return request.param, launched
