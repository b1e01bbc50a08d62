"""``python -m core neuzip ...``: the NeuZip measurements and the codec from the command line.

    python -m core neuzip histograms --model smollm2-135m [--out hist.html]
    python -m core neuzip table      --model smollm2-135m --k 7 [--block-size B] [--out table.csv]
    python -m core neuzip tradeoff   --model smollm2-135m --k 7 3 1 0 --block-size 128 --words 2000 [--out f.html]
    python -m core neuzip throughput --model smollm2-135m --k 3 --block-size 128 [--numel N]   # NeuZip, ZipNN, ...
    python -m core neuzip process-memory --model smollm2-135m     # each setting's process RSS (fresh processes)
    python -m core neuzip compress   --model smollm2-135m --k 7 --out weights.neuzip.safetensors
    python -m core neuzip decompress weights.neuzip.safetensors [--model smollm2-135m] [--out plain.safetensors]
    python -m core neuzip precompute [--model smollm2-135m] [--words 2000] [--only throughput]  # the tab's example
    python -m core neuzip train --model tiny-llama --mode vanilla lomo lomo+neuzip --steps 8 --json  # memory, speed
    python -m core neuzip train-example                          # the committed training runs (about 40 min)
    python -m core neuzip build [--force]                        # the C codec ahead of time (a read-only install)

``--out`` writes data as ``.json`` / ``.csv`` or the figure as a self-contained ``.html`` (plotly.js
included, works offline). Every parameter is checked by the service's request (the same rules as the tab) before a
model is loaded; bad input exits with code 2 and one line naming the fix. Ctrl-C stops a long run (finished
trade-off points stay cached).
"""
from __future__ import annotations

from pathlib import Path

import core.neuzip as nz
from core.batch_cli import register as register_batch
from core.neuzip import BATCH as BATCH_KIND
from core.cli_common import ProgressBar, emit, set_threads, table
from core.errors import BadInputError
from core.zoo import add_placement_args

__all__ = ["register"]


def _check_out(path: str | None, allowed: tuple[str, ...]) -> None:
    if path is None:
        return
    p = Path(path)
    if p.suffix.lower() not in allowed:
        raise BadInputError(f"--out {path}: this command writes {', '.join(allowed)} files.",
                            fix=f"name the output *{allowed[0]}")
    if not p.parent.is_dir():
        raise BadInputError(f"--out {path}: the folder {p.parent} does not exist.", fix="create it first")


def _model_arg(p) -> None:
    p.add_argument("--model", default="smollm2-135m",
                   help="a registered model, a local Hugging Face folder, or a hub id (with --online)")
    add_placement_args(p)


def _out_arg(p, what: str = ".json, .csv or .html") -> None:
    p.add_argument("--out", metavar="FILE", help=f"write the result ({what})")


def _k_arg(p) -> None:
    p.add_argument("--k", type=int, default=7, metavar="K",
                   help="mantissa bits kept: " + ", ".join(map(str, nz.K_CHOICES)) + " (7: lossless)")
    p.add_argument("--block-size", type=int, default=None, metavar="B",
                   help="per-block normaliser for k < 7: a power of two from 32 to 1024 (0 or absent: none)")


# ------------------------------------------------------------------------------------------------ commands

def _histograms_args(p):
    _model_arg(p)
    _out_arg(p)


def run_histograms(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    bar = ProgressBar()
    res = nz.histograms_result(args.model, progress=bar)
    bar.close()
    emit(args, res.data, res.status, res)


def _table_args(p):
    _model_arg(p)
    _k_arg(p)
    _out_arg(p)


def run_table(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    bar = ProgressBar()
    res = nz.table_result(args.model, args.k, args.block_size, progress=bar)
    bar.close()
    rows = res.tables["table"]
    emit(args, res.data, table([{k: ("" if v is None else v) for k, v in r.items()} for r in rows]), res)


def _tradeoff_args(p):
    DEFAULT_WINDOW, DEFAULT_WORDS = nz.DEFAULT_WINDOW, nz.DEFAULT_WORDS
    _model_arg(p)
    p.add_argument("--k", type=int, nargs="+", default=list(nz.K_CHOICES), metavar="K", help="mantissa bits to try")
    p.add_argument("--block-size", type=int, default=nz.DEFAULT_BLOCK, metavar="B",
                   help="normaliser block size, also tried for every k < 7 (0: none)")
    p.add_argument("--words", type=int, default=DEFAULT_WORDS,
                   help=f"evaluation words (test split), {nz.MIN_WORDS} to {nz.MAX_WORDS:,}")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="tokens per perplexity window")
    p.add_argument("--dataset", default=None, help="evaluation text (default: wikipedia-paragraphs offline, "
                                                   "wikitext-2 online)")
    p.add_argument("--no-baselines", action="store_true", help="leave out the bitsandbytes / NF4 + rANS points")
    p.add_argument("--log-x", action="store_true", help="log memory axis in the HTML figure")
    p.add_argument("--no-cache", action="store_true", help="recompute every point")
    _out_arg(p)


def run_tradeoff(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    bar = ProgressBar()
    res = nz.tradeoff_result(args.model, args.k, args.block_size, args.words, args.window,
                             not args.no_baselines, args.dataset, use_cache=not args.no_cache, progress=bar,
                             log_x=args.log_x)
    bar.close()
    r, rows = res.data, res.tables["tradeoff"]
    text = (f"{args.model}: word-level perplexity on {r['words']:,} words ({r['tokens']:,} tokens) of {r['dataset']}\n"
            + table([{**x, "pareto": "*" if x["pareto"] else ""} for x in rows])
            + "\nPareto front: " + " -> ".join(r["pareto"]) + "\n" + "\n".join(r["notes"]))
    emit(args, {**r, "source": res.source}, text, res)


def _throughput_args(p):
    THROUGHPUT_NUMEL = nz.THROUGHPUT_NUMEL
    _model_arg(p)
    _k_arg(p)
    p.add_argument("--numel", type=int, default=THROUGHPUT_NUMEL,
                   help="time at least this many weights: whole linear weight tensors, in the model's order")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per codec and tensor, the codecs taking turns "
                                                          "(the median counts)")
    _out_arg(p)


def run_throughput(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    bar = ProgressBar()
    res = nz.throughput_result(args.model, args.k, args.block_size, args.numel, args.repeats, progress=bar)
    bar.close()
    emit(args, res.data, res.status.replace("**", "").replace("`", "") + "\n"
         + table([{k: ("" if v is None else v) for k, v in r.items()} for r in res.tables["throughput"]]), res)


def _device_memory_args(p):
    _model_arg(p)
    _k_arg(p)
    p.add_argument("--tokens", type=int, default=512, help="tokens of the forward whose peak is measured")
    p.add_argument("--device", default="cuda", help="the CUDA device (default cuda)")
    _out_arg(p)


def run_device_memory(args):
    _check_out(args.out, (".json", ".csv"))
    res = nz.device_memory_result(args.model, args.k, args.block_size, args.tokens, args.device)
    emit(args, res.data, res.status.replace("**", "").replace("`", "") + "\n" + table(res.tables["device-memory"]),
         res)


def _process_memory_args(p):
    _model_arg(p)
    p.add_argument("--k", type=int, nargs="+", default=list(nz.K_CHOICES), metavar="K", help="mantissa bits to load")
    p.add_argument("--block-size", type=int, default=nz.DEFAULT_BLOCK, metavar="B",
                   help="normaliser block size, also loaded for every k < 7 (0: none)")
    p.add_argument("--tokens", type=int, default=512, help="tokens of the forward")
    p.add_argument("--no-cache", action="store_true", help="measure again")
    _out_arg(p)


def run_process_memory(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    bar = ProgressBar()
    res = nz.process_memory_result(args.model, args.k, args.block_size, args.tokens, use_cache=not args.no_cache,
                                   progress=bar)
    bar.close()
    emit(args, res.data, res.status.replace("**", "").replace("`", "") + "\n" + table(res.tables["process-memory"]),
         res)


def _compress_args(p):
    _model_arg(p)
    _k_arg(p)
    p.add_argument("--out", metavar="FILE", required=True, help="the compressed checkpoint (*.safetensors)")


def run_compress(args):
    bar = ProgressBar()
    res = nz.compress_result(args.model, args.k, args.block_size, args.out, progress=bar)
    bar.close()
    emit(args, res.data, res.status)


def _decompress_args(p):
    p.add_argument("file", help="a checkpoint written by `neuzip compress`")
    p.add_argument("--model", default=None, help="compare with this model's weights (bit-exact for k=7)")
    add_placement_args(p)
    p.add_argument("--out", metavar="FILE", help="write the decoded bf16 weights as plain safetensors")


def run_decompress(args):
    res = nz.decompress_result(args.file, args.model, args.out)
    emit(args, res.data, res.status)


def _precompute_args(p):
    _model_arg(p)
    p.add_argument("--words", type=int, default=nz.DEFAULT_WORDS, help="evaluation words of the trade-off")
    p.add_argument("--block-size", type=int, default=nz.DEFAULT_BLOCK, metavar="B", help="normaliser block size")
    p.add_argument("--out", metavar="FILE", help="the example store (default assets/neuzip/examples.json)")
    p.add_argument("--only", nargs="+", choices=list(nz.EXAMPLE_PARTS), metavar="PART",
                   help="measure only these parts (" + ", ".join(nz.EXAMPLE_PARTS) + ") and keep the others from the "
                        "store at --out")


def run_precompute(args):
    bar = ProgressBar()
    path = nz.precompute_examples(args.model, args.words, args.block_size, args.out, progress=bar, only=args.only)
    bar.close()
    emit(args, {"written": str(path)}, f"wrote {path}")


def _train_args(p):
    p.add_argument("--model", default="tiny-llama",
                   help="a registered causal LM (smollm2-135m), a local folder, a Mix-LN run (mixln:pre-ln) or a Llama "
                        "configuration with random weights: " + ", ".join(nz.RANDOM_MODELS))
    p.add_argument("--mode", nargs="+", default=["vanilla", "lomo", "lomo+neuzip"], metavar="MODE",
                   help="training modes, or all: " + ", ".join(nz.TRAINING_MODES))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=1, help="sequences a step")
    p.add_argument("--seq", type=int, default=64, help="tokens a sequence")
    p.add_argument("--lr", type=float, default=None, help="learning rate of every mode (default: each mode's own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=None, help="keep only this many decoder layers (e.g. a few "
                                                           "8B-shaped layers: --model llama3-8b --layers 4)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop each mode after its share of this many seconds (its steps so far count)")
    p.add_argument("--compress-threads", type=int, default=0, choices=(0, 1),
                   help="lomo+neuzip: 1 compresses each updated weight in a background thread")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--in-process", action="store_true",
                   help="train every mode in this process one after the other (default: each mode in fresh processes, "
                        "so its peak RSS is its own)")
    _out_arg(p)


def run_train(args):

    _check_out(args.out, (".json", ".csv", ".html"))
    set_threads(args.threads, zero_is_default=True)
    modes = list(nz.TRAINING_MODES) if args.mode == ["all"] else args.mode
    bar = ProgressBar()
    res = nz.training_result(args.model, modes, args.steps, args.batch, args.seq, args.seed, args.lr, args.device,
                             args.layers, args.budget, args.compress_threads, progress=bar,
                             fresh=False if args.in_process else None)
    bar.close()
    run = res.data
    data = {**run, "final_loss": {m["mode"]: m["final_loss"] for m in run["modes"]},
            "peak_bytes": {m["mode"]: m["peak_bytes"] for m in run["modes"]},
            "peak_rss_bytes": {m["mode"]: m["peak_rss_bytes"] for m in run["modes"]}}
    if any(m.get("reserved_bytes") is not None for m in run["modes"]):
        data["reserved_bytes"] = {m["mode"]: m.get("reserved_bytes") for m in run["modes"]}
    if len(run["modes"]) == 1:  # one mode: its figures at the top level
        data.update(run["modes"][0])
    emit(args, data, res.status.replace("**", "").replace("`", "") + "\n" + table(
        [{k: ("" if v is None else v) for k, v in r.items()} for r in res.tables["training"]]), res)


def _train_example_args(p):
    p.add_argument("--out", metavar="FILE", help="the example file (default assets/neuzip/training.json)")
    p.add_argument("--only", nargs="+", metavar="MODEL", help="train only these runs and keep the others")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")


def run_train_example(args):

    set_threads(args.threads, zero_is_default=True)
    bar = ProgressBar()
    path = nz.precompute_training_example(args.out, args.only, progress=bar)
    bar.close()
    emit(args, {"written": str(path)}, f"wrote {path}")


def _recipe_effects_args(p):
    p.add_argument("--model", default="smollm2-135m", help="the model (default smollm2-135m, the committed one)")
    p.add_argument("--mode", nargs="+", default=list(nz.EFFECTS_MODES), metavar="MODE",
                   help="training modes: " + ", ".join(nz.TRAINING_MODES))
    p.add_argument("--steps", type=int, default=2, help="steps per mode and recipe (the first 2 are measured)")
    p.add_argument("--batch", type=int, default=2, help="sequences a step")
    p.add_argument("--seq", type=int, default=128, help="tokens a sequence")
    p.add_argument("--out", metavar="FILE", help="where to write it (default assets/neuzip/recipe_effects.json)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")


def run_recipe_effects(args):
    import json

    from core.files import atomic_write
    from core.neuzip import recipe_effects as fx
    if args.out:
        _check_out(args.out, (".json",))
    set_threads(args.threads, zero_is_default=True)
    bar = ProgressBar()
    doc = fx.measure(args.model, nz.check_modes(args.mode), args.steps, args.batch, args.seq, progress=bar)
    bar.close()
    path = atomic_write(args.out or fx.EFFECTS_FILE, json.dumps(doc, indent=1, default=float))
    emit(args, doc, f"wrote {path}\n" + fx.markdown(fx.peak_rows(doc)) + "\n\n" + fx.markdown(fx.order_rows(doc)))


def _build_args(p):
    p.add_argument("--force", action="store_true", help="compile again even where the library is already built")


def run_build(args):
    """Build (or find) the C codec and load it once; exit 1 naming why where it cannot be built (then the numba twin
    runs, at about 200 MiB more RSS a process)."""
    import sys

    data = nz.build_codec(force=args.force)
    if not data["built"]:
        emit(args, data, f"the C codec cannot be built here: {data['reason']}\nNeuZip falls back to its numba twin "
             "(about 200 MiB more RSS a process); install a C compiler (gcc or clang) or set CC to use the C codec.")
        sys.exit(1)
    emit(args, data, f"the C codec: {data['library']} ({data['bytes'] / 1024:.0f} KB, {data['compiler']}, "
         f"{data['seconds']:.2f} s)")


def register(groups) -> None:
    """Add the ``neuzip`` commands to the CLI registry (:class:`core.cli_common.CommandGroups`)."""
    cmd = lambda name, help, add: groups.command("neuzip", name, help, add)  # noqa: E731
    cmd("histograms", "sign / exponent / mantissa histograms and entropies of a model's linear weights",
        _histograms_args)(run_histograms)
    cmd("table", "bits per weight per layer vs the entropy bound, zstd and zlib", _table_args)(run_table)
    cmd("tradeoff", "memory / word-level perplexity of bf16, NeuZip k=7,3,1,0 and quantization baselines",
        _tradeoff_args)(run_tradeoff)
    cmd("throughput", "bits/weight and 1-thread compress / decompress MB/s: NeuZip, ZipNN, zstd, a memory copy",
        _throughput_args)(run_throughput)
    cmd("process-memory", "bf16 and NeuZip at each k, each loaded in a fresh process: its RSS beside the model's "
        "tensor bytes", _process_memory_args)(run_process_memory)
    cmd("compress", "write a model's linear weights as a NeuZip checkpoint", _compress_args)(run_compress)
    cmd("device-memory", "on a GPU: what the model holds on the device in bf16 and NeuZip-compressed, and a forward's "
        "peak", _device_memory_args)(run_device_memory)
    cmd("decompress", "read a NeuZip checkpoint back (and check it against the model)",
        _decompress_args)(run_decompress)
    cmd("precompute", "measure the tab's first view afresh and write it as the example store (minutes)",
        _precompute_args)(run_precompute)
    cmd("train", "train a model in each mode (vanilla, LOMO, LOMO + NeuZip, QLoRA): loss, peak memory by kind, "
        "speed", _train_args)(run_train)
    cmd("train-example", "train the committed training runs at real size (about 40 minutes on one core)",
        _train_example_args)(run_train_example)
    cmd("recipe-effects", "each mode's peak with and without activation checkpointing and the chunked loss (why "
        "QLoRA's order against LOMO + NeuZip differs from the paper's)", _recipe_effects_args)(run_recipe_effects)
    cmd("build", "build the C codec ahead of time (it is otherwise built on first use; exit 1 where it cannot be)",
        _build_args)(run_build)
    register_batch(groups, BATCH_KIND)  # python -m core neuzip batch: the analysis over a file of inputs
