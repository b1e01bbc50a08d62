"""The long-range view of a language model: where each method's most relevant tokens for the next token lie.

    evaluate_long_range(request, progress=None) -> the result (JSON-able), for a
                                                   :class:`core.lrp.eval_requests.LongRangeRequest`

Every context is exactly ``max_tokens`` tokens (passages with fewer are skipped), so the distances are comparable;
distance 0 is the last context token, ``max_tokens - 1`` the first. A stop raises :class:`core.errors.Cancelled` with
the samples finished so far as ``partial``.
"""
from __future__ import annotations

import time

import numpy as np

from core.errors import Cancelled
from core.lrp.methods import METHODS
from core.lrp.metrics import mean, top_k_distances
from core.lrp.samples import explain_each
from core.progress import Progress


def evaluate_long_range(request, progress: Progress | None = None) -> dict:
    """The distances of each method's top-``k`` tokens from the predicted position, over the request's contexts.

    Returns
    -------
    dict with keys ``analysis`` ("lrp-long-range"), ``model``, ``fingerprint``, ``dataset``, ``split``, ``n``,
    ``n_done``, ``complete``, ``seed``, ``target``, ``k``, ``length`` (= max_tokens), ``methods``, ``labels``,
    ``method_options``, ``bins`` (histogram edges over distance, ``length // 8`` wide), ``methods_stats``
    (method -> ``distances`` (per sample, a list of k ints), ``histogram`` (counts per bin),
    ``mean_distance``, ``median_distance``, ``share_beyond_half`` (share of top-k tokens in the first half of
    the context)), ``timing`` (``total_s``, ``explain_s``: method -> mean seconds).
    """
    names, k, max_tokens = request.methods, request.k, request.max_tokens
    t0 = time.perf_counter()
    dist = {m: [] for m in names}
    secs = {m: [] for m in names}

    def each(i, method, e, seconds):
        dist[method].append([int(x) for x in top_k_distances(e.relevance, k)])
        secs[method].append(seconds)

    complete = explain_each(request.loaded.model, request.samples, names, request.options, progress, each)
    n_done = min(len(v) for v in dist.values())
    width = max(1, max_tokens // 8)
    bins = list(range(0, max_tokens + width, width))
    stats = {}
    for m in names:
        d = dist[m][:n_done]
        flat = np.array([x for row in d for x in row], dtype=float)
        stats[m] = {"distances": d, "histogram": np.histogram(flat, bins=bins)[0].tolist() if n_done else [],
                    "mean_distance": mean(flat), "median_distance": float(np.median(flat)) if n_done else None,
                    "share_beyond_half": mean(flat >= max_tokens / 2) if n_done else None}
    result = {"analysis": "lrp-long-range", "model": request.model, "fingerprint": request.loaded.fingerprint,
              "dataset": request.dataset, "split": request.split, "n": request.n, "n_done": n_done,
              "complete": complete, "seed": request.seed, "target": request.target, "k": int(k),
              "length": int(max_tokens), "methods": names, "labels": {m: METHODS[m].label for m in names},
              "method_options": request.options, "bins": bins, "methods_stats": stats,
              "timing": {"total_s": round(time.perf_counter() - t0, 3),
                         "explain_s": {m: mean(secs[m]) for m in names}}}
    if not complete:
        raise Cancelled("Stopped.", partial=result)
    return result
