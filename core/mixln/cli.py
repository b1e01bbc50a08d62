"""``python -m core mixln ...``: train Pre/Post/Mix-LN runs and chart what their layers do.

Commands: ``train``, ``reproduce``, ``runs``, ``gradnorms``, ``angular``, ``removal``, ``sweep``, ``compare``,
``curves``, ``lr-sweep``, ``depth`` (the last four over the seeds of the committed run sets).
Each diagnostic takes ``--out FILE.json|.csv|.html`` (HTML: a self-contained plotly figure).

Data-parallel training: the same ``train`` command runs under ``torchrun --nproc_per_node N -m core mixln
train ...`` or ``accelerate launch -m core mixln train ...``; with ``WORLD_SIZE > 1`` the model is wrapped in
DistributedDataParallel (NCCL on GPUs, gloo on CPUs), ``--batch`` is the global batch (each of the N processes
trains on its batch / N rows of it), and rank 0 writes the run folder and prints the result. Tested with 2 gloo
processes on a CPU against the single-process run (tests/core/mixln/test_ddp.py).
"""
from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

import core.mixln as mixln
from core.cli_common import ProgressBar, emit, set_threads, table
from core.errors import BadInputError, LayerwiseError
from core.zoo import add_placement_args

TRAIN_HELP = ("train one Pre/Post/Mix-LN run (BPE tokenizer + packed text, the Mix-LN authors' Adam settings: "
              "betas 0.9/0.999, no weight decay, no clipping, warmup from 0 and cosine decay to 10%%, held-out "
              "perplexity, per-layer gradient norms, checkpoints/--resume; a non-finite loss ends "
              "the run as 'diverged', curves kept). Data-parallel: run the same command under `torchrun "
              "--nproc_per_node N -m core mixln train ...` or `accelerate launch -m core mixln train ...` "
              "(DDP when WORLD_SIZE>1: --batch is the global batch, each process trains on batch/N rows of it, the "
              "losses equal the single-process run's; rank 0 writes the folder). --recipe retrains all committed "
              "runs.")


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"alpha must be a number, got {text!r}")
    return value


# ---- train / reproduce ---------------------------------------------------------------------------------
# what --quick sets (a tiny smoke run), and the recipe defaults of those flags (their argparse default is None, so a
# flag the user gave is known): --quick refuses a flag it would override instead of overriding it silently
QUICK = dict(layers=4, hidden=32, heads=2, steps=6, batch=4, seq=32, vocab=512, eval_every=3, grad_every=2,
             warmup=2, eval_batches=2)


def _quick_defaults() -> dict:
    M, T = mixln.RECIPE_MODEL, mixln.RECIPE_TRAIN
    return dict(layers=M["num_layers"], hidden=M["hidden_size"], heads=M["num_heads"], steps=T["steps"],
                batch=T["batch_size"], seq=T["seq_len"], vocab=M["vocab_size"], eval_every=T["eval_every"],
                grad_every=T["grad_log_every"], warmup=T["warmup_steps"], eval_batches=T["eval_batches"])


def _train_args(p: argparse.ArgumentParser) -> None:
    M, T = mixln.RECIPE_MODEL, mixln.RECIPE_TRAIN
    p.add_argument("--norm", choices=list(mixln.PLACEMENTS), default="mix",
                   help="norm placement: " + ", ".join(f"{n} ({p.label})" for n, p in mixln.PLACEMENTS.items()))
    p.add_argument("--alpha", type=_alpha, default=0.25, help="Mix-LN: fraction of layers that are Post-LN, in [0, 1]")
    p.add_argument("--layers", type=int, default=None, help=f"default {M['num_layers']}")
    p.add_argument("--hidden", type=int, default=None, help=f"default {M['hidden_size']}")
    p.add_argument("--heads", type=int, default=None, help=f"default {M['num_heads']}")
    p.add_argument("--intermediate", type=int, default=None, help="MLP width (default ~8/3 x hidden)")
    p.add_argument("--vocab", type=int, default=None, help=f"BPE vocabulary size (default {M['vocab_size']})")
    p.add_argument("--steps", type=int, default=None, help=f"default {T['steps']}")
    p.add_argument("--batch", type=int, default=None, help=f"default {T['batch_size']}")
    p.add_argument("--seq", type=int, default=None, help=f"tokens per packed sequence (default {T['seq_len']})")
    p.add_argument("--lr", type=float, default=T["lr"], help="peak learning rate")
    p.add_argument("--warmup", type=int, default=None, help=f"default {T['warmup_steps']}")
    p.add_argument("--min-lr-ratio", type=float, default=T["min_lr_ratio"], help="the cosine ends at this x lr")
    p.add_argument("--betas", type=float, nargs=2, default=T["betas"], metavar=("B1", "B2"), help="Adam betas")
    p.add_argument("--weight-decay", type=float, default=T["weight_decay"])
    p.add_argument("--grad-clip", type=float, default=T["grad_clip"] or 0.0,
                   help="clip the global gradient norm to this (0: no clipping, the authors' setting)")
    p.add_argument("--embedding-std", type=float, default=M["embedding_init_std"],
                   help="std of the embedding's normal init (the authors: sqrt(2/5))")
    p.add_argument("--deepnorm-formula", choices=mixln.DEEPNORM_FORMULAS, default=M["deepnorm_formula"],
                   help="DeepNorm constants: the Mix-LN authors' code (mixln) or the DeepNet paper's (deepnet)")
    p.add_argument("--eval-every", type=int, default=None, help=f"default {T['eval_every']}")
    p.add_argument("--eval-batches", type=int, default=None, help=f"default {T['eval_batches']}")
    p.add_argument("--grad-every", type=int, default=None,
                   help=f"log per-layer grad norms every k steps (default {T['grad_log_every']})")
    p.add_argument("--checkpoint-every", type=int, default=0, help="0: checkpoint only at the end")
    p.add_argument("--seed", type=int, default=T["seed"])
    p.add_argument("--tokenizer", default=None, help="a tokenizer.json to reuse (default: train one)")
    p.add_argument("--out", default=None, help="run folder to write (required unless --resume or --recipe)")
    p.set_defaults(out_adds=lambda out: (Path(out) / "run.json").is_file())  # a run folder: its own files again
    p.add_argument("--resume", default=None, help="continue the run in this folder from its last checkpoint")
    p.add_argument("--quick", action="store_true", help="a tiny smoke run: 4 layers, width 32, 6 steps (reuses the committed tokenizer)")
    p.add_argument("--recipe", action="store_true", help="retrain every committed run into --out (default assets/mixln)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")


class _LauncherStopped(Exception):
    """torchrun stopped this process (SIGTERM): another process of the run failed."""

    def __str__(self) -> str:
        return "the launcher stopped this process"


def run_train(args) -> None:
    world, rank, local_rank = mixln.dist_info()
    if world == 1:
        return _run_train(args)
    started = []  # under torchrun / accelerate launch: rank 0 prints, an input error is printed once per machine
    bar = ProgressBar() if rank == 0 else None

    def quiet(fraction: float, message: str) -> None:
        if fraction > 0:  # a training step was reported
            started.append(True)
        if bar is not None:
            bar(fraction, message)

    def stopped_by_launcher(signum, frame):  # torchrun's SIGTERM when another process failed: end as an error
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the run.json and message that follow are not cut
        raise _LauncherStopped()
    previous = signal.signal(signal.SIGTERM, stopped_by_launcher)
    try:
        _run_train(args, quiet, rank == 0)
    except BadInputError:
        if local_rank != 0 and not started:  # every process of a machine checks the same command and files:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (torchrun may stop this one while it waits: silently)
            time.sleep(2.0)  # local rank 0 prints the message (before torchrun stops it when this one exits)
            raise SystemExit(2)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the message is printed whole
        raise
    except (RuntimeError, _LauncherStopped) as exc:
        if not isinstance(exc, _LauncherStopped) and not _from_collective(exc):
            raise
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if rank != 0:  # rank 0 says it once (the failed process's own error is printed by that process)
            raise SystemExit(2)
        where = f"{args.out or args.resume}"
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        cause = cause.split("] ", 1)[1] if cause.startswith("[") and "] " in cause else cause  # gloo's source line
        raise LayerwiseError(
            f"rank {rank} of {world}: another process of this run stopped ({cause.split('. ')[0][:200]}); "
            f"{where}/run.json says 'failed' or 'running', never 'finished'.",
            fix=f"see the first error of the failed rank above, then continue from the last checkpoint with the "
                f"same launch and `--resume {where}` (checkpoints every k steps: --checkpoint-every k).") from exc
    finally:  # after an error SIGTERM stays ignored (or default) until the process exits, so the message is whole
        if signal.getsignal(signal.SIGTERM) is stopped_by_launcher:
            signal.signal(signal.SIGTERM, previous)


def _from_collective(exc: BaseException) -> bool:
    """True for an error raised by torch.distributed (a collective whose peer went away: gloo raises a plain
    RuntimeError, NCCL a DistBackendError), False for anything else (a bug keeps its traceback)."""
    import traceback

    import torch.distributed as dist
    if isinstance(exc, dist.DistError) or "/gloo/" in str(exc):  # gloo's messages name its source file
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "torch/distributed/" in frames[-1].filename.replace("\\", "/")


def _run_train(args, progress=None, show: bool = True) -> None:
    set_threads(args.threads, zero_is_default=True)
    if args.recipe:
        return run_reproduce(argparse.Namespace(json=args.json, out=args.out, only=None, sets=None, seeds=None,
                                                skip_done=False, threads=0))
    given = [f"--{k.replace('_', '-')} {getattr(args, k)}" for k in QUICK if getattr(args, k) is not None]
    if args.quick and given:
        raise BadInputError(f"--quick sets its own sizes and steps, so it cannot be combined with {', '.join(given)}.",
                            fix="drop --quick to train with your values, or drop "
                                f"{', '.join(g.split()[0] for g in given)} for the smoke run.")
    for k, default in (QUICK if args.quick else _quick_defaults()).items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    if args.quick and args.tokenizer is None and (mixln.RUNS_DIR / "tokenizer.json").is_file():
        args.tokenizer = str(mixln.RUNS_DIR / "tokenizer.json")  # skip training a tokenizer
    for name in ("layers", "hidden", "heads", "steps", "batch", "seq", "eval_batches"):
        if getattr(args, name) < 1:
            raise BadInputError(f"--{name.replace('_', '-')} must be at least 1.", fix=f"pass a positive --{name}.")
    inter = args.intermediate or int(args.hidden * 8 / 3 / 16 + 1) * 16
    if args.grad_clip < 0 or args.weight_decay < 0 or not args.embedding_std > 0:
        raise BadInputError("--grad-clip and --weight-decay must be >= 0 and --embedding-std > 0.",
                            fix="use e.g. --grad-clip 0 (no clipping), --weight-decay 0, --embedding-std 0.02.")
    sizes = dict(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                 intermediate_size=inter, embedding_init_std=args.embedding_std,
                 deepnorm_formula=args.deepnorm_formula)
    tcfg = dict(steps=args.steps, batch_size=args.batch, seq_len=args.seq, lr=args.lr, warmup_steps=args.warmup,
                min_lr_ratio=args.min_lr_ratio, betas=list(args.betas), weight_decay=args.weight_decay,
                grad_clip=args.grad_clip or None, eval_every=args.eval_every, eval_batches=args.eval_batches,
                grad_log_every=args.grad_every, seed=args.seed)
    if args.resume is None:  # before any work: N must divide the global batch (a resumed run: its own batch)
        mixln.check_world(args.batch, mixln.dist_info()[0])
    bar = ProgressBar() if progress is None else None
    res = mixln.train_result(args.out, args.norm, args.alpha, sizes, tcfg, args.tokenizer, args.resume,
                             args.checkpoint_every, progress=progress or bar)
    if bar is not None:
        bar.close()
    if show:
        _emit(args, res.data, lambda m: res.status)


def _reproduce_args(p):
    p.add_argument("--out", default=None, help="folder for the runs (default assets/mixln)")
    # a store it adds its own runs to (a run folder <placement>/seed-N/run.json, or <set>/<placement>/..., or the
    # runs' shared tokenizer.json at its root): no --overwrite needed there; any other folder that holds something is
    # the user's and is refused
    p.set_defaults(out_adds=lambda out: (Path(out) / "tokenizer.json").is_file()
                   or any(Path(out).glob("*/seed-*/run.json")) or any(Path(out).glob("*/*/seed-*/run.json")))
    p.add_argument("--set", dest="sets", nargs="+", choices=list(mixln.RUN_SETS), default=None,
                   help="retrain only these run sets (default: all)")
    p.add_argument("--only", nargs="+", metavar="RUN", help="retrain only these placements (e.g. pre-ln post-ln)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="retrain only these seeds")
    p.add_argument("--skip-done", action="store_true", help="keep runs that already finished or diverged")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--prefix-only", action="store_true",
                   help="retrain nothing: train the first 50 steps of the chosen committed runs again in float64 and "
                        "record them in their run.json (float64_prefix, what the reproducibility tests compare)")


def run_reproduce(args) -> None:
    import torch
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)
    if getattr(args, "prefix_only", False):
        return run_prefixes(args)
    t0, bar = time.perf_counter(), ProgressBar()
    res = mixln.reproduce_result(args.out, getattr(args, "only", None), progress=bar,
                                 sets=getattr(args, "sets", None), seeds=getattr(args, "seeds", None),
                                 skip_done=getattr(args, "skip_done", False))
    bar.close()
    _emit(args, {**res.data, "seconds": round(time.perf_counter() - t0, 1)}, lambda r: res.status)


def run_prefixes(args) -> None:
    """``reproduce --prefix-only``: re-record the float64 prefix of the chosen committed runs."""
    jobs = mixln.recipe_jobs(args.sets, args.only, args.seeds)  # unknown sets / placements -> BadInputError
    if args.skip_done:
        raise BadInputError("--skip-done keeps finished runs, and --prefix-only retrains none: they do not combine.",
                            fix="drop --skip-done.")
    bar = ProgressBar()
    changes = mixln.record_prefixes(args.out or mixln.RUNS_DIR, jobs, progress=bar)
    bar.close()
    if not changes:
        raise BadInputError("no committed run matches the chosen sets, placements and seeds.",
                            fix="train it first (`python -m core mixln reproduce --only NAME`), or see "
                                "`python -m core mixln runs`.")
    _emit(args, changes, lambda c: "\n".join(
        f"{k}: float64 prefix recorded" + ("" if v is None else f", largest relative change {v:.2e}")
        for k, v in c.items()))


def _emit(args, result, text) -> None:
    print(json.dumps(result, indent=1, default=str) if args.json else text(result))


# ---- read-only commands ----------------------------------------------------------------------------------

def run_runs(args) -> None:
    rows = mixln.compare_table()
    for r in rows:
        r["recipe"] = mixln.recipe_command(r["run"]) if r["run"] in mixln.RECIPE else ""
    _emit(args, rows, lambda rs: table(rs, ["run", "norm", "alpha", "layers", "width", "steps", "status",
                                            "n_seeds", "eval_perplexity_mean", "eval_perplexity_std", "wall_s"]))


def _subject_args(p, samples=None):
    p.add_argument("--run", dest="run_ref", default=None, help="a committed run (see `mixln runs`) or a run folder")
    p.add_argument("--model", default=None, help="any causal LM for core.zoo.load_model, e.g. smollm2-135m")
    add_placement_args(p)
    p.add_argument("--samples", type=int, default=samples,
                   help="held-out sequences (default: 64 spread over a run's held-out stream, 8 of a --model's)")
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    p.add_argument("--out", default=None, help="FILE.json, FILE.csv or FILE.html (a plotly figure)")


def _subject(args) -> str:
    if args.run_ref and args.model:
        raise BadInputError("give either --run or --model, not both.", fix="drop one of them.")
    if args.model:
        return args.model
    ref = args.run_ref or "mix-ln-0.25"
    mixln.resolve_run(ref)  # unknown run -> BadInputError
    return ref


def _gradnorm_args(p):
    p.add_argument("--runs", nargs="+", default=None, help="committed runs (default: pre-ln post-ln mix-ln-0.25)")
    p.add_argument("--model", default=None, help="instead: any causal LM (norms of one batch at its current weights)")
    add_placement_args(p)
    p.add_argument("--kind", choices=list(mixln.GRADIENT_KINDS), default="param",
                   help="param: norm of each layer's weight gradients; input: norm of the gradient at its input")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--out", default=None, help="FILE.json, FILE.csv or FILE.html")


def run_gradnorms(args) -> None:
    if args.model:
        res = mixln.model_gradnorms_result(args.model, args.samples, args.seq)
    else:
        res = mixln.gradnorms_result(args.runs or list(mixln.DEFAULT_RUNS), args.kind)
    lines = []
    for r in res.data:
        if "run" in r:
            lines.append(f"{r['run']} ({r['label']}), {args.kind} grad norm per layer")
            lines.append("  init : " + " ".join(f"{x:.3g}" for x in r["init"]))
            lines.append("  final: " + " ".join(f"{x:.3g}" for x in r["final"]))
        else:
            lines.append(f"{r['subject']}: param grad norm per layer: " + " ".join(f"{x:.3g}" for x in r["param"]))
    emit(args, res.data, "\n".join(lines), res)


def run_angular(args) -> None:
    res = mixln.angular_distance_result(_subject(args), args.samples, args.seq, args.position, progress=ProgressBar())
    r = res.data
    emit(args, r, f"{r['subject']}: angular distance d(h_l, h_l+1) per layer: "
         + " ".join(f"{x:.3f}" for x in r["raw"][0] if x is not None), res)


def _angular_args(p):
    _subject_args(p)
    p.add_argument("--position", choices=list(mixln.POSITIONS), default="last",
                   help="compare the last token's states (the paper) or average over all tokens")


def run_removal(args) -> None:
    res = mixln.layer_removal_result([_subject(args)], args.samples, args.seq, progress=ProgressBar())
    r = res.data[0]
    emit(args, r, f"{r['subject']}: baseline held-out ppl {r['baseline_perplexity']:.2f}\n"
         + "\n".join(f"  skip layer {l:2d}: loss +{d:.4f}  ppl +{p:.2f}" for l, d, p in
                     zip(r["layers"], r["loss_increase"], r["perplexity_increase"])), res)


def _table_out_args(p):
    p.add_argument("--out", default=None, help="FILE.json, FILE.csv or FILE.html")


def run_sweep(args) -> None:
    res = mixln.sweep_result()
    emit(args, res.data, table(res.data, ["layers", "alpha", "run", "post_ln_layers", "n", "diverged",
                                          "eval_perplexity_mean", "eval_perplexity_std", "eval_perplexity_min",
                                          "eval_perplexity_max"]), res)


def run_compare(args) -> None:
    res = mixln.compare_result()
    emit(args, res.data, res.status + "\n" + table(res.data, [
        "run", "layers", "alpha", "steps", "n_seeds", "diverged", "eval_loss_mean", "eval_loss_std",
        "eval_perplexity_mean", "eval_perplexity_std"]), res)


def _curves_args(p):
    p.add_argument("--set", dest="set_name", choices=list(mixln.CURVE_SETS), default="main",
                   help="which run set (default main: 12 layers)")
    p.add_argument("--metric", choices=list(mixln.METRICS), default="loss")
    _table_out_args(p)


def run_curves(args) -> None:
    res = mixln.curves_result(None, args.set_name, args.metric)
    rows = res.tables["curves"]
    last = [r for r in rows if r["step"] == max(x["step"] for x in rows if x["run"] == r["run"])]
    emit(args, res.data, res.status + "\n" + table(last, ["run", "n", "step", "mean", "std", "min", "max"]), res)


def run_lr_sweep(args) -> None:
    res = mixln.lr_sweep_result()
    emit(args, res.data, res.status + "\n" + table(res.data, ["run", "lr", "status", "diverged_at", "eval_loss",
                                                               "eval_perplexity"]), res)


def _reference_args(p):
    p.add_argument("--write", action="store_true", help="store them in assets/mixln/reference.json (what the charts draw)")
    _table_out_args(p)


def run_reference(args) -> None:
    res = mixln.reference_result(write=args.write)
    emit(args, res.data, res.status, res)


def run_depth(args) -> None:
    res = mixln.depth_result()
    lines = [f"{p['run']} ({p['layers']} layers, n = {p['n']}): d(h_l, h_l+1) mean per layer "
             + " ".join(f"{x:.3f}" for x in p["angular"]["mean"] if x is not None) for p in res.data]
    emit(args, res.data, "\n".join(lines), res)


def _reproduces_args(p):
    _table_out_args(p)


def run_reproduces(args) -> None:
    res = mixln.reproduces_result()
    claims = res.tables["claims"]
    lines = [f"- {r['claim']} [{r['source']}]\n    paper: {r['paper']}\n    ours:  {r['ours']}\n    => {r['verdict']}"
             for r in claims]
    emit(args, res.data, res.status + "\n" + "\n".join(lines) + "\n\nEmbedding init (12 layers):\n"
         + table(res.tables["init"], ["label", "std_0.02", "std_sqrt(2/5)", "difference", "0.02 is"]), res)


def register(groups) -> None:
    g = "mixln"
    groups.command(g, "train", TRAIN_HELP, _train_args)(run_train)
    groups.command(g, "reproduce", "retrain the committed runs in assets/mixln with the recipe (all run sets: 12 "
                   "layers x 3 seeds, 24 layers, the learning-rate sweep; or --set/--only/--seeds) and "
                   "precompute their diagnostics", _reproduce_args)(run_reproduce)
    groups.command(g, "runs", "list the committed runs with their final held-out perplexity and recipe")(run_runs)
    groups.command(g, "gradnorms", "per-layer gradient norms at init and after training (committed runs), or of "
                   "any causal LM", _gradnorm_args)(run_gradnorms)
    groups.command(g, "angular", "angular distance heatmap d(h_l, h_l+n), raw and scaled, of a run or any causal LM",
                   _angular_args)(run_angular)
    groups.command(g, "removal", "held-out loss/perplexity increase when each layer is skipped", _subject_args)(
        run_removal)
    groups.command(g, "sweep", "final held-out perplexity vs Mix-LN alpha (committed runs)", _table_out_args)(run_sweep)
    groups.command(g, "compare", "held-out perplexity per norm placement at equal steps (committed runs at 12 and "
                   "24 layers, mean and spread over seeds)", _table_out_args)(run_compare)
    groups.command(g, "curves", "held-out loss / perplexity curves over seeds (mean, min-max band)",
                   _curves_args)(run_curves)
    groups.command(g, "lr-sweep", "final held-out loss per placement and peak learning rate (one seed)",
                   _table_out_args)(run_lr_sweep)
    groups.command(g, "reference", "unigram and bigram held-out loss of the training data on the runs' held-out "
                   "windows (the reference levels of the loss charts)", _reference_args)(run_reference)
    groups.command(g, "depth", "12 vs 24 layers: per-layer angular distance, gradient norm and removal loss over "
                   "seeds", _table_out_args)(run_depth)
    groups.command(g, "reproduces", "what reproduces: each claim of the Mix-LN paper (and LNS, Peri-LN) with the "
                   "paper's figure, the committed runs' (n, spread) and a verdict; the embedding-init comparison; "
                   "the follow-ups' published table", _reproduces_args)(run_reproduces)
