"""Plotly figures of the Mix-LN results (shared by the tab and ``--out FILE.html`` of the CLI).

Every figure has a title, axis titles with units and a legend; colours are the Okabe-Ito palette
(colour-blind safe), one fixed colour per norm placement; heatmaps use Viridis.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures import PALETTE, style
from core.mixln.placements import MIX_ALPHA_COLOURS as ALPHA_COLORS
from core.mixln.placements import PLACEMENTS, placement_colour

run_color = placement_colour  # colours come from the placement registry


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 400) -> go.Figure:
    style(fig, title, x, y, height=height)
    fig.update_layout(showlegend=True)
    return fig


def _finite(v):
    return [x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None for x in v]


def loss_figure(curves: list[dict], title: str = "Training and held-out loss") -> go.Figure:
    """curves: [{label, color, history}] with history = TrainHistory dict (train and eval records)."""
    fig = go.Figure()
    for c in curves:
        h = c["history"]
        tr = h.get("train", [])
        if tr:
            fig.add_trace(go.Scatter(x=[r["step"] for r in tr], y=_finite([r["loss"] for r in tr]), mode="lines",
                                     name=f"{c['label']} train", line=dict(color=c["color"], width=1), opacity=0.45,
                                     legendgroup=c["label"]))
        ev = h.get("eval", [])
        if ev:
            fig.add_trace(go.Scatter(x=[r["step"] for r in ev], y=_finite([r["loss"] for r in ev]),
                                     mode="lines+markers", name=f"{c['label']} held-out",
                                     line=dict(color=c["color"], width=2.5), legendgroup=c["label"]))
        if h.get("status") == "diverged" and tr:
            fig.add_annotation(x=tr[-1]["step"], y=0, yref="paper", text=f"{c['label']} diverged", showarrow=False)
    return _layout(fig, title, "training step", "loss (nats / token)")


def gradnorm_figure(series: list[dict], title: str = "Gradient norm per layer",
                    kind: str = "param") -> go.Figure:
    """series: [{label, color, layers, values, dash}] -> one line per series, log-scale y."""
    fig = go.Figure()
    for s in series:
        fig.add_trace(go.Scatter(x=s["layers"], y=_finite(s["values"]), mode="lines+markers", name=s["label"],
                                 line=dict(color=s["color"], dash=s.get("dash", "solid"), width=2.5),
                                 marker=dict(size=6)))
    what = "weight-gradient L2 norm" if kind == "param" else "L2 norm of dLoss/d(input)"
    fig.update_yaxes(type="log", exponentformat="power")
    return _layout(fig, title, "layer (0 = first)", f"{what} (log)")


def gradnorm_series(results: list[dict]) -> list[dict]:
    """run_gradnorms / gradnorm_result dicts -> gradnorm_figure series (init dotted, trained solid)."""
    series = []
    for i, r in enumerate(results):
        if "run" in r:
            color = run_color(r["norm"], None, i)
            series.append({"label": f"{r['label']} at init (step {r['init_step']})", "color": color,
                           "layers": r["layers"], "values": r["init"], "dash": "dot"})
            series.append({"label": f"{r['label']} trained (step {r['final_step']})", "color": color,
                           "layers": r["layers"], "values": r["final"]})
        else:
            series.append({"label": r["subject"], "color": "#000000", "layers": r["layers"], "values": r["param"]})
    return series


def angular_figure(result: dict, title: str | None = None) -> go.Figure:
    """The paper's heatmap, raw and scaled side by side: x first layer l, y block size n, d(h_l, h_{l+n})."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("raw d(h_l, h_l+n)", "scaled per block size (0 = most similar)"))
    x, y = result["first_layers"], result["block_sizes"]
    fig.add_trace(go.Heatmap(z=result["raw"], x=x, y=y, colorscale="Viridis", zmin=0, zmax=None,
                             colorbar=dict(title="d", x=0.42, len=0.9), name="raw",
                             hovertemplate="l=%{x}, n=%{y}: d=%{z:.3f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=result["scaled"], x=x, y=y, colorscale="Viridis", zmin=0, zmax=1,
                             colorbar=dict(title="scaled", x=1.0, len=0.9), name="scaled",
                             hovertemplate="l=%{x}, n=%{y}: %{z:.2f}<extra></extra>"), 1, 2)
    for col in (1, 2):
        fig.update_xaxes(title_text="first layer l", row=1, col=col)
        fig.update_yaxes(title_text="block size n (layers)", row=1, col=col)
    title = title or f"Angular distance between layer inputs: {result['subject']}"
    style(fig, title, height=450)
    fig.update_layout(showlegend=False, margin=dict(t=90))
    return fig


def removal_figure(results: list[dict], title: str = "Layer removal: held-out loss increase when one layer is skipped",
                   colors: list[str] | None = None) -> go.Figure:
    """results: removal_result dicts (one bar group per result)."""
    fig = go.Figure()
    for i, r in enumerate(results):
        color = (colors or PALETTE)[i % len(colors or PALETTE)]
        fig.add_trace(go.Bar(x=r["layers"], y=_finite(r["loss_increase"]), name=r.get("label", r["subject"]),
                             marker_color=color,
                             customdata=[[p] for p in _finite(r["perplexity_increase"])],
                             hovertemplate="layer %{x}: +%{y:.3f} nats (+%{customdata[0]:.1f} ppl)<extra></extra>"))
    fig.update_layout(barmode="group")
    return _layout(fig, title, "skipped layer (0 = first)", "increase in held-out loss (nats / token)")


def sweep_figure(rows: list[dict], title: str = "Alpha sweep: final held-out perplexity vs alpha") -> go.Figure:
    fig = go.Figure()
    ok = [r for r in rows if r.get("eval_perplexity") is not None]
    fig.add_trace(go.Scatter(x=[r["alpha"] for r in ok], y=[r["eval_perplexity"] for r in ok], mode="lines+markers",
                             name="Mix-LN (alpha 0 = Pre-LN, 1 = Post-LN)", line=dict(color="#009E73", width=2.5),
                             marker=dict(size=10, color=[ALPHA_COLORS.get(r["alpha"], "#000000") for r in ok]),
                             text=[r["run"] for r in ok], hovertemplate="alpha %{x}: ppl %{y:.1f} (%{text})<extra></extra>"))
    for r in rows:
        if r.get("eval_perplexity") is None:
            fig.add_annotation(x=r["alpha"], y=0, yref="paper", text=f"{r['run']}: {r['status']}", showarrow=False)
    fig.update_xaxes(dtick=0.25, range=[-0.05, 1.05])
    return _layout(fig, title, "alpha (fraction of layers that are Post-LN)", "final held-out perplexity (lower is better)")


def compare_figure(rows: list[dict], title: str = "Held-out perplexity per norm placement (equal steps)") -> go.Figure:
    fig = go.Figure()
    for i, r in enumerate(rows):
        norm = next((k for k, p in PLACEMENTS.items() if p.label == r["norm"]), r["norm"])
        label = r["norm"] if not getattr(PLACEMENTS.get(norm), "has_alpha", False) else f"{r['norm']} alpha {r['alpha']:g}"
        fig.add_trace(go.Bar(x=[label], y=[r["eval_perplexity"]], name=label,
                             marker_color=run_color(norm, r["alpha"], i),
                             text=[f"{r['eval_perplexity']:.1f}" if r["eval_perplexity"] else r["status"]],
                             textposition="outside", cliponaxis=False))
    top = max([r["eval_perplexity"] for r in rows if r["eval_perplexity"]] or [1])
    fig.update_yaxes(range=[0, top * 1.15])
    return _layout(fig, title, "run (norm placement)", "final held-out perplexity (lower is better)")
