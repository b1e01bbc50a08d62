"""Offline-by-default switches.

Layerwise never reaches a model or dataset hub unless the user opts in (``--online`` on the app
or CLI, or ``LAYERWISE_ONLINE=1``). The switches must be set before ``huggingface_hub``,
``transformers`` or ``gradio`` are imported, so entry points call :func:`configure` first.
"""
from __future__ import annotations

import os

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def is_online() -> bool:
    """True when the user opted in to hub access."""
    return os.environ.get("LAYERWISE_ONLINE", "0") == "1"


def configure(online: bool | None = None) -> bool:
    """Set the process environment for offline (default) or online use; return the mode."""
    if online is None:
        online = is_online()
    os.environ["LAYERWISE_ONLINE"] = "1" if online else "0"
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    for var in _OFFLINE_VARS:
        if online:
            os.environ.pop(var, None)
        else:
            os.environ[var] = "1"
    return online
