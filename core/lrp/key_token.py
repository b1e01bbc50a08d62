"""Ground truth for the explanation methods: the synthetic key-token task, where one planted token alone decides
the label. Per seed a tiny classifier is trained on the task (no such model ships in assets/), ``n`` fresh sequences
are explained, and each method is scored by how often it ranks the key first; where a method misses, zeroing the
token it ranked first and the key measure which of them the model depends on.

    train_key_token_model(seed, progress=None, config=None) -> (model, info)
    evaluate_key_token(request, progress=None)              -> the result over seeds (JSON-able)
"""
from __future__ import annotations

import time

import numpy as np
import torch

from core.errors import Cancelled
from core.lrp.samples import explain_each
from core.lrp.methods import METHODS
from core.lrp.metrics import mean, median
from core.progress import Progress, report, scaled
from core.zoo.construction import constructing

KEY_TOKEN_MODEL = {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 16, "expand": 2, "steps": 150,
                   "batch_size": 32, "lr": 3e-3, "length": 16, "vocab_size": 64}
KEY_TOKEN_SEEDS = 5          # independent (model, sequences) draws behind every committed key-token number
KEY_TOKEN_VERSION = 3        # of a result's key: over seeds, with the last-token measurements of logit and margin
KEY_TOKEN_FAMILIES = ("mamba", "mamba2", "hybrid")  # the classifier's backbone: Mamba-1 (the paper's), Mamba-2, or a
# Mamba-2 + attention hybrid (Granite 4.0-H style: a Mamba-2 layer then an attention layer, each with a dense MLP)


def key_token_config(family: str = "mamba", config: dict | None = None):
    """The transformers config of the key-token classifier's backbone (:data:`KEY_TOKEN_MODEL`'s sizes)."""
    from types import SimpleNamespace

    from core.lrp.recipes.lm import backbone_config

    c = {**KEY_TOKEN_MODEL, **(config or {})}
    if family == "mamba":
        from transformers import MambaConfig

        return MambaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], state_size=c["state_size"],
                           num_hidden_layers=c["num_hidden_layers"], expand=c["expand"], use_bias=False,
                           use_conv_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    recipe = SimpleNamespace(family=family, hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
                             state_size=c["state_size"], expand=c["expand"], head_dim=16, chunk_size=c["length"],
                             attention_layers="1", attention_heads=4, kv_heads=2, experts=0, experts_per_token=0,
                             expert_size=64, mlp_size=2 * c["hidden_size"])
    return backbone_config(recipe, c["vocab_size"])


def train_key_token_model(seed: int = 0, progress: Progress | None = None,
                          config: dict | None = None, family: str = "mamba") -> tuple[torch.nn.Module, dict]:
    """A tiny bias-free :class:`MambaSequenceClassifier` trained on ``key_token_task`` (train split), seconds on CPU;
    with ``family`` (:data:`KEY_TOKEN_FAMILIES`) a :class:`SequenceClassifier` on a Mamba-2 or hybrid backbone.

    No model trained on the key-token task ships in assets/, so the ground-truth evaluation trains this
    one, seeded, inside the evaluation. ``config`` overrides entries of :data:`KEY_TOKEN_MODEL`. Returns
    ``(model in eval mode, {"accuracy" (test), config...})``.
    """
    from core.data.synthetic import key_token_task
    from core.lrp.models import MambaSequenceClassifier, SequenceClassifier

    c = {**KEY_TOKEN_MODEL, **(config or {})}
    cfg = key_token_config(family, config)
    cls = MambaSequenceClassifier if family == "mamba" else SequenceClassifier
    with constructing(seed=seed):  # its initial weights from the seeded global generator, no other build between
        model = cls(cfg, num_labels=2, head_bias=False)
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
        if step % 50 == 0:
            report(progress, step / c["steps"], f"training the key-token model: step {step}")
    model.eval()
    test = key_token_task(500, seed=seed + 2000, length=c["length"], vocab_size=c["vocab_size"])
    with torch.no_grad():
        pred = model(input_ids=torch.tensor([r.tokens for r in test])).argmax(-1)
    acc = float((pred == torch.tensor([r.label for r in test])).float().mean())
    info = {"accuracy": acc, "loss_last": float(loss.detach()), **c, "seed": seed}
    if family != "mamba":
        info["family"] = family
    return model, info


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


def _key_token_seed(seed: int, n: int, names: list[str], opts: dict, k: int, progress: Progress | None,
                    family: str = "mamba") -> dict:
    """One seed: train the classifier, explain ``n`` fresh sequences, hits and the last-token measurements."""
    from core.data.synthetic import key_token_task

    t0 = time.perf_counter()
    model, info = train_key_token_model(seed, scaled(progress, 0.0, 0.3), family=family)
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

    complete = explain_each(model, samples, names, opts, scaled(progress, 0.3, 1.0), each)
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
            "hit_rate": {m: mean(hits[m][:n_done]) for m in names},
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
           "median_abs_change_key": median(absolute(pooled("drop_key"))),
           "median_abs_change_last": median(absolute(pooled("drop_last"))),
           "median_abs_change_key_per_seed": [median(absolute(r["drop_key"])) for r in per_seed],
           "median_abs_change_last_per_seed": [median(absolute(r["drop_last"])) for r in per_seed],
           "median_abs_margin_change_key": median(absolute(pooled("margin_key"))),
           "median_abs_margin_change_last": median(absolute(pooled("margin_last"))),
           "median_abs_margin_change_key_per_seed": [median(absolute(r["margin_key"])) for r in per_seed],
           "median_abs_margin_change_last_per_seed": [median(absolute(r["margin_last"])) for r in per_seed],
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
            "last_first_share_of_misses": mean(last_first),
            "last_first_share_of_misses_per_seed": [mean(r["last_first_in_misses"]) for r in rows],
            "median_abs_change_top1_in_misses": median(top1), "median_abs_change_key_in_misses": median(key),
            "top1_moves_more_share_of_misses": mean([a > b for a, b in zip(top1, key)]),
            "median_abs_margin_change_top1_in_misses": median(top1_margin),
            "median_abs_margin_change_key_in_misses": median(key_margin),
            "top1_moves_margin_more_share_of_misses": mean([a > b for a, b in zip(top1_margin, key_margin)])}
    return out


def evaluate_key_token(request, progress: Progress | None = None) -> dict:
    """Ground-truth hit rate over ``request.seeds`` seeds (:class:`core.lrp.eval_requests.KeyTokenRequest`): how often
    each method ranks the planted key token in its top-``k``, with its spread over seeds, and the last-token observation.

    Per seed, trains :func:`train_key_token_model` (seconds) and explains the gold label of ``n`` fresh key-token
    sequences. Returns ``analysis`` ("lrp-key-token"), ``version``, ``model`` (config, mean test ``accuracy`` and
    ``accuracy_per_seed``), ``n`` (per seed), ``n_done`` (summed over seeds), ``complete``, ``k``, ``seed``,
    ``seeds`` (the list), ``n_seeds``, ``methods``, ``labels``, ``method_options``, ``hit_rate`` (method -> mean
    over seeds), ``hit_rate_std`` (ddof 1), ``hit_rate_min``, ``hit_rate_max``, ``hit_rate_per_seed``, ``chance``
    (k / length), ``last_token`` (:func:`_last_token_summary`: in each method's misses, the share whose top-1
    token is the last one and the median change of the target logit and of the margin when that token or the key
    is zeroed), ``timing``. A stop raises :class:`Cancelled` with the seeds finished so far as ``partial``.
    """
    n, names, k, seed, seeds, opts = request.n, request.methods, request.k, request.seed, request.seeds, request.options
    t0 = time.perf_counter()
    per_seed = []
    for j, s in enumerate(range(seed, seed + seeds)):
        part = scaled(progress, j / seeds, (j + 1) / seeds)  # this seed's share of the bar, its messages named
        named = None if part is None else (lambda f, msg, s=s, part=part: part(f, f"seed {s}: {msg}"))
        r = _key_token_seed(s, n, names, opts, k, named, getattr(request, "family", "mamba"))
        per_seed.append(r)
        if not r["complete"]:
            break
    c = KEY_TOKEN_MODEL
    complete = len(per_seed) == seeds and all(r["complete"] for r in per_seed)
    rates = {m: [r["hit_rate"][m] for r in per_seed] for m in names}
    spread = {m: _spread(v) for m, v in rates.items()}
    accuracy = [r["model"]["accuracy"] for r in per_seed]
    info = {k_: v for k_, v in per_seed[0]["model"].items() if k_ not in ("accuracy", "loss_last", "seed", "family")}
    family = getattr(request, "family", "mamba")
    result = {"analysis": "lrp-key-token", "version": KEY_TOKEN_VERSION,
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
              "timing": {"total_s": round(time.perf_counter() - t0, 3)}}
    if family != "mamba":  # the paper's Mamba-1 results keep their layout (and their cache keys)
        result["family"] = family
        result["model"]["name"] = f"key-token {family} classifier (trained in the evaluation, one per seed)"
    if not complete:
        raise Cancelled("Stopped.", partial=result)
    return result
