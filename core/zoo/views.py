"""Private views of a shared model: what one request may change without another request seeing it.

The app keeps one model in memory per reference and serves many requests on it at once, so a request
must never write to it: not its weights (an intervention), not its hooks (collecting statistics), not
its train/eval flags. :func:`private_view` gives a request its own module tree over the same weights:

- every module is a shallow copy with its own ``_parameters`` / ``_buffers`` / ``_modules`` dicts and its
  own hook dicts, so hooks registered and flags set on the view stay on the view;
- parameter and buffer tensors are shared (no copy), except those named in ``replacements``, which the
  view holds instead (tied parameters are replaced everywhere they appear);
- with ``own_parameters``, the view's parameters are its own ``nn.Parameter`` objects over the same storage, so
  ``requires_grad`` flags and gradients stay on the view too (MambaLRP freezes parameters while it explains);
- the original model is never written; the view is dropped with the request.

Every paper uses it: MathNeuro's statistics and interventions, MambaLRP's rewired forwards, Mix-LN's skipped layers.

A model spread over devices by accelerate (``--device-map``, :mod:`core.zoo.placement`) carries hooks that load an
offloaded layer's weights into the module for each forward and drop them after. The view gets its own copy of every
hook, bound to its own modules, so those loads land in the view's parameter dicts, never the model's; and a
replacement of an offloaded parameter is served by the view's hook (:class:`core.zoo.placement.ServedWeights`) as
its layer runs: a callable there computes the changed matrix from the stored one each time, so nothing of the
offloaded weights is kept.

The cost is one small Python object per module (and per hook), plus whatever the resident replacements weigh.
"""
from __future__ import annotations

import torch
from torch import nn


def _rebind(bound, old, new):
    """``bound`` (a method or partial bound to module ``old``) bound to ``new`` instead."""
    import functools
    import types
    if isinstance(bound, types.MethodType) and bound.__self__ is old:
        return types.MethodType(bound.__func__, new)
    if isinstance(bound, functools.partial) and bound.args and bound.args[0] is old:
        return functools.update_wrapper(functools.partial(bound.func, new, *bound.args[1:], **bound.keywords), bound)
    raise ValueError(f"cannot make a private view of {type(old).__name__}: its accelerate hook wraps an unknown forward")


def _own_hooks(module: nn.Module, clone: nn.Module, served: dict[str, object]) -> None:
    """Give ``clone`` copies of ``module``'s accelerate hooks, bound to ``clone``; ``served`` (names relative to the
    module) replaces what its offload hook loads."""
    import copy

    from accelerate.hooks import SequentialHook
    from core.zoo.placement import ServedWeights, offload_hook

    hook = copy.copy(module._hf_hook)
    if isinstance(hook, SequentialHook):
        hook.hooks = tuple(copy.copy(h) for h in hook.hooks)
    clone._hf_hook = hook
    target = offload_hook(clone) if served else None
    if target is not None:  # the names this hook loads (its own parameters, or its submodules' when it places them)
        mine = {n: v for n, v in served.items() if n in target.weights_map and (target.place_submodules or "." not in n)}
        if mine:
            target.weights_map = ServedWeights(target.weights_map, mine)
    if "_old_forward" in module.__dict__:
        clone._old_forward = _rebind(module._old_forward, module, clone)
    if "forward" in module.__dict__:
        clone.forward = _rebind(module.forward, module, clone)


def _copy_module(module: nn.Module, memo: dict[int, nn.Module], swap: dict[int, torch.Tensor],
                 served: dict[str, object], prefix: str = "") -> nn.Module:
    if id(module) in memo:  # a module used twice (e.g. shared blocks) stays one module in the view
        return memo[id(module)]
    clone = object.__new__(type(module))
    state = {}
    for key, value in module.__dict__.items():  # own dicts, sets and lists: hooks and flags stay private
        state[key] = value.copy() if isinstance(value, (dict, set, list)) else value
    clone.__dict__.update(state)
    memo[id(module)] = clone
    for name, param in module._parameters.items():
        if param is not None and id(param) in swap:
            clone._parameters[name] = swap[id(param)]
    if "_hf_hook" in module.__dict__:  # dispatched by accelerate: the hook must load into the view, not the model
        mine = {n[len(prefix):]: v for n, v in served.items() if n.startswith(prefix)}
        _own_hooks(module, clone, mine)
    for name, child in module._modules.items():
        if child is not None:
            clone._modules[name] = _copy_module(child, memo, swap, served, f"{prefix}{name}.")
    return clone


def private_view(model: nn.Module, replacements: dict[str, object] | None = None, *,
                 own_parameters: bool = False) -> nn.Module:
    """A view of ``model`` that shares its weights but nothing a request could change.

    Parameters
    ----------
    model : any nn.Module (a Hugging Face model included, also one dispatched by accelerate); never written.
    replacements : parameter name -> tensor of the same shape and dtype, held by the view instead
        (as an ``nn.Parameter`` with the original's ``requires_grad``). For a parameter offloaded by accelerate
        (on ``meta``), the value may also be a callable returning the tensor: the view's hook calls it each time
        the parameter's layer runs.
    own_parameters : give every parameter of the view its own ``nn.Parameter`` object over the same storage (no
        copy), so that ``requires_grad`` flags and ``.grad`` set on the view stay on the view (tied parameters stay
        tied). Without it the view holds the model's own parameter objects.

    Returns
    -------
    nn.Module of ``model``'s class: the same forward, the same outputs (bit for bit) without
    replacements.
    """
    from core.zoo.placement import offloaded_names

    params = dict(model.named_parameters(remove_duplicate=False))
    offloaded = set(offloaded_names(model)) if replacements else set()
    swap: dict[int, torch.Tensor] = {}
    served: dict[str, object] = {}
    if own_parameters:
        for param in params.values():
            if id(param) not in swap:
                swap[id(param)] = nn.Parameter(param.detach(), requires_grad=param.requires_grad)
    for name, tensor in (replacements or {}).items():
        original = params[name]
        if name in offloaded:  # loaded by the layer's hook for each forward: the view's hook serves this instead
            if isinstance(tensor, torch.Tensor) and (tensor.shape != original.shape or tensor.dtype != original.dtype):
                raise ValueError(f"the replacement for {name} has shape {tuple(tensor.shape)} / {tensor.dtype}, "
                                 f"not {tuple(original.shape)} / {original.dtype}")
            served[name] = tensor
            continue
        if tensor.shape != original.shape or tensor.dtype != original.dtype:
            raise ValueError(f"the replacement for {name} has shape {tuple(tensor.shape)} / {tensor.dtype}, "
                             f"not {tuple(original.shape)} / {original.dtype}")
        swap[id(original)] = nn.Parameter(tensor, requires_grad=original.requires_grad)
    return _copy_module(model, {}, swap, served)
