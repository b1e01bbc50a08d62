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
- ``evaluation``: Delta A^F and conservation error per method, read from assets/lrp/evaluation/ (precomputed by
  ``python -m core lrp precompute-evaluation``), when present.

Usage: ``python bench/lrp.py [--repeats 5] [--ig-steps 50] [--lm-tokens 64] [--threads 2] [--no-triton]``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_SCAN_CHILD = r"""
import json, os, sys, threading, time
import torch
sys.path.insert(0, {root!r})
from kernels.selective_scan import selective_scan_lrp_ref, selective_scan_lrp_triton, selective_scan_ref

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

variant, b, d, n, length = {variant!r}, {b}, {d}, {n}, {length}
torch.set_num_threads({threads})
g = torch.Generator().manual_seed(0)
u = torch.randn(b, d, length, generator=g)
delta = torch.randn(b, d, length, generator=g) * 0.5
A = -torch.rand(d, n, generator=g) - 0.5
B = torch.randn(b, n, length, generator=g)
C = torch.randn(b, n, length, generator=g)
D = torch.randn(d, generator=g)
bias = torch.randn(d, generator=g) * 0.1
fn = {{"ref_lrp": selective_scan_lrp_ref, "ref_full": selective_scan_ref, "triton": selective_scan_lrp_triton}}[variant]
if variant == "triton":
    from kernels.selective_scan import _kernels
    _kernels()
x = u.clone().requires_grad_(variant != "ref_full")
args = (delta.clone().requires_grad_(True), A.clone().requires_grad_(True), B.clone().requires_grad_(True),
        C.clone().requires_grad_(True)) if variant == "ref_full" else (delta, A, B, C)
if variant == "ref_full":
    x.requires_grad_(True)
try:
    import ctypes; ctypes.CDLL("libc.so.6").malloc_trim(0)
except OSError:
    pass
base = peak = rss(); run = True
def loop():
    global peak
    while run:
        peak = max(peak, rss()); time.sleep(0.002)
t = threading.Thread(target=loop, daemon=True); t.start()
t0 = time.perf_counter()
y = fn(x, *args, D, bias, True)
y.sum().backward()
secs = time.perf_counter() - t0
run = False; t.join(); peak = max(peak, rss())
out = {{"peak_above_inputs_mb": round((peak - base) / 2**20, 1), "seconds": round(secs, 2)}}
if variant == "triton":
    xr = u.clone().requires_grad_(True)
    yr = selective_scan_lrp_ref(xr, delta, A, B, C, D, bias, True)
    yr.sum().backward()
    out["max_abs_diff_y"] = float((y - yr).abs().max())
    out["max_abs_diff_grad"] = float((x.grad - xr.grad).abs().max())
print(json.dumps(out))
"""


def scan_memory(variant: str, b: int, d: int, n: int, length: int, threads: int, timeout: int) -> dict:
    """Run one scan forward+backward in a fresh interpreter; its peak RSS above the allocated inputs."""
    env = dict(os.environ)
    if variant == "triton":
        env["TRITON_INTERPRET"] = "1"
    code = _SCAN_CHILD.format(root=str(ROOT), variant=variant, b=b, d=d, n=n, length=length, threads=threads)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


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
                           "conservation_mean_abs_error": {m: float(f"{r['conservation'][m]['mean_abs_error']:.3g}")
                                                           for m in r["methods"]}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
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
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    timing = {}
    for m in [m for m in args.models.split(",") if m]:
        timing[m] = time_model(m, args.repeats, args.ig_steps, args.ig_repeats, args.lm_tokens)
        print(f"... {m}: {json.dumps(timing[m])}", file=sys.stderr, flush=True)

    b, n, L = 1, args.scan_state, args.scan_length
    big = args.scan_channels
    small = args.interp_channels
    materialised_mb = lambda d: round(b * d * L * n * 4 / 2**20, 1)  # one (B, D, L, N) float32 tensor
    scan = {
        "shapes": {"batch": b, "state": n, "length": L, "channels_reference": big, "channels_interpreted": small},
        "one_materialised_BDLN_tensor_mb": {str(big): materialised_mb(big), str(small): materialised_mb(small)},
    }
    runs = [(f"reference_lrp_D{small}", "ref_lrp", small, args.threads)]
    if not args.no_triton:
        runs.append((f"triton_interpreted_D{small}", "triton", small, 1))
    runs.append((f"reference_lrp_D{big}", "ref_lrp", big, args.threads))
    if args.full_autograd:
        runs.append((f"reference_full_autograd_D{big}", "ref_full", big, args.threads))
    for key, variant, d, threads in runs:
        scan[key] = scan_memory(variant, b, d, n, L, threads, args.timeout)
        print(f"... {key}: {json.dumps(scan[key])}", file=sys.stderr, flush=True)
        scan["note"] = ("no CUDA here: the Triton kernel ran under TRITON_INTERPRET=1 (numpy emulation, its peak RSS "
                        "includes the interpreter's own temporaries; its time says nothing about GPU speed)")
    print(json.dumps({
        "machine": {"cpu_threads": args.threads, "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(),
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2), "torch": torch.__version__},
        "ig_steps": args.ig_steps, "repeats": args.repeats,
        "time": timing, "scan_memory": scan, "evaluation": evaluation_tables(),
        "bench_seconds": round(time.perf_counter() - t_start, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
