"""Batch throughput against the single-request path, side by side in one run, printed as JSON.

For each case, the same ``--texts`` short reviews are explained with MambaLRP twice per round, alternating:

- ``single``: one :func:`core.lrp.text_result` call per text (what a click on *Explain text*, ``lrp explain`` or the
  ``lrp_relevance`` tool does once), in a loop;
- ``batch``: one :func:`core.batch.run` over a CSV of the texts (kind ``lrp``: the same service call per row, plus
  reading the file, the part files and the merged Parquet file).

Each path starts from an empty results cache of its own (every text computed), after one warm-up text (the model
loaded); texts per second are medians over ``--repeats`` rounds, and ``batch_over_single`` their ratio (target >= 0.9:
a batch is not slower than clicking). Cases: ``embedded`` (mamba-sentiment, the tab's classifier) and ``130m``
(mamba-130m's published config, 24 layers, d_model 768, d_state 16, vocabulary 50280, random weights, with
mamba-lm's tokenizer; a language model, so the next token is explained).

Usage: ``python bench/batch.py [--texts 100] [--texts-130m 12] [--repeats 3] [--threads 2] [--cases embedded,130m]``;
``--smoke``: a few texts, one round, a 2-layer random Mamba for ``130m``, in seconds (timings meaningless).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ["dull", "bright", "slow", "witty", "flat", "moving", "clumsy", "tender", "long", "sharp", "warm", "cold"]
CONFIG_130M = {"num_hidden_layers": 24, "hidden_size": 768, "state_size": 16, "expand": 2, "vocab_size": 50280}
CONFIG_SMOKE = {"num_hidden_layers": 2, "hidden_size": 32, "state_size": 4, "expand": 2, "vocab_size": 4096}


def texts(n: int, offset: int = 0) -> list[str]:
    """``n`` distinct review-like sentences of 12-16 words (``offset`` shifts them, so rounds never share a text)."""
    out = []
    for i in range(offset, offset + n):
        a, b, c = WORDS[i % 12], WORDS[(5 * i + 3) % 12], WORDS[(7 * i + 1) % 12]
        out.append(f"A {a} film with a {b} story, review {i}: the ending is {c} and the cast is {a}.")
    return out


def random_mamba(folder: Path, config: dict) -> Path:
    """A MambaForCausalLM of ``config`` with random weights (seed 0) and mamba-lm's tokenizer, as a model folder."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    MambaForCausalLM(MambaConfig(**config, tie_word_embeddings=True)).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "assets" / "models" / "mamba-lm" / name, folder / name)
    return folder


def _fresh_cache(root: Path):
    """Point the runner at an empty results cache under ``root`` (each path computes every text)."""
    from core import runner
    from core.cache import ResultsCache

    cache = ResultsCache(root)
    runner.results_cache = lambda: cache
    return cache


def measure(model: str, n: int, repeats: int, work: Path) -> dict:
    import pandas as pd

    from core import batch
    from core.lrp import BATCH as lrp_batch, text_result

    _fresh_cache(work / "warm")
    text_result(model, "a warm-up text, so the model is loaded", ["mambalrp"])
    single, batched, rows = [], [], {}
    for r in range(repeats):
        for path in ("single", "batch"):
            shown = texts(n, offset=(2 * r + (path == "batch")) * n)
            _fresh_cache(work / f"{path}-{r}")
            t0 = time.perf_counter()
            if path == "single":
                for t in shown:
                    text_result(model, t, ["mambalrp"])
                single.append(n / (time.perf_counter() - t0))
            else:
                source = work / f"in-{r}.csv"
                pd.DataFrame({"text": shown}).to_csv(source, index=False)
                summary = batch.run(lrp_batch, source, work / f"out-{r}.parquet", model=model, methods=["mambalrp"])
                batched.append(n / (time.perf_counter() - t0))
                rows = {"computed": summary["computed"], "errors": summary["errors"]}
    s, b = statistics.median(single), statistics.median(batched)
    return {"model": model, "texts": n, "rounds": repeats, "single_texts_per_s": round(s, 3),
            "batch_texts_per_s": round(b, 3), "batch_over_single": round(b / s, 3),
            "single_per_round": [round(x, 3) for x in single], "batch_per_round": [round(x, 3) for x in batched],
            "last_batch": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=100, help="texts per path and round on the embedded model")
    ap.add_argument("--texts-130m", type=int, default=12, help="texts per path and round at mamba-130m size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default="embedded,130m")
    ap.add_argument("--smoke", action="store_true", help="a few texts, one round, a tiny random Mamba (meaningless)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.smoke:
        args.texts, args.texts_130m, args.repeats = 3, 2, 1
    report = {"mode": "smoke" if args.smoke else "full", "timings_meaningful": not args.smoke,
              "timing_note": "smoke run: tiny sizes, one round; the timings are meaningless" if args.smoke else
              "medians over the rounds; compare only the two paths of one case (same run, same machine)",
              "threads": args.threads, "load_average": list(os.getloadavg()), "target": {"batch_over_single": 0.9}}
    with tempfile.TemporaryDirectory(prefix="layerwise-bench-batch-") as tmp:
        tmp = Path(tmp)
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            if case == "embedded":
                report[case] = measure("mamba-sentiment", args.texts, args.repeats, tmp / case)
            elif case == "130m":
                config = CONFIG_SMOKE if args.smoke else CONFIG_130M
                folder = random_mamba(tmp / "mamba-130m-random", config)
                report[case] = {"config": config, **measure(str(folder), args.texts_130m, args.repeats, tmp / case)}
            else:
                raise SystemExit(f"unknown case {case!r}: use embedded, 130m")
    report["load_average_after"] = list(os.getloadavg())
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
