"""``bench/gpu.py`` rows of MambaLRP ``explain`` (one row per length): against its own no-grad forward through the same
Triton scan (the target: <= 3x), transformers' forward beside it, peak memory, profiles and host syncs."""
from __future__ import annotations

import time

from gpu_common import RowContext, Timer, check_kernels, max_abs, self_check_of


def _transformers_mamba_path() -> dict:
    """Which path transformers' Mamba forward takes on CUDA: its fast kernels need both ``mamba_ssm`` and
    ``causal_conv1d``; without either it falls back to its PyTorch reference (a Python loop over the sequence)."""
    found = {}
    for name in ("mamba_ssm", "causal_conv1d"):
        try:
            __import__(name)
            found[name] = "imports"
        except Exception as exc:
            found[name] = f"not importable ({type(exc).__name__})"
    fast = all(v == "imports" for v in found.values())
    return {**found, "path": "fast kernels (mamba_ssm + causal_conv1d)" if fast else
            "PyTorch reference (a Python loop over the sequence)", "fast": fast}


def lrp_explain(ctx: RowContext, timer: Timer, device, sizes: dict, index: int = 0) -> None:
    """One length (``sizes["mamba_lengths"][index]``): ``explain`` against the no-grad forward that runs the same
    Triton scan (the project's mixers with the MambaLRP rules, no backward: the ratio's peer), and transformers'
    own forward as installed (timed once when it is its PyTorch reference path)."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    from core.lrp import explain
    from core.lrp.adapters import adapter_for
    from core.lrp.context import lrp_rules
    from core.lrp.methods import kept_activation_bytes, recompute_mixers
    from core.lrp.rules import LRPRules

    checks = check_kernels(device, ["selective_scan_lrp", "add_rmsnorm"])
    config, length = sizes["mamba"], sizes["mamba_lengths"][index]
    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(**config)).eval()
    cpu_at = sizes["mamba_cpu_at"] == length
    cpu_state = {k: v.clone() for k, v in model.state_dict().items()} if cpu_at else None
    model = model.to(device)
    hf = _transformers_mamba_path()
    ids = torch.randint(0, config["vocab_size"], (1, length), generator=torch.Generator().manual_seed(length))
    ids = ids.to(device)
    rules = LRPRules.mambalrp()

    def forward():  # explain's forward without the backward: the mixers with the rules, the Triton scan
        with torch.no_grad(), lrp_rules(model, rules):
            return model(ids, use_cache=False, logits_to_keep=1).logits  # the explained position, as explain

    def forward_transformers():
        with torch.no_grad():
            return model(ids, use_cache=False, logits_to_keep=1).logits

    def lrp():
        return explain(model, input_ids=ids)

    t0 = time.perf_counter()
    e = lrp()  # the first explanation: the kernels' checks, the tile autotune, compiles
    first_s = time.perf_counter() - t0
    mine = forward()
    timer.sync()
    t0 = time.perf_counter()
    theirs = forward_transformers()
    timer.sync()
    once = time.perf_counter() - t0  # transformers' reference path takes seconds: this call is its one round
    embeds = model.get_input_embeddings()(ids)
    adapter = adapter_for(model)
    timer.repeats, timer.warmup = sizes["lrp_repeats"], min(timer.warmup, 1)
    contestants = {"explain": lrp, "forward": forward}
    if hf["fast"]:
        contestants["forward_transformers"] = forward_transformers
    medians = timer.medians(contestants)
    rounds = dict(timer.rounds)
    if not hf["fast"]:
        medians["forward_transformers"], rounds["forward_transformers"] = once, 1
    ratio = medians["explain"] / medians["forward"]
    row = {"what": f"MambaLRP explain of {length} tokens (default mode: kernels as dispatched after their "
                   "self-check, the scan tile autotuned, recompute decided by the device) vs the no-grad forward "
                   f"through the same Triton scan, {sizes['mamba_label']}",
           "model": sizes["mamba_label"], "length": length,
           "self_check": self_check_of(checks, "selective_scan_lrp", "add_rmsnorm"),
           "median_s": medians, "rounds": rounds, "cut_by_deadline": timer.cut, "first_call_s": first_s,
           "ratio_explain_over_forward": ratio, "target_at_most_3x": None if not timer.cuda else bool(ratio <= 3),
           "ratio_explain_over_forward_transformers": medians["explain"] / medians["forward_transformers"],
           "forward_transformers_path": hf,
           "forward_max_abs_diff_vs_transformers": max_abs(mine, theirs),
           "recomputed_mixers": recompute_mixers(adapter, embeds),
           "kept_activation_bytes": kept_activation_bytes(adapter, embeds),
           "conservation_abs": abs(float(e.relevance.sum()) - e.logit), "logit": e.logit,
           "notes": ["forward (the ratio's peer): explain's forward without its backward, i.e. the project's mixers "
                     "with the MambaLRP rules under torch.no_grad, the same Triton scan kernel (forward only)",
                     f"forward_transformers: transformers' MambaForCausalLM forward as installed: {hf['path']}"
                     + ("" if hf["fast"] else "; timed once (one call, host clock after a device sync)"),
                     "explain includes its forward, the relevance backward and, where the kept activations would "
                     "not fit, the activation recompute (recomputed_mixers)"]}
    ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if not ctx.past():
        row["peak_bytes"] = {"explain": timer.peak_bytes(lrp), "forward": timer.peak_bytes(forward)}
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if length == sizes["mamba_profile_at"] and not ctx.past():
        row["profile_explain"] = timer.profile(lrp)
        row["profile_forward"] = timer.profile(forward)
        row["host_syncs_explain"] = timer.host_syncs(lrp) if timer.cuda else None
        row["notes"].append("profile_explain / profile_forward: the torch profiler's top ops by self time, kernel "
                            "launches and host syncs of one call; host_syncs_explain: HostSyncs by line")
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))
    if cpu_at and not ctx.past():
        cpu_model = MambaForCausalLM(MambaConfig(**config)).eval()
        cpu_model.load_state_dict(cpu_state)
        got, ref = explain(model, input_ids=ids), explain(cpu_model, input_ids=ids.cpu())
        top = lambda r: set(r.abs().topk(min(10, r.numel())).indices.tolist())  # noqa: E731
        row["vs_cpu"] = {"max_abs_diff": max_abs(got.relevance, ref.relevance),
                         "relevance_scale": float(ref.relevance.abs().max()),
                         "same_top10_tokens": top(got.relevance) == top(ref.relevance),
                         "cpu_conservation_abs": abs(float(ref.relevance.sum()) - ref.logit)}
        ctx.save(f"lrp_explain_L{length}", _explain_result(row))


def _explain_result(row: dict) -> dict:
    from kernels.selective_scan import tuning_results

    return {**row, "scan_tiles_chosen": {str(k): v for k, v in tuning_results().items()}}
