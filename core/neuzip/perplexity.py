"""Word-level perplexity of a causal LM on held-out text, as the memory / perplexity trade-off measures it.

``exp(total token NLL / number of whitespace-separated words)`` over non-overlapping windows of ``window`` predicted
tokens (each window sees only its own tokens as context, plus the one token before it), on the first ``words`` words
of the test split of ``wikipedia-paragraphs`` (``wikitext-2`` when online). A BOS token (or EOS when there is none) is
put first, so every token of the text is predicted.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from core.errors import BadInputError, LayerwiseError
from core.progress import Progress, item_progress

__all__ = ["DEFAULT_WORDS", "DEFAULT_WINDOW", "windowed_nll", "token_ids", "word_perplexity", "eval_text"]

DEFAULT_WORDS = 2000  # the live path; the precomputed example in assets/neuzip used more (see its JSON)
DEFAULT_WINDOW = 512


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def windowed_nll(model: nn.Module, ids: torch.Tensor, window: int = DEFAULT_WINDOW,
                 progress: Progress | None = None) -> tuple[float, int]:
    """Total next-token NLL (nats) of ``ids (T,)`` over non-overlapping windows.

    Window ``j`` feeds ``ids[j*window : (j+1)*window]`` and predicts ``ids[j*window+1 : (j+1)*window+1]``,
    so each of the ``T - 1`` tokens after the first is predicted exactly once. ``progress(fraction, message)``
    is called before each window and may raise :class:`Cancelled`.

    Returns
    -------
    (total NLL in nats, number of predicted tokens)
    """
    if window < 1:
        raise BadInputError(f"window must be >= 1, got {window}.")
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    starts = list(range(0, max(len(ids) - 1, 0), window))
    total, count = 0.0, 0
    step = item_progress(progress, "perplexity window")
    for i, start in enumerate(starts):
        if step:
            step(i, len(starts))
        chunk = ids[start:start + window + 1]
        logits = _logits(model, chunk[None, :-1])[0].float()
        total += float(torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum"))
        count += len(chunk) - 1
    return total, count


def token_ids(tokenizer, text: str) -> torch.Tensor:
    """``(T,)`` ids of ``text`` with the tokenizer's BOS (or EOS) first, so every text token is predicted."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    first = getattr(tokenizer, "bos_token_id", None)
    if first is None:
        first = getattr(tokenizer, "eos_token_id", None)
    return torch.tensor(([first] if first is not None else []) + ids, dtype=torch.long)


def word_perplexity(model: nn.Module, tokenizer, text: str, window: int = DEFAULT_WINDOW,
                    progress: Progress | None = None) -> dict:
    """Word-level perplexity of ``text``: ``exp(total token NLL / len(text.split()))``.

    Returns
    -------
    dict with ``perplexity`` (word level), ``token_perplexity``, ``nll`` (total, nats), ``tokens``
    (predicted), ``words``
    """
    words = len(text.split())
    if words == 0:
        raise BadInputError("the evaluation text is empty.", fix="give a text with at least one word")
    ids = token_ids(tokenizer, text)
    nll, count = windowed_nll(model, ids, window, progress)
    return {"perplexity": math.exp(nll / words), "token_perplexity": math.exp(nll / max(count, 1)),
            "nll": nll, "tokens": count, "words": words}


def eval_text(words: int = DEFAULT_WORDS, dataset: str | None = None) -> tuple[str, str]:
    """The first ``words`` words of the test split (paragraphs joined by blank lines).

    ``dataset`` defaults to ``wikitext-2`` when online (falling back to the offline set if it cannot
    be loaded) and ``wikipedia-paragraphs`` offline. Returns ``(text, dataset name)``.
    """
    from core.data import load
    from core.settings import is_online

    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise BadInputError(f"the number of evaluation words must be a positive integer, got {words!r}.")
    names = [dataset] if dataset else (["wikitext-2", "wikipedia-paragraphs"] if is_online()
                                       else ["wikipedia-paragraphs"])
    records, error = None, None
    for name in names:
        try:
            records, dataset = load(name, "test"), name
            break
        except LayerwiseError as exc:
            error = exc
    if records is None:
        raise error
    parts, left = [], words
    for r in records:
        w = r.text.split()
        if not w:
            continue
        if len(w) >= left:
            parts.append(" ".join(w[:left]))
            left = 0
            break
        parts.append(r.text.strip())
        left -= len(w)
    return "\n\n".join(parts), dataset
