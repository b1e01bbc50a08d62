"""Fixed, seeded train / validation / test splits."""
from __future__ import annotations

import zlib

import numpy as np

SPLITS = ("train", "validation", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)


def split_seed(name: str) -> int:
    """A stable seed derived from the dataset name (same on every machine and Python version)."""
    return zlib.crc32(f"layerwise:{name}".encode())


def split_indices(n: int, name: str, fractions=DEFAULT_FRACTIONS) -> dict[str, np.ndarray]:
    """Partition ``range(n)`` into disjoint index arrays, one per split, in shuffled order.

    The permutation depends only on ``n`` and ``name``, so a split (and its order) never changes
    between runs; shuffled order means the first page of a split sorted by label shows every class.
    """
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must sum to 1, got {fractions}")
    perm = np.random.default_rng(split_seed(name)).permutation(n)
    n_train = int(round(n * fractions[0]))
    n_val = int(round(n * fractions[1]))
    parts = (perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:])
    return dict(zip(SPLITS, parts))
