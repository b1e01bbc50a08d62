"""The samples a dataset-level evaluation explains: a seeded random subset of a model's test split, as dicts of
:func:`core.lrp.explain` arguments, with the gold label (or true next token) of each.

    samples_and_gold(loaded, dataset, split, n, seed, target, max_tokens=None) -> ([sample dict], [gold])
    capped_note(n, usable, dataset, split)       -> the note said up front when the split has fewer samples than asked
    explain_each(model, samples, methods, options, progress, each) -> whether every sample was explained

The explained target is the model's prediction (``target="predicted"``, the default, as in the MambaLRP paper's
perturbation experiments) or the gold label / true next token (``target="gold"``).
"""
from __future__ import annotations

import random
import time

import numpy as np
import torch

from core.errors import BadInputError
from core.lrp.adapters import adapter_for
from core.lrp.methods import explain
from core.lrp.metrics import each_sample
from core.progress import Progress

#: Default dataset per model kind (``task_kind``).
DEFAULT_DATASETS = {"sequence-classifier": "movie-sentiment", "image-classifier": "mnist-5k",
                    "causal-lm": "wikipedia-paragraphs", "key-token": "key-token"}
TARGETS = ("predicted", "gold")
LONG_RANGE_TOKENS = 128


def task_kind(loaded) -> str:
    """``sequence-classifier``, ``image-classifier`` or ``causal-lm``."""
    kind = adapter_for(loaded.model).kind
    return {"classifier": "sequence-classifier", "vision": "image-classifier", "lm": "causal-lm"}[kind]


def _records(dataset: str, split: str):
    import core.data as data

    if dataset not in data.DATASETS:
        raise BadInputError(f"Unknown dataset {dataset!r}.", fix="See python -m core data list.")
    sizes = data.split_sizes(dataset)
    if split not in sizes:
        raise BadInputError(f"{dataset} has no split {split!r}.", fix=f"Use one of: {', '.join(sizes)}.")
    return data.load(dataset, split)


def _subset(count: int, n: int, seed: int) -> list[int]:
    """A seeded random subset of ``range(count)`` of size ``min(n, count)``, in dataset order."""
    return sorted(random.Random(seed).sample(range(count), min(n, count)))


def capped_note(n: int, usable: int, dataset: str, split: str) -> str:
    """What is said up front (a ``note:`` progress message, before any work) when the split has fewer usable samples
    than asked, instead of silently (``-n 1000000`` on movie-sentiment used to run 1,057 samples for minutes without
    a word); "" otherwise."""
    if usable >= n:
        return ""
    return (f"note: N = {n:,} asked, but {dataset} ({split}) has {usable:,} usable samples; "
            f"explaining those {usable:,}")


def _max_tokens(loaded, default: int = 96) -> int:
    training = getattr(loaded.card, "training", None) or {}
    return int(training.get("max_tokens", default)) if isinstance(training, dict) else default


def samples_and_gold(loaded, dataset: str, split: str, n: int, seed: int, target: str,
                     max_tokens: int | None = None) -> tuple[list[dict], list[int]]:
    """Sample dicts for :func:`core.lrp.explain` plus the gold label / next token of each.

    Parameters
    ----------
    loaded : a ``core.zoo.LoadedModel`` (a Mamba model).
    dataset : a registered dataset whose records fit the model (:data:`DEFAULT_DATASETS` per kind).
    n : at most this many samples, a seeded (``seed``) random subset of the split, in dataset order.
    target : ``"predicted"`` -> ``target=None`` (explain the argmax), ``"gold"`` -> the label / true next token.
    max_tokens : text: cut longer sentences (keeping the final EOS; default: the card's recipe, 96);
        language model: the exact context length (passages with fewer tokens are skipped; default 128).

    Returns
    -------
    ``[{"input_ids": (1, L) int64, "target": ...}]`` for text, ``[{"pixel_values": (1, 1, 28, 28) float32 in
    [0, 1], "target": ...}]`` for images, and the gold labels.
    """
    from core.data import ImageLabel, Passage, TextLabel, TokenTask

    kind = task_kind(loaded)
    records = _records(dataset, split)
    if not records:
        raise BadInputError(f"{dataset} {split} is empty.")
    rtype = type(records[0])
    expect = {"sequence-classifier": (TextLabel, TokenTask), "image-classifier": (ImageLabel,),
              "causal-lm": (Passage,)}[kind]
    if rtype not in expect:
        raise BadInputError(f"{dataset} ({rtype.__name__} records) does not fit a {kind} model.",
                            fix=f"Use {DEFAULT_DATASETS[kind]} (the default for this model).")
    samples, gold = [], []
    if rtype is ImageLabel:
        for i in _subset(len(records), n, seed):
            r = records[i]
            px = torch.from_numpy(np.asarray(r.image, dtype=np.float32) / 255.0)[None, None]
            samples.append({"pixel_values": px})
            gold.append(int(r.label))
    elif rtype is TokenTask:
        for i in _subset(len(records), n, seed):
            samples.append({"input_ids": torch.tensor([list(records[i].tokens)])})
            gold.append(int(records[i].label))
    elif rtype is TextLabel:
        if loaded.tokenizer is None:
            raise BadInputError("This model has no tokenizer, so it does not take text.")
        limit = max_tokens or _max_tokens(loaded)
        for i in _subset(len(records), n, seed):
            ids = loaded.tokenizer(records[i].text)["input_ids"]
            if len(ids) > limit:  # as the sentiment recipe: cut, keeping the final EOS the head reads
                ids = ids[:limit - 1] + ids[-1:]
            samples.append({"input_ids": torch.tensor([ids])})
            gold.append(int(records[i].label))
    else:  # Passage -> next-token prediction after exactly max_tokens tokens of context
        length = max_tokens or LONG_RANGE_TOKENS
        encoded = [loaded.tokenizer(r.text)["input_ids"] for r in records]
        usable = [ids for ids in encoded if len(ids) > length]
        if not usable:
            raise BadInputError(f"No passage of {dataset} {split} has more than {length} tokens.",
                                fix="Use a shorter --max-tokens.")
        for i in _subset(len(usable), n, seed):
            samples.append({"input_ids": torch.tensor([usable[i][:length]])})
            gold.append(int(usable[i][length]))
    for s, g in zip(samples, gold):
        s["target"] = g if target == "gold" else None
    return samples, gold


def explain_each(model, samples: list[dict], methods: list[str], options: dict, progress: Progress | None,
                 each) -> bool:
    """Explain every sample with every method (with its ``options``) and call ``each(i, method, explanation,
    seconds)``; ``progress`` is told before each. Returns False when it stopped the loop early (raised
    :class:`core.errors.Cancelled`)."""
    done = 0
    for i, sample, name in each_sample(samples, methods, progress):
        t0 = time.perf_counter()
        e = explain(model, method=name, **sample, **options.get(name, {}))
        each(i, name, e, time.perf_counter() - t0)
        done += 1
    return done == len(samples) * len(methods)
