"""Faithfulness and conservation of the explanation methods over a dataset split (the MambaLRP paper's perturbation
experiments): each sample is explained once per method, and the same explanation gives the flip curves (MoRF / LeRF)
and the sum of relevances (conservation).

    evaluate(request, progress=None) -> the result (JSON-able), for a :class:`core.lrp.eval_requests.EvaluationRequest`

A stop (``progress`` raising :class:`core.errors.Cancelled`) raises it again with the samples finished so far as
``partial`` (``"complete": false``).
"""
from __future__ import annotations

import time

import numpy as np

from core.errors import Cancelled
from core.lrp.adapters import adapter_for
from core.lrp.methods import METHODS
from core.lrp.metrics import concentration, flip_curves, mean, sem
from core.lrp.retention import DRAWS, MIN_DROP, RETENTION_GRID, SOFTNESS, VERSION as RETENTION_VERSION, \
    retention_scores
from core.lrp.samples import explain_each, task_kind
from core.progress import Progress


def evaluate(request, progress: Progress | None = None) -> dict:
    """Faithfulness by perturbation (MoRF / LeRF flip curves) and conservation, per method, over the request's samples.

    Returns
    -------
    dict with keys ``analysis`` ("lrp-evaluation"), ``model``, ``fingerprint``, ``kind``, ``dataset``, ``split``,
    ``n`` (requested), ``n_done`` (samples explained by every method), ``complete``, ``seed``, ``target``,
    ``steps``, ``baseline``, ``methods`` (names, in order), ``labels`` (name -> display label),
    ``method_options``, ``accuracy`` (prediction vs gold on the samples), ``mean_length`` (tokens/patches),
    ``fractions`` (K+1 nominal shares flipped, k/K), ``faithfulness`` (method -> ``mean_area_morf``,
    ``mean_area_lerf``, ``delta_af`` (mean of A_LeRF - A_MoRF, higher is better), ``delta_af_sem``,
    ``morf`` and ``lerf`` (K+1 mean target logits), ``delta`` (per sample); with ``request.retention`` also
    ``pi_soft_nc`` / ``pi_soft_ns`` with their ``_sem``, ``_per_input`` (None where the input has no normalised
    score) and ``nc_curve`` / ``ns_curve`` over the retention grid, :mod:`core.lrp.retention`; absent when
    ``faithfulness=False``), ``retention`` (the protocol's settings, ``n_defined``, and per input ``p_full`` and
    ``p_empty``: the probability of the explained output with the whole input and with every unit replaced),
    ``conservation`` (method
    -> ``sums``, ``logits`` (per sample), ``mean_abs_error``, ``mean_rel_error``, ``max_abs_error``,
    ``conservative`` (registry flag), ``share_off_explained`` and ``effective_units`` per sample and their means,
    :func:`core.lrp.metrics.concentration`), ``timing`` (``total_s``, ``explain_s``, ``flip_s`` and
    ``retention_s``: method -> mean seconds per sample).
    """
    names, samples, steps, baseline = request.methods, request.samples, request.steps, request.baseline
    faithfulness, opts = request.faithfulness, request.options
    t_start = time.perf_counter()
    model = request.loaded.model
    rows = {m: {"sums": [], "logits": [], "targets": [], "area_morf": [], "area_lerf": [], "delta": [],
                "morf": [], "lerf": [], "explain_s": [], "flip_s": [], "off": [], "effective": [], "nc": [],
                "ns": [], "retention_s": []} for m in names}
    retention = request_retention(request)
    position = adapter_for(model).explained_position  # the unit whose state the explained output is read from
    lengths, reference = [], []

    def each(i, method, e, seconds):
        row = rows[method]
        row["sums"].append(e.total)
        row["logits"].append(e.logit)
        row["targets"].append(e.target)
        row["explain_s"].append(seconds)
        off, effective = concentration(e.sequence_relevance, position(e.sequence_relevance.numel()))
        row["off"].append(off)
        row["effective"].append(effective)
        if i == len(lengths):
            lengths.append(int(e.relevance.numel()))
        inputs = {k: v for k, v in samples[i].items() if k in ("input_ids", "pixel_values")}
        if retention:
            t0 = time.perf_counter()
            r = retention_scores(model, e, seed=i, baseline=baseline, **inputs)  # seed: the input's, every method's
            row["nc"].append(r.nc)
            row["ns"].append(r.ns)
            if i == len(reference):  # q(x) and q(x0) depend on the input only
                reference.append((r.p_full, r.p_empty))
            row["retention_s"].append(time.perf_counter() - t0)
        if faithfulness:
            t0 = time.perf_counter()
            c = flip_curves(model, e, steps=steps, baseline=baseline, **inputs)
            row["flip_s"].append(time.perf_counter() - t0)
            row["area_morf"].append(c.area_morf)
            row["area_lerf"].append(c.area_lerf)
            row["delta"].append(c.delta)
            row["morf"].append(c.morf)
            row["lerf"].append(c.lerf)

    complete = explain_each(model, samples, names, opts, progress, each)
    n_done = min(len(r["sums"]) for r in rows.values())
    result = _summary(request, n_done, complete, rows, lengths)
    if "retention" in result:
        result["retention"]["p_full"] = [p for p, _ in reference[:n_done]]
        result["retention"]["p_empty"] = [q for _, q in reference[:n_done]]
    result["timing"]["total_s"] = round(time.perf_counter() - t_start, 3)
    if not complete:
        raise Cancelled("Stopped.", partial=result)
    return result


def _summary(request, n_done: int, complete: bool, rows: dict, lengths: list[int]) -> dict:
    names, steps, faithfulness = request.methods, request.steps, request.faithfulness
    first = rows[names[0]]["targets"][:n_done]
    preds_known = request.target == "predicted"
    accuracy = (float(np.mean([t == g for t, g in zip(first, request.gold)])) if preds_known and n_done else None)
    out = {
        "analysis": "lrp-evaluation", "model": request.model, "fingerprint": request.loaded.fingerprint,
        "kind": task_kind(request.loaded), "dataset": request.dataset, "split": request.split, "n": request.n,
        "n_done": n_done, "complete": complete, "seed": request.seed, "target": request.target, "steps": int(steps),
        "baseline": request.baseline, "methods": names, "labels": {m: METHODS[m].label for m in names},
        "method_options": request.options, "accuracy": accuracy,
        "mean_length": mean(lengths[:n_done]),
        "fractions": [k / steps for k in range(steps + 1)],
    }
    if faithfulness:
        faith = {}
        for m in names:
            r = rows[m]
            d = r["delta"][:n_done]
            faith[m] = {"mean_area_morf": mean(r["area_morf"][:n_done]),
                        "mean_area_lerf": mean(r["area_lerf"][:n_done]),
                        "delta_af": mean(d), "delta_af_sem": sem(d),
                        "morf": np.mean(r["morf"][:n_done], axis=0).tolist() if n_done else [],
                        "lerf": np.mean(r["lerf"][:n_done], axis=0).tolist() if n_done else [],
                        "delta": [float(x) for x in d]}
            if request_retention(request):
                faith[m].update(_retention_summary(r["nc"][:n_done], r["ns"][:n_done]))
        out["faithfulness"] = faith
        if request_retention(request):
            defined = [x is not None for x in rows[names[0]]["nc"][:n_done]]
            out["retention"] = {"version": RETENTION_VERSION, "grid": list(RETENTION_GRID), "softness": SOFTNESS,
                                "draws": DRAWS, "min_drop": MIN_DROP, "n_defined": int(sum(defined)),
                                "score": "probability of the explained class / token"}
    cons = {}
    for m in names:
        sums, logits = np.array(rows[m]["sums"][:n_done]), np.array(rows[m]["logits"][:n_done])
        err = np.abs(sums - logits)
        cons[m] = {"sums": sums.tolist(), "logits": logits.tolist(),
                   "mean_abs_error": mean(err), "max_abs_error": float(err.max()) if n_done else None,
                   "mean_rel_error": mean(err / np.maximum(np.abs(logits), 1e-12)),
                   "conservative": METHODS[m].conservative,
                   "share_off_explained": rows[m]["off"][:n_done], "effective_units": rows[m]["effective"][:n_done],
                   "mean_share_off_explained": mean(rows[m]["off"][:n_done]),
                   "mean_effective_units": mean(rows[m]["effective"][:n_done])}
    out["conservation"] = cons
    out["timing"] = {"explain_s": {m: mean(rows[m]["explain_s"]) for m in names}}
    if faithfulness:
        out["timing"]["flip_s"] = {m: mean(rows[m]["flip_s"]) for m in names}
    if request_retention(request):
        out["timing"]["retention_s"] = {m: mean(rows[m]["retention_s"]) for m in names}
    return out


def request_retention(request) -> bool:
    """Whether the request scores faithfulness at equal retention (it needs the faithfulness part)."""
    return bool(request.faithfulness and getattr(request, "retention", False))


def _retention_summary(nc: list, ns: list) -> dict:
    """pi-Soft-NC / NS of one method: per input (None where the input has no normalised score), their mean and
    standard error over the inputs that have one, and the mean curve over the retention grid."""
    out = {}
    for name, values in (("nc", nc), ("ns", ns)):
        per_input = [None if v is None else float(np.mean(v)) for v in values]
        scored = [x for x in per_input if x is not None]
        curves = [v for v in values if v is not None]
        out.update({f"pi_soft_{name}": mean(scored), f"pi_soft_{name}_sem": sem(scored),
                    f"pi_soft_{name}_per_input": per_input,
                    f"{name}_curve": np.mean(curves, axis=0).tolist() if curves else []})
    return out
