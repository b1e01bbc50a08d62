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
The cost is one small Python object per module, plus whatever the replacements weigh.
"""
from __future__ import annotations

import torch
from torch import nn


def _copy_module(module: nn.Module, memo: dict[int, nn.Module], swap: dict[int, torch.Tensor]) -> nn.Module:
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
    for name, child in module._modules.items():
        if child is not None:
            clone._modules[name] = _copy_module(child, memo, swap)
    return clone


def private_view(model: nn.Module, replacements: dict[str, torch.Tensor] | None = None, *,
                 own_parameters: bool = False) -> nn.Module:
    """A view of ``model`` that shares its weights but nothing a request could change.

    Parameters
    ----------
    model : any nn.Module (a Hugging Face model included); never written.
    replacements : parameter name -> tensor of the same shape and dtype, held by the view instead
        (as an ``nn.Parameter`` with the original's ``requires_grad``).
    own_parameters : give every parameter of the view its own ``nn.Parameter`` object over the same storage (no
        copy), so that ``requires_grad`` flags and ``.grad`` set on the view stay on the view (tied parameters stay
        tied). Without it the view holds the model's own parameter objects.

    Returns
    -------
    nn.Module of ``model``'s class: the same forward, the same outputs (bit for bit) without
    replacements.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    swap: dict[int, torch.Tensor] = {}
    if own_parameters:
        for param in params.values():
            if id(param) not in swap:
                swap[id(param)] = nn.Parameter(param.detach(), requires_grad=param.requires_grad)
    for name, tensor in (replacements or {}).items():
        original = params[name]
        if tensor.shape != original.shape or tensor.dtype != original.dtype:
            raise ValueError(f"the replacement for {name} has shape {tuple(tensor.shape)} / {tensor.dtype}, "
                             f"not {tuple(original.shape)} / {original.dtype}")
        swap[id(original)] = nn.Parameter(tensor, requires_grad=original.requires_grad)
    return _copy_module(model, {}, swap)
