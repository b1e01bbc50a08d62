"""One small record type per kind of task. Every loader returns a list of one of these."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TextLabel:
    """A sentence with a class label (sentiment: 0 negative, 1 positive)."""

    text: str
    label: int
    score: float | None = None  # the source's continuous rating, when it has one


@dataclass(frozen=True)
class MathProblem:
    """A word problem, its final numeric answer (as a string) and a worked solution ending in ``#### answer``."""

    question: str
    answer: str
    solution: str


@dataclass(frozen=True)
class MultipleChoice:
    """A question with options; ``answer`` is the index of the correct option."""

    question: str
    choices: tuple[str, ...]
    answer: int
    subject: str | None = None
    passage: str | None = None


@dataclass(frozen=True, eq=False)
class ImageLabel:
    """A grey-scale image ``(H, W)`` uint8 in [0, 255] and its class."""

    image: np.ndarray
    label: int


@dataclass(frozen=True)
class Passage:
    """A paragraph of running text."""

    text: str
    source: str = ""


@dataclass(frozen=True)
class TokenTask:
    """A synthetic token sequence whose label is decided by known positions (ground truth for attributions)."""

    tokens: tuple[int, ...]
    label: int
    key_positions: tuple[int, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class AgreementSentence:
    """A sentence prefix that ends where its verb would come, with the verb's number decided by one subject noun.

    ``text`` starts with the subject's noun phrase; ``subject`` and ``attractor`` are the character spans ``(start,
    end)`` of the subject noun and of a noun of the other number between it and the verb; ``verb`` and ``wrong``
    are the agreeing and the non-agreeing form (with their leading space, as the next token), ``plural`` the
    subject's number and ``template`` the construction (``pp``, ``src``, ``orc``)."""

    text: str
    subject: tuple[int, int]
    attractor: tuple[int, int]
    verb: str
    wrong: str
    plural: bool
    template: str


def canonical_number(text: str) -> str:
    """A number as a plain string: ``"1,000"`` -> ``"1000"``, ``"168.0"`` -> ``"168"``, ``"2.50"`` -> ``"2.5"``.

    Used for math answers so exact match compares numbers, not spellings. Non-numbers come back stripped.
    """
    raw = text.strip().replace(",", "").rstrip(".")
    try:
        value = float(raw)
    except ValueError:
        return text.strip()
    if value.is_integer():
        return str(int(value))
    return repr(value)


RECORD_TYPES = {cls.__name__: cls for cls in (TextLabel, MathProblem, MultipleChoice, ImageLabel, Passage, TokenTask,
                                              AgreementSentence)}


def record_to_row(record) -> dict:
    """A flat, JSON-able dict of a record (images become their shape), for tables and ``--json``."""
    row = {}
    for name, value in vars(record).items():
        if isinstance(value, np.ndarray):
            row[name] = f"image {value.shape[0]}x{value.shape[1]}"
        elif isinstance(value, tuple):
            row[name] = list(value)
        else:
            row[name] = value
    return row
