"""The datasets and metrics the MathNeuro analyses run on, by name: math problems, multiple-choice questions or
texts from ``core.data``, plus the embedded model's synthetic ``review-sentiment``; accuracy or teacher-forced loss."""
from __future__ import annotations

import math

from core.errors import BadInputError
from core.mathneuro.evaluation import math_accuracy, multiple_choice_accuracy, teacher_forced_loss
from core.mathneuro.recipe import SENTIMENT, sentiment_split

MATH_DATASETS = ("arithmetic-words", "gsm-symbolic")
NONMATH_DATASETS = (SENTIMENT, "movie-sentiment", "mmlu", "logiqa")
METRICS = ("auto", "accuracy", "loss")
MAX_LENGTH = 256  # identification samples are cut to this many tokens


def dataset_names() -> tuple[list[str], list[str]]:
    """(math dataset names, non-math dataset names) offered by the tab."""
    return list(MATH_DATASETS), list(NONMATH_DATASETS)


def load_records(name: str, split: str, n: int) -> list:
    """The first ``n`` records of ``name``'s ``split``, or :class:`BadInputError` (unknown, missing or empty)."""
    n = check_count(n, "The number of samples")
    if name == SENTIMENT:
        recs = sentiment_split(split, n)
    else:
        from core.data import DATASETS, load
        if name not in DATASETS:
            raise BadInputError(f"Unknown dataset {name!r}.",
                                fix=f"Use one of: {', '.join(list(DATASETS) + [SENTIMENT])}.")
        recs = load(name, split, limit=n)
    recs = list(recs)[:n]
    if not recs:
        raise BadInputError(f"The dataset {name!r} ({split}) is empty.", fix="Pick another dataset or split.")
    return recs


def check_count(n, what: str) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInputError(f"{what} must be a positive integer, got {n!r}.", fix="Use e.g. 50.")
    return n


def task_of(record) -> str:
    if hasattr(record, "solution"):
        return "math"
    if hasattr(record, "choices"):
        return "choice"
    if hasattr(record, "text"):
        return "text"
    raise BadInputError(f"Records of type {type(record).__name__} cannot be used here.",
                        fix="Use math problems, multiple-choice questions or texts.")


def check_metric(metric) -> str:
    """One of :data:`METRICS`, or :class:`BadInputError`."""
    if metric not in METRICS:
        raise BadInputError(f"Unknown metric {metric!r}.", fix=f"Use one of: {', '.join(METRICS)}.")
    return metric


def resolve_metric(metric: str, dataset: str, record) -> str:
    """``accuracy`` or ``loss`` for this dataset."""
    metric = check_metric(metric)
    task = task_of(record)
    if metric == "auto":
        return "accuracy" if dataset in ("arithmetic-words", SENTIMENT) else "loss"
    if metric == "accuracy" and task == "text":
        raise BadInputError(f"{dataset!r} has plain texts, which have no accuracy.", fix="Use --metric loss.")
    return metric


def metric_label(dataset: str, metric: str) -> str:
    return f"{dataset} {'accuracy (%)' if metric == 'accuracy' else 'loss (nats/token)'}"


def score(model, tokenizer, records, metric: str, dataset: str) -> float:
    """Accuracy in % or loss in nats per token of ``model`` on ``records``."""
    if metric == "loss":
        return teacher_forced_loss(model, tokenizer, records)["loss"]
    if task_of(records[0]) == "math":
        tokens = 24 if dataset == "arithmetic-words" else 256
        return 100.0 * math_accuracy(model, tokenizer, records, max_new_tokens=tokens)["accuracy"]
    return 100.0 * multiple_choice_accuracy(model, tokenizer, records)["accuracy"]


def evaluation_sets(math: str, nonmath: list[str], eval_n: int, metric: str) -> tuple[dict, dict]:
    """``({name: the first eval_n test records}, {name: accuracy or loss})`` of the math and non-math datasets."""
    sets, metrics = {}, {}
    for name in [math] + nonmath:
        recs = load_records(name, "test", eval_n)
        sets[name] = recs
        metrics[name] = resolve_metric(metric, name, recs[0])
    return sets, metrics


def levels(sets: dict, metrics: dict, tokenizer) -> dict:
    """Each evaluation set's chance accuracy or uniform-guess loss (:func:`reference_levels`), stored with a result
    so the charts can mark a comparator at chance, at ceiling or beyond uniform guessing."""
    return {name: reference_levels(metrics[name], recs, tokenizer) for name, recs in sets.items()}


def reference_levels(metric: str, records, tokenizer) -> dict:
    """What a score on ``records`` means without any skill: ``chance`` accuracy (%) of a multiple-choice set (one
    over the number of options, averaged), or the ``uniform_loss`` ln V (nats/token) of guessing every token of the
    tokenizer's V with equal probability. Empty for exact-answer math (chance is ~0)."""
    if metric == "loss":
        return {"uniform_loss": math.log(len(tokenizer))}
    if task_of(records[0]) == "choice":
        return {"chance": 100.0 * sum(1.0 / len(r.choices) for r in records) / len(records)}
    return {}


def limitation(metric: str, value: float | None, levels: dict | None) -> str | None:
    """Why a comparator's score cannot show what an intervention does, or None: accuracy at the ceiling (only
    damage can show), at chance (damage cannot show), or a loss at or above uniform guessing (the model does not
    model that text at all)."""
    levels = levels or {}
    if value is None:
        return None
    if metric == "accuracy" and value >= 99.5:
        return "at ceiling (100%): only damage can show, not a smaller side effect"
    if metric == "accuracy" and levels.get("chance") is not None and value <= levels["chance"] + 5:
        return f"at chance ({levels['chance']:.0f}%): damage cannot show"
    if metric == "loss" and levels.get("uniform_loss") is not None and value >= levels["uniform_loss"]:
        return (f"loss above uniform guessing (ln V = {levels['uniform_loss']:.2f}): the model never learned "
                "this text, so its loss says nothing about damage")
    return None
