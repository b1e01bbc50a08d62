"""The recipe of ``vision-mamba-mnist``: a :class:`core.lrp.VisionMamba` on mnist-5k, inputs ``image / 255`` as
``(1, 1, 28, 28)``; the head bias is held at zero so relevance is conserved."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from core.lrp.recipes.fast import fast_mixers
from core.lrp.recipes.lm import no_decay
from core.schedules import warmup_cosine
from core.zoo.construction import constructing
from core.progress import Progress, report, scaled
from core.zoo.training import adamw, param_count, save_trained, seed_everything, write_card


@dataclass(frozen=True)
class VisionRecipe:
    """A :class:`VisionMamba` on mnist-5k, inputs ``image / 255`` as ``(1, 1, 28, 28)``."""

    patch_size: int = 7             # a 4 x 4 grid of patches (the relevance map's resolution)
    hidden_size: int = 64
    num_layers: int = 4
    state_size: int = 8
    epochs: int = 12
    batch_size: int = 50
    lr: float = 3e-3
    warmup: int = 40
    weight_decay: float = 0.05
    max_shift: int = 2              # random translation, pixels (augmentation)
    train_limit: int = 0            # use only the first N training images (0 = all; the quick run)
    eval_limit: int = 0             # evaluate on the first N validation / test images (0 = all)
    seed: int = 0

    @classmethod
    def quick(cls, seed: int = 0) -> "VisionRecipe":
        return cls(patch_size=7, hidden_size=16, num_layers=1, state_size=4, epochs=1, batch_size=100, warmup=1,
                   train_limit=500, eval_limit=100, seed=seed)


def mnist_tensors(split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, 1, 28, 28)`` float pixels in [0, 1] and ``(N,)`` labels of a mnist-5k split."""
    import numpy as np

    import core.data as data

    recs = data.load("mnist-5k", split, limit=limit)
    x = torch.from_numpy(np.stack([np.asarray(r.image, dtype=np.float32) for r in recs]) / 255.0)
    return x[:, None], torch.tensor([int(r.label) for r in recs])


def _shift(x: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Random integer translations (zero fill) of a batch ``(B, 1, S, S)``."""
    if max_shift <= 0:
        return x
    b, _, s, _ = x.shape
    padded = F.pad(x, (max_shift,) * 4)
    dx = torch.randint(0, 2 * max_shift + 1, (b,), generator=gen).tolist()
    dy = torch.randint(0, 2 * max_shift + 1, (b,), generator=gen).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + s, dx[i]:dx[i] + s] for i in range(b)])


@torch.no_grad()
def image_accuracy(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 100) -> float:
    correct = sum(int((model(x[i:i + batch_size]).argmax(-1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    return correct / max(1, len(x))


def train_vision(recipe: VisionRecipe, out, progress: Progress | None = None, recipe_command: str = "") -> dict:
    """Train :class:`VisionMamba` on mnist-5k (train split), keep the best validation epoch, save to ``out``."""
    from core.lrp.models import VisionMamba, VisionMambaConfig

    t0 = time.perf_counter()
    gen = seed_everything(recipe.seed)
    x_train, y_train = mnist_tensors("train", recipe.train_limit or None)
    x_val, y_val = mnist_tensors("validation", recipe.eval_limit or None)
    cfg = VisionMambaConfig(image_size=28, patch_size=recipe.patch_size, in_channels=1,
                            hidden_size=recipe.hidden_size, num_layers=recipe.num_layers,
                            state_size=recipe.state_size, num_classes=10, use_conv_bias=False)
    with constructing():
        model = VisionMamba(cfg)
    with torch.no_grad():
        model.head.bias.zero_()
    model.head.bias.requires_grad_(False)  # held at zero: a bias would absorb relevance
    opt = adamw(model, recipe.lr, recipe.weight_decay, no_decay=no_decay)
    steps_per_epoch = math.ceil(len(x_train) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    training = scaled(progress, 0.0, 0.9)  # the epochs' share of the bar
    best, history, step = (-1.0, None, 0), [], 0
    for epoch in range(recipe.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=gen)
        with fast_mixers(model):
            for i in range(0, len(order), recipe.batch_size):
                idx = order[i:i + recipe.batch_size]
                xb = _shift(x_train[idx], recipe.max_shift, gen)
                for g in opt.param_groups:
                    g["lr"] = warmup_cosine(step, total, recipe.lr, recipe.warmup)
                loss = F.cross_entropy(model(xb), y_train[idx], label_smoothing=0.05)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                step += 1
                if step % 20 == 0:
                    report(training, step / total, f"epoch {epoch + 1} step {step}/{total} loss {float(loss.detach()):.3f}")
            model.eval()
            val_acc = image_accuracy(model, x_val, y_val)
        history.append(round(val_acc, 4))
        report(training, step / total, f"epoch {epoch + 1}: validation accuracy {val_acc:.4f}")
        if val_acc >= best[0]:
            best = (val_acc, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch + 1)
    train_s = time.perf_counter() - t0
    model.load_state_dict(best[1])
    def write(folder: Path) -> dict:
        model.save_pretrained(folder)
        reloaded = VisionMamba.from_pretrained(folder)
        x_test, y_test = mnist_tensors("test", recipe.eval_limit or None)
        test_acc = image_accuracy(reloaded, x_test, y_test)
        metrics = {"accuracy": round(test_acc, 4), "validation_accuracy": round(best[0], 4), "best_epoch": best[2],
                   "validation_history": history, "test_size": len(x_test), "parameters": param_count(reloaded),
                   "train_seconds": round(train_s, 1)}
        write_card(folder, {
            "title": "Vision Mamba on MNIST-5k (small, trained by the project)", "kind": "image-classifier",
            "origin": f"trained by the project: {recipe_command or 'core.lrp.recipes.train_vision'}",
            "quality": {"metric": "accuracy", "value": metrics["accuracy"], "dataset": "mnist-5k", "split": "test",
                        "n": len(x_test)},
            "input": "pixel_values = image / 255.0 as float32, shape (1, 1, 28, 28)",
            "recipe": recipe_command, "model_class": "core.lrp:VisionMamba",
            "training": {**asdict(recipe), **metrics}})
        return metrics
    metrics = save_trained(out, write)
    report(progress, 1.0, f"test accuracy {metrics['accuracy']}")
    return metrics
