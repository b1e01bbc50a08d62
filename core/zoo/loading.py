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
from core.settings import is_online
from core.zoo import registry
from core.zoo.card import ModelCard
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


def _load_hf(location: str, kind: str, dtype, trust_remote_code: bool, allow_pickle: bool):
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(location, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ModelLoadError(f"{location} needs custom code from its repository to load.",
                                 fix="review that code, then pass --trust-remote-code if you trust it.") from exc
        raise ModelLoadError(f"{location}: unreadable config ({exc}).", fix="check config.json.") from exc
    except OSError as exc:
        raise ModelLoadError(f"{location} has no readable config.json ({exc}).",
                             fix="point at a Hugging Face model folder (config.json + *.safetensors).") from exc
    cls = _hf_class(config, kind)
    kwargs = {"use_safetensors": None if allow_pickle else True, "trust_remote_code": trust_remote_code}
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        model = cls.from_pretrained(location, **kwargs)
    except OSError as exc:
        raise ModelLoadError(f"could not load weights from {location}: {exc}",
                             fix="check that the folder or hub id holds safetensors weights.") from exc
    tokenizer = None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - a model without a tokenizer (e.g. an image model) is fine
        tokenizer = None
    return model, tokenizer


def _load_project_class(folder: Path, model_class: str):
    module_name, _, attr = model_class.partition(":")
    if not module_name.startswith("core.") or not attr:
        raise ModelLoadError(f"card.json names model_class {model_class!r}, which is not a Layerwise class.",
                             fix="use 'hf' or 'core.<package>:<Class>'.")
    cls = getattr(importlib.import_module(module_name), attr)
    model = cls.from_pretrained(folder)
    tokenizer = None
    if (folder / "tokenizer.json").exists():
        from transformers import PreTrainedTokenizerFast
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return model, tokenizer


def resolve(ref: str) -> tuple[str, Path | None]:
    """Classify a model reference: ``("registered"|"local"|"hub", folder or None)``."""
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
        return "hub", None
    raise ModelLoadError(f"{ref!r} is not a registered model, an existing folder or a hub id.",
                         fix=f"choose one of {', '.join(registry.registered_names())}, or give a folder path.")


_lock = threading.Lock()
_loaded: dict[tuple, LoadedModel] = {}
_MAX_LOADED = 2


def load_model(ref: str, *, dtype: torch.dtype | None = None, trust_remote_code: bool = False,
               allow_pickle: bool = False, kind: str | None = None, use_cache: bool = True) -> LoadedModel:
    """Load a model by registered name, local folder path or hub id (hub only when online).

    Parameters
    ----------
    ref : a name from ``python -m core models list``, a folder with ``config.json`` + ``*.safetensors``,
        or a hub id like ``state-spaces/mamba-130m-hf`` (needs ``--online``).
    dtype : load in this dtype (default: as stored).
    trust_remote_code, allow_pickle : off by default; turn on only for checkpoints you trust.
    use_cache : keep the two most recently used models in memory and return the same object for the same request
        (the only model cache: every tab and command loads through here).
    """
    key = (ref, str(dtype), trust_remote_code, allow_pickle, kind)
    with _lock:
        if use_cache and key in _loaded:
            _loaded[key] = _loaded.pop(key)  # most recently used last: the least recently used goes first
            return _loaded[key]
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
        card = ModelCard(name=ref, title=ref, kind=kind or "causal-lm", source="hub", origin=ref)
    if kind:
        card.kind = kind
    files = _check_folder(folder, allow_pickle) if folder is not None else []
    if card.model_class != "hf":
        model, tokenizer = _load_project_class(folder, card.model_class)
    else:
        model, tokenizer = _load_hf(str(folder) if folder is not None else ref, card.kind, dtype,
                                    trust_remote_code, allow_pickle)
    model.eval()
    if card.parameters is None:
        card.parameters = sum(p.numel() for p in model.parameters())
        card.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    fingerprint = file_fingerprint(files) if files else module_fingerprint(model)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, card=card, fingerprint=fingerprint)
    if use_cache:
        with _lock:
            if len(_loaded) >= _MAX_LOADED:
                _loaded.pop(next(iter(_loaded)))
            _loaded[key] = loaded
    return loaded


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
