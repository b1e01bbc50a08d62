"""``python -m core neuzip ...``: the NeuZip measurements and the codec from the command line.

    python -m core neuzip histograms --model smollm2-135m [--out hist.html]
    python -m core neuzip table      --model smollm2-135m --k 7 [--block-size B] [--out table.csv]
    python -m core neuzip tradeoff   --model smollm2-135m --k 7 3 1 0 --block-size 128 --words 2000 [--out f.html]
    python -m core neuzip throughput --model smollm2-135m --k 7 [--block-size B] [--numel N]
    python -m core neuzip compress   --model smollm2-135m --k 7 --out weights.neuzip.safetensors
    python -m core neuzip decompress weights.neuzip.safetensors [--model smollm2-135m] [--out plain.safetensors]

``--out`` writes data as ``.json`` / ``.csv`` or the figure as a self-contained ``.html`` (plotly.js
included, works offline). Every parameter is checked before a model is loaded; bad input exits with
code 2 and one line naming the fix. Ctrl-C stops a long run (finished trade-off points stay cached).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from core.errors import BadInputError

__all__ = ["register"]


def _emit(args, result, text: str) -> None:
    print(json.dumps(result, indent=1, default=str) if args.json else text)


class _Bar:
    """A one-line progress bar on stderr: ``progress(fraction, message)``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.last = ""

    def __call__(self, fraction: float, message: str) -> None:
        filled = int(30 * max(0.0, min(1.0, fraction)))
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:5.1f}% {time.perf_counter() - self.t0:6.0f}s {message}"
        if self.tty:
            print("\r" + line[:120].ljust(120), end="", file=sys.stderr, flush=True)
        elif "window" not in message and message != self.last:  # a log: one line per step
            print(line, file=sys.stderr, flush=True)
        self.last = message

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _check_out(path: str | None, allowed: tuple[str, ...]) -> None:
    if path is None:
        return
    p = Path(path)
    if p.suffix.lower() not in allowed:
        raise BadInputError(f"--out {path}: this command writes {', '.join(allowed)} files.",
                            fix=f"name the output *{allowed[0]}")
    if not p.parent.is_dir():
        raise BadInputError(f"--out {path}: the folder {p.parent} does not exist.", fix="create it first")


def _block(value: int | None) -> int | None:
    return None if value in (None, 0) else value


def _write(args, data, rows, figure) -> None:
    if args.out:
        from core.figures import write_output
        write_output(args.out, data, rows, figure)
        print(f"wrote {args.out}", file=sys.stderr)


def _model_arg(p) -> None:
    p.add_argument("--model", default="smollm2-135m",
                   help="a registered model, a local Hugging Face folder, or a hub id (with --online)")


def _out_arg(p, what: str = ".json, .csv or .html") -> None:
    p.add_argument("--out", metavar="FILE", help=f"write the result ({what})")


def _k_arg(p) -> None:
    p.add_argument("--k", type=int, default=7, metavar="K", help="mantissa bits kept: 7 (lossless), 3, 1 or 0")
    p.add_argument("--block-size", type=int, default=None, metavar="B",
                   help="per-block normaliser for k < 7: a power of two from 32 to 1024 (0 or absent: none)")


# ------------------------------------------------------------------------------------------------ commands

def _histograms_args(p):
    _model_arg(p)
    _out_arg(p)


def run_histograms(args):
    _check_out(args.out, (".json", ".csv", ".html"))
    from core.neuzip.views import histogram_figure, model_histograms

    bar = _Bar()
    h = model_histograms(args.model, progress=bar)
    bar.close()
    rows = [{"field": f, "value": v, "count": c} for f in ("sign", "exponent", "mantissa")
            for v, c in enumerate(h[f]) if c]
    _write(args, h, rows, histogram_figure(h) if args.out and args.out.endswith(".html") else None)
    e = h["entropy"]
    _emit(args, h, f"{args.model}: {h['numel']:,} linear weights in {len(h['tensors'])} tensors\n"
                   f"entropy (bits): sign {e['sign']:.4f}, exponent {e['exponent']:.4f} of 8, "
                   f"mantissa {e['mantissa']:.4f} of 7" + (f"\nnote: {h['note']}" if h.get("note") else ""))


def _table_args(p):
    _model_arg(p)
    _k_arg(p)
    _out_arg(p)


def run_table(args):
    from core.neuzip.codec import check_params

    check_params(args.k, _block(args.block_size))
    _check_out(args.out, (".json", ".csv", ".html"))
    from core.neuzip.views import model_table, table_figure, table_rows

    bar = _Bar()
    t = model_table(args.model, args.k, _block(args.block_size), progress=bar)
    bar.close()
    rows = table_rows(t)
    _write(args, t, rows, table_figure(t) if args.out and args.out.endswith(".html") else None)
    from core.cli import _table
    show = [{k: ("" if v is None else v) for k, v in r.items()} for r in rows]
    _emit(args, t, _table(show, list(rows[0])))


def _tradeoff_args(p):
    from core.neuzip.tradeoff import DEFAULT_WINDOW, DEFAULT_WORDS
    _model_arg(p)
    p.add_argument("--k", type=int, nargs="+", default=[7, 3, 1, 0], metavar="K", help="mantissa bits to try")
    p.add_argument("--block-size", type=int, default=128, metavar="B",
                   help="normaliser block size, also tried for every k < 7 (0: none)")
    p.add_argument("--words", type=int, default=DEFAULT_WORDS, help="evaluation words (test split)")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="tokens per perplexity window")
    p.add_argument("--dataset", default=None, help="evaluation text (default: wikipedia-paragraphs offline, "
                                                   "wikitext-2 online)")
    p.add_argument("--no-baselines", action="store_true", help="leave out the bitsandbytes / NF4 + rANS points")
    p.add_argument("--log-x", action="store_true", help="log memory axis in the HTML figure")
    p.add_argument("--no-cache", action="store_true", help="recompute every point")
    _out_arg(p)


def run_tradeoff(args):
    from core.neuzip.tradeoff import default_settings, tradeoff

    default_settings(args.k, _block(args.block_size), not args.no_baselines)  # checks k and B
    if args.words < 1 or args.window < 8:
        raise BadInputError("--words must be >= 1 and --window >= 8.")
    _check_out(args.out, (".json", ".csv", ".html"))
    from core.neuzip.views import tradeoff_figure, tradeoff_rows

    bar = _Bar()
    r = tradeoff(args.model, args.k, _block(args.block_size), args.words, args.window, not args.no_baselines,
                 args.dataset, use_cache=not args.no_cache, progress=bar)
    bar.close()
    rows = tradeoff_rows(r)
    _write(args, r, rows, tradeoff_figure(r, args.log_x) if args.out and args.out.endswith(".html") else None)
    from core.cli import _table
    text = (f"{args.model}: word-level perplexity on {r['words']:,} words ({r['tokens']:,} tokens) of {r['dataset']}\n"
            + _table([{**x, "pareto": "*" if x["pareto"] else ""} for x in rows], list(rows[0]))
            + "\nPareto front: " + " -> ".join(r["pareto"]) + "\n" + "\n".join(r["notes"]))
    _emit(args, r, text)


def _throughput_args(p):
    from core.neuzip.views import THROUGHPUT_NUMEL
    _model_arg(p)
    _k_arg(p)
    p.add_argument("--numel", type=int, default=THROUGHPUT_NUMEL, help="weights to time (from the linear layers)")
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    _out_arg(p)


def run_throughput(args):
    from core.neuzip.codec import check_params

    check_params(args.k, _block(args.block_size))
    if args.repeats < 1:
        raise BadInputError("--repeats must be >= 1.")
    _check_out(args.out, (".json", ".csv", ".html"))
    from core.neuzip.views import model_throughput, throughput_figure, throughput_rows

    settings = [(7, None)] if args.k == 7 else [(7, None), (args.k, _block(args.block_size))]
    bar = _Bar()
    r = model_throughput(args.model, settings, args.numel, args.repeats, progress=bar)
    bar.close()
    rows = throughput_rows(r)
    _write(args, r, rows, throughput_figure(r) if args.out and args.out.endswith(".html") else None)
    from core.cli import _table
    _emit(args, r, f"{args.model}: {r['numel']:,} weights ({2 * r['numel'] / 1e6:.1f} MB bf16)\n"
                   + _table(rows, list(rows[0])))


def _compress_args(p):
    _model_arg(p)
    _k_arg(p)
    p.add_argument("--out", metavar="FILE", required=True, help="the compressed checkpoint (*.safetensors)")


def run_compress(args):
    from core.neuzip.codec import check_params

    block = _block(args.block_size)
    check_params(args.k, block)
    _check_out(args.out, (".safetensors",))
    import warnings

    from core.neuzip import compress, save_compressed
    from core.neuzip.views import linear_weights
    from core.zoo import load_model

    bar = _Bar()
    bar(0.0, f"loading {args.model}")
    weights = linear_weights(load_model(args.model).model)
    tensors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, (name, w) in enumerate(weights.items()):
            bar(i / len(weights), name)
            tensors[name.removesuffix(".weight")] = compress(w, args.k, block)
    bar.close()
    path = save_compressed(args.out, tensors)
    numel = sum(c.numel for c in tensors.values())
    stored = sum(c.nbytes for c in tensors.values())
    result = {"model": args.model, "file": str(path), "tensors": len(tensors), "weights": numel,
              "mantissa_bits": args.k, "block_size": block, "stored_bytes": stored,
              "file_bytes": os.path.getsize(path), "bits_per_weight": 8.0 * stored / numel,
              "bf16_bytes": 2 * numel}
    _emit(args, result, f"compressed {len(tensors)} linear weights ({numel:,}) of {args.model} with k={args.k}"
                        + (f", B={block}" if block else "") + f": {result['bits_per_weight']:.3f} bits/weight, "
                        f"{stored / 1e6:.1f} MB (bf16: {2 * numel / 1e6:.1f} MB) -> {path}")


def _decompress_args(p):
    p.add_argument("file", help="a checkpoint written by `neuzip compress`")
    p.add_argument("--model", default=None, help="compare with this model's weights (bit-exact for k=7)")
    p.add_argument("--out", metavar="FILE", help="write the decoded bf16 weights as plain safetensors")


def run_decompress(args):
    src = Path(args.file)
    if not src.is_file():
        raise BadInputError(f"{args.file} does not exist.", fix="give a file written by `neuzip compress`")
    _check_out(args.out, (".safetensors",))
    import torch
    from safetensors.torch import save_file

    from core.neuzip import load_compressed

    tensors = load_compressed(src)  # raises BadInputError for a truncated or tampered file
    decoded = {}
    for name, ct in tensors.items():
        decoded[f"{name}.weight"] = ct.decompress()
    result = {"file": str(src), "tensors": len(tensors), "weights": sum(c.numel for c in tensors.values()),
              "mantissa_bits": sorted({c.mantissa_bits for c in tensors.values()}),
              "bits_per_weight": 8.0 * sum(c.nbytes for c in tensors.values())
              / max(1, sum(c.numel for c in tensors.values()))}
    if args.model:
        from core.neuzip.views import linear_weights
        from core.zoo import load_model

        ref = linear_weights(load_model(args.model).model)
        missing = [n for n in decoded if n not in ref]
        if missing:
            raise BadInputError(f"{len(missing)} tensors of the file are not linear weights of {args.model} "
                                f"(e.g. {missing[0]}).", fix="compare with the model the file was made from")
        exact = all(torch.equal(decoded[n].view(torch.int16), ref[n].to(torch.bfloat16).view(torch.int16))
                    for n in decoded)
        err = max(float((decoded[n].float() - ref[n].to(torch.bfloat16).float()).abs().max()) for n in decoded)
        result.update({"model": args.model, "bit_exact": exact, "max_abs_error": err})
    if args.out:
        out = Path(args.out)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        os.close(fd)
        try:
            save_file({k: v.contiguous() for k, v in decoded.items()}, tmp, metadata={"source": src.name})
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        result["out"] = str(out)
    text = (f"{src}: {result['tensors']} tensors, {result['weights']:,} weights, "
            f"{result['bits_per_weight']:.3f} bits/weight, k={result['mantissa_bits']}")
    if args.model:
        text += f"\nagainst {args.model}: bit-exact {result['bit_exact']}, max |error| {result['max_abs_error']:.3g}"
    if args.out:
        text += f"\nwrote {args.out}"
    _emit(args, result, text)


def register(groups) -> None:
    """Add the ``neuzip`` commands to the CLI registry (see :mod:`core.cli`)."""
    cmd = lambda name, help, add: groups.command("neuzip", name, help, add)  # noqa: E731
    cmd("histograms", "sign / exponent / mantissa histograms and entropies of a model's linear weights",
        _histograms_args)(run_histograms)
    cmd("table", "bits per weight per layer vs the entropy bound, zstd and zlib", _table_args)(run_table)
    cmd("tradeoff", "memory / word-level perplexity of bf16, NeuZip k=7,3,1,0 and quantization baselines",
        _tradeoff_args)(run_tradeoff)
    cmd("throughput", "compress / decompress MB/s against a plain memory copy", _throughput_args)(run_throughput)
    cmd("compress", "write a model's linear weights as a NeuZip checkpoint", _compress_args)(run_compress)
    cmd("decompress", "read a NeuZip checkpoint back (and check it against the model)",
        _decompress_args)(run_decompress)
