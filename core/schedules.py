"""Learning-rate schedules shared by the project's training recipes."""
from __future__ import annotations

import math


def warmup_cosine(step: int, total: int, peak: float, warmup: int, floor_ratio: float = 0.1) -> float:
    """Learning rate at 0-based ``step``: linear warmup to ``peak``, then cosine decay to ``floor_ratio * peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_ratio + (1 - floor_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))
