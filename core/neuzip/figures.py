"""Plotly figures of the NeuZip results (the tab shows them; ``python -m core neuzip ... --out F.html`` writes them),
in the house style of :mod:`core.figures`; the trade-off's families, colours and markers come from the method
registry (:data:`core.neuzip.formats.METHODS`)."""
from __future__ import annotations

import math

from core.figures import PALETTE, go, make_subplots, style
from core.neuzip.formats import setting_style


def layer_kind(name: str) -> str:
    """``model.layers.3.mlp.up_proj.weight`` -> ``up_proj``."""
    parts = name.split(".")
    return parts[-2] if parts[-1] == "weight" and len(parts) > 1 else parts[-1]


def histogram_figure(h: dict):
    """Three panels: sign, exponent (occupied range) and mantissa histograms, with their entropies."""

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
        fig.add_trace(go.Bar(x=kinds, y=ys, name=name, marker_color=colour, textposition="outside", textangle=-90,
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


PROCESS_COLOUR = "#7F7F7F"  # a process's RSS, beside the tensor figure (the training chart's grey)


def tradeoff_figure(result: dict, log_x: bool = False):
    """Memory (MB) against word-level perplexity, one legend entry per method family, the Pareto front drawn; where
    the result holds ``process`` (:func:`core.neuzip.memory.process_points`), each measured setting's process too: a
    hollow grey marker at the process's idle RSS after a forward, joined to the setting's weight-memory point."""

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
    process = _process_points(result, points)
    if process:
        xs, ys = [], []
        for p, row in process:
            xs += [p["memory_bytes"] / 1e6, row["idle_rss_bytes"] / 1e6, None]
            ys += [p["perplexity"], p["perplexity"], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", showlegend=False, hoverinfo="skip",
                                 line={"color": PROCESS_COLOUR, "width": 1, "dash": "dot"}))
        fig.add_trace(go.Scatter(
            x=[row["idle_rss_bytes"] / 1e6 for _, row in process], y=[p["perplexity"] for p, _ in process],
            mode="markers", name="the process (idle RSS after a forward)",
            marker={"color": "rgba(0,0,0,0)", "size": 12, "symbol": "circle",
                    "line": {"width": 2, "color": PROCESS_COLOUR}},
            customdata=[[row["label"], row["tensor_bytes"] / 1e6, row["peak_rss_bytes"] / 1e6] for _, row in process],
            hovertemplate="%{customdata[0]}: the process idles at %{x:,.0f} MB (peak %{customdata[2]:,.0f} MB) "
                          "holding %{customdata[1]:,.1f} MB of model<br>perplexity %{y:.3f}<extra></extra>"))
    model = result.get("model", "")
    if process:
        x_title = "memory (MB): the model's weights (filled) and the whole process (hollow)" + \
            (", log scale" if log_x else "")
    else:
        x_title = "model weight memory (MB" + (", log scale)" if log_x else ")")
    style(fig, f"Memory vs perplexity{f' ({model})' if model else ''}: {result.get('words', '?'):,} words of "
                f"{result.get('dataset', 'text')}", x_title, "word-level perplexity (log scale, lower is better)",
          height=580)
    fig.update_xaxes(type="log" if log_x else "linear")
    ppl = [p["perplexity"] for p in points if math.isfinite(p["perplexity"])]
    ticks = [t for t in (1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500,
                         2000, 3000, 5000, 7500, 10000) if ppl and min(ppl) / 1.3 <= t <= max(ppl) * 1.3]
    fig.update_yaxes(type="log", **({"tickmode": "array", "tickvals": ticks} if len(ticks) >= 2 else {}))
    return fig


def _process_points(result: dict, points: list[dict]) -> list[tuple[dict, dict]]:
    """``(trade-off point, process row)`` for each setting the result's ``process`` measured."""
    rows = {r["label"]: r for r in (result.get("process") or {}).get("rows", [])}
    return [(p, rows[p["label"]]) for p in points if p["label"] in rows]


def process_figure(result: dict):
    """Per setting (bf16, NeuZip at each k): what the model holds (its tensors and compressed arrays) beside what the
    process holds, idle after a forward and at its peak (MiB)."""
    rows = result["rows"]
    labels = [r["label"].replace("NeuZip ", "").replace(" (lossless)", " lossless") for r in rows]
    fig = go.Figure()
    for key, name, colour, pattern in (("tensor_bytes", "the model (tensors and compressed arrays)", "#0072B2", ""),
                                       ("idle_rss_bytes", "the process, idle after a forward", PROCESS_COLOUR, "/"),
                                       ("peak_rss_bytes", "the process at its peak", "#BBBBBB", "x")):
        ys = [r[key] / 2**20 for r in rows]
        fig.add_trace(go.Bar(x=labels, y=ys, name=name, marker_color=colour, marker_pattern_shape=pattern,
                             text=[f"{y:,.0f}" for y in ys], textposition="outside", cliponaxis=False,
                             hovertemplate="%{x}: %{y:,.1f} MiB<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    return style(fig, f"What the model holds and what the process holds ({result['model']}, a forward of "
                      f"{result['tokens']} tokens, each setting in a fresh process)", "setting", "memory (MiB)")


def _speed_text(v) -> str:
    return "" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.2g}"


def throughput_figure(result: dict):
    """Left: compress and decompress MB/s of each codec (one thread, log scale), the memory copy as the limit line;
    right: each codec's bits per weight against the entropy bound and bf16's 16. Colours and labels come from the
    codec registry (:data:`core.neuzip.compare.CODECS`), one legend entry per codec for both panels."""

    rows = result["rows"]
    codecs = [r for r in rows if r["codec"] != "memcpy"]
    copy = next((r for r in rows if r["codec"] == "memcpy"), None)
    bound = result.get("entropy_bound")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.2,
                        subplot_titles=("speed, one thread (higher is better)", "size (lower is better)"))
    for r in codecs:
        hover = (f"{r['label']}<br>%{{x}}: %{{y:,.1f}} MB/s<br>{r['bits_per_weight']:.3f} bits/weight"
                 + ("" if r["gap_percent"] is None else f" ({r['gap_percent']:.2f} % over the bound)")
                 + ("" if r["lossless"] else "<br>lossy (mantissa rounded)") + "<extra></extra>")
        ys = [r["compress_MBps"], r["decompress_MBps"]]
        fig.add_trace(go.Bar(x=["compress", "decompress"], y=ys, name=r["label"], legendgroup=r["label"],
                             marker_color=r["colour"], text=[_speed_text(y) for y in ys], textposition="outside",
                             cliponaxis=False, hovertemplate=hover), 1, 1)
        fig.add_trace(go.Bar(x=[r["bits_per_weight"]], y=[r["label"]], orientation="h", name=r["label"],
                             legendgroup=r["label"], showlegend=False, marker_color=r["colour"],
                             text=[f"{r['bits_per_weight']:.3f}"], textposition="outside", cliponaxis=False,
                             hovertemplate=f"{r['label']}: %{{x:.3f}} bits/weight<extra></extra>"), 1, 2)
    references = ([("entropy bound (lossless)", bound)] if bound else []) + [("bf16", 16.0)]
    fig.add_trace(go.Bar(x=[v for _, v in references], y=[n for n, _ in references], orientation="h",
                         marker_color="#cbd5e1", showlegend=False, text=[f"{v:.3f}" if v != 16 else "16"
                                                                          for _, v in references],
                         textposition="outside", cliponaxis=False,
                         hovertemplate="%{y}: %{x:.3f} bits/weight<extra></extra>"), 1, 2)
    if bound:
        fig.add_vline(x=bound, line_dash="dot", line_color="#475569", row=1, col=2)
    speeds = [y for r in codecs for y in (r["compress_MBps"], r["decompress_MBps"]) if y]
    if copy is not None:
        mbps = copy["decompress_MBps"]
        speeds.append(mbps)
        name = f"{copy['label']}: {_speed_text(mbps)} MB/s (the limit)"
        fig.add_hline(y=mbps, line_dash="dash", line_color=copy["colour"], line_width=2, row=1, col=1)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name, hoverinfo="skip",
                                 line={"color": copy["colour"], "dash": "dash", "width": 2}), 1, 1)
        fig.add_annotation(text=name, x=1, y=math.log10(mbps), xref="x domain", yref="y", xanchor="right",
                           yanchor="bottom", showarrow=False, font={"size": 13})
    model = result.get("model")
    style(fig, f"Throughput on this machine ({result.get('device', 'cpu')}, 1 thread): {2 * result['numel'] / 1e6:.3g} "
               f"MB of bf16 weights" + (f" of {model}" if model else ""), None, None, height=500)
    fig.update_xaxes(title_text="operation on the bf16 weights", showline=True, linecolor="#475569", row=1, col=1)
    lo, hi = (math.log10(min(speeds)) - 0.3, math.log10(max(speeds)) + 0.35) if speeds else (0, 4)
    ticks = [m * 10 ** e for e in range(-1, 7) for m in (1, 3) if lo <= math.log10(m * 10 ** e) <= hi]
    fig.update_yaxes(title_text="MB/s of bf16 input (log scale)", type="log", range=[lo, hi], tickvals=ticks,
                     tickformat=",", showline=True, linecolor="#475569", row=1, col=1)
    fig.update_xaxes(title_text="bits per weight (every stored byte)", range=[0, 18.5], showline=True,
                     linecolor="#475569", row=1, col=2)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    fig.update_layout(barmode="group", bargap=0.25, legend={"orientation": "h", "y": -0.2, "x": 0})
    return fig
