"""Held-out quality figures for model cards."""
from __future__ import annotations

import math

import torch


@torch.no_grad()
def token_perplexity(model, tokenizer, texts: list[str], window: int = 512, max_tokens: int = 4096) -> dict:
    """Perplexity of a causal LM over ``texts`` joined by blank lines, in non-overlapping windows.

    Returns ``{"perplexity", "tokens", "nll"}``; counts only the ``max_tokens`` first tokens so the
    figure is cheap enough for a model card (SmolLM2-135M: ~300 tokens/s on 2 cores).
    """
    ids = tokenizer("\n\n".join(texts), return_tensors="pt")["input_ids"][0][: max_tokens + 1]
    total_nll, count = 0.0, 0
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window + 1]
        if len(chunk) < 2:
            break
        logits = model(chunk[None, :-1]).logits.float()
        nll = torch.nn.functional.cross_entropy(logits[0], chunk[1:], reduction="sum")
        total_nll += float(nll)
        count += len(chunk) - 1
    return {"perplexity": math.exp(total_nll / max(count, 1)), "tokens": count, "nll": total_nll / max(count, 1)}
