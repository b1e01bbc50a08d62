"""One function that loads a model from a registered name, a local folder or (when online) a hub id.

Safetensors only by default (pickle checkpoints can run code on load); ``trust_remote_code`` never by
default. Every failure a user can fix raises :class:`core.errors.ModelLoadError` naming the fix.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.errors import ModelLoadError
from core.settings import bound_hub_requests, is_online
from core.zoo import registry
from core.zoo.card import ModelCard
from core.zoo.device import placed
from core.zoo.hub import check_allowed, hub_error, kind_from_config
from core.zoo.safetensors_check import read_header

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class LoadedModel:
    """A model ready to use: the module (eval mode), its tokenizer (or None), card and fingerprint."""

    model: Any
    tokenizer: Any
    card: ModelCard
    fingerprint: str
    tokenizer_error: str = ""  # why the tokenizer is None (missing files, or the loader's error), for messages


def _check_folder(folder: Path, allow_pickle: bool) -> list[Path]:
    files = registry.weight_files(folder)
    if not files:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        if pickles and not allow_pickle:
            raise ModelLoadError(
                f"{folder} holds only pickle checkpoints ({', '.join(pickles)}); Layerwise loads safetensors only "
                "by default because loading a pickle can run arbitrary code.",
                fix="convert the checkpoint to safetensors (model.save_pretrained(folder, safe_serialization=True)), "
                    "or pass --allow-pickle / allow_pickle=True if you trust the file.")
        if not pickles:
            raise ModelLoadError(f"{folder} has no model weights (no *.safetensors file).",
                                 fix="point at a folder that holds config.json and model.safetensors.")
        return []
    for f in files:
        read_header(f)  # raises on a truncated or corrupt file
    return files


def file_fingerprint(files: list[Path]) -> str:
    """sha256 over the bytes of the weight files (memoised by path, size and mtime)."""
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(_file_digest(str(f), st.st_size, st.st_mtime_ns).encode())
    return h.hexdigest()[:24]


_digests: dict[tuple, str] = {}


def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    key = (path, size, mtime_ns)
    if key not in _digests:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        _digests[key] = h.hexdigest()
    return _digests[key]


def module_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (for models changed in memory, e.g. pruned)."""
    h = hashlib.sha256()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def _hf_class(config, kind: str):
    import transformers

    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch and hasattr(transformers, arch):
        return getattr(transformers, arch)
    if kind == "causal-lm":
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


def _load_hf(location: str, kind: str | None, dtype, trust_remote_code: bool, allow_pickle: bool, hub: bool):
    """``(model, tokenizer, tokenizer_error, kind)`` from a folder or hub id through transformers."""
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(location, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise (hub and hub_error(exc, location)) or _config_error(location, exc) from exc
    kind = kind or kind_from_config(config)
    cls = _hf_class(config, kind)
    kwargs = {"use_safetensors": None if allow_pickle else True, "trust_remote_code": trust_remote_code}
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        model = cls.from_pretrained(location, **kwargs)
    except Exception as exc:
        err = hub and hub_error(exc, location)
        if err:
            raise err from exc
        if not isinstance(exc, OSError):
            raise
        if hub and not allow_pickle and _hub_has_only_pickles(location):
            raise ModelLoadError(f"{location} on the hub holds only pickle checkpoints; Layerwise loads safetensors "
                                 "only by default because loading a pickle can run arbitrary code.",
                                 fix="pick a repository with *.safetensors weights, or pass --allow-pickle / "
                                     "allow_pickle=True if you trust it.") from exc
        if hub and "does not appear to have a file named" in str(exc):
            raise ModelLoadError(f"{location} on the hub has no safetensors weights (model.safetensors or its index).",
                                 fix="pick a repository that holds *.safetensors weights.") from exc
        raise ModelLoadError(f"could not load weights from {location}: {_short(exc)}",
                             fix="check that the folder or hub id holds safetensors weights.") from exc
    tokenizer, tokenizer_error = None, ""
    if kind != "image-classifier":
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code)
        except Exception as exc:  # noqa: BLE001 - reported with its cause wherever text is needed
            err = hub and hub_error(exc, location, what="tokenizer")
            present = _tokenizer_files(location, hub)
            if err:
                tokenizer_error = str(err)
            elif present == []:
                tokenizer_error = f"{location} has no tokenizer files"
            else:
                tokenizer_error = (f"the tokenizer ({', '.join(present or ['?'])}) failed to load: "
                                   f"{type(exc).__name__}: {_short(exc)}")
    else:
        tokenizer_error = "an image model has no tokenizer"
    return model, tokenizer, tokenizer_error, kind


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "spiece.model", "vocab.txt")


def _tokenizer_files(location: str, hub: bool) -> list[str] | None:
    """The tokenizer files a folder or hub repository holds (None when the hub cannot be asked)."""
    if not hub:
        return [f for f in TOKENIZER_FILES if (Path(location) / f).is_file()]
    try:
        from huggingface_hub import list_repo_files
        return [f for f in list_repo_files(location) if f in TOKENIZER_FILES]
    except Exception:  # noqa: BLE001 - only used to word the message
        return None


def _hub_has_only_pickles(repo_id: str) -> bool:
    try:
        from huggingface_hub import list_repo_files
        files = list_repo_files(repo_id)
    except Exception:  # noqa: BLE001 - only used to word the message
        return False
    return not any(f.endswith(".safetensors") for f in files) and any(f.endswith(_PICKLE_SUFFIXES) for f in files)


def _config_error(location: str, exc: Exception) -> ModelLoadError:
    if isinstance(exc, ValueError):
        if "trust_remote_code" in str(exc):
            return ModelLoadError(f"{location} needs custom code from its repository to load.",
                                  fix="review that code, then pass --trust-remote-code if you trust it.")
        return ModelLoadError(f"{location}: unreadable config ({_short(exc)}).", fix="check config.json.")
    if isinstance(exc, OSError):
        return ModelLoadError(f"{location} has no readable config.json ({_short(exc)}).",
                              fix="point at a Hugging Face model folder (config.json + *.safetensors).")
    return ModelLoadError(f"{location}: the config could not be read ({type(exc).__name__}: {_short(exc)}).",
                          fix="check config.json.")


def _load_project_class(folder: Path, model_class: str):
    if model_class not in registry.MODEL_CLASSES:
        raise ModelLoadError(f"card.json names model_class {model_class!r}, which is not a Layerwise class.",
                             fix=f"use 'hf' or one of: {', '.join(registry.MODEL_CLASSES)}.")
    module_name, _, attr = model_class.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    model = cls.from_pretrained(folder)
    tokenizer = None
    if (folder / "tokenizer.json").exists():
        from transformers import PreTrainedTokenizerFast
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return model, tokenizer


def token_texts(tokenizer, ids) -> list[str]:
    """The text of each token id; ``<id N>`` for an id the tokenizer has no token for.

    A checkpoint's embedding may have more rows than its tokenizer has tokens (mamba-130m-hf: 50280 rows, 50277
    tokens), so a predicted or listed id can lie past the tokenizer.
    """
    ids = [int(i) for i in ids]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    out = []
    for i, tok in zip(ids, tokens):
        text = tokenizer.convert_tokens_to_string([tok]) if tok is not None else None
        out.append(text if isinstance(text, str) else f"<id {i}>")
    return out


def tokenizer_summary(model, tokenizer, error: str = "") -> str:
    """How the tokenizer fits the model, e.g. ``384 tokens; the model's vocabulary has 387 (ids 384-386 have no
    token)``, or why there is none."""
    if tokenizer is None:
        return f"none ({error})" if error else ""
    n = len(tokenizer)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not vocab or vocab == n:
        return f"{n} tokens"
    if vocab > n:
        return f"{n} tokens; the model's vocabulary has {vocab} (ids {n}-{vocab - 1} have no token)"
    return f"{n} tokens; the model's vocabulary has only {vocab}"


def _card_kind(folder: Path | None) -> str | None:
    """The kind a folder's card.json states, or None (then the config decides)."""
    if folder is None:
        return None
    from core.zoo.card import read_card_file
    return read_card_file(folder).get("kind")


def resolve(ref: str) -> tuple[str, Path | None]:
    """Classify a model reference: ``("registered"|"local"|"hub", folder or None)``."""
    if not isinstance(ref, str):
        raise ModelLoadError(f"{ref!r} is not a model name.", fix="choose a model from `python -m core models list`.")
    ref = ref.strip()
    if not ref:
        raise ModelLoadError("no model given.", fix="choose a model from `python -m core models list`.")
    if ref in registry.registered_names():
        return "registered", registry.folder_of(ref)
    path = Path(os.path.expanduser(ref))
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{ref} is a file; a model is a folder (config.json + *.safetensors).",
                                 fix="pass the folder that holds the file.")
        return "local", path
    if _HUB_ID.match(ref) and not ref.startswith((".", "/", "~")):
        check_allowed(ref)
        return "hub", None
    raise ModelLoadError(f"{ref!r} is not a registered model, an existing folder or a hub id.",
                         fix=f"choose one of {', '.join(registry.registered_names())}, or give a folder path.")


_lock = threading.Lock()
_loaded: dict[tuple, LoadedModel] = {}
_MAX_LOADED = 2  # models kept in memory, least recently used evicted first; LAYERWISE_MAX_MODELS overrides


def max_loaded() -> int:
    """How many models :func:`load_model` keeps in memory (``LAYERWISE_MAX_MODELS``, default 2, at least 1)."""
    raw = os.environ.get("LAYERWISE_MAX_MODELS", "")
    return max(1, int(raw)) if raw.strip().isdigit() else _MAX_LOADED


def load_model(ref: str, *, dtype: torch.dtype | None = None, trust_remote_code: bool = False,
               allow_pickle: bool = False, kind: str | None = None, use_cache: bool = True) -> LoadedModel:
    """Load a model by registered name, local folder path or hub id (hub only when online).

    Parameters
    ----------
    ref : a name from ``python -m core models list``, a folder with ``config.json`` + ``*.safetensors``,
        or a hub id like ``state-spaces/mamba-130m-hf`` (needs ``--online``).
    dtype : load in this dtype (default: as stored).
    trust_remote_code, allow_pickle : off by default; turn on only for checkpoints you trust.
    use_cache : keep the most recently used models in memory (:func:`max_loaded`, two by default) and return the
        same object for the same request (the only model cache: every tab and command loads through here).
    """
    key = (ref, str(dtype), trust_remote_code, allow_pickle, kind)
    with _lock:
        if use_cache and key in _loaded:
            _loaded[key] = _loaded.pop(key)  # most recently used last: the least recently used goes first
            return placed(_loaded[key])
    how, folder = resolve(ref)
    if how == "registered":
        card = registry.card_of(ref)
        if not card.ready:
            raise ModelLoadError(f"model {ref!r} is not prepared yet.", fix=card.fix)
    elif how == "local":
        card = registry.card_for_folder(folder, folder.name, "local", str(folder.resolve()))
    else:
        if not is_online():
            raise ModelLoadError(f"{ref!r} is not a local folder, and hub downloads are off (offline mode).",
                                 fix="give a local folder, or start with --online (LAYERWISE_ONLINE=1) to download.")
        card = ModelCard(name=ref, title=ref, kind=kind or "", source="hub", origin=ref)
        bound_hub_requests()
    if kind:
        card.kind = kind
    files = _check_folder(folder, allow_pickle) if folder is not None else []
    tokenizer_error = ""
    if card.model_class != "hf":
        model, tokenizer = _load_project_class(folder, card.model_class)
    else:
        model, tokenizer, tokenizer_error, card.kind = _load_hf(
            str(folder) if folder is not None else ref, kind or _card_kind(folder), dtype,
            trust_remote_code, allow_pickle, hub=how == "hub")
    model.eval()
    if card.parameters is None:
        card.parameters = sum(p.numel() for p in model.parameters())
        card.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    card.tokenizer = tokenizer_summary(model, tokenizer, tokenizer_error)
    commit = getattr(getattr(model, "config", None), "_commit_hash", None) if how == "hub" else None
    if files:
        fingerprint = file_fingerprint(files)
    elif commit:  # a hub snapshot is named by its commit: no need to hash the weights
        fingerprint = hashlib.sha256(f"hub:{ref}@{commit}".encode()).hexdigest()[:24]
    else:
        fingerprint = module_fingerprint(model)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, card=card, fingerprint=fingerprint,
                         tokenizer_error=tokenizer_error)
    if use_cache:
        with _lock:
            while len(_loaded) >= max_loaded():
                _loaded.pop(next(iter(_loaded)))
            _loaded[key] = loaded
    return placed(loaded)


KIND_LABELS = {"causal-lm": "a causal language model", "sequence-classifier": "a text classifier",
               "image-classifier": "an image classifier", "model": "a model without a task head"}


def require_kind(loaded: LoadedModel, kinds: tuple[str, ...], action: str) -> LoadedModel:
    """``loaded`` if its card's kind is one of ``kinds``; else a :class:`ModelLoadError` naming the models that fit.

    Examples
    --------
    >>> lm = require_kind(load_model(ref), ("causal-lm",), "MathNeuro")
    """
    kind = loaded.card.kind or "model"
    if kind in kinds:
        return loaded
    fitting = [n for n in registry.registered_names() if registry.card_of(n).kind in kinds]
    wanted = " or ".join(KIND_LABELS.get(k, k) for k in kinds)
    raise ModelLoadError(f"{action} needs {wanted}, but {loaded.card.name} is {KIND_LABELS.get(kind, kind)} "
                         f"(kind {kind!r}).", fix=f"pick {wanted}, e.g. {', '.join(fitting) or 'a *ForCausalLM model'}.")


def fingerprint(ref: str) -> str:
    """The fingerprint :func:`load_model` gives ``ref``, read from its weight files without loading the model
    (a registered name or a folder with safetensors); anything else (a hub id) is loaded to find it."""
    how, folder = resolve(ref)
    files = registry.weight_files(folder) if folder is not None and folder.is_dir() else []
    if files:
        for f in files:
            read_header(f)  # a truncated or corrupt file is named with the fix, as load_model does
        return file_fingerprint(files)
    return load_model(ref).fingerprint


def clear_loaded() -> None:
    """Forget models kept in memory."""
    with _lock:
        _loaded.clear()


def describe_loaded() -> list[dict]:
    return [json.loads(json.dumps(v.card.to_dict())) for v in _loaded.values()]
