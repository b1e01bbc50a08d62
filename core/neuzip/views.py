"""What each NeuZip analysis is and shows, registered once: :data:`ANALYSES`, entries of the one
:class:`core.analyses.Analysis` type (the request type that asks for it (:mod:`core.neuzip.requests`), its compute
function (:mod:`core.neuzip.compute`), the name it is stored under, its status text, tables and figures).

:func:`view` turns what the service found (:class:`core.runner.Found`) into the :class:`core.results.Result` a tab
shows and the CLI prints and writes; :func:`page` is the files of several analyses shown together (the tab's
downloads): :data:`PAGE` names the analyses that are sections of the tab's page (it opens on their committed
example), and :data:`FIGURE_ONLY` those whose table the page leaves out (the bit fields: their CSV is the CLI's
``neuzip histograms --out``). A new analysis is an entry here.
"""
from __future__ import annotations

from typing import Any

from core.analyses import Analysis, Shown, view_function
from core.figures import fit
from core.neuzip import compute, schemas
from core.neuzip.figures import histogram_figure, process_figure, table_figure, throughput_figure, tradeoff_figure
from core.neuzip import training_views as training
from core.neuzip.requests import (CompressRequest, DecompressRequest, DeviceMemoryRequest, HistogramsRequest,
                                  ProcessMemoryRequest, TableRequest, ThroughputRequest, TradeoffRequest,
                                  TrainingRequest, WeightsRequest)
from core.results import Result
from core.runner import digest

__all__ = ["ANALYSES", "PAGE", "FIGURE_ONLY", "view", "page"]

PAGE = ("weights", "tradeoff", "throughput")  # the sections of the tab's page
FIGURE_ONLY = ("histograms",)  # on the page's downloads, its figure only


def page(parts: dict[str, dict], **options) -> Result:
    """The files of what a page shows: the tables and figures of each analysis in ``parts`` (name -> its data)."""
    tables, figures, shown = {}, {}, Shown(options=options)
    for name, data in parts.items():
        if name not in FIGURE_ONLY:
            tables.update(ANALYSES[name].tables(data, shown))
        figures.update({k: fit(f) for k, f in ANALYSES[name].figures(data, shown).items()})
    model = next(iter(parts.values())).get("model", "")
    return Result(f"{', '.join(parts)} of {model}", parts, tables=tables, figures=figures,
                  key="neuzip-" + digest(parts, options), stem="neuzip", main_first=False)


def _what(k: int, b: int | None) -> str:
    return "lossless (k=7)" if k == 7 else f"k={k}" + (f", B={b}" if b else "")


# ---- bit fields and bits per weight -------------------------------------------------------------------------------
def histogram_rows(h: dict) -> list[dict]:
    """The occupied values of each bit field with their counts."""
    return [{"field": f, "value": v, "count": c} for f in ("sign", "exponent", "mantissa") for v, c in enumerate(h[f])
            if c]


def _histograms_status(h: dict, shown: Shown) -> str:
    e = h["entropy"]
    return (f"{h['model']}: {h['numel']:,} linear weights in {len(h['tensors'])} tensors\nentropy (bits): sign "
            f"{e['sign']:.4f}, exponent {e['exponent']:.4f} of 8, mantissa {e['mantissa']:.4f} of 7"
            + (f"\nnote: {h['note']}" if h.get("note") else ""))


def table_rows(table: dict) -> list[dict]:
    """The compression table as flat rows (total first), bits rounded for display."""
    def row(r):
        return {"layer": r["name"], "weights": r["numel"],
                **{k: None if r.get(k) is None else round(r[k], 4)
                   for k in ("bits_per_weight", "entropy_bound", "exponent_entropy", "zstd_bits_per_weight",
                             "zlib_bits_per_weight")}}
    return [row(table["total"])] + [row(r) for r in table["rows"]]


def _table_status(t: dict, shown: Shown) -> str:
    tot = t["total"]
    return (f"NeuZip {_what(t['mantissa_bits'], t.get('block_size'))}: **{tot['bits_per_weight']:.3f} bits/weight** "
            f"against an entropy bound of {tot['entropy_bound']:.3f}")


def _weights_status(data: dict, shown: Shown) -> str:
    h, table = data["histograms"], data["table"]
    e, t = h["entropy"], table["total"]
    zstd = ("" if t.get("zstd_bits_per_weight") is None
            else f"; zstd on the raw bytes: **{t['zstd_bits_per_weight']:.2f}**")
    return (f"**{h['numel']:,}** linear weights of `{h.get('model', '')}` ({shown.source_text}). Entropy: sign "
            f"{e['sign']:.3f}, exponent **{e['exponent']:.3f}** of 8, mantissa {e['mantissa']:.3f} of 7 bits. NeuZip "
            f"{_what(table['mantissa_bits'], table.get('block_size'))}: **{t['bits_per_weight']:.3f} bits/weight** "
            f"against an entropy bound of {t['entropy_bound']:.3f} (bf16: 16){zstd}.")


# ---- the memory / perplexity trade-off ----------------------------------------------------------------------------
def tradeoff_rows(result: dict) -> list[dict]:
    """One row per setting: memory, bits per linear weight, word and token perplexity, on the Pareto front or not."""
    return [{"setting": p["label"], "family": p["family"], "memory_MB": round(p["memory_bytes"] / 1e6, 2),
             "linear_bits_per_weight": round(p["bits_per_weight"], 3), "word_perplexity": round(p["perplexity"], 3),
             "token_perplexity": round(p["token_perplexity"], 3), "pareto": p["pareto"]} for p in result["points"]]


def _tradeoff_status(r: dict, shown: Shown) -> str:
    status = (f"{shown.source_text}: word-level perplexity of `{r['model']}` on **{r['words']:,} words** "
              f"({r['tokens']:,} tokens) of {r['dataset']}, windows of {r['window']} tokens. Pareto front: "
              f"{' → '.join(r['pareto'])}. " + " ".join(r.get("notes", [])))
    if r.get("process"):
        status += " " + _process_sentence(r["process"])
    return status


# ---- the same settings as the machine sees them ------------------------------------------------------------------------
def process_rows(r: dict) -> list[dict]:
    """One row per setting: the model's tensor MiB beside the process's idle and peak RSS (MiB)."""
    return [{"setting": x["label"], "model_MiB": round(x["tensor_bytes"] / 2**20, 1),
             "process_idle_MiB": round(x["idle_rss_bytes"] / 2**20, 1),
             "process_loaded_MiB": round(x["loaded_rss_bytes"] / 2**20, 1),
             "process_peak_MiB": round(x["peak_rss_bytes"] / 2**20, 1)} for x in r["rows"]]


def _process_sentence(r: dict) -> str:
    by = {x["setting"]["method"] if x["setting"]["method"] == "bf16" else x["label"]: x for x in r["rows"]}
    b, n = by.get("bf16"), by.get("NeuZip k=7 (lossless)")
    if not (b and n):
        return ""
    mib = 2 ** 20
    return (f"As the machine sees it (each in a fresh process, a forward of {r['tokens']} tokens): lossless NeuZip's "
            f"process idles at **{n['idle_rss_bytes'] / mib:,.0f} MiB**, bf16's at {b['idle_rss_bytes'] / mib:,.0f} "
            f"(**{(b['idle_rss_bytes'] - n['idle_rss_bytes']) / mib:,.0f} MiB** less), while the model itself holds "
            f"{n['tensor_bytes'] / mib:,.0f} MiB against {b['tensor_bytes'] / mib:,.0f} "
            f"({(b['tensor_bytes'] - n['tensor_bytes']) / mib:,.0f} MiB less).")


def _process_status(r: dict, shown: Shown) -> str:
    src = "Precomputed example" if shown.source == "precomputed" else "Measured now"
    return (f"{src}: `{r['model']}` in bf16 and NeuZip, each setting loaded one tensor at a time in a fresh process "
            f"(on {r.get('machine', {}).get('cpu_model', 'this CPU')}). " + _process_sentence(r))


# ---- throughput ---------------------------------------------------------------------------------------------------
def throughput_rows(result: dict) -> list[dict]:
    """One row per codec (and lossy NeuZip setting): bits per weight and one-thread MB/s, rounded for display."""
    copy = next((r["decompress_MBps"] for r in result["rows"] if r["codec"] == "memcpy"), None)

    def rnd(v, d):
        return None if v is None else round(v, d)
    return [{"codec": r["label"], "bits_per_weight": rnd(r["bits_per_weight"], 3),
             "gap_to_bound_percent": rnd(r["gap_percent"], 3), "compress_MBps": rnd(r["compress_MBps"], 1),
             "decompress_MBps": rnd(r["decompress_MBps"], 1),
             "decompress_time_vs_copy": None if copy is None or r["codec"] == "memcpy"
             else round(copy / r["decompress_MBps"], 1)} for r in result["rows"]]


def _throughput_status(r: dict, shown: Shown) -> str:
    def speed(v):
        return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    parts = [f"{x['label']}: {x['bits_per_weight']:.3f} bits/weight, compress {speed(x['compress_MBps'])} / "
             f"decompress **{speed(x['decompress_MBps'])}** MB/s" for x in r["rows"] if x["codec"] != "memcpy"]
    copy = [x for x in r["rows"] if x["codec"] == "memcpy"]
    src = "Precomputed example" if shown.source == "precomputed" else "Measured now"
    status = (f"{src}, one thread each, the codecs taking turns (median of {r['repeats']}; every round trip checked "
              f"bit for bit), on the first {r['tensors']} linear weight tensors of `{r['model']}` "
              f"({2 * r['numel'] / 1e6:.3g} MB of bf16; entropy bound {r['entropy_bound']:.3f} bits/weight): "
              + "; ".join(parts) + (f"; a memory copy {speed(copy[0]['decompress_MBps'])} MB/s." if copy else "."))
    if "zipnn" in r.get("skipped", {}):
        status += (" ZipNN is not installed here, so it is left out: `pip install zipnn==0.5.4` (pinned in "
                   "requirements-dev.txt) adds it.")
    return status


# ---- device memory (a GPU host) ----------------------------------------------------------------------------------
def device_memory_rows(r: dict) -> list[dict]:
    """What the model holds on the device and a forward's peak above it, bf16 and compressed, in MiB."""
    def reserved(name, key):
        v = r[name].get(key)  # results made before issue 41 lack the reserved figures
        return None if v is None else round(v / 2**20, 2)
    return [{"format": name, "loaded_MiB": round(r[name]["loaded"] / 2**20, 2),
             "forward_peak_MiB": round(r[name]["forward_peak"] / 2**20, 2),
             "loaded_reserved_MiB": reserved(name, "loaded_reserved"),
             "forward_peak_reserved_MiB": reserved(name, "forward_peak_reserved")} for name in ("bf16", "compressed")]


def _device_memory_status(r: dict, shown: Shown) -> str:
    def mib(b):
        return f"{b / 2**20:,.1f} MiB"
    return (f"On {r['device']}: `{r['model']}` holds **{mib(r['compressed']['loaded'])}** NeuZip-compressed "
            f"(k = {r['mantissa_bits']}) against **{mib(r['bf16']['loaded'])}** in bf16 "
            f"({r['loaded_ratio']:.3f}x); its linear weights {mib(r['linear_resident_bytes'])} against "
            f"{mib(r['linear_bf16_bytes'])} ({r['linear_ratio']:.3f}x). A forward of {r['tokens']} tokens peaks "
            f"{mib(r['compressed']['forward_peak'])} above the loaded model (bf16: {mib(r['bf16']['forward_peak'])}); "
            f"logits differ by at most {r['max_abs_logit_difference']:.3g}."
            + (f" The caching allocator reserved {mib(r['compressed']['forward_peak_reserved'])} at the forward's peak "
               f"(bf16: {mib(r['bf16']['forward_peak_reserved'])}): what the device gives the process."
               if "forward_peak_reserved" in r["compressed"] else ""))


# ---- checkpoints --------------------------------------------------------------------------------------------------
def _compress_status(d: dict, shown: Shown) -> str:
    return (f"compressed {d['tensors']} linear weights ({d['weights']:,}) of {d['model']} with k={d['mantissa_bits']}"
            + (f", B={d['block_size']}" if d["block_size"] else "") + f": {d['bits_per_weight']:.3f} bits/weight, "
            f"{d['stored_bytes'] / 1e6:.1f} MB (bf16: {d['bf16_bytes'] / 1e6:.1f} MB) -> {d['file']}")


def _decompress_status(d: dict, shown: Shown) -> str:
    status = (f"{d['file']}: {d['tensors']} tensors, {d['weights']:,} weights, {d['bits_per_weight']:.3f} "
              f"bits/weight, k={d['mantissa_bits']}")
    if "model" in d:
        status += f"\nagainst {d['model']}: bit-exact {d['bit_exact']}, max |error| {d['max_abs_error']:.3g}"
    return status + (f"\nwrote {d['out']}" if "out" in d else "")


def _figures(make) -> Any:
    return lambda data, shown: make(data, **shown.options)


ANALYSES: dict[str, Analysis] = {
    "histograms": Analysis(HistogramsRequest, _histograms_status, compute.histograms, "neuzip/histograms",
                           schema=schemas.HISTOGRAMS, named=True, stem="neuzip-histograms",
                           tables=lambda h, shown: {"histograms": histogram_rows(h)},
                           figures=lambda h, shown: {"histograms": histogram_figure(h)}),
    "table": Analysis(TableRequest, _table_status, compute.table, "neuzip/table", schema=schemas.TABLE, named=True,
                      stem="neuzip-table",
                      tables=lambda t, shown: {"table": table_rows(t)},
                      figures=lambda t, shown: {"table": table_figure(t)}),
    "weights": Analysis(WeightsRequest, _weights_status, parts=("histograms", "table"), stem="neuzip-weights",
                        tables=lambda d, shown: {"table": table_rows(d["table"])},
                        figures=lambda d, shown: {"histograms": histogram_figure(d["histograms"]),
                                                  "table": table_figure(d["table"])}),
    "tradeoff": Analysis(TradeoffRequest, _tradeoff_status, compute.tradeoff, "neuzip/tradeoff-result",
                         schema=schemas.TRADEOFF_RESULT, named=True, stem="neuzip-tradeoff",
                         tables=lambda r, shown: {"tradeoff": tradeoff_rows(r)},
                         figures=_figures(lambda r, log_x=False, **_: {"tradeoff": tradeoff_figure(r, log_x)})),
    "process-memory": Analysis(ProcessMemoryRequest, _process_status, compute.process_memory,
                               "neuzip/process-memory", schema=schemas.PROCESS_MEMORY, named=True,
                               stem="neuzip-process-memory",
                               tables=lambda r, shown: {"process-memory": process_rows(r)},
                               figures=lambda r, shown: {"process-memory": process_figure(r)}),
    "throughput": Analysis(ThroughputRequest, _throughput_status, compute.throughput, "neuzip/throughput",
                           schema=schemas.THROUGHPUT, cached=False, named=True, stem="neuzip-throughput",
                           tables=lambda r, shown: {"throughput": throughput_rows(r)},
                           figures=lambda r, shown: {"throughput": throughput_figure(r)}),
    "device-memory": Analysis(DeviceMemoryRequest, _device_memory_status, compute.device_memory,
                              stem="neuzip-device-memory",
                              tables=lambda r, shown: {"device-memory": device_memory_rows(r)}),
    "training": Analysis(TrainingRequest, training.training_status, compute.training, stem="neuzip-training",
                         tables=lambda r, shown: {"training": training.training_rows(r),
                                                  "paper": training.paper_rows(),
                                                  "paper_table2": training.paper_table2_rows()},
                         figures=lambda r, shown: {"memory": training.memory_figure(r),
                                                   "loss": training.loss_figure(r)}),
    "compress": Analysis(CompressRequest, _compress_status, compute.compress_checkpoint, stem="neuzip-compress"),
    "decompress": Analysis(DecompressRequest, _decompress_status, compute.decompress_checkpoint,
                           stem="neuzip-decompress"),
}
view = view_function(ANALYSES)  # view(name, found, request=None, **options): what a found result shows
