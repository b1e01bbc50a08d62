"""Mix-LN figures: training tokens/s of MixLNForCausalLM (Pre-LN and Mix-LN) vs transformers' LlamaForCausalLM of
the same size and weights, measured side by side (interleaved rounds, so a noisy shared machine slows all three
alike), and the committed runs' final held-out perplexities. Prints JSON.

    python bench/mixln_throughput.py [--reps 5] [--threads 2] [--hidden 512] [--layers 8] [--batch 4] [--seq 256]
    python bench/mixln_throughput.py --smoke     # tiny sizes, seconds: the script runs end to end (CI)

``train_step`` is forward + backward + AdamW step; ``forward`` is inference without gradients. Ratios are
hf_time / our_time (above 1: ours is faster): of the medians, of the CPU times, and the median of per-round ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="interleaved timed rounds (after one warm-up)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round; timings meaningless (CI)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.reps, a.threads, a.hidden, a.layers, a.vocab, a.batch, a.seq = 1, 1, 32, 2, 256, 1, 16
    return a


def build_models(a):
    from transformers import LlamaForCausalLM

    from core.mixln import MixLNConfig, MixLNForCausalLM
    size = dict(vocab_size=a.vocab, hidden_size=a.hidden, num_layers=a.layers, num_heads=max(1, a.hidden // 64),
                intermediate_size=int(a.hidden * 8 / 3 / 16 + 1) * 16)
    torch.manual_seed(0)
    pre = MixLNForCausalLM(MixLNConfig(**size, norm="pre"))
    mix = MixLNForCausalLM(MixLNConfig(**size, norm="mix"))
    llama = LlamaForCausalLM(pre.to_llama_config())
    llama.load_state_dict(pre.state_dict())  # Pre-LN weights load unchanged: the same network
    return size, {"mixln_pre": pre, "mixln_mix": mix, "hf_llama": llama}


def forward(model, ids):
    model.eval()
    with torch.no_grad():
        model(ids, use_cache=False).logits.sum()


def make_train_step():
    optimizers = {}

    def train_step(model, ids):
        opt = optimizers.setdefault(id(model), torch.optim.AdamW(model.parameters(), lr=1e-4))
        model.train()
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return train_step


def measure(models, fn, ids, reps):
    times = {k: [] for k in models}
    cpu = {k: [] for k in models}
    for m in models.values():
        fn(m, ids)  # warm-up
    for _ in range(reps):
        for k, m in models.items():
            t, c = time.perf_counter(), time.process_time()
            fn(m, ids)
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    tokens = ids.numel()
    med = {k: statistics.median(v) for k, v in times.items()}
    ours = [k for k in models if k != "hf_llama"]
    return {"tokens_per_s": {k: round(tokens / v, 1) for k, v in med.items()},
            "ratio_vs_hf": {k: round(med["hf_llama"] / med[k], 3) for k in ours},
            "cpu_time_ratio_vs_hf": {k: round(statistics.median(cpu["hf_llama"]) / statistics.median(cpu[k]), 3)
                                     for k in ours},
            "median_round_ratio_vs_hf": {k: round(statistics.median(h / o for h, o in zip(times["hf_llama"], times[k])),
                                                  3) for k in ours}}


def committed_runs():
    """Each committed run's final held-out loss and perplexity (its run.json), and their mean over its seeds."""
    from core.mixln.runs import compare_table, load_run

    out = {}
    for r in compare_table():
        meta = load_run(r["run"]).meta
        out[r["run"]] = {"norm": r["norm"], "alpha": r["alpha"], "steps": r["steps"], "status": r["status"],
                         "final_eval_loss": meta.get("final_eval_loss"),
                         "final_eval_perplexity": meta.get("final_eval_perplexity"),
                         "seeds": r["n_seeds"], "eval_perplexity_mean_over_seeds": r["eval_perplexity_mean"],
                         "train_wall_s": r["wall_s"]}
    return out


def main(argv=None):
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    size, models = build_models(a)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=torch.Generator().manual_seed(0))
    res = {"forward": measure(models, forward, ids, a.reps),
           "train_step": measure(models, make_train_step(), ids, a.reps)}
    res.update(size=size, batch=a.batch, seq_len=a.seq, reps=a.reps, threads=torch.get_num_threads(),
               params_m=round(models["mixln_pre"].num_parameters() / 1e6, 2), committed_runs=committed_runs())
    if a.smoke:
        res.update(mode="smoke", timings_meaningful=False,
                   timing_note="smoke run: tiny sizes, one round; the timings and ratios are meaningless")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
