"""The datasets and metrics the MathNeuro analyses run on, by name: math problems, multiple-choice questions or
texts from ``core.data``, plus the embedded model's synthetic ``review-sentiment``; accuracy or teacher-forced loss."""
from __future__ import annotations

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


def resolve_metric(metric: str, dataset: str, record) -> str:
    """``accuracy`` or ``loss`` for this dataset."""
    if metric not in METRICS:
        raise BadInputError(f"Unknown metric {metric!r}.", fix=f"Use one of: {', '.join(METRICS)}.")
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
