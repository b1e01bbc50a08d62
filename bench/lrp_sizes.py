"""MambaLRP's cost at the papers' sizes, each case in a fresh interpreter (bench/lrp.py's ``scan_memory``,
``real_size``, ``ssm2_size``, ``ssm2_conservation``, ``decoder_size`` and ``decoder_conservation`` parts; what
each measures is said in bench/lrp.py's docstring): the child scripts, the functions they run and the runner of a
child."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Put before each child script (its own code string, so no doubled braces): the children insert the repository root
# into sys.path first, then use bench/peak_rss.py's PeakRSS.
_PEAK_RSS_PROBE = """
import sys
sys.path.insert(0, %r)
from bench.peak_rss import PeakRSS
""" % str(ROOT)

_SCAN_CHILD = r"""
import json, sys, time
import torch
sys.path.insert(0, {root!r})
from kernels.selective_scan import (selective_scan_lrp_chunked, selective_scan_lrp_ref, selective_scan_lrp_triton,
                                    selective_scan_ref)

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
fn = {{"ref_lrp": selective_scan_lrp_ref, "ref_full": selective_scan_ref, "triton": selective_scan_lrp_triton,
       "chunked": selective_scan_lrp_chunked}}[variant]
if variant == "triton":
    import triton.language  # noqa: F401 (imported before the probe: the kernel's memory, not the import's)
x = u.clone().requires_grad_(variant != "ref_full")
args = (delta.clone().requires_grad_(True), A.clone().requires_grad_(True), B.clone().requires_grad_(True),
        C.clone().requires_grad_(True)) if variant == "ref_full" else (delta, A, B, C)
if variant == "ref_full":
    x.requires_grad_(True)
probe = PeakRSS().start()
t0 = time.perf_counter()
y = fn(x, *args, D, bias, True)
y.sum().backward()
secs = time.perf_counter() - t0
probe.stop()
out = {{"peak_above_inputs_mb": round((probe.peak - probe.base) / 2**20, 1), "seconds": round(secs, 2)}}
if variant in ("triton", "chunked"):
    xr = u.clone().requires_grad_(True)
    yr = selective_scan_lrp_ref(xr, delta, A, B, C, D, bias, True)
    yr.sum().backward()
    out["max_abs_diff_y"] = float((y - yr).abs().max())
    out["max_abs_diff_grad"] = float((x.grad - xr.grad).abs().max())
print(json.dumps(out))
"""


_REAL_CHILD = r"""
import json, resource, statistics, sys, time
import torch
sys.path.insert(0, {root!r})
torch.set_num_threads({threads})
from transformers import MambaConfig, MambaForCausalLM
from core.lrp import explain
from core.lrp.adapters import adapter_for

layers, hidden, length, repeats, reference = {layers}, {hidden}, {length}, {repeats}, {reference}
if reference:  # the previous path: the reference scan under autograd, every activation kept
    import core.lrp.methods, core.lrp.mixer
    from kernels.selective_scan import selective_scan_lrp_ref
    core.lrp.mixer.selective_scan_lrp = selective_scan_lrp_ref
    core.lrp.methods.RECOMPUTE_ABOVE_BYTES = float("inf")
torch.manual_seed(0)
config = MambaConfig(vocab_size=50280, hidden_size=hidden, state_size=16, num_hidden_layers=layers, expand=2)
model = MambaForCausalLM(config).eval()
ids = torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
adapter = adapter_for(model)

def forward():
    with torch.no_grad():
        return adapter.logits(adapter.embed(ids))

probe = PeakRSS().start()
t0 = time.perf_counter()
e = explain(model, ids, method="mambalrp")
first = time.perf_counter() - t0
probe.stop()
out = {{"rss_before_explain_gib": round(probe.base / 2**30, 3), "peak_rss_explain_gib": round(probe.peak / 2**30, 3),
        "first_explain_s": round(first, 2), "conservation_abs_error": abs(e.total - e.logit),
        "conservation_rel_error": abs(e.total - e.logit) / max(1e-12, abs(e.logit))}}
t_fwd, t_lrp = [], []
for _ in range(repeats):
    t0 = time.perf_counter(); forward(); t_fwd.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); explain(model, ids, method="mambalrp"); t_lrp.append(time.perf_counter() - t0)
if repeats:
    f, m = statistics.median(t_fwd), statistics.median(t_lrp)
    out.update(forward_s=round(f, 2), mambalrp_s=round(m, 2), mambalrp_over_forward=round(m / f, 2),
               mambalrp_over_forward_per_round=[round(b / a, 2) for a, b in zip(t_fwd, t_lrp)],
               forward_s_all=[round(t, 2) for t in t_fwd], mambalrp_s_all=[round(t, 2) for t in t_lrp])
out["max_rss_process_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
print(json.dumps(out))
"""

_SSM2_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
from bench.lrp_sizes import ssm2_cost
print(json.dumps(ssm2_cost({name!r}, {layers}, {length}, {repeats}, {threads}, {device!r}, {vocab}, {keep})))
"""


def ssm2_cost(name: str, layers: int, length: int, repeats: int = 3, threads: int = 2, device: str = "cpu",
              vocab: int | None = None, keep: bool = False) -> dict:
    """One Mamba-2 / hybrid / transformer case in this process: a random-weight model of ``name``'s published config
    (:func:`real_model`) cut to ``layers`` layers, ``length`` random token ids; the peak memory of the
    first ``explain(method="mambalrp")`` (RSS on the CPU, ``max_memory_allocated`` on CUDA), then ``repeats`` rounds
    of one no-grad forward (transformers' own forward, last-position logits), one ``explain`` and one plain gradient
    of the top logit (forward and backward through the same adapter: what any backward-based explanation costs at
    least), alternating; medians and the ratios. ``keep``: keep every mixer's activations for the backward instead of
    recomputing them (``explain`` recomputes them when they would take over 64 MB: one more forward's time for far
    less memory)."""
    import resource
    import statistics

    import torch

    from bench.peak_rss import PeakRSS
    from core.lrp import explain
    from core.lrp.adapters import adapter_for
    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    if keep:
        import core.lrp.methods

        core.lrp.methods.RECOMPUTE_ABOVE_BYTES = float("inf")
    model = real_model(name, layers, vocab, torch.float32).to(device)
    cfg = model.config
    ids = torch.randint(3, cfg.vocab_size, (1, length), generator=torch.Generator().manual_seed(0)).to(device)
    adapter = adapter_for(model)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def forward():
        with torch.no_grad():
            return adapter.logits(adapter.embed(ids))

    def gradient():  # one plain gradient of the top logit (the floor of any backward-based explanation)
        embeds = adapter.embed(ids).detach().requires_grad_(True)
        logits = adapter.logits(embeds)
        logits[0, logits[0].argmax()].backward()

    forward()  # warm (lazy imports, kernels' checks) before anything is timed
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    probe = None if cuda else PeakRSS().start()
    t0 = time.perf_counter()
    e = explain(model, ids, method="mambalrp")
    sync()
    first = time.perf_counter() - t0
    if cuda:
        peak = {"explain_peak_above_model_gib": round((torch.cuda.max_memory_allocated() - base) / 2**30, 3)}
    else:
        probe.stop()
        peak = {"rss_before_explain_gib": round(probe.base / 2**30, 3),
                "peak_rss_explain_gib": round(probe.peak / 2**30, 3),
                "explain_peak_above_start_gib": round((probe.peak - probe.base) / 2**30, 3)}
    t_fwd, t_lrp, t_grad = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter(); forward(); sync(); t_fwd.append(time.perf_counter() - t0)  # noqa: E702
        t0 = time.perf_counter(); explain(model, ids, method="mambalrp"); sync()  # noqa: E702
        t_lrp.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); gradient(); sync(); t_grad.append(time.perf_counter() - t0)  # noqa: E702
    out = {"config": {"name": name, "layers": layers, "tokens": length, "device": device, "dtype": "float32",
                      "mixers_recomputed": not keep,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "layer_kinds": sorted(set(getattr(cfg, "layers_block_type", None)
                                                or (["attention"] if hasattr(cfg, "num_attention_heads")
                                                    and not hasattr(cfg, "mamba_n_heads") else ["mamba"])))},
           "first_explain_s": round(first, 2), **peak, "absorbed": e.absorbed, "logit": e.logit}
    if repeats:
        f, m = statistics.median(t_fwd), statistics.median(t_lrp)
        g = statistics.median(t_grad)
        out.update(gradient_s=round(g, 3), gradient_over_forward=round(g / f, 2),
                   mambalrp_over_gradient=round(m / g, 2))
        out.update(forward_s=round(f, 3), mambalrp_s=round(m, 3), mambalrp_over_forward=round(m / f, 2),
                   mambalrp_over_forward_per_round=[round(b / a, 2) for a, b in zip(t_fwd, t_lrp)],
                   forward_s_all=[round(t, 3) for t in t_fwd], mambalrp_s_all=[round(t, 3) for t in t_lrp])
    if not cuda:
        out["max_rss_process_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    return out


def real_model(name: str, layers: int | None, vocab: int | None, dtype):
    """A random-weight causal LM of a published config: ``tests.core.ssm2_models.REAL`` (Mamba-2, the hybrids) or
    ``tests.core.decoder_models.REAL`` (SmolLM2-135M, Llama-3.2-1B, Qwen2.5-0.5B, Gemma-2-2B, GPT-2), cut to
    ``layers`` layers and ``vocab`` tokens."""
    from tests.core import decoder_models, ssm2_models

    source = decoder_models if name in decoder_models.REAL else ssm2_models
    return source.build(source.real(name, layers, vocab), dtype=dtype)


def conservation_cost(name: str, layers: int, length: int, threads: int = 2, vocab: int | None = 1024,
                      dtype: str = "float64") -> dict:
    """Conservation of one published config at real width in this process: ``relevance_flow`` in ``dtype``, and for
    a float64 run the largest difference of float32 ``explain`` from it, relative to the largest relevance."""
    import resource

    import torch

    from core.lrp import explain
    from core.lrp.flow import relevance_flow
    from core.lrp.metrics import concentration

    torch.set_num_threads(threads)
    model = real_model(name, layers, vocab, getattr(torch, dtype))
    cfg_vocab = model.config.vocab_size
    ids = torch.randint(3, cfg_vocab, (1, length), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    flow = relevance_flow(model, input_ids=ids)
    out = {"layers": layers, "tokens": length, "dtype": dtype, "vocab": cfg_vocab,
           "parameters": sum(p.numel() for p in model.parameters()), "flow_s": round(time.perf_counter() - t0, 2),
           "logit": flow.logit, "sum_of_relevances": flow.total, "absorbed": flow.absorbed,
           "residual_over_logit": abs(flow.residual) / abs(flow.logit),
           "absorbed_over_logit": {k: v / flow.logit for k, v in flow.absorbed.items()}}
    off, effective = concentration(flow.relevance, ids.shape[1] - 1)  # the last token is the explained position
    out.update(share_off_explained_token=off, effective_tokens=effective)
    if dtype == "float64":
        e32 = explain(model.float(), input_ids=ids)
        out["float32_vs_float64_max_over_max_relevance"] = float(
            (e32.sequence_relevance.double() - flow.relevance).abs().max()) / float(flow.relevance.abs().max())
    out["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return out


_CONSERVATION_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
from bench.lrp_sizes import conservation_cost
print(json.dumps(conservation_cost({name!r}, {layers}, {length}, {threads}, {vocab}, {dtype!r})))
"""


def _child(code: str, timeout: int) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line (JSON) with ``subprocess_s``, or ``{"error"}``."""
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["subprocess_s"] = round(time.perf_counter() - t0, 1)
    return result


def ssm2_conservation(name: str, layers: int, length: int, threads: int, timeout: int, vocab: int | None = 1024,
                      dtype: str = "float64") -> dict:
    """:func:`conservation_cost` in a fresh interpreter (see the module docstring)."""
    return _child(_CONSERVATION_CHILD.format(root=str(ROOT), name=name, layers=layers, length=length,
                                             threads=threads, vocab=vocab, dtype=dtype), timeout)


def ssm2_size(name: str, layers: int, length: int, repeats: int, threads: int, timeout: int, device: str = "cpu",
              vocab: int | None = None, keep: bool = False) -> dict:
    """:func:`ssm2_cost` in a fresh interpreter (so each case's peak memory is its own)."""
    return _child(_SSM2_CHILD.format(root=str(ROOT), name=name, layers=layers, length=length, repeats=repeats,
                                     threads=threads, device=device, vocab=vocab, keep=keep), timeout)


REAL_CONFIGS = {"130m": (24, 768), "370m": (48, 1024),  # published Mamba sizes: layers, d_model (d_state 16)
                "tiny": (2, 32)}  # --smoke
def real_size(name: str, length: int, repeats: int, threads: int, timeout: int, reference: bool = False) -> dict:
    """One random-weight model of a published config in a fresh interpreter: peak RSS, forward and MambaLRP times."""
    layers, hidden = REAL_CONFIGS[name]
    code = _PEAK_RSS_PROBE + _REAL_CHILD.format(root=str(ROOT), threads=threads, layers=layers, hidden=hidden,
                                                length=length, repeats=repeats, reference=reference)
    result = _child(code, timeout)
    if "error" in result:
        return result
    return {"config": {"layers": layers, "d_model": hidden, "d_inner": 2 * hidden, "d_state": 16, "vocab": 50280,
                       "tokens": length, "path": "reference scan (previous)" if reference else "chunked scan"},
            **result}


def scan_memory(variant: str, b: int, d: int, n: int, length: int, threads: int, timeout: int) -> dict:
    """Run one scan forward+backward in a fresh interpreter; its peak RSS above the allocated inputs."""
    env = dict(os.environ)
    if variant == "triton":
        env["TRITON_INTERPRET"] = "1"
    code = _PEAK_RSS_PROBE + _SCAN_CHILD.format(root=str(ROOT), variant=variant, b=b, d=d, n=n, length=length,
                                                threads=threads)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])
