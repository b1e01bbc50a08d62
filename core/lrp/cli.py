"""``python -m core lrp ...``: train the embedded MambaLRP models and explain a text prediction.

    python -m core lrp train {sentiment,lm,vision} [--out assets/models/NAME] [--seed 0] [--quick]
    python -m core lrp explain --model NAME --text "..." [--method mambalrp,random] [--target N] [--out F.html] [--json]
    python -m core lrp precompute-examples
    python -m core lrp faithfulness --model NAME [--split test] [-n 100] [--methods a,b] [--steps 10] [--out DIR]
    python -m core lrp conservation --model NAME [--split test] [-n 100] [--methods a,b] [--out DIR]
    python -m core lrp long-range [--model mamba-lm] [-n 50] [--k 10] [--max-tokens 128] [--out DIR]
    python -m core lrp key-token [-n 100] [--k 1] [--out DIR]
    python -m core lrp precompute-evaluation [--only mnist,sentiment,lm,key-token] [--out assets/lrp/evaluation]
"""
from __future__ import annotations

import json
import sys

from core.errors import BadInputError


def _progress(fraction: float, message: str) -> None:
    print(f"... [{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)


def _train_args(p) -> None:
    p.add_argument("recipe", choices=["sentiment", "lm", "vision"], help="which model to train")
    p.add_argument("--out", default=None, help="output folder (default: assets/models/<model name>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run with a tiny model")
    p.add_argument("--init-from", default=None,
                   help="sentiment only: a mamba-lm folder whose tokenizer and backbone initialise the classifier")
    p.add_argument("--epochs", type=int, default=None, help="sentiment / vision: override the recipe's epochs")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def run_train(args) -> dict:
    import torch

    from core.lrp import recipes
    from core.paths import ASSETS_DIR

    if args.threads < 1:
        raise BadInputError("--threads must be >= 1.")
    if args.init_from is not None and args.recipe != "sentiment":
        raise BadInputError("--init-from applies to the sentiment recipe only.")
    torch.set_num_threads(args.threads)
    overrides = {"init_from": args.init_from} if args.init_from is not None else {}
    if args.epochs is not None:
        if args.recipe == "lm" or args.epochs < 1:
            raise BadInputError("--epochs must be >= 1 and applies to the sentiment and vision recipes.")
        overrides["epochs"] = args.epochs
    cfg = recipes.recipe_for(args.recipe, seed=args.seed, quick=args.quick, **overrides)
    _, train_fn, name = recipes.RECIPES[args.recipe]
    out = args.out or str(ASSETS_DIR / "models" / name)
    command = f"python -m core lrp train {args.recipe} --seed {args.seed}" + (" --quick" if args.quick else "")
    if args.init_from is not None:
        command += f" --init-from {args.init_from}"
    if args.epochs is not None:
        command += f" --epochs {args.epochs}"
    if args.threads != 2:  # float sums, hence the weights, depend on the thread count
        command += f" --threads {args.threads}"
    metrics = train_fn(cfg, out, progress=_progress, recipe_command=command)
    result = {"model": name, "out": str(out), "recipe": command, **metrics}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(f"{k}: {v}" for k, v in result.items()))
    return result


def _explain_args(p) -> None:
    from core.lrp import METHODS

    p.add_argument("--model", required=True, help="a registered text model (mamba-sentiment, mamba-lm) or a folder")
    p.add_argument("--text", required=True, help="the input text")
    p.add_argument("--method", default="mambalrp", help=f"one or more (comma-separated) of {', '.join(METHODS)}")
    p.add_argument("--target", type=int, default=None,
                   help="class index (classifier) or next-token id (LM); default: the top prediction")
    p.add_argument("--out", default=None, help="also write the result to FILE.json, .csv or .html (heatmap)")


def run_explain(args) -> dict:
    """Relevances of one text (``core.lrp.demo.text_result``, the tab's computation), every method in ``--method``."""
    from core.lrp import demo

    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    res = demo.text_result(args.model, args.text, methods, args.target, {})
    result = {"model": args.model, "target": res["target"], "target_name": res["target_name"], "note": res["note"],
              "tokens": res["tokens"], "methods": {m: {k: r[k] for k in ("relevance", "logit", "total", "absorbed")}
                                                   for m, r in res["methods"].items()}}
    if len(methods) == 1:  # flat fields for one method
        m = result["methods"][methods[0]]
        result.update(method=methods[0], logit=m["logit"], total=m["total"], absorbed=m["absorbed"],
                      tokens=[{"text": t, "relevance": r} for t, r in zip(res["tokens"], m["relevance"])])
    if args.out:
        from pathlib import Path
        from core.figures import write_output
        from core.lrp.figures import token_figure
        out = Path(args.out)
        suffix = out.suffix.lower()
        write_output(out, data=res, rows=demo.rows(res), figure=token_figure(res) if suffix == ".html" else None)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        lines = [f"{args.model}: target {res['target']} ({res['target_name']!r})" + (f"; {res['note']}" if res["note"]
                                                                                     else "")]
        for m, r in res["methods"].items():
            lines.append(f"{r['label']}: logit {r['logit']:.4f}, sum of relevances {r['total']:.4f}")
            lines += [f"  {t!r:>18}  {v:+.4f}" for t, v in zip(res["tokens"], r["relevance"])]
        print("\n".join(lines))
    return result


def _examples_args(p) -> None:
    p.add_argument("--out", default=None, help="file (default assets/lrp/examples.json)")


def run_precompute_examples(args) -> dict:
    """Recompute the tab's precomputed text and image examples (``core.lrp.demo.precompute_examples``)."""
    from core.lrp import demo

    path = demo.precompute_examples(args.out or demo.EXAMPLES,
                                    log=lambda m: print(f"... {m}", file=sys.stderr, flush=True))
    result = {"written": str(path), "entries": len(demo.read_examples(path))}
    print(json.dumps(result) if args.json else f"wrote {result['entries']} examples to {path}")
    return result


# ------------------------------------------------------------------------------------------------
# dataset-level evaluation: faithfulness, conservation, long range, key-token ground truth
# ------------------------------------------------------------------------------------------------
PRECOMPUTE = {  # what the tab shows: (file stem, runner, kwargs); n sized for ~10 min each on a 2-core CPU
    "mnist": ("faithfulness-vision-mamba-mnist", "evaluate", {"model_ref": "vision-mamba-mnist", "n": 100}),
    "sentiment": ("faithfulness-mamba-sentiment", "evaluate", {"model_ref": "mamba-sentiment", "n": 150}),
    "lm": ("long-range-mamba-lm", "long_range_evaluation",
           {"model_ref": "mamba-lm", "n": 40, "options": {"integrated_gradients": {"n_steps": 8}}}),
    "key-token": ("key-token", "key_token_evaluation", {"n": 100}),
}


def _eval_common(p, model_default: str | None = None, n_default: int = 100) -> None:
    if model_default is None:
        p.add_argument("--model", required=True, help="mamba-sentiment, vision-mamba-mnist, mamba-lm or a folder")
    else:
        p.add_argument("--model", default=model_default, help=f"a Mamba language model (default {model_default})")
    p.add_argument("--dataset", default=None, help="default: movie-sentiment / mnist-5k / wikipedia-paragraphs")
    p.add_argument("--split", default="test")
    p.add_argument("-n", type=int, default=n_default, help="number of samples (a seeded random subset)")
    p.add_argument("--methods", default=None, help="comma-separated registry names (default: all)")
    p.add_argument("--seed", type=int, default=0, help="which random subset")
    p.add_argument("--target", choices=["predicted", "gold"], default="predicted",
                   help="explain the model's prediction (default) or the gold label / true next token")
    p.add_argument("--ig-steps", type=int, default=None, help="Integrated Gradients steps (default 16)")
    p.add_argument("--smoothgrad-samples", type=int, default=None, help="SmoothGrad noisy copies (default 8)")
    p.add_argument("--out", default=None, help="a folder (writes NAME.json, .csv, .html) or one FILE.json/.csv/.html")
    p.add_argument("--no-cache", action="store_true", help="recompute even if the results cache has it")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def _faithfulness_args(p) -> None:
    _eval_common(p)
    p.add_argument("--steps", type=int, default=10, help="K, flip steps of the MoRF / LeRF curves")
    p.add_argument("--baseline", choices=["zero", "mean"], default="zero", help="replacement embedding")


def _long_range_args(p) -> None:
    _eval_common(p, model_default="mamba-lm", n_default=50)
    p.add_argument("--k", type=int, default=10, help="how many most relevant tokens per sample")
    p.add_argument("--max-tokens", type=int, default=128, help="context length (shorter passages are skipped)")


def _key_token_args(p) -> None:
    p.add_argument("-n", type=int, default=100, help="number of test sequences")
    p.add_argument("--k", type=int, default=1, help="a hit: the key token is among the top-k")
    p.add_argument("--methods", default=None, help="comma-separated registry names (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ig-steps", type=int, default=None)
    p.add_argument("--smoothgrad-samples", type=int, default=None)
    p.add_argument("--out", default=None, help="a folder (writes key-token.json, .csv) or one FILE.json/.csv")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--threads", type=int, default=2)


def _precompute_args(p) -> None:
    p.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(PRECOMPUTE)}")
    p.add_argument("--out", default=None, help="folder (default assets/lrp/evaluation)")
    p.add_argument("-n", type=int, default=None, help="override every item's sample count (smoke runs)")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--threads", type=int, default=2)


def _setup(args) -> dict:
    """Threads and per-method options from the common flags; raises BadInputError on bad values."""
    import torch

    if args.threads < 1:
        raise BadInputError("--threads must be >= 1.")
    torch.set_num_threads(args.threads)
    options = {}
    if getattr(args, "ig_steps", None) is not None:
        if args.ig_steps < 1:
            raise BadInputError("--ig-steps must be >= 1.")
        options["integrated_gradients"] = {"n_steps": args.ig_steps}
    if getattr(args, "smoothgrad_samples", None) is not None:
        if args.smoothgrad_samples < 1:
            raise BadInputError("--smoothgrad-samples must be >= 1.")
        options["smoothgrad"] = {"n_samples": args.smoothgrad_samples}
    return options


def evaluation_rows(result: dict) -> list[dict]:
    """One table row per method of any evaluation result (the CSV and the text summary)."""
    rows = []
    for m in result["methods"]:
        row = {"method": m, "label": result["labels"][m]}
        if "faithfulness" in result:
            f = result["faithfulness"][m]
            row.update(delta_af=f["delta_af"], delta_af_sem=f["delta_af_sem"], area_morf=f["mean_area_morf"],
                       area_lerf=f["mean_area_lerf"])
        if "conservation" in result:
            c = result["conservation"][m]
            row.update(conservation_mean_abs_error=c["mean_abs_error"], conservation_mean_rel_error=c["mean_rel_error"])
        if "methods_stats" in result:
            s = result["methods_stats"][m]
            row.update(mean_distance=s["mean_distance"], median_distance=s["median_distance"],
                       share_beyond_half=s["share_beyond_half"])
        if "hit_rate" in result:
            row["hit_rate"] = result["hit_rate"][m]
            if "hit_rate_std" in result:  # mean over seeds, with its spread
                row.update(hit_rate_std=result["hit_rate_std"][m], n_seeds=result["n_seeds"])
        if "timing" in result and "explain_s" in result["timing"]:
            row["explain_s"] = result["timing"]["explain_s"][m]
        rows.append(row)
    return rows


def evaluation_figure(result: dict):
    """A plotly figure of a result: MoRF/LeRF curves, top-k distance histograms, or hit rates."""
    import plotly.graph_objects as go

    from core.figures import PALETTE, style

    fig = go.Figure()
    if "faithfulness" in result:
        for i, m in enumerate(result["methods"]):
            f, colour = result["faithfulness"][m], PALETTE[i % len(PALETTE)]
            label = f"{result['labels'][m]} (dAF {f['delta_af']:.2f})"
            fig.add_scatter(x=result["fractions"], y=f["morf"], name=label + " MoRF", line={"color": colour},
                            legendgroup=m)
            fig.add_scatter(x=result["fractions"], y=f["lerf"], name=label + " LeRF",
                            line={"color": colour, "dash": "dot"}, legendgroup=m)
        return style(fig, f"Flip curves: {result['model']} on {result['dataset']} {result['split']} "
                          f"(n = {result['n_done']})", "share of units flipped", "target logit")
    if "methods_stats" in result:
        centres = [(a + b) / 2 for a, b in zip(result["bins"][:-1], result["bins"][1:])]
        for m in result["methods"]:
            fig.add_bar(x=centres, y=result["methods_stats"][m]["histogram"], name=result["labels"][m])
        return style(fig, f"Top-{result['k']} relevant tokens: {result['model']} (n = {result['n_done']})",
                     "distance from the predicted token (tokens)", "count")
    if "conservation" in result:
        for m in result["methods"]:
            c = result["conservation"][m]
            fig.add_scatter(x=c["logits"], y=c["sums"], mode="markers", name=result["labels"][m])
        return style(fig, f"Conservation: {result['model']} (n = {result['n_done']})", "explained logit",
                     "sum of relevances")
    names = result["methods"]
    fig.add_bar(x=[result["labels"][m] for m in names], y=[result["hit_rate"][m] for m in names])
    return style(fig, f"Key-token hit rate (top-{result['k']}, n = {result['n_done']})", "method", "hit rate")


def write_evaluation(out: str, stem: str, result: dict) -> list[str]:
    """``out`` a folder -> ``stem.json``, ``stem.csv`` and ``stem.html`` in it; else the one file ``out``."""
    from pathlib import Path

    from core.figures import write_output

    path = Path(out)
    if path.suffix.lower() in (".json", ".csv", ".html"):
        targets = [path]
    elif path.suffix:
        raise BadInputError(f"--out {out}: give a folder or a file ending in .json, .csv or .html.")
    else:
        if not path.is_dir():
            raise BadInputError(f"--out {out}: the folder does not exist.", fix="create it first.")
        targets = [path / f"{stem}{s}" for s in (".json", ".csv", ".html")]
    written = []
    for t in targets:
        suffix = t.suffix.lower()
        written.append(str(write_output(t, data=result, rows=evaluation_rows(result) if suffix == ".csv" else None,
                                        figure=evaluation_figure(result) if suffix == ".html" else None)))
    return written


def _report(args, stem: str, result: dict, columns: list[str]) -> dict:
    if args.out:
        result = {**result, "written": write_evaluation(args.out, stem, result)}
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return result
    rows = evaluation_rows(result)
    head = (f"{result['analysis']}: {result.get('model', '')} {result.get('dataset', '')} "
            f"{result.get('split', '')} n = {result['n_done']}" + ("" if result["complete"] else " (stopped early)"))
    lines = [head, "  ".join(f"{c:>16}" for c in ["method"] + columns)]
    for r in rows:
        cells = [r["method"]] + [("-" if r.get(c) is None else f"{r[c]:.4g}") for c in columns]
        lines.append("  ".join(f"{c:>16}" for c in cells))
    lines += [f"written to {w}" for w in result.get("written", [])]
    print("\n".join(lines))
    return result


def _eval_kwargs(args, options: dict) -> dict:
    return {"dataset": args.dataset, "split": args.split, "n": args.n, "methods": args.methods, "seed": args.seed,
            "target": args.target, "options": options, "progress": _progress, "cache": not args.no_cache}


def run_faithfulness(args) -> dict:
    from core.lrp.evaluation import evaluate

    options = _setup(args)
    result = evaluate(args.model, steps=args.steps, baseline=args.baseline, **_eval_kwargs(args, options))
    stem = f"faithfulness-{_stem(args.model)}"
    return _report(args, stem, result, ["delta_af", "area_morf", "area_lerf", "conservation_mean_abs_error"])


def run_conservation(args) -> dict:
    from core.lrp.evaluation import evaluate

    options = _setup(args)
    result = evaluate(args.model, faithfulness=False, **_eval_kwargs(args, options))
    return _report(args, f"conservation-{_stem(args.model)}", result,
                   ["conservation_mean_abs_error", "conservation_mean_rel_error"])


def run_long_range(args) -> dict:
    from core.lrp.evaluation import long_range_evaluation

    options = _setup(args)
    result = long_range_evaluation(args.model, k=args.k, max_tokens=args.max_tokens, **_eval_kwargs(args, options))
    return _report(args, f"long-range-{_stem(args.model)}", result,
                   ["mean_distance", "median_distance", "share_beyond_half"])


def run_key_token(args) -> dict:
    from core.lrp.evaluation import key_token_evaluation

    options = _setup(args)
    result = key_token_evaluation(n=args.n, methods=args.methods, k=args.k, seed=args.seed, options=options,
                                  progress=_progress, cache=not args.no_cache)
    return _report(args, "key-token", result, ["hit_rate", "hit_rate_std"])


def _stem(model: str) -> str:
    from pathlib import Path

    return Path(model).name or "model"


def run_precompute_evaluation(args) -> dict:
    """Recompute every precomputed result the tab shows (assets/lrp/evaluation/); one step, re-runnable."""
    import time
    from pathlib import Path

    from core.lrp import evaluation
    from core.paths import ASSETS_DIR

    _setup(args)
    only = [x.strip() for x in args.only.split(",")] if args.only else list(PRECOMPUTE)
    unknown = [x for x in only if x not in PRECOMPUTE]
    if unknown:
        raise BadInputError(f"Unknown item(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(PRECOMPUTE)}.")
    if args.n is not None and args.n < 1:
        raise BadInputError("-n must be >= 1.")
    out = Path(args.out) if args.out else ASSETS_DIR / "lrp" / "evaluation"
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for item in only:
        stem, runner, kwargs = PRECOMPUTE[item]
        kwargs = {**kwargs, **({"n": args.n} if args.n is not None else {})}
        t0 = time.perf_counter()
        print(f"... {item}: {runner}({kwargs})", file=sys.stderr, flush=True)
        result = getattr(evaluation, runner)(**kwargs, progress=_progress, cache=not args.no_cache)
        n_flag = f" -n {args.n}" if args.n is not None else ""
        result = {**result, "cached": False,  # the file is the result, wherever it came from
                  "command": f"python -m core lrp precompute-evaluation --only {item}{n_flag}"}
        written = [str(write_output_json(out / f"{stem}.json", result))]
        summary[item] = {"written": written, "seconds": round(time.perf_counter() - t0, 1), "n_done": result["n_done"]}
    present = [k for k in PRECOMPUTE if (out / f"{PRECOMPUTE[k][0]}.json").exists()]
    index = {"items": {k: f"{PRECOMPUTE[k][0]}.json" for k in present},
             "command": "python -m core lrp precompute-evaluation"}
    write_output_json(out / "index.json", index)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print("\n".join(f"{k}: {v['n_done']} samples, {v['seconds']} s -> {', '.join(v['written'])}"
                        for k, v in summary.items()))
    return summary


def write_output_json(path, data):
    from core.figures import write_output

    return write_output(path, data=data)


def register(groups) -> None:
    """Add the ``lrp`` commands to the CLI registry (``core.cli.CommandGroups``)."""
    groups.command("lrp", "train", "train an embedded MambaLRP model (sentiment, lm, vision) and write its card",
                   _train_args)(run_train)
    groups.command("lrp", "explain", "per-token relevances of a text model's prediction", _explain_args)(run_explain)
    groups.command("lrp", "faithfulness", "MoRF/LeRF flip curves and Delta A^F per method over a dataset split",
                   _faithfulness_args)(run_faithfulness)
    groups.command("lrp", "conservation", "sum of relevances vs the explained logit per method over a split",
                   _eval_common)(run_conservation)
    groups.command("lrp", "long-range", "distances of the most relevant tokens of a language model's next token",
                   _long_range_args)(run_long_range)
    groups.command("lrp", "key-token", "ground truth: how often each method finds the planted key token",
                   _key_token_args)(run_key_token)
    groups.command("lrp", "precompute-examples", "recompute the tab's text and image examples (assets/lrp/examples.json)",
                   _examples_args)(run_precompute_examples)
    groups.command("lrp", "precompute-evaluation", "recompute the evaluation results the tab shows "
                   "(assets/lrp/evaluation/)", _precompute_args)(run_precompute_evaluation)
