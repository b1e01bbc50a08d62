"""The hub, when the user opted in: which ids may be loaded, hub failures in words, and what a config says.

Shared deployments (a Hugging Face Space, a lab server) should let visitors use the papers' checkpoints without
letting them make the server download anything they like. ``LAYERWISE_HUB_MODELS`` is that allow-list:

- unset: any hub id on a personal machine; :data:`PAPER_CHECKPOINTS` on a Space (``SPACE_ID`` is set) and in public
  mode (:func:`core.settings.is_public`);
- ``a/b,c/d``: only these ids (the pickers offer them);
- ``*``: any hub id, also on a Space, but not in public mode (there the list stays :data:`PAPER_CHECKPOINTS`: a
  hub-shaped id such as ``assets/models`` could name a folder beside the app, which transformers would read).

In public mode every model reference that is neither registered nor allowed gets the same message,
:func:`not_offered`, whatever it names (a folder, a file, a missing path, a hub id): the message and the work done
before it never depend on the server's files.

The hub's own failures (no such repository, a missing file, a gated repo, no answer) become
:class:`core.errors.ModelLoadError` with the fix; ``transformers`` wraps them in ``OSError``, so the cause
chain is searched.
"""
from __future__ import annotations

import os

from core.errors import ModelLoadError, NotOffered

# The papers' checkpoints small enough for a CPU Space, with the tabs that use them (MambaLRP: Mamba-130m/370m;
# MathNeuro, Mix-LN and NeuZip: Llama-architecture causal LMs: SmolLM2, Llama 3.2 1B (gated: needs HF_TOKEN),
# Qwen2.5 0.5B). The default allow-list on a Space, and what the pickers offer when online.
PAPER_CHECKPOINTS: dict[str, tuple[str, ...]] = {
    "state-spaces/mamba-130m-hf": ("lrp",),
    "state-spaces/mamba-370m-hf": ("lrp",),
    "HuggingFaceTB/SmolLM2-135M": ("mathneuro", "mixln", "neuzip"),
    "HuggingFaceTB/SmolLM2-360M": ("mathneuro", "mixln", "neuzip"),
    "meta-llama/Llama-3.2-1B": ("mathneuro", "mixln", "neuzip"),
    "Qwen/Qwen2.5-0.5B": ("mathneuro", "mixln", "neuzip"),
}


def hub_choices(tab: str | None = None) -> list[str]:
    """Hub ids a picker offers: none offline; online, the allow-list when there is one (else the papers'
    checkpoints), those of ``tab`` first when it is given (an id outside :data:`PAPER_CHECKPOINTS` counts for
    every tab)."""
    from core.settings import is_online

    if not is_online():
        return []
    allowed = allowed_hub_models()
    ids = list(allowed if allowed is not None else PAPER_CHECKPOINTS)
    if tab is None:
        return ids
    return [i for i in ids if tab in PAPER_CHECKPOINTS.get(i, (tab,))]


def allowed_hub_models() -> tuple[str, ...] | None:
    """The hub ids that may be loaded, or None when any id may (see the module docstring)."""
    from core.settings import is_public

    raw = os.environ.get("LAYERWISE_HUB_MODELS")
    if raw is None or (raw.strip() == "*" and is_public()):
        return tuple(PAPER_CHECKPOINTS) if os.environ.get("SPACE_ID") or is_public() else None
    raw = raw.strip()
    if raw == "*":
        return None
    return tuple(dict.fromkeys(x.strip() for x in raw.split(",") if x.strip()))


def offered_models() -> list[str]:
    """What a visitor may name as a model in public mode: the registered models, then the allowed hub ids (those only
    when the server is online)."""
    from core.settings import is_online
    from core.zoo.registry import registered_names

    return registered_names() + (list(allowed_hub_models() or ()) if is_online() else [])


PUBLIC_REFUSAL = "This public server opens only the models and runs it lists, never a folder or file of its own."


def not_offered() -> NotOffered:
    """The one message public mode gives every model (or run) reference it refuses, the same whatever the reference
    names: it names no path and does not depend on whether anything exists there."""
    return NotOffered(PUBLIC_REFUSAL, fix=f"choose one of: {', '.join(offered_models())}.")


def check_allowed(ref: str) -> None:
    """Refuse a hub id outside the allow-list with a message that lists what is allowed."""
    allowed = allowed_hub_models()
    if allowed is not None and ref not in allowed:
        listed = ", ".join(allowed) if allowed else "none"
        raise ModelLoadError(f"{ref!r} is not among the hub models this server may download.",
                             fix=f"choose one of: {listed} (the server's LAYERWISE_HUB_MODELS sets the list).")


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def hub_error(exc: BaseException, ref: str, what: str = "model") -> ModelLoadError | None:
    """A :class:`ModelLoadError` for a hub failure anywhere in ``exc``'s cause chain, or None if it is not one."""
    from huggingface_hub import errors as hf

    for e in _chain(exc):
        name = type(e).__name__
        if isinstance(e, hf.GatedRepoError):
            return ModelLoadError(f"{ref!r} is a gated repository: the hub needs your access token.",
                                  fix="accept its licence on the hub, then set HF_TOKEN (or `hf auth login`).")
        if isinstance(e, hf.RevisionNotFoundError):
            return ModelLoadError(f"{ref!r}: the hub has no such revision.", fix="use the main branch.")
        if isinstance(e, hf.OfflineModeIsEnabled):
            return ModelLoadError(f"{ref!r} is not downloaded and hub downloads are off.",
                                  fix="start with --online (LAYERWISE_ONLINE=1).")
        if isinstance(e, hf.LocalEntryNotFoundError) or name in ("ConnectError", "ConnectTimeout", "ReadTimeout",
                                                                    "TimeoutException", "RemoteProtocolError"):
            endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
            return ModelLoadError(f"the hub ({endpoint}) did not answer while loading {ref!r}, and the files are "
                                  "not in the local cache.",
                                  fix="check the network (or HF_ENDPOINT), then try again; nothing was cached.")
        if isinstance(e, (hf.RemoteEntryNotFoundError, hf.EntryNotFoundError)):
            return ModelLoadError(f"{ref!r} on the hub lacks a file the {what} needs ({_first_line(e)}).",
                                  fix="check that the repository holds config.json and *.safetensors weights.")
        if isinstance(e, hf.RepositoryNotFoundError):
            return ModelLoadError(f"the hub has no {what} repository {ref!r}.",
                                  fix="check the id's spelling (owner/name), or set HF_TOKEN for a private one.")
    text = str(exc)
    if "couldn't connect" in text or "We couldn't connect" in text:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
        return ModelLoadError(f"the hub ({endpoint}) did not answer while loading {ref!r}.",
                              fix="check the network (or HF_ENDPOINT), then try again.")
    return None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "for url" in line or "not found" in line.lower():
            return line.rstrip(".")
    return lines[0].rstrip(".") if lines else type(exc).__name__


IMAGE_HINTS = ("image", "vision", "vit", "pixel", "patch")


def kind_from_config(config) -> str:
    """What a transformers config describes: ``causal-lm``, ``sequence-classifier``, ``image-classifier`` or
    ``model``; read from its architectures (and vision fields), never from whether a tokenizer loaded."""
    archs = [a for a in (getattr(config, "architectures", None) or []) if a]
    arch = archs[0] if archs else ""
    if arch.endswith("ForImageClassification") or (hasattr(config, "image_size") and hasattr(config, "patch_size")):
        return "image-classifier"
    if arch.endswith("ForSequenceClassification"):
        return "sequence-classifier"
    if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return "causal-lm"
    model_type = str(getattr(config, "model_type", "")).lower()
    if any(h in model_type for h in IMAGE_HINTS):
        return "image-classifier"
    return "causal-lm" if getattr(config, "vocab_size", None) else "model"
