"""Memory / perplexity trade-off of weight formats (NeuZip paper, Fig. 3 and Tables 3-4).

Each *setting* stores the model's linear layers (all but the embeddings and the LM head, as
:func:`core.neuzip.compress_model` does) in one format and gives a point
``(model memory in bytes, word-level perplexity)``:

- ``bf16``: the reference, every weight as bf16;
- ``neuzip``: NeuZip with ``k = 7`` (lossless: the bf16 perplexity exactly), ``3``, ``1``, ``0``,
  each with or without the per-block normaliser (``block_size``);
- ``bnb-int8``, ``bnb-nf4``, ``bnb-fp4``: bitsandbytes quantization (row-wise absmax INT8, i.e.
  LLM.int8 without its outlier path; NF4 / FP4 with block size 64 and double-quantized scales, the
  ``Linear4bit`` defaults), when ``bitsandbytes`` imports;
- ``nf4-rans``: the NF4 codes entropy-coded with the NeuZip rANS coder (lossless on the codes, so the
  NF4 perplexity at a smaller size): the fairer baseline.

The registry :data:`METHODS` maps each name to its quantizer ``(W bf16) -> (W_hat float32, stored
bytes)`` and everything a view needs: its label, legend family and marker style, and the settings
:func:`default_settings` adds for it. A new baseline is one entry (plus its quantizer): it then appears
in the trade-off, its tables, its chart and the CLI.

Memory is every stored byte of the model's weights: the linear layers in the setting's format plus
every other parameter and buffer as bf16 (counted once when tied), i.e. ``resident_bytes`` of
:func:`core.neuzip.memory_report` for NeuZip. Activations and decode buffers are not counted.

Perplexity is word-level: ``exp(total token NLL / number of whitespace-separated words)`` over
non-overlapping windows of ``window`` predicted tokens (each window sees only its own tokens as
context, plus the one token before it), on the first ``words`` words of the test split of
``wikipedia-paragraphs`` (``wikitext-2`` when online). A BOS token (or EOS when there is none) is put
first, so every token of the text is predicted. Every setting is evaluated with its de-quantized
weights in float32 arithmetic (what bitsandbytes' CPU path and :class:`CompressedLinear` compute,
without decoding at every forward), so the settings differ only in their weights.

Each point is cached on disk (the runner's :class:`core.cache.ResultsCache`, analysis ``neuzip/tradeoff``),
keyed by the model fingerprint, the setting and the evaluation text, so a repeated request is
instant and a stopped run keeps the points it finished.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from core.errors import BadInputError, Cancelled, LayerwiseError
from core.neuzip import rans
from core.neuzip.codec import check_params, compress
from core.progress import report, scaled

__all__ = ["METHODS", "Method", "Style", "Cancelled", "default_settings", "setting_label", "setting_family",
           "setting_style", "pareto_front",
           "windowed_nll", "word_perplexity", "eval_text", "quantize_linears", "tradeoff", "tradeoff_for_model",
           "bnb_available", "DEFAULT_WORDS", "DEFAULT_WINDOW", "SKIP"]

DEFAULT_WORDS = 2000  # the live path; the precomputed example in assets/neuzip used more (see its JSON)
DEFAULT_WINDOW = 512
SKIP = ("embed", "lm_head")  # linear layers left in bf16, as compress_model does
CACHE_VERSION = 3  # 2, 3: codec formats 2 and 3 (core.neuzip.pairs) changed every NeuZip size
BNB_BLOCK = 64

Progress = Callable[[float, str], None]  # (fraction done in [0, 1], message); may raise Cancelled


def bnb_available() -> bool:
    """True when ``bitsandbytes`` can be imported (its CPU backend runs the INT8/NF4/FP4 baselines)."""
    return importlib.util.find_spec("bitsandbytes") is not None


# --------------------------------------------------------------------------------------------- methods

def _bf16(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    return w.float(), 2 * w.numel()


def _neuzip(w: torch.Tensor, k: int = 7, block_size: int | None = None, **_) -> tuple[torch.Tensor, int]:
    ct = compress(w, k, block_size)
    return ct.decompress().float(), ct.nbytes


def _state_bytes(state) -> int:
    """Every stored byte of a bitsandbytes ``QuantState`` (scales, nested scales, code table, header)."""
    return sum(v.numel() * v.element_size() for v in state.as_dict(packed=True).values()
               if isinstance(v, torch.Tensor))


def _bnb_int8(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    import bitsandbytes.functional as F

    codes, row_scale, _ = F.int8_vectorwise_quant(w)
    return F.int8_vectorwise_dequant(codes, row_scale).float(), codes.numel() + 4 * row_scale.numel()


def _bnb_4bit(w: torch.Tensor, quant_type: str):
    import bitsandbytes.functional as F

    packed, state = F.quantize_4bit(w, blocksize=BNB_BLOCK, quant_type=quant_type, compress_statistics=True)
    return packed, state, F.dequantize_4bit(packed, state).float().reshape(w.shape)


def _bnb_nf4(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "nf4")
    return w_hat, packed.numel() + _state_bytes(state)


def _bnb_fp4(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "fp4")
    return w_hat, packed.numel() + _state_bytes(state)


def nibbles(packed: torch.Tensor) -> np.ndarray:
    """The 4-bit codes of a packed ``uint8`` tensor, high nibble first: ``(2 * numel,) uint8``."""
    b = packed.reshape(-1).cpu().numpy()
    return np.stack([b >> 4, b & 0x0F], axis=1).reshape(-1)


def _nf4_rans(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "nf4")
    stream = rans.encode(nibbles(packed))
    return w_hat, stream.nbytes + _state_bytes(state)


@dataclass(frozen=True)
class Style:
    """How a family of points is drawn: colour, marker and where the point labels go."""

    colour: str
    marker: str = "circle"
    text_position: str = "top center"


@dataclass(frozen=True)
class Method:
    """A weight format: ``quantize(W bf16 (out, in), **setting) -> (W_hat float32, stored bytes)``.

    Attributes
    ----------
    label : the setting's name in tables and on the chart (parameterised methods: ``describe``).
    family : the legend entry its points join; ``style``: how they are drawn.
    settings : what :func:`default_settings` adds for a baseline (``baseline=True``), each merged with its name.
    describe : ``setting -> (label, family, style)`` for a method whose settings carry parameters (NeuZip's k, B).
    """

    name: str
    family: str  # the legend entry
    quantize: Callable[..., tuple[torch.Tensor, int]]
    label: str = ""
    style: Style = Style("#475569")
    needs_bnb: bool = False
    same_weights_as: str | None = None  # evaluates exactly like this method (a lossless re-coding)
    baseline: bool = True
    settings: tuple[dict, ...] = ({},)
    describe: Callable[[dict], tuple[str, str, Style]] | None = None

    def view(self, setting: dict) -> tuple[str, str, Style]:
        """``(label, family, style)`` of one of its settings."""
        if self.describe is not None:
            return self.describe(setting)
        return self.label or self.name, self.family, self.style


def _describe_neuzip(s: dict) -> tuple[str, str, Style]:
    text = f"NeuZip k={s['k']}" + (" (lossless)" if s["k"] == 7 else "")
    if s.get("block_size"):
        return text + f", B={s['block_size']}", "NeuZip + normaliser", Style("#56B4E9", "diamond", "bottom center")
    return text, "NeuZip", Style("#0072B2", "circle", "top center")


_BNB = Style("#D55E00", "triangle-up", "middle right")
METHODS: dict[str, Method] = {
    "bf16": Method("bf16", "bf16", _bf16, "bf16", Style("#000000", "square"), baseline=False),
    "neuzip": Method("neuzip", "NeuZip", _neuzip, baseline=False, describe=_describe_neuzip),
    "bnb-int8": Method("bnb-int8", "bitsandbytes", _bnb_int8, "INT8 (bnb)", _BNB, needs_bnb=True),
    "bnb-nf4": Method("bnb-nf4", "bitsandbytes", _bnb_nf4, "NF4 (bnb)", _BNB, needs_bnb=True),
    "bnb-fp4": Method("bnb-fp4", "bitsandbytes", _bnb_fp4, "FP4 (bnb)", _BNB, needs_bnb=True),
    "nf4-rans": Method("nf4-rans", "NF4 + rANS", _nf4_rans, "NF4 + rANS", Style("#CC79A7", "star", "middle left"),
                       needs_bnb=True, same_weights_as="bnb-nf4"),
}


def _method(s: dict) -> Method:
    name = s.get("method")
    if name not in METHODS:
        raise BadInputError(f"unknown method {name!r}.", fix=f"use one of {', '.join(METHODS)}")
    return METHODS[name]


def setting_label(s: dict) -> str:
    """A short name for a setting, e.g. ``NeuZip k=3, B=128`` (from the registry)."""
    return _method(s).view(s)[0]


def setting_family(s: dict) -> str:
    """The legend entry of a setting (from the registry)."""
    return _method(s).view(s)[1]


def setting_style(s: dict) -> Style:
    """How a setting's family is drawn (from the registry)."""
    return _method(s).view(s)[2]


def default_settings(ks=(7, 3, 1, 0), block_size: int | None = 128, baselines: bool = True) -> list[dict]:
    """The settings of the trade-off: bf16, NeuZip for each ``k`` (k < 7 also with ``block_size``),
    and the baselines of the registry (``Method.baseline``) when ``baselines`` (those that need
    bitsandbytes only when it imports).

    Raises
    ------
    BadInputError
        A ``k`` not in {0, 1, 3, 7} or a block size that is not a power of two in [32, 1024].
    """
    ks = list(ks)
    if not ks:
        raise BadInputError("no mantissa bits given.", fix="pass at least one of 7, 3, 1, 0")
    for k in ks:
        check_params(k, None)
    if block_size is not None:
        check_params(0, block_size)
    out = [{"method": "bf16"}]
    for k in sorted({int(k) for k in ks}, reverse=True):
        out.append({"method": "neuzip", "k": k, "block_size": None})
        if k < 7 and block_size is not None:
            out.append({"method": "neuzip", "k": k, "block_size": int(block_size)})
    if baselines:
        out += [{"method": name, **s} for name, m in METHODS.items() if m.baseline
                and (not m.needs_bnb or bnb_available()) for s in m.settings]
    return out


# --------------------------------------------------------------------------------------------- perplexity

def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def windowed_nll(model: nn.Module, ids: torch.Tensor, window: int = DEFAULT_WINDOW,
                 progress: Progress | None = None) -> tuple[float, int]:
    """Total next-token NLL (nats) of ``ids (T,)`` over non-overlapping windows.

    Window ``j`` feeds ``ids[j*window : (j+1)*window]`` and predicts ``ids[j*window+1 : (j+1)*window+1]``,
    so each of the ``T - 1`` tokens after the first is predicted exactly once. ``progress(fraction, message)``
    is called before each window and may raise :class:`Cancelled`.

    Returns
    -------
    (total NLL in nats, number of predicted tokens)
    """
    if window < 1:
        raise BadInputError(f"window must be >= 1, got {window}.")
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    starts = list(range(0, max(len(ids) - 1, 0), window))
    total, count = 0.0, 0
    for i, start in enumerate(starts):
        report(progress, i / len(starts), f"perplexity window {i + 1}/{len(starts)}")
        chunk = ids[start:start + window + 1]
        logits = _logits(model, chunk[None, :-1])[0].float()
        total += float(torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum"))
        count += len(chunk) - 1
    return total, count


def token_ids(tokenizer, text: str) -> torch.Tensor:
    """``(T,)`` ids of ``text`` with the tokenizer's BOS (or EOS) first, so every text token is predicted."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    first = getattr(tokenizer, "bos_token_id", None)
    if first is None:
        first = getattr(tokenizer, "eos_token_id", None)
    return torch.tensor(([first] if first is not None else []) + ids, dtype=torch.long)


def word_perplexity(model: nn.Module, tokenizer, text: str, window: int = DEFAULT_WINDOW,
                    progress: Progress | None = None) -> dict:
    """Word-level perplexity of ``text``: ``exp(total token NLL / len(text.split()))``.

    Returns
    -------
    dict with ``perplexity`` (word level), ``token_perplexity``, ``nll`` (total, nats), ``tokens``
    (predicted), ``words``
    """
    words = len(text.split())
    if words == 0:
        raise BadInputError("the evaluation text is empty.", fix="give a text with at least one word")
    ids = token_ids(tokenizer, text)
    nll, count = windowed_nll(model, ids, window, progress)
    return {"perplexity": math.exp(nll / words), "token_perplexity": math.exp(nll / max(count, 1)),
            "nll": nll, "tokens": count, "words": words}


def eval_text(words: int = DEFAULT_WORDS, dataset: str | None = None) -> tuple[str, str]:
    """The first ``words`` words of the test split (paragraphs joined by blank lines).

    ``dataset`` defaults to ``wikitext-2`` when online (falling back to the offline set if it cannot
    be loaded) and ``wikipedia-paragraphs`` offline. Returns ``(text, dataset name)``.
    """
    from core.data import load
    from core.settings import is_online

    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise BadInputError(f"the number of evaluation words must be a positive integer, got {words!r}.")
    names = [dataset] if dataset else (["wikitext-2", "wikipedia-paragraphs"] if is_online()
                                       else ["wikipedia-paragraphs"])
    records, error = None, None
    for name in names:
        try:
            records, dataset = load(name, "test"), name
            break
        except LayerwiseError as exc:
            error = exc
    if records is None:
        raise error
    parts, left = [], words
    for r in records:
        w = r.text.split()
        if not w:
            continue
        if len(w) >= left:
            parts.append(" ".join(w[:left]))
            left = 0
            break
        parts.append(r.text.strip())
        left -= len(w)
    return "\n\n".join(parts), dataset


# --------------------------------------------------------------------------------------------- settings

def _linears(model: nn.Module, skip=SKIP) -> list[tuple[str, nn.Linear]]:
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise BadInputError("this model has no linear layers to compress.",
                            fix="NeuZip compresses nn.Linear weights; pick a transformer-style model")
    chosen = [(n, m) for n, m in linears if not any(s in n for s in skip)]
    if not chosen:
        raise BadInputError(f"all {len(linears)} linear layers match skip={tuple(skip)}.")
    return chosen


def other_bytes(model: nn.Module, linear_weights: list[torch.Tensor]) -> int:
    """Bytes of every parameter and buffer except ``linear_weights``, floating ones as bf16, tied ones once."""
    skip = {w.data_ptr() for w in linear_weights}
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        ptr = t.data_ptr()
        if ptr in seen or ptr in skip:
            continue
        seen.add(ptr)
        total += t.numel() * (2 if t.is_floating_point() else t.element_size())
    return total


def quantize_linears(masters: dict[str, torch.Tensor], setting: dict, progress: Progress | None = None
                     ) -> tuple[dict[str, torch.Tensor], int]:
    """Apply one setting to bf16 weights ``{name: (out, in) bfloat16}``.

    Returns ``({name: W_hat float32}, stored bytes of all of them)``.
    """
    method = METHODS[setting["method"]]
    kwargs = {k: v for k, v in setting.items() if k != "method"}
    out, nbytes = {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (name, w) in enumerate(masters.items()):
            report(progress, i / len(masters), name)
            w_hat, b = method.quantize(w, **kwargs)
            out[name], nbytes = w_hat, nbytes + b
    return out, nbytes


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (lower or equal memory *and* perplexity, one
    of them strictly lower), sorted by memory. Points with a non-finite value are never on it."""
    ok = [i for i, (m, p) in enumerate(points) if math.isfinite(m) and math.isfinite(p)]
    front = []
    for i in ok:
        mi, pi = points[i]
        dominated = any(points[j][0] <= mi and points[j][1] <= pi and (points[j][0] < mi or points[j][1] < pi)
                        for j in ok if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], points[i][1]))


def tradeoff_for_model(model: nn.Module, tokenizer, text: str, settings: list[dict], window: int = DEFAULT_WINDOW,
                       fingerprint: str | None = None, cache=None, cache_params: dict | None = None,
                       progress: Progress | None = None) -> dict:
    """Evaluate ``settings`` on one model (see the module docstring).

    Parameters
    ----------
    model : a causal LM (``model(ids (1, T)) -> logits (1, T, V)`` or an output with ``.logits``)
    tokenizer : a Hugging Face tokenizer
    text : the evaluation text
    settings : from :func:`default_settings`
    fingerprint, cache : with both, each point is read from / written to the results cache
    cache_params : extra parameters that identify the evaluation (dataset name...)
    progress : ``progress(fraction, message)``, called between layers and windows; raising :class:`Cancelled`
        stops the run (the finished points stay cached)

    Returns
    -------
    dict with ``points`` (one dict per setting: ``label``, ``family``, ``method``, ``k``,
    ``block_size``, ``memory_bytes``, ``linear_bytes``, ``linear_numel``, ``bits_per_weight`` (linear
    layers), ``perplexity`` (word level), ``token_perplexity``, ``pareto``, ``cached``), ``pareto``
    (labels along the front), ``words``, ``tokens``, ``window`` and ``notes``.
    """
    from core.cache import CacheEntry

    if not settings:
        raise BadInputError("no settings to evaluate.")
    for s in settings:
        _method(s)
        if METHODS[s["method"]].needs_bnb and not bnb_available():
            raise BadInputError(f"{s['method']} needs bitsandbytes, which is not installed.",
                                fix="pip install --no-deps bitsandbytes==0.50.2")
        if s["method"] == "neuzip":
            check_params(s.get("k", 7), s.get("block_size"))
    chosen = _linears(model)
    words = len(text.split())
    text_sha = hashlib.sha256(text.encode()).hexdigest()[:16]
    state: dict = {}

    def workspace():
        """A float32 copy of the model with bf16-rounded weights, and the bf16 linear weights (built once)."""
        if not state:
            work = copy.deepcopy(model).float().eval()
            with torch.no_grad():
                for p in work.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
            lin = _linears(work)
            state["work"], state["linears"] = work, dict(lin)
            state["masters"] = {n: m.weight.detach().to(torch.bfloat16).clone() for n, m in lin}
            state["ids"] = token_ids(tokenizer, text)
        return state

    base_other = other_bytes(model, [m.weight for _, m in chosen])
    linear_numel = sum(m.weight.numel() for _, m in chosen)
    points, evaluated = [], {}
    n = len(settings)
    for i, s in enumerate(settings):
        label = setting_label(s)
        lo, hi = i / n, (i + 1) / n

        def compute(s=s, label=label, lo=lo, hi=hi):
            ws = workspace()
            report(progress, lo, f"{label}: quantizing {len(ws['masters'])} linear layers")
            quantizing = scaled(progress, lo, lo + (hi - lo) * 0.3)
            weights, nbytes = quantize_linears(ws["masters"], s, quantizing and (
                lambda f, name: quantizing(f, f"{label}: {name}")))
            key = (METHODS[s["method"]].same_weights_as or s["method"], s.get("k"), s.get("block_size"))
            if all(torch.equal(w, ws["masters"][name].float()) for name, w in weights.items()):
                key = ("bf16", None, None)  # bit-exact bf16 weights (lossless NeuZip): the bf16 perplexity
            if key in evaluated:
                nll, count = evaluated[key]
            else:
                with torch.no_grad():
                    for name, w in weights.items():
                        ws["linears"][name].weight.copy_(w)
                del weights
                scoring = scaled(progress, lo + (hi - lo) * 0.3, hi)
                nll, count = windowed_nll(ws["work"], ws["ids"], window, scoring and (
                    lambda f, message: scoring(f, f"{label}: {message}")))
                evaluated[key] = (nll, count)
            return CacheEntry({"linear_bytes": nbytes, "nll": nll, "tokens": count})

        params = {"setting": s, "window": window, "words": words, "text_sha": text_sha, "skip": list(SKIP),
                  "version": CACHE_VERSION, **(cache_params or {})}
        if cache is not None and fingerprint is not None:
            entry, hit = cache.get_or_compute(fingerprint, "neuzip/tradeoff", params, compute)
        else:
            entry, hit = compute(), False
        d = entry.data
        if hit:
            key = (METHODS[s["method"]].same_weights_as or s["method"], s.get("k"), s.get("block_size"))
            evaluated.setdefault(key, (d["nll"], d["tokens"]))
            if s["method"] == "bf16":
                evaluated.setdefault(("bf16", None, None), (d["nll"], d["tokens"]))
        memory = d["linear_bytes"] + base_other
        points.append({"label": label, "family": setting_family(s), "method": s["method"], "k": s.get("k"),
                       "block_size": s.get("block_size"), "memory_bytes": memory, "memory_MB": memory / 1e6,
                       "linear_bytes": d["linear_bytes"], "linear_numel": linear_numel,
                       "bits_per_weight": 8.0 * d["linear_bytes"] / linear_numel,
                       "perplexity": math.exp(d["nll"] / words), "token_perplexity": math.exp(d["nll"] / max(d["tokens"], 1)),
                       "cached": bool(hit)})
        report(progress, hi, f"{label}: done")
    front = pareto_front([(p["memory_bytes"], p["perplexity"]) for p in points])
    for j, p in enumerate(points):
        p["pareto"] = j in front
    notes = [f"Memory: linear layers ({linear_numel:,} weights, embeddings and LM head excluded) in each format "
             f"+ {base_other / 1e6:.1f} MB of other weights as bf16.",
             "Perplexity: exp(total token NLL / words), non-overlapping windows of "
             f"{window} tokens, de-quantized weights in float32 arithmetic."]
    if any(METHODS[s["method"]].needs_bnb for s in settings):
        from importlib.metadata import version  # importing bitsandbytes itself takes ~20 s

        notes.append(f"Baselines: bitsandbytes {version('bitsandbytes')} on CPU (INT8 row-wise absmax; NF4/FP4 "
                     f"block {BNB_BLOCK} with double-quantized scales). NF4 + rANS: the same NF4 codes "
                     "entropy-coded with the NeuZip rANS coder (same perplexity, fewer bytes).")
    elif not bnb_available():
        notes.append("Quantization baselines left out: bitsandbytes is not installed "
                     "(pip install --no-deps bitsandbytes==0.50.2).")
    return {"points": points, "pareto": [points[j]["label"] for j in front], "words": words,
            "tokens": len(token_ids(tokenizer, text)) - 1,
            "window": window, "notes": notes}


def tradeoff(ref: str, ks=(7, 3, 1, 0), block_size: int | None = 128, words: int = DEFAULT_WORDS,
             window: int = DEFAULT_WINDOW, baselines: bool = True, dataset: str | None = None,
             use_cache: bool = True, progress: Progress | None = None) -> dict:
    """The memory / perplexity trade-off of a model reference (registered name, folder or hub id).

    Checks every parameter before loading anything. Returns :func:`tradeoff_for_model`'s dict plus
    ``model``, ``fingerprint``, ``dataset``, ``ks``, ``block_size``.

    Raises
    ------
    BadInputError, ModelLoadError, DataMissingError
        Bad parameters, an unknown model, a model without tokenizer or linear layers, missing data.
    Cancelled
        ``progress`` raised it (the user pressed Stop).
    """
    settings = default_settings(ks, block_size, baselines)
    if isinstance(window, bool) or not isinstance(window, int) or window < 8:
        raise BadInputError(f"window must be an integer >= 8, got {window!r}.")
    text, dataset = eval_text(words, dataset)
    from core.runner import results_cache
    from core.zoo import load_model, require_kind

    report(progress, 0.0, f"loading {ref}")
    lm = require_kind(load_model(ref), ("causal-lm",), "The memory / perplexity trade-off")
    from core.zoo.placement import is_dispatched
    if is_dispatched(lm.model):
        raise BadInputError(f"the memory / perplexity trade-off evaluates a float32 copy of the whole of {ref}, so it "
                            "needs the model on one device, not spread by --device-map.",
                            fix="leave out --device-map / --max-memory for `neuzip tradeoff`; `neuzip compress` reads "
                                "a spread model layer by layer.")
    if lm.tokenizer is None:
        raise BadInputError(f"{ref} has no tokenizer, so its perplexity cannot be measured.",
                            fix="pick a causal language model with a tokenizer")
    result = tradeoff_for_model(lm.model, lm.tokenizer, text, settings, window, lm.fingerprint,
                                results_cache() if use_cache else None, {"dataset": dataset},
                                progress)
    result["tokens"] = len(token_ids(lm.tokenizer, text)) - 1
    return {"model": ref, "fingerprint": lm.fingerprint, "dataset": dataset, "ks": list(ks),
            "block_size": block_size, **result}
