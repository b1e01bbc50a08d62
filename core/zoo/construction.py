"""One process-wide lock around every model construction and load.

Building a model is not thread-safe. ``transformers``' ``from_pretrained`` patches process-wide state while it builds
a model: ``PreTrainedModel.tie_weights`` and ``init_weights`` are replaced by no-ops, the ``torch.nn.init`` functions
by guarded or empty ones, ``torch.linspace`` by a CPU-defaulting twin, and torch's default dtype is set to the
checkpoint's. Two loads in two threads interleave these patches: one thread builds its model while the other's patch
is in force (the tied ``lm_head`` is left untied and randomly initialised, or stays on the meta device), and the
second thread to leave restores the *first* thread's patch as the "original", so every later load in the process is
broken too. A plain construction (``LlamaForCausalLM(config)``, a project model) in a third thread meets the same
patches.

So every construction and load in Layerwise runs inside :func:`constructing`: one re-entrant lock for the whole
process, and a guard that puts back any of that process-wide state a library left changed (it logs which). A
construction that seeds torch's global generator for its initial weights does so inside the lock
(``constructing(seed=...)``), so no other construction draws from the generator in between.

Only construction is serialised: a model, once built, is used by many requests at once (through private views,
:func:`core.zoo.views.private_view`, when a request needs to change anything).
"""
from __future__ import annotations

import logging
import sys
import threading
from contextlib import contextmanager

import torch

log = logging.getLogger("layerwise.zoo")

_LOCK = threading.RLock()
_depth = threading.local()

# the module-level functions transformers (and accelerate's init_empty_weights) patch while a model is built
_TORCH_MODULES = ("torch.nn.init", "torch.nn.modules.activation", "torch.nn.modules.transformer",
                  "torch.nn.modules.linear", "torch.nn.modules.loss", "torch.nn.modules.batchnorm",
                  "torch.nn.modules.conv", "torch.nn.modules.normalization", "torch.nn.modules.rnn",
                  "torch.nn.modules.sparse")
_INIT_NAMES = tuple(n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_"))


def _patchable() -> list[tuple[object, str]]:
    """(owner, attribute) of every piece of process-wide state a model construction may patch."""
    spots: list[tuple[object, str]] = [(torch, "linspace"), (torch, "arange"), (torch, "empty"), (torch, "zeros"),
                                       (torch.nn.Module, "register_parameter"), (torch.nn.Module, "register_buffer")]
    for name in _TORCH_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            spots += [(module, attr) for attr in _INIT_NAMES if attr in vars(module)]
    modeling = sys.modules.get("transformers.modeling_utils")
    if modeling is not None:
        spots += [(modeling.PreTrainedModel, attr) for attr in ("tie_weights", "init_weights", "_init_weights",
                                                                "post_init", "initialize_weights")
                  if attr in vars(modeling.PreTrainedModel)]
    return spots


def global_state() -> dict:
    """A snapshot of the process-wide state model constructions patch: torch's default dtype and the functions
    above, by identity."""
    state: dict = {("torch", "default_dtype"): torch.get_default_dtype()}
    for owner, attr in _patchable():
        state[(owner, attr)] = vars(owner).get(attr)
    return state


def restore_global_state(before: dict) -> list[str]:
    """Put back whatever differs from ``before`` (a :func:`global_state` snapshot); the names of what was put back."""
    restored = []
    for key, value in before.items():
        if key == ("torch", "default_dtype"):
            if torch.get_default_dtype() != value:
                torch.set_default_dtype(value)
                restored.append("torch default dtype")
            continue
        owner, attr = key
        if vars(owner).get(attr) is not value:
            setattr(owner, attr, value)
            restored.append(f"{getattr(owner, '__name__', owner)}.{attr}")
    return restored


@contextmanager
def constructing(seed: int | None = None):
    """Hold the process-wide model-construction lock (re-entrant) for the block; with ``seed``, seed torch's global
    generator inside it. On leaving the outermost block, any process-wide state a library left patched is put back.

    Examples
    --------
    >>> with constructing():
    ...     model = AutoModelForCausalLM.from_pretrained(folder)
    """
    with _LOCK:
        outermost = getattr(_depth, "n", 0) == 0
        before = global_state() if outermost else None
        _depth.n = getattr(_depth, "n", 0) + 1
        try:
            if seed is not None:
                torch.manual_seed(seed)
            yield
        finally:
            _depth.n -= 1
            if outermost:
                restored = restore_global_state(before)
                if restored:
                    log.warning("a model construction left process-wide state patched; put back: %s",
                                ", ".join(restored))

