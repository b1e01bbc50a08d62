"""MathNeuro analyses by dataset name, as the tab and the CLI run them: load the model and records, identify,
intervene, evaluate, and return plain data. Results are cached (``core.cache.ResultsCache``) keyed by the model
fingerprint + analysis + parameters; the defaults for the embedded model are also committed in
``assets/mathneuro/examples.json`` so the tab shows them at once.

Datasets: any ``core.data`` dataset with math problems (``.solution``), multiple-choice records or texts, plus
``review-sentiment`` (the embedded model's synthetic non-math task, :mod:`core.mathneuro.recipe`).
Metrics: ``accuracy`` (math: exact final number; multiple choice: best option) or ``loss`` (teacher-forced
nats per token: worked solution, correct option or text); ``auto`` picks accuracy for the tasks the embedded
model was trained on and loss elsewhere (SmolLM2's accuracy is at the floor on GSM-style problems).

Every function takes ``progress(done, total, stage)`` (may raise to cancel); an intervened model is always
restored exactly, also after an error or a cancel.
"""
from __future__ import annotations

import json
import math as _math
import time
from collections.abc import Callable
from pathlib import Path

from core.cache import CacheEntry, ResultsCache
from core.errors import BadInputError
from core.mathneuro import analysis as A
from core.mathneuro.evaluation import math_accuracy, multiple_choice_accuracy, teacher_forced_loss, token_inputs
from core.mathneuro.interventions import intervened, save_masks
from core.mathneuro.methods import METHODS, Statistics, get_method, select
from core.mathneuro.recipe import DEMO_NAME, SENTIMENT, sentiment_split
from core.mathneuro.scoring import ColumnNorms, check_factor, check_proportion
from core.paths import ASSETS_DIR

Progress = Callable[[int, int, str], None] | None
EXAMPLES = ASSETS_DIR / "mathneuro" / "examples.json"
MATH_DATASETS = ("arithmetic-words", "gsm-symbolic")
NONMATH_DATASETS = (SENTIMENT, "movie-sentiment", "mmlu", "logiqa")
METRICS = ("auto", "accuracy", "loss")
MAX_LENGTH = 256  # identification samples are cut to this many tokens

DEFAULTS = {"model": DEMO_NAME, "math": "arithmetic-words", "nonmath": [SENTIMENT, "movie-sentiment"],
            "n": 100, "eval_n": 100, "proportion": 0.05, "method": "mathneuro", "factor": 1.1,
            "methods": list(METHODS), "proportions": [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2],
            "factors": [0.0, 0.5, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5, 2.0], "consistency_proportions": [0.01, 0.05, 0.1],
            "repeats": 3, "seed": 0}


# ---- datasets, metrics ----------------------------------------------------------------------------------------
def dataset_names() -> tuple[list[str], list[str]]:
    """(math dataset names, non-math dataset names) offered by the tab."""
    return list(MATH_DATASETS), list(NONMATH_DATASETS)


def load_records(name: str, split: str, n: int) -> list:
    """The first ``n`` records of ``name``'s ``split``, or :class:`BadInputError` (unknown, missing or empty)."""
    n = check_count(n, "The number of samples")
    if name == SENTIMENT:
        recs = sentiment_split(split, n)
    else:
        from core.data import DATASETS, load
        if name not in DATASETS:
            raise BadInputError(f"Unknown dataset {name!r}.",
                                fix=f"Use one of: {', '.join(list(DATASETS) + [SENTIMENT])}.")
        recs = load(name, split, limit=n)
    recs = list(recs)[:n]
    if not recs:
        raise BadInputError(f"The dataset {name!r} ({split}) is empty.", fix="Pick another dataset or split.")
    return recs


def check_count(n, what: str) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInputError(f"{what} must be a positive integer, got {n!r}.", fix="Use e.g. 50.")
    return n


def task_of(record) -> str:
    if hasattr(record, "solution"):
        return "math"
    if hasattr(record, "choices"):
        return "choice"
    if hasattr(record, "text"):
        return "text"
    raise BadInputError(f"Records of type {type(record).__name__} cannot be used here.",
                        fix="Use math problems, multiple-choice questions or texts.")


def resolve_metric(metric: str, dataset: str, record) -> str:
    """``accuracy`` or ``loss`` for this dataset."""
    if metric not in METRICS:
        raise BadInputError(f"Unknown metric {metric!r}.", fix=f"Use one of: {', '.join(METRICS)}.")
    task = task_of(record)
    if metric == "auto":
        return "accuracy" if dataset in ("arithmetic-words", SENTIMENT) else "loss"
    if metric == "accuracy" and task == "text":
        raise BadInputError(f"{dataset!r} has plain texts, which have no accuracy.", fix="Use --metric loss.")
    return metric


def metric_label(dataset: str, metric: str) -> str:
    return f"{dataset} {'accuracy (%)' if metric == 'accuracy' else 'loss (nats/token)'}"


def score(model, tokenizer, records, metric: str, dataset: str) -> float:
    """Accuracy in % or loss in nats per token of ``model`` on ``records``."""
    if metric == "loss":
        return teacher_forced_loss(model, tokenizer, records)["loss"]
    if task_of(records[0]) == "math":
        tokens = 24 if dataset == "arithmetic-words" else 256
        return 100.0 * math_accuracy(model, tokenizer, records, max_new_tokens=tokens)["accuracy"]
    return 100.0 * multiple_choice_accuracy(model, tokenizer, records)["accuracy"]


# ---- model, cache --------------------------------------------------------------------------------------------
def load(ref: str):
    """``core.zoo.load_model(ref)``; an empty reference is a clear error."""
    from core.zoo import load_model
    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick a model, e.g. mathneuro-tiny.")
    return load_model(str(ref).strip())


def _examples() -> list[dict]:
    try:
        return json.loads(EXAMPLES.read_text())["entries"]
    except (OSError, ValueError, KeyError):
        return []


def _canon(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def cached(lm, analysis: str, params: dict, compute: Callable[[], dict]) -> tuple[dict, str]:
    """(result, where) with where in {"precomputed", "cache", "computed"}."""
    key = _canon(params)
    for e in _examples():
        if e["fingerprint"] == lm.fingerprint and e["analysis"] == analysis and _canon(e["params"]) == key:
            return e["result"], "precomputed"
    entry, hit = ResultsCache().get_or_compute(lm.fingerprint, f"mathneuro-{analysis}", params,
                                               lambda: CacheEntry(compute()))
    return entry.data, "cache" if hit else "computed"


def statistics(lm, math: str, nonmath: str, n: int, method: str, progress: Progress = None) -> Statistics:
    """The method's statistics from ``n`` train samples of each dataset (cached; small: one vector per matrix)."""
    kind = get_method(method).statistics
    params = {"math": math, "nonmath": nonmath, "n": n, "kind": kind, "max_length": MAX_LENGTH}

    def compute():
        m_in = token_inputs(lm.tokenizer, load_records(math, "train", n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(nonmath, "train", n), MAX_LENGTH)
        stats = get_method(method).collect(lm.model, m_in, n_in, max_length=MAX_LENGTH, progress=progress)
        tensors, data = {}, {"kind": stats.kind}
        for side in ("math", "nonmath"):
            part = getattr(stats, side)
            if kind == "column_norms":
                data[side] = {"samples": part.samples, "tokens": part.tokens}
                tensors.update({f"{side}/{k}": v for k, v in part.sums.items()})
            else:
                data[side] = {"tokens": part.tokens}
                tensors.update({f"{side}/{k}": v for k, v in part.positive.items()})
        return CacheEntry(data, tensors)

    entry, _ = ResultsCache().get_or_compute(lm.fingerprint, "mathneuro-statistics", params, compute)
    parts = {}
    for side in ("math", "nonmath"):
        vecs = {k.split("/", 1)[1]: v for k, v in entry.tensors.items() if k.startswith(side + "/")}
        if kind == "column_norms":
            parts[side] = ColumnNorms(sums=vecs, samples=entry.data[side]["samples"], tokens=entry.data[side]["tokens"])
        else:
            from core.mathneuro.lape import FiringCounts
            parts[side] = FiringCounts(positive=vecs, tokens=entry.data[side]["tokens"])
    return Statistics(kind, parts["math"], parts["nonmath"])


def masks_for(lm, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0,
              progress: Progress = None):
    n = check_count(n, "The number of samples N")
    proportion = check_proportion(proportion)
    stats = statistics(lm, math, nonmath, n, method, progress)
    return select(lm.model, stats, proportion, method, seed)


def _check_methods(methods) -> list[str]:
    methods = list(methods or [])
    if not methods:
        raise BadInputError("No method chosen.", fix=f"Pick at least one of: {', '.join(METHODS)}.")
    for m in methods:
        get_method(m)
    return methods


def _check_nonmath(nonmath) -> list[str]:
    items = [nonmath] if isinstance(nonmath, str) else list(nonmath or [])
    if not items:
        raise BadInputError("No non-math dataset chosen.", fix="Pick one or two non-math datasets.")
    return items


# ---- analyses ---------------------------------------------------------------------------------------------------
def identify_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str, seed: int = 0,
                    out: str | None = None, progress: Progress = None) -> dict:
    """Identify, summarise, and optionally save the masks (safetensors, with metadata)."""
    n, proportion = check_count(n, "The number of samples N"), check_proportion(proportion)
    get_method(method)
    lm = load(ref)
    t0 = time.perf_counter()
    masks = masks_for(lm, math, nonmath, n, proportion, method, seed, progress)
    summary = A.selection_summary(masks)
    result = {"model": ref, "fingerprint": lm.fingerprint, "math": math, "nonmath": nonmath, "n": n,
              "proportion": proportion, "method": method, "selected": summary["selected"], "total": summary["total"],
              "share": summary["share"], "matrices": summary["matrices"], "seconds": round(time.perf_counter() - t0, 2)}
    if out:
        path = Path(out)
        if path.suffix != ".safetensors":
            raise BadInputError(f"Cannot write masks to {path.name}.", fix="Use --out masks.safetensors.")
        if not path.parent.exists():
            raise BadInputError(f"Folder {path.parent} does not exist.", fix="Create it or choose another path.")
        save_masks(masks, path, {"method": method, "proportion": proportion, "math": math, "nonmath": nonmath,
                                 "n": n, "model": ref, "fingerprint": lm.fingerprint})
        result["masks_file"] = str(path)
    return result


def layer_distribution_result(ref: str, math: str, nonmath, n: int, proportion: float, method: str = "mathneuro",
                              progress: Progress = None) -> dict:
    """Selected parameters per (layer, module) for one or two non-math datasets."""
    proportion, n = check_proportion(proportion), check_count(n, "The number of samples N")
    get_method(method)
    nonmath = _check_nonmath(nonmath)
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method}

    def compute():
        out = {}
        for nm in nonmath:
            masks = masks_for(lm, math, nm, n, proportion, method, progress=progress)
            rows = [r for r in A.layer_distribution(masks) if r["layer"] is not None]
            out[nm] = {"rows": rows, "selected": sum(r["selected"] for r in rows),
                       "total": sum(r["total"] for r in rows)}
        return {"params": params, "by_nonmath": out}
    result, where = cached(lm, "layers", params, compute)
    return {**result, "source": where}


def _evaluation_sets(math: str, nonmath: list[str], eval_n: int, metric: str) -> tuple[dict, dict]:
    sets, metrics = {}, {}
    for name in [math] + nonmath:
        recs = load_records(name, "test", eval_n)
        sets[name] = recs
        metrics[name] = resolve_metric(metric, name, recs[0])
    return sets, metrics


def effect_result(ref: str, math: str, nonmath, n: int, proportion: float, methods=None, eval_n: int = 100,
                  metric: str = "auto", mode: str = "prune", factor: float | None = None,
                  progress: Progress = None) -> dict:
    """Math and non-math metric before and after the intervention, per method and non-math dataset."""
    proportion = check_proportion(proportion)
    nonmath, methods = _check_nonmath(nonmath), _check_methods(methods or list(METHODS))
    eval_n = check_count(eval_n, "The number of evaluation items")
    if mode == "scale":
        factor = check_factor(factor)
    elif mode != "prune":
        raise BadInputError(f"Unknown intervention {mode!r}.", fix="Use prune or scale.")
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "methods": methods,
              "eval_n": eval_n, "metric": metric, "mode": mode, "factor": factor if mode == "scale" else None}

    def compute():
        sets, metrics = _evaluation_sets(math, nonmath, eval_n, metric)
        model, tok = lm.model, lm.tokenizer
        total = len(methods) * len(nonmath) + 1
        before = {name: score(model, tok, recs, metrics[name], name) for name, recs in sets.items()}
        if progress:
            progress(1, total, "evaluations")
        rows, done = [], 1
        for nm in nonmath:
            for method in methods:
                masks = masks_for(lm, math, nm, n, proportion, method)
                with intervened(model, masks, mode, factor):
                    m_after = score(model, tok, sets[math], metrics[math], math)
                    n_after = score(model, tok, sets[nm], metrics[nm], nm)
                rows.append({"method": method, "label": METHODS[method].label, "nonmath": nm,
                             "selected": A.selection_summary(masks)["selected"],
                             "math_before": before[math], "math_after": m_after,
                             "nonmath_before": before[nm], "nonmath_after": n_after})
                done += 1
                if progress:
                    progress(done, total, "evaluations")
        return {"params": params, "metrics": metrics, "before": before, "rows": rows}
    result, where = cached(lm, "effect", params, compute)
    return {**result, "source": where}


def proportion_sweep_result(ref: str, math: str, nonmath: str, n: int, proportions=None, method: str = "mathneuro",
                            eval_n: int = 100, metric: str = "auto", progress: Progress = None) -> dict:
    """Selected count and math / non-math metric after pruning, per K."""
    proportions = [check_proportion(k, "Each proportion K") for k in (proportions or DEFAULTS["proportions"])]
    eval_n = check_count(eval_n, "The number of evaluation items")
    get_method(method)
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportions": proportions, "method": method,
              "eval_n": eval_n, "metric": metric}

    def compute():
        sets, metrics = _evaluation_sets(math, [nonmath], eval_n, metric)
        model, tok = lm.model, lm.tokenizer
        rows = [{"proportion": 0.0, "selected": 0, "share": 0.0,
                 "math": score(model, tok, sets[math], metrics[math], math),
                 "nonmath": score(model, tok, sets[nonmath], metrics[nonmath], nonmath)}]
        for i, k in enumerate(proportions):
            masks = masks_for(lm, math, nonmath, n, k, method)
            s = A.selection_summary(masks)
            with intervened(model, masks, "prune"):
                rows.append({"proportion": k, "selected": s["selected"], "share": s["share"],
                             "math": score(model, tok, sets[math], metrics[math], math),
                             "nonmath": score(model, tok, sets[nonmath], metrics[nonmath], nonmath)})
            if progress:
                progress(i + 1, len(proportions), "proportions")
        return {"params": params, "metrics": metrics, "rows": rows}
    result, where = cached(lm, "proportion-sweep", params, compute)
    return {**result, "source": where}


def scale_sweep_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str = "mathneuro",
                       factors=None, eval_n: int = 100, metric: str = "auto", progress: Progress = None) -> dict:
    """Math / non-math metric with the selected parameters scaled by each factor (1.0 = unchanged)."""
    proportion = check_proportion(proportion)
    factors = [check_factor(f, "Each scale factor") for f in (factors if factors is not None else DEFAULTS["factors"])]
    if not factors:
        raise BadInputError("Give at least one scale factor.")
    eval_n = check_count(eval_n, "The number of evaluation items")
    get_method(method)
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method,
              "factors": factors, "eval_n": eval_n, "metric": metric}

    def compute():
        sets, metrics = _evaluation_sets(math, [nonmath], eval_n, metric)
        model, tok = lm.model, lm.tokenizer
        masks = masks_for(lm, math, nonmath, n, proportion, method)
        rows = []
        for i, f in enumerate(factors):
            with intervened(model, masks, "scale", f):
                rows.append({"factor": f, "math": score(model, tok, sets[math], metrics[math], math),
                             "nonmath": score(model, tok, sets[nonmath], metrics[nonmath], nonmath)})
            if progress:
                progress(i + 1, len(factors), "scale factors")
        return {"params": params, "metrics": metrics, "rows": rows,
                "selected": A.selection_summary(masks)["selected"]}
    result, where = cached(lm, "scale-sweep", params, compute)
    return {**result, "source": where}


def consistency_result(ref: str, math: str, nonmath: str, n: int, proportions=None, method: str = "mathneuro",
                       repeats: int = 3, seed: int = 0, progress: Progress = None) -> dict:
    """Overlap of sets found from 1..N random samples with the set found from all N, per K."""
    n = check_count(n, "The number of samples N")
    repeats = check_count(repeats, "repeats")
    proportions = [check_proportion(k, "Each proportion K")
                   for k in (proportions or DEFAULTS["consistency_proportions"])]
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportions": proportions, "method": method,
              "repeats": repeats, "seed": seed}

    def compute():
        m_in = token_inputs(lm.tokenizer, load_records(math, "train", n), MAX_LENGTH)
        n_in = token_inputs(lm.tokenizer, load_records(nonmath, "train", n), MAX_LENGTH)
        rows = A.consistency(lm.model, m_in, n_in, None, proportions, repeats=repeats, seed=seed, method=method,
                             max_length=MAX_LENGTH, progress=progress)
        rows = [{k: (None if isinstance(v, float) and not _math.isfinite(v) else v) for k, v in r.items()}
                for r in rows]
        return {"params": params, "rows": rows}
    result, where = cached(lm, "consistency", params, compute)
    return {**result, "source": where}


def matrix_names(ref: str) -> list[str]:
    """Scored weight names of the model (drill-down choices)."""
    from core.mathneuro.scoring import scored_linears
    return list(scored_linears(load(ref).model))


def drill_result(ref: str, math: str, nonmath: str, n: int, proportion: float, method: str = "mathneuro",
                 matrix: str | None = None, max_cells: int = 64, progress: Progress = None) -> dict:
    """One weight matrix's selected entries, pooled to at most ``max_cells`` per side, plus row/column counts."""
    proportion, n = check_proportion(proportion), check_count(n, "The number of samples N")
    get_method(method)
    names = matrix_names(ref)
    matrix = matrix or next((x for x in names if "mlp.down_proj" in x), names[0])
    if matrix not in names:
        raise BadInputError(f"The model has no scored matrix {matrix!r}.", fix=f"Use e.g. {names[0]}.")
    lm = load(ref)
    params = {"math": math, "nonmath": nonmath, "n": n, "proportion": proportion, "method": method,
              "matrix": matrix, "max_cells": max_cells}

    def compute():
        masks = masks_for(lm, math, nonmath, n, proportion, method, progress=progress)
        d = A.drill_down(masks, matrix, max_cells)
        mask = masks[matrix]
        d["row_counts"] = mask.sum(1).tolist()
        d["col_counts"] = mask.sum(0).tolist()
        return {"params": params, **d}
    result, where = cached(lm, "drill", params, compute)
    return {**result, "source": where, "matrices": names}


# ---- files ------------------------------------------------------------------------------------------------------
def flat_rows(analysis: str, result: dict) -> list[dict]:
    if analysis == "layers":
        return [{"nonmath": nm, **r} for nm, part in result["by_nonmath"].items() for r in part["rows"]]
    if analysis == "drill":
        return [{"row_block": i, **{f"col_{j}": v for j, v in enumerate(row)}} for i, row in enumerate(result["grid"])]
    if analysis == "identify":
        return result["matrices"]
    return result["rows"]


def write_result(path: str | Path, analysis: str, result: dict) -> str:
    """Write an analysis result to .json / .csv (its rows), or its figure to .html (plotly.js included);
    atomically (temporary file, then rename)."""
    from core.figures import write_output

    suffix = Path(path).suffix.lower()
    figure = None
    if suffix == ".html":
        from core.mathneuro.figures import FIGURES
        if analysis not in FIGURES:
            raise BadInputError(f"{analysis} has no figure.", fix="Use --out FILE.json or FILE.csv.")
        figure = FIGURES[analysis](result)
    rows = flat_rows(analysis, result) if suffix == ".csv" else None
    return str(write_output(path, data=result, rows=rows, figure=figure))


# ---- precomputed examples -------------------------------------------------------------------------------------
def default_calls(ref: str = DEMO_NAME) -> list[tuple[str, Callable, dict]]:
    """(analysis, function, kwargs) of the tab's default view."""
    d = DEFAULTS
    first = d["nonmath"][0]
    common = {"ref": ref, "math": d["math"], "n": d["n"]}
    return [
        ("layers", layer_distribution_result, {**common, "nonmath": d["nonmath"], "proportion": d["proportion"],
                                              "method": d["method"]}),
        ("effect", effect_result, {**common, "nonmath": d["nonmath"], "proportion": d["proportion"],
                                   "methods": d["methods"], "eval_n": d["eval_n"]}),
        ("proportion-sweep", proportion_sweep_result, {**common, "nonmath": first, "proportions": d["proportions"],
                                                       "method": d["method"], "eval_n": d["eval_n"]}),
        ("scale-sweep", scale_sweep_result, {**common, "nonmath": first, "proportion": d["proportion"],
                                             "method": d["method"], "factors": d["factors"], "eval_n": d["eval_n"]}),
        ("consistency", consistency_result, {**common, "nonmath": first,
                                             "proportions": d["consistency_proportions"], "method": d["method"],
                                             "repeats": d["repeats"]}),
        ("drill", drill_result, {**common, "nonmath": first, "proportion": d["proportion"], "method": d["method"]}),
    ]


def precompute_examples(path: Path | str = EXAMPLES, ref: str = DEMO_NAME, log=print) -> Path:
    """Run the default view and write it to ``assets/mathneuro/examples.json`` (atomically)."""
    lm = load(ref)
    entries = []
    for analysis, fn, kwargs in default_calls(ref):
        t0 = time.perf_counter()
        result = fn(**kwargs)
        result = {k: v for k, v in result.items() if k != "source"}
        entries.append({"fingerprint": lm.fingerprint, "analysis": analysis, "params": result["params"],
                        "result": result})
        log(f"{analysis}: {time.perf_counter() - t0:.1f}s")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"model": ref, "entries": entries}, separators=(",", ":")))
    tmp.replace(path)
    return path


__all__ = ["DEFAULTS", "MATH_DATASETS", "NONMATH_DATASETS", "METRICS", "dataset_names", "load_records",
           "identify_result", "layer_distribution_result", "effect_result", "proportion_sweep_result",
           "scale_sweep_result", "consistency_result", "drill_result", "matrix_names", "precompute_examples",
           "write_result", "flat_rows",
           "default_calls"]
