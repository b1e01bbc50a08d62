"""A context manager that rewires a Mamba model's gradient paths for the duration of one explanation.

Inside :func:`lrp_rules` each block of :data:`core.lrp.blocks.BLOCKS` (mixers, attention layers, MLPs, norms) gets
an instance-level ``forward`` that computes the same values with the MambaLRP / AttnLRP rules (an attention layer
keeps its forward and gets a private config copy naming the rules' attention function), and the parameters stop
requiring gradients (relevance flows to the inputs only, so autograd keeps no layer inputs for weight gradients); on
exit those attributes are deleted and every module's ``training`` and every parameter's ``requires_grad`` flag is
restored, so the model the user passed is exactly as before (no parameter value is touched, nothing is registered,
``type(module).forward`` is never replaced)."""
from __future__ import annotations

import copy
import ctypes
import functools
import threading
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from core.errors import BadInputError
from core.lrp import rules as R
from core.lrp.adapters import position_embeddings
from core.lrp.blocks import BLOCKS, RuleContext, block_of, has_bias, register_attention, sequence_mixers
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


def _run_mixer(forward, module, hidden_states, recompute, progress, layer, *args, **kwargs):
    """``forward(module, hidden_states, *args, **kwargs)``; with ``recompute`` its activations are not kept but
    recomputed in the backward pass (activation checkpointing), and on the CPU freed heap pages are released after
    the mixer's forward and before its backward (on a GPU the activations are not in the host heap: no
    ``malloc_trim``)."""
    if recompute and torch.is_grad_enabled() and hidden_states.requires_grad:
        out = checkpoint(forward, module, hidden_states, *args, use_reentrant=False, **kwargs)
        first = out[0] if isinstance(out, tuple) else out  # an attention layer returns (output, probabilities)
        if hidden_states.device.type == "cpu":  # the activations live in the host heap only on the CPU
            release_freed_memory()
            if first.requires_grad:
                first.register_hook(release_freed_memory)
    else:
        out = forward(module, hidden_states, *args, **kwargs)
    if progress is not None:
        progress.after_forward(out[0] if isinstance(out, tuple) else out, layer)
    return out


def _hidden_states(args, kwargs):
    if args:
        return args[0], args[1:], kwargs
    for key in ("hidden_states", "x", "layer_input"):
        if key in kwargs:
            rest = dict(kwargs)
            return rest.pop(key), (), rest
    return None, args, kwargs


def _input_key(kwargs) -> str:
    return next(k for k in ("hidden_states", "x", "layer_input") if k in kwargs)


def _block_call(module, *args, block, ctx, recompute=False, progress=None, index=0, **kwargs):
    """A registered block's forward with the rules (:mod:`core.lrp.blocks`), traced and reported when asked."""
    hidden, rest, rest_kwargs = _hidden_states(args, kwargs)
    forward = functools.partial(block.forward, ctx)
    if ctx.trace is not None and block.kind != "norm" and isinstance(hidden, torch.Tensor):
        # the block's own alias of its input: blocks that read one tensor (Granite's experts and shared MLP) then each
        # see only the gradient through themselves, not the sum over every reader
        key = None if args else _input_key(kwargs)
        hidden = hidden.view_as(hidden)
        args, kwargs = ((hidden, *rest), rest_kwargs) if key is None else ((), {**rest_kwargs, key: hidden})
    if block.mixer and hidden is not None:
        keep = recompute and ctx.record is None and ctx.trace is None and ctx.attention is None
        out = _run_mixer(forward, module, hidden, keep, progress, index, *rest, **rest_kwargs)
    else:
        out = forward(module, *args, **kwargs)
    if ctx.trace is not None and block.kind != "norm":
        ctx.trace.add(ctx.layer, block.kind, block.label, ctx.name, hidden, out[0] if isinstance(out, tuple) else out,
                      block.name)
    return out


def _decoder_layer(path: str, fallback: int) -> int:
    """The decoder layer index in a module path (``model.layers.3.mamba`` -> 3), else ``fallback``."""
    for part in path.split("."):
        if part.isdigit():
            return int(part)
    return fallback


_MISSING = object()
# The rewiring is per model instance, so two threads (e.g. Gradio workers) explaining at once would
# see each other's forwards: contexts are serialised (re-entrant for nested use on one thread).
_LOCK = threading.RLock()


def mixers(model: nn.Module) -> list[nn.Module]:
    """The sequence mixers of ``model`` (SSM mixers and attention layers, :mod:`core.lrp.blocks`), in order."""
    return [m for _, m in sequence_mixers(model)]


@contextmanager
def lrp_rules(model: nn.Module, rules: R.LRPRules | None, record: list | None = None, freeze: bool = True,
              recompute: bool = False, progress=None, trace=None, attention: list | None = None):
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
    trace : a :class:`core.lrp.trace.Trace` that notes every block's input and output and what biases and softmaxes
        absorb (every linear layer's bias too, through a forward hook), or None.
    attention : a list that collects ``(layer, softmax probabilities (B, h, L, S))`` of every attention layer (in
        the graph), or None.

    The model is switched to eval mode inside the block; on exit the instance ``forward`` attributes
    are removed and the training and ``requires_grad`` flags restored, even if the block raised.
    """
    with _LOCK:
        with _rewired(model, rules, record, recompute, progress, trace, attention), _frozen(model, freeze):
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
             progress=None, trace=None, attention: list | None = None):
    found = sequence_mixers(model)
    if not found:
        raise BadInputError(f"{type(model).__name__} has no Mamba mixer layer.",
                            fix="Pass a transformers Mamba model or one of core.lrp's Mamba models.")
    for _, m in found:
        act = getattr(m, "activation", "silu")
        if BLOCKS[block_of(m)].kind == "ssm" and act != "silu":
            raise BadInputError(f"MambaLRP supports SiLU mixers, this one uses {act!r}.")
    training = [(m, m.training) for m in model.modules()]
    patched: list[tuple[nn.Module, str, object]] = []
    hooks = []
    ledger = trace.ledger if trace is not None else None
    try:
        model.eval()
        index_of = {id(m): i for i, (_, m) in enumerate(found)}
        progress = None if progress is None else LayerProgress(progress, len(found))
        _set(model, "_layerwise_rules", rules, patched)  # what the adapter's own steps (Gemma's logit cap) apply
        if ledger is not None:
            hooks += [m.register_forward_hook(_constant_input(ledger)) for m in position_embeddings(model)]
        for path, m in model.named_modules():
            name = block_of(m)
            if name is None:
                if ledger is not None and has_bias(m):
                    hooks.append(m.register_forward_hook(lambda mod, inp, out: ledger.bias(out, mod.bias)))
                continue
            block = BLOCKS[name]
            index = index_of.get(id(m), 0)
            ctx = RuleContext(rules, record, ledger, trace, _decoder_layer(path, index) if trace is not None else index,
                              path, attention)
            if block.kind == "attention":
                _set(m, "config", _attention_config(m.config), patched)
                _set(m, "_layerwise_ctx", ctx, patched)
            fn = functools.partial(_block_call, m, block=block, ctx=ctx, recompute=recompute, progress=progress,
                                   index=index)
            _set(m, "forward", fn, patched)
        yield model
    finally:
        for h in hooks:
            h.remove()
        for m, attr, previous in reversed(patched):
            if previous is _MISSING:
                m.__dict__.pop(attr, None)
            else:  # e.g. an accelerate hook or an enclosing lrp_rules
                m.__dict__[attr] = previous
        for m, flag in training:
            m.training = flag


def _constant_input(ledger):
    """A forward hook for a module whose output the model adds to the embeddings as a constant (learned positions):
    its output becomes a leaf of the graph, noted in the ledger as a bias (it absorbs ``p . dlogit/dp``)."""
    def hook(module, inputs, out):
        leaf = out.detach().requires_grad_(True)
        ledger.bias(leaf, out.detach())
        return leaf
    return hook


def _set(module: nn.Module, attr: str, value, patched: list) -> None:
    patched.append((module, attr, module.__dict__.get(attr, _MISSING)))
    module.__dict__[attr] = value


def _attention_config(config):
    """A shallow copy of an attention module's config whose attention implementation is
    :func:`core.lrp.blocks.attention_function` (the model's own config is never changed)."""
    copied = copy.copy(config)
    copied._attn_implementation = register_attention()
    return copied
