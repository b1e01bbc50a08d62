"""Tab "NeuZip": how far bf16 weights compress, losslessly and with a truncated mantissa. Shows the precomputed example
at once; the buttons measure the model chosen in the header (a repeated request is answered from the cache).
Gradio wiring only: every handler calls :mod:`core.neuzip`'s service."""
from __future__ import annotations

import gradio as gr

import core.neuzip as nz
from core.figures import message_figure
from ui.errors import user_errors
from ui.header import AppContext
from ui.tabs import neuzip_training
from ui.stopping import job, stop
from ui.widgets import downloads_box, downloads_update, figure_or, finite_number, frame

TITLE = "NeuZip"
EXAMPLE_MODEL = nz.EXAMPLE_MODEL
INTRO = ("**NeuZip** stores bf16 weights with the exponent entropy-coded (rANS) and the sign and mantissa raw: lossless "
         "at about 10.6 bits per weight, or lossy by keeping only the top *k* mantissa bits (optionally after a "
         f"per-block normaliser of size *B*). The figures below are the precomputed example for `{EXAMPLE_MODEL}`; the "
         "buttons measure the model chosen in the header.")
TABLE_COLUMNS = {"bits_per_weight": "NeuZip bits/weight", "entropy_bound": "entropy bound",
                 "exponent_entropy": "H(exponent)", "zstd_bits_per_weight": "zstd bits/weight",
                 "zlib_bits_per_weight": "zlib bits/weight"}
WEIGHTS_NOTE = (
    "**Which weights.** *Bit fields* and *bits per weight*: every linear weight of the model (embeddings and head left "
    "out); *memory / perplexity*: the whole model, its linear weights stored in each format; *throughput*: its first "
    f"linear weight tensors (at least {nz.THROUGHPUT_NUMEL / 1e6:.1f} M weights). The precomputed figures are of "
    f"`{EXAMPLE_MODEL}`, which is special: the packaged checkpoint is de-quantized from a 4-bit GGUF (Q4_1), so each "
    "block of 32 weights holds only about 13 distinct values (native weights: about 31.5) and its exponent statistics "
    "are not those of a native bf16 checkpoint (zstd does unusually well on it). The README's codec table sets it "
    "beside weights with native statistics: `smollm2-135m` / `trained` (this project's models) / `gaussian` / "
    "`student-t` (SmolLM2's shapes), from `python bench/neuzip.py`.")
THROUGHPUT_COLUMNS = {"codec": "codec", "bits_per_weight": "bits/weight", "gap_to_bound_percent": "% over the bound",
                      "compress_MBps": "compress MB/s", "decompress_MBps": "decompress MB/s",
                      "decompress_time_vs_copy": "decompress time / copy"}
TRADEOFF_COLUMNS = {"memory_MB": "memory (MB)", "linear_bits_per_weight": "bits/weight (linear)",
                    "word_perplexity": "word perplexity", "token_perplexity": "token perplexity"}


def _table_frame(res):
    return frame(res.tables["table"]).rename(columns=TABLE_COLUMNS)


def _throughput_frame(res):
    return frame(res.tables["throughput"]).rename(columns=THROUGHPUT_COLUMNS)


def _tradeoff_frame(res):
    rows = [{**r, "pareto": "✓" if r["pareto"] else ""} for r in res.tables["tradeoff"]]
    return frame(rows).rename(columns=TRADEOFF_COLUMNS)


@user_errors
def analyse_weights(ref, k, block, state=None, request: gr.Request = None, progress=gr.Progress()):
    """Bit-field histograms and the compression table of the chosen model's linear weights."""
    res = nz.weights_result(ref, k, block, progress=job(request, progress))
    return (res.status, res.figures["histograms"], res.figures["table"], _table_frame(res),
            {**(state or {}), **res.data})


def _with_process(tradeoff: dict, state: dict) -> dict:
    """The trade-off with the process measurement of the same model drawn beside it, when the page holds one."""
    process = (state or {}).get("process-memory")
    same = process and process.get("model") == tradeoff.get("model")
    return {**tradeoff, "process": process} if same else {k: v for k, v in tradeoff.items() if k != "process"}


@user_errors
def measure_tradeoff(ref, block, words, log_x, state=None, request: gr.Request = None, progress=gr.Progress()):
    """Memory / perplexity points of bf16, NeuZip k=7,3,1,0 and the quantization baselines, Pareto front marked."""
    res = nz.tradeoff_result(ref, block_size=block, words=words, progress=job(request, progress), log_x=bool(log_x))
    data = _with_process(res.data, state)
    figure = nz.shown_result({"tradeoff": data}, bool(log_x)).figures["tradeoff"]
    return res.status, figure, _tradeoff_frame(res), {**(state or {}), "tradeoff": data}


@user_errors
def measure_process(ref, k, block, log_x, state=None, request: gr.Request = None, progress=gr.Progress()):
    """bf16, lossless NeuZip and the chosen k (with and without B), each loaded in a fresh process: its RSS drawn
    beside the trade-off's points (``neuzip process-memory`` measures every k)."""
    ks = sorted({7, int(k)}, reverse=True) if str(k).lstrip("-").isdigit() else [k]
    res = nz.process_memory_result(ref, ks, block_size=block, progress=job(request, progress))
    state = {**(state or {}), "process-memory": res.data}
    tradeoff = state.get("tradeoff")
    if tradeoff:
        state["tradeoff"] = _with_process(tradeoff, state)
        figure = nz.shown_result({"tradeoff": state["tradeoff"]}, bool(log_x)).figures["tradeoff"]
    else:
        figure = res.figures["process-memory"]
    return res.status, figure, state


@user_errors
def redraw_tradeoff(log_x, state=None):
    """Switch the memory axis between linear and log scale."""
    result = (state or {}).get("tradeoff")
    if not result:
        return message_figure("Measure the trade-off first.", "Memory vs perplexity")
    return nz.shown_result({"tradeoff": result}, bool(log_x)).figures["tradeoff"]


@user_errors
def measure_throughput(ref, k, block, state=None, request: gr.Request = None, progress=gr.Progress()):
    """Bits/weight and one-thread compress / decompress MB/s of NeuZip (lossless, and the chosen k and B), ZipNN (when
    installed), zstd and a memory copy, side by side on this machine."""
    res = nz.throughput_result(ref, k, block, progress=job(request, progress))
    return res.status, res.figures["throughput"], _throughput_frame(res), {**(state or {}), "throughput": res.data}


@user_errors
def measure_device_memory(ref, k, block, progress=gr.Progress()):
    """On a GPU host: what the chosen model holds on the GPU in bf16 and NeuZip-compressed, and a forward's peak
    (long work: its gr.Progress makes ui.gpu run it inside spaces.GPU on a ZeroGPU Space)."""
    progress(0, desc="loading the model twice on the GPU and measuring")
    res = nz.device_memory_result(ref, k, block)
    return res.status, frame(res.tables["device-memory"])


@user_errors
def download_files(state=None, log_x=False):
    """The shown results as files: JSON (everything), CSV (tables) and HTML figures (work offline)."""
    return downloads_update(nz.shown_result(state or {}, bool(log_x)))


def build(ctx: AppContext) -> None:
    parts, ex = nz.example_parts(EXAMPLE_MODEL)
    weights, tradeoff, throughput = ex.get("weights"), ex.get("tradeoff"), ex.get("throughput")
    hint = "No precomputed example for this model: press a button above."
    gr.Markdown(INTRO, elem_classes="lw-explain")
    gr.Markdown(WEIGHTS_NOTE, elem_id="neuzip-weights-note", elem_classes="lw-explain")
    state = gr.State(parts)
    with gr.Row():
        k = gr.Radio(list(nz.K_CHOICES), value=nz.K_CHOICES[0], label="k: mantissa bits kept", info="7 is lossless")
        block = gr.Dropdown([nz.NO_BLOCK, *map(str, nz.BLOCK_SIZES)], value=str(nz.DEFAULT_BLOCK),
                            label="B: normaliser block size",
                            info="for k < 7, the trade-off and throughput; none = no normaliser")
        words = finite_number(value=tradeoff.data["words"] if tradeoff else nz.DEFAULT_WORDS, precision=0,
                              minimum=nz.MIN_WORDS, maximum=nz.MAX_WORDS, label="evaluation words",
                              info="test split of the Wikipedia paragraphs; ~1 min per setting per 2,000 words here")
        log_x = gr.Checkbox(value=False, label="log memory axis")
    with gr.Row():
        b_weights = gr.Button("Analyse weights", variant="primary", size="sm")
        b_tradeoff = gr.Button("Measure memory / perplexity", variant="primary", size="sm")
        b_process = gr.Button("Measure process memory", size="sm")
        b_throughput = gr.Button("Measure throughput", size="sm")
        b_stop = gr.Button("Stop", variant="stop", size="sm")
        b_files = gr.Button("Download files", size="sm")
    status = gr.Markdown(elem_id="neuzip-status")
    gr.Markdown("### Bit fields and compression")
    weights_md = gr.Markdown(weights.status if weights else "", elem_id="neuzip-weights-summary")
    hist_plot = gr.Plot(figure_or(weights, "histograms", hint), label="Bit-field histograms", elem_id="neuzip-histograms")
    table_plot = gr.Plot(figure_or(weights, "table", hint), label="Bits per weight", elem_id="neuzip-table-chart")
    table_df = gr.Dataframe(_table_frame(weights) if weights else None, interactive=False, max_height=320,
                            label="Per layer (total first)", elem_id="neuzip-table")
    gr.Markdown("### Memory / perplexity trade-off")
    tradeoff_md = gr.Markdown(tradeoff.status if tradeoff else "", elem_id="neuzip-tradeoff-summary")
    tradeoff_plot = gr.Plot(figure_or(tradeoff, "tradeoff", hint), label="Memory vs perplexity",
                            elem_id="neuzip-tradeoff")
    tradeoff_df = gr.Dataframe(_tradeoff_frame(tradeoff) if tradeoff else None, interactive=False, label="Points",
                               elem_id="neuzip-tradeoff-table")
    gr.Markdown("### Throughput")
    throughput_md = gr.Markdown(throughput.status if throughput else "", elem_id="neuzip-throughput-summary")
    throughput_plot = gr.Plot(figure_or(throughput, "throughput", hint), label="Throughput",
                              elem_id="neuzip-throughput")
    throughput_df = gr.Dataframe(_throughput_frame(throughput) if throughput else None, interactive=False,
                                 label="Codecs (one thread each)", elem_id="neuzip-throughput-table")
    if nz.cuda_present():  # a GPU host: NeuZip's point, memory on the device, measured there
        gr.Markdown("### GPU memory")
        with gr.Row():
            b_device = gr.Button("Measure GPU memory (bf16 vs compressed)", size="sm")
        device_md = gr.Markdown(elem_id="neuzip-device-memory-summary")
        device_df = gr.Dataframe(interactive=False, label="On the GPU (MiB)", elem_id="neuzip-device-memory")
        b_device.click(measure_device_memory, inputs=[ctx.model, k, block], outputs=[device_md, device_df],
                       api_name="neuzip_device_memory")
    files = downloads_box(nz.shown_result(parts) if parts else None,
                          "Downloads (JSON, CSV, HTML) of what is shown: press Download files after measuring",
                          "neuzip-downloads")

    ev_w = b_weights.click(analyse_weights, inputs=[ctx.model, k, block, state],
                           outputs=[weights_md, hist_plot, table_plot, table_df, state], api_name="neuzip_weights")
    ev_r = b_tradeoff.click(measure_tradeoff, inputs=[ctx.model, block, words, log_x, state],
                            outputs=[tradeoff_md, tradeoff_plot, tradeoff_df, state], api_name="neuzip_tradeoff")
    ev_t = b_throughput.click(measure_throughput, inputs=[ctx.model, k, block, state],
                              outputs=[throughput_md, throughput_plot, throughput_df, state],
                              api_name="neuzip_throughput")
    ev_p = b_process.click(measure_process, inputs=[ctx.model, k, block, log_x, state],
                           outputs=[tradeoff_md, tradeoff_plot, state], api_name="neuzip_process_memory")
    b_stop.click(stop, outputs=status, api_name="neuzip_stop", cancels=[ev_w, ev_r, ev_t, ev_p])
    log_x.change(redraw_tradeoff, inputs=[log_x, state], outputs=tradeoff_plot, api_name="neuzip_tradeoff_axis")
    b_files.click(download_files, inputs=[state, log_x], outputs=files, api_name="neuzip_downloads")
    neuzip_training.build()
