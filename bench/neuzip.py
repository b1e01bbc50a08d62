"""NeuZip figures on SmolLM2-135M, printed as JSON (a benchmark, never run by the test suite).

    python bench/neuzip.py                       # all figures (the trade-off takes minutes on 2 cores)
    python bench/neuzip.py --words 2000 --example assets/neuzip/examples.json

- lossless bits per weight on the model's linear layers (every stored byte) against the empirical
  entropy bound (exponent entropy + 1 + 7 bits), the gap in percent (target: within 1 %), and zstd / zlib
  on the raw bf16 bytes;
- CPU encode / decode MB/s of NeuZip (lossless and k=3 with B=128) against a plain copy of the same
  bytes, measured side by side in one run (best of ``--repeats``);
- the memory / perplexity table (bf16, NeuZip k = 7, 3, 1, 0 with and without the B=128 normaliser,
  bitsandbytes INT8 / NF4 / FP4, NF4 + rANS), word-level perplexity on ``--words`` words of the
  Wikipedia paragraphs test split. Its points are read from the results cache when present.

``--example PATH`` also writes the tab's precomputed example (histograms, the lossless table,
throughput and the trade-off) to ``PATH``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _log(msg: str) -> None:
    print(f"... {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--words", type=int, default=2000, help="evaluation words for the perplexity")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--numel", type=int, default=8 * 1024 * 1024, help="weights timed for throughput")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-tradeoff", action="store_true")
    ap.add_argument("--example", type=Path, help="also write the tab's precomputed example JSON here")
    args = ap.parse_args(argv)

    import torch

    from core.neuzip import histograms_result, table_result, tradeoff, write_example
    from core.neuzip.service import model_throughput, tradeoff_rows

    def model_table(ref, k, b, progress=None):
        return table_result(ref, k, b, progress=progress).data

    def model_histograms(ref):
        return histograms_result(ref).data

    out: dict = {"model": args.model, "machine": {"cpu_threads": torch.get_num_threads(),
                                                  "platform": platform.platform(), "torch": torch.__version__}}
    t0 = time.perf_counter()
    _log("lossless compression table")
    table = model_table(args.model, 7, None, progress=lambda f, m: None)
    tot = table["total"]
    gap = 100.0 * (tot["bits_per_weight"] - tot["entropy_bound"]) / tot["entropy_bound"]
    out["lossless"] = {"linear_weights": tot["numel"], "bits_per_weight": round(tot["bits_per_weight"], 4),
                       "entropy_bound": round(tot["entropy_bound"], 4),
                       "exponent_entropy": round(tot["exponent_entropy"], 4), "gap_percent": round(gap, 3),
                       "within_1_percent": gap <= 1.0,
                       "zstd_bits_per_weight": None if tot["zstd_bits_per_weight"] is None
                       else round(tot["zstd_bits_per_weight"], 4),
                       "zlib_bits_per_weight": round(tot["zlib_bits_per_weight"], 4),
                       "compression_ratio_vs_bf16": round(16.0 / tot["bits_per_weight"], 4)}
    t1 = time.perf_counter()
    _log("throughput")
    thr = model_throughput(args.model, [(7, None), (3, args.block_size)], numel=args.numel, repeats=args.repeats)
    out["throughput"] = {"weights": thr["numel"], "MB": round(2 * thr["numel"] / 1e6, 1), "rows": [
        {"setting": r["label"], "encode_MBps": round(r["compress_MBps"], 1), "decode_MBps": round(r["decompress_MBps"], 1),
         "memcpy_MBps": round(r["memcpy_MBps"], 1), "decode_time_vs_memcpy": round(r["decompress_vs_memcpy"], 1),
         "encode_time_vs_memcpy": round(r["memcpy_MBps"] / r["compress_MBps"], 1)} for r in thr["rows"]]}
    t2 = time.perf_counter()
    result = None
    if not args.skip_tradeoff:
        _log(f"memory / perplexity trade-off on {args.words} words (cached points are reused)")
        result = tradeoff(args.model, block_size=args.block_size, words=args.words,
                          progress=lambda f, m: _log(f"{100 * f:5.1f}% {m}") if "window" not in m else None)
        out["tradeoff"] = {"dataset": result["dataset"], "words": result["words"], "tokens": result["tokens"],
                           "window": result["window"], "rows": tradeoff_rows(result), "pareto": result["pareto"],
                           "cached_points": sum(p["cached"] for p in result["points"])}
    t3 = time.perf_counter()
    out["seconds"] = {"table": round(t1 - t0, 1), "throughput": round(t2 - t1, 1), "tradeoff": round(t3 - t2, 1)}
    if args.example:
        example = {"model": args.model, "histograms": model_histograms(args.model), "table": table,
                   "throughput": thr, "tradeoff": result,
                   "made_by": f"python bench/neuzip.py --words {args.words} --example {args.example}"}
        args.example.parent.mkdir(parents=True, exist_ok=True)
        write_example(args.example, example)
        out["example"] = str(args.example)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
