"""MambaLRP cost on this machine, printed as JSON.

- ``time``: per embedded model (vision-mamba-mnist, mamba-sentiment, mamba-lm), on one test input:
  ``explain(method="mambalrp")`` / one plain forward+backward (the target logit's gradient w.r.t. the input
  embeddings, no rules, same adapter path) -- target <= 1.5 -- and Integrated Gradients (``--ig-steps``, 50) /
  MambaLRP. Measured side by side, alternating, medians of ``--repeats``.
- ``scan_memory``: peak resident memory above the inputs of one forward+backward of the MambaLRP selective
  scan, each variant in a fresh subprocess (sampled every 2 ms): the PyTorch reference
  (``selective_scan_lrp_ref``, materialises ``(B, D, L, N)`` tensors) and the Triton kernel
  (``selective_scan_lrp_triton``, state in registers). Without CUDA the kernel runs only under
  ``TRITON_INTERPRET=1`` (numpy, one program at a time, very slow), so the kernel is measured at a reduced
  channel count (``--interp-channels``) and the reference both at that shape and at mamba-130m-like shapes
  (B=1, D=1536, N=16, L=1024); the analytic size of the materialised tensors is printed beside them.
  The chunked CPU path (``selective_scan_lrp_chunked``, what ``selective_scan_lrp`` runs off CUDA) is measured
  beside them at the large shape.
- ``real_size``: random-weight Mambas of the papers' published configs (mamba-130m: 24 layers, d_model 768, d_state
  16, expand 2, vocabulary 50280; mamba-370m: 48 layers, d_model 1024) on random token ids, each case in a fresh
  subprocess: peak RSS of the process from the start of the first ``explain(method="mambalrp")`` (sampled every
  2 ms; the process's lifetime maximum, model construction included, beside it), then ``--real-repeats`` rounds of
  one no-grad forward (transformers' own forward through the same call ``explain`` makes: last-position logits)
  and one ``explain``, alternating; medians and the ratio MambaLRP / forward (target <= 4; <= 1.5 GiB at 512
  tokens for mamba-130m). ``--reference-tokens N`` adds the previous path (the reference scan under autograd,
  no recomputation) for mamba-130m at N tokens.
- ``ssm2_size``: the same protocol for Mamba-2 and a hybrid at their published configs (tests/core/ssm2_models.py
  says where the numbers come from): ``--ssm2-cases name:layers:tokens`` (default mamba2-130m, all 24 layers, and
  Falcon-H1-0.5B, all 36 parallel attention + Mamba-2 layers, at 512 tokens), random weights, float32; peak RSS
  of ``explain`` and the ratio ``explain`` / no-grad forward (target <= 2). :func:`bench.lrp_sizes.ssm2_cost` runs one case in this
  process on any device (``device="cuda"``: CUDA-synchronised times and ``torch.cuda.max_memory_allocated``), for
  a GPU row (``python bench/lrp.py --parts ssm2_size --device cuda``).
- ``ssm2_conservation``: conservation at the published layer shapes (``--conservation-cases name:layers``, 1-2
  layers per checkpoint, vocabulary 1024, 32 random tokens, each in a fresh process): in float64 the token
  relevances, what the biases and softmaxes absorbed and the residual ``logit - (sum + absorbed)``
  (:func:`core.lrp.flow.relevance_flow`); the share of |R| off the explained (last) token and the effective number
  of tokens (:func:`core.lrp.metrics.concentration`: a map on the last token mostly checks the residual path); the
  largest difference of float32 ``explain`` from float64, relative to the largest relevance; peak RSS.
- ``decoder_size``: the same protocol for the transformer decoders at their published configs
  (tests/core/decoder_models.py): ``--decoder-cases name:layers:tokens`` (default SmolLM2-135M, all 30 layers, at
  512 tokens), random weights, float32; ``explain`` (AttnLRP) against transformers' own no-grad forward (its sdpa
  attention), target <= 3.
- ``decoder_conservation``: ``--decoder-conservation-cases name:layers:dtype`` (default SmolLM2-135M's 30 layers in
  float64 at its real vocabulary, peak RSS 1.7 GiB; also ``gpt2:12:float64`` 1.6 GiB, ``qwen2.5-0.5b:24:float64``
  4.9 GiB, ``gemma-2-2b:4:float64`` 9.5 GiB and ``llama-3.2-1b:16:float32``, heavy), 32 random tokens: the
  relevances, what biases and softmaxes absorbed, the residual, float32 against float64 where float64 was asked.
- ``evaluation``: Delta A^F and conservation error per method, read from assets/lrp/evaluation/ (precomputed by
  ``python -m core lrp precompute-evaluation``), when present.

Usage: ``python bench/lrp.py [--parts time,scan_memory,real_size,ssm2_size,ssm2_conservation,decoder_size,
decoder_conservation,evaluation] [--repeats 5]
[--lm-tokens 64] [--threads 2] [--no-triton] [--real-cases 130m:512,130m:2048,370m:512] [--real-repeats 3]``;
``python bench/lrp.py --smoke``: every part at tiny sizes (one round, 2 IG steps, a 2-layer random Mamba, scans of
16 steps), in seconds, so the script is checked end to end (CI); its timings are meaningless.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lrp_sizes import REAL_CONFIGS, real_size, scan_memory, ssm2_conservation, ssm2_size  # noqa: E402

SMOKE = {"repeats": 1, "ig_steps": 2, "ig_repeats": 1, "lm_tokens": 8, "threads": 1, "scan_length": 16,
         "scan_channels": 8, "scan_state": 4, "interp_channels": 4, "full_autograd": True, "timeout": 300,
         "real_cases": "tiny:16", "real_repeats": 1, "real_repeats_long": 1, "reference_config": "tiny",
         "reference_tokens": 16, "reference_repeats": 1, "real_timeout": 300,
         "ssm2_cases": "mamba2-130m:1:16,falcon-h1-0.5b:1:16", "ssm2_vocab": 512,
         "conservation_cases": "mamba2-130m:1,falcon-h1-0.5b:1", "conservation_tokens": 8,
         "decoder_cases": "smollm2-135m:1:16", "decoder_conservation_cases": "smollm2-135m:1:float64",
         "decoder_vocab": 512}


def _inputs(name: str, loaded, lm_tokens: int) -> dict:
    import numpy as np
    import torch

    import core.data as data

    if name == "vision-mamba-mnist":
        r = data.load("mnist-5k", "test", limit=1)[0]
        return {"pixel_values": torch.from_numpy(np.asarray(r.image, dtype=np.float32) / 255.0)[None, None]}
    if name == "mamba-sentiment":
        r = data.load("movie-sentiment", "test", limit=1)[0]
        return {"input_ids": loaded.tokenizer(r.text, return_tensors="pt")["input_ids"]}
    recs = data.load("wikipedia-paragraphs", "test")
    ids = next(i for i in (loaded.tokenizer(r.text)["input_ids"] for r in recs) if len(i) >= lm_tokens)
    return {"input_ids": torch.tensor([ids[:lm_tokens]])}


def time_model(name: str, repeats: int, ig_steps: int, ig_repeats: int, lm_tokens: int) -> dict:
    import torch

    from core.lrp import explain
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules
    from core.zoo import load_model

    loaded = load_model(name)
    model = loaded.model
    sample = _inputs(name, loaded, lm_tokens)
    adapter = adapter_for(model)

    def plain():
        embeds = adapter.embed(sample.get("input_ids"), sample.get("pixel_values"))
        x = embeds.detach().requires_grad_(True)
        with lrp_rules(model, None):
            logits = adapter.logits(x)[0]
            (grad,) = torch.autograd.grad(logits[int(logits.argmax())], x)
        return grad

    def lrp():
        return explain(model, method="mambalrp", **sample)

    def ig():
        return explain(model, method="integrated_gradients", n_steps=ig_steps, **sample)

    plain(), lrp(), ig()  # warm-up
    t_plain, t_lrp, t_ig = [], [], []
    for i in range(repeats):
        for fn, acc in ((plain, t_plain), (lrp, t_lrp)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
        if i < ig_repeats:
            t0 = time.perf_counter()
            ig()
            t_ig.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # a MambaLRP run right beside each IG run, for the IG ratio
            lrp()
            t_lrp.append(time.perf_counter() - t0)
    mp, ml, mi = statistics.median(t_plain), statistics.median(t_lrp), statistics.median(t_ig)
    e = lrp()
    length = next(iter(sample.values())).shape[-1] if "input_ids" in sample else tuple(sample["pixel_values"].shape)
    return {"input": {"input_ids_length": length} if "input_ids" in sample else {"pixel_values": list(length)},
            "plain_forward_backward_ms": round(mp * 1e3, 2), "mambalrp_ms": round(ml * 1e3, 2),
            "integrated_gradients_ms": round(mi * 1e3, 1), "mambalrp_over_plain": round(ml / mp, 3),
            "mambalrp_over_plain_target": 1.5, "ig_over_mambalrp": round(mi / ml, 1),
            "runs": {"plain": len(t_plain), "mambalrp": len(t_lrp), "ig": len(t_ig)},
            "mambalrp_conservation_abs_error": abs(e.total - e.logit)}


def evaluation_tables() -> dict:
    folder = ROOT / "assets" / "lrp" / "evaluation"
    out = {}
    for path in sorted(folder.glob("faithfulness-*.json")):
        r = json.loads(path.read_text())
        out[r["model"]] = {"dataset": f"{r['dataset']} {r['split']}", "n": r["n_done"], "steps": r["steps"],
                           "delta_af": {m: round(r["faithfulness"][m]["delta_af"], 3) for m in r["methods"]},
                           **{k: {m: round(r["faithfulness"][m][k], 3) for m in r["methods"]}
                              for k in ("pi_soft_nc", "pi_soft_ns") if k in r["faithfulness"][r["methods"][0]]},
                           "conservation_mean_abs_error": {m: float(f"{r['conservation'][m]['mean_abs_error']:.3g}")
                                                           for m in r["methods"]}}
    return out


PARTS = ("time", "scan_memory", "real_size", "ssm2_size", "ssm2_conservation", "decoder_size", "decoder_conservation",
         "evaluation")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    ap.add_argument("--models", default="vision-mamba-mnist,mamba-sentiment,mamba-lm")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ig-steps", type=int, default=50)
    ap.add_argument("--ig-repeats", type=int, default=3)
    ap.add_argument("--lm-tokens", type=int, default=64, help="context length of the mamba-lm input")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scan-length", type=int, default=1024)
    ap.add_argument("--scan-channels", type=int, default=1536, help="D of the reference scan (mamba-130m: 1536)")
    ap.add_argument("--scan-state", type=int, default=16)
    ap.add_argument("--interp-channels", type=int, default=16, help="D of the TRITON_INTERPRET=1 run (slow)")
    ap.add_argument("--no-triton", action="store_true", help="skip the interpreted kernel")
    ap.add_argument("--full-autograd", action="store_true", help="also the ordinary (fully differentiable) scan")
    ap.add_argument("--timeout", type=int, default=900, help="per scan subprocess, seconds")
    ap.add_argument("--real-cases", default="130m:512,130m:2048,370m:512",
                    help=f"config:tokens pairs, configs {', '.join(REAL_CONFIGS)}")
    ap.add_argument("--real-repeats", type=int, default=3, help="forward / MambaLRP rounds per real-size case")
    ap.add_argument("--real-repeats-long", type=int, default=1, help="rounds for cases over 1024 tokens")
    ap.add_argument("--reference-tokens", type=int, default=0,
                    help="also the previous path (reference scan) at this many tokens (0: skip)")
    ap.add_argument("--reference-config", default="130m", choices=sorted(REAL_CONFIGS),
                    help="the config of the previous path's run")
    ap.add_argument("--reference-repeats", type=int, default=1, help="rounds for the previous path (slow)")
    ap.add_argument("--real-timeout", type=int, default=3600, help="per real-size subprocess, seconds")
    ap.add_argument("--ssm2-cases", default="mamba2-130m:24:512,falcon-h1-0.5b:36:512",
                    help="name:layers:tokens of the Mamba-2 / hybrid configs (tests/core/ssm2_models.REAL)")
    ap.add_argument("--ssm2-vocab", type=int, default=None, help="override the configs' vocabulary (smoke runs)")
    ap.add_argument("--device", default="cpu", help="ssm2_size: cpu or cuda (a GPU row)")
    ap.add_argument("--ssm2-keep", action="store_true",
                    help="ssm2_size and decoder_size: also each case with every mixer's activations kept (no "
                         "recomputation)")
    ap.add_argument("--conservation-cases",
                    default="mamba2-130m:2,falcon-mamba-7b:1,granite-4.0-h-tiny:2,falcon-h1-0.5b:1,bamba-9b:2",
                    help="name:layers at real width (tests/core/ssm2_models.REAL), float64")
    ap.add_argument("--conservation-tokens", type=int, default=32)
    ap.add_argument("--decoder-cases", default="smollm2-135m:30:512",
                    help="name:layers:tokens of the transformer configs (tests/core/decoder_models.REAL)")
    ap.add_argument("--decoder-conservation-cases", default="smollm2-135m:30:float64",
                    help="name:layers:dtype (add llama-3.2-1b:16:float32 once: about 6 GB)")
    ap.add_argument("--decoder-vocab", type=int, default=None, help="override the decoders' vocabulary (smoke runs)")
    ap.add_argument("--smoke", action="store_true",
                    help="every part at tiny sizes, in seconds (CI); the timings are meaningless")
    args = ap.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")

    import torch
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    report = {"machine": {"cpu_threads": args.threads, "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(),
                          "load_average_1m_at_start": round(os.getloadavg()[0], 2), "torch": torch.__version__}}
    if args.smoke:
        report.update(mode="smoke", timings_meaningful=False,
                      timing_note="smoke run: tiny sizes, one round; the timings, ratios and memory are meaningless")
    if "time" in parts:
        timing = {}
        for m in [m for m in args.models.split(",") if m]:
            timing[m] = time_model(m, args.repeats, args.ig_steps, args.ig_repeats, args.lm_tokens)
            print(f"... {m}: {json.dumps(timing[m])}", file=sys.stderr, flush=True)
        report.update(ig_steps=args.ig_steps, repeats=args.repeats, time=timing)

    if "scan_memory" in parts:
        b, n, L = 1, args.scan_state, args.scan_length
        big = args.scan_channels
        small = args.interp_channels
        materialised_mb = lambda d: round(b * d * L * n * 4 / 2**20, 1)  # one (B, D, L, N) float32 tensor  # noqa: E731
        scan = {
            "shapes": {"batch": b, "state": n, "length": L, "channels_reference": big, "channels_interpreted": small},
            "one_materialised_BDLN_tensor_mb": {str(big): materialised_mb(big), str(small): materialised_mb(small)},
        }
        runs = [(f"reference_lrp_D{small}", "ref_lrp", small, args.threads)]
        if not args.no_triton:
            runs.append((f"triton_interpreted_D{small}", "triton", small, 1))
        runs.append((f"reference_lrp_D{big}", "ref_lrp", big, args.threads))
        runs.append((f"chunked_lrp_D{big}", "chunked", big, args.threads))
        if args.full_autograd:
            runs.append((f"reference_full_autograd_D{big}", "ref_full", big, args.threads))
        for key, variant, d, threads in runs:
            scan[key] = scan_memory(variant, b, d, n, L, threads, args.timeout)
            print(f"... {key}: {json.dumps(scan[key])}", file=sys.stderr, flush=True)
        if not args.no_triton:
            scan["note"] = ("no CUDA here: the Triton kernel ran under TRITON_INTERPRET=1 (numpy emulation, its peak "
                            "RSS includes the interpreter's own temporaries; its time says nothing about GPU speed)")
        report["scan_memory"] = scan

    if "real_size" in parts:
        real = {}
        cases = [(c.split(":")[0], int(c.split(":")[1]), False) for c in args.real_cases.split(",") if c]
        if args.reference_tokens:
            cases.append((args.reference_config, args.reference_tokens, True))
        for name, length, reference in cases:
            repeats = args.reference_repeats if reference else (args.real_repeats if length <= 1024
                                                                  else args.real_repeats_long)
            key = f"mamba-{name}-random_{length}_tokens" + ("_reference_path" if reference else "")
            real[key] = real_size(name, length, repeats, args.threads, args.real_timeout, reference)
            print(f"... {key}: {json.dumps(real[key])}", file=sys.stderr, flush=True)
        report["real_size"] = {"targets": {"mambalrp_over_forward": 4.0, "peak_rss_gib_130m_512_tokens": 1.5},
                               "forward": "no-grad, transformers' own forward, last-position logits", **real}

    if "ssm2_size" in parts:
        ssm2 = {}
        for case in [c for c in args.ssm2_cases.split(",") if c]:
            name, layers, length = case.split(":")
            for keep in ((False, True) if args.ssm2_keep else (False,)):
                key = f"{name}-random_{layers}_layers_{length}_tokens_{args.device}" + ("_kept" if keep else "")
                ssm2[key] = ssm2_size(name, int(layers), int(length), args.real_repeats, args.threads,
                                      args.real_timeout, args.device, args.ssm2_vocab, keep)
                print(f"... {key}: {json.dumps(ssm2[key])}", file=sys.stderr, flush=True)
        report["ssm2_size"] = {"targets": {"mambalrp_over_forward": 2.0},
                               "forward": "no-grad, transformers' own forward, last-position logits", **ssm2}

    if "ssm2_conservation" in parts:
        cons = {}
        for case in [c for c in args.conservation_cases.split(",") if c]:
            name, layers = case.split(":")
            cons[name] = ssm2_conservation(name, int(layers), args.conservation_tokens, args.threads, args.real_timeout)
            print(f"... {name}: {json.dumps(cons[name])}", file=sys.stderr, flush=True)
        report["ssm2_conservation"] = {"targets": {"residual_over_logit_float64": 1e-4}, **cons}

    if "decoder_size" in parts:
        dec = {}
        for case in [c for c in args.decoder_cases.split(",") if c]:
            name, layers, length = case.split(":")
            for keep in ((False, True) if args.ssm2_keep else (False,)):
                key = f"{name}-random_{layers}_layers_{length}_tokens_{args.device}" + ("_kept" if keep else "")
                dec[key] = ssm2_size(name, int(layers), int(length), args.real_repeats, args.threads,
                                     args.real_timeout, args.device, args.decoder_vocab, keep)
                print(f"... {key}: {json.dumps(dec[key])}", file=sys.stderr, flush=True)
        report["decoder_size"] = {"targets": {"attnlrp_over_forward": 3.0},
                                  "forward": "no-grad, transformers' own forward (sdpa), last-position logits", **dec}

    if "decoder_conservation" in parts:
        cons = {}
        for case in [c for c in args.decoder_conservation_cases.split(",") if c]:
            name, layers, dtype = case.split(":")
            cons[f"{name}_{dtype}"] = ssm2_conservation(name, int(layers), args.conservation_tokens, args.threads,
                                                        args.real_timeout, args.decoder_vocab, dtype)
            print(f"... {name} {dtype}: {json.dumps(cons[f'{name}_{dtype}'])}", file=sys.stderr, flush=True)
        report["decoder_conservation"] = {"targets": {"residual_over_logit": 1e-3}, **cons}

    if "evaluation" in parts:
        report["evaluation"] = evaluation_tables()
    report["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    report["bench_seconds"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
