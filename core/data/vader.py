"""The VADER paper's data (Hutto & Gilbert, 2014), read from the vaderSentiment sdist installed at set-up time:
its human-rated ground-truth sentences beyond the movie snippets, and its sentiment lexicon."""
from __future__ import annotations

import contextlib

from core.errors import BadInputError

VADER_GROUND_TRUTH = {"amazon": "amazonReviewSnippets_GroundTruth.txt", "nyt": "nytEditorialSnippets_GroundTruth.txt",
                      "tweets": "tweets_GroundTruth.txt"}


def vader_text(member: str) -> str:
    """One file of the VADER paper's archive (``hutto_ICWSM_2014/<member>``) as text."""
    from core.data.artifacts import ARTIFACTS, read_member
    from core.data.sources import _VADER_ARCHIVE

    return read_member(ARTIFACTS["vader"], f"{_VADER_ARCHIVE}!hutto_ICWSM_2014/{member}").decode("utf-8", "replace")


def extra_sentiment_records(names: str) -> list:
    """The other VADER ground-truth sentences (``"amazon,nyt,tweets"``) as ``TextLabel``; neutral (0) dropped."""
    from core.data.records import TextLabel

    records = []
    for name in [n.strip() for n in names.split(",") if n.strip()]:
        if name not in VADER_GROUND_TRUTH:
            raise BadInputError(f"unknown extra sentiment data {name!r}.", fix=f"use {', '.join(VADER_GROUND_TRUTH)}.")
        for line in vader_text(VADER_GROUND_TRUTH[name]).splitlines():
            parts = line.strip("\r\n").split("\t")
            if len(parts) < 3 or float(parts[1]) == 0:
                continue
            records.append(TextLabel(text=parts[2].strip(), label=int(float(parts[1]) > 0), score=float(parts[1])))
    return records


def vader_lexicon() -> dict[str, float]:
    """``word -> mean valence`` in [-4, 4] from ``vader_sentiment_lexicon.txt``."""
    lexicon = {}
    for line in vader_text("vader_sentiment_lexicon.txt").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2:
            with contextlib.suppress(ValueError):
                lexicon[parts[0].strip()] = float(parts[1])
    return lexicon
