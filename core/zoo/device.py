"""Where loaded models run.

Locally and on a CPU Space: the CPU, as always (nothing is moved, nothing is checked). On a Hugging Face Space with a
GPU (a dedicated one, or ZeroGPU, which attaches a GPU for the length of each ``spaces.GPU`` call: see ``ui.gpu``):
the GPU, so the heavy handlers compute there. ``LAYERWISE_DEVICE`` overrides the rule: ``cpu``, ``cuda`` or
``cuda:N`` (``auto``, the default, is the rule above).
"""
from __future__ import annotations

import os
import re

from core.errors import BadInputError


def model_device() -> str:
    """``cpu``, ``cuda`` or ``cuda:N``: where :func:`core.zoo.load_model` puts models (see the module doc)."""
    choice = os.environ.get("LAYERWISE_DEVICE", "auto").strip().lower() or "auto"
    if choice == "cpu" or re.fullmatch(r"cuda(:\d+)?", choice):
        return choice
    if choice != "auto":
        raise BadInputError(f"LAYERWISE_DEVICE={choice!r} is not a device.", fix="use auto, cpu, cuda or cuda:N.")
    if not os.environ.get("SPACE_ID"):
        return "cpu"
    if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
        return "cuda"  # ZeroGPU: the GPU is there inside spaces.GPU calls; moves outside them are deferred by spaces
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def on_model_device(loaded):
    """``loaded`` (a :class:`core.zoo.LoadedModel`) with its model on :func:`model_device` (moved once; on the CPU,
    as everywhere but a GPU Space, it is returned untouched; so is a model accelerate spread over devices with
    ``--device-map``, whose placement is its own)."""
    from core.zoo.placement import is_dispatched

    device = model_device()
    if device == "cpu" or is_dispatched(loaded.model):
        return loaded
    import torch

    param = next(iter(loaded.model.parameters()), None)
    if param is not None and param.device != torch.device(device):
        loaded.model.to(device)
    return loaded
