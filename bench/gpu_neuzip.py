"""``bench/gpu.py`` rows of the NeuZip decode and the compressed forward: the decode's GB/s against a device copy at the
app's settings and in other segment layouts (the target: >= 0.25x), and a 512-token forward of a compressed
SmolLM2-135M-config model against bf16, each eager and captured in a CUDA graph (the target: <= 1.3x)."""
from __future__ import annotations

import time

from gpu_common import RowContext, Timer, agrees, check_kernels, extras, forced, max_abs, self_check_of, unfused

def _decode_layouts(ct, device, layouts, sms):
    """``{name: (DeviceArrays, description)}`` of a compressed tensor in each layout ``(segment or None, rows)``."""
    from kernels.neuzip_rans import decode_programs

    out = {}
    for segment, rows in layouts:
        arrays = ct.device_arrays(device, segment)
        arrays.rows = rows
        seg = segment or ct.exponents.chunk_size
        out[f"seg{seg}_rows{rows}"] = (arrays, {"segment": seg, "rows": rows,
                                                "programs": decode_programs(ct.numel, seg, rows),
                                                "programs_per_sm": None if not sms else
                                                decode_programs(ct.numel, seg, rows) / sms,
                                                "index_bytes": arrays.index_bytes,
                                                "index_bits_per_weight": 8 * arrays.index_bytes / ct.numel})
    return out


def neuzip_decode(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from core.neuzip.codec import compress
    from kernels import neuzip_rans as R
    from kernels.neuzip_bits import merge_bf16_ref

    checks = check_kernels(device, ["pair_rans_decode", "merge_bf16"])
    sms = R.multiprocessors(device)
    for label, shape in sizes["decode"].items():
        if ctx.past():
            break
        numel = shape[0] * shape[1]
        g = torch.Generator().manual_seed(0)
        weights = (0.02 * torch.randn(numel, generator=g)).to(torch.bfloat16)  # SmolLM2-like per-tensor std
        t0 = time.perf_counter()
        ct = compress(weights, mantissa_bits=7, chunk_size=sizes.get("chunk"))  # the app's chunk unless smoke
        encode_s = time.perf_counter() - t0
        segment = ct.device_layout(device) if sms else sizes.get("smoke_segment")
        t0 = time.perf_counter()
        app = ct.device_arrays(device, segment)
        index_s = time.perf_counter() - t0
        original = weights.to(device)
        copy_src, copy_dst = original.clone(), torch.empty_like(original)
        errors = torch.zeros(1, dtype=torch.int32, device=device)
        buffer = torch.empty_like(original)  # as the app decodes: into the shared decompression buffer
        decode = lambda arrays=app: ct.decode_arrays(arrays, errors, out=buffer)  # noqa: E731
        got = decode().clone()
        want = forced("ref", decode)().clone()
        layouts = _decode_layouts(ct, device, [lay for lay in sizes["layouts"](ct.exponents.chunk_size)], sms)
        contestants = {"app": decode, "app_unfused": unfused(decode), "copy": lambda: copy_dst.copy_(copy_src)}
        for name, (arrays, _) in layouts.items():
            contestants[name] = lambda arrays=arrays: ct.decode_arrays(arrays, errors, out=buffer)
        exact = {name: bool(torch.equal(fn().view(torch.int16), original.view(torch.int16)))
                 for name, fn in contestants.items() if name != "copy"}
        medians = timer.medians(contestants)
        nbytes = 2 * numel
        gbps = {name: nbytes / s / 1e9 for name, s in medians.items()}
        ratio = gbps["app"] / gbps["copy"]
        chunk = ct.exponents.chunk_size
        seg = segment or chunk
        ctx.save(f"neuzip_decode_{label}", {
            "what": f"NeuZip lossless decode (pair-rANS exponents + bit merge) of a {shape[0]}x{shape[1]} bf16 "
                    "matrix vs a device-to-device copy of the same bytes, at the app's settings",
            "settings": f"the app's: compress() defaults (chunks of {chunk} weights), the segment layout the app "
                        f"picks on this device (kernels.neuzip_rans.decode_layout: segments of {seg}, "
                        f"{R.DECODE_ROWS} per program), decoded and merged by one kernel into a bf16 buffer "
                        "(app_unfused: the exponent decode, the bit merge and a copy into the buffer, as before)",
            "shape": {"rows": shape[0], "cols": shape[1], "numel": numel, "chunk_size": chunk, "segment": seg,
                      "programs": R.decode_programs(numel, seg), "multiprocessors": sms},
            "self_check": self_check_of(checks, "pair_rans_decode", "merge_bf16"),
            "median_s": medians, "rounds": timer.rounds, "cut_by_deadline": timer.cut, "gbps_of_bf16_bytes": gbps,
            "compressed_bytes": ct.nbytes, "resident_bytes": app.nbytes, "index_bytes": app.index_bytes,
            "bf16_bytes": nbytes, "cpu_encode_s": encode_s, "cpu_index_s": index_s,
            "ratio_decode_over_copy_bandwidth": ratio,
            "ratio_unfused_over_app_time": medians["app_unfused"] / medians["app"],
            "target_at_least_0_25": None if not timer.cuda else bool(ratio >= 0.25),
            "layouts": {name: {**desc, "median_s": medians[name], "gbps": gbps[name], "bit_exact": exact[name]}
                        for name, (_, desc) in layouts.items()},
            "max_abs_err_vs_twin": max_abs(got.view(torch.int16), want.view(torch.int16)),
            "agrees_with_twin": bool(torch.equal(got.view(torch.int16), want.view(torch.int16))),
            "bit_exact_vs_original": all(exact.values()), "device_flag_clean": int(errors.item()) == 0,
            "peak_bytes": {"app": timer.peak_bytes(decode)},
            "profile": {name: timer.profile(contestants[name], top=4) for name in ("app", "app_unfused", "copy")},
            "notes": ["GB/s counts the decoded bf16 bytes (2 per weight)",
                      "profile: one call under the torch profiler: its device time (total_ms) beside the timed "
                      "wall (median_s): a call whose median is far above its device time waits for the host",
                      "layouts: seg<S>_rows<R> decodes in segments of S weights, R segments per program; the index "
                      "(8 states and 2 offsets per segment) is resident device memory beside the compressed bytes"]})


def llama_pair(timer: Timer, device, config: dict, chunk) -> dict:
    """A random-weight Llama of ``config`` twice on ``device``: bf16, and with every linear layer but the tied
    embedding / head NeuZip-compressed as the app does it (lossless, ``compress``'s defaults unless ``chunk``),
    laid out for the device by ``.to(device)``."""
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
    tensors = {name: compress(m.weight.detach(), 7, chunk_size=chunk) for name, m in linears.items()}
    encode_s = time.perf_counter() - t0
    apply_compressed(packed, tensors)
    held = {}
    for name, model in (("bf16", dense), ("compressed", packed)):
        t0 = time.perf_counter()
        held[name] = timer.allocated_by(lambda model=model: model.to(device))
        held[f"{name}_load_s"] = time.perf_counter() - t0  # compressed: includes the segment index pass
    packed_layers = [m for m in packed.modules() if isinstance(m, CompressedLinear)]
    return {"dense": dense, "packed": packed, "linears": len(linears), "linear_bf16_bytes": linear_bf16_bytes,
            "encode_s": encode_s, "held": held, "compressed_modules": packed_layers,
            "segments": sorted({m.segment or m.weight_compressed.exponents.chunk_size for m in packed_layers})}


def decode_path(pair: dict) -> str:
    from kernels.dispatch import use_triton

    probe = pair["compressed_modules"][0].arrays()
    if not use_triton(probe.states, kernel="pair_rans_decode"):
        return "reference (PyTorch/numba)"
    fused = use_triton(probe.states, probe.fields, kernel="pair_rans_decode_bf16")
    return "triton: decode + merge in one kernel" if fused else "triton: decode, then merge"


def settings_note(chunk) -> str:
    return ("the app's: compress() defaults (chunks of 2**17 weights), laid out for the device by .to(device)"
            if chunk is None else f"smoke: chunks of {chunk} weights")


def graphed(build, note: dict, name: str):
    """``build()`` (a captured forward or generator), or None with the reason in ``note[name]`` (a capture that fails
    on this device must not take the eager rows with it)."""
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - recorded beside the row
        note[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return None


def neuzip_forward(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """The compressed forward of a prompt against the bf16 model's, each eager and as a replayed CUDA graph
    (core.neuzip.capture.StaticForward: the per-linear host work recorded once), and the unfused decode."""
    import torch

    from core.neuzip.capture import StaticForward

    checks = check_kernels(device, ["pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16"])
    config, label, chunk = sizes["llama"], sizes["llama_label"], sizes.get("chunk")
    pair = llama_pair(timer, device, config, chunk)
    dense, packed = pair["dense"], pair["packed"]
    resident = sum(t.numel() * t.element_size() for m in pair["compressed_modules"]
                   for _, t in m.arrays().items() if t is not None)
    index = sum(m.arrays().index_bytes for m in pair["compressed_modules"])
    on_device = {str(t.device) for m in pair["compressed_modules"] for _, t in m.arrays().items() if t is not None}
    ids = torch.randint(0, config["vocab_size"], (1, sizes["tokens"]),
                        generator=torch.Generator().manual_seed(1)).to(device)

    def forward(model):
        def step():
            with torch.inference_mode():
                return model(ids).logits
        return step

    failed = {}
    graphs = {name: graphed(lambda model=model: StaticForward(model, ids), failed, name)
              for name, model in (("bf16_graph", dense), ("compressed_graph", packed))}
    contestants = {"compressed": forward(packed), "bf16": forward(dense), "compressed_unfused": unfused(forward(packed))}
    contestants.update({name: (lambda g=g: g(ids)) for name, g in graphs.items() if g is not None})
    outputs = {name: fn().clone() for name, fn in contestants.items()}
    want = outputs["bf16"]
    medians = timer.medians(contestants)
    best = min(v for k, v in medians.items() if k in ("compressed", "compressed_graph"))
    best_bf16 = min(v for k, v in medians.items() if k in ("bf16", "bf16_graph"))
    ratio = best / best_bf16
    linears = pair["linears"]
    result = {
        "what": f"{label}: forward of {sizes['tokens']} tokens, linear layers NeuZip-compressed (lossless) vs bf16, "
                "each eager and as a replayed CUDA graph",
        "settings": settings_note(chunk), "model": label,
        "shape": {"tokens": sizes["tokens"], "compressed_linears": linears, "segments": pair["segments"]},
        "self_check": self_check_of(checks, "pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16"),
        "decode_path": decode_path(pair), "median_s": medians, "rounds": timer.rounds, "cut_by_deadline": timer.cut,
        "graph_failed": failed, "ratio_compressed_over_bf16": ratio,
        "ratio_eager_over_bf16_eager": medians["compressed"] / medians["bf16"],
        "ratio_graph_over_bf16_graph": medians["compressed_graph"] / medians["bf16_graph"]
        if "compressed_graph" in medians and "bf16_graph" in medians else None,
        "target_at_most_1_3x": None if not timer.cuda else bool(ratio <= 1.3),
        "ratio_unfused_over_bf16": medians["compressed_unfused"] / medians["bf16"],
        "overhead_per_linear_s": (medians["compressed"] - medians["bf16"]) / linears,
        "overhead_per_linear_graph_s": (medians["compressed_graph"] - medians["bf16_graph"]) / linears
        if "compressed_graph" in medians and "bf16_graph" in medians else None,
        "max_abs_err_vs_twin": max(max_abs(out, want) for out in outputs.values()),
        "agrees_with_twin": all(agrees(out, want) for out in outputs.values()),
        "same_logits": {name: bool(torch.equal(out, want)) for name, out in outputs.items()},
        "cpu_encode_s": pair["encode_s"], "device_bytes_after_load": pair["held"],
        "compressed_arrays_on": sorted(on_device),
        "linear_weights_bytes": {"bf16": pair["linear_bf16_bytes"], "compressed_resident": resident,
                                 "of_which_states_and_offsets": index, "ratio": resident / pair["linear_bf16_bytes"]},
        "notes": ["twin = the same model with its bf16 weights (lossless codec: every contestant's logits should "
                  "equal bf16's)",
                  "ratio_compressed_over_bf16 (the target's): the better compressed variant (eager, graph) over the "
                  "better bf16 one; each graph replays the same forward with a static KV cache of the prompt's length",
                  "compressed_unfused: the exponent decode, bit merge and copy into the buffer (3 kernels a linear)",
                  "overhead_per_linear_s: (compressed - bf16) / compressed linears, eager; _graph_s: both graphs",
                  "host_syncs_per_forward: expected 1 (the corruption flag, read once after the forward)"]}
    extras(ctx, "neuzip_forward", result, {  # the timed part saved first, the rest while the share allows
        "peak_bytes": lambda: {"compressed": timer.peak_bytes(forward(packed)),
                               "bf16": timer.peak_bytes(forward(dense))},
        "host_to_device_copies_per_forward": lambda: timer.host_to_device_copies(forward(packed)),
        "host_syncs_per_forward": lambda: timer.host_syncs(forward(packed)) if timer.cuda else None,
        "profile": lambda: {name: timer.profile(contestants[name], top=8) for name in
                            ("compressed", "bf16", "compressed_graph", "bf16_graph") if name in contestants}})
