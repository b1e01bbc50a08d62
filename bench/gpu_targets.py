"""The targets of ``bench/gpu.py``, each beside its peer, from a report's comparisons, and their markdown table (printed
last by the bench and by ``bench/gpu_session.sh``'s summary)."""
from __future__ import annotations

def _fmt(x, digits=3):
    return "-" if x is None else (f"{x:.{digits}g}" if isinstance(x, float) else str(x))


def targets(comparisons: dict) -> list[dict]:
    """The targets of issues 34 and 46 from the comparisons, each beside its peer (``measured`` None: not measured)."""
    def get(name, *keys):
        value = comparisons.get(name)
        for k in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(k)
        return value

    mib = lambda b: None if b is None else b / 2**20  # noqa: E731
    out = []
    for key in sorted(k for k in comparisons if k.startswith("selective_scan_vs_mamba_ssm_L")):
        r = comparisons[key]
        out.append({"target": f"scan fwd+bwd vs mamba_ssm, L = {key.rsplit('L', 1)[1]}", "goal": "<= 1.0x",
                    "measured": get(key, "median_s", "triton"), "peer": get(key, "median_s", "mamba_ssm"),
                    "unit": "s", "ratio": r.get("ratio_triton_over_mamba_ssm"),
                    "met": r.get("target_at_most_1x_of_mamba_ssm"),
                    "note": "mamba_ssm does not import" if "mamba_ssm" in r else
                    "its selective_scan_cuda alone" if "directly" in r.get("mamba_ssm_used", "") else ""})
    if not any(k.startswith("selective_scan_vs_mamba_ssm_L") for k in comparisons):
        out.append({"target": "scan fwd+bwd vs mamba_ssm", "goal": "<= 1.0x", "measured": None, "peer": None,
                    "unit": "s", "ratio": None, "met": None, "note": ""})
    explains = {key.rsplit("_L", 1)[1]: row for key, row in comparisons.items()
                if key.startswith("lrp_explain_L") and isinstance(row, dict)}
    for length, row in sorted(explains.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        if "median_s" not in row:
            out.append({"target": f"explain / forward, {length} tokens", "goal": "<= 3x", "measured": None,
                        "peer": None, "unit": "s", "ratio": None, "met": None,
                        "note": "killed" if row.get("killed") else row.get("error", "")[:60]})
            continue
        peak = row.get("peak_bytes") or {}
        hf = row.get("forward_transformers_path") or {}
        out.append({"target": f"explain / forward, {length} tokens", "goal": "<= 3x",
                    "measured": row["median_s"]["explain"], "peer": row["median_s"]["forward"], "unit": "s",
                    "ratio": row["ratio_explain_over_forward"], "met": row["target_at_most_3x"],
                    "note": f"peak {_fmt(mib(peak.get('explain')))} / {_fmt(mib(peak.get('forward')))} MiB, "
                            f"recompute {'on' if row.get('recomputed_mixers') else 'off'}; transformers' forward "
                            f"({'fast kernels' if hf.get('fast') else 'PyTorch reference'}) "
                            f"{_fmt(row['median_s'].get('forward_transformers'))} s"})
    if not explains:
        out.append({"target": "explain / forward, 512 / 2048 / 8192 tokens", "goal": "<= 3x", "measured": None,
                    "peer": None, "unit": "s", "ratio": None, "met": None, "note": ""})
    for key in sorted(k for k in comparisons if k.startswith("neuzip_decode_")):
        r = comparisons[key]
        out.append({"target": f"NeuZip decode GB/s vs device copy, {key.split('_', 2)[2]}", "goal": ">= 0.25x",
                    "measured": get(key, "gbps_of_bf16_bytes", "app"), "peer": get(key, "gbps_of_bf16_bytes", "copy"),
                    "unit": "GB/s", "ratio": r.get("ratio_decode_over_copy_bandwidth"),
                    "met": r.get("target_at_least_0_25"),
                    "note": f"{get(key, 'shape', 'programs')} programs of segments of {get(key, 'shape', 'segment')}"
                            + (f"; unfused {_fmt(r['ratio_unfused_over_app_time'])}x the time"
                               if "ratio_unfused_over_app_time" in r else "")})
    if not any(k.startswith("neuzip_decode_") for k in comparisons):
        out.append({"target": "NeuZip decode GB/s vs device copy", "goal": ">= 0.25x", "measured": None,
                    "peer": None, "unit": "GB/s", "ratio": None, "met": None, "note": ""})
    r = comparisons.get("neuzip_forward", {})
    tokens = (r.get("shape") or {}).get("tokens", 512)
    med = r.get("median_s") or {}
    best = min((v for k, v in med.items() if k in ("compressed", "compressed_graph")), default=None)
    peer = min((v for k, v in med.items() if k in ("bf16", "bf16_graph")), default=None)
    out.append({"target": f"compressed forward vs bf16, {tokens} tokens", "goal": "<= 1.3x", "measured": best,
                "peer": peer, "unit": "s", "ratio": r.get("ratio_compressed_over_bf16"),
                "met": r.get("target_at_most_1_3x"),
                "note": f"graph / graph {_fmt(r.get('ratio_graph_over_bf16_graph'))}x, eager / eager "
                        f"{_fmt(r.get('ratio_eager_over_bf16_eager'))}x" if r else ""})
    r = comparisons.get("neuzip_generate", {})
    tps = r.get("tokens_per_s") or {}
    out.append({"target": "batch-1 tokens/s, compressed (best) vs graph-captured bf16", "goal": ">= 0.8x",
                "measured": tps.get(r.get("best_compressed")), "peer": tps.get(r.get("peer")), "unit": "tokens/s",
                "ratio": r.get("ratio_best_compressed_over_bf16_tokens_per_s"), "met": r.get("target_at_least_0_8"),
                "note": f"best: {r.get('best_compressed')}; bf16 eager {_fmt(tps.get('bf16'))}, graph "
                        f"{_fmt(tps.get('bf16_graph'))}; compressed eager {_fmt(tps.get('compressed'))}, graph "
                        f"{_fmt(tps.get('compressed_graph'))}, graph + fused GEMV "
                        f"{_fmt(tps.get('compressed_graph_fused_gemv'))}" if tps else ""})
    r = comparisons.get("neuzip_train", {})
    alloc, ratios = r.get("allocated_bytes") or {}, r.get("ratios") or {}
    paper = r.get("paper_table1_llama3_8b") or {}
    gib = lambda b: None if b is None else b / 2**30  # noqa: E731
    out.append({"target": f"LOMO + NeuZip training memory vs vanilla, {r.get('model', 'llama-1b')}",
                "goal": "<= 0.55x", "measured": gib(alloc.get("lomo+neuzip")), "peer": gib(alloc.get("vanilla")),
                "unit": "GiB allocated", "ratio": ratios.get("memory_lomo_neuzip_over_vanilla"),
                "met": r.get("target_at_most_0_55"),
                "note": f"vs LOMO {_fmt(ratios.get('memory_lomo_neuzip_over_lomo'))}x (paper "
                        f"{_fmt(paper.get('memory_lomo_neuzip_over_lomo'))}x), vs vanilla paper "
                        f"{_fmt(paper.get('memory_lomo_neuzip_over_vanilla'))}x; speed vs vanilla "
                        f"{_fmt(ratios.get('speed_lomo_neuzip_over_vanilla'))}x (paper "
                        f"{_fmt(paper.get('speed_lomo_neuzip_over_vanilla'))}x); reserved "
                        f"{_fmt(ratios.get('reserved_lomo_neuzip_over_vanilla'))}x" if r else ""})
    return out


def target_table(rows: list[dict], device: str) -> str:
    lines = [f"The targets on {device} (bench/gpu.py):", "",
             "| target | measured | peer | unit | ratio | goal | met | note |", "|---|---|---|---|---|---|---|---|"]
    for t in rows:
        met = "not measured" if t["measured"] is None else {True: "yes", False: "NO", None: "-"}[t["met"]]
        lines.append(f"| {t['target']} | {_fmt(t['measured'])} | {_fmt(t['peer'])} | {t['unit']} | "
                     f"{_fmt(t['ratio'])} | {t['goal']} | {met} | {t['note']} |")
    return "\n".join(lines)
