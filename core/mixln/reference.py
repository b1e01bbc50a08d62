"""Reference levels for the Mix-LN loss charts: what count-based models of the training data score on the same
held-out windows as the trained runs.

- :func:`ngram_counts`      unigram and bigram counts of a token stream (the training split)
- :func:`score_windows`     held-out loss (nats / token) of the unigram and the bigram on ``(N, T)`` windows,
                            over exactly the targets a run's evaluation scores (positions 1..T-1 of each window)
- :func:`reference_levels`  both levels for a run root's tokenizer and the recipe's held-out windows
- :func:`write_reference` / :func:`load_reference`  ``assets/mixln/reference.json`` (written by ``mixln reproduce``
                            and ``mixln reference``; a test recomputes it)

The unigram is add-one smoothed: ``p(w) = (c(w) + 1) / (N + V)``. The bigram is interpolated absolute discounting
towards that unigram with the usual fixed discount ``d = 0.75`` (Ney, Essen & Kneser 1994), chosen before looking
at any held-out text: ``p(w | v) = max(c(v, w) - d, 0) / c(v) + d * n(v) / c(v) * p(w)``, where ``n(v)`` counts the
distinct successors of ``v`` (a ``v`` never seen falls back to the unigram). A trained run that does not beat the
unigram ignores its context; one that does not beat the bigram uses little more than the previous token.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import torch

DISCOUNT = 0.75
REFERENCE_FILE = "reference.json"


def ngram_counts(stream: torch.Tensor, vocab_size: int) -> dict:
    """Counts of a 1-D id stream: ``unigram (V,)``, and the bigram's ``keys`` (``v * V + w``, sorted), ``counts``,
    per-``v`` totals ``context (V,)`` and distinct successors ``successors (V,)``; ``tokens`` in all."""
    ids = torch.as_tensor(stream).reshape(-1).numpy().astype(np.int64)
    uni = np.bincount(ids, minlength=vocab_size).astype(np.float64)
    keys, counts = np.unique(ids[:-1] * vocab_size + ids[1:], return_counts=True)
    first = keys // vocab_size
    return {"unigram": uni, "keys": keys, "counts": counts.astype(np.float64), "vocab_size": vocab_size,
            "context": np.bincount(first, weights=counts, minlength=vocab_size),
            "successors": np.bincount(first, minlength=vocab_size).astype(np.float64), "tokens": int(ids.size)}


def score_windows(counts: dict, windows: torch.Tensor, discount: float = DISCOUNT) -> dict:
    """Mean negative log-likelihood (nats / token) of the unigram and the bigram on the targets of ``windows``
    ``(N, T)``: token ``t`` of a window predicted from token ``t - 1`` (``t >= 1``), as a run's evaluation scores."""
    w = torch.as_tensor(windows).numpy().astype(np.int64)
    prev, target = w[:, :-1].reshape(-1), w[:, 1:].reshape(-1)
    v = counts["vocab_size"]
    p_uni = (counts["unigram"] + 1.0) / (counts["tokens"] + v)
    where = np.searchsorted(counts["keys"], prev * v + target)
    found = (where < counts["keys"].size) & (counts["keys"][np.minimum(where, counts["keys"].size - 1)]
                                             == prev * v + target)
    pair = np.where(found, counts["counts"][np.minimum(where, counts["keys"].size - 1)], 0.0)
    ctx, succ = counts["context"][prev], counts["successors"][prev]
    seen = ctx > 0
    safe = np.where(seen, ctx, 1.0)
    p_bi = np.where(seen, np.maximum(pair - discount, 0.0) / safe + discount * succ / safe * p_uni[target],
                    p_uni[target])
    uni, bi = float(-np.log(p_uni[target]).mean()), float(-np.log(p_bi).mean())
    return {"unigram": {"loss": uni, "perplexity": math.exp(uni)}, "bigram": {"loss": bi, "perplexity": math.exp(bi)},
            "targets": int(target.size), "discount": discount}


def reference_levels(root: str | os.PathLike | None = None, train_config: dict | None = None) -> dict:
    """Unigram and bigram levels of the training split (tokenized with ``root``'s tokenizer.json, default the
    committed runs' one) on the recipe's held-out windows (or those of ``train_config``)."""
    from core.mixln.data import prepare_corpus
    from core.mixln.recipe import ASSETS, RECIPE_MODEL, RECIPE_TRAIN
    from core.mixln.train import TrainConfig, eval_batches

    root = Path(root) if root is not None else ASSETS
    cfg = TrainConfig(**{k: v for k, v in (train_config or RECIPE_TRAIN).items()
                         if k in TrainConfig.__dataclass_fields__})
    corpus = prepare_corpus(RECIPE_MODEL["vocab_size"], root / "tokenizer.json")
    counts = ngram_counts(corpus.train, corpus.tokenizer.get_vocab_size())
    windows = torch.cat(eval_batches(corpus.eval, cfg))
    return {**score_windows(counts, windows), "windows": list(windows.shape), "train_tokens": counts["tokens"],
            "eval_split": corpus.eval_split,
            "what": "count-based models of the training split scored on the runs' held-out windows (spread over "
                    "the validation paragraphs of Wikipedia, OpenWebText and the Python docs)"}


def write_reference(root: str | os.PathLike | None = None) -> dict:
    """Compute :func:`reference_levels` for ``root`` and store them in ``root/reference.json``."""
    from core.mixln.recipe import ASSETS
    from core.files import atomic_write

    root = Path(root) if root is not None else ASSETS
    levels = reference_levels(root)
    atomic_write(root / REFERENCE_FILE, json.dumps(levels, indent=1))
    return levels


def load_reference(root: str | os.PathLike | None = None) -> dict | None:
    """The stored reference levels of ``root`` (None when the file is missing: charts then draw no levels)."""
    from core.mixln.recipe import ASSETS

    path = (Path(root) if root is not None else ASSETS) / REFERENCE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
