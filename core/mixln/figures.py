"""Plotly figures of the Mix-LN results (shared by the tab and ``--out FILE.html`` of the CLI).

Every figure has a title, axis titles with units and a legend; colours are the Okabe-Ito palette
(colour-blind safe), one fixed colour per norm placement (and per Mix-LN alpha); heatmaps use Viridis.
Figures over seeds draw the mean as a line or bar and the min-max range over the seeds as a band or error
bars, with n in the legend or the text; the training settings (:func:`settings_note`) sit under the title.
"""
from __future__ import annotations

import math


from core.figures import PALETTE, go, make_subplots, style
from core.mixln.placements import MIX_ALPHA_COLOURS, PLACEMENTS, placement_colour  # every colour comes from here
from core.mixln.recipe import RECIPE_MODEL, RECIPE_TRAIN
from core.mixln.summary import mean_std_text


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 400) -> go.Figure:
    style(fig, title, x, y, height=height)
    fig.update_layout(showlegend=True)
    return fig


def _finite(v):
    return [x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None for x in v]


# The count-based reference levels (core.mixln.reference): line dash and label.
REFERENCE_LINES = (("unigram", "dash", "unigram of the training data"),
                   ("bigram", "dot", "bigram of the training data"))


def reference_lines(fig: go.Figure, reference: dict | None, metric: str = "loss", log_axis: bool = False
                    ) -> go.Figure:
    """Labelled horizontal lines at the unigram and bigram levels (``metric`` loss in nats, or perplexity) scored
    on the same held-out windows as the runs (:func:`core.mixln.reference.reference_levels`); none without them.
    ``log_axis``: the y axis is (or will be) logarithmic: plotly places a line (a shape) at the value but its label
    (an annotation) at log10 of the value, so the label is placed apart."""
    if not reference:
        return fig
    for name, dash, text in REFERENCE_LINES:
        v = reference[name]["loss" if metric == "loss" else "perplexity"]
        value = f"{v:.3f} nats" if metric == "loss" else f"perplexity {v:,.0f}"
        fig.add_hline(y=v, line=dict(dash=dash, color="#475569", width=1.6))
        fig.add_annotation(x=1, xref="x domain", y=math.log10(v) if log_axis else v, yref="y", text=f"{text}: {value}",
                           showarrow=False, xanchor="right", yanchor="bottom", font=dict(size=12, color="#334155"))
    return fig


def loss_figure(curves: list[dict], title: str = "Training and held-out loss", reference: dict | None = None
                ) -> go.Figure:
    """curves: [{label, colour, history}] with history = TrainHistory dict (train and eval records); ``reference``:
    the unigram / bigram levels of the held-out windows (:func:`reference_lines`)."""
    fig = go.Figure()
    for c in curves:
        h = c["history"]
        tr = h.get("train", [])
        if tr:
            fig.add_trace(go.Scatter(x=[r["step"] for r in tr], y=_finite([r["loss"] for r in tr]), mode="lines",
                                     name=f"{c['label']} train", line=dict(color=c["colour"], width=1), opacity=0.45,
                                     legendgroup=c["label"]))
        ev = h.get("eval", [])
        if ev:
            fig.add_trace(go.Scatter(x=[r["step"] for r in ev], y=_finite([r["loss"] for r in ev]),
                                     mode="lines+markers", name=f"{c['label']} held-out",
                                     line=dict(color=c["colour"], width=2.5), legendgroup=c["label"]))
        if h.get("status") == "diverged" and tr:
            fig.add_annotation(x=tr[-1]["step"], y=0, yref="paper", text=f"{c['label']} diverged", showarrow=False)
    return _layout(reference_lines(fig, reference), title, "training step", "loss (nats / token)")


def gradnorm_figure(series: list[dict], title: str = "Gradient norm per layer",
                    kind: str = "param") -> go.Figure:
    """series: [{label, colour, layers, values, dash}] -> one line per series, log-scale y."""
    fig = go.Figure()
    for s in series:
        fig.add_trace(go.Scatter(x=s["layers"], y=_finite(s["values"]), mode="lines+markers", name=s["label"],
                                 line=dict(color=s["colour"], dash=s.get("dash", "solid"), width=2.5),
                                 marker=dict(size=6)))
    what = "weight-gradient L2 norm" if kind == "param" else "L2 norm of dLoss/d(input)"
    fig.update_yaxes(type="log", exponentformat="power")
    return _layout(fig, title, "layer (0 = first)", f"{what} (log)")


def gradnorm_series(results: list[dict]) -> list[dict]:
    """run_gradnorms / gradnorm_result dicts -> gradnorm_figure series (init dotted, trained solid)."""
    series = []
    for i, r in enumerate(results):
        if "run" in r:
            colour = placement_colour(r["norm"], None, i)
            series.append({"label": f"{r['label']} at init (step {r['init_step']})", "colour": colour,
                           "layers": r["layers"], "values": r["init"], "dash": "dot"})
            series.append({"label": f"{r['label']} trained (step {r['final_step']})", "colour": colour,
                           "layers": r["layers"], "values": r["final"]})
        else:
            series.append({"label": r["subject"], "colour": "#000000", "layers": r["layers"], "values": r["param"]})
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
                   colours: list[str] | None = None) -> go.Figure:
    """results: removal_result dicts (one bar group per result)."""
    fig = go.Figure()
    for i, r in enumerate(results):
        colour = (colours or PALETTE)[i % len(colours or PALETTE)]
        fig.add_trace(go.Bar(x=r["layers"], y=_finite(r["loss_increase"]), name=r.get("label", r["subject"]),
                             marker_color=colour,
                             customdata=[[p] for p in _finite(r["perplexity_increase"])],
                             hovertemplate="layer %{x}: +%{y:.3f} nats (+%{customdata[0]:.1f} ppl)<extra></extra>"))
    fig.update_layout(barmode="group")
    return _layout(fig, title, "skipped layer (0 = first)", "increase in held-out loss (nats / token)")


def sweep_figure(rows: list[dict], note: str | None = None, reference: dict | None = None,
                 title: str = "Alpha sweep: final held-out loss vs alpha (lower is better)") -> go.Figure:
    """rows: :func:`core.mixln.runs.sweep_table` (mean, min, max over seeds), one line per depth: mean line,
    min-max error bars; the unigram / bigram levels as dashed lines."""
    fig = go.Figure()
    depths = list(dict.fromkeys(r["layers"] for r in rows))
    for i, layers in enumerate(depths):
        ok = [r for r in rows if r["layers"] == layers and r.get("eval_loss_mean") is not None]
        if not ok:
            continue
        n = sorted({r["n"] for r in ok})
        fig.add_trace(go.Scatter(
            x=[r["alpha"] for r in ok], y=[r["eval_loss_mean"] for r in ok], mode="lines+markers",
            name=f"{layers} layers (mean of n = {'/'.join(map(str, n))} seeds, bars min-max)",
            line=dict(color="#009E73", width=2.5, dash="solid" if i == 0 else "dash"),
            error_y=_minmax_error(ok, "eval_loss"),
            marker=dict(size=11, symbol="circle" if i == 0 else "diamond",
                        color=[MIX_ALPHA_COLOURS.get(r["alpha"], "#000000") for r in ok]),
            text=[_std_text(r["eval_loss_mean"], r["eval_loss_std"], r["n"], nd=3)
                  + f", ppl {r['eval_perplexity_mean']:.1f}" for r in ok],
            hovertemplate=f"{layers} layers, alpha %{{x}}: loss %{{text}}<extra></extra>"))
    for r in rows:
        if r.get("diverged"):
            fig.add_annotation(x=r["alpha"], y=1, yref="paper", showarrow=False,
                               text=f"{r['layers']} layers: {r['diverged']} diverged")
    fig.update_xaxes(dtick=0.25, range=[-0.05, 1.05])
    fig = _layout(reference_lines(fig, reference), _title(title, note if note is not None else settings_note()),
                  "alpha (fraction of layers that are Post-LN; 0 = Pre-LN, 1 = Post-LN)",
                  "final held-out loss (nats / token)", height=540)
    fig.update_layout(margin=dict(t=130), legend=dict(x=0.02, y=0.5, xanchor="left", yanchor="middle"))
    return fig


def at_unigram_level(loss: float | None, reference: dict | None) -> bool:
    """Whether a final held-out loss sits at the unigram level: within a quarter of the unigram-bigram gap of the
    unigram's loss, or above it (the run predicts token frequencies and ignores its context)."""
    if loss is None or not reference:
        return False
    uni, bi = reference["unigram"]["loss"], reference["bigram"]["loss"]
    return loss >= uni - 0.25 * (uni - bi)


def _run_label(r: dict, depth: bool = True) -> tuple[str, str, bool]:
    """(x label, registry name, whether it is of the deeper set) of a compare_table row; ``depth``: a deeper run's
    label names its layer count (where runs of both depths share an axis)."""
    norm = r.get("placement") or next((k for k, p in PLACEMENTS.items() if p.label == r["norm"]), r["norm"])
    has_alpha = getattr(PLACEMENTS.get(norm), "has_alpha", False)
    label = f"{r['norm']} alpha {r['alpha']:g}" if has_alpha else r["norm"]
    deeper = r.get("layers") not in (None, RECIPE_MODEL["num_layers"])
    label = label.replace(" (", "<br>(")  # "DeepNorm<br>(DeepNet's formula)": tick labels stay short
    return (label + (f"<br>({r['layers']} layers)" if deeper and depth else ""), norm, deeper)


def compare_figure(rows: list[dict], title: str = "Final held-out loss against Pre-LN (equal steps)",
                   note: str | None = None, reference: dict | None = None) -> go.Figure:
    """rows: :func:`core.mixln.summary.compare_table`. One panel per depth: each run's final held-out loss minus
    Pre-LN's mean at that depth (marker: mean over seeds; bars: min-max over its seeds, Pre-LN's own at 0 its seed
    spread), on one shared axis, so gaps of hundredths of a nat are visible. Last panel (only when some run is
    there): the runs at the unigram level (:func:`at_unigram_level`), in absolute loss beside the unigram / bigram
    levels, so they do not flatten the rest. A depth without Pre-LN is drawn in absolute loss there too."""
    pre = {r["layers"]: r for r in rows if (r.get("placement") or "") == "pre" or r.get("norm") == "Pre-LN"}
    apart = [r for r in rows if at_unigram_level(r.get("eval_loss_mean"), reference) or r["layers"] not in pre
             or pre[r["layers"]].get("eval_loss_mean") is None]
    near = [r for r in rows if r not in apart]
    depths = list(dict.fromkeys(r["layers"] for r in near))
    counts = [sum(r["layers"] == d for r in near) for d in depths] + ([max(len(apart), 3)] if apart else [])
    cols = len(counts)
    fig = make_subplots(rows=1, cols=cols, column_widths=[c / sum(counts) for c in counts],
                        horizontal_spacing=0.05,
                        subplot_titles=[f"{d} layers" for d in depths] + (["at the unigram level"] if apart else []))
    for i, r in enumerate(near):
        label, norm, deeper = _run_label(r, depth=False)
        col = depths.index(r["layers"]) + 1
        base = pre[r["layers"]]["eval_loss_mean"]
        mean = r.get("eval_loss_mean")
        d = mean - base if mean is not None else None
        text = _std_text(mean, r.get("eval_loss_std"), r.get("n_seeds"), nd=3) + (
            f", {d:+.3f} nats from Pre-LN" if d is not None else "") + (
            f", {r['diverged']} diverged" if r.get("diverged") else "")
        err = dict(type="data", symmetric=False, thickness=1.5, width=6, color="#334155",
                   array=[r["eval_loss_max"] - mean], arrayminus=[mean - r["eval_loss_min"]]) if mean is not None \
            else None
        fig.add_trace(go.Scatter(x=[label], y=[d], name=label.replace("<br>", " ") + (
                                     f" ({r['layers']} layers)" if deeper else ""), mode="markers", error_y=err,
                                 marker=dict(color=placement_colour(norm, r["alpha"], i), size=13,
                                             symbol="diamond" if deeper else "circle",
                                             line=dict(color="#0f172a", width=1)),
                                 text=[text], hovertemplate=f"%{{x}}, {r['layers']} layers: %{{text}}<extra></extra>"),
                      1, col)
    for col in range(1, len(depths) + 1):
        fig.add_hline(y=0, line=dict(color="#0072B2", width=1.2, dash="dot"), row=1, col=col)
        if col > 1:  # one scale for every depth's differences, labelled once
            fig.update_yaxes(matches="y", showticklabels=False, row=1, col=col)
    for i, r in enumerate(apart):
        label, norm, deeper = _run_label(r)
        mean = r.get("eval_loss_mean")
        fig.add_trace(go.Scatter(x=[label], y=[mean], name=label.replace("<br>", " "), mode="markers",
                                 error_y=_minmax_error([r], "eval_loss") if mean is not None else None,
                                 marker=dict(color=placement_colour(norm, r["alpha"], i), size=13,
                                             symbol="diamond" if deeper else "circle",
                                             line=dict(color="#0f172a", width=1)),
                                 text=[_std_text(mean, r.get("eval_loss_std"), r.get("n_seeds"), nd=3)],
                                 hovertemplate="%{x}: %{text}<extra></extra>"), 1, cols)
    if apart and reference:
        for name, dash, text in REFERENCE_LINES:
            v = reference[name]["loss"]
            fig.add_hline(y=v, line=dict(dash=dash, color="#475569", width=1.6), row=1, col=cols,
                          annotation_text=f"{name} {v:.3f}", annotation_position="bottom",
                          annotation_font=dict(size=11, color="#334155"))
    style(fig, _title(title + ": mean, bars min-max over seeds (below 0: better than Pre-LN)",
                      note if note is not None else settings_note()), height=660)
    fig.update_yaxes(title_text="loss − Pre-LN's mean (nats / token)", row=1, col=1)
    if apart:  # its axis on the right: the panels sit close, each axis labelled on its outer side
        fig.update_yaxes(title_text="loss, absolute (nats / token)", side="right", row=1, col=cols)
    fig.update_xaxes(tickangle=-40, tickfont=dict(size=12))
    fig.update_xaxes(title_text="norm placement", row=1, col=1)
    fig.update_layout(margin=dict(t=170, b=170, l=90, r=90), showlegend=False)  # every marker is named on the x axis
    return fig


def lr_sweep_figure(rows: list[dict], title: str = "Learning-rate sweep: final held-out loss per placement (one seed)",
                    note: str | None = None, reference: dict | None = None) -> go.Figure:
    """rows: :func:`core.mixln.summary.lr_sweep_table`; a diverged run is an x at the top of the chart."""
    fig = go.Figure()
    names = list(dict.fromkeys(r["run"] for r in rows))
    finite = [r["eval_loss"] for r in rows if r.get("eval_loss") is not None]
    top = max(finite) + 0.1 if finite else 1.0
    for i, name in enumerate(names):
        rs = sorted((r for r in rows if r["run"] == name), key=lambda r: r["lr"])
        colour = placement_colour(rs[0]["norm"], rs[0]["alpha"], i)
        fig.add_trace(go.Scatter(x=[r["lr"] for r in rs], y=[r["eval_loss"] for r in rs], mode="lines+markers",
                                 name=rs[0]["label"], legendgroup=name, line=dict(color=colour, width=2.5),
                                 marker=dict(size=9), hovertemplate="lr %{x:g}: loss %{y:.3f}<extra></extra>"))
        bad = [r for r in rs if r.get("eval_loss") is None]
        if bad:
            fig.add_trace(go.Scatter(x=[r["lr"] for r in bad], y=[top] * len(bad), mode="markers", legendgroup=name,
                                     name=f"{rs[0]['label']} diverged", marker=dict(symbol="x", size=13, color=colour),
                                     text=[f"diverged at step {r.get('diverged_at')}" for r in bad],
                                     hovertemplate="lr %{x:g}: %{text}<extra></extra>"))
    rates = sorted({r["lr"] for r in rows})
    fig.update_xaxes(type="log", tickvals=rates, ticktext=[f"{lr:.0e}".replace("e-0", "e-") for lr in rates])
    train = {**RECIPE_TRAIN, "lr": float("nan")}
    note = note if note is not None else settings_note(train=train).replace("Adam lr nan, ", "Adam, ")
    fig = _layout(reference_lines(fig, reference), _title(title, note), "peak learning rate (log scale)",
                  "final held-out loss (nats / token)", height=540)
    fig.update_layout(margin=dict(t=130))
    return fig


def depth_figure(profiles: list[dict], title: str = "Depth: what each layer does at 12 and 24 layers",
                 note: str | None = None, common_only: bool = True) -> go.Figure:
    """profiles: :func:`core.mixln.summary.depth_profiles` rows. Rows: angular distance d(h_l, h_l+1), weight-
    gradient norm at the end of training (log), loss increase when the layer is skipped; one column per depth.
    Lines are means over seeds, bands min-max. ``common_only``: only the placements trained at every depth."""
    depths = sorted({p["layers"] for p in profiles})
    if common_only:
        common = set.intersection(*({p["run"] for p in profiles if p["layers"] == d} for d in depths))
        profiles = [p for p in profiles if p["run"] in common]
    metrics = [("angular", "d(h_l, h_l+1) (fraction of π)", "linear"),
               ("grad_norm", "weight-gradient L2 norm (log)", "log"),
               ("removal", "loss increase when skipped (nats)", "linear")]
    fig = make_subplots(rows=len(metrics), cols=len(depths), shared_xaxes=False, vertical_spacing=0.08,
                        horizontal_spacing=0.08, column_titles=[f"{d} layers" for d in depths])
    seen = set()
    for p in profiles:
        col = depths.index(p["layers"]) + 1
        colour = placement_colour(p["norm"], p["alpha"])
        group = p["label"]
        for row, (key, _, _) in enumerate(metrics, start=1):
            v = p[key]
            if not v["mean"]:
                continue
            x = list(range(len(v["mean"])))
            _band(fig, x, v["min"], v["max"], colour, group, row, col)
            fig.add_trace(go.Scatter(x=x, y=_finite(v["mean"]), mode="lines+markers",
                                     line=dict(color=colour, width=2.2),
                                     marker=dict(size=5), legendgroup=group, showlegend=group not in seen,
                                     name=f"{group} ({_n_text(p['n'], p.get('diverged', 0))} per depth"
                                          + (f"; angular distance and removal: n = {p['angular']['n']}"
                                             if 0 < p["angular"]["n"] != p["n"] else "") + ")",
                                     hovertemplate=f"{group}, layer %{{x}}: %{{y:.3g}} (mean of {v['n']})"
                                                   "<extra></extra>"),
                          row=row, col=col)
            seen.add(group)
    for row, (_, label, kind) in enumerate(metrics, start=1):
        for col in range(1, len(depths) + 1):
            fig.update_yaxes(title_text=label if col == 1 else None, type=kind, row=row, col=col,
                             exponentformat="power", showline=True, linecolor="#475569")
            fig.update_xaxes(title_text="layer (0 = first)" if row == len(metrics) else None, row=row, col=col,
                             showline=True, linecolor="#475569")
    style(fig, _title(title + ": mean over seeds, band min-max", note if note is not None else settings_note()),
          height=300 * len(metrics) + 120)
    fig.update_layout(showlegend=True, margin=dict(t=150, b=110), legend=dict(orientation="h", y=-0.1, yanchor="top"))
    return fig


# ---- over seeds ------------------------------------------------------------------------------------------

def settings_note(model: dict | None = None, train: dict | None = None) -> str:
    """One line of the training settings (the Mix-LN authors', with the deviations), shown under chart titles."""
    m, t = model or RECIPE_MODEL, train or RECIPE_TRAIN
    clip = "no clipping" if not t.get("grad_clip") else f"clipping {t['grad_clip']:g}"
    return (f"The Mix-LN authors' settings: Adam lr {t['lr']:g}, betas {t['betas'][0]:g}/{t['betas'][1]:g}, "
            f"weight decay {t['weight_decay']:g}, {clip}, warmup {t['warmup_steps']} steps then cosine to "
            f"{t['min_lr_ratio']:g} x lr, embedding init std {_std_name(m.get('embedding_init_std'))}.<br>Smaller: "
            f"{t['steps']} steps of {t['batch_size']}x{t['seq_len']} tokens, width {m['hidden_size']}, float32 on CPU. "
            f"DeepNorm twice: {DEEPNORM_NOTES['mixln']}; {DEEPNORM_NOTES['deepnet']}.")


def _std_name(std) -> str:
    if std is None:
        return "0.02"
    return "sqrt(2/5)" if abs(std - (2 / 5) ** 0.5) < 1e-12 else f"{std:g}"


# How the settings line names the DeepNorm constants (core.mixln.config.DEEPNORM_FORMULAS).
DEEPNORM_NOTES = {"mixln": "the Mix-LN authors' constants (a = 2√2, Xavier gain (8L)^1/4)",
                  "deepnet": "DeepNet's constants (a = (2L)^1/4, Xavier gain (8L)^-1/4)"}


def _title(title: str, note: str | None) -> str:
    if not note:
        return title
    return title + "".join(f"<br><span style='font-size:12px'>{line}</span>" for line in note.split("<br>"))


def _rgba(colour: str, alpha: float) -> str:
    c = colour.lstrip("#")
    return f"rgba({int(c[0:2], 16)},{int(c[2:4], 16)},{int(c[4:6], 16)},{alpha})"


def _band(fig: go.Figure, x, lo, hi, colour: str, group: str, row=None, col=None) -> None:
    """A filled min-max band (no legend entry of its own)."""
    kw = {} if row is None else {"row": row, "col": col}
    fig.add_trace(go.Scatter(x=list(x), y=_finite(hi), mode="lines", line=dict(width=0), showlegend=False,
                             legendgroup=group, hoverinfo="skip", name=f"{group} max"), **kw)
    fig.add_trace(go.Scatter(x=list(x), y=_finite(lo), mode="lines", line=dict(width=0), fill="tonexty",
                             fillcolor=_rgba(colour, 0.18), showlegend=False, legendgroup=group, hoverinfo="skip",
                             name=f"{group} min"), **kw)


def _n_text(n: int, diverged: int = 0) -> str:
    return f"n = {n} seed{'s' if n != 1 else ''}" + (f", {diverged} diverged" if diverged else "")


def loss_band_figure(bands: list[dict], metric: str = "loss", title: str | None = None,
                     note: str | None = None, reference: dict | None = None) -> go.Figure:
    """Held-out loss (``metric="loss"``) or perplexity curves over seeds: mean line, min-max band; the unigram /
    bigram levels as dashed lines. bands: :func:`core.mixln.summary.loss_bands` rows."""
    key = {"loss": "eval_loss", "perplexity": "eval_perplexity"}[metric]
    fig = go.Figure()
    for i, b in enumerate(bands):
        c = b[key]
        colour = placement_colour(b["norm"], b["alpha"], i)
        _band(fig, c["steps"], c["min"], c["max"], colour, b["label"])
        fig.add_trace(go.Scatter(x=c["steps"], y=_finite(c["mean"]), mode="lines+markers", legendgroup=b["label"],
                                 name=f"{b['label']} ({_n_text(b['n'], b['diverged'])})",
                                 line=dict(color=colour, width=2.5), marker=dict(size=5),
                                 hovertemplate="step %{x}: mean %{y:.3f}<extra>" + b["label"] + "</extra>"))
    if title is None:
        title = f"Held-out {metric} over seeds (mean, band: min-max)"
    y = "held-out loss (nats / token)" if metric == "loss" else "held-out perplexity (lower is better)"
    fig = _layout(reference_lines(fig, reference, metric, log_axis=metric == "perplexity"),
                  _title(title, note if note is not None else settings_note()),
                  "training step", y, height=540)
    if metric == "perplexity":
        fig.update_yaxes(type="log")
    fig.update_layout(margin=dict(t=130))
    return fig


def _minmax_error(rows: list[dict], prefix: str) -> dict:
    means = [r[f"{prefix}_mean"] for r in rows]
    return dict(type="data", symmetric=False, thickness=1.5, width=6, color="#334155",
                array=[(r[f"{prefix}_max"] - m) if m is not None else None for r, m in zip(rows, means)],
                arrayminus=[(m - r[f"{prefix}_min"]) if m is not None else None for r, m in zip(rows, means)])


def _std_text(mean, std, n, nd=1) -> str:
    return mean_std_text(mean, std, n, nd)
