"""Plotly figures of the MathNeuro analyses (the tab shows them; the CLI writes them as HTML).

Inputs are the plain-data results of :mod:`core.mathneuro.service`; :mod:`core.mathneuro.views` registers which
figure shows which analysis. Style and palette: :mod:`core.figures`; a method's colour is its registry entry's
(:data:`core.mathneuro.methods.METHODS`).
"""
from __future__ import annotations

from core.figures import PALETTE, go, make_subplots, style
from core.mathneuro.methods import METHODS
from core.mathneuro.tasks import limitation

MODULE_COLOURS = {"q_proj": "#0072B2", "k_proj": "#56B4E9", "v_proj": "#009E73", "o_proj": "#000000",
                  "gate_proj": "#E69F00", "up_proj": "#D55E00", "down_proj": "#CC79A7"}
SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def _style(fig: go.Figure, title: str, height: int = 460) -> go.Figure:
    """The house style; these figures set their own axis titles (several subplots)."""
    style(fig, title, height=height)
    fig.update_xaxes(showline=True, linecolor="#475569")
    fig.update_yaxes(showline=True, linecolor="#475569")
    return fig


def _unit(metric: str) -> str:
    return "accuracy (%)" if metric == "accuracy" else "loss (nats/token)"


def layers_figure(result: dict, show: str = "count") -> go.Figure:
    """Stacked bars per layer, one colour per module type; one panel per non-math dataset (paper Fig. 10);
    ``show``: the ``count`` of selected weights or their ``share`` of the module's weights."""
    by = result["by_nonmath"]
    names = list(by)
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"math vs {nm}: {by[nm]['selected']:,} selected" for nm in names])
    shown = set()
    for c, nm in enumerate(names, start=1):
        rows = by[nm]["rows"]
        for module in MODULE_COLOURS:
            pts = [r for r in rows if r["module"] == module]
            if not pts:
                continue
            y = [r["selected"] if show == "count" else 100.0 * r["share"] for r in pts]
            fig.add_trace(go.Bar(x=[r["layer"] for r in pts], y=y, name=module.replace("_proj", ""),
                                 marker_color=MODULE_COLOURS[module], legendgroup=module,
                                 showlegend=module not in shown,
                                 customdata=[[r["selected"], r["total"], 100 * r["share"]] for r in pts],
                                 hovertemplate="layer %{x} " + module + "<br>%{customdata[0]:,} of %{customdata[1]:,}"
                                               " weights (%{customdata[2]:.2f}%)<extra></extra>"), row=1, col=c)
            shown.add(module)
        fig.update_xaxes(title_text="layer", dtick=1, row=1, col=c)
    p = result["params"]
    fig.update_layout(barmode="stack" if show == "count" else "group")
    fig.update_yaxes(title_text="math-specific parameters (count)" if show == "count"
                     else "share of the module's weights (%)", row=1, col=1)
    return _style(fig, f"Where the math-specific parameters sit<br><sup>{p['method']}, K = "
                       f"{100 * p['proportion']:g}%, N = {p['n']} samples per dataset</sup>")


def _ideal(metric: str, before: float, values: list[float]) -> tuple[float, bool]:
    return (0.0, False) if metric == "accuracy" else (max(values + [before]) * 1.05, True)


def effect_figure(result: dict) -> go.Figure:
    """Math metric vs non-math metric after the intervention, one point per method; one panel per non-math
    dataset; the unmodified model as a star and the ideal corner (math lost, non-math kept) marked (Fig. 2)."""
    p, metrics, before = result["params"], result["metrics"], result["before"]
    nonmath = p["nonmath"]
    math_name = p["math"]
    fig = make_subplots(rows=1, cols=len(nonmath), horizontal_spacing=0.1,
                        subplot_titles=[f"non-math: {nm}" for nm in nonmath])
    shown, noted = set(), False
    for c, nm in enumerate(nonmath, start=1):
        rows = [r for r in result["rows"] if r["nonmath"] == nm]
        for r in rows:
            fig.add_trace(go.Scatter(x=[r["nonmath_after"]], y=[r["math_after"]], mode="markers",
                                     name=r["label"], legendgroup=r["method"], showlegend=r["method"] not in shown,
                                     marker={"size": 14, "color": METHODS[r["method"]].colour
                                             if r["method"] in METHODS else "#000000",
                                             "symbol": SYMBOLS[list(METHODS).index(r["method"]) % 4]
                                             if r["method"] in METHODS else "x"},
                                     hovertemplate=f"{r['label']}: {r['selected']:,} parameters pruned<br>{nm}: "
                                                   "%{x:.3g}<br>" + math_name + ": %{y:.3g}<extra></extra>"),
                          row=1, col=c)
            shown.add(r["method"])
        fig.add_trace(go.Scatter(x=[before[nm]], y=[before[math_name]], mode="markers", name="unmodified model",
                                 legendgroup="before", showlegend=c == 1,
                                 marker={"size": 18, "symbol": "star", "color": "#000000"},
                                 hovertemplate="unmodified<br>%{x:.3g}, %{y:.3g}<extra></extra>"), row=1, col=c)
        y_ideal, up = _ideal(metrics[math_name], before[math_name], [r["math_after"] for r in rows])
        x_ideal = before[nm]
        fig.add_trace(go.Scatter(x=[x_ideal], y=[y_ideal], mode="markers", name="ideal: math lost, non-math kept",
                                 legendgroup="ideal", showlegend=c == 1,
                                 marker={"size": 20, "symbol": "star-open", "color": "#D55E00", "line": {"width": 2}},
                                 hovertemplate="ideal corner<extra></extra>"), row=1, col=c)
        noted = _mark_limits(fig, metrics[nm], before[nm], (result.get("levels") or {}).get(nm), "x", c) or noted
        fig.update_xaxes(title_text=f"{nm} {_unit(metrics[nm])}", row=1, col=c)
        fig.update_yaxes(title_text=f"{math_name} {_unit(metrics[math_name])}", row=1, col=c)
        if metrics[math_name] == "accuracy":
            fig.update_yaxes(range=[-4, 104], row=1, col=c)
    what = "pruning" if p["mode"] == "prune" else f"scaling by {p['factor']:g}"
    return _room_for_notes(_style(fig, f"Effect of {what} each method's set<br><sup>K = {100 * p['proportion']:g}%, "
                                       f"N = {p['n']} identification samples, {p['eval_n']} test items per dataset</sup>",
                                  height=480), noted)


LIMIT_NOTE_SPACE = 50  # px added below a figure for the comparator-limit notes under its x-axis titles


def _mark_limits(fig: go.Figure, metric: str, before: float, levels: dict | None, axis: str, col: int = 1,
                 secondary_y: bool = False) -> bool:
    """Draw the comparator's no-skill level (chance accuracy or uniform-guess loss ln V) as a dotted line on its
    ``axis`` and, when the unmodified model sits at chance, at ceiling or beyond uniform guessing, say so in red
    under the panel's x-axis title, clear of the data (:func:`core.mathneuro.tasks.limitation`). Returns whether a
    note was added (the caller then makes room: :func:`_room_for_notes`)."""
    levels = levels or {}
    level = levels.get("chance") if metric == "accuracy" else levels.get("uniform_loss")
    name = "chance" if metric == "accuracy" else "uniform guessing (ln V)"
    kw = {"row": 1, "col": col} | ({"secondary_y": True} if secondary_y else {})
    line = {"color": "#475569", "dash": "dot", "width": 1.5}
    if level is not None:
        (fig.add_vline if axis == "x" else fig.add_hline)(level, line=line, annotation_text=name,
                                                          annotation_font_size=11, **kw)
    why = limitation(metric, before, levels)
    if why:
        xref = "x domain" if col == 1 else f"x{col} domain"
        yref = "y domain" if col == 1 else f"y{col} domain"
        fig.add_annotation(text="Comparator limit: " + why.replace(": ", ":<br>", 1), x=0, y=0, yshift=-58,
                           xref=xref, yref=yref, showarrow=False, xanchor="left", yanchor="top", align="left",
                           font={"size": 11, "color": "#B91C1C"})
    return bool(why)


def _room_for_notes(fig: go.Figure, noted: bool) -> go.Figure:
    """Grow a styled figure's bottom margin (and height) by :data:`LIMIT_NOTE_SPACE` when limit notes were added."""
    if noted:
        fig.update_layout(height=fig.layout.height + LIMIT_NOTE_SPACE,
                          margin={"b": fig.layout.margin.b + LIMIT_NOTE_SPACE})
    return fig


def _two_metric_figure(result: dict, x_key: str, x_title: str, title: str, log_x: bool = False,
                       unmodified: float | None = None) -> go.Figure:
    """Math and non-math metric against ``x_key``; ``unmodified``: the non-math score of the unmodified model (its
    limits are marked)."""
    p, metrics, rows = result["params"], result["metrics"], result["rows"]
    math_name, nm = p["math"], p["nonmath"]
    same = metrics[math_name] == metrics[nm]
    fig = make_subplots(specs=[[{"secondary_y": not same}]])
    xs = [r[x_key] for r in rows]
    fig.add_trace(go.Scatter(x=xs, y=[r["math"] for r in rows], mode="lines+markers", name=f"math: {math_name}",
                             line={"color": PALETTE[3], "width": 3}, marker={"symbol": "circle", "size": 9}),
                  secondary_y=False)
    fig.add_trace(go.Scatter(x=xs, y=[r["nonmath"] for r in rows], mode="lines+markers", name=f"non-math: {nm}",
                             line={"color": PALETTE[0], "width": 3, "dash": "dash"},
                             marker={"symbol": "square", "size": 9}), secondary_y=not same)
    if same:
        fig.update_yaxes(title_text=_unit(metrics[math_name]))
    else:
        fig.update_yaxes(title_text=f"math {_unit(metrics[math_name])}", secondary_y=False)
        fig.update_yaxes(title_text=f"non-math {_unit(metrics[nm])}", secondary_y=True)
    fig.update_xaxes(title_text=x_title, type="log" if log_x else "linear")
    noted = unmodified is not None and _mark_limits(fig, metrics[nm], unmodified, (result.get("levels") or {}).get(nm),
                                                    "y", secondary_y=not same)
    return _room_for_notes(_style(fig, title), noted)


def proportion_figure(result: dict) -> go.Figure:
    """Math and non-math metric after pruning the set found with each K (paper Fig. 16)."""
    res = {**result, "rows": [{**r, "K%": 100 * r["proportion"]} for r in result["rows"] if r["proportion"] > 0]}
    p = result["params"]
    fig = _two_metric_figure(res, "K%", "K (% of each matrix, log scale)",
                             f"Pruning the {p['method']} set as K grows<br><sup>N = {p['n']}, {p['eval_n']} test "
                             "items per dataset</sup>", log_x=True, unmodified=next(
                                 (r["nonmath"] for r in result["rows"] if r["proportion"] == 0), None))
    base = next((r for r in result["rows"] if r["proportion"] == 0), None)
    if base is not None:
        fig.add_annotation(text=f"unpruned: math {base['math']:.3g}, non-math {base['nonmath']:.3g}", x=0.0, y=1.0,
                           xref="paper", yref="paper", showarrow=False, xanchor="left", yanchor="bottom",
                           font={"size": 12})
    return fig


def scale_figure(result: dict) -> go.Figure:
    """Math and non-math metric when the set is multiplied by each factor (paper Fig. 29); 1 = unchanged."""
    p = result["params"]
    fig = _two_metric_figure(result, "factor", "scale factor on the selected weights (x)",
                             f"Scaling the {p['method']} set<br><sup>K = {100 * p['proportion']:g}%, "
                             f"{result.get('selected', 0):,} parameters, {p['eval_n']} test items per dataset</sup>",
                             unmodified=next((r["nonmath"] for r in result["rows"] if r["factor"] == 1.0), None))
    fig.add_vline(x=1.0, line={"color": "#475569", "dash": "dot"}, annotation_text="unchanged",
                  annotation_position="bottom right")
    return fig


def consistency_figure(result: dict) -> go.Figure:
    """Overlap of the set found from n random samples with the set from all N, one line per K (paper Fig. 6)."""
    rows, p = result["rows"], result["params"]
    fig = go.Figure()
    for i, k in enumerate(sorted({r["proportion"] for r in rows})):
        pts = sorted((r for r in rows if r["proportion"] == k), key=lambda r: r["samples"])
        fig.add_trace(go.Scatter(x=[r["samples"] for r in pts], y=[100 * r["overlap_with_full"] for r in pts],
                                 mode="lines+markers", name=f"K = {100 * k:g}%",
                                 line={"color": PALETTE[i % len(PALETTE)], "width": 3,
                                       "dash": ("solid", "dash", "dot", "dashdot")[i % 4]},
                                 marker={"symbol": SYMBOLS[i % 4], "size": 9},
                                 customdata=[[100 * (r["jaccard_with_full"] or 0)] for r in pts],
                                 hovertemplate="%{x} samples: %{y:.1f}% of the full set found"
                                               "<br>Jaccard %{customdata[0]:.1f}%<extra></extra>"))
    fig.update_xaxes(title_text="samples per dataset (count, log scale)", type="log")
    fig.update_yaxes(title_text="overlap with the full set (%)", range=[0, 105])
    return _style(fig, f"Consistency of the {p['method']} set<br><sup>sets from n random samples vs from all "
                       f"N = {p['n']}, mean of {p['repeats']} subsets</sup>")


def drill_figure(result: dict) -> go.Figure:
    """Heatmap of one weight matrix: the share of selected entries per block of rows x columns."""
    re_, ce = result["row_edges"], result["col_edges"]
    fig = go.Figure(go.Heatmap(z=[[100 * v for v in row] for row in result["grid"]],
                               x=[(ce[i] + ce[i + 1] - 1) / 2 for i in range(len(ce) - 1)],
                               y=[(re_[i] + re_[i + 1] - 1) / 2 for i in range(len(re_) - 1)],
                               colorscale="Viridis", colorbar={"title": {"text": "selected (%)"}},
                               hovertemplate="rows ~%{y:.0f}, columns ~%{x:.0f}: %{z:.1f}% selected<extra></extra>"))
    d_out, d_in = result["shape"]
    fig.update_xaxes(title_text=f"input column (0 to {d_in - 1})")
    fig.update_yaxes(title_text=f"output row (0 to {d_out - 1})", autorange="reversed")
    p = result["params"]
    return _style(fig, f"Drill-down: {result['name'].removesuffix('.weight')}<br><sup>{result['selected']:,} of "
                       f"{result['total']:,} entries selected ({100 * result['share']:.2f}%, {p['method']}, "
                       f"K = {100 * p['proportion']:g}%)</sup>", height=520)
