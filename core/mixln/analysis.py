"""Diagnostics of a committed run or of any transformers causal LM, as JSON-able results (CLI and tab).

A *subject* is a committed run name / run folder (a Mix-LN model with its own tokenizer and held-out
windows) or a model reference for :func:`core.zoo.load_model` (e.g. ``smollm2-135m``), evaluated on
held-out Wikipedia paragraphs tokenized with its own tokenizer. Results go through :func:`core.runner.lookup`
under the weights' fingerprint: a run's precomputed diagnostics (``<run>/diagnostics.json``, an example store) or
the results cache answer at once. This module reads runs (:mod:`core.mixln.runs`); runs never import it.

- :func:`angular_result`   the paper's (first layer l, block size n) heatmap of d(h_l, h_{l+n}), raw and scaled
- :func:`removal_result`   eval loss / perplexity increase when each layer is skipped
- :func:`gradnorm_result`  per-layer gradient norms of one batch (a zoo model or a run's current weights)
- :func:`run_gradnorms`    a run's logged per-layer gradient norms: at initialisation and at the end of training
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from core.errors import BadInputError
from core.mixln import runs as _runs
from core.mixln.data import pack
from core.progress import item_progress, report
from core.runner import has_fields
from core.zoo.views import private_view
from core.mixln.diagnostics import (angular_distance_heatmap, find_decoder_layers, layer_gradient_norms,
                                    layer_removal, mean_angular_distance)

TEXT_CORPUS = "wikipedia-paragraphs"


@dataclass
class Subject:
    name: str
    model: torch.nn.Module
    tokens: torch.Tensor            # (N, T) held-out windows
    fingerprint: str                # of the weights (a run's model.safetensors, or the zoo's)
    folder: object = None           # the run folder (runs only): its diagnostics.json holds precomputed results


def is_run(ref: str) -> bool:
    try:
        _runs.resolve_run(ref)
        return True
    except BadInputError:
        return False


def _check_sizes(samples: int, seq_len: int) -> None:
    if not 1 <= samples <= 256 or not 4 <= seq_len <= 2048:
        raise BadInputError(f"samples = {samples}, seq_len = {seq_len} are out of range.",
                            fix="use 1-256 samples of 4-2048 tokens.")


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


def load_subject(ref: str, samples: int = 8, seq_len: int = 64) -> Subject:
    _check_sizes(samples, seq_len)
    if not ref:
        raise BadInputError("no model or run chosen.", fix="pick a committed run or a model.")
    if is_run(ref):
        folder = _runs.resolve_run(ref)
        if not any(folder.glob("*.safetensors")):
            raise BadInputError(f"the run {ref} was stored without its weights (only seed 0 of each run set keeps "
                                "them), and this diagnostic was not precomputed for it.",
                                fix="use the run's default diagnostics, seed 0, or retrain it with `mixln train`.")
        return Subject(folder.name, _runs.run_model(ref), _runs.sample_windows(ref, n=samples, seq_len=seq_len),
                       run_fingerprint(folder), folder)
    from core.zoo import load_model, require_kind
    lm = require_kind(load_model(ref), ("causal-lm",), "Mix-LN's layer diagnostics")
    model = lm.model
    if not getattr(getattr(model, "config", None), "is_decoder", True) and not hasattr(model, "lm_head"):
        raise BadInputError(f"{ref} is not a causal language model.", fix="use a causal LM such as smollm2-135m.")
    find_decoder_layers(model)
    # the zoo's model is shared with other requests: the diagnostics set flags (eval mode) on a private view of it
    return Subject(str(ref), private_view(model), zoo_tokens(lm.tokenizer, samples, seq_len), lm.fingerprint)


def run_fingerprint(folder) -> str:
    """The fingerprint of a run's weights (its ``model.safetensors``), as the zoo computes one; for a run stored
    without weights, the one its run.json recorded (:func:`core.mixln.runs.weights_fingerprint`)."""
    return _runs.weights_fingerprint(folder)


def _cached(subject: Subject, analysis: str, params: dict, compute: Callable[[], dict]) -> tuple[dict, bool]:
    from core.runner import lookup

    found = lookup(subject.fingerprint, analysis, params, compute, examples=run_examples(subject.folder))
    return found.data, found.source != "computed"


DIAGNOSTICS_FILE = "diagnostics.json"


def run_examples(folder):
    """A run's precomputed diagnostics as an example store (None for a model that is not a run). Files written before
    the store format (a dict of results by ``analysis?params``) are read too."""
    from core.runner import ExampleStore

    if folder is None:
        return None
    path = Path(folder) / DIAGNOSTICS_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if doc.get("format") == ExampleStore.FORMAT:
        return ExampleStore(path)
    fp = run_fingerprint(folder)
    return ExampleStore.from_entries([{"model": Path(folder).name, "fingerprint": fp, "analysis": key.split("?")[0],
                                       "params": _params_of(res), "data": res} for key, res in doc.items()])


def _params_of(res: dict) -> dict:
    return {k: res[k] for k in ("samples", "seq_len", "position", "corpus") if k in res}


def write_run_diagnostics(ref: str) -> Path:
    """Precompute the default angular-distance and layer-removal results of a run into its folder, so the tab
    shows them at once (``python -m core mixln reproduce`` calls this after training each run)."""
    from core.runner import ExampleStore

    folder = _runs.resolve_run(ref)
    path = folder / DIAGNOSTICS_FILE
    path.unlink(missing_ok=True)
    entries = []
    for fn, name in ((angular_result, "mixln/angular"), (removal_result, "mixln/removal")):
        res = fn(str(folder))
        res.pop("cached", None)
        res.pop("source", None)
        entries.append({"model": _run_name(folder), "fingerprint": run_fingerprint(folder), "analysis": name,
                        "params": _params_of(res), "data": res})
    return ExampleStore.write(path, entries)


def _run_name(folder: Path) -> str:
    """A run folder's name under the committed runs (``pre-ln/seed-1``), else its own name."""
    try:
        return folder.resolve().relative_to(_runs.ASSETS.resolve()).as_posix()
    except ValueError:
        return folder.name


def _clean(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _grid(t: torch.Tensor) -> list[list[float | None]]:
    return [[_clean(v) for v in row] for row in t.tolist()]


VIEW_FIELDS = {"mixln/angular": has_fields("subject", "block_sizes", "first_layers", "raw", "scaled", "num_layers"),
               "mixln/removal": has_fields("subject", "baseline_loss", "baseline_perplexity", "layers", "losses",
                                        "loss_increase", "perplexities", "perplexity_increase"),
               "mixln/gradnorms": has_fields("subject", "layers", "param", "input", "loss")}


def _lookup(ref: str, samples: int, seq_len: int, analysis: str, params: dict,
            compute: Callable[[Subject], dict]) -> dict:
    """The result for a run or a zoo model, found by the weights' fingerprint without loading them; the model and its
    held-out windows are loaded only to compute."""
    from core.runner import lookup

    _check_sizes(samples, seq_len)
    if not ref:
        raise BadInputError("no model or run chosen.", fix="pick a committed run or a model.")
    if is_run(ref):
        folder = _runs.resolve_run(ref)
        fp = run_fingerprint(folder)
    else:
        from core.zoo import fingerprint
        folder, fp = None, fingerprint(ref)
    found = lookup(fp, analysis, params, lambda: compute(load_subject(ref, samples, seq_len)),
                   examples=run_examples(folder), check=VIEW_FIELDS.get(analysis))
    return {**found.data, "cached": found.source != "computed", "source": found.source}


def angular_result(ref: str, samples: int = 8, seq_len: int = 64, position: str = "last",
                   progress: Callable[[float, str], None] | None = None) -> dict:
    """{subject, block_sizes, first_layers, raw, scaled, num_layers, cached}; position: last | mean."""
    if position not in ("last", "mean"):
        raise BadInputError(f"unknown position {position!r}.", fix="use 'last' (last token) or 'mean' (all tokens).")
    params = {"samples": samples, "seq_len": seq_len, "position": position, "corpus": TEXT_CORPUS}

    def compute(subject: Subject) -> dict:
        report(progress, 0.4, "forward pass with hidden states")
        d = mean_angular_distance(subject.model, subject.tokens, -1 if position == "last" else None, batch_size=4)
        hm = angular_distance_heatmap(d)
        return {"subject": subject.name, "block_sizes": hm.block_sizes, "first_layers": hm.first_layers,
                "raw": _grid(hm.raw), "scaled": _grid(hm.scaled), "num_layers": len(hm.first_layers), **params}

    report(progress, 0.1, f"loading {ref}")
    return _lookup(ref, samples, seq_len, "mixln/angular", params, compute)


def removal_result(ref: str, samples: int = 8, seq_len: int = 64,
                   progress: Callable[[float, str], None] | None = None) -> dict:
    """{subject, baseline_loss, baseline_perplexity, layers, loss_increase, perplexity_increase, ...}."""
    params = {"samples": samples, "seq_len": seq_len, "corpus": TEXT_CORPUS}

    def compute(subject: Subject) -> dict:
        step = item_progress(progress, "skipped layer", 0.1, 1.0)
        r = layer_removal(subject.model, subject.tokens, batch_size=4, progress=step)
        return {"subject": subject.name, "baseline_loss": r.baseline_loss,
                "baseline_perplexity": _clean(r.baseline_perplexity), "layers": list(range(len(r.losses))),
                "losses": [_clean(x) for x in r.losses], "loss_increase": [_clean(x) for x in r.loss_increase],
                "perplexities": [_clean(x) for x in r.perplexities],
                "perplexity_increase": [_clean(x) for x in r.perplexity_increase], **params}

    report(progress, 0.05, f"loading {ref}")
    return _lookup(ref, samples, seq_len, "mixln/removal", params, compute)


def gradnorm_result(ref: str, samples: int = 4, seq_len: int = 64) -> dict:
    """Per-layer gradient norms of the next-token loss on held-out windows, for the model as it is now."""
    params = {"samples": samples, "seq_len": seq_len, "corpus": TEXT_CORPUS}

    def compute(subject: Subject) -> dict:
        g = layer_gradient_norms(subject.model, subject.tokens)
        return {"subject": subject.name, "layers": list(range(len(g.param))), "param": [_clean(x) for x in g.param],
                "input": [_clean(x) for x in g.input], "loss": _clean(g.loss), **params}

    return _lookup(ref, samples, seq_len, "mixln/gradnorms", params, compute)


def run_gradnorms(ref: str, kind: str = "param") -> dict:
    """A run's logged per-layer gradient norms: {run, label, norm, init, final, steps, per_step}."""
    if kind not in ("param", "input"):
        raise BadInputError(f"unknown gradient norm {kind!r}.", fix="use 'param' or 'input'.")
    run = _runs.load_run(ref)
    logs = run.history.get("grad_norms", [])
    if not logs:
        raise BadInputError(f"run {run.name} logged no gradient norms.", fix="train it with --grad-every > 0.")
    return {"run": run.name, "label": run.label, "norm": run.meta["norm"], "kind": kind,
            "layers": list(range(len(logs[0][kind]))), "init_step": logs[0]["step"], "init": logs[0][kind],
            "final_step": logs[-1]["step"], "final": logs[-1][kind],
            "steps": [g["step"] for g in logs], "per_step": [g[kind] for g in logs]}
