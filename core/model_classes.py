"""The project's own model classes a ``card.json`` may name as ``model_class`` (besides ``hf``, transformers' own):
the name a card writes -> a function that imports and returns the class, called only when a card names it (the paper
packages pull in torch and transformers). The papers own their classes, so the zoo, below them, cannot import them:
:mod:`core.papers` fills this slot when ``core`` is imported, and :mod:`core.zoo` reads it. Nothing else is imported
from a card: a card is data, and a folder may come from anywhere."""
from __future__ import annotations

from typing import Callable

MODEL_CLASSES: dict[str, Callable[[], type]] = {}


def register(name: str, load: Callable[[], type]) -> None:
    """Let cards name ``name`` (``"core.<paper>:<Class>"``), loaded by ``load()``."""
    if MODEL_CLASSES.get(name, load) is not load:
        raise ValueError(f"two model classes named {name!r}")
    MODEL_CLASSES[name] = load


__all__ = ["MODEL_CLASSES", "register"]
