"""The papers' real datasets through Hugging Face ``datasets`` (opt-in: needs ``--online``).

Each :class:`HubSource` maps our three splits onto the hub's and converts hub rows into the same
record types as the offline stand-ins. A hub split we need but the hub lacks is carved, seeded,
out of the hub's train split (``("train", "head")`` = first 90 % of a fixed permutation, ``"tail"`` = the rest).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from core.data.records import MathProblem, MultipleChoice, Passage, TextLabel, canonical_number
from core.data.splits import split_seed
from core.errors import DataMissingError
from core.settings import bound_hub_requests, is_online

_LETTERS = "ABCDEFGHIJ"


def sst2_rows(rows: Iterable[dict]) -> list[TextLabel]:
    return [TextLabel(text=r["sentence"].strip(), label=int(r["label"])) for r in rows if int(r["label"]) >= 0]


def gsm8k_rows(rows: Iterable[dict]) -> list[MathProblem]:
    out = []
    for r in rows:
        solution = r["answer"].strip()
        answer = canonical_number(solution.rsplit("####", 1)[-1])
        out.append(MathProblem(question=r["question"].strip(), answer=answer, solution=solution))
    return out


def race_rows(rows: Iterable[dict]) -> list[MultipleChoice]:
    return [MultipleChoice(question=r["question"], choices=tuple(r["options"]), answer=_LETTERS.index(r["answer"]),
                           passage=r["article"]) for r in rows]


def mmlu_rows(rows: Iterable[dict]) -> list[MultipleChoice]:
    return [MultipleChoice(question=r["question"], choices=tuple(r["choices"]), answer=int(r["answer"]),
                           subject=r.get("subject")) for r in rows]


def wikitext_rows(rows: Iterable[dict]) -> list[Passage]:
    """WikiText lines -> paragraphs: headings (`` = Title = ``) and blank lines are dropped."""
    out = []
    for r in rows:
        text = r["text"].strip()
        if text and not (text.startswith("=") and text.endswith("=")):
            out.append(Passage(text=text, source="wikitext-2"))
    return out


@dataclass(frozen=True)
class HubSource:
    """Where a real dataset lives on the hub and how its rows become records."""

    path: str
    config: str | None
    splits: dict  # our split -> (hub split, None | "head" | "tail")
    convert: Callable[[Iterable[dict]], list]


HUB_SOURCES: dict[str, HubSource] = {
    "sst2": HubSource("stanfordnlp/sst2", None,
                      {"train": ("train", "head"), "validation": ("train", "tail"), "test": ("validation", None)},
                      sst2_rows),
    "gsm8k": HubSource("openai/gsm8k", "main",
                       {"train": ("train", "head"), "validation": ("train", "tail"), "test": ("test", None)},
                       gsm8k_rows),
    "race": HubSource("ehovy/race", "all",
                      {"train": ("train", None), "validation": ("validation", None), "test": ("test", None)},
                      race_rows),
    "mmlu-hub": HubSource("cais/mmlu", "all",
                          {"train": ("dev", None), "validation": ("validation", None), "test": ("test", None)},
                          mmlu_rows),
    "wikitext-2": HubSource("Salesforce/wikitext", "wikitext-2-raw-v1",
                            {"train": ("train", None), "validation": ("validation", None), "test": ("test", None)},
                            wikitext_rows),
}


def _carve(rows: list, name: str, part: str | None) -> list:
    if part is None:
        return rows
    perm = np.random.default_rng(split_seed(name)).permutation(len(rows))
    cut = int(round(len(rows) * 0.9))
    keep = np.sort(perm[:cut] if part == "head" else perm[cut:])
    return [rows[i] for i in keep]


def load_hub(name: str, split: str, loader: Callable | None = None) -> list:
    """Records of hub dataset ``name`` for our ``split``. ``loader`` defaults to ``datasets.load_dataset``."""
    source = HUB_SOURCES[name]
    if loader is None:
        if not is_online():
            raise DataMissingError(f"dataset {name!r} lives on the Hugging Face hub and Layerwise is offline.",
                                   fix="start the app or CLI with --online (or set LAYERWISE_ONLINE=1).")
        bound_hub_requests()
        try:
            from datasets import load_dataset as loader  # type: ignore[no-redef]
        except ImportError as exc:  # pragma: no cover - datasets is in requirements.txt
            raise DataMissingError("the `datasets` package is not installed.", fix="pip install datasets") from exc
    hub_split, part = source.splits[split]
    try:
        rows = loader(source.path, source.config, split=hub_split) if source.config else \
            loader(source.path, split=hub_split)
    except Exception as exc:  # network, auth, missing split: all surface the same way
        raise DataMissingError(f"could not load {source.path} ({hub_split}) from the hub: {exc}",
                               fix="check the network and the dataset id, or use an offline dataset.") from exc
    return source.convert(_carve(list(rows), name, part))
