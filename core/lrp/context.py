"""A context manager that rewires a Mamba model's gradient paths for the duration of one explanation.

Inside :func:`lrp_rules` each mixer and normalisation layer gets an instance-level ``forward`` that
computes the same values with the MambaLRP rules; on exit those attributes are deleted and every
module's ``training`` flag is restored, so the model the user passed is exactly as before (no
parameter is touched, nothing is registered, ``type(module).forward`` is never replaced).
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager

from torch import nn
from transformers.models.mamba.modeling_mamba import MambaMixer, MambaRMSNorm

from core.errors import BadInputError
from core.lrp import rules as R
from core.lrp.mixer import bimamba_mixer_forward, mamba_mixer_forward
from core.lrp.models import BiMambaMixer


def _hf_mixer(module, hidden_states, cache_params=None, attention_mask=None, *, rules, record, layer, **kwargs):
    if cache_params is not None or attention_mask is not None:
        raise BadInputError("MambaLRP explains one unpadded sequence without a cache.",
                            fix="Call the model without cache_params / attention_mask.")
    return mamba_mixer_forward(module, hidden_states, rules, record, layer)


def _bi_mixer(module, hidden_states, *, rules, record, layer):
    return bimamba_mixer_forward(module, hidden_states, rules, record, layer)


def _rms_norm(module, hidden_states, *, rules):
    return R.rms_norm(hidden_states, module.weight, module.variance_epsilon, rules)


def _layer_norm(module, x, *, rules):
    return R.layer_norm(x, module, rules)


_MISSING = object()
# The rewiring is per model instance, so two threads (e.g. Gradio workers) explaining at once would
# see each other's forwards: contexts are serialised (re-entrant for nested use on one thread).
_LOCK = threading.RLock()


def mixers(model: nn.Module) -> list[nn.Module]:
    """The Mamba mixers of ``model`` (transformers' ``MambaMixer`` or :class:`BiMambaMixer`), in order."""
    return [m for m in model.modules() if isinstance(m, (MambaMixer, BiMambaMixer))]


@contextmanager
def lrp_rules(model: nn.Module, rules: R.LRPRules | None, record: list | None = None):
    """Run ``model`` with the MambaLRP ``rules`` (None: original computation) inside the block.

    Parameters
    ----------
    model : any module containing Mamba mixers.
    rules : which rules to apply.
    record : if a list, every selective scan appends a :class:`core.lrp.mixer.ScanRecord` to it.

    The model is switched to eval mode inside the block; on exit the instance ``forward`` attributes
    are removed and the training flags restored, even if the block raised.
    """
    with _LOCK:
        with _rewired(model, rules, record):
            yield model


@contextmanager
def _rewired(model: nn.Module, rules: R.LRPRules | None, record: list | None):
    found = mixers(model)
    if not found:
        raise BadInputError(f"{type(model).__name__} has no Mamba mixer layer.",
                            fix="Pass a transformers Mamba model or one of core.lrp's Mamba models.")
    for m in found:
        act = getattr(m, "activation", "silu")
        if act != "silu":
            raise BadInputError(f"MambaLRP supports SiLU mixers, this one uses {act!r}.")
    training = [(m, m.training) for m in model.modules()]
    patched: list[tuple[nn.Module, object]] = []
    try:
        model.eval()
        layer_of = {id(m): i for i, m in enumerate(found)}
        for m in model.modules():
            if isinstance(m, MambaMixer):
                fn = functools.partial(_hf_mixer, m, rules=rules, record=record, layer=layer_of[id(m)])
            elif isinstance(m, BiMambaMixer):
                fn = functools.partial(_bi_mixer, m, rules=rules, record=record, layer=layer_of[id(m)])
            elif isinstance(m, MambaRMSNorm):
                fn = functools.partial(_rms_norm, m, rules=rules)
            elif isinstance(m, nn.LayerNorm):
                fn = functools.partial(_layer_norm, m, rules=rules)
            else:
                continue
            patched.append((m, m.__dict__.get("forward", _MISSING)))
            m.__dict__["forward"] = fn
        yield model
    finally:
        for m, previous in reversed(patched):
            if previous is _MISSING:
                m.__dict__.pop("forward", None)
            else:  # e.g. an accelerate hook or an enclosing lrp_rules
                m.__dict__["forward"] = previous
        for m, flag in training:
            m.training = flag
