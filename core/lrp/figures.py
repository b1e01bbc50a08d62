"""Charts of the MambaLRP tab and CLI (house style from :mod:`core.figures`).

Relevance colours follow the LRP convention: red for evidence *for* the explained output, blue for evidence
*against*, white for none, on a scale centred at zero. Each method's map is divided by its own largest absolute
value, because methods differ in scale (the raw values are in the downloads and the hover text).
"""
from __future__ import annotations

import html

import numpy as np

from core.figures import PALETTE, go, make_subplots, style

# diverging scale, blue (against) - white - red (for); the end colours pass the common colour-vision deficiencies
DIVERGING = [[0.0, "#2166ac"], [0.25, "#92c5de"], [0.5, "#ffffff"], [0.75, "#f4a582"], [1.0, "#b2182b"]]


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)


def colour(value: float) -> str:
    """The diverging colour of ``value`` in [-1, 1] as ``rgb(...)``."""
    x = (float(np.clip(value, -1.0, 1.0)) + 1.0) / 2.0
    for (p0, c0), (p1, c1) in zip(DIVERGING, DIVERGING[1:]):
        if x <= p1:
            t = 0.0 if p1 == p0 else (x - p0) / (p1 - p0)
            r, g, b = (_rgb(c0) * (1 - t) + _rgb(c1) * t).round().astype(int)
            return f"rgb({r},{g},{b})"
    return "rgb(178,24,43)"


def _scale(values) -> float:
    m = float(np.max(np.abs(np.asarray(values, dtype=float)))) if len(np.ravel(values)) else 0.0
    return m if m > 0 else 1.0


def _visible(token: str) -> str:
    """A token's text with its leading space shown as a gap and a newline as ``⏎``."""
    return token.replace("\n", "⏎").replace("\t", "⇥") or "∅"


def token_html(result: dict) -> str:
    """The text heatmap: one line per method, every token on its relevance colour, and a colour bar.

    Hover a token to read its raw relevance.
    """
    tokens = result["tokens"]
    out = ['<div class="lw-lrp" style="font-size:17px;line-height:2.1">']
    out.append(f'<div style="margin-bottom:6px;color:#334155">Explained: <b>{html.escape(str(result["target_name"]))}'
               f'</b> (target {result["target"]}). Red: evidence for it; blue: against; each row scaled to its '
               f'largest |relevance|.</div>')
    for name, m in result["methods"].items():
        rel = np.asarray(m["relevance"], dtype=float)
        s = _scale(rel)
        spans = []
        for tok, r in zip(tokens, rel):
            text = html.escape(_visible(tok))
            fg = "#ffffff" if abs(r / s) > 0.7 else "#0f172a"
            spans.append(f'<span title="{html.escape(repr(tok))}: {r:+.4g}" style="background:{colour(r / s)};'
                         f'color:{fg};padding:2px 1px;border-radius:3px;white-space:pre">{text}</span>')
        out.append(f'<div style="margin:4px 0"><span style="display:inline-block;min-width:190px;font-weight:600;'
                   f'color:#0f172a">{html.escape(m["label"])}<br><span style="font-weight:400;font-size:13px;'
                   f'color:#475569">max |R| = {s:.3g}</span></span>{"".join(spans)}</div>')
    stops = ", ".join(f"{c} {int(100 * p)}%" for p, c in DIVERGING)
    out.append('<div style="display:flex;align-items:center;gap:8px;margin-top:8px;font-size:14px;color:#334155">'
               f'<span>−max |R| (against)</span><div role="img" aria-label="colour bar" style="width:260px;'
               f'height:14px;border:1px solid #94a3b8;background:linear-gradient(to right, {stops})"></div>'
               '<span>+max |R| (for)</span><span style="margin-left:8px">0 is white</span></div></div>')
    return "\n".join(out)


def token_figure(result: dict) -> go.Figure:
    """Methods x tokens heatmap of the scaled relevances (the downloadable figure of the text view)."""
    names = list(result["methods"])
    z = [list(np.asarray(result["methods"][n]["relevance"], float) / _scale(result["methods"][n]["relevance"]))
         for n in names]
    raw = [result["methods"][n]["relevance"] for n in names]
    x = [f"{i}:{_visible(t)}" for i, t in enumerate(result["tokens"])]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=[result["methods"][n]["label"] for n in names], customdata=raw,
                               colorscale=DIVERGING, zmin=-1, zmax=1, zmid=0,
                               hovertemplate="%{y}<br>token %{x}<br>relevance %{customdata:.4g}<extra></extra>",
                               colorbar={"title": {"text": "relevance /<br>max |relevance|"}}))
    style(fig, f"Token relevance for {result['target_name']!r} ({result['model']})", "token (position:text)",
          "method", height=max(300, 90 + 60 * len(names)))
    fig.update_xaxes(tickangle=-45)
    return fig


def image_figure(result: dict) -> go.Figure:
    """The input digit, then each method's patch relevance over it (upsampled to pixels, semi-transparent)."""
    names = list(result["methods"])
    img = np.asarray(result["image"], dtype=float)
    size = img.shape[0]
    titles = ["input"] + [result["methods"][n]["label"] for n in names]
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.02)
    fig.add_trace(go.Heatmap(z=img, colorscale="gray", showscale=False, hovertemplate="pixel %{z:.2f}<extra></extra>"),
                  row=1, col=1)
    for j, n in enumerate(names, start=2):
        rel = np.asarray(result["methods"][n]["relevance"], dtype=float)
        s = _scale(rel)
        rep = size // rel.shape[0]
        up = np.kron(rel / s, np.ones((rep, rep)))
        raw = np.kron(rel, np.ones((rep, rep)))
        fig.add_trace(go.Heatmap(z=img, colorscale="gray", showscale=False, hoverinfo="skip"), row=1, col=j)
        fig.add_trace(go.Heatmap(z=up, customdata=raw, colorscale=DIVERGING, zmin=-1, zmax=1, zmid=0, opacity=0.6,
                                 showscale=j == 2, colorbar={"title": {"text": "relevance /<br>max |relevance|"}},
                                 hovertemplate="patch relevance %{customdata:.4g}<extra></extra>"), row=1, col=j)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    for j in range(2, len(titles) + 1):
        fig.update_yaxes(scaleanchor=f"x{j}", row=1, col=j)
    truth = f", true label {result['label']}" if result.get("label") is not None else ""
    style(fig, f"Patch relevance for class {result['target_name']} ({result['model']}{truth})", height=340)
    return fig


# ---- evaluation -------------------------------------------------------------------------------------------------
def method_label(name: str) -> str:
    """The registry's label of a method (its name when it is not registered)."""
    from core.lrp.methods import METHODS
    return METHODS[name].label if name in METHODS else name


def method_colour(name: str, index: int = 0) -> str:
    """The registry's colour of a method."""
    from core.lrp.methods import METHODS
    return METHODS[name].colour if name in METHODS else PALETTE[index % len(PALETTE)]


def _grid(names: list[str], titles: list[str], x_title: str, y_title: str, shared_y: bool):
    cols = min(4, max(1, len(names)))
    rows = -(-len(names) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, shared_yaxes=shared_y,
                        horizontal_spacing=0.06 if shared_y else 0.08, vertical_spacing=0.22 / max(rows - 1, 1) + 0.08)
    for i in range(len(names)):
        r, c = divmod(i, cols)
        if r == rows - 1 or i + cols >= len(names):
            fig.update_xaxes(title_text=x_title, row=r + 1, col=c + 1)
        if c == 0:
            fig.update_yaxes(title_text=y_title, row=r + 1, col=c + 1)
    fig.update_annotations(font_size=14)
    return fig, cols, rows


FLOAT_FLOOR = 1e-9  # |sum - logit| below this (exact conservation) is drawn at it on the log axis


def conservation_figure(cons: dict, title: str = "Conservation: sum of relevances vs explained logit") -> go.Figure:
    """One panel: per method (x), each sample's |sum of relevances − explained logit| (log y; a method that
    conserves sits at float error, ~1e-7), its mean as a bar-free diamond with the value. One axis, so it draws
    fast and reads from the back of a room; the per-sample pairs are in the tables."""
    names = list(cons)
    labels = [method_label(n) for n in names]
    fig = go.Figure()
    for i, (name, label) in enumerate(zip(names, labels)):
        x, y = np.asarray(cons[name]["logits"], float), np.asarray(cons[name]["sums"], float)
        err = np.maximum(np.abs(y - x), FLOAT_FLOOR)
        jitter = (np.arange(err.size) % 9 - 4) / 22.0  # a fixed spread of the points around the method's column
        fig.add_trace(go.Scatter(x=i + jitter, y=err, mode="markers", name=label, legendgroup=name, showlegend=False,
                                 marker={"color": method_colour(name, i), "size": 6, "opacity": 0.45},
                                 hovertemplate=f"{label}: |sum − logit| %{{y:.3g}}<extra></extra>"))
        mean = max(float(cons[name]["mean_abs_error"]), FLOAT_FLOOR)
        fig.add_trace(go.Scatter(x=[i], y=[mean], mode="markers+text", name=label, showlegend=False,
                                 marker={"color": method_colour(name, i), "size": 15, "symbol": "diamond",
                                         "line": {"color": "#0f172a", "width": 1.5}},
                                 text=[f"{cons[name]['mean_abs_error']:.2g}"], textposition="middle right",
                                 textfont={"size": 14}, hovertemplate=f"{label}: mean %{{y:.3g}}<extra></extra>"))
    for name, symbol, size in (("one sample", "circle", 7), ("mean over the samples", "diamond", 13)):  # the key
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True,
                                 marker={"color": "#64748b", "symbol": symbol, "size": size}))
    fig.update_xaxes(tickvals=list(range(len(names))), ticktext=labels, range=[-0.6, len(names) - 0.2])
    fig.update_yaxes(type="log", exponentformat="power")
    style(fig, title + " (diamond: mean over samples; lower is better, float error ~1e-7)", "method",
          "|sum of relevances − explained logit| (log)", height=520)
    fig.add_hline(y=1e-5, line={"dash": "dot", "color": "#475569", "width": 1.2})
    fig.add_annotation(x=1, xref="paper", y=-5, yref="y", xanchor="right", yanchor="bottom", showarrow=False,
                       text="below 1e-5: conserved to float error", font={"size": 12, "color": "#334155"})
    fig.update_xaxes(tickangle=-20)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"})
    return fig


def faithfulness_figure(faith: dict, fractions, title: str = "Faithfulness: target logit while flipping units"
                        ) -> go.Figure:
    """One panel per method: mean target logit as the most relevant units are flipped first (MoRF, should fall
    fast) and the least relevant first (LeRF, should stay high); ``Delta A^F`` in the panel title."""
    names = list(faith)
    titles = [f"{method_label(n)}<br>ΔA^F = {faith[n]['delta_af']:.3f}" for n in names]
    fig, cols, rows = _grid(names, titles, "units flipped (%)", "mean target logit", shared_y=True)
    x = 100 * np.asarray(fractions, float)
    for i, name in enumerate(names):
        r, c = divmod(i, cols)
        fig.add_trace(go.Scatter(x=x, y=faith[name]["lerf"], mode="lines+markers", name="LeRF: least relevant first",
                                 line={"color": PALETTE[0], "dash": "dash"}, marker={"symbol": "x"},
                                 showlegend=i == 0, legendgroup="lerf"), row=r + 1, col=c + 1)
        fig.add_trace(go.Scatter(x=x, y=faith[name]["morf"], mode="lines+markers", name="MoRF: most relevant first",
                                 line={"color": PALETTE[3]}, fill="tonexty", fillcolor="rgba(0,114,178,0.10)",
                                 showlegend=i == 0, legendgroup="morf"), row=r + 1, col=c + 1)
    style(fig, title + " (shaded: the gap whose area is ΔA^F)", height=300 * rows + 140)
    fig.update_layout(legend={"orientation": "h", "y": -0.12 if rows > 1 else -0.3, "x": 0}, margin={"t": 115})
    return fig


def delta_rows(faith: dict) -> list[dict]:
    """The ``Delta A^F`` table, best first."""
    rows = [{"method": method_label(n), "A_MoRF": round(r["mean_area_morf"], 4), "A_LeRF": round(r["mean_area_lerf"], 4),
             "ΔA^F = A_LeRF − A_MoRF": round(r["delta_af"], 4)} for n, r in faith.items()]
    return sorted(rows, key=lambda r: -r["ΔA^F = A_LeRF − A_MoRF"])


def long_range_figure(distances: dict, k: int = 10, title: str | None = None) -> go.Figure:
    """Cumulative share of each method's ``k`` most relevant tokens that lie within ``d`` tokens of the predicted
    position (a curve that rises early: local evidence; late: long-range)."""
    fig = go.Figure()
    for i, (name, d) in enumerate(distances.items()):
        d = np.sort(np.asarray(d, dtype=float))
        if d.size == 0:
            continue
        xs = np.unique(d)
        ys = 100.0 * np.searchsorted(d, xs, side="right") / d.size
        line = {"color": method_colour(name, i), "dash": "dot" if name == "random" else ("solid" if i < 4 else "dash")}
        fig.add_trace(go.Scatter(x=xs + 1, y=ys, mode="lines", line_shape="hv", name=method_label(name), line=line,
                                 hovertemplate="within %{x} tokens: %{y:.1f}%<extra>" + method_label(name) + "</extra>"))
    style(fig, title or f"Long range: where the {k} most relevant tokens sit",
          "distance from the predicted position + 1 (tokens, log scale)", f"top-{k} tokens within it (%)")
    fig.update_xaxes(type="log")
    return fig


def key_token_figure(result: dict) -> go.Figure:
    """How often each method ranks the planted key token in its top-k, against chance."""
    names = sorted(result["hit_rate"], key=lambda m: -result["hit_rate"][m])
    fig = go.Figure(go.Bar(x=[method_label(m) for m in names], y=[100 * result["hit_rate"][m] for m in names],
                           marker_color=[method_colour(m, i) for i, m in enumerate(names)], name="hit rate"))
    fig.add_hline(y=100 * result["chance"], line_dash="dot", line_color="#475569", annotation_text="chance")
    return style(fig, f"Key-token hit rate (top-{result['k']}, n = {result['n_done']})", "method",
                 f"key token in the top-{result['k']} (%)")



def agreement_figure(result: dict) -> go.Figure:
    """Per method, the MRR of the agreeing subject and the pointing accuracy (± standard error over the sentences),
    against exact chance."""
    names = [m for m in result["methods"] if m in result["scores"]]
    labels = [method_label(m) for m in names]
    fig = make_subplots(rows=1, cols=2, subplot_titles=["MRR of the subject", "pointing accuracy (top token)"])
    rates = result["chance"]
    for col, (key, scale, chance) in enumerate((("mrr", 1.0, rates["mrr"]), ("pointing_accuracy", 100.0, None if
                                                rates["pointing_accuracy"] is None else 100 * rates["pointing_accuracy"])),
                                               start=1):
        s = [result["scores"][m] for m in names]
        fig.add_trace(go.Bar(x=labels, y=[scale * (x[key] or 0) for x in s], showlegend=False,
                             error_y={"type": "data", "array": [scale * (x[f"{key}_sem"] or 0) for x in s]},
                             marker_color=[method_colour(m, i) for i, m in enumerate(names)]), row=1, col=col)
        if chance is not None:
            fig.add_hline(y=chance, line_dash="dot", line_color="#475569", annotation_text="chance", row=1, col=col)
    fig.update_yaxes(title_text="mean 1 / rank of the subject", row=1, col=1)
    fig.update_yaxes(title_text="subject ranked first (%)", row=1, col=2)
    fig.update_xaxes(title_text="method", tickangle=-30)
    return style(fig, f"Subject-verb agreement on {result['model']}: where each method ranks the subject "
                      f"(n = {result['n_done']} sentences; bars ± standard error)", height=460)


# ---- where the relevance passes (the layer-type view) -----------------------------------------------------------
def flow_kind_rows(result: dict) -> dict[str, list[float]]:
    """Per block kind, the relevance its blocks hand back to each token (their input relevance, summed over depth)."""
    out: dict[str, list[float]] = {}
    for b in result["blocks"]:
        row = out.setdefault(b["kind"], [0.0] * len(b["in"]))
        for i, v in enumerate(b["in"]):
            row[i] += v
    return out


def flow_figure(result: dict) -> go.Figure:
    """Top: blocks (in depth order, named by layer and block) x tokens, the relevance each block hands back to each
    token (its input relevance), scaled by the largest |value|. Bottom: per token, that relevance summed over the
    blocks of each kind (SSM layers, attention layers, MLPs): how each token's relevance reached it."""
    from core.lrp.blocks import KINDS

    blocks = result["blocks"]
    x = [f"{i}:{_visible(t)}" for i, t in enumerate(result["tokens"])]
    z = np.asarray([b["in"] for b in blocks], dtype=float)
    s = _scale(z) if z.size else 1.0
    y = [f"L{b['layer']} {b.get('short') or b['label']}" for b in blocks]
    fig = make_subplots(rows=2, cols=1, row_heights=[0.6, 0.4], vertical_spacing=0.1, shared_xaxes=True,
                        subplot_titles=["relevance each layer hands back to each token (its input relevance)",
                                        "the same, summed over the layers of each kind"])
    fig.add_trace(go.Heatmap(z=(z / s).tolist(), x=x, y=y, customdata=z.tolist(), colorscale=DIVERGING, zmin=-1,
                             zmax=1, zmid=0, colorbar={"title": {"text": "relevance /<br>max |relevance|"},
                                                       "len": 0.55, "y": 0.74},
                             hovertemplate="%{y}<br>token %{x}<br>relevance %{customdata:.4g}<extra></extra>"),
                  row=1, col=1)
    for kind, values in flow_kind_rows(result).items():
        label, colour_ = KINDS[kind]
        fig.add_trace(go.Bar(x=x, y=values, name=label, marker_color=colour_,
                             hovertemplate=f"{label}<br>token %{{x}}<br>relevance %{{y:.4g}}<extra></extra>"),
                      row=2, col=1)
    style(fig, f"Where the relevance for {result['target_name']!r} passes ({result['model']}, {result['family']})",
          height=max(620, 400 + 24 * len(blocks)))
    # the legend beside the bar chart, under the colour bar: below the plot, the rotated tokens and the x title
    # leave it no fixed place at every screen size
    fig.update_layout(barmode="group", legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 0.2,
                                               "yanchor": "middle"}, margin={"b": 150})
    fig.update_yaxes(autorange="reversed", title_text="layer", tickmode="array", tickvals=y, ticktext=y,
                     tickfont={"size": 11 if len(blocks) > 6 else 13}, row=1, col=1)  # every row named
    fig.update_yaxes(title_text="relevance (logit units)", row=2, col=1)
    fig.update_xaxes(tickangle=-45, title_text="token (position:text)", row=2, col=1)
    return fig
