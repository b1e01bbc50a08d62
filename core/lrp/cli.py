"""``python -m core lrp ...``: MambaLRP from the command line, on :mod:`core.lrp`'s service (the tab's functions).

    python -m core lrp train {sentiment,lm,vision,sentiment-mamba2,sentiment-hybrid} [--out DIR] [--quick]
    python -m core lrp explain --model NAME --text "..." [--method mambalrp,random] [--target N] [--out F.html] [--json]
    python -m core lrp explain --model hybrid-sentiment --text "..." --layers   # per layer: SSM vs attention
    python -m core lrp compare --models smollm2-135m,mamba-lm --text "..." [--method mambalrp] [--out DIR] [--json]
    python -m core lrp precompute-examples
    python -m core lrp faithfulness --model NAME [--split test] [-n 100] [--methods a,b] [--steps 10] [--out DIR]
    python -m core lrp conservation --model NAME [--split test] [-n 100] [--methods a,b] [--out DIR]
    python -m core lrp long-range [--model mamba-lm] [-n 50] [--k 10] [--max-tokens 128] [--out DIR]
    python -m core lrp key-token [-n 100] [--k 1] [--family mamba|mamba2|hybrid] [--out DIR]
    python -m core lrp agreement [--model mamba-lm] [-n 300] [--methods a,b] [--out DIR]   # subject-verb agreement
    python -m core lrp precompute-evaluation [--only mnist,sentiment,lm,key-token,...] [--out assets/lrp/evaluation]
                                             # then python tools/docs.py rewrites the docs' generated tables
    python -m core lrp bias-audit [--model mamba-sentiment] [--inputs FILE.jsonl] [--out DIR]
    python -m core lrp precompute-bias                 # the committed audit (assets/lrp/bias.json)
    python -m core lrp batch --model NAME --in texts.csv|.jsonl --out results.parquet [--method a,b] [--top-k 5]

``--out`` takes a folder (every file the tab offers) or one ``FILE.json|.csv|.html``.
"""
from __future__ import annotations

from pathlib import Path

import sys

import core.lrp as lrp
from core.batch_cli import register as register_batch
from core.lrp import BATCH as BATCH_KIND
from core.cli_common import ProgressBar, emit, set_threads, table
from core.errors import BadInputError


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def _threads(n: int) -> None:
    set_threads(n)


# ---- train ------------------------------------------------------------------------------------------------------
def _train_args(p) -> None:
    p.add_argument("recipe", choices=lrp.recipe_names(), help="which model to train")
    p.add_argument("--out", default=None, help="output folder (default: assets/models/<model name>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run with a tiny model")
    p.add_argument("--init-from", default=None,
                   help="sentiment (Mamba-1) only: a mamba-lm folder whose tokenizer and backbone initialise the "
                        "classifier")
    p.add_argument("--epochs", type=int, default=None, help="sentiment / vision: override the recipe's epochs")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def run_train(args) -> dict:
    res = lrp.train_result(args.recipe, args.seed, args.quick, args.out, args.init_from, args.epochs, args.threads,
                           progress=ProgressBar())
    emit(args, res.data, res.status)
    return res.data


# ---- explain ----------------------------------------------------------------------------------------------------
def _explain_args(p) -> None:
    p.add_argument("--model", required=True, help="a registered text model (mamba-sentiment, mamba-lm) or a folder")
    p.add_argument("--text", required=True, help="the input text")
    p.add_argument("--method", default="mambalrp", help=f"one or more (comma-separated) of {', '.join(lrp.METHODS)}")
    p.add_argument("--target", type=int, default=None,
                   help=f"class index (classifier) or next-token id (LM); default (or {lrp.TOP}): the top prediction")
    p.add_argument("--out", default=None, help="also write the result to FILE.json, .csv or .html (heatmap), or a folder")
    p.add_argument("--layers", action="store_true",
                   help="instead: where MambaLRP's relevance passes, per layer (SSM, attention, MLP) and token "
                        "(core.lrp.flow_result; a hybrid shows both kinds)")


def run_explain(args) -> dict:
    """Relevances of one text (``core.lrp.text_result``, the tab's computation), every method in ``--method``;
    with ``--layers`` where MambaLRP's relevance passes, layer by layer (``core.lrp.flow_result``)."""
    if args.layers:
        return _explain_layers(args)
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    res = lrp.text_result(args.model, args.text, methods, args.target)
    r = res.data
    result = {"model": args.model, "target": r["target"], "target_name": r["target_name"], "note": r["note"],
              "tokens": r["tokens"], "methods": {m: {k: v[k] for k in ("relevance", "logit", "total", "absorbed")}
                                                 for m, v in r["methods"].items()}}
    if len(methods) == 1:  # flat fields for one method
        m = result["methods"][methods[0]]
        result.update(method=methods[0], logit=m["logit"], total=m["total"], absorbed=m["absorbed"],
                      tokens=[{"text": t, "relevance": v} for t, v in zip(r["tokens"], m["relevance"])])
    lines = [f"{args.model}: target {r['target']} ({r['target_name']!r})" + (f"; {r['note']}" if r["note"] else "")]
    for m in r["methods"].values():
        lines.append(f"{m['label']}: logit {m['logit']:.4f}, sum of relevances {m['total']:.4f}")
        lines += [f"  {t!r:>18}  {v:+.4f}" for t, v in zip(r["tokens"], m["relevance"])]
    emit(args, result, "\n".join(lines), res)
    return result


def _explain_layers(args) -> dict:
    """Where the MambaLRP relevance of one text passes: per layer (SSM, attention, MLP) and token, and by kind."""
    res = lrp.flow_result(args.model, args.text, args.target)
    r = res.data
    result = {"model": args.model, "target": r["target"], "target_name": r["target_name"], "logit": r["logit"],
              "total": r["total"], "absorbed": r["absorbed"], "residual": r["residual"], "tokens": r["tokens"],
              "shares": res.views["shares"], "blocks": r["blocks"]}
    lines = [res.status] + [f"  L{row['layer']:<3} {row['kind']:<17} in {row['relevance in']:+.4f}  out "
                            f"{row['relevance out']:+.4f}  share {100 * row['share of |relevance|']:.1f}%"
                            for row in res.tables["blocks"]]
    emit(args, result, "\n".join(lines), res)
    return result


def _compare_args(p) -> None:
    p.add_argument("--models", default=",".join(lrp.COMPARE_MODELS),
                   help=f"two text models or folders, comma-separated (default {','.join(lrp.COMPARE_MODELS)})")
    p.add_argument("--text", required=True, help="the input text, the same for both")
    p.add_argument("--method", default="mambalrp", help=f"one of {', '.join(lrp.METHODS)}")
    p.add_argument("--out", default=None, help="also write FILE.json, .csv (per word), .html (the figure), or a folder")


def run_compare(args) -> dict:
    """One text on two models, side by side (``core.lrp.compare_result``): per word and how local each one is."""
    res = lrp.compare_result(args.models, args.text, args.method)
    lines = [res.status.replace("**", "")] + [
        f"  {s['model']:<22} {100 * s['share_last_word']:5.1f}% of |R| on the last word, "
        f"{100 * s['share_last_3_words']:5.1f}% in the last 3, half within {s['words_for_half']}" for s in res.data["models"]]
    emit(args, res.data, "\n".join(lines), res)
    return res.data


def _examples_args(p) -> None:
    p.add_argument("--out", default=None, help="example store (default assets/lrp/examples.json)")


def run_precompute_examples(args) -> dict:
    """Recompute the tab's precomputed text and image examples (``core.lrp.precompute_examples``)."""
    path = lrp.precompute_examples(args.out, log=_log)
    result = {"written": str(path), "entries": len(lrp.default_requests())}
    emit(args, result, f"wrote {result['entries']} examples to {path}")
    return result


# ---- dataset-level evaluation: faithfulness, conservation, long range, key-token ground truth -------------------
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
    p.add_argument("--family", default="mamba", help="the classifier's backbone: mamba (the paper's), mamba2 or hybrid")
    p.add_argument("--out", default=None, help="a folder (writes key-token.json, .csv, .html) or one FILE")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--threads", type=int, default=2)


def _precompute_args(p) -> None:
    p.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(lrp.EVALUATION_ITEMS)}")
    p.add_argument("--out", default=None, help="folder (default assets/lrp/evaluation)")
    # a store it adds its own files to (its index.json says so): no --overwrite needed there; any other folder that
    # holds something is the user's and is refused
    p.set_defaults(out_adds=lambda out: (Path(out) / "index.json").is_file())
    p.add_argument("-n", type=int, default=None, help="override every item's sample count (smoke runs)")
    p.add_argument("--no-cache", action="store_true", help="(kept for old command lines: it always recomputes)")
    p.add_argument("--threads", type=int, default=2)


def _method_options(args) -> dict:
    """Threads and per-method options from the common flags; raises BadInputError on bad values."""
    _threads(args.threads)
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


def _eval_kwargs(args) -> dict:
    return {"dataset": args.dataset, "split": args.split, "seed": args.seed, "target": args.target,
            "options": _method_options(args), "cache": not args.no_cache}


def _report(args, res, columns: list[str]) -> dict:
    r = res.data
    head = (f"{r['analysis']}: {r.get('model', '')} {r.get('dataset', '')} {r.get('split', '')} n = {r['n_done']}"
            + ("" if r["complete"] else " (stopped early)"))
    lines = [head, "  ".join(f"{c:>16}" for c in ["method"] + columns)]
    for row in res.tables["methods"]:
        cells = [row["method"]] + [("-" if row.get(c) is None else f"{row[c]:.4g}") for c in columns]
        lines.append("  ".join(f"{c:>16}" for c in cells))
    emit(args, r, "\n".join(lines), res)
    return r


def run_faithfulness(args) -> dict:
    res = lrp.evaluation_result(args.model, args.n, args.steps, args.methods, ProgressBar(), baseline=args.baseline,
                                **_eval_kwargs(args))
    return _report(args, res, ["delta_af", "area_morf", "area_lerf", "conservation_mean_abs_error"])


def run_conservation(args) -> dict:
    res = lrp.evaluation_result(args.model, args.n, lrp.EVAL_STEPS, args.methods, ProgressBar(), faithfulness=False,
                                **_eval_kwargs(args))
    return _report(args, res, ["conservation_mean_abs_error", "conservation_mean_rel_error"])


def run_long_range(args) -> dict:
    res = lrp.long_range_result(args.model, args.n, args.methods, args.k, ProgressBar(), max_tokens=args.max_tokens,
                                **_eval_kwargs(args))
    return _report(args, res, ["mean_distance", "median_distance", "share_beyond_half"])


def run_key_token(args) -> dict:
    options = _method_options(args)
    res = lrp.key_token_result(args.n, args.methods, args.k, ProgressBar(), seed=args.seed, options=options,
                               cache=not args.no_cache, family=args.family)
    return _report(args, res, ["hit_rate", "hit_rate_std"])


def _agreement_args(p) -> None:
    p.add_argument("--model", default="mamba-lm", help="a causal language model explain() accepts (default mamba-lm)")
    p.add_argument("-n", type=int, default=lrp.AGREEMENT_N, help="generated sentences (default 300)")
    p.add_argument("--methods", default=None, help="comma-separated registry names (default: all)")
    p.add_argument("--seed", type=int, default=0, help="which sentences")
    p.add_argument("--ig-steps", type=int, default=None)
    p.add_argument("--smoothgrad-samples", type=int, default=None)
    p.add_argument("--out", default=None, help="a folder (writes agreement-MODEL.json, .csv, .html) or one FILE")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--threads", type=int, default=2)


def run_agreement(args) -> dict:
    """Subject-verb agreement ground truth (core.lrp.agreement_result): MRR and pointing accuracy of the subject."""
    options = _method_options(args)
    res = lrp.agreement_result(args.model, args.n, args.methods, ProgressBar(), seed=args.seed, options=options,
                               cache=not args.no_cache)
    rows = res.tables["methods"]
    shown = ("method", "MRR", "pointing accuracy (%)", "MambaLRP − it, MRR", "MRR: MambaLRP ahead?")
    lines = [res.status.replace("**", ""), table([{k: r.get(k, "") for k in shown} for r in rows])]
    emit(args, res.data, "\n".join(lines), res)
    return res.data


def _bias_args(p) -> None:
    p.add_argument("--model", default="mamba-sentiment", help="a Mamba classifier (default mamba-sentiment)")
    p.add_argument("--method", default="mambalrp", help="the method whose relevance is audited")
    p.add_argument("--target", type=int, default=1, help="the class explained (default 1: positive)")
    p.add_argument("--inputs", default=None, metavar="FILE.jsonl",
                   help="only write the templated sentences (the input of `lrp batch`) and stop")
    p.add_argument("--out", default=None, help="a folder (every file the tab offers) or one FILE.json/.csv/.html/"
                                                 ".parquet")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def run_bias(args) -> dict:
    """The bias audit (core.lrp.bias_audit_result): per identity term, the relevance it receives and the logit shift."""
    from core.lrp import bias

    _threads(args.threads)
    if args.inputs:
        if not args.inputs.endswith(".jsonl"):
            raise BadInputError(f"--inputs {args.inputs}: the file must end in .jsonl.")
        path = bias.write_inputs(args.inputs)
        result = {"written": str(path), "sentences": len(bias.audit_rows())}
        emit(args, result, f"wrote {result['sentences']} sentences to {path}")
        return result
    res = lrp.bias_audit_result(args.model, args.method, args.target, ProgressBar())
    shown = ("term", "group", "relevance_mean", "relevance_std", "shift_mean", "shift_std")
    rows = [{k: f"{t[k]:+.3f}" if k.endswith("mean") else f"{t[k]:.3f}" if k.endswith("std") else t[k] for k in shown}
            for t in res.tables["terms"]]
    lines = [res.status.replace("**", ""), table(rows)]
    emit(args, {k: v for k, v in res.data.items() if k != "rows"}, "\n".join(lines), res)
    return res.data


def _threads_arg(p) -> None:
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def run_precompute_bias(args) -> dict:
    """Recompute the committed bias audit (``core.lrp.precompute_bias``: assets/lrp/bias.json)."""
    _threads(args.threads)
    path = lrp.precompute_bias(log=_log)
    emit(args, {"written": str(path)}, f"wrote {path}")
    return {"written": str(path)}


def run_precompute_evaluation(args) -> dict:
    """Recompute every committed result the tab shows (assets/lrp/evaluation/); one step, re-runnable
    (``python tools/docs.py`` then rewrites the docs' generated tables from the committed files)."""
    _threads(args.threads)
    summary = lrp.precompute_evaluation(args.only, args.n, args.out, progress=ProgressBar(), log=_log)
    text = "\n".join(f"{k}: {v['n_done']} samples, {v['seconds']} s -> {', '.join(v['written'])}"
                     for k, v in summary.items())
    emit(args, summary, text)
    return summary


def register(groups) -> None:
    """Add the ``lrp`` commands to the CLI registry (``core.cli_common.CommandGroups``)."""
    groups.command("lrp", "train", "train an embedded MambaLRP model (sentiment, lm, vision, sentiment-mamba2, "
                   "sentiment-hybrid) and write its card",
                   _train_args)(run_train)
    groups.command("lrp", "explain", "per-token relevances of a text model's prediction", _explain_args)(run_explain)
    groups.command("lrp", "compare", "one text on two models side by side (a transformer beside an SSM): relevance "
                   "per word and how close to the end it lies", _compare_args)(run_compare)
    groups.command("lrp", "faithfulness", "MoRF/LeRF flip curves and Delta A^F per method over a dataset split",
                   _faithfulness_args)(run_faithfulness)
    groups.command("lrp", "conservation", "sum of relevances vs the explained logit per method over a split",
                   _eval_common)(run_conservation)
    groups.command("lrp", "long-range", "distances of the most relevant tokens of a language model's next token",
                   _long_range_args)(run_long_range)
    groups.command("lrp", "key-token", "ground truth: how often each method finds the planted key token",
                   _key_token_args)(run_key_token)
    groups.command("lrp", "agreement", "ground truth on a language model: where each method ranks the subject a verb "
                   "agrees with (MRR, pointing accuracy)", _agreement_args)(run_agreement)
    groups.command("lrp", "precompute-examples", "recompute the tab's text and image examples (assets/lrp/examples.json)",
                   _examples_args)(run_precompute_examples)
    groups.command("lrp", "precompute-evaluation", "recompute the evaluation results the tab shows "
                   "(assets/lrp/evaluation/)", _precompute_args)(run_precompute_evaluation)
    groups.command("lrp", "bias-audit", "identity terms swapped in templated reviews: the relevance each receives and "
                   "how the class logit moves (assets/lrp/bias.json)", _bias_args)(run_bias)
    groups.command("lrp", "precompute-bias", "recompute the committed bias audit (assets/lrp/bias.json)",
                   _threads_arg)(run_precompute_bias)
    register_batch(groups, BATCH_KIND)  # python -m core lrp batch: the analysis over a file of inputs
