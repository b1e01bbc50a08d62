"""``python -m core mathneuro ...``: identify math-specific parameters, prune or scale them, and chart where
they sit and what removing them does.

Commands: ``identify``, ``prune``, ``scale``, ``layers``, ``effect``, ``sweep-proportion``, ``sweep-scale``,
``consistency``, ``drill``, ``train-demo`` (the embedded model's recipe), ``precompute`` (the tab's examples).
Analyses take ``--out FILE.json|.csv|.html`` (HTML: a self-contained plotly figure). Results are cached by model
fingerprint + analysis + parameters.
"""
from __future__ import annotations

import argparse
import json
import sys

import core.mathneuro as mn
from core.batch_cli import register as register_batch
from core.mathneuro import BATCH as BATCH_KIND
from core.cli_common import ProgressBar, emit, set_threads
from core.zoo import add_placement_args

DEFAULTS = mn.DEFAULTS


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")


def _emit(args, res, text: str) -> None:
    """Print the result (with where it came from) and, with ``--out``, write its file."""
    emit(args, {**res.data, "source": res.source}, text, res)


def _f(x, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}g}" if isinstance(x, float) else str(x)


# ---- arguments -------------------------------------------------------------------------------------------------
def _common(p, nonmath_many: bool = False, proportion: bool = True, method: bool = True) -> None:
    p.add_argument("--model", default=DEFAULTS["model"], help="registered name, local folder or hub id "
                   "(default mathneuro-tiny)")
    add_placement_args(p)
    p.add_argument("--math", default=DEFAULTS["math"], help="math dataset (arithmetic-words, gsm-symbolic)")
    if nonmath_many:
        p.add_argument("--nonmath", nargs="+", default=[DEFAULTS["nonmath"][0]],
                       help="one or two non-math datasets (review-sentiment, movie-sentiment, mmlu, logiqa)")
    else:
        p.add_argument("--nonmath", default=DEFAULTS["nonmath"][0],
                       help="non-math dataset (review-sentiment, movie-sentiment, mmlu, logiqa)")
    p.add_argument("-n", type=int, default=DEFAULTS["n"], help="identification samples per dataset (train split)")
    if proportion:
        p.add_argument("--proportion", "-K", type=_number, default=DEFAULTS["proportion"],
                       help="K in (0, 1]: share of each weight matrix kept as top scores")
    if method:
        p.add_argument("--method", default=DEFAULTS["method"], help="mathneuro, wanda, random or lape")
    p.add_argument("--out", default=None, help="write FILE.json, FILE.csv or FILE.html")


def _eval_args(p) -> None:
    p.add_argument("--eval-n", type=int, default=DEFAULTS["eval_n"], help="test items per dataset for the metrics")
    p.add_argument("--metric", default=DEFAULTS["metric"], help=", ".join(mn.METRICS))


def _identify_args(p):
    _common(p)
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="for the random method")


def _effect_args(p, many: bool):
    _common(p, nonmath_many=many, method=not many)
    if many:
        p.add_argument("--methods", nargs="+", default=None, help="methods to compare (default all)")
    _eval_args(p)


def _intervene_args(p):
    _effect_args(p, False)
    p.add_argument("--factor", type=_number, default=DEFAULTS["factor"], help="scale factor (finite), for scale")


def _sweep_k_args(p):
    _common(p, proportion=False)
    p.add_argument("--proportions", nargs="+", type=_number, default=None, help="values of K (default 0.1%% to 20%%)")
    _eval_args(p)


def _sweep_scale_args(p):
    _common(p)
    p.add_argument("--factors", nargs="+", type=_number, default=None, help="scale factors (default 0 to 2)")
    _eval_args(p)


def _consistency_args(p):
    _common(p, proportion=False)
    p.add_argument("--proportions", nargs="+", type=_number, default=None, help="values of K (default 1, 5, 10%%)")
    p.add_argument("--repeats", type=int, default=DEFAULTS["repeats"], help="random subsets per sample count")


def _drill_args(p):
    _common(p)
    p.add_argument("--matrix", default=None, help="parameter name (default: the first down_proj)")
    p.add_argument("--cells", type=int, default=DEFAULTS["max_cells"], help="at most this many heatmap cells per side")


def _train_args(p):
    p.add_argument("--quick", action="store_true", help="a tiny smoke run (seconds), for tests")
    p.add_argument("--resume", default=None, help="a folder saved after the main steps: run only the polish steps")
    p.add_argument("--out", default=None, help="folder to write (default assets/models/mathneuro-tiny)")
    p.add_argument("--steps", type=int, default=None, help="override the number of steps")


def _precompute_args(p):
    p.add_argument("--out", default=None, help="file to write (default assets/mathneuro/examples.json)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")


# ---- commands --------------------------------------------------------------------------------------------------
def run_identify(args):
    out = args.out
    res = mn.identify_result(args.model, args.math, args.nonmath, args.n, args.proportion, args.method, args.seed, out,
                             progress=ProgressBar())
    r = dict(res.data)
    text = res.status + (f"\nmasks written to {out}" if out else "")
    if not args.json:
        r.pop("matrices")
    print(json.dumps(r, indent=1, default=str) if args.json else text)


def _effect_text(r: dict, source: str) -> str:
    m = r["metrics"]
    lines = [f"{'method':10} {'non-math':18} {'pruned':>9} {'math before':>12} {'math after':>11} "
             f"{'non-math before':>16} {'non-math after':>15}"]
    for row in r["rows"]:
        lines.append(f"{row['method']:10} {row['nonmath']:18} {row['selected']:>9,} {_f(row['math_before']):>12} "
                     f"{_f(row['math_after']):>11} {_f(row['nonmath_before']):>16} {_f(row['nonmath_after']):>15}")
    lines.append("metrics: " + ", ".join(f"{k}: {v}" for k, v in m.items()) + f" (source: {source})")
    return "\n".join(lines)


def _run_intervention(args, mode: str):
    res = mn.effect_result(args.model, args.math, [args.nonmath], args.n, args.proportion, [args.method], args.eval_n,
                           args.metric, mode, args.factor if mode == "scale" else None, progress=ProgressBar())
    _emit(args, res, _effect_text(res.data, res.source))


def run_prune(args):
    _run_intervention(args, "prune")


def run_scale(args):
    _run_intervention(args, "scale")


def run_effect(args):
    res = mn.effect_result(args.model, args.math, args.nonmath, args.n, args.proportion, args.methods, args.eval_n,
                           args.metric, progress=ProgressBar())
    _emit(args, res, _effect_text(res.data, res.source))


def run_layers(args):
    res = mn.layer_distribution_result(args.model, args.math, args.nonmath, args.n, args.proportion, args.method,
                                       progress=ProgressBar())
    lines = []
    for nm, part in res.data["by_nonmath"].items():
        lines.append(f"math vs {nm}: {part['selected']:,} of {part['total']:,} selected")
        layers = sorted({row["layer"] for row in part["rows"]})
        modules = list(dict.fromkeys(row["module"] for row in part["rows"]))
        lines.append("layer  " + "  ".join(f"{m.replace('_proj', ''):>7}" for m in modules))
        for layer in layers:
            cells = {row["module"]: row["selected"] for row in part["rows"] if row["layer"] == layer}
            lines.append(f"{layer:5}  " + "  ".join(f"{cells.get(m, 0):>7,}" for m in modules))
    _emit(args, res, "\n".join(lines))


def run_sweep_proportion(args):
    res = mn.proportion_sweep_result(args.model, args.math, args.nonmath, args.n, args.proportions, args.method,
                                     args.eval_n, args.metric, progress=ProgressBar())
    r = res.data
    lines = [f"{'K':>8} {'pruned':>10} {'math':>8} {'non-math':>9}"]
    lines += [f"{row['proportion']:>8g} {row['selected']:>10,} {_f(row['math']):>8} {_f(row['nonmath']):>9}"
              for row in r["rows"]]
    _emit(args, res, "\n".join(lines) + f"\nmetrics: {r['metrics']}")


def run_sweep_scale(args):
    res = mn.scale_sweep_result(args.model, args.math, args.nonmath, args.n, args.proportion, args.method,
                                args.factors, args.eval_n, args.metric, progress=ProgressBar())
    r = res.data
    lines = [f"{'factor':>7} {'math':>8} {'non-math':>9}"]
    lines += [f"{row['factor']:>7g} {_f(row['math']):>8} {_f(row['nonmath']):>9}" for row in r["rows"]]
    _emit(args, res, "\n".join(lines) + f"\nmetrics: {r['metrics']}; {r['selected']:,} parameters")


def run_consistency(args):
    res = mn.consistency_result(args.model, args.math, args.nonmath, args.n, args.proportions, args.method,
                                args.repeats, progress=ProgressBar())
    lines = [f"{'samples':>7} {'K':>6} {'overlap with full':>18} {'Jaccard':>8}"]
    lines += [f"{row['samples']:>7} {row['proportion']:>6g} {100 * row['overlap_with_full']:>17.1f}% "
              f"{100 * row['jaccard_with_full']:>7.1f}%" for row in res.data["rows"]]
    _emit(args, res, "\n".join(lines))


def run_drill(args):
    res = mn.drill_result(args.model, args.math, args.nonmath, args.n, args.proportion, args.method, args.matrix,
                          args.cells, progress=ProgressBar())
    r = res.data
    rows, cols = r["row_counts"], r["col_counts"]
    top_rows = sorted(range(len(rows)), key=lambda i: -rows[i])[:5]
    top_cols = sorted(range(len(cols)), key=lambda i: -cols[i])[:5]
    text = (f"{r['name']} {r['shape']}: {r['selected']:,} of {r['total']:,} selected ({100 * r['share']:.3f}%)\n"
            f"rows with most: " + ", ".join(f"{i} ({rows[i]})" for i in top_rows) + "\n"
            f"columns with most: " + ", ".join(f"{i} ({cols[i]})" for i in top_cols))
    res.data = {k: v for k, v in r.items() if k != "matrices"}
    _emit(args, res, text)


def run_train_demo(args):
    res = mn.train_demo_result(args.out, args.quick, args.steps, args.resume,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res.data, indent=1) if args.json else res.status)


def run_precompute(args):
    set_threads(args.threads, zero_is_default=True)
    path = mn.precompute_examples(args.out, log=lambda m: print(f"... {m}", file=sys.stderr, flush=True))
    print(json.dumps({"written": str(path)}) if args.json else f"written to {path}")


COMMANDS = {
    "identify": ("find the math-specific parameters (--out masks.safetensors)", _identify_args, run_identify),
    "prune": ("math and non-math metric before/after pruning one method's set", _intervene_args, run_prune),
    "scale": ("math and non-math metric before/after scaling one method's set by --factor", _intervene_args,
              run_scale),
    "layers": ("layer distribution: selected parameters per layer and module type (one or two non-math sets)",
               lambda p: _common(p, nonmath_many=True), run_layers),
    "effect": ("pruning effect per method and non-math dataset (math vs non-math after pruning)",
               lambda p: _effect_args(p, True), run_effect),
    "sweep-proportion": ("math / non-math metric after pruning, as K varies", _sweep_k_args, run_sweep_proportion),
    "sweep-scale": ("math / non-math metric as the scale factor varies", _sweep_scale_args, run_sweep_scale),
    "consistency": ("overlap of sets found from 1..N samples with the full set, per K", _consistency_args,
                    run_consistency),
    "drill": ("where the selected entries of one weight matrix sit (heatmap)", _drill_args, run_drill),
    "train-demo": ("retrain the embedded model mathneuro-tiny (2,200 steps, ~27 min on a busy 2-core CPU; "
                   "--quick: seconds)",
                   _train_args, run_train_demo),
    "precompute": ("recompute the tab's default examples (assets/mathneuro/examples.json)", _precompute_args,
                   run_precompute),
}


def register(groups) -> None:
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        groups.command("mathneuro", name, help_text, add_arguments)(run)
    register_batch(groups, BATCH_KIND)  # python -m core mathneuro batch: the analysis over a file
