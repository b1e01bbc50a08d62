"""The Triton kernels on a GPU against what users would otherwise run, printed as JSON (a benchmark).

    python bench/gpu.py                  # on a CUDA host: every comparison at the real shapes
    python bench/gpu.py --smoke          # anywhere: tiny shapes on the CPU under TRITON_INTERPRET=1 (CI)

Each comparison times its contestants interleaved in one run (``--repeats`` rounds, each contestant once per
round, after ``--warmup`` untimed calls) and reports medians; on CUDA every call is timed with
``torch.cuda.Event`` pairs and the peak memory of one separate call is ``torch.cuda.max_memory_allocated``
above what was allocated before it. Every comparison also records the dispatch self-check of its kernels on
that device (:func:`kernels.dispatch.check_all`) and the max abs error of the kernel against its ``*_ref``
twin (0 for the bit-exact kernels).

- ``selective_scan_L*``: MambaLRP scan, forward + relevance backward (gradient w.r.t. ``u``), of
  :func:`kernels.selective_scan.selective_scan_lrp_triton` against its twin ``selective_scan_lrp_ref`` and,
  when ``mamba_ssm`` imports, ``selective_scan_fn`` forward + backward (its backward computes every input's
  gradient, the ordinary rule; it is what a user of the CUDA library would run), mamba-130m shapes
  (B=1, D=1536, N=16; delta_softplus, D and delta_bias as in Mamba), L = 2048 and 8192, float32;
- ``neuzip_decode``: pair-rANS exponent decode + bit merge (lossless, k = 7) of a bf16 tensor, GB/s of
  decoded bf16 bytes against a device-to-device copy of the same number of bytes (target >= 25 %);
- ``neuzip_forward``: a random-weight model of SmolLM2-135M's config (transformers' LlamaForCausalLM, bf16)
  with every linear layer but the tied embedding / head NeuZip-compressed, against the same bf16 model;
  the compressed arrays are resident on the device (``model.to(device)`` moves them); reported: the memory the
  loaded model holds on the device (``torch.cuda.memory_allocated`` after ``.to(device)``, compressed against
  bf16, and the linear layers' part of it), the peak of a forward, and the host-to-device copies one compressed
  forward makes (torch profiler; expected 0);
- ``lrp_explain``: MambaLRP ``explain`` end to end on a random-weight model of mamba-130m's config (24 layers,
  d_model 768, d_state 16) at 512, 2048 and 8192 tokens against the same model's no-grad forward (transformers
  uses mamba_ssm's fused kernels for that forward when they import), peak memory of each, and at 512 tokens the
  GPU relevance against the CPU relevance of the same model (max abs difference, top-10 tokens, conservation);
- ``topk_mask``: the MathNeuro top-K mask (proportion 0.05, the app's default) per matrix against
  ``torch.topk`` + scatter into a mask, on SmolLM2-135M's MLP and embedding shapes (the dispatcher uses
  ``torch.topk`` on CUDA: the kernel lost this comparison on an H100);
- ``add_rmsnorm``: fused residual add + RMSNorm forward against the unfused torch ops (its twin), bf16.

With ``--smoke`` the timings are meaningless (interpreter, tiny shapes) and labelled so; the run proves the
script works end to end and the kernels agree with their twins. Without CUDA and without ``--smoke`` the
script exits 2 with one line saying what to do.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, tie_word_embeddings=True)
MAMBA_130M = dict(vocab_size=50280, hidden_size=768, num_hidden_layers=24, state_size=16, expand=2, conv_kernel=4)
SMOKE_MAMBA = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=4)
SMOKE_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=256,
                   rms_norm_eps=1e-5, tie_word_embeddings=True)
TOPK_PROPORTION = 0.05  # core.mathneuro.service's default proportion


def _log(msg: str) -> None:
    print(f"... {msg}", file=sys.stderr, flush=True)


# ---- timing -----------------------------------------------------------------------------------------------------
class Timer:
    """Interleaved medians of several callables on one device (CUDA events on CUDA, perf_counter elsewhere)."""

    def __init__(self, device, repeats: int, warmup: int):
        import torch

        self.torch, self.device, self.repeats, self.warmup = torch, device, repeats, warmup
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _once(self, fn) -> float:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def medians(self, fns: dict, repeats: dict | None = None) -> dict:
        """``{name: median seconds}``; ``repeats`` may lower the rounds of a slow contestant."""
        repeats = repeats or {}
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        self.sync()
        times = {name: [] for name in fns}
        for r in range(self.repeats):
            for name, fn in fns.items():
                if r < repeats.get(name, self.repeats):
                    times[name].append(self._once(fn))
        return {name: statistics.median(t) for name, t in times.items()}

    def allocated_by(self, fn) -> int | None:
        """CUDA memory that ``fn()`` leaves allocated (None off CUDA)."""
        if not self.cuda:
            fn()
            return None
        torch = self.torch
        self.sync()
        before = torch.cuda.memory_allocated(self.device)
        fn()
        self.sync()
        return int(torch.cuda.memory_allocated(self.device) - before)

    def host_to_device_copies(self, fn) -> int | None:
        """Host-to-device memory copies one call of ``fn`` makes (torch profiler; None off CUDA)."""
        if not self.cuda:
            return None
        from torch.profiler import ProfilerActivity, profile

        fn()
        self.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            self.sync()
        return sum(e.count for e in prof.key_averages() if "HtoD" in e.key or "Memcpy HtoD" in e.key)

    def profile(self, fn, top: int = 12) -> dict:
        """Where one call of ``fn`` spends its time (torch profiler, after one untimed call): the ``top`` ops by
        self time on the device (CUDA) or the CPU, kernel launches and host syncs."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        fn()
        self.sync()
        with profile(activities=activities) as prof:
            fn()
            self.sync()
        events = prof.key_averages()
        where = "device" if self.cuda else "cpu"
        attr = next(a for a in (f"self_{where}_time_total", "self_cuda_time_total", "self_cpu_time_total")
                    if hasattr(events[0], a)) if len(events) else "self_cpu_time_total"
        ranked = sorted(events, key=lambda e: getattr(e, attr), reverse=True)
        total = sum(getattr(e, attr) for e in events)
        count = lambda *names: sum(e.count for e in events if e.key in names)  # noqa: E731
        return {"by": f"{where} self time", "total_ms": total / 1e3,
                "top": [{"op": e.key, "calls": e.count, "self_ms": getattr(e, attr) / 1e3,
                         "share": getattr(e, attr) / total if total else 0.0} for e in ranked[:top]],
                "kernel_launches": count("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"),
                "host_syncs": count("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense")}

    def peak_bytes(self, fn) -> int | None:
        """Peak CUDA memory of one call above what was allocated before it (None off CUDA)."""
        if not self.cuda:
            return None
        torch = self.torch
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        fn()
        self.sync()
        return int(torch.cuda.max_memory_allocated(self.device) - before)


def _max_abs(a, b) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max().item()) if a.numel() else 0.0


def _agrees(got, want) -> bool:
    """Within the dispatch self-check's dtype-aware tolerance (exact for integer and bool results)."""
    from kernels.dispatch import compare

    return compare(got, want) is None


def _self_check(rows: list[dict], *kernels: str) -> dict:
    mine = [r for r in rows if r["kernel"] in kernels]
    return {"ok": bool(mine) and all(r["ok"] for r in mine),
            "rows": {f"{r['kernel']}/{r['dtype']}": (r["reason"] or "ok") for r in mine}}


# ---- comparisons ------------------------------------------------------------------------------------------------
def selective_scan(timer, device, length: int, channels: int, checks: list[dict], slow_repeats: int,
                   tiles: list[tuple[int, int]]) -> dict:
    import torch

    from kernels.selective_scan import scan_config, selective_scan_lrp_ref, selective_scan_lrp_triton

    batch, state = 1, 16
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, channels, length, generator=g)
    delta = 0.5 * torch.randn(batch, channels, length, generator=g)
    A = -torch.rand(channels, state, generator=g) - 0.5  # negative, as Mamba's -exp(A_log)
    B, C = torch.randn(batch, state, length, generator=g), torch.randn(batch, state, length, generator=g)
    D, bias, grad = torch.randn(channels, generator=g), 0.1 * torch.randn(channels, generator=g), torch.randn_like(u)
    u, delta, A, B, C, D, bias, grad = (t.to(device) for t in (u, delta, A, B, C, D, bias, grad))

    def run(fn):
        def step():
            x = u.detach().requires_grad_(True)
            y = fn(x, delta, A, B, C, D, bias, True)
            (du,) = torch.autograd.grad(y, x, grad)
            return y.detach(), du
        return step

    contestants = {"triton": run(selective_scan_lrp_triton), "ref_twin": run(selective_scan_lrp_ref)}
    default_tile = scan_config(channels, state, length)
    tile_names = {}
    for block_d, chunk in tiles:  # other (BLOCK_D, CHUNK) tiles of the same kernel, to tune the default
        if (block_d, state, chunk) != default_tile:
            name = f"triton_d{block_d}_c{chunk}"
            tile_names[name] = (block_d, chunk)
            contestants[name] = run(lambda *a, block_d=block_d, chunk=chunk:
                                    selective_scan_lrp_triton(*a, block_d=block_d, chunk=chunk))
    notes = ["ref_twin materialises (B, D, L, N) tensors and records L autograd steps: the tests' oracle, "
             "not a fast path"]
    mamba_note = None
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as exc:  # not installed (CPU host) or built for another torch / CUDA
        mamba_note = f"skipped: mamba_ssm is not importable ({type(exc).__name__}: {exc}); " \
                     "pip install -r requirements-gpu.txt --no-build-isolation on a CUDA host"
    else:
        def mamba_step():
            x = u.detach().requires_grad_(True)
            y = selective_scan_fn(x, delta, A, B, C, D=D, delta_bias=bias, delta_softplus=True)
            (du,) = torch.autograd.grad(y, x, grad)
            return y.detach(), du
        contestants["mamba_ssm"] = mamba_step
        notes.append("mamba_ssm's backward computes the gradients of every input (ordinary rule); the MambaLRP "
                     "backward needs only the gradient w.r.t. u (A_bar, B_bar, C constant)")

    y_k, du_k = contestants["triton"]()
    y_r, du_r = contestants["ref_twin"]()
    tile_errors = {name: max(_max_abs(y, y_r), _max_abs(du, du_r))
                   for name in tile_names for y, du in [contestants[name]()]}
    medians = timer.medians(contestants, repeats={"ref_twin": slow_repeats})
    out = {"what": "MambaLRP selective scan, forward + relevance backward, float32",
           "shape": {"B": batch, "D": channels, "L": length, "N": state},
           "tile": {"block_d": default_tile[0], "block_n": default_tile[1], "chunk": default_tile[2]},
           "other_tiles": {name: {"block_d": bd, "chunk": c, "median_s": medians[name],
                                  "ratio_over_default": medians[name] / medians["triton"],
                                  "max_abs_err_vs_twin": tile_errors[name]}
                           for name, (bd, c) in tile_names.items()},
           "self_check": _self_check(checks, "selective_scan_lrp"),
           "median_s": medians,
           "peak_bytes": {name: timer.peak_bytes(fn) for name, fn in contestants.items()},
           "ratio_triton_over_ref_twin": medians["triton"] / medians["ref_twin"],
           "max_abs_err_vs_twin": max(_max_abs(y_k, y_r), _max_abs(du_k, du_r)),
           "agrees_with_twin": _agrees((y_k, du_k), (y_r, du_r)),
           "max_abs_err_vs_twin_y": _max_abs(y_k, y_r), "max_abs_err_vs_twin_du": _max_abs(du_k, du_r),
           "notes": notes}
    if "mamba_ssm" in contestants:
        y_m, _ = contestants["mamba_ssm"]()
        out["ratio_triton_over_mamba_ssm"] = medians["triton"] / medians["mamba_ssm"]
        out["target_at_most_1x_of_mamba_ssm"] = None if timer.device.type != "cuda" else \
            bool(out["ratio_triton_over_mamba_ssm"] <= 1.0)
        out["max_abs_err_y_mamba_ssm_vs_twin"] = _max_abs(y_m, y_r)
    else:
        out["mamba_ssm"] = mamba_note
    return out


def neuzip_decode(timer, device, numel: int, chunk: int, checks: list[dict], blocks: list[int]) -> dict:
    import torch

    from core.neuzip import pairs
    from core.neuzip.codec import compress
    from kernels.neuzip_bits import merge_bf16_ref, merge_bf16_triton
    from kernels.neuzip_rans import pair_rans_decode_ref, pair_rans_decode_triton

    g = torch.Generator().manual_seed(0)
    weights = (0.02 * torch.randn(numel, generator=g)).to(torch.bfloat16)  # SmolLM2-like per-tensor std
    t0 = time.perf_counter()
    packed = compress(weights, mantissa_bits=7, chunk_size=chunk)
    encode_s = time.perf_counter() - t0
    args = pairs.kernel_args(packed.exponents, device)
    fields = packed.fields.to(device)
    original = weights.to(device)
    copy_src, copy_dst = original.clone(), torch.empty_like(original)

    def decode_triton():
        return merge_bf16_triton(pair_rans_decode_triton(*args), fields, 7)

    def decode_ref():
        return merge_bf16_ref(pair_rans_decode_ref(*args), fields, 7)

    got, want = decode_triton(), decode_ref()
    contestants = {"triton": decode_triton, "ref_twin": decode_ref,
                   "rans_only": lambda: pair_rans_decode_triton(*args), "copy": lambda: copy_dst.copy_(copy_src)}
    default_block = pair_rans_decode_triton.__kwdefaults__["block"]
    for block in blocks:  # other chunks-per-program of the exponent decode, to tune the default
        if block != default_block:
            contestants[f"rans_only_block{block}"] = lambda block=block: pair_rans_decode_triton(*args, block=block)
    block_exact = {name: bool(torch.equal(fn(), got_e)) for got_e in [pair_rans_decode_triton(*args)]
                   for name, fn in contestants.items() if name.startswith("rans_only_block")}
    medians = timer.medians(contestants)
    nbytes = 2 * numel
    gbps = {name: nbytes / s / 1e9 for name, s in medians.items()}
    ratio = gbps["triton"] / gbps["copy"]
    return {"what": "NeuZip lossless decode (pair rANS exponents + bit merge) vs device-to-device copy",
            "shape": {"numel": numel, "chunk_size": packed.exponents.chunk_size, "chunks": int(args[0].shape[0])},
            "self_check": _self_check(checks, "pair_rans_decode", "merge_bf16", "split_bf16"),
            "median_s": medians, "gbps_of_bf16_bytes": gbps,
            "compressed_bytes": packed.nbytes, "bf16_bytes": nbytes, "cpu_encode_s": encode_s,
            "ratio_decode_over_copy_bandwidth": ratio,
            "target_at_least_0_25": None if timer.device.type != "cuda" else bool(ratio >= 0.25),
            "max_abs_err_vs_twin": _max_abs(got.view(torch.int16), want.view(torch.int16)),
            "agrees_with_twin": bool(torch.equal(got.view(torch.int16), want.view(torch.int16))),
            "bit_exact_vs_original": bool(torch.equal(got.view(torch.int16), original.view(torch.int16))),
            "peak_bytes": {"triton": timer.peak_bytes(decode_triton)},
            "rans_block": default_block, "other_blocks_bit_exact": block_exact,
            "notes": ["GB/s counts the decoded bf16 bytes (2 per weight); rans_only is the exponent decode alone",
                      "rans_only_block<b>: the exponent decode with b chunks per program instead of the default"]}


_LLAMA_PAIRS: dict = {}


def _llama_pair(timer, device, config: dict, chunk: int) -> dict:
    """A random-weight Llama of ``config`` twice on ``device``: bf16, and with every linear layer but the tied
    embedding / head NeuZip-compressed (lossless); built once and shared by the forward and generation rows."""
    key = (json.dumps(config, sort_keys=True), chunk, str(device))
    if key in _LLAMA_PAIRS:
        return _LLAMA_PAIRS[key]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.neuzip.codec import compress
    from core.neuzip.modules import CompressedLinear, apply_compressed

    def build():
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16).eval()

    dense, packed = build(), build()
    linears = {name: m for name, m in packed.named_modules()
               if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
    linear_bf16_bytes = sum(m.weight.numel() * 2 for m in linears.values())
    t0 = time.perf_counter()
    apply_compressed(packed, {name: compress(m.weight.detach(), 7, chunk_size=chunk) for name, m in linears.items()})
    encode_s = time.perf_counter() - t0
    held = {}
    for name, model in (("bf16", dense), ("compressed", packed)):
        held[name] = timer.allocated_by(lambda model=model: model.to(device))
    pair = {"dense": dense, "packed": packed, "linears": len(linears), "linear_bf16_bytes": linear_bf16_bytes,
            "encode_s": encode_s, "held": held,
            "compressed_modules": [m for m in packed.modules() if isinstance(m, CompressedLinear)]}
    _LLAMA_PAIRS[key] = pair
    return pair


def _decode_path(pair: dict) -> str:
    from kernels.dispatch import use_triton

    probe = pair["compressed_modules"][0].arrays()
    return "triton" if use_triton(probe.states, kernel="pair_rans_decode") else "reference (PyTorch/numba)"


def neuzip_forward(timer, device, config: dict, tokens: int, chunk: int, checks: list[dict], label: str) -> dict:
    import torch

    pair = _llama_pair(timer, device, config, chunk)
    dense, packed = pair["dense"], pair["packed"]
    linear_bf16_bytes, encode_s, held = pair["linear_bf16_bytes"], pair["encode_s"], pair["held"]
    resident = sum(t.numel() * t.element_size() for m in pair["compressed_modules"]
                   for _, t in m.arrays().items() if t is not None)
    on_device = {str(t.device) for m in pair["compressed_modules"] for _, t in m.arrays().items() if t is not None}
    ids = torch.randint(0, config["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(1)).to(device)

    def forward(model):
        def step():
            with torch.inference_mode():
                return model(ids).logits
        return step

    got, want = forward(packed)(), forward(dense)()
    medians = timer.medians({"compressed": forward(packed), "bf16": forward(dense)})
    decode_path = _decode_path(pair)
    return {"what": f"{label}: forward of {tokens} tokens, linear layers NeuZip-compressed (lossless) vs bf16",
            "model": label, "shape": {"tokens": tokens, "compressed_linears": pair["linears"], "chunk_size": chunk},
            "self_check": _self_check(checks, "pair_rans_decode", "merge_bf16"),
            "decode_path": decode_path, "median_s": medians,
            "ratio_compressed_over_bf16": medians["compressed"] / medians["bf16"],
            "target_at_most_1_3x": None if timer.device.type != "cuda" else
            bool(medians["compressed"] / medians["bf16"] <= 1.3),
            "max_abs_err_vs_twin": _max_abs(got, want), "agrees_with_twin": _agrees(got, want), "cpu_encode_s": encode_s,
            "peak_bytes": {"compressed": timer.peak_bytes(forward(packed)), "bf16": timer.peak_bytes(forward(dense))},
            "device_bytes_after_load": held, "compressed_arrays_on": sorted(on_device),
            "linear_weights_bytes": {"bf16": linear_bf16_bytes, "compressed_resident": resident,
                                     "ratio": resident / linear_bf16_bytes},
            "host_to_device_copies_per_forward": timer.host_to_device_copies(forward(packed)),
            "notes": ["twin = the same model with its bf16 weights (lossless codec: logits should be equal)",
                      "the compressed arrays are buffers of each CompressedLinear: model.to(device) put them on the "
                      "device; each forward decodes from them (decode table built there) into one shared buffer",
                      "device_bytes_after_load: torch.cuda.memory_allocated added by model.to(device) (None off CUDA)",
                      "on the CPU the compressed layers decode with the numba path (dispatch never sends CPU "
                      "tensors to Triton)"]}


def neuzip_generate(timer, device, config: dict, prompt: int, new_tokens: int, chunk: int, checks: list[dict],
                    label: str) -> dict:
    """Batch-1 greedy generation with a KV cache: every new token runs each linear layer on one row, so the
    compressed model decodes every weight once per token (the bandwidth-bound case a fused decode + GEMV targets)."""
    import torch

    pair = _llama_pair(timer, device, config, chunk)
    ids = torch.randint(0, config["vocab_size"], (1, prompt), generator=torch.Generator().manual_seed(2)).to(device)

    def generate(model):
        def step():
            with torch.inference_mode():
                out = model(ids, use_cache=True)
                cache, token, tokens = out.past_key_values, out.logits[:, -1:].argmax(-1), []
                for _ in range(new_tokens):
                    tokens.append(token)
                    out = model(token, past_key_values=cache, use_cache=True)
                    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                return torch.cat(tokens, 1)
        return step

    def fused(step):  # the fused decode + GEMV is opt-in until measured (its KernelCheck has auto=False)
        def run():
            before = os.environ.get("LAYERWISE_KERNELS")
            os.environ["LAYERWISE_KERNELS"] = "triton"
            try:
                return step()
            finally:
                os.environ.pop("LAYERWISE_KERNELS") if before is None else os.environ.update(LAYERWISE_KERNELS=before)
        return run

    contestants = {"compressed": generate(pair["packed"]), "bf16": generate(pair["dense"]),
                   "compressed_fused_gemv": fused(generate(pair["packed"]))}
    got, want, got_fused = (contestants[name]() for name in ("compressed", "bf16", "compressed_fused_gemv"))
    rounds = max(3, timer.repeats // 4)
    medians = timer.medians(contestants, repeats={name: rounds for name in contestants})
    tokens_per_s = {name: new_tokens / s for name, s in medians.items()}
    best = max(v for k, v in tokens_per_s.items() if k != "bf16")
    ratio = tokens_per_s["compressed"] / tokens_per_s["bf16"]
    return {"what": f"{label}: batch-1 greedy generation, {new_tokens} new tokens after a {prompt}-token prompt "
                    "(KV cache), linear layers NeuZip-compressed (lossless) vs bf16",
            "model": label, "shape": {"prompt": prompt, "new_tokens": new_tokens, "chunk_size": chunk},
            "self_check": _self_check(checks, "pair_rans_decode", "merge_bf16", "pair_rans_gemv"),
            "decode_path": _decode_path(pair), "median_s": medians, "tokens_per_s": tokens_per_s,
            "ratio_compressed_over_bf16_tokens_per_s": ratio,
            "ratio_best_compressed_over_bf16_tokens_per_s": best / tokens_per_s["bf16"],
            "target_at_least_0_8": None if timer.device.type != "cuda" else bool(best / tokens_per_s["bf16"] >= 0.8),
            "same_tokens": bool(torch.equal(got, want)),
            "fused_same_tokens": bool(torch.equal(got_fused, want)),
            "max_abs_err_vs_twin": float((got != want).sum().item()), "agrees_with_twin": bool(torch.equal(got, want)),
            "peak_bytes": {"compressed": timer.peak_bytes(generate(pair["packed"])),
                           "bf16": timer.peak_bytes(generate(pair["dense"]))},
            "notes": ["the prompt's forward is inside each timed call; tokens_per_s counts the new tokens",
                      "max_abs_err_vs_twin counts generated tokens that differ from the bf16 model's (lossless: 0)",
                      "compressed: as dispatched (each weight decoded into a shared buffer, then multiplied); "
                      "compressed_fused_gemv: with LAYERWISE_KERNELS=triton, each generated token's one-row calls "
                      "multiply straight from the compressed arrays (fused exponent decode + GEMV, opt-in until "
                      "this row shows it wins); off CUDA no kernel is eligible, so it runs the decode path"]}


def lrp_explain(timer, device, config: dict, lengths: list[int], checks: list[dict], label: str,
                compare_cpu_at: int | None, profile_at: int | None = None) -> dict:
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    from core.lrp import explain

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(**config)).eval()
    cpu_model = None
    if compare_cpu_at:
        import copy
        cpu_model = copy.deepcopy(model)
    model = model.to(device)
    rows = {}
    for length in lengths:
        ids = torch.randint(0, config["vocab_size"], (1, length), generator=torch.Generator().manual_seed(length))
        ids = ids.to(device)

        def forward(ids=ids):
            with torch.no_grad():
                return model(ids).logits

        def lrp(ids=ids):
            return explain(model, input_ids=ids)

        e = lrp()
        medians = timer.medians({"explain": lrp, "forward": forward}, repeats={"explain": max(3, timer.repeats // 4)})
        row = {"median_s": medians, "ratio_explain_over_forward": medians["explain"] / medians["forward"],
               "target_at_most_3x": None if timer.device.type != "cuda" else
               bool(medians["explain"] / medians["forward"] <= 3),
               "peak_bytes": {"explain": timer.peak_bytes(lrp), "forward": timer.peak_bytes(forward)},
               "conservation_abs": abs(float(e.relevance.sum()) - e.logit), "logit": e.logit}
        if length == profile_at:
            row["profile_explain"] = timer.profile(lrp)
            row["profile_forward"] = timer.profile(forward)
        if cpu_model is not None and length == compare_cpu_at:
            ref = explain(cpu_model, input_ids=ids.cpu())
            top = lambda r: set(r.abs().topk(min(10, r.numel())).indices.tolist())  # noqa: E731
            row["vs_cpu"] = {"max_abs_diff": _max_abs(e.relevance, ref.relevance),
                             "relevance_scale": float(ref.relevance.abs().max()),
                             "same_top10_tokens": top(e.relevance) == top(ref.relevance),
                             "cpu_conservation_abs": abs(float(ref.relevance.sum()) - ref.logit)}
        rows[f"L{length}"] = row
    try:
        import mamba_ssm  # noqa: F401
        fast = "mamba_ssm imports: transformers' forward uses its fused kernels"
    except Exception as exc:
        fast = f"mamba_ssm not importable ({type(exc).__name__}): the forward is transformers' PyTorch path"
    return {"what": f"MambaLRP explain (default rules, kernels as dispatched) vs a no-grad forward, {label}",
            "model": label, "self_check": _self_check(checks, "selective_scan_lrp", "add_rmsnorm"),
            "lengths": rows, "notes": [fast, "explain includes its forward, the relevance backward and the "
                                             "activation recompute above 64 MB of kept activations",
                                             "profile_explain / profile_forward (at one length): the torch profiler's "
                                             "top ops by self time, kernel launches and host syncs of one call"]}


def topk(timer, device, shapes: dict, checks: list[dict]) -> dict:
    import torch

    from kernels.topk_mask import topk_mask_ref, topk_mask_triton

    rows = {}
    for name, shape in shapes.items():
        scores = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device)
        k = int(scores.numel() * TOPK_PROPORTION)

        def torch_topk(scores=scores, k=k):
            mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
            mask[torch.topk(scores.reshape(-1), k, sorted=False).indices] = True
            return mask.view(scores.shape)

        kernel = lambda scores=scores, k=k: topk_mask_triton(scores, k)  # noqa: E731
        got, want, base = kernel(), topk_mask_ref(scores, k), torch_topk()
        medians = timer.medians({"triton": kernel, "torch_topk": torch_topk})
        rows[name] = {"shape": list(shape), "k": k, "median_s": medians,
                      "ratio_triton_over_torch_topk": medians["triton"] / medians["torch_topk"],
                      "max_abs_err_vs_twin": float((got != want).sum().item()), "agrees_with_twin": _agrees(got, want),
                      "entries_differing_from_torch_topk": int((got != base).sum().item()),
                      "peak_bytes": {"triton": timer.peak_bytes(kernel), "torch_topk": timer.peak_bytes(torch_topk)}}
    return {"what": f"MathNeuro top-K mask (proportion {TOPK_PROPORTION}) per matrix vs torch.topk + scatter",
            "self_check": _self_check(checks, "topk_mask"), "matrices": rows,
            "max_abs_err_vs_twin": max(r["max_abs_err_vs_twin"] for r in rows.values()),
            "agrees_with_twin": all(r["agrees_with_twin"] for r in rows.values()),
            "notes": ["max_abs_err_vs_twin counts mask entries that differ from topk_mask_ref (bit-identical: 0)"]}


def rmsnorm(timer, device, rows: int, width: int, checks: list[dict]) -> dict:
    import torch

    from kernels.rmsnorm import add_rmsnorm_ref, add_rmsnorm_triton

    g = torch.Generator().manual_seed(0)
    x, residual = torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)
    weight = 1 + 0.1 * torch.randn(width, generator=g)
    x, residual, weight = (t.to(device=device, dtype=torch.bfloat16) for t in (x, residual, weight))
    fused = lambda: add_rmsnorm_triton(x, residual, weight, 1e-5)  # noqa: E731
    unfused = lambda: add_rmsnorm_ref(x, residual, weight, 1e-5)  # noqa: E731
    (y_k, s_k), (y_r, s_r) = fused(), unfused()
    medians = timer.medians({"triton": fused, "unfused_torch": unfused})
    return {"what": "fused residual add + RMSNorm forward vs the unfused torch ops (its twin), bfloat16",
            "shape": {"rows": rows, "width": width}, "self_check": _self_check(checks, "add_rmsnorm"),
            "median_s": medians, "ratio_triton_over_unfused": medians["triton"] / medians["unfused_torch"],
            "max_abs_err_vs_twin": max(_max_abs(y_k, y_r), _max_abs(s_k, s_r)),
            "agrees_with_twin": _agrees((y_k, s_k), (y_r, s_r)),
            "peak_bytes": {"triton": timer.peak_bytes(fused), "unfused_torch": timer.peak_bytes(unfused)}}


# ---- main -------------------------------------------------------------------------------------------------------
def _sizes(smoke: bool) -> dict:
    if smoke:
        return {"scan": [(16, 8), (32, 8)], "tiles": [(2, 4)], "rans_blocks": [4], "decode": 4096, "chunk": 256,
                "llama": SMOKE_LLAMA,
                "tokens": 8, "prompt": 4, "new_tokens": 3,
                "llama_label": "tiny Llama (SmolLM2-shaped, 2 layers, hidden 64)",
                "mamba": SMOKE_MAMBA, "mamba_lengths": [8, 16], "mamba_cpu_at": 8, "mamba_profile_at": 16,
                "mamba_label": "tiny Mamba (2 layers, hidden 16)",
                "topk": {"tiny_matrix": (48, 40)}, "norm": (16, 96)}
    return {"scan": [(2048, 1536), (8192, 1536)], "tiles": [(4, 32), (16, 16), (8, 64), (2, 128), (4, 64)],
            "decode": 1536 * 576 * 16, "chunk": 1024, "rans_blocks": [8, 16, 64, 128], "prompt": 16, "new_tokens": 64,
            "llama": SMOLLM2_135M, "tokens": 512, "llama_label": "SmolLM2-135M config, random weights",
            "mamba": MAMBA_130M, "mamba_lengths": [512, 2048, 8192], "mamba_cpu_at": 512, "mamba_profile_at": 2048,
            "mamba_label": "mamba-130m config, random weights",
            "topk": {"mlp_1536x576": (1536, 576), "embed_49152x576": (49152, 576)}, "norm": (4096, 576)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU under TRITON_INTERPRET=1 (proves the script runs; timings meaningless)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds per comparison (default 20; smoke 2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 3; smoke 1)")
    ap.add_argument("--only", default="", help="comma-separated name prefixes of the comparisons to run "
                    "(selective_scan, neuzip_decode, neuzip_forward, neuzip_generate, lrp_explain, topk_mask, "
                    "add_rmsnorm); default all")
    ap.add_argument("--slow-repeats", type=int, default=3, help="rounds for the slow selective-scan twin")
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    import torch

    if args.smoke:
        device = torch.device("cpu")
    else:
        device = torch.device(args.device)
        if device.type != "cuda" or not torch.cuda.is_available():
            print(f"bench/gpu.py: no CUDA device ({args.device!r}, torch {torch.__version__}, cuda available: "
                  f"{torch.cuda.is_available()}); run it on a GPU host with CUDA torch 2.13.0, or pass --smoke "
                  "for the CPU interpreter run", file=sys.stderr)
            return 2
    torch.set_num_threads(1 if args.smoke else torch.get_num_threads())
    repeats = args.repeats or (2 if args.smoke else 20)
    warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    timer = Timer(device, repeats, warmup)
    sizes = _sizes(args.smoke)

    from kernels.dispatch import check_all

    _log("dispatch self-check")
    checks = check_all(device)
    plan = [(f"selective_scan_L{length}",
             lambda length=length, d=d: selective_scan(timer, device, length, d, checks,
                                                       min(args.slow_repeats, repeats), sizes["tiles"]))
            for length, d in sizes["scan"]]
    plan += [("neuzip_decode", lambda: neuzip_decode(timer, device, sizes["decode"], sizes["chunk"], checks,
                                                     sizes["rans_blocks"])),
             ("neuzip_forward", lambda: neuzip_forward(timer, device, sizes["llama"], sizes["tokens"], sizes["chunk"],
                                                       checks, sizes["llama_label"])),
             ("neuzip_generate", lambda: neuzip_generate(timer, device, sizes["llama"], sizes["prompt"],
                                                         sizes["new_tokens"], sizes["chunk"], checks,
                                                         sizes["llama_label"])),
             ("lrp_explain", lambda: lrp_explain(timer, device, sizes["mamba"], sizes["mamba_lengths"], checks,
                                                 sizes["mamba_label"], sizes["mamba_cpu_at"],
                                                 sizes["mamba_profile_at"])),
             ("topk_mask", lambda: topk(timer, device, sizes["topk"], checks)),
             ("add_rmsnorm", lambda: rmsnorm(timer, device, *sizes["norm"], checks))]
    only = tuple(p.strip() for p in args.only.split(",") if p.strip())
    plan = [(name, fn) for name, fn in plan if not only or name.startswith(only)]
    comparisons, failed = {}, []
    for name, fn in plan:
        _log(name)
        t0 = time.perf_counter()
        try:
            comparisons[name] = fn()
        except Exception as exc:  # one broken comparison must not hide the others; the exit code says so
            comparisons[name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
        comparisons[name]["wall_s"] = round(time.perf_counter() - t0, 2)
    report = {
        "benchmark": "bench/gpu.py",
        "mode": "smoke" if args.smoke else "gpu",
        "timings_meaningful": not args.smoke,
        "timing_note": ("SMOKE RUN: CPU, TRITON_INTERPRET=1, tiny shapes; the timings and ratios are meaningless, "
                        "only the errors against the twins and the self-check mean something") if args.smoke else
                       f"medians of {repeats} interleaved rounds after {warmup} warm-up calls, CUDA events",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": __import__("triton").__version__,
        "python": platform.python_version(),
        "self_check": checks,
        "comparisons": comparisons,
        "failed": failed,
    }
    print(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
