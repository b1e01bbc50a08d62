"""NeuZip figures printed as JSON.

    python bench/neuzip.py                                   # codecs on 4 weight sets + forward ratios
    python bench/neuzip.py --smoke                           # every part on a tiny model, seconds (CI)
    python bench/neuzip.py --tradeoff --words 2000           # also the memory / perplexity table (minutes)
    python bench/neuzip.py --online --model HF_ID            # also any real bf16 checkpoint (downloads it)
    python bench/neuzip.py --example assets/neuzip/examples.json      # also rewrite the tab's example store
    python bench/neuzip.py --parts training                  # training modes: memory and speed against vanilla
    python bench/neuzip.py --parts training --device cuda --train-model llama3-8b --layers 4 --budget 300  # a GPU

- ``codecs``: for each weight set, lossless bits per weight (every stored byte) against the order-0
  exponent entropy bound, and compress / decompress MB/s on ONE thread, side by side in one run, of
  NeuZip, ZipNN (``pip install zipnn==0.5.4``; skipped with a note when missing), zstd -3 and a plain
  memory copy (MB = 1e6 bytes of bf16; the median of ``--repeats`` runs per tensor, summed). Weight
  sets: ``smollm2-135m`` (its 210 linear weights; de-quantized from a 4-bit GGUF, see
  ``distinct_per_32``), ``trained`` (this project's trained models in assets/, rounded to bf16),
  ``gaussian`` / ``student-t`` (SmolLM2's shapes and per-tensor standard deviations, native bf16
  statistics), and ``--model`` when it is another checkpoint;
- ``forward``: the forward time over ``--tokens`` tokens of SmolLM2-135M compressed (lossless and
  lossy) over the bf16 model's, torch on one thread; with ``decode_ahead = 2`` a second thread
  decodes the next layers (on the machine's other core) while torch computes;
- ``tradeoff`` (with ``--tradeoff``): the memory / perplexity table of the NeuZip tab;
- ``training``: ``--train-model`` (SmolLM2-135M) trained ``--train-steps`` steps of ``--train-batch`` x
  ``--train-seq`` tokens in each of ``--train-modes`` (:func:`core.neuzip.train_modes`: same weights, same batches),
  each mode in its own fresh processes: the peak of live tensor memory split into weights / gradients /
  optimizer / activations (the first 2 steps, allocator-level), the process's peak RSS, iterations per second
  (median of the later steps), and each mode's memory and speed over vanilla's, printed beside the targets (LOMO + NeuZip at most
  0.55x vanilla's peak memory on SmolLM2-135M, at least 0.5x its speed on the CPU, by CPU time and by the wall
  clock: on a shared machine the CPU time is the one that measures the mode). ``--device cuda`` runs it on a
  GPU (``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` are reported too); ``--budget`` caps the seconds of
  the whole part. The process memory's own bench rows (the codec's fixed cost, RSS over steps, inference, a memory
  cap) are ``bench/neuzip_memory.py``.

``--smoke`` runs every part (codecs, forward, tradeoff and the example, written to a temporary folder and
removed) on the project's mathneuro-tiny instead of SmolLM2-135M: 4 tensors a weight set, one round, 16 tokens,
100 words, k = 7 and 0 without the baselines, the training part on tiny-llama (3 steps of 16 tokens, vanilla, LOMO
and LOMO + NeuZip), under ``core.runner.recomputing()`` (the user's results cache is
neither read nor written). It checks the script end to end in seconds; its timings are meaningless.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


SMOKE_MODEL = "mathneuro-tiny"  # --smoke: a causal LM of the project's own (3.6 MB), in place of SmolLM2-135M
SMOKE_TENSORS = 4  # --smoke: tensors of each weight set
SMOKE_TRADEOFF = {"ks": (7, 0), "baselines": False}  # --smoke: two NeuZip points
SMOKE_TRAINING = {"model": "tiny-llama", "modes": "vanilla,lomo,lomo+neuzip", "steps": 3, "batch": 1, "seq": 16}
PARTS = ("codecs", "forward", "tradeoff", "training")
TRAINING_TARGETS = {"memory_vs_vanilla": ("<=", 0.55), "cpu_speed_vs_vanilla": (">=", 0.5),
                    "speed_vs_vanilla": (">=", 0.5)}  # LOMO + NeuZip, issue 32 (speed by CPU time and by the wall)


def _log(msg: str) -> None:
    print(f"... {msg}", file=sys.stderr, flush=True)


def _distinct_per_block(tensors: dict, block: int = 32) -> float:
    """Mean number of distinct values in each run of ``block`` consecutive weights."""
    import numpy as np
    import torch

    counts, blocks = 0, 0
    for t in tensors.values():
        x = t.detach().reshape(-1).to(torch.bfloat16).view(torch.int16).numpy()
        x = np.sort(x[: x.size // block * block].reshape(-1, block), axis=1)
        counts += int((np.diff(x, axis=1) != 0).sum()) + x.shape[0]
        blocks += x.shape[0]
    return counts / max(blocks, 1)


def _trained_weights() -> dict:
    """The 2-D weights of this project's trained models (assets/), embeddings and heads left out."""
    from safetensors.torch import load_file

    out = {}
    for path in sorted(glob.glob(str(REPO / "assets/models/*/model.safetensors"))
                       + glob.glob(str(REPO / "assets/mixln/*/model.safetensors"))):
        run = Path(path).parent.name
        for name, t in load_file(path).items():
            if t.dim() >= 2 and t.is_floating_point() and not any(s in name for s in ("embed", "lm_head", "head.")):
                out[f"{run}/{name}"] = t
    return out


def _summary(r: dict) -> dict:
    rows = {row["codec"]: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                           if k in ("bits_per_weight", "gap_percent", "compress_MBps", "decompress_MBps")}
            for row in r["rows"]}
    out = {"weights": r["weights"], "tensors": r["tensors"], "entropy_bound": round(r["entropy_bound"], 4),
           "exponent_entropy": round(r["exponent_entropy"], 4), "codecs": rows,
           "neuzip_breakdown": {k: round(v, 5) for k, v in (r["neuzip_breakdown"] or {}).items()}}
    if r["skipped"]:
        out["skipped"] = r["skipped"]
    if r["note"]:
        out["note"] = r["note"]
    nz, zn = rows.get("neuzip"), rows.get("zipnn")
    if nz and zn:
        out["neuzip_vs_zipnn"] = {"bits_smaller": nz["bits_per_weight"] < zn["bits_per_weight"],
                                  "decompress_speed_ratio": round(nz["decompress_MBps"] / zn["decompress_MBps"], 3),
                                  "compress_speed_ratio": round(nz["compress_MBps"] / zn["compress_MBps"], 3)}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="also measure this checkpoint's linear weights")
    ap.add_argument("--online", action="store_true", help="allow hub downloads for --model")
    ap.add_argument("--sets", default="smollm2-135m,trained,gaussian,student-t")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--forward-repeats", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--skip-forward", action="store_true")
    ap.add_argument("--tradeoff", action="store_true", help="also the memory / perplexity table (minutes)")
    ap.add_argument("--words", type=int, default=2000, help="evaluation words for the perplexity")
    ap.add_argument("--example", type=Path, help="also write the tab's precomputed example JSON here")
    ap.add_argument("--smoke", action="store_true", help="every part on a tiny model, in seconds (CI); timings "
                                                         "meaningless")
    ap.add_argument("--parts", default=None, help="comma-separated parts to run: " + ", ".join(PARTS) + " (default: "
                    "codecs, forward and training; tradeoff with --tradeoff)")
    ap.add_argument("--train-model", default="smollm2-135m")
    ap.add_argument("--train-modes", default="vanilla,vanilla-adamw,lomo,lomo+neuzip,qlora-int8,qlora-nf4,qlora-fp4")
    ap.add_argument("--train-steps", type=int, default=6, help="steps a mode: 2 measure memory, the rest speed")
    ap.add_argument("--train-batch", type=int, default=2)
    ap.add_argument("--train-seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=None, help="training: keep this many decoder layers")
    ap.add_argument("--device", default="cpu", help="training: cpu or cuda")
    ap.add_argument("--budget", type=float, default=None, help="training: seconds for the whole part (each mode its "
                                                               "share; the steps done count)")
    ap.add_argument("--compress-threads", type=int, default=0, choices=(0, 1),
                    help="training: LOMO + NeuZip compresses in a background thread (1)")
    args = ap.parse_args(argv)
    parts = set(PARTS if args.parts is None and args.smoke else
                (args.parts.split(",") if args.parts else ("codecs", "forward", "training")))
    if args.tradeoff:
        parts.add("tradeoff")
    if args.skip_forward:
        parts.discard("forward")
    unknown = parts - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.parts = parts
    if args.smoke:
        args.model, args.repeats, args.tokens, args.forward_repeats, args.words, args.tradeoff = \
            SMOKE_MODEL, 1, 16, 1, 100, True
        args.train_model, args.train_modes, args.train_steps, args.train_batch, args.train_seq = \
            (SMOKE_TRAINING[k] for k in ("model", "modes", "steps", "batch", "seq"))
    if args.online:
        os.environ["LAYERWISE_ONLINE"] = "1"
    from core.runner import recomputing

    with recomputing() if args.smoke else contextlib.nullcontext():
        out = measure(args)
    print(json.dumps(out, indent=1))
    return out


def measure(args) -> dict:
    """Every part ``args`` asks for, as the JSON dict."""
    base = SMOKE_MODEL if args.smoke else "smollm2-135m"  # the model whose weights, forward and trade-off are measured
    import torch

    from core.neuzip import linear_weights
    from core.neuzip.compare import codec_comparison, forward_ratio, synthetic_weights
    from core.zoo import load_model

    from core.neuzip.process import machine

    out: dict = {"machine": {**machine(), "threads": "1 (torch.set_num_threads(1), ZipNN threads=1, zstd and the "
                                                     "codec one thread)"}}
    if args.smoke:
        out.update(mode="smoke", timings_meaningful=False,
                   timing_note=f"smoke run: {base}, one round, {args.tokens} tokens, {args.words} words; the timings "
                               "and ratios are meaningless")
    seconds = {}
    if "training" in args.parts:
        t3 = time.perf_counter()
        out["training"] = training_rows(args)
        seconds["training"] = round(time.perf_counter() - t3, 1)
    if not args.parts & {"codecs", "forward", "tradeoff"} and not args.example:
        out["seconds"] = seconds
        return out
    t0 = time.perf_counter()
    smol = load_model(base).model
    smol_weights = linear_weights(smol)
    shown = "SmolLM2-135M" if base == "smollm2-135m" else base
    sets = {}
    for name in args.sets.split(","):
        if name == "smollm2-135m":
            name = base
            sets[name] = ("SmolLM2-135M's 210 linear weights (de-quantized from a 4-bit GGUF)"
                          if base == "smollm2-135m" else f"{base}'s linear weights", smol_weights)
        elif name == "trained":
            sets[name] = ("this project's trained models in assets/ (Mix-LN runs fp16, others fp32), as bf16",
                          _trained_weights())
        elif name in ("gaussian", "student-t"):
            shapes = {k: (tuple(w.shape), float(w.float().std())) for k, w in smol_weights.items()}
            sets[name] = (f"{name} weights of {shown}'s shapes and per-tensor std (seed 0"
                          + (", 4 degrees of freedom)" if name == "student-t" else ")"),
                          synthetic_weights(shapes, name, seed=0))
        else:
            raise SystemExit(f"unknown weight set {name!r}")
    if args.model != base:
        sets[args.model] = (f"{args.model}'s linear weights", linear_weights(load_model(args.model).model))
    out["codecs"] = {}
    for name, (what, tensors) in (sets.items() if "codecs" in args.parts else ()):
        if args.smoke:
            tensors = dict(list(tensors.items())[:SMOKE_TENSORS])
        _log(f"codecs on {name} ({len(tensors)} tensors)")
        r = codec_comparison(tensors, repeats=args.repeats)
        out["codecs"][name] = {"weights_from": what, "distinct_per_32": round(_distinct_per_block(tensors), 2),
                               **_summary(r)}
    seconds["codecs"] = round(time.perf_counter() - t0, 1)

    if "forward" in args.parts:
        t1 = time.perf_counter()
        _log(f"forward ratios over {args.tokens} tokens")
        ids = torch.randint(0, smol.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
        b = args.block_size
        fr = forward_ratio(smol, ids, [(7, None), (3, b), (1, b), (0, b)], decode_ahead=(0, 2),
                           repeats=args.forward_repeats, progress=lambda fraction, message: _log(message))
        out["forward"] = {"model": base, "tokens": fr["tokens"], "token_ids": "uniform random, seed 0",
                          "bf16_seconds": round(fr["bf16_seconds"], 3),
                          "threads": "torch 1; decode_ahead=2 adds one decode thread (the second core)",
                          "rows": [{"setting": r["label"], "decode_ahead": r["decode_ahead"],
                                    "seconds": round(r["seconds"], 3), "ratio_vs_bf16": round(r["ratio"], 3),
                                    "max_abs_logit_diff": round(r["max_abs_logit_diff"], 4)} for r in fr["rows"]]}
        seconds["forward"] = round(time.perf_counter() - t1, 1)

    if "tradeoff" in args.parts:
        from core.neuzip import tradeoff_result

        t2 = time.perf_counter()
        _log(f"memory / perplexity trade-off on {args.words} words (the example or cached points answer at once)")
        res = tradeoff_result(base, block_size=args.block_size, words=args.words, **(SMOKE_TRADEOFF if args.smoke else {}),
                              progress=lambda f, m: _log(f"{100 * f:5.1f}% {m}") if "window" not in m else None)
        result = res.data
        out["tradeoff"] = {"dataset": result["dataset"], "words": result["words"], "tokens": result["tokens"],
                           "window": result["window"], "rows": res.tables["tradeoff"], "pareto": result["pareto"],
                           "source": res.source}
        seconds["tradeoff"] = round(time.perf_counter() - t2, 1)
    out["seconds"] = seconds
    if args.example or args.smoke:
        from core.neuzip import precompute_examples

        def write(path):
            return precompute_examples(base, words=args.words, block_size=args.block_size, path=path,
                                       progress=lambda f, m: _log(f"{100 * f:5.1f}% {m}"))

        if args.example:
            out["example"] = str(write(args.example))
        else:
            with tempfile.TemporaryDirectory() as tmp:  # the example's code runs; the file is not kept
                written = json.loads(write(Path(tmp) / "examples.json").read_text())
            out["example"] = {"written_and_removed": True, "keys": sorted(written)}
    return out


def training_rows(args) -> dict:
    """Train ``--train-model`` in each mode and set each mode's peak memory and speed against vanilla's, beside the
    targets."""
    import torch

    from core.neuzip import TrainSettings, train_modes
    from core.neuzip.training_views import ratios

    if args.device == "cpu":
        torch.set_num_threads(1)  # the modes are timed on one thread (LOMO + NeuZip's --compress-threads 1 adds one)
    modes = args.train_modes.split(",")
    settings = TrainSettings(steps=args.train_steps, batch=args.train_batch, seq=args.train_seq, device=args.device,
                             layers=args.layers, budget_s=args.budget, compress_threads=args.compress_threads,
                             fresh=not args.smoke)  # each mode in fresh processes (the smoke run: in this one)
    _log(f"training {args.train_model} in {len(modes)} modes, {args.train_steps} steps each")
    run = train_modes(args.train_model, modes, settings,
                      progress=lambda f, m: _log(f"{100 * f:5.1f}% {m}") if m.endswith("1/" + str(args.train_steps))
                      or "step" not in m else None)
    rel = ratios(run)
    mib = 2 ** 20
    rows = []
    for m in run["modes"]:
        row = {"mode": m["mode"], "steps": m["steps"], "final_loss": round(m["final_loss"], 4),
               "peak_MiB": round(m["peak_bytes"] / mib, 1),
               "split_MiB": {k: round(v / mib, 1) for k, v in m["peak_split"].items()},
               "peak_rss_MiB": round((m["peak_rss_bytes"] or 0) / mib), "it_per_s": round(m["it_per_s"], 4),
               "it_per_cpu_s": None if not m.get("it_per_cpu_s") else round(m["it_per_cpu_s"], 4),
               "step_seconds": [round(x, 3) for x in m["step_seconds"]],
               "step_cpu_seconds": [round(x, 3) for x in m["step_cpu_seconds"]],
               **{k: (None if v is None else round(v, 3)) for k, v in rel[m["mode"]].items()}}
        if "cuda_max_allocated_bytes" in m:
            row["cuda_max_allocated_MiB"] = round(m["cuda_max_allocated_bytes"] / mib, 1)
            row["cuda_max_reserved_MiB"] = round(m["reserved_bytes"] / mib, 1)
        rows.append(row)
    targets = {}
    nz = rel.get("lomo+neuzip", {})
    for key, (op, bound) in TRAINING_TARGETS.items():
        value = nz.get(key)
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        targets[f"lomo+neuzip {key} {op} {bound}"] = {"value": None if value is None else round(value, 3), "met": met}
    return {"model": args.train_model, "parameters": run["parameters"], "device": run["device"],
            "threads": run["threads"], "settings": run["settings"], "rows": rows, "targets": targets,
            "identical": run["identical"], "skipped": run["skipped"], "load_average_start": run["load_average_start"],
            "load_average_end": run["load_average_end"], "machine": run["machine"],
            "note": "memory: peak of live tensor bytes over the first 2 steps (PyTorch's allocator, profiled; the "
                    "paper's analogue) beside the process's peak RSS (the whole process); speed: median step time of "
                    "the later steps, by CPU time (time.process_time) and by the wall clock; "
                    + ("each mode in its own fresh processes" if settings.fresh else "the modes one after the other "
                       "in one process (the peak RSS is then not each mode's own)")}


if __name__ == "__main__":
    main()
