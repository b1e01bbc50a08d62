"""Models: one loader for registered names, local folders and hub ids; cards; packaged conversions.

Public API: :func:`load_model` (the one bounded model cache), :func:`require_kind` (refuse the wrong kind of
model for an action), :func:`fingerprint` (without loading),
:func:`parameter_count` (from the headers), :func:`list_cards`, :func:`card_of`, :func:`prepare_model`, :class:`ModelCard`, :class:`LoadedModel`,
:func:`module_fingerprint`, :func:`private_view` (a request's own view of a shared model), :func:`token_texts` (``<id N>``
past the tokenizer), :func:`hub_choices` (the hub ids pickers offer, the allow-list of shared deployments),
:func:`model_device` (where loaded models run: the CPU, or a GPU Space's GPU); :class:`Placement`,
:func:`make_placement`, :func:`placed`, :func:`add_placement_args` (a checkpoint spread over GPUs, CPU and disk:
:mod:`core.zoo.placement`); :mod:`core.zoo.training` holds the plumbing of the project's training recipes.
"""
from core.zoo.card import ModelCard
from core.zoo.device import model_device
from core.zoo.loading import LoadedModel, clear_loaded, fingerprint, load_model, module_fingerprint, parameter_count, \
    require_kind, resolve, token_texts
from core.zoo.hub import PAPER_CHECKPOINTS, allowed_hub_models, hub_choices
from core.zoo.placement import Placement, add_placement_args, make_placement, placed
from core.zoo.registry import PACKAGED, card_of, list_cards, registered_names
from core.zoo.views import private_view


def prepare_model(name: str, progress=None, force: bool = False):
    """Make a packaged model ready (download + convert into the user cache); returns its folder."""
    from core.errors import BadInputError

    if name not in PACKAGED:
        raise BadInputError(f"{name!r} is not a packaged model.", fix=f"choose one of: {', '.join(PACKAGED)}.")
    if name == "smollm2-135m":
        from core.zoo.packaged import prepare_smollm2
        return prepare_smollm2(progress=progress, force=force)
    return PACKAGED[name].prepare(progress)


__all__ = ["ModelCard", "LoadedModel", "load_model", "list_cards", "card_of", "registered_names", "prepare_model",
           "clear_loaded", "require_kind", "fingerprint", "module_fingerprint", "parameter_count", "resolve", "token_texts",
           "PACKAGED",
           "PAPER_CHECKPOINTS", "allowed_hub_models", "hub_choices", "Placement", "add_placement_args", "make_placement",
           "placed", "private_view", "model_device"]
