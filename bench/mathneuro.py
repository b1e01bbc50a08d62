"""MathNeuro identification cost on this CPU, printed as JSON.

- time ratio: ``identify(model, math, nonmath, K, "mathneuro")`` / the same plain forward passes (batch 1, no
  hooks, ``no_grad``), measured side by side, alternating, median of ``--repeats`` (target <= 1.3);
- extra memory: peak resident memory above the loaded model during identification vs during the plain forward
  passes (sampled every 2 ms), and the sizes of what identification keeps (one float32 ``d_in`` vector per matrix
  and dataset) and returns (one bool per scored weight).

Usage: ``python bench/mathneuro.py [--model smollm2-135m] [-n 8] [--repeats 3] [--threads 2]``;
``python bench/mathneuro.py --smoke``: the project's mathneuro-tiny on arithmetic-words / review-sentiment, 2 samples
each, one round, in seconds (CI); its timings and memory are meaningless.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.peak_rss import PeakRSS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--math", default="gsm-symbolic")
    ap.add_argument("--nonmath", default="mmlu")
    ap.add_argument("-n", type=int, default=8, help="samples per dataset")
    ap.add_argument("--proportion", type=float, default=0.05)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a tiny model, 2 samples, one round (CI); timings meaningless")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.math, args.nonmath, args.n, args.repeats, args.threads = \
            "mathneuro-tiny", "arithmetic-words", "review-sentiment", 2, 1, 1

    import torch
    torch.set_num_threads(args.threads)
    from core.mathneuro import collect, identify, scored_linears, select, token_inputs
    from core.mathneuro.service import load
    from core.mathneuro.tasks import MAX_LENGTH, load_records

    lm = load(args.model)
    model = lm.model.eval()
    m_in = token_inputs(lm.tokenizer, load_records(args.math, "train", args.n), MAX_LENGTH)
    n_in = token_inputs(lm.tokenizer, load_records(args.nonmath, "train", args.n), MAX_LENGTH)
    inputs = m_in + n_in

    def plain():
        with torch.no_grad():
            for ids in inputs:
                model(input_ids=ids, use_cache=False)

    def ident():
        return identify(model, m_in, n_in, args.proportion, "mathneuro")

    plain()  # warm-up
    before = {n: p.detach().clone() for n, p in list(model.named_parameters())[:4]}
    t_plain, t_ident, masks = [], [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        plain()
        t_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        masks = ident()
        t_ident.append(time.perf_counter() - t0)
    del masks
    t0 = time.perf_counter()
    stats = collect(model, m_in, n_in, "mathneuro")
    t_collect = time.perf_counter() - t0
    t0 = time.perf_counter()
    select(model, stats, args.proportion, "mathneuro")
    t_select = time.perf_counter() - t0
    del stats
    with PeakRSS(collect=True) as mem_plain:
        plain()
    with PeakRSS(collect=True) as mem_ident:
        masks = ident()
    unchanged = all(torch.equal(p, dict(model.named_parameters())[n]) for n, p in before.items())
    linears = scored_linears(model)
    stats_bytes = 2 * sum(m.in_features * 4 for m in linears.values())
    mask_bytes = sum(m.weight.numel() for m in linears.values())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    selected = sum(int(v.sum()) for v in masks.values())
    tokens = sum(x.shape[1] for x in inputs)
    mp, mi = statistics.median(t_plain), statistics.median(t_ident)
    smoke = {"mode": "smoke", "timings_meaningful": False,
             "timing_note": "smoke run: a tiny model, 2 samples, one round; the timings and memory are meaningless"}
    print(json.dumps({
        **(smoke if args.smoke else {}),
        "model": args.model, "math": args.math, "nonmath": args.nonmath, "samples_per_dataset": args.n,
        "tokens": tokens, "proportion": args.proportion, "threads": args.threads, "repeats": args.repeats,
        "plain_forward_s": round(mp, 3), "identify_s": round(mi, 3), "time_ratio": round(mi / mp, 3),
        "time_ratio_target": 1.3, "plain_forward_runs_s": [round(t, 3) for t in t_plain],
        "identify_runs_s": [round(t, 3) for t in t_ident],
        "of_which_collect_s": round(t_collect, 3), "of_which_select_s": round(t_select, 3),
        "collect_ratio": round(t_collect / mp, 3),
        "peak_rss_above_start_plain_mb": round((mem_plain.peak - mem_plain.base) / 2**20, 1),
        "peak_rss_above_start_identify_mb": round((mem_ident.peak - mem_ident.base) / 2**20, 1),
        "extra_peak_rss_mb": round(((mem_ident.peak - mem_ident.base) - (mem_plain.peak - mem_plain.base)) / 2**20, 1),
        "statistics_kept_mb": round(stats_bytes / 2**20, 3), "masks_returned_mb": round(mask_bytes / 2**20, 1),
        "model_weights_mb": round(weight_bytes / 2**20, 1), "selected": selected,
        "model_unchanged": unchanged,
    }, indent=1))


if __name__ == "__main__":
    main()
