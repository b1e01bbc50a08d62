"""Memory / perplexity trade-off of weight formats (NeuZip paper, Fig. 3 and Tables 3-4).

Each *setting* stores the model's linear layers (all but the embeddings and the LM head, as
:func:`core.neuzip.compress_model` does) in one format of the registry :data:`core.neuzip.formats.METHODS` and gives a
point ``(model memory in bytes, word-level perplexity)``; :func:`default_settings` lists bf16, NeuZip for each ``k``
(with and without the block normaliser) and the registry's baselines.

Memory is every stored byte of the model's weights: the linear layers in the setting's format plus every other
parameter and buffer as bf16 (counted once when tied), i.e. ``resident_bytes`` of :func:`core.neuzip.memory_report`
for NeuZip. Activations and decode buffers are not counted.

Perplexity is word-level (:mod:`core.neuzip.perplexity`). Every setting is evaluated with its de-quantized weights in
float32 arithmetic (what bitsandbytes' CPU path and :class:`CompressedLinear` compute, without decoding at every
forward), so the settings differ only in their weights.

:func:`tradeoff_for_model` asks for each point through ``point(params, compute)``: the service looks each point up
(:func:`core.runner.lookup`, analysis ``neuzip/tradeoff``), so a repeated request is instant and a stopped run keeps
the points it finished; without it every point is computed.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import math
import warnings
from typing import Callable

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.formats import BNB_BLOCK, METHODS, method_of, setting_family, setting_label
from core.neuzip.modules import SKIP, linear_layers
from core.neuzip.perplexity import DEFAULT_WINDOW, token_ids, windowed_nll
from core.progress import Progress, item_progress, report, scaled

__all__ = ["default_settings", "pareto_front", "quantize_linears", "other_bytes", "tradeoff_for_model",
           "bnb_available"]

Point = Callable[[dict, Callable[[], dict]], dict]  # (the point's parameters, compute) -> its data


def bnb_available() -> bool:
    """True when ``bitsandbytes`` can be imported (its CPU backend runs the INT8/NF4/FP4 baselines)."""
    return importlib.util.find_spec("bitsandbytes") is not None


def default_settings(ks=(7, 3, 1, 0), block_size: int | None = 128, baselines: bool = True) -> list[dict]:
    """The settings of the trade-off: bf16, NeuZip for each ``k`` (k < 7 also with ``block_size``), and the baselines
    of the registry (``Method.baseline``) when ``baselines`` (those that need bitsandbytes only when it imports).
    ``ks`` and ``block_size`` are taken as given (the service's request checked them; ``compress`` refuses others).
    """
    ks = list(ks)
    if not ks:
        raise BadInputError("no mantissa bits given.", fix="pass at least one of 7, 3, 1, 0")
    out = [{"method": "bf16"}]
    for k in sorted({int(k) for k in ks}, reverse=True):
        out.append({"method": "neuzip", "k": k, "block_size": None})
        if k < 7 and block_size is not None:
            out.append({"method": "neuzip", "k": k, "block_size": int(block_size)})
    if baselines:
        out += [{"method": name, **s} for name, m in METHODS.items() if m.baseline
                and (not m.needs_bnb or bnb_available()) for s in m.settings]
    return out


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
    step = item_progress(progress, "quantizing")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (name, w) in enumerate(masters.items()):
            if step:
                step(i, len(masters), name)
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


def _labelled(progress: Progress | None, label: str) -> Progress | None:
    """``progress`` with each message prefixed by a setting's label."""
    return None if progress is None else (lambda fraction, message: progress(fraction, f"{label}: {message}"))


def _same_weights(s: dict) -> tuple:
    """Settings with the same key evaluate identical weights (a lossless re-coding shares its source's)."""
    return METHODS[s["method"]].same_weights_as or s["method"], s.get("k"), s.get("block_size")


def tradeoff_for_model(model: nn.Module, tokenizer, text: str, settings: list[dict], window: int = DEFAULT_WINDOW,
                       point: Point | None = None, progress: Progress | None = None) -> dict:
    """Evaluate ``settings`` on one model (see the module docstring).

    Parameters
    ----------
    model : a causal LM (``model(ids (1, T)) -> logits (1, T, V)`` or an output with ``.logits``)
    tokenizer : a Hugging Face tokenizer
    text : the evaluation text
    settings : from :func:`default_settings`
    point : ``point(params, compute) -> {"linear_bytes", "nll", "tokens"}``: how each point is had (the service looks
        it up, keyed by ``params``: the setting, the window, the text's words and hash, the layers left out); default:
        ``compute()``
    progress : ``progress(fraction, message)``, called between layers and windows; raising :class:`Cancelled`
        stops the run (with a caching ``point``, the finished points stay cached)

    Returns
    -------
    dict with ``points`` (one dict per setting: ``label``, ``family``, ``method``, ``k``, ``block_size``,
    ``memory_bytes``, ``memory_MB``, ``linear_bytes``, ``linear_numel``, ``bits_per_weight`` (linear layers),
    ``perplexity`` (word level), ``token_perplexity``, ``pareto``), ``pareto`` (labels along the front), ``words``,
    ``tokens``, ``window`` and ``notes``.
    """
    if not settings:
        raise BadInputError("no settings to evaluate.")
    for s in settings:
        if method_of(s).needs_bnb and not bnb_available():
            raise BadInputError(f"{s['method']} needs bitsandbytes, which is not installed.",
                                fix="pip install --no-deps bitsandbytes==0.50.2")
    chosen = linear_layers(model)
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
            lin = linear_layers(work)
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
        part = _labelled(scaled(progress, i / n, (i + 1) / n), label)

        def compute(s=s, part=part):
            ws = workspace()
            report(part, 0.0, f"quantizing {len(ws['masters'])} linear layers")
            weights, nbytes = quantize_linears(ws["masters"], s, scaled(part, 0.0, 0.3))
            key = _same_weights(s)
            if all(torch.equal(w, ws["masters"][name].float()) for name, w in weights.items()):
                key = ("bf16", None, None)  # bit-exact bf16 weights (lossless NeuZip): the bf16 perplexity
            if key not in evaluated:
                with torch.no_grad():
                    for name, w in weights.items():
                        ws["linears"][name].weight.copy_(w)
                del weights
                evaluated[key] = windowed_nll(ws["work"], ws["ids"], window, scaled(part, 0.3, 1.0))
            nll, count = evaluated[key]
            return {"linear_bytes": nbytes, "nll": nll, "tokens": count}

        params = {"setting": s, "window": window, "words": words, "text_sha": text_sha, "skip": list(SKIP)}
        d = compute() if point is None else point(params, compute)
        evaluated.setdefault(_same_weights(s), (d["nll"], d["tokens"]))  # a later setting with these weights reuses it
        memory = d["linear_bytes"] + base_other
        points.append({"label": label, "family": setting_family(s), "method": s["method"], "k": s.get("k"),
                       "block_size": s.get("block_size"), "memory_bytes": memory, "memory_MB": memory / 1e6,
                       "linear_bytes": d["linear_bytes"], "linear_numel": linear_numel,
                       "bits_per_weight": 8.0 * d["linear_bytes"] / linear_numel,
                       "perplexity": math.exp(d["nll"] / words),
                       "token_perplexity": math.exp(d["nll"] / max(d["tokens"], 1))})
        report(part, 1.0, "done")
    front = pareto_front([(p["memory_bytes"], p["perplexity"]) for p in points])
    for j, p in enumerate(points):
        p["pareto"] = j in front
    return {"points": points, "pareto": [points[j]["label"] for j in front], "words": words,
            "tokens": len(token_ids(tokenizer, text)) - 1, "window": window,
            "notes": _notes(settings, linear_numel, base_other, window)}


def _notes(settings: list[dict], linear_numel: int, base_other: int, window: int) -> list[str]:
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
    return notes
