"""Ground truth on a language model: subject-verb agreement (after Arras et al., arXiv 2502.15886).

The model reads a sentence prefix that ends where its verb comes ("The author next to the senators") and the
explained output is the logit of the agreeing verb form (" is"). Only the subject noun decides the verb's number;
an attractor of the other number sits between them. An explanation is scored by where it ranks the subject:

- rank of the subject: the best (lowest) 1-based rank of the subject noun's tokens in the method's relevance
  (descending; ties in position order), over every input position;
- MRR: the mean of 1 / rank;
- pointing accuracy: the share of sentences whose most relevant token is a subject token;
- subject above the attractor: the share where the subject's best rank beats the attractor's.

Only the sentences where the model itself prefers the agreeing form (its logit above the other form's) are
explained: elsewhere the model does not use the subject and there is no ground truth to find. The sentences are
generated offline from templates (:func:`core.data.synthetic.agreement_sentences`); the model's agreement accuracy
over all of them is reported beside the scores. Chance is exact per sentence (a uniformly random ranking).

Nothing here knows a model family: any model :func:`core.lrp.explain` accepts, with a fast tokenizer (character
offsets), is evaluated the same way; a method that does not apply to a model (it raises
:class:`core.errors.BadInputError`) is reported as such.

    evaluate_agreement(request, progress=None) -> the result (JSON-able)
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from core.errors import BadInputError, Cancelled
from core.lrp.adapters import adapter_for
from core.lrp.context import lrp_rules
from core.lrp.methods import METHODS, explain
from core.lrp.metrics import mean, sem
from core.progress import Progress, report

AGREEMENT_VERSION = 1  # of a result's key
MIN_AGREEMENT = 0.75  # below it the model is said to barely agree (its scores are not a ground truth of the methods)


def caveat(res: dict) -> str | None:
    """What a model that barely agrees does to the scores (the tab's status and the docs' block say it), or None."""
    acc, plural = res.get("agreement_accuracy"), res.get("agreeing_plural_share")
    if acc is None or acc >= MIN_AGREEMENT:
        return None
    lean = (f" ({100 * (1 - plural):.0f}% of the sentences it gets right have a singular subject, "
            f"{100 * plural:.0f}% a plural one)" if plural is not None else "")
    return (f"The model barely agrees ({100 * acc:.1f}%, below {100 * MIN_AGREEMENT:.0f}%): where it does not use the "
            "subject there is no ground truth, and its right answers may rest on a preference for one verb form "
            f"rather than on the subject{lean}; the methods' scores on it do not rank them as explainers.")


def subject_rank(relevance: torch.Tensor, positions) -> int:
    """The best 1-based rank among ``positions`` when ``relevance: (L,)`` is sorted descending (ties: the earlier
    position first)."""
    order = torch.argsort(relevance.reshape(-1).double(), descending=True, stable=True).tolist()
    wanted = set(int(p) for p in positions)
    return next(i + 1 for i, p in enumerate(order) if p in wanted)


def chance(length: int, k: int) -> tuple[float, float]:
    """``(expected 1 / best rank, probability of the top token)`` of ``k`` ground-truth positions among ``length``
    under a uniformly random ranking: P(best rank = r) = C(length - r, k - 1) / C(length, k)."""
    total = math.comb(length, k)
    mrr = sum(math.comb(length - r, k - 1) / total / r for r in range(1, length - k + 2))
    return mrr, k / length


def _spans(tokenizer, text: str, spans) -> tuple[list[int], list[list[int]]]:
    """Token ids of ``text`` and, per character span, the positions of the tokens that overlap it."""
    try:
        enc = tokenizer(text, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError) as e:
        raise BadInputError(f"The agreement ground truth needs a fast tokenizer with character offsets ({e}).") from None
    offsets = enc["offset_mapping"]
    return list(enc["input_ids"]), [[i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
                                    for start, end in spans]


def _single_token(tokenizer, form: str) -> int | None:
    ids = tokenizer(form, add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 else None


def prepare(loaded, records) -> tuple[list[dict], dict]:
    """The explainable sentences of ``records`` for this model: tokenized, with subject and attractor positions, the
    verb ids and whether the model prefers the agreeing form. Returns ``(sentences, counts)``; sentences whose verb
    forms are not single tokens of this tokenizer are dropped (counted)."""
    tokenizer = loaded.tokenizer
    if tokenizer is None:
        raise BadInputError("This model has no tokenizer, so it does not take text.")
    adapter = adapter_for(loaded.model)
    if adapter.kind != "lm":
        raise BadInputError("The agreement ground truth explains a language model's next token.",
                            fix="Use a causal language model, e.g. --model mamba-lm.")
    out, dropped = [], 0
    for r in records:
        verb, wrong = _single_token(tokenizer, r.verb), _single_token(tokenizer, r.wrong)
        if verb is None or wrong is None:
            dropped += 1
            continue
        ids, (subject, attractor) = _spans(tokenizer, r.text, [r.subject, r.attractor])
        if not subject or not attractor:
            dropped += 1
            continue
        input_ids = torch.tensor([ids])
        with torch.no_grad(), lrp_rules(adapter.model, None):
            logits = adapter.logits(adapter.embed(input_ids, None))[0]
        out.append({"record": r, "input_ids": input_ids, "subject": subject, "attractor": attractor,
                    "verb": verb, "wrong": wrong, "margin": float(logits[verb] - logits[wrong])})
    if not out:
        raise BadInputError("No sentence is explainable with this tokenizer (the verb forms are not single tokens).")
    return out, {"generated": len(records), "dropped_tokenizer": dropped}


def _scores(sentences: list[dict], relevances: list[torch.Tensor]) -> dict:
    ranks = [subject_rank(r, s["subject"]) for s, r in zip(sentences, relevances)]
    attractor = [subject_rank(r, s["attractor"]) for s, r in zip(sentences, relevances)]
    rr = [1.0 / x for x in ranks]
    hits = [float(x == 1) for x in ranks]
    above = [float(a < b) for a, b in zip(ranks, attractor)]
    return {"rank": ranks, "reciprocal_rank": rr, "pointing": hits, "attractor_rank": attractor,
            "subject_above_attractor": above, "mrr": mean(rr), "mrr_sem": sem(rr), "mean_rank": mean(ranks),
            "mean_rank_sem": sem(ranks), "median_rank": float(np.median(ranks)) if ranks else None,
            "pointing_accuracy": mean(hits), "pointing_accuracy_sem": sem(hits),
            "subject_above_attractor_share": mean(above)}


def evaluate_agreement(request, progress: Progress | None = None) -> dict:
    """Subject-verb agreement ground truth for :class:`core.lrp.eval_requests.AgreementRequest`: ``n`` generated
    sentences, the model's agreement on them, and per method (on the sentences the model gets right) the subject's rank, MRR,
    pointing accuracy and the share where the subject outranks the attractor, per sentence and summarised; exact
    chance beside them. A stop raises :class:`Cancelled` with the sentences finished so far as ``partial``."""
    from core.data.synthetic import agreement_sentences

    t0 = time.perf_counter()
    loaded = request.loaded
    records = agreement_sentences(request.n, request.seed)
    prepared, counts = prepare(loaded, records)
    agreeing = [s for s in prepared if s["margin"] > 0]
    names, opts = request.methods, request.options
    relevances: dict[str, list] = {m: [] for m in names}
    refused: dict[str, str] = {}
    seconds: dict[str, list] = {m: [] for m in names}
    total = max(1, len(agreeing) * len(names))
    complete = True
    try:
        for i, s in enumerate(agreeing):
            for j, m in enumerate(names):
                report(progress, (i * len(names) + j) / total, f"{m}: sentence {i + 1}/{len(agreeing)}")
                if m in refused:
                    continue
                t1 = time.perf_counter()
                try:
                    e = explain(loaded.model, input_ids=s["input_ids"], target=s["verb"], method=m, **opts.get(m, {}))
                except BadInputError as err:  # this method does not apply to this model: said, not hidden
                    refused[m] = str(err)
                    relevances[m] = []
                    continue
                relevances[m].append(e.sequence_relevance)
                seconds[m].append(time.perf_counter() - t1)
        report(progress, 1.0, "done")
    except Cancelled:
        complete = False
    scored = [m for m in names if m not in refused]
    n_done = min((len(relevances[m]) for m in scored), default=0)
    done = agreeing[:n_done]
    methods = {m: _scores(done, relevances[m][:n_done]) for m in scored}
    chances = [chance(s["input_ids"].shape[1], len(s["subject"])) for s in done]
    by = {}
    for s in prepared:
        r = s["record"]
        by.setdefault(f"{r.template} {'plural' if r.plural else 'singular'}", []).append(float(s["margin"] > 0))
    result = {
        "analysis": "lrp-agreement", "version": AGREEMENT_VERSION, "model": request.model,
        "fingerprint": request.loaded.fingerprint, "dataset": "subject-verb agreement (core.data.synthetic."
        "agreement_sentences)", "n": request.n, "seed": request.seed, "n_explainable": len(prepared),
        "n_agreeing": len(agreeing), "n_done": n_done, "complete": complete,
        **counts, "agreement_accuracy": mean([float(s["margin"] > 0) for s in prepared]),
        "agreement_by_template": {k: {"accuracy": mean(v), "n": len(v)} for k, v in sorted(by.items())},
        "agreeing_plural_share": mean([float(s["record"].plural) for s in done]),
        "methods": names, "labels": {m: METHODS[m].label for m in names}, "method_options": opts,
        "refused": refused, "scores": methods,
        "chance": {"mrr": mean([c[0] for c in chances]), "pointing_accuracy": mean([c[1] for c in chances])},
        "mean_length": mean([s["input_ids"].shape[1] for s in done]),
        "sentences": [{"text": s["record"].text, "template": s["record"].template, "plural": s["record"].plural,
                       "subject_positions": s["subject"], "attractor_positions": s["attractor"],
                       "margin": s["margin"]} for s in done],
        "timing": {"explain_s": {m: mean(seconds[m][:n_done]) for m in scored},
                   "total_s": round(time.perf_counter() - t0, 3)},
    }
    if not complete:
        raise Cancelled("Stopped.", partial=result)
    return result
