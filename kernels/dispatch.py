"""The one rule that picks a Triton kernel or its PyTorch reference twin."""
from __future__ import annotations

import functools
import os

import torch


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when ``triton`` imports (it is optional at run time on CPU-only hosts)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def interpreting() -> bool:
    """True under ``TRITON_INTERPRET=1``: kernels then run on CPU tensors (slowly), for tests."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(*tensors: torch.Tensor) -> bool:
    """Run the Triton kernel when every tensor is on CUDA, else the reference.

    Tests call the Triton wrappers directly on CPU tensors under the interpreter; dispatch itself
    never sends CPU tensors to Triton. ``LAYERWISE_KERNELS=ref`` forces the reference everywhere
    (for debugging and A/B timing).
    """
    if os.environ.get("LAYERWISE_KERNELS", "auto") == "ref" or not triton_available():
        return False
    return bool(tensors) and all(t.is_cuda for t in tensors)
