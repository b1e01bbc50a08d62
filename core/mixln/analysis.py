"""Diagnostics of a committed run or of any transformers causal LM, computed as JSON-able results.

A *subject* is a committed run name / run folder (a Mix-LN model with its own tokenizer and held-out windows) or a
model reference for :func:`core.zoo.load_model` (e.g. ``smollm2-135m``), evaluated on held-out Wikipedia paragraphs
tokenized with its own tokenizer. The service (:mod:`core.mixln.service`) looks each result up under the weights'
fingerprint (:func:`fingerprint_of`: a run's precomputed ``diagnostics.json`` or the results cache answer at once)
and calls these only to compute one.

- :func:`fingerprint_of`  a subject's fingerprint, without loading its weights
- :func:`load_subject`    its model and held-out windows
- :func:`angular_data`    the paper's (first layer l, block size n) heatmap of d(h_l, h_{l+n}), raw and scaled
- :func:`removal_data`    eval loss / perplexity increase when each layer is skipped
- :func:`gradnorm_data`   per-layer gradient norms of one batch (a zoo model or a run's current weights)
- :func:`run_gradnorms`   a run's logged per-layer gradient norms: at initialisation and at the end of training
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import BadInputError
from core.mixln.data import pack
from core.mixln.diagnostics import (angular_distance_heatmap, angular_profile, find_decoder_layers,
                                    layer_gradient_norms, layer_removal, standard_error)
from core.mixln.folders import fingerprint_of, load_run, run_model, sample_windows  # noqa: F401
from core.mixln.requests import TEXT_CORPUS
from core.progress import Progress, report, scaled
from core.zoo.views import private_view


@dataclass
class Subject:
    name: str
    model: torch.nn.Module
    tokens: torch.Tensor            # (N, T) held-out windows


def zoo_tokens(tokenizer, samples: int, seq_len: int, split: str = "validation") -> torch.Tensor:
    """(samples, seq_len) windows of held-out Wikipedia paragraphs in ``tokenizer``'s ids (packed)."""
    from core.data import load
    if tokenizer is None:
        raise BadInputError("the model has no tokenizer.", fix="use a model folder that includes its tokenizer.")
    texts = [r.text for r in load(TEXT_CORPUS, split)]
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) >= samples * seq_len:
            break
    if len(ids) < seq_len:
        raise BadInputError("the evaluation corpus is empty.", fix="run `python -m core data prepare`.")
    return pack(torch.tensor(ids), seq_len)[:samples]


def load_subject(ref: str, run: Path | None, samples: int = 64, seq_len: int = 64) -> Subject:
    """The model of ``ref`` (``run``: its run folder, None for a zoo model) and ``samples`` held-out windows."""
    if run is not None:
        if not any(run.glob("*.safetensors")):
            raise BadInputError(f"the run {ref} was stored without its weights (only seed 0 of each run set keeps "
                                "them), and this diagnostic was not precomputed for it.",
                                fix="use the run's default diagnostics, seed 0, or retrain it with `mixln train`.")
        return Subject(run.name, run_model(ref), sample_windows(ref, n=samples, seq_len=seq_len))
    from core.zoo import load_model, require_kind
    lm = require_kind(load_model(ref), ("causal-lm",), "Mix-LN's layer diagnostics")
    model = lm.model
    if not getattr(getattr(model, "config", None), "is_decoder", True) and not hasattr(model, "lm_head"):
        raise BadInputError(f"{ref} is not a causal language model.", fix="use a causal LM such as smollm2-135m.")
    find_decoder_layers(model)
    # the zoo's model is shared with other requests: the diagnostics set flags (eval mode) on a private view of it
    return Subject(str(ref), private_view(model), zoo_tokens(lm.tokenizer, samples, seq_len))


def _clean(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _grid(t: torch.Tensor) -> list[list[float | None]]:
    return [[_clean(v) for v in row] for row in t.tolist()]


def _short(t: torch.Tensor | None) -> list[list[float | None]] | None:
    """A (windows, layers) grid to 5 significant digits (what contrasts between layers are computed from, paired
    per window: :mod:`core.mixln.reproduces`), small enough to keep in a run's diagnostics.json."""
    if t is None:
        return None
    return [[None if not math.isfinite(v) else float(f"{v:.5g}") for v in row] for row in t.tolist()]


def angular_data(subject: Subject, params: dict, progress: Progress | None = None) -> dict:
    """{subject, block_sizes, first_layers, raw, scaled, num_layers, **params}; ``params["position"]``: last | mean."""
    report(progress, 0.4, "forward pass with hidden states")
    d, per_window = angular_profile(subject.model, subject.tokens, -1 if params["position"] == "last" else None,
                                    batch_size=4)
    hm = angular_distance_heatmap(d)
    return {"subject": subject.name, "block_sizes": hm.block_sizes, "first_layers": hm.first_layers,
            "raw": _grid(hm.raw), "scaled": _grid(hm.scaled), "num_layers": len(hm.first_layers),
            "adjacent_se": [_clean(x) for x in standard_error(per_window).tolist()],
            "adjacent_per_window": _short(per_window), "windows": int(per_window.shape[0]), **params}


def removal_data(subject: Subject, params: dict, progress: Progress | None = None) -> dict:
    """{subject, baseline_loss, baseline_perplexity, layers, loss_increase, perplexity_increase, ..., **params}."""
    r = layer_removal(subject.model, subject.tokens, batch_size=4, progress=scaled(progress, 0.1, 1.0),
                      per_sample=True)
    return {"subject": subject.name, "baseline_loss": r.baseline_loss,
            "baseline_perplexity": _clean(r.baseline_perplexity), "layers": list(range(len(r.losses))),
            "losses": [_clean(x) for x in r.losses], "loss_increase": [_clean(x) for x in r.loss_increase],
            "perplexities": [_clean(x) for x in r.perplexities],
            "perplexity_increase": [_clean(x) for x in r.perplexity_increase],
            "loss_increase_se": [_clean(x) for x in r.loss_increase_se],
            "loss_increase_per_window": _short(r.increase_per_window), "windows": int(subject.tokens.shape[0]),
            **params}


def gradnorm_data(subject: Subject, params: dict) -> dict:
    """Per-layer gradient norms of the next-token loss on held-out windows, for the model as it is now."""
    g = layer_gradient_norms(subject.model, subject.tokens)
    return {"subject": subject.name, "layers": list(range(len(g.param))), "param": [_clean(x) for x in g.param],
            "input": [_clean(x) for x in g.input], "loss": _clean(g.loss), **params}


def run_gradnorms(ref: str, kind: str = "param") -> dict:
    """A run's logged per-layer gradient norms (``kind``: param | input): {run, label, norm, init, final, steps,
    per_step}."""
    run = load_run(ref)
    logs = run.history.get("grad_norms", [])
    if not logs:
        raise BadInputError(f"run {run.name} logged no gradient norms.", fix="train it with --grad-every > 0.")
    return {"run": run.name, "label": run.label, "norm": run.placement, "kind": kind,
            "layers": list(range(len(logs[0][kind]))), "init_step": logs[0]["step"], "init": logs[0][kind],
            "final_step": logs[-1]["step"], "final": logs[-1][kind],
            "steps": [g["step"] for g in logs], "per_step": [g[kind] for g in logs]}
