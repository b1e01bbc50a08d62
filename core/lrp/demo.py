"""What the MambaLRP tab and ``python -m core lrp explain`` compute, without any UI: validated text and image
inputs, several methods side by side on one prediction, target choices, and the precomputed examples.

Every result is a plain JSON-serialisable dict, so the tab, the CLI and ``assets/lrp/examples.json`` share it::

    text_result(ref, text, methods, target=None, rules=None)   -> {"kind": "text", "tokens": [...], "methods": {...}}
    image_result(ref, image=None, sample=None, methods, ...)   -> {"kind": "image", "image": [[...]], "methods": {...}}

``rules`` switches MambaLRP's rules (the ablation): ``{"silu": False, "gamma": 0.25, ...}`` (fields of
:class:`core.lrp.LRPRules`); other methods ignore it.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from core.errors import BadInputError
from core.lrp.methods import METHODS, explain, method_names
from core.lrp.rules import LRPRules
from core.paths import ASSETS_DIR

EXAMPLES = ASSETS_DIR / "lrp" / "examples.json"
TEXT_MODELS = ("mamba-sentiment", "mamba-lm")
IMAGE_MODELS = ("vision-mamba-mnist",)
DEFAULT_METHODS = ("mambalrp", "gradient_x_input", "integrated_gradients", "mamba_attr")
MAX_TOKENS = 512  # longer texts are cut (the UI says so); the embedded models were trained on <= 96 tokens
RULE_NAMES = tuple(f.name for f in fields(LRPRules))
METHOD_OPTIONS = {"integrated_gradients": {"n_steps": 32}, "smoothgrad": {"n_samples": 16}}

TEXT_EXAMPLES = {
    "mamba-sentiment": [
        "A gorgeous, witty and seductive movie.",
        "The plot is predictable and the acting is painfully flat.",
        "It is not a bad film, but the ending is a complete mess.",
    ],
    "mamba-lm": [
        "He was born in the city of",
        "The function returns a list of",
        "the acting is good but the story is",
    ],
}
IMAGE_SAMPLES = (0, 1, 2, 3)  # indices into the mnist-5k test split

_models: dict[str, object] = {}
_lock = threading.Lock()


# ---- models ------------------------------------------------------------------------------------------------------
def load(ref: str):
    """``core.zoo.load_model(ref)``, kept in memory (the embedded models are small)."""
    from core.zoo import load_model

    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick mamba-sentiment, mamba-lm or vision-mamba-mnist.")
    with _lock:
        if ref not in _models:
            loaded = load_model(ref)
            from core.lrp.adapters import adapter_for
            adapter_for(loaded.model)  # a clear message for a non-Mamba model
            _models[ref] = loaded
        return _models[ref]


def labels_of(loaded) -> dict[int, str]:
    """Class index -> name from the model's card.json (``labels``), for classifiers; empty for language models."""
    from core.zoo.card import read_card_file
    from core.zoo.registry import folder_of

    folder = folder_of(loaded.card.name) if loaded.card.source in ("assets", "packaged") else Path(loaded.card.origin)
    try:
        raw = read_card_file(folder).get("labels", {}) if folder is not None and folder.is_dir() else {}
    except (OSError, ValueError):
        raw = {}
    return {int(k): str(v) for k, v in raw.items()}


def _kind(loaded) -> str:
    from core.lrp.adapters import adapter_for
    return adapter_for(loaded.model).kind


# ---- options ------------------------------------------------------------------------------------------------------
def check_methods(methods) -> list[str]:
    """The methods the user ticked (at least one)."""
    return method_names(methods, empty_means_all=False)


def rules_options(rules: dict | None) -> dict:
    """Validated MambaLRP options from a dict of :class:`LRPRules` fields (plus ``gamma`` for all three layers)."""
    rules = dict(rules or {})
    unknown = sorted(set(rules) - set(RULE_NAMES) - {"gamma"})
    if unknown:
        raise BadInputError(f"Unknown rule(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(RULE_NAMES)}, gamma.")
    for k, v in rules.items():
        if k in ("silu", "ssm", "gate", "norm"):
            rules[k] = bool(v)
        else:
            try:
                g = float(v)
            except (TypeError, ValueError):
                raise BadInputError(f"{k} must be a number >= 0, got {v!r}.", fix="Try 0 (LRP-0) or 0.25.") from None
            if not np.isfinite(g) or g < 0:
                raise BadInputError(f"{k} must be a finite number >= 0, got {v!r}.", fix="Try 0 (LRP-0) or 0.25.")
            rules[k] = g
    return rules


def _options(method: str, rules: dict) -> dict:
    if method == "mambalrp":
        return dict(rules)
    return dict(METHOD_OPTIONS.get(method, {}))


# ---- text ---------------------------------------------------------------------------------------------------------
def tokenize(loaded, text: str, max_tokens: int = MAX_TOKENS) -> tuple[torch.Tensor, list[str], str]:
    """``(input_ids (1, L), token texts, note)``; the note says whether and how the text was cut.

    A classifier reads its last position (the EOS the tokenizer appends), so a long text keeps its first tokens
    and that EOS; a language model predicts what follows the end, so it keeps the last tokens.
    """
    if loaded.tokenizer is None:
        raise BadInputError(f"{loaded.card.name} takes images, not text.", fix="Pick mamba-sentiment or mamba-lm.")
    if not isinstance(text, str) or not text.strip():
        raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
    enc = loaded.tokenizer(text, return_tensors="pt", return_offsets_mapping=loaded.tokenizer.is_fast)
    ids = enc["input_ids"]
    keep = torch.arange(ids.shape[1])
    note = ""
    n = ids.shape[1]
    if n > max_tokens:
        if _kind(loaded) == "classifier":
            keep = torch.cat([keep[:max_tokens - 1], keep[-1:]])
            note = f"The text has {n} tokens; only the first {max_tokens - 1} (and the final marker) are explained."
        else:
            keep = keep[-max_tokens:]
            note = f"The text has {n} tokens; only the last {max_tokens} are explained."
        ids = ids[:, keep]
    pieces = pieces_of(loaded, ids[0].tolist())
    if "offset_mapping" in enc:  # show the text as typed (with its spaces and case), not the normalised tokens
        offsets = enc["offset_mapping"][0][keep].tolist()
        prev = offsets[0][0] if offsets else 0
        for i, (start, end) in enumerate(offsets):
            if end > start:
                pieces[i] = text[min(prev, start):end]
                prev = end
    return ids, pieces, note


def _predictions(loaded, logits: torch.Tensor, k: int = 10) -> list[dict]:
    probs = torch.softmax(logits.float(), -1)
    top = torch.topk(probs, min(k, probs.shape[0]))
    labels = labels_of(loaded)
    out = []
    for p, i in zip(top.values.tolist(), top.indices.tolist()):
        if labels or loaded.tokenizer is None:
            name = labels.get(i, str(i))
        else:
            name = pieces_of(loaded, [i])[0]
        out.append({"id": int(i), "name": name if name is not None else str(i), "probability": float(p)})
    return out


def _logits(loaded, **inputs) -> torch.Tensor:
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules
    adapter = adapter_for(loaded.model)
    with torch.no_grad(), lrp_rules(loaded.model, None):
        return adapter.logits(adapter.embed(**inputs))[0]


def _check_target(target, n_outputs: int):
    if target is None or target == "":
        return None
    try:
        t = int(target)
    except (TypeError, ValueError):
        raise BadInputError(f"The target must be a class index or token id, got {target!r}.") from None
    if not 0 <= t < n_outputs:
        raise BadInputError(f"Target {t} is out of range: the model has {n_outputs} outputs.",
                            fix=f"Pick a target in 0..{n_outputs - 1}, or leave it empty for the top prediction.")
    return t


def _explain_all(loaded, methods, target, rules, progress=None, **inputs) -> dict:
    out = {}
    for i, name in enumerate(methods):
        if progress is not None:
            progress(i, len(methods), METHODS[name].label)
        t0 = time.perf_counter()
        e = explain(loaded.model, target=target, method=name, **inputs, **_options(name, rules))
        out[name] = {"label": METHODS[name].label, "relevance": e.relevance.tolist(), "logit": e.logit,
                     "total": e.total, "absorbed": e.absorbed, "target": e.target,
                     "conservative": METHODS[name].conservative, "seconds": time.perf_counter() - t0}
    if progress is not None:
        progress(len(methods), len(methods), "done")
    return out


def text_result(ref: str, text: str, methods=DEFAULT_METHODS, target=None, rules: dict | None = None,
                progress=None) -> dict:
    """Relevance of every token of ``text`` for the model's prediction (or ``target``), per method."""
    loaded = load(ref)
    methods = check_methods(methods)
    rules = rules_options(rules)
    ids, pieces, note = tokenize(loaded, text)
    logits = _logits(loaded, input_ids=ids)
    target = _check_target(target, logits.shape[0])
    res = _explain_all(loaded, methods, target, rules, progress, input_ids=ids)
    t = next(iter(res.values()))["target"]
    labels = labels_of(loaded)
    name = labels.get(t) if labels else pieces_of(loaded, [t])[0]
    return {"kind": "text", "model": ref, "fingerprint": loaded.fingerprint, "model_kind": _kind(loaded), "text": text, "tokens": pieces,
            "token_ids": ids[0].tolist(), "note": note, "target": t, "target_name": name,
            "predictions": _predictions(loaded, logits), "rules": rules, "methods": res}


def pieces_of(loaded, ids: list[int]) -> list[str]:
    return [loaded.tokenizer.convert_tokens_to_string([t]) for t in loaded.tokenizer.convert_ids_to_tokens(ids)]


def target_choices(ref: str, text: str | None = None, k: int = 10) -> list[tuple[str, int]]:
    """``(label, id)`` pairs: a classifier's classes; a language model's ``k`` likeliest next tokens after ``text``."""
    loaded = load(ref)
    kind = _kind(loaded)
    if kind != "lm":
        labels = labels_of(loaded)
        from core.lrp.adapters import adapter_for
        n = adapter_for(loaded.model).num_outputs
        return [(f"{i}: {labels.get(i, str(i))}", i) for i in range(n)]
    if not text or not text.strip():
        return []
    ids, _, _ = tokenize(loaded, text)
    preds = _predictions(loaded, _logits(loaded, input_ids=ids), k)
    return [(target_label(p, lm=True), p["id"]) for p in preds]


def target_label(prediction: dict, lm: bool) -> str:
    """How a target choice reads: ``' the' (31.5%)`` for a next token, ``1: positive (93.8%)`` for a class."""
    pct = f"{100 * prediction['probability']:.1f}%"
    return f"{prediction['name']!r} ({pct})" if lm else f"{prediction['id']}: {prediction['name']} ({pct})"


# ---- images -------------------------------------------------------------------------------------------------------
def prepare_image(image, size: int = 28) -> tuple[np.ndarray, str]:
    """An uploaded image -> ``(size, size)`` float32 in [0, 1] (white digit on black, like MNIST) and a note.

    Colour images are turned grey, other sizes resized (aspect ratios beyond 2:1 are refused), and a dark digit on
    a light background is inverted; the note says what was done.
    """
    from PIL import Image

    if image is None:
        raise BadInputError("No image.", fix="Upload an image or pick a test sample.")
    notes = []
    if isinstance(image, (str, Path)):
        try:
            image = Image.open(image)
            image.load()
        except Exception:
            raise BadInputError("That file is not an image.", fix="Upload a PNG or JPEG of a digit.") from None
    if isinstance(image, Image.Image):
        if image.mode not in ("L", "1", "I", "I;16", "F"):
            notes.append(f"converted from {image.mode} to grey")
        arr = np.asarray(image.convert("F"), dtype=np.float32)
        if image.mode in ("I", "I;16"):
            arr = arr / max(float(arr.max()), 1.0) * 255.0
        elif image.mode == "1":
            arr = arr * 255.0
    else:
        arr = np.asarray(image)
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise BadInputError("That is not an image.", fix="Upload a PNG or JPEG of a digit.")
        arr = arr.astype(np.float32)
        if arr.ndim == 3 and arr.shape[-1] in (1, 3, 4):
            if arr.shape[-1] > 1:
                notes.append("converted from colour to grey")
            rgb = arr[..., :3] if arr.shape[-1] >= 3 else arr
            arr = rgb.mean(-1) if rgb.shape[-1] == 3 else rgb[..., 0]
        if arr.ndim != 2:
            raise BadInputError(f"An image must be 2-D (grey) or 3-D with 1, 3 or 4 channels; got shape {arr.shape}.",
                                fix="Upload a PNG or JPEG of a digit.")
        if np.issubdtype(np.asarray(image).dtype, np.floating) and arr.max() <= 1.0:
            arr = arr * 255.0
    h, w = arr.shape
    if h < 8 or w < 8:
        raise BadInputError(f"The image is {w}x{h} pixels, too small to read a digit.", fix="Use at least 8x8.")
    if max(h, w) > 2 * min(h, w):
        raise BadInputError(f"The image is {w}x{h}: too far from square for a {size}x{size} digit.",
                            fix="Crop it around the digit.")
    if not np.isfinite(arr).all():
        raise BadInputError("The image has non-finite pixel values.")
    if (h, w) != (size, size):
        arr = np.asarray(Image.fromarray(arr.astype(np.float32), mode="F").resize((size, size), Image.BILINEAR))
        notes.append(f"resized from {w}x{h} to {size}x{size}")
    arr = np.clip(arr / 255.0, 0.0, 1.0)
    border = np.concatenate([arr[0], arr[-1], arr[:, 0], arr[:, -1]])
    if border.mean() > 0.5:
        arr = 1.0 - arr
        notes.append("inverted to a light digit on black, as in MNIST")
    note = ("The image was " + ", ".join(notes) + ".") if notes else ""
    return arr.astype(np.float32), note


def test_image(index: int) -> tuple[np.ndarray, int]:
    """``(28x28 float in [0, 1], label)`` of one mnist-5k test image."""
    import core.data as data

    recs = data.load("mnist-5k", "test")
    try:
        i = int(index)
    except (TypeError, ValueError):
        raise BadInputError(f"Sample must be a number, got {index!r}.") from None
    if not 0 <= i < len(recs):
        raise BadInputError(f"Sample {i} is out of range.", fix=f"Pick 0..{len(recs) - 1}.")
    return np.asarray(recs[i].image, dtype=np.float32) / 255.0, int(recs[i].label)


def image_result(ref: str = IMAGE_MODELS[0], image=None, sample: int | None = None, methods=DEFAULT_METHODS,
                 target=None, rules: dict | None = None, progress=None) -> dict:
    """Relevance of every patch for the model's prediction (or ``target``), per method; ``image`` (an upload)
    wins over ``sample`` (a test index)."""
    loaded = load(ref)
    if _kind(loaded) != "vision":
        raise BadInputError(f"{ref} is not an image model.", fix="Pick vision-mamba-mnist.")
    methods = check_methods(methods)
    rules = rules_options(rules)
    label = None
    if image is not None:
        pixels, note = prepare_image(image, loaded.model.config.image_size)
    elif sample is not None:
        pixels, label = test_image(sample)
        note = ""
    else:
        raise BadInputError("No image.", fix="Upload an image or pick a test sample.")
    px = torch.from_numpy(pixels)[None, None]
    logits = _logits(loaded, pixel_values=px)
    target = _check_target(target, logits.shape[0])
    res = _explain_all(loaded, methods, target, rules, progress, pixel_values=px)
    t = next(iter(res.values()))["target"]
    labels = labels_of(loaded)
    return {"kind": "image", "model": ref, "fingerprint": loaded.fingerprint, "image": pixels.round(4).tolist(),
            "label": label, "sample": None if image is not None else int(sample), "note": note, "target": t,
            "target_name": labels.get(t, str(t)), "predictions": _predictions(loaded, logits),
            "grid": list(loaded.model.config.grid), "rules": rules, "methods": res}


# ---- rows and files -----------------------------------------------------------------------------------------------
def rows(result: dict) -> list[dict]:
    """One row per unit (token or patch) with every method's relevance: the CSV download."""
    names = list(result["methods"])
    if result["kind"] == "text":
        return [{"position": i, "token": tok, **{n: result["methods"][n]["relevance"][i] for n in names}}
                for i, tok in enumerate(result["tokens"])]
    h, w = result["grid"]
    return [{"row": r, "col": c, **{n: result["methods"][n]["relevance"][r][c] for n in names}}
            for r in range(h) for c in range(w)]


def summary_rows(result: dict) -> list[dict]:
    """One row per method: target, explained logit, sum of relevances, what the rest absorbed, time."""
    return [{"method": m["label"], "target": result["target_name"], "logit": round(m["logit"], 4),
             "sum of relevances": round(m["total"], 4), "absorbed (logit - sum)": round(m["absorbed"], 4),
             "time (ms)": round(1000 * m["seconds"], 1)} for m in result["methods"].values()]


# ---- precomputed examples -----------------------------------------------------------------------------------------
def read_examples(path: Path | str = EXAMPLES) -> list[dict]:
    try:
        return json.loads(Path(path).read_text())["entries"]
    except (OSError, ValueError, KeyError):
        return []


def find_example(entries: list[dict], **match) -> dict | None:
    """The stored result whose inputs equal ``match`` (model, text or sample, methods, target, rules), if any,
    and only while the model's weights are the ones it was computed with."""
    for e in entries:
        if all(e.get("inputs", {}).get(k) == v for k, v in match.items()):
            try:
                if load(e["result"]["model"]).fingerprint != e["result"]["fingerprint"]:
                    return None
            except Exception:
                return None
            return e["result"]
    return None


def default_calls() -> list[tuple[str, dict]]:
    calls = []
    for ref, texts in TEXT_EXAMPLES.items():
        for text in texts:
            calls.append(("text", {"model": ref, "text": text, "methods": list(DEFAULT_METHODS), "target": None,
                                   "rules": {}}))
    for s in IMAGE_SAMPLES:
        calls.append(("image", {"model": IMAGE_MODELS[0], "sample": s, "methods": list(DEFAULT_METHODS),
                                "target": None, "rules": {}}))
    return calls


def compute(kind: str, inputs: dict) -> dict:
    if kind == "text":
        return text_result(inputs["model"], inputs["text"], inputs["methods"], inputs["target"], inputs["rules"])
    return image_result(inputs["model"], sample=inputs["sample"], methods=inputs["methods"],
                        target=inputs["target"], rules=inputs["rules"])


def precompute_examples(path: Path | str = EXAMPLES, log=print) -> Path:
    """Compute the tab's examples (:func:`default_calls`) and write them to ``assets/lrp/examples.json``."""
    from core.figures import write_output

    entries = []
    for kind, inputs in default_calls():
        res = compute(kind, inputs)
        entries.append({"kind": kind, "inputs": inputs, "result": res})
        log(f"{kind} {inputs.get('text') or inputs.get('sample')!r}: target {res['target_name']!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_output(path, {"version": 1, "entries": entries})
