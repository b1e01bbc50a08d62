"""Dataset-level evaluation of the explanation methods, shared by the CLI, the bench and the tab.

    samples_for(model, dataset=None, split="test", n=100, seed=0, target="predicted") -> [sample dict]
    evaluate(model, dataset=None, split="test", n=100, methods=None, steps=10, ...)  -> faithfulness + conservation
    long_range_evaluation(model="mamba-lm", ...)                                    -> top-k token distances
    key_token_evaluation(...)                          -> ground-truth hit rate on the synthetic key-token task

Every runner returns a JSON-serialisable dict (keys documented on each function), reports
``progress(fraction, message)``, stops early when it raises :class:`core.errors.Cancelled` (the result then has
``"complete": false`` and is not cached) and caches complete results in :class:`core.cache.ResultsCache`,
keyed by the model fingerprint + analysis + parameters.

Each sample is explained once per method; the same explanation gives the flip curves (faithfulness) and
the sum of relevances (conservation). Samples are a seeded random subset of the split (``seed``).
The explained target is the model's prediction (``target="predicted"``, the default, as in the MambaLRP
paper's perturbation experiments) or the gold label / true next token (``target="gold"``).
"""
from __future__ import annotations

import random
import time
from typing import Callable

import numpy as np
import torch

from core.errors import BadInputError, Cancelled
from core.lrp.adapters import adapter_for
from core.lrp.methods import METHODS, explain, method_names
from core.lrp.metrics import flip_curves, top_k_distances
from core.progress import report
from core.zoo.construction import constructing

Progress = Callable[[float, str], None] | None

#: Default dataset per model kind (``card.kind``).
DEFAULT_DATASETS = {"sequence-classifier": "movie-sentiment", "image-classifier": "mnist-5k",
                    "causal-lm": "wikipedia-paragraphs", "key-token": "key-token"}
#: Method options used by the runners unless overridden (chosen for CPU speed; recorded in every result).
FAST_OPTIONS = {name: dict(m.fast_options) for name, m in METHODS.items() if m.fast_options}  # from the registry
TARGETS = ("predicted", "gold")
LONG_RANGE_TOKENS = 128


# ------------------------------------------------------------------------------------------------
# models, datasets, samples
# ------------------------------------------------------------------------------------------------
def _loaded(model_ref):
    """``(name, LoadedModel)`` from a registered name / folder (``core.lrp.inputs.load``) or a loaded model."""
    from core.lrp.inputs import load
    from core.zoo import LoadedModel

    if isinstance(model_ref, LoadedModel):
        return model_ref.card.name if getattr(model_ref.card, "name", None) else "model", model_ref
    if not isinstance(model_ref, str):
        raise BadInputError(f"model must be a registered name or a folder, got {model_ref!r}.",
                            fix="Use mamba-sentiment, vision-mamba-mnist or mamba-lm.")
    return model_ref, load(model_ref)


def _kind(loaded) -> str:
    kind = adapter_for(loaded.model).kind
    return {"classifier": "sequence-classifier", "vision": "image-classifier", "lm": "causal-lm"}[kind]


def _options(methods: list[str], options: dict | None) -> dict:
    out = {m: dict(METHODS[m].fast_options) for m in methods}
    for m, o in (options or {}).items():
        if m not in METHODS:
            raise BadInputError(f"Options given for unknown method {m!r}.", fix=f"Use: {', '.join(METHODS)}.")
        if m in out:
            out[m].update(o)
    return out


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise BadInputError(f"n must be a whole number >= 1, got {n!r}.", fix="Use e.g. -n 100.")
    return int(n)


def _records(dataset: str, split: str):
    import core.data as data

    if dataset not in data.DATASETS:
        raise BadInputError(f"Unknown dataset {dataset!r}.", fix="See python -m core data list.")
    sizes = data.split_sizes(dataset)
    if split not in sizes:
        raise BadInputError(f"{dataset} has no split {split!r}.", fix=f"Use one of: {', '.join(sizes)}.")
    return data.load(dataset, split)


def _subset(count: int, n: int, seed: int) -> list[int]:
    """A seeded random subset of ``range(count)`` of size ``min(n, count)``, in dataset order."""
    return sorted(random.Random(seed).sample(range(count), min(n, count)))


def _capped(n: int, samples: list, dataset: str, split: str, progress: Progress) -> int:
    """The number of samples that will be explained: ``n``, or fewer when the split has fewer usable samples, which is
    then said up front (a ``note:`` progress message, before any work) instead of silently (``-n 1000000`` on
    movie-sentiment used to run 1,057 samples for minutes without a word)."""
    if len(samples) < n:
        report(progress, 0.0, f"note: N = {n:,} asked, but {dataset} ({split}) has {len(samples):,} usable samples; "
                              f"explaining those {len(samples):,}")
        return len(samples)
    return n


def _max_tokens(loaded, default: int = 96) -> int:
    training = getattr(loaded.card, "training", None) or {}
    return int(training.get("max_tokens", default)) if isinstance(training, dict) else default


def _samples_and_gold(loaded, dataset: str, split: str, n: int, seed: int, target: str,
                      max_tokens: int | None = None) -> tuple[list[dict], list[int]]:
    """Sample dicts for :func:`core.lrp.explain` plus the gold label / next token of each."""
    from core.data import ImageLabel, Passage, TextLabel, TokenTask

    if target not in TARGETS:
        raise BadInputError(f"target must be one of {', '.join(TARGETS)}, got {target!r}.")
    kind = _kind(loaded)
    records = _records(dataset, split)
    if not records:
        raise BadInputError(f"{dataset} {split} is empty.")
    rtype = type(records[0])
    expect = {"sequence-classifier": (TextLabel, TokenTask), "image-classifier": (ImageLabel,),
              "causal-lm": (Passage,)}[kind]
    if rtype not in expect:
        raise BadInputError(f"{dataset} ({rtype.__name__} records) does not fit a {kind} model.",
                            fix=f"Use {DEFAULT_DATASETS[kind]} (the default for this model).")
    samples, gold = [], []
    if rtype is ImageLabel:
        for i in _subset(len(records), n, seed):
            r = records[i]
            px = torch.from_numpy(np.asarray(r.image, dtype=np.float32) / 255.0)[None, None]
            samples.append({"pixel_values": px})
            gold.append(int(r.label))
    elif rtype is TokenTask:
        for i in _subset(len(records), n, seed):
            samples.append({"input_ids": torch.tensor([list(records[i].tokens)])})
            gold.append(int(records[i].label))
    elif rtype is TextLabel:
        if loaded.tokenizer is None:
            raise BadInputError("This model has no tokenizer, so it does not take text.")
        limit = max_tokens or _max_tokens(loaded)
        for i in _subset(len(records), n, seed):
            ids = loaded.tokenizer(records[i].text)["input_ids"]
            if len(ids) > limit:  # as the sentiment recipe: cut, keeping the final EOS the head reads
                ids = ids[:limit - 1] + ids[-1:]
            samples.append({"input_ids": torch.tensor([ids])})
            gold.append(int(records[i].label))
    else:  # Passage -> next-token prediction after exactly max_tokens tokens of context
        length = max_tokens or LONG_RANGE_TOKENS
        encoded = [loaded.tokenizer(r.text)["input_ids"] for r in records]
        usable = [ids for ids in encoded if len(ids) > length]
        if not usable:
            raise BadInputError(f"No passage of {dataset} {split} has more than {length} tokens.",
                                fix="Use a shorter --max-tokens.")
        for i in _subset(len(usable), n, seed):
            samples.append({"input_ids": torch.tensor([usable[i][:length]])})
            gold.append(int(usable[i][length]))
    for s, g in zip(samples, gold):
        s["target"] = g if target == "gold" else None
    return samples, gold


def samples_for(model_ref, dataset: str | None = None, split: str = "test", n: int = 100, seed: int = 0,
                target: str = "predicted", max_tokens: int | None = None) -> list[dict]:
    """Samples for the :mod:`core.lrp` metrics: dicts of :func:`core.lrp.explain` arguments.

    Parameters
    ----------
    model_ref : registered name / folder, or a ``core.zoo.LoadedModel``.
    dataset : default per model kind (:data:`DEFAULT_DATASETS`): movie-sentiment for the sentiment
        classifier, mnist-5k for the vision model, wikipedia-paragraphs for the language model.
    n : at most this many samples, a seeded (``seed``) random subset of the split, in dataset order.
    target : ``"predicted"`` -> ``target=None`` (explain the argmax), ``"gold"`` -> the label / true next token.
    max_tokens : text: cut longer sentences (keeping the final EOS; default: the card's recipe, 96);
        language model: the exact context length (passages with fewer tokens are skipped; default 128).

    Returns
    -------
    ``[{"input_ids": (1, L) int64, "target": ...}]`` for text, ``[{"pixel_values": (1, 1, 28, 28) float32 in
    [0, 1], "target": ...}]`` for images.
    """
    _, loaded = _loaded(model_ref)
    dataset = dataset or DEFAULT_DATASETS[_kind(loaded)]
    return _samples_and_gold(loaded, dataset, split, _check_n(n), seed, target, max_tokens)[0]


# ------------------------------------------------------------------------------------------------
# caching and the per-sample loop
# ------------------------------------------------------------------------------------------------
def _cached(use_cache: bool, fingerprint: str, analysis: str, params: dict, compute: Callable[[], dict]) -> dict:
    """The committed result, the cached one, or ``compute()`` (:func:`core.runner.lookup`); a stopped computation
    returns what it finished (not cached)."""
    from core.runner import lookup

    try:
        found = lookup(fingerprint, analysis, params, compute, examples=committed_examples() if use_cache else None,
                       cache=use_cache)
    except Cancelled as stop:
        if stop.partial is None:
            raise
        return stop.partial
    return {**found.data, "cached": found.source != "computed", "source": found.source}


def _explained(model, samples: list[dict], methods: list[str], options: dict, progress: Progress,
               each: Callable) -> bool:
    """Explain every sample with every method and call ``each(i, method, explanation, seconds)``.

    Returns False when stopped early.
    """
    total = max(1, len(samples) * len(methods))
    done = 0
    try:
        for i, sample in enumerate(samples):
            for name in methods:
                report(progress, done / total, f"{name}: sample {i + 1}/{len(samples)}")  # may raise Cancelled
                t0 = time.perf_counter()
                e = explain(model, method=name, **sample, **options.get(name, {}))
                each(i, name, e, time.perf_counter() - t0)
                done += 1
        report(progress, 1.0, "done")
    except Cancelled:
        return done == total
    return True


def _mean(values) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _sem(values) -> float | None:
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


# ------------------------------------------------------------------------------------------------
# faithfulness + conservation
# ------------------------------------------------------------------------------------------------
def evaluate(model_ref, dataset: str | None = None, split: str = "test", n: int = 100, methods=None,
             steps: int = 10, baseline: str = "zero", seed: int = 0, target: str = "predicted",
             options: dict | None = None, faithfulness: bool = True, progress: Progress = None,
             cache: bool = True) -> dict:
    """Faithfulness by perturbation (MoRF / LeRF flip curves) and conservation, per method, over a split.

    Parameters
    ----------
    model_ref : registered name (``mamba-sentiment``, ``vision-mamba-mnist``, ``mamba-lm``), folder or LoadedModel.
    dataset, split, n, seed, target : which samples (see :func:`samples_for`).
    methods : names from :data:`core.lrp.METHODS` (list or comma-separated string); default all.
    steps : K, flip steps of the curves; ``baseline``: replacement embedding (``"zero"`` or ``"mean"``).
    options : per-method options over :data:`FAST_OPTIONS`, e.g. ``{"integrated_gradients": {"n_steps": 32}}``.
    faithfulness : False computes only conservation (no flip curves; faster).
    cache : read / write the results cache (complete results only).

    Returns
    -------
    dict with keys ``analysis`` ("lrp-evaluation"), ``model``, ``fingerprint``, ``kind``, ``dataset``, ``split``,
    ``n`` (requested), ``n_done`` (samples explained by every method), ``complete``, ``seed``, ``target``,
    ``steps``, ``baseline``, ``methods`` (names, in order), ``labels`` (name -> display label),
    ``method_options``, ``accuracy`` (prediction vs gold on the samples), ``mean_length`` (tokens/patches),
    ``fractions`` (K+1 nominal shares flipped, k/K), ``faithfulness`` (method -> ``mean_area_morf``,
    ``mean_area_lerf``, ``delta_af`` (mean of A_LeRF - A_MoRF, higher is better), ``delta_af_sem``,
    ``morf`` and ``lerf`` (K+1 mean target logits), ``delta`` (per sample); absent when
    ``faithfulness=False``), ``conservation`` (method -> ``sums``, ``logits`` (per sample),
    ``mean_abs_error``, ``mean_rel_error``, ``max_abs_error``, ``conservative`` (registry flag)),
    ``timing`` (``total_s``, ``explain_s`` and ``flip_s``: method -> mean seconds per sample), ``cached``.
    """
    name, loaded = _loaded(model_ref)
    kind = _kind(loaded)
    dataset = dataset or DEFAULT_DATASETS[kind]
    n = _check_n(n)
    names = method_names(methods)
    opts = _options(names, options)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise BadInputError(f"steps must be a whole number >= 1, got {steps!r}.", fix="Use e.g. --steps 10.")
    if baseline not in ("zero", "mean"):
        raise BadInputError(f"Unknown baseline {baseline!r}.", fix="Use zero or mean.")
    samples, gold = _samples_and_gold(loaded, dataset, split, n, seed, target)
    n = _capped(n, samples, dataset, split, progress)
    params = {"dataset": dataset, "split": split, "n": n, "seed": seed, "target": target, "steps": int(steps),
              "baseline": baseline, "methods": names, "options": opts, "faithfulness": bool(faithfulness)}

    def compute() -> dict:
        t_start = time.perf_counter()
        model = loaded.model
        rows = {m: {"sums": [], "logits": [], "targets": [], "area_morf": [], "area_lerf": [], "delta": [],
                    "morf": [], "lerf": [], "explain_s": [], "flip_s": []} for m in names}
        lengths = []

        def each(i, method, e, seconds):
            row = rows[method]
            row["sums"].append(e.total)
            row["logits"].append(e.logit)
            row["targets"].append(e.target)
            row["explain_s"].append(seconds)
            if i == len(lengths):
                lengths.append(int(e.relevance.numel()))
            if faithfulness:
                t0 = time.perf_counter()
                inputs = {k: v for k, v in samples[i].items() if k in ("input_ids", "pixel_values")}
                c = flip_curves(model, e, steps=steps, baseline=baseline, **inputs)
                row["flip_s"].append(time.perf_counter() - t0)
                row["area_morf"].append(c.area_morf)
                row["area_lerf"].append(c.area_lerf)
                row["delta"].append(c.delta)
                row["morf"].append(c.morf)
                row["lerf"].append(c.lerf)

        complete = _explained(model, samples, names, opts, progress, each)
        n_done = min(len(r["sums"]) for r in rows.values())
        result = _summary(name, loaded, kind, dataset, split, n, n_done, complete, seed, target, steps, baseline,
                          names, opts, rows, gold, lengths, faithfulness)
        result["timing"]["total_s"] = round(time.perf_counter() - t_start, 3)
        if not complete:
            raise Cancelled("Stopped.", partial=result)
        return result

    return _cached(cache, loaded.fingerprint, "lrp-evaluation", params, compute)


def _summary(name, loaded, kind, dataset, split, n, n_done, complete, seed, target, steps, baseline, names, opts,
             rows, gold, lengths, faithfulness) -> dict:
    first = rows[names[0]]["targets"][:n_done]
    preds_known = target == "predicted"
    accuracy = (float(np.mean([t == g for t, g in zip(first, gold)])) if preds_known and n_done else None)
    out = {
        "analysis": "lrp-evaluation", "model": name, "fingerprint": loaded.fingerprint, "kind": kind,
        "dataset": dataset, "split": split, "n": n, "n_done": n_done, "complete": complete, "seed": seed,
        "target": target, "steps": int(steps), "baseline": baseline, "methods": names,
        "labels": {m: METHODS[m].label for m in names}, "method_options": opts, "accuracy": accuracy,
        "mean_length": _mean(lengths[:n_done]),
        "fractions": [k / steps for k in range(steps + 1)],
    }
    if faithfulness:
        faith = {}
        for m in names:
            r = rows[m]
            d = r["delta"][:n_done]
            faith[m] = {"mean_area_morf": _mean(r["area_morf"][:n_done]),
                        "mean_area_lerf": _mean(r["area_lerf"][:n_done]),
                        "delta_af": _mean(d), "delta_af_sem": _sem(d),
                        "morf": np.mean(r["morf"][:n_done], axis=0).tolist() if n_done else [],
                        "lerf": np.mean(r["lerf"][:n_done], axis=0).tolist() if n_done else [],
                        "delta": [float(x) for x in d]}
        out["faithfulness"] = faith
    cons = {}
    for m in names:
        sums, logits = np.array(rows[m]["sums"][:n_done]), np.array(rows[m]["logits"][:n_done])
        err = np.abs(sums - logits)
        cons[m] = {"sums": sums.tolist(), "logits": logits.tolist(),
                   "mean_abs_error": _mean(err), "max_abs_error": float(err.max()) if n_done else None,
                   "mean_rel_error": _mean(err / np.maximum(np.abs(logits), 1e-12)),
                   "conservative": METHODS[m].conservative}
    out["conservation"] = cons
    out["timing"] = {"explain_s": {m: _mean(rows[m]["explain_s"]) for m in names}}
    if faithfulness:
        out["timing"]["flip_s"] = {m: _mean(rows[m]["flip_s"]) for m in names}
    out["cached"] = False
    return out


# ------------------------------------------------------------------------------------------------
# long range (language model next-token prediction)
# ------------------------------------------------------------------------------------------------
def long_range_evaluation(model_ref="mamba-lm", dataset: str | None = None, split: str = "test", n: int = 50,
                          methods=None, k: int = 10, max_tokens: int = LONG_RANGE_TOKENS, seed: int = 0,
                          target: str = "predicted", options: dict | None = None, progress: Progress = None,
                          cache: bool = True) -> dict:
    """Where a language model's next-token relevance lies: the distances of each method's top-``k`` tokens.

    Every context is exactly ``max_tokens`` tokens (passages with fewer are skipped), so the distances
    are comparable. Distance 0 is the last context token, ``max_tokens - 1`` the first.

    Returns
    -------
    dict with keys ``analysis`` ("lrp-long-range"), ``model``, ``fingerprint``, ``dataset``, ``split``, ``n``,
    ``n_done``, ``complete``, ``seed``, ``target``, ``k``, ``length`` (= max_tokens), ``methods``, ``labels``,
    ``method_options``, ``bins`` (histogram edges over distance, ``length // 8`` wide), ``methods_stats``
    (method -> ``distances`` (per sample, a list of k ints), ``histogram`` (counts per bin),
    ``mean_distance``, ``median_distance``, ``share_beyond_half`` (share of top-k tokens in the first half of
    the context)), ``timing`` (``total_s``, ``explain_s``: method -> mean seconds), ``cached``.
    """
    name, loaded = _loaded(model_ref)
    if _kind(loaded) != "causal-lm":
        raise BadInputError(f"long-range explains next-token prediction; {name} is not a language model.",
                            fix="Use --model mamba-lm.")
    dataset = dataset or DEFAULT_DATASETS["causal-lm"]
    n = _check_n(n)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise BadInputError(f"k must be >= 1, got {k!r}.")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 2:
        raise BadInputError(f"max_tokens must be >= 2, got {max_tokens!r}.")
    names = method_names(methods)
    opts = _options(names, options)
    samples, _ = _samples_and_gold(loaded, dataset, split, n, seed, target, max_tokens)
    n = _capped(n, samples, dataset, split, progress)
    params = {"dataset": dataset, "split": split, "n": n, "seed": seed, "target": target, "k": int(k),
              "max_tokens": int(max_tokens), "methods": names, "options": opts}

    def compute() -> dict:
        t0 = time.perf_counter()
        dist = {m: [] for m in names}
        secs = {m: [] for m in names}

        def each(i, method, e, seconds):
            dist[method].append([int(x) for x in top_k_distances(e.relevance, k)])
            secs[method].append(seconds)

        complete = _explained(loaded.model, samples, names, opts, progress, each)
        n_done = min(len(v) for v in dist.values())
        width = max(1, max_tokens // 8)
        bins = list(range(0, max_tokens + width, width))
        stats = {}
        for m in names:
            d = dist[m][:n_done]
            flat = np.array([x for row in d for x in row], dtype=float)
            stats[m] = {"distances": d, "histogram": np.histogram(flat, bins=bins)[0].tolist() if n_done else [],
                        "mean_distance": _mean(flat), "median_distance": float(np.median(flat)) if n_done else None,
                        "share_beyond_half": _mean(flat >= max_tokens / 2) if n_done else None}
        result = {"analysis": "lrp-long-range", "model": name, "fingerprint": loaded.fingerprint,
                  "dataset": dataset, "split": split, "n": n, "n_done": n_done, "complete": complete, "seed": seed,
                  "target": target, "k": int(k), "length": int(max_tokens), "methods": names,
                  "labels": {m: METHODS[m].label for m in names}, "method_options": opts, "bins": bins,
                  "methods_stats": stats,
                  "timing": {"total_s": round(time.perf_counter() - t0, 3),
                             "explain_s": {m: _mean(secs[m]) for m in names}},
                  "cached": False}
        if not complete:
            raise Cancelled("Stopped.", partial=result)
        return result

    return _cached(cache, loaded.fingerprint, "lrp-long-range", params, compute)


# ------------------------------------------------------------------------------------------------
# ground truth: the synthetic key-token task
# ------------------------------------------------------------------------------------------------
KEY_TOKEN_MODEL = {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 16, "expand": 2, "steps": 150,
                   "batch_size": 32, "lr": 3e-3, "length": 16, "vocab_size": 64}


def train_key_token_model(seed: int = 0, progress: Progress = None,
                          config: dict | None = None) -> tuple[torch.nn.Module, dict]:
    """A tiny bias-free :class:`MambaSequenceClassifier` trained on ``key_token_task`` (train split), seconds on CPU.

    No model trained on the key-token task ships in assets/, so the ground-truth evaluation trains this
    one, seeded, inside the evaluation. ``config`` overrides entries of :data:`KEY_TOKEN_MODEL`. Returns
    ``(model in eval mode, {"accuracy" (test), config...})``.
    """
    from transformers import MambaConfig

    from core.data.synthetic import key_token_task
    from core.lrp.models import MambaSequenceClassifier

    c = {**KEY_TOKEN_MODEL, **(config or {})}
    cfg = MambaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], state_size=c["state_size"],
                      num_hidden_layers=c["num_hidden_layers"], expand=c["expand"], use_bias=False,
                      use_conv_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with constructing(seed=seed):  # its initial weights from the seeded global generator, no other build between
        model = MambaSequenceClassifier(cfg, num_labels=2, head_bias=False)
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=0.0)
    model.train()
    for step in range(c["steps"]):  # fresh sequences every step: the model cannot memorise filler
        batch = key_token_task(c["batch_size"], seed=(seed + 1) * 1_000_003 + step, length=c["length"],
                               vocab_size=c["vocab_size"])
        x = torch.tensor([r.tokens for r in batch])
        y = torch.tensor([r.label for r in batch])
        loss = torch.nn.functional.cross_entropy(model(input_ids=x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress is not None and step % 50 == 0:
            progress(0.3 * step / c["steps"], f"training the key-token model: step {step}")
    model.eval()
    test = key_token_task(500, seed=seed + 2000, length=c["length"], vocab_size=c["vocab_size"])
    with torch.no_grad():
        pred = model(input_ids=torch.tensor([r.tokens for r in test])).argmax(-1)
    acc = float((pred == torch.tensor([r.label for r in test])).float().mean())
    return model, {"accuracy": acc, "loss_last": float(loss.detach()), **c, "seed": seed}


KEY_TOKEN_SEEDS = 5          # independent (model, sequences) draws behind every committed key-token number


def _zeroed_logit_drops(model, input_ids: torch.Tensor, target: int, positions: list[int]
                        ) -> tuple[list[float], list[float]]:
    """What replacing the embedding at each position by zeros (the faithfulness baseline) takes away, one value per
    position: the target logit (before - after), and the margin, target logit minus the largest other logit (before
    - after: what decides the class). input_ids: (1, T)."""
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules

    adapter = adapter_for(model)
    embeds = adapter.embed(input_ids, None)
    batch = [embeds]
    for pos in positions:
        x = embeds.clone()
        x[0, pos] = 0.0
        batch.append(x)
    with torch.no_grad(), lrp_rules(adapter.model, None):
        logits = adapter.logits(torch.cat(batch)).double()
    others = torch.cat([logits[:, :target], logits[:, target + 1:]], dim=1)
    margin = logits[:, target] - others.max(dim=1).values
    return (logits[0, target] - logits[1:, target]).tolist(), (margin[0] - margin[1:]).tolist()


def _key_token_seed(seed: int, n: int, names: list[str], opts: dict, k: int, progress: Progress) -> dict:
    """One seed: train the classifier, explain ``n`` fresh sequences, hits and the last-token measurements."""
    from core.data.synthetic import key_token_task

    t0 = time.perf_counter()
    model, info = train_key_token_model(seed, progress)
    c = KEY_TOKEN_MODEL
    records = key_token_task(n, seed=seed + 3000, length=c["length"], vocab_size=c["vocab_size"])
    samples = [{"input_ids": torch.tensor([list(r.tokens)]), "target": int(r.label)} for r in records]
    hits = {m: [] for m in names}
    first = {m: [] for m in names}          # each method's top-1 position per sample

    def each(i, method, e, seconds):
        rel = e.relevance.reshape(-1)
        top = torch.topk(rel, min(k, rel.numel())).indices.tolist()
        hits[method].append(bool(set(top) & set(records[i].key_positions)))
        first[method].append(int(torch.argmax(rel)))

    def stage(f, msg):
        if progress is not None:
            progress(0.3 + 0.7 * f, msg)

    complete = _explained(model, samples, names, opts, stage, each)
    n_done = min(len(v) for v in hits.values())
    last = c["length"] - 1
    drops, margins = [], []  # per sample: {position: target-logit / margin drop when that token is zeroed}
    for i in range(n_done):
        key = records[i].key_positions[0]
        positions = sorted({key, last, *(first[m][i] for m in names)})
        logit, margin = _zeroed_logit_drops(model, samples[i]["input_ids"], samples[i]["target"], positions)
        drops.append(dict(zip(positions, logit)))
        margins.append(dict(zip(positions, margin)))
    per_method = {}
    for m in names:
        misses = [i for i in range(n_done) if first[m][i] not in records[i].key_positions]
        per_method[m] = {
            "misses": len(misses),
            "last_first_in_misses": [first[m][i] == last for i in misses],
            "drop_top1_in_misses": [drops[i][first[m][i]] for i in misses],
            "drop_key_in_misses": [drops[i][records[i].key_positions[0]] for i in misses],
            "margin_top1_in_misses": [margins[i][first[m][i]] for i in misses],
            "margin_key_in_misses": [margins[i][records[i].key_positions[0]] for i in misses]}
    return {"seed": seed, "model": info, "n_done": n_done, "complete": complete,
            "hit_rate": {m: _mean(hits[m][:n_done]) for m in names},
            "drop_key": [d[records[i].key_positions[0]] for i, d in enumerate(drops)],
            "drop_last": [d[last] for d in drops],
            "margin_key": [d[records[i].key_positions[0]] for i, d in enumerate(margins)],
            "margin_last": [d[last] for d in margins], "methods": per_method,
            "seconds": round(time.perf_counter() - t0, 3)}


def _spread(values: list[float]) -> dict:
    """mean, std (ddof 1; 0 for one value), min, max and n of per-seed values."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if not len(v):
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "n": int(len(v))}


def _median(values) -> float | None:
    return float(np.median(values)) if len(values) else None


def _last_token_summary(per_seed: list[dict], names: list[str], last: int) -> dict:
    """The misses of each method pooled over seeds: how often the top-1 token is the last one, and how much
    zeroing the top-1 token vs the key moves the target logit and the margin over the other class (medians of
    |change|; signed drops kept)."""
    def pooled(key):
        return [x for r in per_seed for x in r[key]]

    def absolute(values):
        return [abs(x) for x in values]

    out = {"last_position": last,
           "perturbation": "the token's input embedding replaced by zeros (the faithfulness baseline 'zero'); "
                           "change = target logit before - after, margin change = (target logit - largest other "
                           "logit) before - after; medians of |change| over the pooled seeds",
           "median_abs_change_key": _median(absolute(pooled("drop_key"))),
           "median_abs_change_last": _median(absolute(pooled("drop_last"))),
           "median_abs_change_key_per_seed": [_median(absolute(r["drop_key"])) for r in per_seed],
           "median_abs_change_last_per_seed": [_median(absolute(r["drop_last"])) for r in per_seed],
           "median_abs_margin_change_key": _median(absolute(pooled("margin_key"))),
           "median_abs_margin_change_last": _median(absolute(pooled("margin_last"))),
           "median_abs_margin_change_key_per_seed": [_median(absolute(r["margin_key"])) for r in per_seed],
           "median_abs_margin_change_last_per_seed": [_median(absolute(r["margin_last"])) for r in per_seed],
           "methods": {}}
    for m in names:
        rows = [r["methods"][m] for r in per_seed]
        last_first = [x for r in rows for x in r["last_first_in_misses"]]
        top1 = absolute([x for r in rows for x in r["drop_top1_in_misses"]])
        key = absolute([x for r in rows for x in r["drop_key_in_misses"]])
        top1_margin = absolute([x for r in rows for x in r["margin_top1_in_misses"]])
        key_margin = absolute([x for r in rows for x in r["margin_key_in_misses"]])
        out["methods"][m] = {
            "misses": sum(r["misses"] for r in rows), "misses_per_seed": [r["misses"] for r in rows],
            "last_first_share_of_misses": _mean(last_first),
            "last_first_share_of_misses_per_seed": [_mean(r["last_first_in_misses"]) for r in rows],
            "median_abs_change_top1_in_misses": _median(top1), "median_abs_change_key_in_misses": _median(key),
            "top1_moves_more_share_of_misses": _mean([a > b for a, b in zip(top1, key)]),
            "median_abs_margin_change_top1_in_misses": _median(top1_margin),
            "median_abs_margin_change_key_in_misses": _median(key_margin),
            "top1_moves_margin_more_share_of_misses": _mean([a > b for a, b in zip(top1_margin, key_margin)])}
    return out


def key_token_evaluation(n: int = 100, methods=None, k: int = 1, seed: int = 0, options: dict | None = None,
                         progress: Progress = None, cache: bool = True, seeds: int = KEY_TOKEN_SEEDS) -> dict:
    """Ground-truth hit rate over ``seeds`` seeds (``seed``, ``seed + 1``, ...): how often each method ranks the
    planted key token in its top-``k``, with its spread over seeds, and the last-token observation.

    Per seed, trains :func:`train_key_token_model` (seconds) and explains the gold label of ``n`` fresh key-token
    sequences. Returns ``analysis`` ("lrp-key-token"), ``model`` (config, mean test ``accuracy`` and
    ``accuracy_per_seed``), ``n`` (per seed), ``n_done`` (summed over seeds), ``complete``, ``k``, ``seed``,
    ``seeds`` (the list), ``n_seeds``, ``methods``, ``labels``, ``method_options``, ``hit_rate`` (method -> mean
    over seeds), ``hit_rate_std`` (ddof 1), ``hit_rate_min``, ``hit_rate_max``, ``hit_rate_per_seed``, ``chance``
    (k / length), ``last_token`` (:func:`_last_token_summary`: in each method's misses, the share whose top-1
    token is the last one and the median change of the target logit and of the margin when that token or the key
    is zeroed), ``timing``,
    ``cached``. Each seed is cached on its own; the whole result is answered from the committed one
    (``assets/lrp/evaluation/key-token.json``) or the cache when the request is the same.
    """
    n = _check_n(n)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise BadInputError(f"k must be >= 1, got {k!r}.")
    if isinstance(seeds, bool) or not isinstance(seeds, (int, np.integer)) or not 1 <= seeds <= 50:
        raise BadInputError(f"seeds must be a whole number from 1 to 50, got {seeds!r}.",
                            fix="use e.g. 5 seeds (the committed result).")
    names = method_names(methods)
    opts = _options(names, options)
    params = {**_key_token_params(n, int(k), seed, names, opts), "seeds": int(seeds)}
    return _cached(cache, f"key-token-{seed}", "lrp-key-token", params,
                   lambda: _key_token_seeds(n, names, int(k), seed, opts, progress, cache, int(seeds)))


def _key_token_params(n: int, k: int, seed: int, names: list[str], opts: dict) -> dict:
    """The key of a key-token result (version 3: over seeds, with the last-token measurements of logit and margin)."""
    return {"n": n, "k": k, "seed": seed, "methods": names, "options": opts, "model": KEY_TOKEN_MODEL, "version": 3}


def _key_token_seeds(n: int, names: list[str], k: int, seed: int, opts: dict, progress: Progress, cache: bool,
                     seeds: int) -> dict:
    """:func:`key_token_evaluation` computed: one cached result per seed, then the summary over seeds."""
    t0 = time.perf_counter()
    per_seed = []
    for j, s in enumerate(range(seed, seed + seeds)):
        def sub(f, msg, j=j, s=s):
            report(progress, (j + f) / seeds, f"seed {s}: {msg}")

        def compute(s=s, sub=sub) -> dict:
            r = _key_token_seed(s, n, names, opts, k, sub)
            if not r["complete"]:
                raise Cancelled("Stopped.", partial=r)
            return r

        r = _cached(cache, "key-token-" + str(s), "lrp-key-token-seed", _key_token_params(n, k, s, names, opts),
                    compute)
        per_seed.append(r)
        if not r["complete"]:
            break
    c = KEY_TOKEN_MODEL
    complete = len(per_seed) == seeds and all(r["complete"] for r in per_seed)
    rates = {m: [r["hit_rate"][m] for r in per_seed] for m in names}
    spread = {m: _spread(v) for m, v in rates.items()}
    accuracy = [r["model"]["accuracy"] for r in per_seed]
    info = {k_: v for k_, v in per_seed[0]["model"].items() if k_ not in ("accuracy", "loss_last", "seed")}
    result = {"analysis": "lrp-key-token", "version": _key_token_params(n, k, seed, names, opts)["version"],
              "model": {"name": "key-token classifier (trained in the evaluation, one per seed)", **info,
                        "accuracy": float(np.mean(accuracy)), "accuracy_per_seed": accuracy},
              "dataset": "key-token (core.data.synthetic.key_token_task)", "n": n,
              "n_done": sum(r["n_done"] for r in per_seed), "complete": complete, "k": k, "seed": seed,
              "seeds": [r["seed"] for r in per_seed], "n_seeds": len(per_seed), "methods": names,
              "labels": {m: METHODS[m].label for m in names}, "method_options": opts,
              "hit_rate": {m: spread[m]["mean"] for m in names},
              "hit_rate_std": {m: spread[m]["std"] for m in names},
              "hit_rate_min": {m: spread[m]["min"] for m in names},
              "hit_rate_max": {m: spread[m]["max"] for m in names},
              "hit_rate_per_seed": rates, "chance": k / c["length"],
              "last_token": _last_token_summary(per_seed, names, c["length"] - 1),
              "timing": {"total_s": round(time.perf_counter() - t0, 3)}, "cached": False}
    if not complete:
        raise Cancelled("Stopped.", partial=result)
    return result


__all__ = ["DEFAULT_DATASETS", "FAST_OPTIONS", "evaluate", "key_token_evaluation", "long_range_evaluation",
           "samples_for", "train_key_token_model"]


# ------------------------------------------------------------------------------------------------
# the committed results (assets/lrp/evaluation/, written by ``python -m core lrp precompute-evaluation``)
# ------------------------------------------------------------------------------------------------
def precomputed(folder=None) -> dict[str, dict]:
    """The committed results by item (``mnist``, ``sentiment``, ``lm``, ``key-token``); missing files are skipped.

    A faithfulness result is also listed under its model's name (``vision-mamba-mnist`` ...), so a caller can look
    it up by model.
    """
    import json
    from pathlib import Path

    from core.paths import ASSETS_DIR

    folder = Path(folder) if folder is not None else ASSETS_DIR / "lrp" / "evaluation"
    try:
        index = json.loads((folder / "index.json").read_text())["items"]
    except (OSError, ValueError, KeyError):
        return {}
    out = {}
    for item, name in index.items():
        try:
            res = {**json.loads((folder / name).read_text()), "source": "precomputed"}
        except (OSError, ValueError):
            continue
        out[item] = res
        if res.get("analysis") == "lrp-evaluation":
            out[res["model"]] = res
    return out


def committed_examples(folder=None):
    """The committed results as a :class:`core.runner.ExampleStore`, keyed like :func:`evaluate`,
    :func:`long_range_evaluation` and :func:`key_token_evaluation` key their results, so an identical request is
    answered from them at once."""
    from core.runner import ExampleStore

    entries = []
    for res in {id(r): r for r in precomputed(folder).values()}.values():
        common = {"n": res["n"], "seed": res["seed"], "methods": res["methods"], "options": res["method_options"]}
        if res["analysis"] == "lrp-evaluation":
            params = {**common, "dataset": res["dataset"], "split": res["split"], "target": res["target"],
                      "steps": res["steps"], "baseline": res["baseline"], "faithfulness": "faithfulness" in res}
        elif res["analysis"] == "lrp-long-range":
            params = {**common, "dataset": res["dataset"], "split": res["split"], "target": res["target"],
                      "k": res["k"], "max_tokens": res["length"]}
        elif "n_seeds" in res:  # versions 2 and 3: over seeds (a result names its version from 3 on)
            params = {**_key_token_params(res["n"], res["k"], res["seed"], res["methods"], res["method_options"]),
                      "version": res.get("version", 2), "seeds": res["n_seeds"]}
        else:
            params = {**common, "k": res["k"], "model": KEY_TOKEN_MODEL}
        fingerprint = res.get("fingerprint") or f"key-token-{res['seed']}"
        entries.append({"model": res.get("model"), "fingerprint": fingerprint, "analysis": res["analysis"],
                        "params": params, "data": {k: v for k, v in res.items() if k != "source"}})
    return ExampleStore.from_entries(entries)

