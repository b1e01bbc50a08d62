"""What the Mix-LN tab and ``python -m core mixln`` do, one function per user action, each returning a
:class:`core.runner.Result` (status text, data, tables, figures, files):

    loss_result(runs)                         training and held-out loss of committed runs
    gradnorms_result(runs, kind, step)        per-layer gradient norms logged at init and at a step
    compare_result(), sweep_result()          final held-out perplexity per placement / against alpha, over seeds,
                                              at 12 and 24 layers (mean, error bars min-max, n)
    curves_result(runs, set, metric)          held-out loss / perplexity curves over seeds (mean, min-max band)
    lr_sweep_result()                         final held-out loss per placement and peak learning rate (one seed)
    depth_result()                            12 vs 24 layers: per-layer angular distance, gradient norm, removal
    settings_text()                           the training settings of the committed runs and their deviations
    angular_distance_result(refs)             d(h_l, h_l+n) heatmap of a run or any causal LM (precomputed / cached)
    layer_removal_result(refs)                held-out loss increase when each layer is skipped
    model_gradnorms_result(ref)               gradient norms of one batch for any causal LM
    live_run(placement, alpha, layers, steps) a small run trained now, one Result per update (a generator)
    train_result(...), reproduce_result(...)  train a run folder / retrain the committed runs
    reference_result()                        unigram / bigram levels of the training data on the held-out windows

Placements (labels, colours, the alpha) come from :data:`core.mixln.placements.PLACEMENTS`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from core.errors import BadInputError, Cancelled
from core.figures import PALETTE
from core.mixln import analysis, reference, runs, summary
from core.mixln import figures as F
from core.mixln.placements import PLACEMENTS, placement_colour, placement_label
from core.checks import check_number
from core.progress import report
from core.results import Result, source_text
from core.runner import digest

DEFAULT_RUNS = ("pre-ln", "post-ln", "mix-ln-0.25")


def _names(names) -> list[str]:
    names = [names] if isinstance(names, str) else list(names or [])
    if not names:
        raise BadInputError("no run chosen.", fix="tick at least one committed run.")
    return names


def _colour(run, i: int = 0) -> str:
    return placement_colour(run.meta["norm"], run.meta["alpha"], i)


def _check_alpha(alpha) -> float:
    try:
        return check_number(alpha, "alpha", 0.0, 1.0)
    except BadInputError:
        raise BadInputError(f"alpha = {alpha!r} is outside [0, 1].",
                            fix="choose alpha between 0 (all Pre-LN) and 1 (all Post-LN); the paper uses 0.25.") from None


def _sizes(samples, seq_len) -> tuple[int, int]:
    """(samples, seq_len) as whole numbers in the diagnostics' ranges, or one clear message."""
    return (check_number(samples, "samples", 1, 256, whole=True), check_number(seq_len, "seq_len", 4, 2048, whole=True))


def _rows_of(result: dict) -> list[dict]:
    """A dict of per-layer lists (and scalars) -> one row per layer."""
    lists = {k: v for k, v in result.items() if isinstance(v, list) and v and not isinstance(v[0], list)}
    n = max((len(v) for v in lists.values()), default=0)
    scalars = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    return [{**scalars, **{k: (v[i] if i < len(v) else None) for k, v in lists.items()}} for i in range(n)]


# ---- committed runs -----------------------------------------------------------------------------------------------
def loss_result(names=DEFAULT_RUNS) -> Result:
    """Training (thin) and held-out (thick) loss against the step, one colour per run."""
    loaded = [runs.load_run(n) for n in _names(names)]
    curves = [{"label": r.label, "color": _colour(r, i), "history": r.history} for i, r in enumerate(loaded)]
    rows = [{"run": r.name, "split": split, "step": e["step"], "loss": e["loss"]} for r in loaded
            for split in ("train", "eval") for e in r.history.get(split, [])]
    return Result(f"Loss of {', '.join(r.label for r in loaded)}.", {"runs": [r.name for r in loaded]},
                  tables={"loss": rows}, figures={"loss": F.loss_figure(curves, "Loss, seed 0 of 3 (spread: below)",
                                                                        reference.load_reference())},
                  stem="mixln-loss")


def gradnorms_result(names=DEFAULT_RUNS, kind: str = "param", step: float | None = None) -> Result:
    """Each run's per-layer gradient norm at initialisation (dotted) and at ``step`` (solid; default: the end)."""
    results = [analysis.run_gradnorms(n, kind) for n in _names(names)]
    if step is not None:
        for r in results:
            k = max([i for i, s in enumerate(r["steps"]) if s <= max(check_number(step, "step"), r["steps"][0])] or [0])
            r["final_step"], r["final"] = r["steps"][k], r["per_step"][k]
    shown = results[0]["final_step"]
    fig = F.gradnorm_figure(F.gradnorm_series(results), f"Grad norm per layer: init (dotted), step {shown}, "
                            "seed 0 of 3", kind)
    rows = [{"subject": r["run"], "layer": layer, "init": r["init"][layer], "final": r["final"][layer]}
            for r in results for layer in r["layers"]]
    return Result(f"{kind} gradient norms at initialisation and at step {shown}.", results,
                  tables={"gradnorms": rows}, figures={"gradnorms": fig}, stem="mixln-gradnorms")


def _set_root(set_name: str) -> Path:
    return runs.ASSETS / runs.RUN_SETS[set_name].folder


def _spread_text(row: dict, prefix: str = "eval_perplexity", nd: int = 1) -> str:
    mean, std = row.get(f"{prefix}_mean"), row.get(f"{prefix}_std")
    n = row.get("n_seeds", row.get("n"))
    if mean is None:
        return "no finished seed"
    return f"{mean:.{nd}f} ± {std:.{nd}f} (n = {n} seeds)"


def compare_result(names=None, sets=("main", "depth-24")) -> Result:
    """One row per committed run and depth: placement, alpha, steps, status, final held-out loss and perplexity over
    the seeds (mean, std, min, max, n; :func:`core.mixln.compare_table`); the chart draws min-max error bars."""
    rows = []
    for s in sets:
        root = _set_root(s)
        present = runs.list_runs(root)
        picked = [n for n in (names or present) if n in present]
        rows += runs.compare_table(picked, root) if picked else []
    if not rows:
        raise BadInputError("no committed runs found.", fix="run `python -m core mixln reproduce` first.")
    parts = _best_per_depth(rows, lambda best: f"lowest mean held-out perplexity **{best['label']}**")
    diverged = sum(r["diverged"] for r in rows)
    status = (f"{len(rows)} runs at equal steps, mean ± std over seeds. " + "; ".join(parts) + "."
              + (f" {diverged} seed(s) diverged." if diverged else ""))
    return Result(status, rows, tables={"compare": rows},
                  figures={"compare": F.compare_figure(rows, reference=reference.load_reference())},
                  key="mixln-compare-" + digest(rows), stem="mixln-compare")


def _best_per_depth(rows: list[dict], name) -> list[str]:
    """Per layer count (in order of appearance), ``"<L> layers: <name(best)>, <spread>"`` for the row with the lowest
    mean held-out perplexity (rows without one are skipped)."""
    parts = []
    for layers in dict.fromkeys(r["layers"] for r in rows):
        ok = [r for r in rows if r["layers"] == layers and r["eval_perplexity_mean"] is not None]
        best = min(ok, key=lambda r: r["eval_perplexity_mean"], default=None)
        if best:
            parts.append(f"{layers} layers: {name(best)}, {_spread_text(best)}")
    return parts


def sweep_result() -> Result:
    """Final held-out perplexity against Mix-LN's alpha (0 = all Pre-LN, 1 = all Post-LN), over seeds, at 12 and 24
    layers."""
    rows = runs.sweep_table()
    if not rows:
        raise BadInputError("no sweep runs found.", fix="run `python -m core mixln reproduce` first.")
    parts = _best_per_depth(rows, lambda best: f"best alpha {best['alpha']:g}")
    return Result(f"Alpha sweep over {len(rows)} run groups; " + "; ".join(parts) + ".", rows,
                  tables={"sweep": rows}, figures={"sweep": F.sweep_figure(rows, reference=reference.load_reference())},
                  key="mixln-sweep-" + digest(rows), stem="mixln-sweep")


def curves_result(names=None, set_name: str = "main", metric: str = "loss") -> Result:
    """Held-out loss (or perplexity) curves of the committed placements over their seeds: mean line, min-max band."""
    if set_name not in runs.RUN_SETS or set_name == "lr-sweep":
        raise BadInputError(f"no seed curves for run set {set_name!r}.", fix="use main (12 layers) or depth-24.")
    if metric not in ("loss", "perplexity"):
        raise BadInputError(f"unknown metric {metric!r}.", fix="use loss or perplexity.")
    bands = summary.loss_bands(list(names) if names else None, set_name)
    if not bands:
        raise BadInputError(f"no runs of the set {set_name} found.", fix="run `python -m core mixln reproduce`.")
    key = "eval_loss" if metric == "loss" else "eval_perplexity"
    rows = [{"run": b["run"], "label": b["label"], "n": b["n"], "step": t, "mean": m, "std": sd, "min": lo,
             "max": hi} for b in bands
            for t, m, sd, lo, hi in zip(*(b[key][f] for f in ("steps", "mean", "std", "min", "max")))]
    layers = runs.RUN_SETS[set_name].model["num_layers"]
    fig = F.loss_band_figure(bands, metric, f"Held-out {metric} over seeds at {layers} layers (mean, band min-max)",
                             reference=reference.load_reference())
    ends = [f"{b['label']} {b[key]['mean'][-1]:.3g} ± {b[key]['std'][-1]:.2g} (n = {b['n']})" for b in bands
            if b[key]["mean"] and b[key]["mean"][-1] is not None]
    return Result(f"Final held-out {metric}, {layers} layers, mean ± std over seeds: " + "; ".join(ends) + ".",
                  {"set": set_name, "metric": metric, "bands": bands}, tables={"curves": rows},
                  figures={"curves": fig}, key=f"mixln-curves-{set_name}-{metric}-" + digest(rows),
                  stem=f"mixln-{metric}-curves")


def lr_sweep_result() -> Result:
    """Final held-out loss per placement and peak learning rate (one seed per rate): what makes the comparison fair."""
    rows = summary.lr_sweep_table()
    if not rows:
        raise BadInputError("no learning-rate sweep runs found.",
                            fix="run `python -m core mixln reproduce --set lr-sweep` first.")
    best = {}
    for r in rows:
        if r["eval_loss"] is not None and (r["run"] not in best or r["eval_loss"] < best[r["run"]]["eval_loss"]):
            best[r["run"]] = r
    diverged = [f"{r['label']} at {r['lr']:g}" for r in rows if r["eval_loss"] is None]
    status = ("Best peak rate per placement (one seed, so differences under the seed spread of the comparison are "
              "not resolved): " + "; ".join(f"{r['label']} {r['lr']:g}" for r in best.values()) + "."
              + (f" Diverged: {', '.join(diverged)}." if diverged else ""))
    return Result(status, rows, tables={"lr-sweep": rows},
                  figures={"lr-sweep": F.lr_sweep_figure(rows, reference=reference.load_reference())},
                  key="mixln-lr-sweep-" + digest(rows), stem="mixln-lr-sweep")


def depth_result(names=None) -> Result:
    """12 vs 24 layers: per-layer angular distance d(h_l, h_l+1), weight-gradient norm at the end of training and
    loss increase when the layer is skipped, per placement, mean and min-max over seeds."""
    profiles = summary.depth_profiles(list(names) if names else None)
    if not profiles:
        raise BadInputError("no runs with diagnostics found.", fix="run `python -m core mixln reproduce` first.")
    rows = [{"set": p["set"], "run": p["run"], "layers": p["layers"], "n": p["n"], "layer": layer,
             **{f"{k}_{stat}": p[k][stat][layer] if layer < len(p[k][stat]) else None
                for k in ("angular", "grad_norm", "removal") for stat in ("mean", "min", "max")}}
            for p in profiles for layer in range(p["layers"])]
    n = sorted({p["n"] for p in profiles})
    return Result(f"Per-layer profiles of {len(profiles)} placement-depth groups (n = {'/'.join(map(str, n))} seeds "
                  "each; diagnostics on 8 held-out sequences of 64 tokens).", profiles, tables={"depth": rows},
                  figures={"depth": F.depth_figure(profiles)}, key="mixln-depth-" + digest(rows), stem="mixln-depth")


def settings_text() -> str:
    """The committed runs' training settings (the Mix-LN authors') and where they depart from them, as Markdown."""
    note = F.settings_note().replace("<br>", " ")
    return (f"**Settings of every committed run.** {note} Departures from the authors' runs: "
            + "; ".join(runs.RECIPE_DEVIATIONS) + ".")


# ---- diagnostics of a run or any causal LM ------------------------------------------------------------------------
def angular_distance_result(ref: str, samples: int = 8, seq_len: int = 64, position: str = "last",
                            progress=None) -> Result:
    """The paper's (first layer l, block size n) heatmap of d(h_l, h_l+n), raw and scaled per block size."""
    res = analysis.angular_result(ref, *_sizes(samples, seq_len), position, progress=progress)
    source = res["source"]
    kind = "committed run " if analysis.is_run(ref) else ""
    rows = [{"block_size": n, "first_layer": layer, "raw": res["raw"][i][j], "scaled": res["scaled"][i][j]}
            for i, n in enumerate(res["block_sizes"]) for j, layer in enumerate(res["first_layers"])
            if res["raw"][i][j] is not None]
    title = f"Angular distance d(h_l, h_l+n): {kind}{res['subject']}"
    status = (f"Angular distance of **{res['subject']}**: {res['num_layers']} layers, {res['samples']} held-out "
              f"Wikipedia sequences of {res['seq_len']} tokens ({source_text(source)}).")
    return Result(status, res, tables={"angular": rows}, figures={"angular": F.angular_figure(res, title)},
                  source=source, key=digest("mixln/angular", res["subject"], res["samples"], res["seq_len"], position),
                  stem=f"mixln-angular-{Path(str(ref)).name}")


def layer_removal_result(refs, samples: int = 8, seq_len: int = 64, progress=None) -> Result:
    """Held-out loss increase when each layer is skipped, one bar group per run or model."""
    refs = _names(refs)
    results = []
    for i, ref in enumerate(refs):
        r = analysis.removal_result(ref, *_sizes(samples, seq_len), progress=progress)
        if analysis.is_run(ref):
            run = runs.load_run(ref)
            r = {**r, "label": run.label, "colour": _colour(run, i)}
        results.append(r)
    colours = [r.get("colour", PALETTE[i % len(PALETTE)]) for i, r in enumerate(results)]
    one = results[0]
    title = ("Layer removal: held-out loss increase when one layer is skipped"
             + (" (seed 0 of 3; spread in the depth chart)" if "label" in one else "")
             if len(results) > 1 or "label" in one else f"Layer removal: {one['subject']}")
    worst = max(range(len(one["layers"])), key=lambda i: one["loss_increase"][i] or 0)
    source = "computed" if any(r["source"] == "computed" for r in results) else results[0]["source"]
    status = (f"Layer removal on **{one['subject']}**: baseline held-out perplexity {one['baseline_perplexity']:.1f}; "
              f"skipping layer {worst} hurts most (+{one['loss_increase'][worst]:.3f} nats) ({source_text(source)}).")
    rows = [row for r in results for row in _rows_of({k: v for k, v in r.items() if k != "colour"})]
    return Result(status, results, tables={"removal": rows},
                  figures={"removal": F.removal_figure(results, title, colours)}, source=source,
                  key=digest("mixln/removal", refs, samples, seq_len), stem="mixln-removal")


def model_gradnorms_result(ref: str, samples: int = 4, seq_len: int = 64) -> Result:
    """Per-layer gradient norms of one batch of held-out text for any causal LM at its current weights."""
    r = analysis.gradnorm_result(ref, *_sizes(samples, seq_len))
    rows = [{"subject": r["subject"], "layer": layer, "param": r["param"][layer], "input": r["input"][layer]}
            for layer in r["layers"]]
    return Result(f"Gradient norms of **{r['subject']}** on {samples} held-out sequences.", [r],
                  tables={"gradnorms": rows}, figures={"gradnorms": F.gradnorm_figure(F.gradnorm_series([r]))},
                  source=r["source"], stem="mixln-gradnorms")


# ---- training -----------------------------------------------------------------------------------------------------
def _live_figures(history: dict, label: str, colour: str, kind: str = "param", levels: dict | None = None):
    loss = F.loss_figure([{"label": label, "color": colour, "history": history}],
                         f"Live run ({label}): training and held-out loss", levels)
    logs, series = history.get("grad_norms", []), []
    if logs:
        layers = list(range(len(logs[0][kind])))
        series.append({"label": f"at init (step {logs[0]['step']})", "color": colour, "layers": layers,
                       "values": logs[0][kind], "dash": "dot"})
        if len(logs) > 1:
            series.append({"label": f"step {logs[-1]['step']}", "color": colour, "layers": layers,
                           "values": logs[-1][kind]})
    return loss, F.gradnorm_figure(series, f"Live run ({label}): gradient norm per layer", kind)


def live_run(placement: str, alpha: float, layers: int, steps: int, progress=None) -> Iterator[Result]:
    """Train a small model now (nothing is written) and yield a Result (status, loss and gradient-norm figures) at
    every evaluation and gradient-norm log; a ``progress`` that raises ``Cancelled`` ends it, keeping the curves."""
    alpha = _check_alpha(alpha)
    if placement not in PLACEMENTS:
        raise BadInputError(f"unknown norm placement {placement!r}.", fix=f"use one of: {', '.join(PLACEMENTS)}.")
    layers, steps = check_number(layers, "layers", 1, 64, whole=True), check_number(steps, "steps", 1, 100_000,
                                                                                       whole=True)
    sizes = {**runs.LIVE_MODEL, "num_layers": layers}
    tcfg = {**runs.LIVE_TRAIN, "steps": steps, "eval_every": max(5, steps // 6)}
    tok = runs.ASSETS / "tokenizer.json"
    label = placement_label(placement, alpha if PLACEMENTS[placement].has_alpha else None)
    colour = placement_colour(placement, alpha)
    events = runs.train_run_iter(None, placement, alpha, sizes, tcfg, tok if tok.is_file() else None)
    levels = reference.reference_levels(train_config=tcfg) if tok.is_file() else None  # on the live run's windows
    history = None
    try:
        for ev in events:
            if ev.kind == "step":
                report(progress, ev.step / ev.total_steps, f"step {ev.step}/{ev.total_steps}")
            if ev.kind in ("eval", "grad_norms", "diverged", "stopped", "done"):
                history = ev.history.to_dict()
                loss = history["train"][-1]["loss"] if history["train"] else float("nan")
                msg = f"**{label}**, {int(layers)} layers: step {ev.step}/{ev.total_steps}, training loss {loss:.3f}"
                if history["eval"]:
                    msg += f", held-out perplexity {history['eval'][-1]['perplexity']:.1f}"
                if ev.kind in ("diverged", "stopped", "done"):
                    msg += f". **{history['status']}** {history['message']}"
                yield Result(msg, history, figures=dict(zip(("loss", "gradnorms"),
                                                            _live_figures(history, label, colour, levels=levels))),
                             stem="mixln-live")
    except Cancelled:
        events.close()
        if history is not None:
            yield Result(f"**{label}**: **stopped** at step {history['train'][-1]['step'] if history['train'] else 0};"
                         " the curves so far are kept.", history,
                         figures=dict(zip(("loss", "gradnorms"), _live_figures(history, label, colour, levels=levels))),
                         stem="mixln-live")


def reference_result(write: bool = False) -> Result:
    """The unigram and bigram levels of the training data on the committed runs' held-out windows, computed now
    (:func:`core.mixln.reference.reference_levels`); ``write`` stores them in ``assets/mixln/reference.json``, which
    the charts read."""
    levels = reference.write_reference() if write else reference.reference_levels()
    rows = [{"model": name, "loss_nats": levels[name]["loss"], "perplexity": levels[name]["perplexity"]}
            for name in ("unigram", "bigram")]
    status = (f"On {levels['targets']:,} held-out targets ({levels['windows'][0]} windows of {levels['windows'][1]} "
              f"tokens): unigram {levels['unigram']['loss']:.3f} nats (perplexity {levels['unigram']['perplexity']:,.0f}),"
              f" bigram {levels['bigram']['loss']:.3f} nats (perplexity {levels['bigram']['perplexity']:,.0f}), counted on "
              f"{levels['train_tokens']:,} training tokens" + (" (stored)" if write else "") + ".")
    return Result(status, levels, tables={"reference": rows}, stem="mixln-reference")


def train_result(out, placement: str = "mix", alpha: float = 0.25, model_sizes: dict | None = None,
                 train_config: dict | None = None, tokenizer=None, resume=None, checkpoint_every: int = 0,
                 callback=None) -> Result:
    """Train one run into the folder ``out`` (:func:`core.mixln.train_run`)."""
    _check_alpha(alpha)
    if out is None and resume is None:
        raise BadInputError("no output folder given.", fix="pass --out DIR (or --resume DIR).")
    meta = runs.train_run(out, placement, alpha, model_sizes, train_config, tokenizer, resume,
                          checkpoint_every=checkpoint_every, callback=callback)
    meta["folder"] = str(Path(out or resume))
    fmt = (lambda x: "-" if x is None else f"{x:.5g}")
    status = (f"{meta['status']}: {meta['folder']} ({meta['norm']}, alpha {meta['alpha']}, {meta['steps_done']} steps, "
              f"{meta['wall_seconds']} s, {meta['train_tokens_per_s']} tokens/s)\nfinal held-out perplexity "
              f"{fmt(meta['final_eval_perplexity'])} (loss {fmt(meta['final_eval_loss'])})"
              + (f"\n{meta['message']}" if meta["message"] else ""))
    return Result(status, meta, stem="mixln-train")


def reproduce_result(root=None, names=None, callback=None, sets=None, seeds=None, skip_done: bool = False) -> Result:
    """Retrain the committed runs with the recipe (all run sets, or the chosen sets / placements / seeds) and
    precompute each run's diagnostics while its weights are there (what the tab opens on)."""
    jobs = runs.recipe_jobs(sets, names, seeds)  # unknown sets / placements -> BadInputError
    if not jobs:
        raise BadInputError("no run matches the chosen sets, placements and seeds.",
                            fix="see `python -m core mixln runs` for the run sets and their seeds.")
    root = Path(root) if root else runs.ASSETS
    done = runs.reproduce(root, callback=callback, skip_done=skip_done, jobs=jobs,
                          diagnostics=analysis.write_run_diagnostics)
    reference.write_reference(root)  # the unigram / bigram levels the charts draw, on the same held-out windows
    data = {"root": str(root), "runs": {k: {f: m.get(f) for f in ("status", "final_eval_perplexity", "wall_seconds")}
                                        for k, m in done.items()},
            "commands": {j.key: runs.recipe_command(j.name, j) for j in jobs}}
    fmt = (lambda x: "-" if x is None else f"{x:.5g}")
    status = "\n".join(f"{k}: {v['status']}, ppl {fmt(v['final_eval_perplexity'])}, {v['wall_seconds']} s"
                       for k, v in data["runs"].items())
    return Result(status, data, stem="mixln-reproduce")
