"""The Mix-LN analyses as the tab and the CLI show them: :data:`ANALYSES`, entries of the one
:class:`core.analyses.Analysis` type (name -> its request type, compute function (:mod:`core.mixln.compute`),
status text, tables, figures, file stem). :func:`core.mixln.service.analysis_result` answers any of them.

Adding an analysis is an entry here (with its compute function); the service answers it by name, and an action of
its own (a ``*_result`` function of :mod:`core.mixln.service`) is one line. The entries without a compute function
(the live run, training, reproducing the runs) are shown by their actions, which stream or write files.
"""
from __future__ import annotations

from pathlib import Path

from core.analyses import Analysis, Shown, view_function
from core.figures import PALETTE
from core.mixln import compute, figures, schemas
from core.mixln.placements import PLACEMENTS, placement_colour, placement_label
from core.mixln.recipe import RECIPE_DEVIATIONS, RUN_SETS
from core.mixln.reference import load_reference
from core.mixln.summary import difference, mean_std_text
from core.stats import _p, word
from core.mixln.requests import (RUN_SAMPLES, RUN_WINDOWS, AngularRequest, CompareRequest, CurvesRequest,
                                 DepthRequest, GradnormsRequest, LiveRequest, ModelGradnormsRequest, NoInput,
                                 ReferenceRequest, RemovalRequest, ReproduceRequest, ReproducesRequest, RunsRequest,
                                 TrainRequest)


def settings_text() -> str:
    """The committed runs' training settings (the Mix-LN authors') and where they depart from them, as Markdown."""
    note = figures.settings_note().replace("<br>", " ")
    return (f"**Settings of every committed run.** {note} Departures from the authors' runs: "
            + "; ".join(RECIPE_DEVIATIONS) + ".")


# ---- helpers ------------------------------------------------------------------------------------------------------
def _rows_of(result: dict) -> list[dict]:
    """A dict of per-layer lists (and scalars) -> one row per layer."""
    lists = {k: v for k, v in result.items() if isinstance(v, list) and v and not isinstance(v[0], list)}
    n = max((len(v) for v in lists.values()), default=0)
    scalars = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    return [{**scalars, **{k: (v[i] if i < len(v) else None) for k, v in lists.items()}} for i in range(n)]


def _spread_text(row: dict, prefix: str = "eval_perplexity", nd: int = 1) -> str:
    return mean_std_text(row.get(f"{prefix}_mean"), row.get(f"{prefix}_std"), row.get("n_seeds", row.get("n")), nd,
                         seeds=True)


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


def windows_text(res: dict) -> str:
    """Which held-out windows a diagnostic used, in words (its ``samples``, ``seq_len`` and ``corpus``)."""
    where = ("spread evenly over the run's held-out stream (Wikipedia, OpenWebText and Python-docs paragraphs)"
             if res.get("corpus") == RUN_WINDOWS else f"of held-out {res.get('corpus', 'text')}")
    return f"{res['samples']} windows of {res['seq_len']} tokens {where}"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.5g}"


# ---- committed runs -----------------------------------------------------------------------------------------------
def _loss_tables(runs: list[dict], shown: Shown) -> dict:
    return {"loss": [{"run": r["run"], "split": split, "step": e["step"], "loss": e["loss"]} for r in runs
                     for split in ("train", "eval") for e in r["history"].get(split, [])]}


def _gradnorm_figures(results: list[dict], shown: Shown) -> dict:
    title = f"Grad norm per layer: init (dotted), step {results[0]['final_step']}, seed 0"
    return {"gradnorms": figures.gradnorm_figure(figures.gradnorm_series(results), title, shown.request.kind)}


PAPER_CLAIM = "The paper reports Mix-LN ahead of Pre-LN at 71 M to 1 B parameters (by 0.049 nats of loss at 71 M)"


def mix_vs_pre_text(rows: list[dict]) -> str:
    """Per layer count, Mix-LN 0.25's mean final held-out loss minus Pre-LN's (nats, with each one's std and n), and
    what the paper claims at which scale ('' when a depth lacks either)."""
    parts = []
    for layers in dict.fromkeys(r["layers"] for r in rows):
        at = [r for r in rows if r["layers"] == layers and r["eval_loss_mean"] is not None]
        pre = next((r for r in at if r["run"].split("/")[-1] == "pre-ln"), None)
        mix = next((r for r in at if r["run"].split("/")[-1] == "mix-ln-0.25"), None)
        if pre and mix:
            d = mix["eval_loss_mean"] - pre["eval_loss_mean"]
            c = difference(mix, pre)
            parts.append(f"{layers} layers: Mix-LN 0.25 is **{abs(d):.3f} nats {'behind' if d > 0 else 'ahead of'}** "
                         f"Pre-LN ({_spread_text(mix, 'eval_loss', 3)} against {_spread_text(pre, 'eval_loss', 3)}; "
                         f"{c.text(unit='nats') if c else 'no comparison'}: {_versus_word(c)})")
    if not parts:
        return ""
    return "Final held-out loss, " + "; ".join(parts) + f". {PAPER_CLAIM}; these runs have 1.1 M (12 layers) and 1.7 M (24)."


# the rule's word (core.stats.word) for "a is lower than b", said as a place in the ranking
VERDICT_WORDS = {"reproduced": "ahead", "opposite": "behind", "suggestive": "ahead, suggestive",
                 "suggestive, opposite": "behind, suggestive", "not reproduced": "no difference found",
                 "not resolved": "one seed, not resolved", "too small": "ahead"}


def _versus_word(c) -> str:
    return "no finished seed" if c is None else VERDICT_WORDS[word(c, "lower")]


def versus_pre_text(rows: list[dict]) -> str:
    """Per depth, every placement's final held-out loss minus Pre-LN's mean (nats), with its p over seeds and the rule's
    word for it (:func:`core.mixln.summary.difference`, :func:`core.stats.word`: ahead / behind at p < 0.05 with 3
    seeds a side, suggestive, no difference found, or one seed)."""
    parts = []
    for layers in dict.fromkeys(r["layers"] for r in rows):
        at = [r for r in rows if r["layers"] == layers and r["eval_loss_mean"] is not None]
        pre = next((r for r in at if r.get("placement") == "pre"), None)
        if pre is None:
            continue
        others = []
        for r in at:
            if r is pre:
                continue
            c = difference(r, pre)
            p = "" if c is None or c.p is None else f", p = {_p(c.p)}"
            others.append(f"{r['label']} {r['eval_loss_mean'] - pre['eval_loss_mean']:+.3f} ({_versus_word(c)}{p})")
        parts.append(f"**{layers} layers**, Pre-LN {_spread_text(pre, 'eval_loss', 3)}: " + ", ".join(others))
    return ("Final held-out loss against Pre-LN (nats; Welch over seeds; ahead / behind: p < 0.05 with 3 seeds a "
            "side, the rule of docs/statistics.md): " + "; ".join(parts) + ".") if parts else ""


def _compare_status(rows: list[dict], shown: Shown) -> str:
    parts = _best_per_depth(rows, lambda best: f"lowest mean held-out perplexity **{best['label']}**")
    diverged = sum(r["diverged"] for r in rows)
    versus = mix_vs_pre_text(rows)
    return (f"{len(rows)} runs at equal steps, mean ± std over seeds. " + "; ".join(parts) + "."
            + (f" {diverged} seed(s) diverged." if diverged else "") + (f" {versus}" if versus else "")
            + (f"\n\n{versus_pre_text(rows)}" if versus_pre_text(rows) else ""))


def _curve_key(metric: str) -> str:
    return "eval_loss" if metric == "loss" else "eval_perplexity"


def _curves_status(data: dict, shown: Shown) -> str:
    key, layers = _curve_key(data["metric"]), RUN_SETS[data["set"]].model["num_layers"]
    nd = 3 if data["metric"] == "loss" else 1
    ends = [f"{b['label']} {mean_std_text(b[key]['mean'][-1], b[key]['std'][-1], b[key]['n'][-1], nd)}"
            for b in data["bands"] if b[key]["mean"] and b[key]["mean"][-1] is not None]
    return f"Final held-out {data['metric']}, {layers} layers, mean ± std over seeds: " + "; ".join(ends) + "."


def _curves_tables(data: dict, shown: Shown) -> dict:
    key = _curve_key(data["metric"])
    return {"curves": [{"run": b["run"], "label": b["label"], "n": b["n"], "step": t, "mean": m, "std": sd, "min": lo,
                        "max": hi} for b in data["bands"]
                       for t, m, sd, lo, hi in zip(*(b[key][f] for f in ("steps", "mean", "std", "min", "max")))]}


def _curves_figures(data: dict, shown: Shown) -> dict:
    metric, layers = data["metric"], RUN_SETS[data["set"]].model["num_layers"]
    return {"curves": figures.loss_band_figure(
        data["bands"], metric, f"Held-out {metric} over seeds at {layers} layers (mean, band min-max)",
        reference=load_reference())}


def _lr_sweep_status(rows: list[dict], shown: Shown) -> str:
    best = {}
    for r in rows:
        if r["eval_loss"] is not None and (r["run"] not in best or r["eval_loss"] < best[r["run"]]["eval_loss"]):
            best[r["run"]] = r
    diverged = [f"{r['label']} at {r['lr']:g}" for r in rows if r["eval_loss"] is None]
    return ("Best peak rate per placement (one seed, so differences under the seed spread of the comparison are "
            "not resolved): " + "; ".join(f"{r['label']} {r['lr']:g}" for r in best.values()) + "."
            + (f" Diverged: {', '.join(diverged)}." if diverged else ""))


def _depth_status(profiles: list[dict], shown: Shown) -> str:
    n = sorted({p["n"] for p in profiles})
    diag = sorted({p["angular"]["n"] for p in profiles})
    return (f"Per-layer profiles of {len(profiles)} placement-depth groups: gradient norms over n = "
            f"{'/'.join(map(str, n))} seeds each (logged in training); angular distance and layer removal over the seeds "
            f"whose weights were kept when the diagnostics were computed (n = {'/'.join(map(str, diag))}), on "
            f"{RUN_SAMPLES} held-out windows of 64 tokens spread over Wikipedia, OpenWebText and the Python docs.")


def _depth_tables(profiles: list[dict], shown: Shown) -> dict:
    return {"depth": [{"set": p["set"], "run": p["run"], "layers": p["layers"], "n": p["n"], "layer": layer,
                       **{f"{k}_{stat}": p[k][stat][layer] if layer < len(p[k][stat]) else None
                          for k in ("angular", "grad_norm", "removal") for stat in ("mean", "min", "max")}}
                      for p in profiles for layer in range(p["layers"])]}


# ---- diagnostics of a run or any causal LM ------------------------------------------------------------------------
def _angular_tables(res: dict, shown: Shown) -> dict:
    return {"angular": [{"block_size": n, "first_layer": layer, "raw": res["raw"][i][j], "scaled": res["scaled"][i][j]}
                        for i, n in enumerate(res["block_sizes"]) for j, layer in enumerate(res["first_layers"])
                        if res["raw"][i][j] is not None]}


def _angular_figures(res: dict, shown: Shown) -> dict:
    kind = "committed run " if shown.request.run is not None else ""
    return {"angular": figures.angular_figure(res, f"Angular distance d(h_l, h_l+n): {kind}{res['subject']}")}


def _removal_status(results: list[dict], shown: Shown) -> str:
    one = results[0]
    worst = max(range(len(one["layers"])), key=lambda i: one["loss_increase"][i] or 0)
    return (f"Layer removal on **{one['subject']}**: baseline held-out perplexity {one['baseline_perplexity']:.1f}; "
            f"skipping layer {worst} hurts most (+{one['loss_increase'][worst]:.3f} nats); {windows_text(one)} "
            f"({shown.source_text}).")


def _removal_figures(results: list[dict], shown: Shown) -> dict:
    one = results[0]
    title = ("Layer removal: held-out loss increase when one layer is skipped"
             + (" (seed 0; the spread over seeds is in the depth chart)" if "label" in one else "")
             if len(results) > 1 or "label" in one else f"Layer removal: {one['subject']}")
    colours = [r.get("colour", PALETTE[i % len(PALETTE)]) for i, r in enumerate(results)]
    return {"removal": figures.removal_figure(results, title, colours)}


# ---- training -----------------------------------------------------------------------------------------------------
def _live_label(req: LiveRequest) -> str:
    return placement_label(req.placement, req.alpha if PLACEMENTS[req.placement].has_alpha else None)


def _live_status(data: dict, shown: Shown) -> str:
    req = shown.request
    history, label = data["history"], _live_label(req)
    if history["status"] == "stopped":
        return (f"**{label}**: **stopped** at step {history['train'][-1]['step'] if history['train'] else 0}; the "
                "curves so far are kept.")
    loss = history["train"][-1]["loss"] if history["train"] else float("nan")
    msg = f"**{label}**, {req.layers} layers: step {history['step']}/{req.steps}, training loss {loss:.3f}"
    if history["eval"]:
        msg += f", held-out perplexity {history['eval'][-1]['perplexity']:.1f}"
    if history["status"] != "running":
        msg += f". **{history['status']}** {history['message']}"
    return msg


def _live_figures(data: dict, shown: Shown, kind: str = "param") -> dict:
    req = shown.request
    history, label, colour = data["history"], _live_label(req), placement_colour(req.placement, req.alpha)
    loss = figures.loss_figure([{"label": label, "colour": colour, "history": history}],
                               f"Live run ({label}): training and held-out loss", data["levels"])
    logs, series = history.get("grad_norms", []), []
    if logs:
        layers = list(range(len(logs[0][kind])))
        series.append({"label": f"at init (step {logs[0]['step']})", "colour": colour, "layers": layers,
                       "values": logs[0][kind], "dash": "dot"})
        if len(logs) > 1:
            series.append({"label": f"step {logs[-1]['step']}", "colour": colour, "layers": layers,
                           "values": logs[-1][kind]})
    return {"loss": loss, "gradnorms": figures.gradnorm_figure(series, f"Live run ({label}): gradient norm per layer",
                                                               kind)}


def _reference_status(levels: dict, shown: Shown) -> str:
    uni, bi = levels["unigram"], levels["bigram"]
    return (f"On {levels['targets']:,} held-out targets ({levels['windows'][0]} windows of {levels['windows'][1]} "
            f"tokens): unigram {uni['loss']:.3f} nats (perplexity {uni['perplexity']:,.0f}), bigram {bi['loss']:.3f} "
            f"nats (perplexity {bi['perplexity']:,.0f}), counted on {levels['train_tokens']:,} training tokens"
            + (" (stored)" if shown.request.write else "") + ".")


def _train_status(meta: dict, shown: Shown) -> str:
    return (f"{meta['status']}: {meta['folder']} ({meta['norm']}, alpha {meta['alpha']}, {meta['steps_done']} steps, "
            f"{meta['wall_seconds']} s, {meta['train_tokens_per_s']} tokens/s)\nfinal held-out perplexity "
            f"{_fmt(meta['final_eval_perplexity'])} (loss {_fmt(meta['final_eval_loss'])})"
            + (f"\n{meta['message']}" if meta["message"] else ""))


def _reproduces_status(data: dict, shown: Shown) -> str:
    counts = {}
    for r in data["claims"]:
        for v in (r.get("depths") or {"": r["verdict"]}).values():
            counts[v] = counts.get(v, 0) + 1
    main = [r for r in data["claims"] if r["source"] == "Mix-LN"]
    return (f"What reproduces, computed now from the committed runs: {len(main)} claims of the Mix-LN paper and "
            f"{len(data['claims']) - len(main)} of its follow-ups, judged per depth: "
            + ", ".join(f"{n} {v}" for v, n in counts.items())
            + ". Each word follows one rule (docs/statistics.md): reproduced / opposite at p < 0.05 with 3 seeds a "
            "side (Welch over seeds for losses, each seed's ratio for gradient norms), suggestive at p < 0.10 or "
            "|t| > 2, not resolved with one seed, one model for angular distance and layer removal (seed 0, paired "
            "over 64 held-out windows).")


def _reproduces_tables(data: dict, shown: Shown) -> dict:
    keep = ("claim", "source", "paper", "ours", "verdict")
    return {"claims": [{k: r[k] for k in keep} for r in data["claims"]],
            "init": [{k: v for k, v in r.items() if k not in ("delta", "se", "t", "df", "p", "p_exact", "n_a", "n_b",
                                                               "test")} for r in data["init"]],
            "followups": data["followups"], "pending": data["pending"]}


def _reproduce_status(data: dict, shown: Shown) -> str:
    return "\n".join(f"{k}: {v['status']}, ppl {_fmt(v['final_eval_perplexity'])}, {v['wall_seconds']} s"
                     for k, v in data["runs"].items())


# ---- the registry -------------------------------------------------------------------------------------------------
ANALYSES: dict[str, Analysis] = {
    # committed runs (data: read from their folders)
    "loss": Analysis(
        RunsRequest, lambda runs, shown: f"Loss of {', '.join(r['label'] for r in runs)}.", compute.loss,
        tables=_loss_tables,
        figures=lambda runs, shown: {"loss": figures.loss_figure(runs, "Loss, seed 0 (the spread over seeds: below)",
                                                                 load_reference())},
        stem="mixln-loss", json=lambda runs: {"runs": [r["run"] for r in runs]}),
    "gradnorms": Analysis(
        GradnormsRequest,
        lambda results, shown: f"{shown.request.kind} gradient norms at initialisation and at step "
                               f"{results[0]['final_step']}.", compute.gradnorms,
        tables=lambda results, shown: {"gradnorms": [{"subject": r["run"], "layer": layer, "init": r["init"][layer],
                                                       "final": r["final"][layer]}
                                                      for r in results for layer in r["layers"]]},
        figures=_gradnorm_figures, stem="mixln-gradnorms"),
    "compare": Analysis(
        CompareRequest, _compare_status, compute.compare, tables=lambda rows, shown: {"compare": rows},
        figures=lambda rows, shown: {"compare": figures.compare_figure(rows, reference=load_reference())},
        stem="mixln-compare"),
    "sweep": Analysis(
        NoInput, lambda rows, shown: f"Alpha sweep over {len(rows)} run groups; " + "; ".join(
            _best_per_depth(rows, lambda best: f"best alpha {best['alpha']:g}")) + ".", compute.sweep,
        tables=lambda rows, shown: {"sweep": rows},
        figures=lambda rows, shown: {"sweep": figures.sweep_figure(rows, reference=load_reference())},
        stem="mixln-sweep"),
    "curves": Analysis(CurvesRequest, _curves_status, compute.curves, tables=_curves_tables, figures=_curves_figures,
                       stem=lambda data, shown: f"mixln-{shown.request.metric}-curves"),
    "lr-sweep": Analysis(
        NoInput, _lr_sweep_status, compute.lr_sweep, tables=lambda rows, shown: {"lr-sweep": rows},
        figures=lambda rows, shown: {"lr-sweep": figures.lr_sweep_figure(rows, reference=load_reference())},
        stem="mixln-lr-sweep"),
    "reproduces": Analysis(ReproducesRequest, _reproduces_status, compute.reproduces, tables=_reproduces_tables,
                           stem="mixln-reproduces"),
    "depth": Analysis(DepthRequest, _depth_status, compute.depth, tables=_depth_tables,
                      figures=lambda profiles, shown: {"depth": figures.depth_figure(profiles)}, stem="mixln-depth"),
    # diagnostics of a run or any causal LM (data: looked up under the weights' fingerprint)
    "angular": Analysis(
        AngularRequest,
        lambda res, shown: f"Angular distance of **{res['subject']}**: {res['num_layers']} layers, "
                           f"{windows_text(res)} ({shown.source_text}).",
        compute.angular, stored_as="mixln/angular", schema=schemas.ANGULAR, tables=_angular_tables,
        figures=_angular_figures, stem=lambda res, shown: f"mixln-angular-{Path(shown.request.ref).name}"),
    "removal": Analysis(
        RemovalRequest, _removal_status, compute.removal, stored_as=compute.STORED["removal"],
        schema=compute.STORED_SCHEMA["removal"], assembled=True,
        tables=lambda results, shown: {"removal": [row for r in results for row in
                                                   _rows_of({k: v for k, v in r.items() if k != "colour"})]},
        figures=_removal_figures, stem="mixln-removal"),
    "model-gradnorms": Analysis(
        ModelGradnormsRequest,
        lambda results, shown: f"Gradient norms of **{results[0]['subject']}** on {shown.request.samples} held-out "
                               "sequences.", compute.model_gradnorms, stored_as=compute.STORED["model-gradnorms"],
        schema=compute.STORED_SCHEMA["model-gradnorms"], assembled=True,
        tables=lambda results, shown: {"gradnorms": [{"subject": r["subject"], "layer": layer,
                                                       "param": r["param"][layer], "input": r["input"][layer]}
                                                      for r in results for layer in r["layers"]]},
        figures=lambda results, shown: {"gradnorms": figures.gradnorm_figure(figures.gradnorm_series(results))},
        stem="mixln-gradnorms"),
    # training (data: the live run's history and reference levels, a run.json, the reproduced runs): the live run,
    # training and reproducing are shown by their actions (they stream and write files), the levels computed
    "live": Analysis(LiveRequest, _live_status, figures=_live_figures, stem="mixln-live",
                     json=lambda data: data["history"]),
    "reference": Analysis(
        ReferenceRequest, _reference_status, compute.reference_levels,
        tables=lambda levels, shown: {"reference": [{"model": m, "loss_nats": levels[m]["loss"],
                                                     "perplexity": levels[m]["perplexity"]}
                                                    for m in ("unigram", "bigram")]},
        stem="mixln-reference"),
    "train": Analysis(TrainRequest, _train_status, stem="mixln-train"),
    "reproduce": Analysis(ReproduceRequest, _reproduce_status, stem="mixln-reproduce"),
}
view = view_function(ANALYSES)  # view(name, found, request=None, **options): what a found result shows
