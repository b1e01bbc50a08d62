"""Interventions on selected parameters: prune (multiply by 0) or scale (multiply by a factor).

- :func:`intervened_view` / :func:`intervened` give the intervened model as a private view
  (:func:`core.zoo.views.private_view`): the touched weight matrices are copied and changed, every
  other tensor is shared, and the model itself is never written, so requests served on the same
  in-memory model at the same time never see each other's interventions. Extra memory: the touched
  matrices, for as long as the view lives.
- :func:`apply_intervention` applies one in place (for a model nobody else uses) and returns a
  :class:`Restore` handle; if applying fails half-way, what was changed is restored before the error
  propagates.
- :func:`intervened_copy` returns a modified deep copy and leaves the model alone.
- :func:`save_checkpoint` writes a model (e.g. the copy) as a safetensors checkpoint;
  :func:`save_masks` / :func:`load_masks` keep masks in a safetensors file. Files are written
  atomically (temporary name, then rename), so an error never leaves a half-written file.
"""
from __future__ import annotations

import copy
import functools
import os
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from core.errors import BadInputError
from core.mathneuro.scoring import check_factor
from core.zoo.views import private_view
from core.files import atomic_write
from core.zoo.placement import changed_values, offloaded_names, parameter_values

MODES = {"prune": "multiply the selected parameters by 0",
         "scale": "multiply the selected parameters by a factor"}


def resolve_factor(mode: str, factor: float | None) -> float:
    """The multiplier for ``mode``: 0 for prune, the checked finite ``factor`` for scale."""
    if mode == "prune":
        return 0.0
    if mode == "scale":
        if factor is None:
            raise BadInputError("Scaling needs a factor.", fix="Pass factor=1.1 (for example).")
        return check_factor(factor)
    raise BadInputError(f"Unknown intervention {mode!r}.", fix=f"Use one of: {', '.join(MODES)}.")


def check_masks(model: nn.Module, masks: dict[str, torch.Tensor]) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Pair each mask with its parameter, checking names, shapes and dtype before anything is changed.

    Returns
    -------
    list of (parameter, bool mask on the parameter's device)
    """
    if not isinstance(masks, dict):
        raise BadInputError("Masks must be a dict from parameter name to bool tensor.")
    params = dict(model.named_parameters())
    offloaded = set(offloaded_names(model))
    pairs = []
    for name, mask in masks.items():
        if name not in params:
            raise BadInputError(f"The masks name {name!r}, which this model does not have.",
                                fix="Use masks identified on this model (same architecture and names).")
        param = params[name]
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != param.shape:
            raise BadInputError(f"The mask for {name} is not a bool tensor of shape {tuple(param.shape)}.",
                                fix="Use masks identified on this model.")
        pairs.append((param, mask if name in offloaded else mask.to(param.device)))  # meta holds no mask
    return pairs


def _refuse_offloaded(model: nn.Module, what: str) -> None:
    if offloaded_names(model):
        raise BadInputError(f"{what} writes the model's weights, but part of this model is offloaded by "
                            "--device-map (its weights are read from disk or CPU for each forward).",
                            fix="use intervened / intervened_view (a private view: offloaded matrices are changed "
                                "as they are read), or load the model on one device.")


class Restore:
    """The original values of the entries an intervention changed; :meth:`restore` puts them back exactly."""

    def __init__(self):
        self._saved: list[tuple[nn.Parameter, torch.Tensor, torch.Tensor]] = []

    def record(self, param: nn.Parameter, mask: torch.Tensor) -> torch.Tensor:
        values = param.detach()[mask].clone()
        self._saved.append((param, mask, values))
        return values

    def restore(self) -> None:
        """Write the saved values back (bit-exact), newest first; idempotent."""
        with torch.no_grad():
            while self._saved:
                param, mask, values = self._saved.pop()
                param.detach()[mask] = values


def apply_intervention(model: nn.Module, masks: dict[str, torch.Tensor], mode: str = "prune",
                       factor: float | None = None) -> Restore:
    """Multiply the selected entries of each masked parameter in place by 0 (prune) or ``factor`` (scale).

    Parameters
    ----------
    masks : dict name -> bool tensor of the parameter's shape
    mode : "prune" or "scale"
    factor : finite float, for "scale"

    Returns
    -------
    Restore, whose ``restore()`` undoes the change exactly. If anything fails half-way, the
    parameters already changed are restored before the error propagates.
    """
    multiplier = resolve_factor(mode, factor)
    pairs = check_masks(model, masks)
    _refuse_offloaded(model, "apply_intervention")
    undo = Restore()
    try:
        with torch.no_grad():
            for param, mask in pairs:
                values = undo.record(param, mask)
                param.detach()[mask] = values * multiplier
    except BaseException:
        undo.restore()
        raise
    return undo


def intervened_view(model: nn.Module, masks: dict[str, torch.Tensor], mode: str = "prune",
                    factor: float | None = None) -> nn.Module:
    """A private view of ``model`` with the selected entries multiplied by 0 (prune) or ``factor`` (scale).

    Only the masked matrices are copied; ``model`` is never written, so other requests on it are not
    affected. The view's weights equal what :func:`apply_intervention` would write, bit for bit.
    A matrix offloaded by ``--device-map`` is not copied: the view's hook reads it and applies the change each time
    its layer runs (:func:`core.zoo.placement.changed_values`), so the intervention costs no memory beyond the masks.
    """
    multiplier = resolve_factor(mode, factor)
    pairs = check_masks(model, masks)
    names = {id(p): n for n, p in model.named_parameters()}
    offloaded = set(offloaded_names(model))
    changed: dict[int, torch.Tensor] = {}
    lazy: dict[str, object] = {}
    with torch.no_grad():
        for param, mask in pairs:
            name = names[id(param)]
            if name in offloaded:
                lazy[name] = changed_values(functools.partial(parameter_values, model, name), mask, multiplier)
                continue
            new = changed.get(id(param))
            if new is None:
                new = changed[id(param)] = param.detach().clone()
            new[mask] = new[mask] * multiplier
    return private_view(model, {**{names[i]: t for i, t in changed.items()}, **lazy})


@contextmanager
def intervened(model: nn.Module, masks: dict[str, torch.Tensor], mode: str = "prune", factor: float | None = None):
    """Context manager: yields the intervened private view (:func:`intervened_view`); ``model`` is untouched.

    Use the yielded view inside the block, not ``model``:

    Examples
    --------
    >>> with intervened(model, masks, "scale", 1.1) as view:
    ...     accuracy = math_accuracy(view, tokenizer, problems)["accuracy"]
    """
    yield intervened_view(model, masks, mode, factor)


def intervened_copy(model: nn.Module, masks: dict[str, torch.Tensor], mode: str = "prune",
                    factor: float | None = None) -> nn.Module:
    """A deep copy of ``model`` with the intervention applied; ``model`` itself is not touched."""
    resolve_factor(mode, factor)
    check_masks(model, masks)
    _refuse_offloaded(model, "intervened_copy")
    clone = copy.deepcopy(model)
    apply_intervention(clone, masks, mode, factor)
    return clone


def save_checkpoint(model: nn.Module, path: str | os.PathLike) -> Path:
    """Save ``model`` as a safetensors checkpoint folder (``save_pretrained`` for Hugging Face
    models, with their config; ``model.safetensors`` otherwise). Replaces ``path`` atomically."""
    def write(tmp: Path):
        if hasattr(model, "save_pretrained"):
            model.save_pretrained(tmp)
        else:
            from safetensors.torch import save_model
            save_model(model, str(tmp / "model.safetensors"))
    return atomic_write(Path(path), write, folder=True)


def save_intervened_checkpoint(model: nn.Module, masks: dict[str, torch.Tensor], path: str | os.PathLike,
                               mode: str = "prune", factor: float | None = None) -> Path:
    """Save the intervened model without copying the untouched weights (a private view); ``model`` is untouched."""
    return save_checkpoint(intervened_view(model, masks, mode, factor), path)


def save_masks(masks: dict[str, torch.Tensor], path: str | os.PathLike,
               metadata: dict[str, str] | None = None) -> Path:
    """Write masks to a safetensors file (bool tensors on CPU), atomically.

    ``metadata`` (str -> str, e.g. method, proportion, model fingerprint) is stored in the header.
    """
    from safetensors.torch import save_file
    if not masks:
        raise BadInputError("There are no masks to save.", fix="Identify parameters first.")
    for name, mask in masks.items():
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise BadInputError(f"The mask for {name} is not a bool tensor.")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    tensors = {n: m.detach().to("cpu").contiguous() for n, m in masks.items()}
    path = atomic_write(Path(path), lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    return path


def load_masks(path: str | os.PathLike, model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """Read masks saved by :func:`save_masks` (CPU bool tensors); checked against ``model`` when given."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"No masks file at {path}.", fix="Save masks with save_masks first.")
    try:
        masks = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise BadInputError(f"{path} is not a readable safetensors masks file ({err}).") from err
    if model is not None:
        check_masks(model, masks)
    return masks


def mask_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The metadata stored with masks by :func:`save_masks`."""
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})
