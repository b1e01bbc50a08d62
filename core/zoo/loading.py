"""One function that loads a model from a registered name, a local folder or (when online) a hub id.

Safetensors only by default (pickle checkpoints can run code on load); ``trust_remote_code`` never by
default. Every failure a user can fix raises :class:`core.errors.ModelLoadError` naming the fix.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.errors import ModelLoadError
from core.references import check_reference
from core.settings import bound_hub_requests, is_online, is_public
from core.zoo import registry
from core.zoo.card import ModelCard
from core.zoo.construction import constructing
from core.zoo.device import on_model_device
from core.zoo.hub import hub_error, kind_from_config
from core.zoo.safetensors_check import read_header, summarize

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


@dataclass
class LoadedModel:
    """A model ready to use: the module (eval mode), its tokenizer (or None), card and fingerprint."""

    model: Any
    tokenizer: Any
    card: ModelCard
    fingerprint: str
    tokenizer_error: str = ""  # why the tokenizer is None (missing files, or the loader's error), for messages
    folder: Path | None = None  # the folder the weights were read from (None for a hub download)


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
        h.update(_file_digest(os.path.realpath(f), st.st_size, st.st_mtime_ns).encode())
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


# the files besides the weights that define what a folder's model computes: its architecture and sizes, how it is
# loaded, and how text becomes token ids
DEFINING_FILES = ("config.json", "card.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                  "tokenizer.model", "vocab.json", "merges.txt", "spiece.model", "vocab.txt")


def config_digest(folder: Path) -> str:
    """sha256 over the bytes of the folder's :data:`DEFINING_FILES` (an absent file counts as absent)."""
    h = hashlib.sha256()
    for name in DEFINING_FILES:
        f = Path(folder) / name
        try:
            st = f.stat()
        except OSError:
            h.update(f"{name}:absent;".encode())
            continue
        h.update(f"{name}:{_file_digest(os.path.realpath(f), st.st_size, st.st_mtime_ns)};".encode())
    return h.hexdigest()


def folder_fingerprint(folder: Path, files: list[Path], registered: bool = False) -> str:
    """What keys a folder's results: the weights' fingerprint (:func:`file_fingerprint`), plus a digest of its config
    and tokenizer (:func:`config_digest`) unless they are those of the registered model with the same weights.

    So a copy of a registered model's folder shares that model's precomputed examples and cached results, while the
    same weights under another config (another architecture, other sizes, another tokenizer) are another model: a
    result is never answered from a computation that defined the model differently.
    """
    weights = file_fingerprint(files)
    if registered:
        return weights
    digest = config_digest(folder)
    sizes = [f.stat().st_size for f in files]
    for name in registry.registered_names():
        other = registry.folder_of(name)
        other_files = registry.weight_files(other) if other is not None and other.is_dir() else []
        if [f.stat().st_size for f in other_files] == sizes and file_fingerprint(other_files) == weights:
            if config_digest(other) == digest:
                return weights
    return f"{weights}-{digest[:12]}"


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


def _load_hf(location: str, kind: str | None, dtype, trust_remote_code: bool, allow_pickle: bool, hub: bool,
             placement=None):
    """``(model, tokenizer, tokenizer_error, kind)`` from a folder or hub id through transformers; a
    :class:`core.zoo.placement.Placement` spreads it over the devices (accelerate's big-model loading)."""
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
    if placement is not None:
        kwargs.update(placement.hf_kwargs())
    try:
        model = cls.from_pretrained(location, **kwargs)
    except Exception as exc:
        err = hub and hub_error(exc, location)
        if err:
            raise err from exc
        if placement is not None and isinstance(exc, (ValueError, RuntimeError)):
            raise ModelLoadError(f"{location} could not be placed with {placement.describe()}: {_short(exc)}",
                                 fix="change --device-map / --max-memory (or give --offload-folder).") from exc
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
    model = registry.MODEL_CLASSES[model_class]().from_pretrained(folder)
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
    """Classify a model reference: ``("registered"|"local"|"hub", folder or None)``, through the one reference check
    (:func:`core.references.check_reference`). In public mode (:func:`core.settings.is_public`) only registered names
    and allowed hub ids pass; every other reference gets :func:`core.zoo.hub.not_offered` before anything on the
    server is looked at."""
    found = check_reference(ref)
    return found.kind, found.folder


def check_built(model: torch.nn.Module, name: str) -> None:
    """Refuse a model that is not whole: a parameter or buffer left on the meta device (no data), an output head
    its config ties to the input embedding but that is a separate (freshly initialised) matrix, or a non-finite
    weight. A load that went wrong must fail here, before the model is kept and shared, never later in a request.
    Parameters that accelerate offloaded to disk (``--device-map``, :func:`core.zoo.placement.offloaded_names`) stay
    on meta by design: their values are read from the checkpoint when their layer runs, and are not checked here."""
    from core.zoo.placement import offloaded_names

    offloaded = set(offloaded_names(model))
    for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta and pname not in offloaded:
            raise ModelLoadError(f"{name}: {pname} was not loaded (it has no data after loading).",
                                 fix="check that the weights file matches config.json, then load the model again.")
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False) and hasattr(model, "get_output_embeddings"):
        out, emb = model.get_output_embeddings(), model.get_input_embeddings()
        if out is not None and emb is not None and out.weight is not emb.weight:
            raise ModelLoadError(f"{name}: the output head should share the input embedding's weights "
                                 "(tie_word_embeddings) but does not.", fix="load the model again.")
    for pname, t in model.named_parameters():
        if pname not in offloaded and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ModelLoadError(f"{name}: {pname} holds NaN or infinite values.",
                                 fix="use a checkpoint with finite weights.")


_lock = threading.Lock()
_loaded: dict[tuple, LoadedModel] = {}
_MAX_LOADED = 2  # models kept in memory, least recently used evicted first; LAYERWISE_MAX_MODELS overrides


def max_loaded() -> int:
    """How many models :func:`load_model` keeps in memory (``LAYERWISE_MAX_MODELS``, default 2, at least 1)."""
    raw = os.environ.get("LAYERWISE_MAX_MODELS", "")
    return max(1, int(raw)) if raw.strip().isdigit() else _MAX_LOADED


def load_model(ref: str, *, dtype: torch.dtype | None = None, trust_remote_code: bool = False,
               allow_pickle: bool = False, kind: str | None = None, use_cache: bool = True,
               placement=None) -> LoadedModel:
    """Load a model by registered name, local folder path or hub id (hub only when online).

    Parameters
    ----------
    ref : a name from ``python -m core models list``, a folder with ``config.json`` + ``*.safetensors``,
        or a hub id like ``state-spaces/mamba-130m-hf`` (needs ``--online``).
    dtype : load in this dtype (default: as stored).
    trust_remote_code, allow_pickle : off by default; turn on only for checkpoints you trust.
    use_cache : keep the most recently used models in memory (:func:`max_loaded`, two by default) and return the
        same object for the same request (the only model cache: every tab and command loads through here).
    placement : a :class:`core.zoo.placement.Placement` (``--device-map auto --max-memory ...``): the checkpoint is
        spread over the GPUs, the CPU and disk by accelerate (Hugging Face checkpoints); default: the one set by
        :func:`core.zoo.placement.placed` (the CLI's options), else none (one device).
    """
    from core.zoo.placement import current_placement
    if is_public():
        resolve(ref)  # a reference public mode refuses is refused even if this process loaded it before
    placement = placement if placement is not None else current_placement()
    key = (ref, str(dtype), trust_remote_code, allow_pickle, kind, placement)
    with _lock:
        if use_cache and key in _loaded:
            _loaded[key] = _loaded.pop(key)  # most recently used last: the least recently used goes first
            return on_model_device(_loaded[key])
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
    # one construction at a time in the whole process (core.zoo.construction): transformers patches process-wide
    # state while it builds a model, and two builds at once leave each other's models broken
    with constructing():
        with _lock:
            if use_cache and key in _loaded:  # another request loaded it while this one waited
                _loaded[key] = _loaded.pop(key)
                return _loaded[key]
        if card.model_class != "hf":
            if placement is not None:
                raise ModelLoadError(f"{ref} is a Layerwise model ({card.model_class.rpartition(':')[2]}), which loads "
                                     "on one device; --device-map / --max-memory spread Hugging Face checkpoints.",
                                     fix="leave out --device-map and --max-memory for this model.")
            model, tokenizer = _load_project_class(folder, card.model_class)
        else:
            model, tokenizer, tokenizer_error, card.kind = _load_hf(
                str(folder) if folder is not None else ref, kind or _card_kind(folder), dtype,
                trust_remote_code, allow_pickle, hub=how == "hub", **({"placement": placement} if placement else {}))
        model.eval()
        check_built(model, card.name)
    if card.parameters is None:
        card.parameters = sum(p.numel() for p in model.parameters())
        card.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    card.tokenizer = tokenizer_summary(model, tokenizer, tokenizer_error)
    commit = getattr(getattr(model, "config", None), "_commit_hash", None) if how == "hub" else None
    if files:
        fingerprint = folder_fingerprint(folder, files, registered=how == "registered")
    elif commit:  # a hub snapshot is named by its commit: no need to hash the weights
        fingerprint = hashlib.sha256(f"hub:{ref}@{commit}".encode()).hexdigest()[:24]
    else:
        fingerprint = module_fingerprint(model)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, card=card, fingerprint=fingerprint,
                         tokenizer_error=tokenizer_error, folder=folder)
    if use_cache:
        with _lock:
            while len(_loaded) >= max_loaded():
                _loaded.pop(next(iter(_loaded)))
            _loaded[key] = loaded
    return on_model_device(loaded)


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
    """The fingerprint :func:`load_model` gives ``ref``, read from its weight and config files without loading the
    model (a registered name or a folder with safetensors; :func:`folder_fingerprint`); anything else (a hub id) is
    loaded to find it."""
    how, folder = resolve(ref)
    files = registry.weight_files(folder) if folder is not None and folder.is_dir() else []
    if files:
        for f in files:
            read_header(f)  # a truncated or corrupt file is named with the fix, as load_model does
        return folder_fingerprint(folder, files, registered=how == "registered")
    return load_model(ref).fingerprint


def parameter_count(ref: str) -> int:
    """How many parameters ``ref`` has, read from its safetensors headers without loading it (a registered name or a
    folder); a hub id is loaded to count them (public mode allows only the listed ones)."""
    how, folder = resolve(ref)
    files = registry.weight_files(folder) if folder is not None and folder.is_dir() else []
    if files:
        return int(summarize(files)["parameters"])
    return sum(p.numel() for p in load_model(ref).model.parameters())


def clear_loaded() -> None:
    """Forget models kept in memory."""
    with _lock:
        _loaded.clear()


def describe_loaded() -> list[dict]:
    return [json.loads(json.dumps(v.card.to_dict())) for v in _loaded.values()]
