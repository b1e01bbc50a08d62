"""The inputs of a MambaLRP explanation, validated with a message naming the fix: the model (a Mamba model from the
zoo), a text cut to a length the page states, an uploaded image made into an MNIST-like digit, and what the model
predicts.

    load(ref)                            -> core.zoo.LoadedModel (a Mamba model; anything else is refused)
    load_vision(ref)                     -> the same, refused unless it is an image model
    cut_text(loaded, text)               -> (the text cut to MAX_TEXT_CHARS characters before tokenizing, note)
    tokenize(loaded, text, max_tokens)   -> (input_ids (1, L), token texts as typed, note)
    prepare_image(image, size)           -> ((size, size) float32 in [0, 1], note)
    test_image(index)                    -> ((28, 28) float32 in [0, 1], label) of the mnist-5k test split
    logits(loaded, **inputs)             -> (C,) the plain model's output
    predictions(loaded, logits, k)       -> [{"id", "name", "probability"}], most likely first
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from core.budget import check_image_header
from core.errors import BadInputError

MAX_TOKENS = 512  # longer texts are cut (the page says so); the embedded models were trained on <= 96 tokens
# longer texts are cut to this many characters before they are tokenized (a 50 MB text took 59 s to tokenize and left
# the server at 6.4 GB): 16 characters per explained token, more than any tokenizer here needs for MAX_TOKENS tokens
MAX_TEXT_CHARS = 16 * MAX_TOKENS


def load(ref: str):
    """``core.zoo.load_model(ref)`` (kept in the zoo's bounded cache), refused unless it is a Mamba model."""
    from core.lrp.adapters import adapter_for
    from core.zoo import load_model

    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick mamba-sentiment, mamba-lm or vision-mamba-mnist.")
    loaded = load_model(str(ref).strip())
    adapter_for(loaded.model)  # a clear message for a non-Mamba model
    return loaded


def load_vision(ref: str):
    """:func:`load`, refused unless it is an image model."""
    loaded = load(ref)
    if kind(loaded) != "vision":
        raise BadInputError(f"{str(ref).strip()} is not an image model.", fix="Pick vision-mamba-mnist.")
    return loaded


def kind(loaded) -> str:
    """``classifier``, ``lm`` or ``vision``."""
    from core.lrp.adapters import adapter_for
    return adapter_for(loaded.model).kind


def labels_of(loaded) -> dict[int, str]:
    """Class index -> name, for classifiers, from the folder the model was loaded from, whatever its name or spelling:
    its card.json's ``labels``, else the model config's ``id2label`` unless that holds only transformers'
    placeholders (``LABEL_0``, ...); empty for language models and when neither names the classes."""
    from core.zoo.card import read_card_file

    if kind(loaded) == "lm":
        return {}
    folder = getattr(loaded, "folder", None)
    try:
        raw = read_card_file(Path(folder)).get("labels", {}) if folder is not None and Path(folder).is_dir() else {}
        labels = {int(k): str(v) for k, v in (raw or {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        labels = {}
    if labels:
        return labels
    config = getattr(loaded.model, "config", None)
    id2label = getattr(config, "id2label", None) or {}
    try:
        labels = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError):
        return {}
    return {} if all(v == f"LABEL_{k}" for k, v in labels.items()) else labels


def cut_text(loaded, text: str, max_chars: int = MAX_TEXT_CHARS) -> tuple[str, str]:
    """``(text, note)``: a text longer than ``max_chars`` characters cut to the part that can be explained, before it is
    tokenized: a classifier's first ``max_chars`` characters (it reads from the start up to its final marker), a
    language model's last ones (it predicts what follows the end); the note says so ("" when nothing was cut)."""
    if not isinstance(text, str) or len(text) <= max_chars:
        return text, ""
    if kind(loaded) == "lm":
        return text[-max_chars:], f"The text has {len(text):,} characters; only the last {max_chars:,} were read."
    return text[:max_chars], f"The text has {len(text):,} characters; only the first {max_chars:,} were read."


def tokenize(loaded, text: str, max_tokens: int = MAX_TOKENS) -> tuple[torch.Tensor, list[str], str]:
    """``(input_ids (1, L), token texts, note)``; the note says whether and how the text was cut.

    A classifier reads its last position (the EOS the tokenizer appends), so a long text keeps its first tokens
    and that EOS; a language model predicts what follows the end, so it keeps the last tokens.
    """
    if kind(loaded) == "vision":
        raise BadInputError(f"{loaded.card.name} takes images, not text.", fix="Pick mamba-sentiment or mamba-lm.")
    if loaded.tokenizer is None:
        why = getattr(loaded, "tokenizer_error", "") or "no tokenizer was found"
        raise BadInputError(f"{loaded.card.name} has no usable tokenizer: {why}.",
                            fix="use a model folder or hub id that includes its tokenizer files.")
    if not isinstance(text, str) or not text.strip():
        raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
    text, cut = cut_text(loaded, text)
    enc = loaded.tokenizer(text, return_tensors="pt", return_offsets_mapping=loaded.tokenizer.is_fast)
    ids = enc["input_ids"]
    keep = torch.arange(ids.shape[1])
    note = ""
    n = ids.shape[1]
    if n > max_tokens:
        if kind(loaded) == "classifier":
            keep = torch.cat([keep[:max_tokens - 1], keep[-1:]])
            note = f"The text has {n} tokens; only the first {max_tokens - 1} (and the final marker) are explained."
        else:
            keep = keep[-max_tokens:]
            note = f"The text has {n} tokens; only the last {max_tokens} are explained."
        ids = ids[:, keep]
    note = " ".join(part for part in (cut, note) if part)
    pieces = pieces_of(loaded, ids[0].tolist())
    if "offset_mapping" in enc:  # show the text as typed (with its spaces and case), not the normalised tokens
        offsets = enc["offset_mapping"][0][keep].tolist()
        prev = offsets[0][0] if offsets else 0
        for i, (start, end) in enumerate(offsets):
            if end > start:
                pieces[i] = text[min(prev, start):end]
                prev = end
    return ids, pieces, note


def pieces_of(loaded, ids: list[int]) -> list[str]:
    """Token texts; ``<id N>`` for ids past the tokenizer (a padded embedding, as in mamba-130m-hf)."""
    from core.zoo import token_texts
    return token_texts(loaded.tokenizer, ids)


def predictions(loaded, logits: torch.Tensor, k: int = 10) -> list[dict]:
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


def logits(loaded, **inputs) -> torch.Tensor:
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules
    adapter = adapter_for(loaded.model)
    with torch.no_grad(), lrp_rules(adapter.model, None):
        return adapter.logits(adapter.embed(**inputs))[0]


def target_label(prediction: dict, lm: bool) -> str:
    """How a target choice reads: ``' the' (31.5%)`` for a next token, ``1: positive (93.8%)`` for a class."""
    pct = f"{100 * prediction['probability']:.1f}%"
    return f"{prediction['name']!r} ({pct})" if lm else f"{prediction['id']}: {prediction['name']} ({pct})"


def _open_image(path, size: int):
    """``(image, its size as the header states it)`` of the file at ``path``, decoded only once its header says it is within
    :func:`core.budget.max_image_pixels` (a 13,000 x 13,000 PNG of 657 KB decodes to 5 GB); a JPEG is decoded at a
    reduced scale when it is much larger than ``size`` (its DCT scaling: no full-size copy is made)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():  # PIL warns past 89 Mpx; this app's own cap is far below and said
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(path)  # reads the header only
    except Image.DecompressionBombError:  # PIL's own limit (179 Mpx) is far above this app's
        raise BadInputError("The image has more pixels than this app decodes.",
                            fix="Upload a smaller image (a digit reads well at 28 x 28 to a few hundred pixels).") \
            from None
    except Exception:
        raise BadInputError("That file is not an image.", fix="Upload a PNG or JPEG of a digit.") from None
    header = image.size
    check_image_header(*header)
    if image.format == "JPEG" and min(header) > 8 * size:
        image.draft(image.mode, (8 * size, 8 * size))
    try:
        image.load()
    except Exception:
        raise BadInputError("That file is not an image.", fix="Upload a PNG or JPEG of a digit.") from None
    return image, header


def prepare_image(image, size: int = 28) -> tuple[np.ndarray, str]:
    """An uploaded image -> ``(size, size)`` float32 in [0, 1] (white digit on black, like MNIST) and a note.

    Colour images are turned grey, other sizes resized (aspect ratios beyond 2:1 are refused), and a dark digit on
    a light background is inverted; the note says what was done.
    """
    from PIL import Image

    if image is None:
        raise BadInputError("No image.", fix="Upload an image or pick a test sample.")
    notes, header = [], None
    if isinstance(image, (str, Path)):
        image, header = _open_image(image, size)
    if isinstance(image, Image.Image):
        check_image_header(*image.size)
        if image.mode not in ("L", "1", "I", "I;16", "F"):
            notes.append(f"converted from {image.mode} to grey")
        arr = np.asarray(image.convert("F"), dtype=np.float32)
        if image.mode in ("I", "I;16"):
            arr = arr / max(float(arr.max()), 1.0) * 255.0
        elif image.mode == "1":
            arr = arr * 255.0
    else:
        arr = np.asarray(image)
        if arr.ndim >= 2:
            check_image_header(arr.shape[1], arr.shape[0])
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
        notes.append("resized from {}x{} to {}x{}".format(*(header or (w, h)), size, size))
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
