"""Plotly figures of the NeuZip results (the tab shows them; ``python -m core neuzip ... --out F.html`` writes them),
in the house style of :mod:`core.figures`; the trade-off's families, colours and markers come from the method
registry (:data:`core.neuzip.tradeoff.METHODS`)."""
from __future__ import annotations

import math

from core.figures import PALETTE, style
from core.neuzip.tradeoff import setting_style


def layer_kind(name: str) -> str:
    """``model.layers.3.mlp.up_proj.weight`` -> ``up_proj``."""
    parts = name.split(".")
    return parts[-2] if parts[-1] == "weight" and len(parts) > 1 else parts[-1]


def histogram_figure(h: dict):
    """Three panels: sign, exponent (occupied range) and mantissa histograms, with their entropies."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    n = max(h["numel"], 1)
    e = h["entropy"]
    exp = h["exponent"]
    used = [i for i, c in enumerate(exp) if c]  # only occupied exponents (e.g. 0 for zeros, then ~90..127)
    fig = make_subplots(rows=1, cols=3, column_widths=[0.14, 0.5, 0.36], horizontal_spacing=0.07,
                        subplot_titles=(f"sign: H = {e['sign']:.3f} bits",
                                        f"exponent: H = {e['exponent']:.3f} of 8 bits",
                                        f"mantissa: H = {e['mantissa']:.3f} of 7 bits"))
    fig.add_trace(go.Bar(x=["+", "−"], y=[100 * c / n for c in h["sign"]], name="sign",
                         marker_color=PALETTE[0]), 1, 1)
    fig.add_trace(go.Bar(x=[str(i) for i in used], y=[100 * exp[i] / n for i in used],
                         name="exponent", marker_color=PALETTE[1]), 1, 2)
    fig.add_trace(go.Bar(x=list(range(128)), y=[100 * c / n for c in h["mantissa"]], name="mantissa",
                         marker_color=PALETTE[2]), 1, 3)
    title = f"Bit fields of {h['numel']:,} bf16 weights" + (f" ({h['model']})" if h.get("model") else "")
    style(fig, title, "", "share of weights (%)", height=420)
    fig.update_xaxes(title_text="sign bit", row=1, col=1)
    fig.update_xaxes(title_text="biased exponent (8-bit field value; occupied values only)", row=1, col=2,
                     type="category", nticks=12)
    fig.update_xaxes(title_text="mantissa (7-bit field value)", row=1, col=3)
    fig.update_yaxes(title_text="", row=1, col=2)
    fig.update_yaxes(title_text="", row=1, col=3)
    fig.update_layout(showlegend=True, bargap=0.05)
    return fig


def table_figure(table: dict):
    """Bits per weight by layer kind (and in total): NeuZip against its entropy bound, zstd and zlib."""
    import plotly.graph_objects as go

    groups: dict[str, list[dict]] = {}
    for r in table["rows"]:
        groups.setdefault(layer_kind(r["name"]), []).append(r)

    def wavg(rows, key):
        if any(r.get(key) is None for r in rows):
            return None
        return sum(r[key] * r["numel"] for r in rows) / sum(r["numel"] for r in rows)

    kinds = list(groups) + ["total"]
    series = [("bits_per_weight", "NeuZip (every stored byte)", PALETTE[0]),
              ("entropy_bound", "entropy bound (H(exp) + 1 + k)", PALETTE[1]),
              ("zstd_bits_per_weight", "zstd on raw bf16 bytes", PALETTE[3]),
              ("zlib_bits_per_weight", "zlib on raw bf16 bytes", PALETTE[4])]
    fig = go.Figure()
    for key, name, colour in series:
        ys = [wavg(groups[k], key) for k in groups] + [table["total"].get(key)]
        if all(y is None for y in ys):
            continue
        fig.add_trace(go.Bar(x=kinds, y=ys, name=name, marker_color=colour, textposition="outside",
                             text=[None] * (len(ys) - 1) + [None if ys[-1] is None else f"{ys[-1]:.2f}"]))
    fig.add_hline(y=16, line_dash="dot", line_color="#475569", annotation_text="bf16: 16 bits",
                  annotation_position="top left")
    k, b = table["mantissa_bits"], table.get("block_size")
    what = "lossless" if k == 7 else f"k={k}" + (f", B={b}" if b else "")
    total = table["total"]
    style(fig, f"Compression by layer kind, NeuZip {what}: {total['bits_per_weight']:.3f} bits/weight "
                f"(bound {total['entropy_bound']:.3f})", "layer kind (weights pooled over all blocks)",
           "bits per weight")
    fig.update_layout(barmode="group", yaxis_range=[0, 18.5],
                      legend={"orientation": "h", "y": -0.22, "x": 0})
    return fig


def tradeoff_figure(result: dict, log_x: bool = False):
    """Memory (MB) against word-level perplexity, one legend entry per method family, the Pareto front drawn."""
    import plotly.graph_objects as go

    fig = go.Figure()
    points = result["points"]
    for family in dict.fromkeys(p["family"] for p in points):  # legend order: first appearance
        ps = [p for p in points if p["family"] == family]
        look = setting_style(ps[0])
        colour, symbol, where = look.colour, look.marker, look.text_position
        fig.add_trace(go.Scatter(
            x=[p["memory_bytes"] / 1e6 for p in ps], y=[p["perplexity"] for p in ps], mode="markers+text",
            name=family, text=[p["label"].replace("NeuZip ", "").replace(" (lossless)", "") for p in ps],
            textposition=where, textfont={"size": 12, "color": colour},
            marker={"color": colour, "symbol": symbol, "size": 13, "line": {"width": 1, "color": "#ffffff"}},
            customdata=[[p["label"], p["bits_per_weight"]] for p in ps],
            hovertemplate="%{customdata[0]}<br>%{x:.1f} MB, %{customdata[1]:.2f} bits/weight (linear)"
                          "<br>perplexity %{y:.3f}<extra></extra>"))
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["memory_bytes"])
    if front:
        fig.add_trace(go.Scatter(x=[p["memory_bytes"] / 1e6 for p in front], y=[p["perplexity"] for p in front],
                                 mode="lines", name="Pareto front", line={"color": "#009E73", "width": 2.5, "dash": "dash",
                                                                          "shape": "hv"}, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=[p["memory_bytes"] / 1e6 for p in front], y=[p["perplexity"] for p in front],
                                 mode="markers", showlegend=False, hoverinfo="skip",
                                 marker={"size": 22, "color": "rgba(0,0,0,0)", "line": {"width": 2, "color": "#009E73"}}))
    model = result.get("model", "")
    style(fig, f"Memory vs perplexity{f' ({model})' if model else ''}: {result.get('words', '?'):,} words of "
                f"{result.get('dataset', 'text')}", "model weight memory (MB" + (", log scale)" if log_x else ")"),
           "word-level perplexity (log scale, lower is better)", height=580)
    fig.update_xaxes(type="log" if log_x else "linear")
    ppl = [p["perplexity"] for p in points if math.isfinite(p["perplexity"])]
    ticks = [t for t in (1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500,
                         2000, 3000, 5000, 7500, 10000) if ppl and min(ppl) / 1.3 <= t <= max(ppl) * 1.3]
    fig.update_yaxes(type="log", **({"tickmode": "array", "tickvals": ticks} if len(ticks) >= 2 else {}))
    return fig


def throughput_figure(result: dict):
    """Compress / decompress MB/s against a plain copy of the same bytes (log scale)."""
    import plotly.graph_objects as go

    rows = result["rows"]
    labels = [r["label"] for r in rows]
    fig = go.Figure()
    for key, name, colour in (("compress_MBps", "compress", PALETTE[0]), ("decompress_MBps", "decompress", PALETTE[1]),
                              ("memcpy_MBps", "memory copy (the limit)", "#475569")):
        ys = [r[key] for r in rows]
        fig.add_trace(go.Bar(x=labels, y=ys, name=name, marker_color=colour, text=[f"{y:,.0f}" if y >= 100 else f"{y:.3g}" for y in ys],
                             textposition="outside"))
    device = rows[0].get("device", "cpu") if rows else "cpu"
    style(fig, f"Throughput on this machine ({device}), {2 * result['numel'] / 1e6:.3g} MB of bf16 weights",
           "NeuZip setting", "MB/s of bf16 input (log scale)")
    fig.update_layout(barmode="group")
    fig.update_yaxes(type="log")
    return fig
