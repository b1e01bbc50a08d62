"""Fixtures shared by the core tests."""
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
