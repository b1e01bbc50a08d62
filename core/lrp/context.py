"""A context manager that rewires a Mamba model's gradient paths for the duration of one explanation.

Inside :func:`lrp_rules` each mixer and normalisation layer gets an instance-level ``forward`` that
computes the same values with the MambaLRP rules, and the parameters stop requiring gradients (relevance
flows to the inputs only, so autograd keeps no layer inputs for weight gradients); on exit those attributes
are deleted and every module's ``training`` and every parameter's ``requires_grad`` flag is restored, so the
model the user passed is exactly as before (no parameter value is touched, nothing is registered,
``type(module).forward`` is never replaced).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from core.errors import BadInputError
from core.lrp import rules as R
from core.lrp.mixer import bimamba_mixer_forward, mamba_mixer_forward
from core.lrp.models import BiMambaMixer
from core.progress import Progress, report, scaled


class LayerProgress:
    """Reports ``callback(fraction, message)`` once per mixer in the forward pass (the first third) and once per mixer
    in the backward pass (the rest, last mixer first), as the gradient reaches each mixer's output. Whatever the
    callback raises (e.g. the app's Stop) stops the explanation there."""

    FORWARD_SHARE = 1 / 3

    def __init__(self, callback: Progress, n_layers: int):
        self.n = max(1, n_layers)
        self.forward = scaled(callback, 0.0, self.FORWARD_SHARE)
        self.backward = scaled(callback, self.FORWARD_SHARE, 1.0)

    def after_forward(self, out: torch.Tensor, layer: int) -> None:
        report(self.forward, (layer + 1) / self.n, f"forward pass: layer {layer + 1} of {self.n}")
        if out.requires_grad:
            out.register_hook(lambda grad: self._backward(layer))

    def _backward(self, layer: int) -> None:
        report(self.backward, (self.n - layer) / self.n, f"backward pass: layer {layer + 1} of {self.n}")


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_freed_memory(*_) -> None:
    """Give freed heap pages back to the OS (glibc's ``malloc_trim``; nothing elsewhere).

    With recomputation each mixer frees its temporaries (a few MB each at 512 tokens) before the next allocates
    its own, but glibc keeps such freed chunks resident, so without this the peak resident memory grows with the
    number of layers (mamba-130m, 512 tokens: +450 MB instead of +180 MB on top of the model).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _run_mixer(forward, module, hidden_states, rules, record, layer, recompute, progress):
    """``forward(module, hidden_states, rules, record, layer)``; with ``recompute`` its activations are not kept
    but recomputed in the backward pass (activation checkpointing; never when recording scans), and on the CPU
    freed heap pages are released after the mixer's forward and before its backward (on a GPU the activations
    are not in the host heap: no ``malloc_trim``)."""
    if recompute and record is None and torch.is_grad_enabled() and hidden_states.requires_grad:
        out = checkpoint(forward, module, hidden_states, rules, None, layer, use_reentrant=False)
        if hidden_states.device.type == "cpu":  # the activations live in the host heap only on the CPU
            release_freed_memory()
            out.register_hook(release_freed_memory)
    else:
        out = forward(module, hidden_states, rules, record, layer)
    if progress is not None:
        progress.after_forward(out, layer)
    return out


def _hf_mixer(module, hidden_states, cache_params=None, attention_mask=None, *, rules, record, layer, recompute,
              progress, **kwargs):
    if cache_params is not None or attention_mask is not None:
        raise BadInputError("MambaLRP explains one unpadded sequence without a cache.",
                            fix="Call the model without cache_params / attention_mask.")
    return _run_mixer(mamba_mixer_forward, module, hidden_states, rules, record, layer, recompute, progress)


def _bi_mixer(module, hidden_states, *, rules, record, layer, recompute, progress):
    return _run_mixer(bimamba_mixer_forward, module, hidden_states, rules, record, layer, recompute, progress)


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
    from transformers.models.mamba.modeling_mamba import MambaMixer  # when first needed (not at the app's start)

    return [m for m in model.modules() if isinstance(m, (MambaMixer, BiMambaMixer))]


@contextmanager
def lrp_rules(model: nn.Module, rules: R.LRPRules | None, record: list | None = None, freeze: bool = True,
              recompute: bool = False, progress=None):
    """Run ``model`` with the MambaLRP ``rules`` (None: original computation) inside the block.

    Parameters
    ----------
    model : any module containing Mamba mixers.
    rules : which rules to apply.
    record : if a list, every selective scan appends a :class:`core.lrp.mixer.ScanRecord` to it.
    freeze : parameters do not require gradients inside the block (gradients w.r.t. inputs only; saves
        the memory autograd would keep for weight gradients). ``False`` leaves them as they are.
    recompute : keep only each mixer's input for the backward pass and recompute the mixer there
        (activation checkpointing: memory of one layer's activations instead of all, one more forward's time).
    progress : ``progress(fraction, message)``, called per mixer in the forward and the backward pass (see
        :class:`LayerProgress`); an exception it raises stops the pass.

    The model is switched to eval mode inside the block; on exit the instance ``forward`` attributes
    are removed and the training and ``requires_grad`` flags restored, even if the block raised.
    """
    with _LOCK:
        with _rewired(model, rules, record, recompute, progress), _frozen(model, freeze):
            yield model


@contextmanager
def _frozen(model: nn.Module, freeze: bool):
    thawed = [p for p in model.parameters() if p.requires_grad] if freeze else []
    try:
        for p in thawed:
            p.requires_grad_(False)
        yield
    finally:
        for p in thawed:
            p.requires_grad_(True)


@contextmanager
def _rewired(model: nn.Module, rules: R.LRPRules | None, record: list | None, recompute: bool = False,
             progress=None):
    from transformers.models.mamba.modeling_mamba import MambaMixer, MambaRMSNorm  # when first needed, not at start

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
        progress = None if progress is None else LayerProgress(progress, len(found))
        for m in model.modules():
            if isinstance(m, MambaMixer):
                fn = functools.partial(_hf_mixer, m, rules=rules, record=record, layer=layer_of[id(m)],
                                       recompute=recompute, progress=progress)
            elif isinstance(m, BiMambaMixer):
                fn = functools.partial(_bi_mixer, m, rules=rules, record=record, layer=layer_of[id(m)],
                                       recompute=recompute, progress=progress)
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
