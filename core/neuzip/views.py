"""The data and figures behind the NeuZip tab and ``python -m core neuzip``: the same numbers and
charts in both (plotly only, no Gradio).

Data (each for a model reference; measured on its linear-layer weights, embeddings and LM head
left out as in :func:`core.neuzip.compress_model`):

- :func:`model_histograms`: sign / exponent / mantissa histograms with entropies (cached);
- :func:`model_table`: the per-layer compression table for one ``k`` / block size (cached);
- :func:`model_throughput`: compress / decompress MB/s against a copy of the same bytes (timed now);
- :func:`core.neuzip.tradeoff.tradeoff`: the memory / perplexity points.

:func:`load_example` reads the precomputed default example (``assets/neuzip/<model>.json``), so the
tab shows results without computing. Figures: :func:`histogram_figure`, :func:`table_figure`,
:func:`tradeoff_figure`, :func:`throughput_figure`. Files: :func:`core.figures.write_output` (JSON, CSV or a
self-contained HTML figure, written atomically).
"""
from __future__ import annotations

import json
import math
from typing import Callable

import torch
from torch import nn

from core.errors import BadInputError
from core.figures import PALETTE, style
from core.neuzip.codec import check_params
from core.neuzip.measure import bitfield_histograms, compression_table, throughput
from core.neuzip.tradeoff import SKIP, CACHE_VERSION
from core.paths import ASSETS_DIR

__all__ = ["linear_weights", "model_histograms", "model_table", "model_throughput", "load_example",
           "table_rows", "tradeoff_rows", "throughput_rows", "histogram_figure", "table_figure",
           "tradeoff_figure", "throughput_figure", "EXAMPLE_DIR"]

EXAMPLE_DIR = ASSETS_DIR / "neuzip"
FAMILY_STYLE = {  # legend entry -> (colour, marker, where the point labels go)
    "bf16": ("#000000", "square", "top center"),
    "NeuZip": ("#0072B2", "circle", "top center"),
    "NeuZip + normaliser": ("#56B4E9", "diamond", "bottom center"),
    "bitsandbytes": ("#D55E00", "triangle-up", "middle right"),
    "NF4 + rANS": ("#CC79A7", "star", "middle left"),
}
THROUGHPUT_NUMEL = 4 * 1024 * 1024  # weights timed by default (8 MB of bf16)

Progress = Callable[[float, str], None]


# ------------------------------------------------------------------------------------------------ data

def linear_weights(model: nn.Module, skip: tuple[str, ...] = SKIP) -> dict[str, torch.Tensor]:
    """``{qualified name + '.weight': weight}`` of the ``nn.Linear`` layers not matching ``skip``.

    Raises
    ------
    BadInputError
        The model has no linear layer (left).
    """
    if not isinstance(model, nn.Module):
        raise BadInputError(f"expected a torch.nn.Module, got {type(model).__name__}.")
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise BadInputError("this model has no linear layers to measure.",
                            fix="NeuZip compresses nn.Linear weights; pick a transformer-style model")
    chosen = {f"{n}.weight": m.weight.detach() for n, m in linears if not any(s in n for s in skip)}
    if not chosen:
        raise BadInputError(f"all {len(linears)} linear layers match skip={tuple(skip)}.")
    return chosen


def _tensor_progress(progress: Progress | None, what: str):
    if progress is None:
        return None
    return lambda i, n, name: progress(i / max(n, 1), f"{what}: {name}")


def _cached(ref: str, analysis: str, params: dict, compute: Callable[[object], dict], use_cache: bool,
            progress: Progress | None) -> dict:
    from core.cache import CacheEntry, ResultsCache
    from core.zoo import load_model

    if progress:
        progress(0.0, f"loading {ref}")
    lm = load_model(ref)
    if not use_cache:
        return compute(lm.model)
    entry, hit = ResultsCache().get_or_compute(lm.fingerprint, analysis, {**params, "version": CACHE_VERSION},
                                               lambda: CacheEntry(compute(lm.model)))
    return entry.data


def model_histograms(ref: str, use_cache: bool = True, progress: Progress | None = None) -> dict:
    """:func:`core.neuzip.bitfield_histograms` of a model's linear weights, plus ``model``."""
    data = _cached(ref, "neuzip/histograms", {"skip": list(SKIP)},
                   lambda m: bitfield_histograms(linear_weights(m), progress=_tensor_progress(progress, "histograms")),
                   use_cache, progress)
    return {"model": ref, **data}


def model_table(ref: str, mantissa_bits: int = 7, block_size: int | None = None, use_cache: bool = True,
                progress: Progress | None = None) -> dict:
    """:func:`core.neuzip.compression_table` of a model's linear weights, plus ``model``."""
    check_params(mantissa_bits, block_size)
    k, b = int(mantissa_bits), None if block_size is None else int(block_size)
    data = _cached(ref, "neuzip/table", {"k": k, "block_size": b, "skip": list(SKIP)},
                   lambda m: compression_table(linear_weights(m), k, b, progress=_tensor_progress(progress, "table")),
                   use_cache, progress)
    return {"model": ref, **data}


def model_throughput(ref: str, settings: list[tuple[int, int | None]] = ((7, None),),
                     numel: int = THROUGHPUT_NUMEL, repeats: int = 3, progress: Progress | None = None) -> dict:
    """Compress / decompress speed on this machine for each ``(k, block_size)``, on the first ``numel``
    weights of the model's linear layers (concatenated), against a copy of the same bytes.

    Returns ``{"model", "numel", "rows": [throughput dict + label, k, block_size]}``.
    """
    for k, b in settings:
        check_params(k, b)
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1024:
        raise BadInputError(f"numel must be an integer >= 1024, got {numel!r}.")
    from core.zoo import load_model

    if progress:
        progress(0.0, f"loading {ref}")
    parts, total = [], 0
    for w in linear_weights(load_model(ref).model).values():
        take = w.reshape(-1)[: numel - total]
        parts.append(take.to(torch.bfloat16))
        total += take.numel()
        if total >= numel:
            break
    x = torch.cat(parts)
    rows = []
    for i, (k, b) in enumerate(settings):
        if progress:
            progress(i / len(settings), f"timing k={k}" + (f", B={b}" if b else ""))
        r = throughput(x, k, b, repeats=repeats)
        rows.append({"label": f"k={k}" + (f", B={b}" if b else "") + (" (lossless)" if k == 7 else ""),
                     "k": k, "block_size": b, **r})
    return {"model": ref, "numel": int(x.numel()), "rows": rows}


def load_example(ref: str) -> dict | None:
    """The precomputed example for a registered model (``assets/neuzip/<ref>.json``), or None."""
    path = EXAMPLE_DIR / f"{ref}.json"
    if "/" in ref or not path.is_file():
        return None
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------------------------ rows

def _layer_kind(name: str) -> str:
    parts = name.split(".")
    return parts[-2] if parts[-1] == "weight" and len(parts) > 1 else parts[-1]


def table_rows(table: dict) -> list[dict]:
    """The compression table as flat rows (total first), bits rounded for display."""
    def row(r):
        return {"layer": r["name"], "weights": r["numel"],
                **{k: None if r.get(k) is None else round(r[k], 4)
                   for k in ("bits_per_weight", "entropy_bound", "exponent_entropy", "zstd_bits_per_weight",
                             "zlib_bits_per_weight")}}
    return [row(table["total"])] + [row(r) for r in table["rows"]]


def tradeoff_rows(result: dict) -> list[dict]:
    return [{"setting": p["label"], "family": p["family"], "memory_MB": round(p["memory_bytes"] / 1e6, 2),
             "linear_bits_per_weight": round(p["bits_per_weight"], 3), "word_perplexity": round(p["perplexity"], 3),
             "token_perplexity": round(p["token_perplexity"], 3), "pareto": p["pareto"]} for p in result["points"]]


def throughput_rows(result: dict) -> list[dict]:
    return [{"setting": r["label"], "compress_MBps": round(r["compress_MBps"], 1),
             "decompress_MBps": round(r["decompress_MBps"], 1), "memcpy_MBps": round(r["memcpy_MBps"], 1),
             "decompress_vs_memcpy": round(r["decompress_vs_memcpy"], 1), "bits_per_weight": round(r["bits_per_weight"], 3)}
            for r in result["rows"]]


# ------------------------------------------------------------------------------------------------ figures

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
        groups.setdefault(_layer_kind(r["name"]), []).append(r)

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
    for family, (colour, symbol, where) in FAMILY_STYLE.items():
        ps = [p for p in points if p["family"] == family]
        if not ps:
            continue
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
