"""Tab "NeuZip": how far bf16 weights compress, losslessly and with a truncated mantissa.

Shows the precomputed example (``assets/neuzip/<model>.json``) at once; the buttons measure the model
chosen in the header (results are cached, so a repeated request is instant). Logic lives in
:mod:`core.neuzip.views` and :mod:`core.neuzip.tradeoff`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from core.errors import BadInputError
from core.figures import message_figure, write_output
from core.neuzip.tradeoff import DEFAULT_WORDS, tradeoff
from core.neuzip.views import (histogram_figure, load_example, model_histograms, model_table, model_throughput,
                               table_figure, table_rows, throughput_figure, throughput_rows, tradeoff_figure,
                               tradeoff_rows)
from ui.errors import user_errors
from ui.stopping import stop_flag
from ui.header import AppContext

TITLE = "NeuZip"
EXAMPLE_MODEL = "smollm2-135m"
K_CHOICES = [7, 3, 1, 0]
BLOCK_CHOICES = ["none", "32", "64", "128", "256", "512", "1024"]
MAX_WORDS = 10_000



def _block(value) -> int | None:
    if value in (None, "", "none", 0, "0"):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInputError(f"block size {value!r} is not a number.", fix="choose none or a power of two") from None


def _k(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInputError(f"k = {value!r} is not a number.", fix="choose 7, 3, 1 or 0") from None


def _ref(value) -> str:
    if not value or not str(value).strip():
        raise BadInputError("no model chosen.", fix="pick a model in the header")
    return str(value).strip()


def _progress_fn(progress):
    return lambda fraction, message: progress(fraction, desc=message)


# ------------------------------------------------------------------------------------------------ views of results

def _table_frame(table: dict) -> pd.DataFrame:
    return pd.DataFrame(table_rows(table)).rename(columns={
        "bits_per_weight": "NeuZip bits/weight", "entropy_bound": "entropy bound", "exponent_entropy": "H(exponent)",
        "zstd_bits_per_weight": "zstd bits/weight", "zlib_bits_per_weight": "zlib bits/weight"})


def _tradeoff_frame(result: dict) -> pd.DataFrame:
    rows = tradeoff_rows(result)
    for r in rows:
        r["pareto"] = "✓" if r["pareto"] else ""
    return pd.DataFrame(rows).rename(columns={"memory_MB": "memory (MB)", "linear_bits_per_weight": "bits/weight (linear)",
                                              "word_perplexity": "word perplexity", "token_perplexity": "token perplexity"})


def _weights_summary(h: dict, table: dict) -> str:
    e, t = h["entropy"], table["total"]
    k, b = table["mantissa_bits"], table.get("block_size")
    what = "lossless (k=7)" if k == 7 else f"k={k}" + (f", B={b}" if b else "")
    zstd = "" if t.get("zstd_bits_per_weight") is None else f"; zstd on the raw bytes: **{t['zstd_bits_per_weight']:.2f}**"
    return (f"**{h['numel']:,}** linear weights of `{h.get('model', '')}`. Entropy: sign {e['sign']:.3f}, "
            f"exponent **{e['exponent']:.3f}** of 8, mantissa {e['mantissa']:.3f} of 7 bits. NeuZip {what}: "
            f"**{t['bits_per_weight']:.3f} bits/weight** against an entropy bound of {t['entropy_bound']:.3f}"
            f" (bf16: 16){zstd}.")


def _tradeoff_summary(r: dict) -> str:
    src = "precomputed example" if r.get("example") else "measured"
    return (f"{src}: word-level perplexity of `{r['model']}` on **{r['words']:,} words** ({r['tokens']:,} tokens) of "
            f"{r['dataset']}, windows of {r['window']} tokens. Pareto front: {' → '.join(r['pareto'])}. "
            + " ".join(r.get("notes", [])))


def _throughput_summary(r: dict) -> str:
    rows = r["rows"]
    parts = [f"{x['label']}: compress {x['compress_MBps']:.3g} MB/s, decompress {x['decompress_MBps']:.3g} MB/s "
             f"({x['decompress_vs_memcpy']:,.0f}x the time of a memory copy at {x['memcpy_MBps']:,.0f} MB/s)"
             for x in rows]
    src = "precomputed example" if r.get("example") else "measured now"
    return f"{src} on {2 * r['numel'] / 1e6:.3g} MB of bf16 weights: " + "; ".join(parts) + "."


# ------------------------------------------------------------------------------------------------ handlers

def _example(ref: str) -> dict | None:
    ex = load_example(ref)
    if ex:
        for key in ("tradeoff", "throughput"):
            if ex.get(key):
                ex[key]["example"] = True
    return ex


@user_errors
def analyse_weights(ref, k, block, state=None, progress=gr.Progress()):
    """Bit-field histograms and the compression table of the chosen model's linear weights."""
    ref, k = _ref(ref), _k(k)
    block = None if k == 7 else _block(block)
    from core.neuzip.codec import check_params
    check_params(k, block)
    ex = _example(ref)
    if ex and ex["table"]["mantissa_bits"] == k and ex["table"].get("block_size") == block:
        h, table = ex["histograms"], ex["table"]
    else:
        h = model_histograms(ref, progress=_progress_fn(progress))
        table = model_table(ref, k, block, progress=_progress_fn(progress))
    state = {**(state or {}), "histograms": h, "table": table}
    return (_weights_summary(h, table), histogram_figure(h), table_figure(table), _table_frame(table), state)


@user_errors
def measure_tradeoff(ref, block, words, log_x, state=None, request: gr.Request = None, progress=gr.Progress()):
    """Memory / perplexity points of bf16, NeuZip k=7,3,1,0 and the quantization baselines, Pareto front marked."""
    ref, block = _ref(ref), _block(block)
    try:
        words = int(words)
    except (TypeError, ValueError):
        raise BadInputError(f"words = {words!r} is not a number.") from None
    if not 100 <= words <= MAX_WORDS:
        raise BadInputError(f"evaluate on 100 to {MAX_WORDS:,} words, not {words:,}.",
                            fix=f"the live default is {DEFAULT_WORDS:,} words (about a minute per setting on 2 cores)")
    ex = _example(ref)
    if ex and ex.get("tradeoff") and ex["tradeoff"]["words"] == words and ex["tradeoff"]["block_size"] == block:
        result = ex["tradeoff"]
    else:
        stop = stop_flag(request)
        stop.clear()
        result = tradeoff(ref, block_size=block, words=words, progress=_progress_fn(progress), should_stop=stop.is_set)
    state = {**(state or {}), "tradeoff": result}
    return _tradeoff_summary(result), tradeoff_figure(result, bool(log_x)), _tradeoff_frame(result), state


@user_errors
def redraw_tradeoff(log_x, state=None):
    """Switch the memory axis between linear and log scale."""
    result = (state or {}).get("tradeoff")
    if not result:
        return message_figure("Measure the trade-off first.", "Memory vs perplexity")
    return tradeoff_figure(result, bool(log_x))


@user_errors
def measure_throughput(ref, k, block, state=None, progress=gr.Progress()):
    """Compress / decompress MB/s on this machine against a memory copy (lossless, and the chosen k)."""
    ref, k = _ref(ref), _k(k)
    block = None if k == 7 else _block(block)
    from core.neuzip.codec import check_params
    check_params(k, block)
    settings = [(7, None)] if k == 7 else [(7, None), (k, block)]
    result = model_throughput(ref, settings, progress=_progress_fn(progress))
    state = {**(state or {}), "throughput": result}
    return _throughput_summary(result), throughput_figure(result), state


def stop_running(request: gr.Request = None):
    """Ask the running trade-off of this session to stop (finished points stay cached)."""
    stop_flag(request).set()
    return "Stopping: the points finished so far are cached."


@user_errors
def download_files(state=None, log_x=False):
    """The shown results as files: JSON (everything), CSV (tables) and HTML figures (work offline)."""
    state = state or {}
    if not state:
        raise BadInputError("nothing to download yet.", fix="run one of the measurements first")
    folder = Path(tempfile.mkdtemp(prefix="layerwise-neuzip-"))
    files = [write_output(folder / "neuzip.json", {k: v for k, v in state.items()})]
    if "table" in state:
        files.append(write_output(folder / "neuzip-table.csv", {}, table_rows(state["table"])))
        files.append(write_output(folder / "neuzip-table.html", {}, figure=table_figure(state["table"])))
    if "histograms" in state:
        files.append(write_output(folder / "neuzip-histograms.html", {}, figure=histogram_figure(state["histograms"])))
    if "tradeoff" in state:
        files.append(write_output(folder / "neuzip-tradeoff.csv", {}, tradeoff_rows(state["tradeoff"])))
        files.append(write_output(folder / "neuzip-tradeoff.html", {},
                                  figure=tradeoff_figure(state["tradeoff"], bool(log_x))))
    if "throughput" in state:
        files.append(write_output(folder / "neuzip-throughput.csv", {}, throughput_rows(state["throughput"])))
        files.append(write_output(folder / "neuzip-throughput.html", {}, figure=throughput_figure(state["throughput"])))
    return [str(f) for f in files]


# ------------------------------------------------------------------------------------------------ layout

def _initial(ex: dict | None):
    """The first view: the precomputed example, or figures saying what to press."""
    if not ex:
        msg = "No precomputed example for this model: press a button above."
        return ("", message_figure(msg, "Bit fields"), message_figure(msg, "Compression"), None, "",
                message_figure(msg, "Memory vs perplexity"), None, "", message_figure(msg, "Throughput"), {})
    h, t, r, thr = ex["histograms"], ex["table"], ex.get("tradeoff"), ex.get("throughput")
    state = {"histograms": h, "table": t, **({"tradeoff": r} if r else {}), **({"throughput": thr} if thr else {})}
    return (_weights_summary(h, t), histogram_figure(h), table_figure(t), _table_frame(t),
            _tradeoff_summary(r) if r else "", tradeoff_figure(r) if r else message_figure("not precomputed"),
            _tradeoff_frame(r) if r else None, _throughput_summary(thr) if thr else "",
            throughput_figure(thr) if thr else message_figure("not precomputed"), state)


def build(ctx: AppContext) -> None:
    ex = _example(EXAMPLE_MODEL)
    (w_md, h_fig, t_fig, t_df, r_md, r_fig, r_df, thr_md, thr_fig, state0) = _initial(ex)
    gr.Markdown("**NeuZip** stores bf16 weights with the exponent entropy-coded (rANS) and the sign and mantissa raw: "
                "lossless at about 10.6 bits per weight, or lossy by keeping only the top *k* mantissa bits "
                f"(optionally after a per-block normaliser of size *B*). The figures below are the precomputed "
                f"example for `{EXAMPLE_MODEL}`; the buttons measure the model chosen in the header.")
    state = gr.State(state0)
    with gr.Row():
        k = gr.Radio(K_CHOICES, value=7, label="k: mantissa bits kept", info="7 is lossless")
        block = gr.Dropdown(BLOCK_CHOICES, value="128", label="B: normaliser block size",
                            info="for k < 7 and the trade-off; none = no normaliser")
        words = gr.Number(value=(ex or {}).get("tradeoff", {}).get("words", DEFAULT_WORDS) if ex else DEFAULT_WORDS,
                          precision=0, minimum=100, maximum=MAX_WORDS, label="evaluation words",
                          info="test split of the Wikipedia paragraphs; ~1 min per setting per 2,000 words here")
        log_x = gr.Checkbox(value=False, label="log memory axis")
    with gr.Row():
        b_weights = gr.Button("Analyse weights", variant="primary", size="sm")
        b_tradeoff = gr.Button("Measure memory / perplexity", variant="primary", size="sm")
        b_throughput = gr.Button("Measure throughput", size="sm")
        b_stop = gr.Button("Stop", variant="stop", size="sm")
        b_files = gr.Button("Download files", size="sm")
    status = gr.Markdown(elem_id="neuzip-status")

    gr.Markdown("### Bit fields and compression")
    weights_md = gr.Markdown(w_md, elem_id="neuzip-weights-summary")
    hist_plot = gr.Plot(h_fig, label="Bit-field histograms", elem_id="neuzip-histograms")
    table_plot = gr.Plot(t_fig, label="Bits per weight", elem_id="neuzip-table-chart")
    table_df = gr.Dataframe(t_df, interactive=False, max_height=320, label="Per layer (total first)",
                            elem_id="neuzip-table")
    gr.Markdown("### Memory / perplexity trade-off")
    tradeoff_md = gr.Markdown(r_md, elem_id="neuzip-tradeoff-summary")
    tradeoff_plot = gr.Plot(r_fig, label="Memory vs perplexity", elem_id="neuzip-tradeoff")
    tradeoff_df = gr.Dataframe(r_df, interactive=False, label="Points", elem_id="neuzip-tradeoff-table")
    gr.Markdown("### Throughput")
    throughput_md = gr.Markdown(thr_md, elem_id="neuzip-throughput-summary")
    throughput_plot = gr.Plot(thr_fig, label="Throughput", elem_id="neuzip-throughput")
    files = gr.File(label="Downloads (JSON, CSV, HTML): press Download files", file_count="multiple", height=140,
                    elem_id="neuzip-downloads")

    ev_w = b_weights.click(analyse_weights, inputs=[ctx.model, k, block, state],
                           outputs=[weights_md, hist_plot, table_plot, table_df, state], api_name="neuzip_weights")
    ev_r = b_tradeoff.click(measure_tradeoff, inputs=[ctx.model, block, words, log_x, state],
                            outputs=[tradeoff_md, tradeoff_plot, tradeoff_df, state], api_name="neuzip_tradeoff")
    ev_t = b_throughput.click(measure_throughput, inputs=[ctx.model, k, block, state],
                              outputs=[throughput_md, throughput_plot, state], api_name="neuzip_throughput")
    b_stop.click(stop_running, outputs=status, api_name="neuzip_stop", cancels=[ev_w, ev_r, ev_t])
    log_x.change(redraw_tradeoff, inputs=[log_x, state], outputs=tradeoff_plot, api_name="neuzip_tradeoff_axis")
    b_files.click(download_files, inputs=[state, log_x], outputs=files, api_name="neuzip_downloads")
