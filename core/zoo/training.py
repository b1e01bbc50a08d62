"""Plumbing shared by the recipes that train the project's embedded models (``core.lrp.recipes``,
``core.mathneuro.recipe``): seeding, the AdamW set-up, saving a trained folder atomically with its card.

A recipe is seeded (same config and seed, same weights on the same machine and thread count), trains, then
writes its folder in one step with :func:`save_trained`: an interrupted run leaves the old folder as it was.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from core.files import atomic_write
from core.progress import Progress, report

__all__ = ["seed_everything", "adamw", "param_count", "save_trained", "write_card", "report", "Progress"]


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's and torch's global generators; return a torch generator seeded the same way."""
    random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def adamw(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.98),
          no_decay: Callable[[str, torch.Tensor], bool] | None = None) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only: vectors (biases, norm weights) and the parameters for which
    ``no_decay(name, p)`` is true get none."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (plain if p.dim() < 2 or (no_decay is not None and no_decay(name, p)) else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=lr, betas=betas)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def write_card(folder: Path, card: dict) -> None:
    """``card.json`` of a model the project trained (licence ``project`` unless the card says otherwise)."""
    from core.zoo.card import write_card_file

    write_card_file(folder, {"license": "project", **card})


def save_trained(out: str | Path, write: Callable[[Path], object]):
    """Fill the model folder ``out`` in one step: ``write(tmp)`` saves the weights, tokenizer and card into a
    temporary sibling (and may reload and measure them); then it replaces ``out``. Returns ``write``'s value."""
    box = {}

    def fill(tmp: Path) -> None:
        box["value"] = write(tmp)
    atomic_write(Path(out), fill, folder=True)
    return box.get("value")
