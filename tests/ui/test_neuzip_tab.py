"""The NeuZip tab's handlers, called directly: figures with titles, axis labels and legends, tables,
downloads, and bad input as ``gr.Error``. The example is made from a tiny model so nothing heavy runs."""
import copy
import dataclasses
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest
import torch

import core.neuzip as nz
import ui.tabs.neuzip as tab
from core.neuzip import CODECS, codec_comparison
from core.neuzip import compute as C
from core.neuzip import service as S
from core.neuzip import views as V
from core.neuzip.measure import bitfield_histograms, compression_table
from core.runner import ExampleStore
from core.neuzip.tradeoff import default_settings, tradeoff_for_model
from tests.core.neuzip.test_tradeoff import TEXT, CharTokenizer, tiny_llama

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def example():
    model = tiny_llama()
    weights = {n: m.weight.detach() for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    r = tradeoff_for_model(model, CharTokenizer(), TEXT, default_settings((7, 3, 0), 32, baselines=False), window=16)
    r.update({"model": "smollm2-135m", "dataset": "wikipedia-paragraphs", "ks": [7, 3, 1, 0], "block_size": 128,
              "words": 2000, "window": 512})
    r_thr = codec_comparison(weights, repeats=1, lossy=((3, 128),))
    thr = {"model": "smollm2-135m", "numel": r_thr["weights"], "names": list(weights), "device": "cpu", **r_thr}
    process = {"model": "smollm2-135m", "tokens": 512, "ks": [7, 3, 1, 0], "block_size": 128, "machine": {},
               "rows": [{"label": p["label"], "setting": {"method": p["method"]}, "tensor_bytes": p["memory_bytes"],
                         "idle_rss_bytes": p["memory_bytes"] + (500 << 20), "loaded_rss_bytes": p["memory_bytes"] +
                         (490 << 20), "peak_rss_bytes": p["memory_bytes"] + (600 << 20), "logits_digest": "x"}
                        for p in r["points"] if p["method"] in ("bf16", "neuzip")]}
    return {"model": "smollm2-135m", "histograms": {"model": "smollm2-135m", **bitfield_histograms(weights)},
            "table": {"model": "smollm2-135m", **compression_table(weights)}, "tradeoff": r, "throughput": thr,
            "process-memory": process}


@pytest.fixture
def with_example(example, monkeypatch, fresh_cache, tmp_path):
    """The example store holds this tiny example as smollm2-135m's (whose weights are never read), written by the
    service's own precompute, each part's compute standing in for its measurement."""
    import core.zoo

    real = core.zoo.fingerprint
    monkeypatch.setattr(core.zoo, "fingerprint", lambda ref: "example-fp" if ref == "smollm2-135m" else real(ref))
    with pytest.MonkeyPatch.context() as stand_in:
        for part in nz.EXAMPLE_PARTS:
            stand_in.setitem(V.ANALYSES, part, dataclasses.replace(
                V.ANALYSES[part], compute=lambda request, progress=None, data=copy.deepcopy(example[part]): data))
        path = nz.precompute_examples("smollm2-135m", path=tmp_path / "examples.json")
    monkeypatch.setattr(S, "EXAMPLES", ExampleStore(path))
    return example


def titles(fig):
    lay = fig.layout
    xs = [a.title.text for a in (lay.xaxis, lay.xaxis2, lay.xaxis3) if a is not None] if "xaxis2" in lay else [lay.xaxis.title.text]
    return lay.title.text, xs, lay.yaxis.title.text


def test_weights_view_has_titled_histograms_and_table(with_example):
    summary, hist, table_fig, frame, state = tab.analyse_weights("smollm2-135m", 7, "128", None)
    title, xs, y = titles(hist)
    assert title.startswith("Bit fields of") and y == "share of weights (%)"
    assert xs == ["sign bit", "biased exponent (8-bit field value; occupied values only)", "mantissa (7-bit field value)"]
    names = [a.text for a in hist.layout.annotations]
    assert any(n.startswith("exponent: H = ") for n in names)
    title, xs, y = titles(table_fig)
    assert "Compression by layer kind" in title and y == "bits per weight" and xs[0].startswith("layer kind")
    assert {t.name for t in table_fig.data} >= {"NeuZip (every stored byte)", "entropy bound (H(exp) + 1 + k)",
                                                "zlib on raw bf16 bytes"}
    assert frame.iloc[0]["layer"] == "total" and len(frame) == 1 + len(with_example["table"]["rows"])
    assert "bits/weight" in summary and set(state) >= {"histograms", "table"}


def test_tradeoff_view_marks_the_pareto_front(with_example):
    summary, fig, frame, state = tab.measure_tradeoff("smollm2-135m", "128", 2000, False, None)
    title, xs, y = titles(fig)
    assert title.startswith("Memory vs perplexity") and xs == ["model weight memory (MB)"]
    assert y.startswith("word-level perplexity")
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert names[:2] == ["bf16", "NeuZip"] and "Pareto front" in names
    on_front = frame[frame["pareto"] == "✓"]["setting"].tolist()
    assert on_front and set(on_front) == set(with_example["tradeoff"]["pareto"])
    assert "Pareto front:" in summary and "precomputed example" in summary
    log_fig = tab.redraw_tradeoff(True, state)
    assert log_fig.layout.xaxis.type == "log" and "log scale" in log_fig.layout.xaxis.title.text


def test_throughput_view_compares_the_codecs(with_example, monkeypatch):
    weights = {n: torch.randn(96, 64).to(torch.bfloat16) * 0.02 for n in ("a.weight", "b.weight")}
    monkeypatch.setattr(C, "_weights", lambda ref, progress=None: weights)
    summary, fig, table, state = tab.measure_throughput("smollm2-135m", 3, "32", None)
    lay = fig.layout
    assert lay.title.text.startswith("Throughput on this machine") and "MB/s of bf16 input" in lay.yaxis.title.text
    assert lay.yaxis.type == "log" and lay.xaxis.title.text and lay.xaxis2.title.text.startswith("bits per weight")
    installed = [c.label for c in CODECS.values() if c.available() and c.name != "memcpy"]
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend[:2] == ["NeuZip (lossless)", "NeuZip k=3, B=32"] and set(installed) <= set(legend)
    assert any(n.startswith("memory copy: ") and n.endswith("(the limit)") for n in legend)
    colours = {t.name: t.marker.color for t in fig.data if t.type == "bar" and t.showlegend is not False}
    assert all(colours[c.label] == c.colour for c in CODECS.values() if c.label in colours)
    assert list(table["codec"]) == [r["label"] for r in state["throughput"]["rows"]] and "bits/weight" in table
    assert "Measured now" in summary and "NeuZip k=3, B=32" in summary


def test_the_precomputed_throughput_shows_at_once(with_example):
    with gr.Blocks() as demo:
        model = gr.Dropdown(choices=["smollm2-135m"], value="smollm2-135m", allow_custom_value=True)
        tab.build(type("Ctx", (), {"model": model})())
    shown = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    assert "Precomputed example" in shown["neuzip-throughput-summary"].value
    assert "4-bit GGUF" in shown["neuzip-weights-note"].value and "student-t" in shown["neuzip-weights-note"].value
    rows = shown["neuzip-throughput-table"].value["data"]
    assert len(rows) == len(with_example["throughput"]["rows"]) and rows[1][0] == "NeuZip k=3, B=128"


def test_downloads_are_json_csv_and_offline_html(with_example, tmp_path):
    state, _ = nz.example_parts("smollm2-135m")
    files = [Path(f) for f in tab.download_files(state, False)["value"]]
    assert {f.suffix for f in files} == {".json", ".csv", ".html", ".parquet"}
    assert sorted(f.stem for f in files if f.suffix == ".csv") == [
        "neuzip-long", "neuzip-process-memory", "neuzip-table", "neuzip-throughput",
        "neuzip-tradeoff"]  # the bit fields: figure only
    long = pd.read_parquet(next(f for f in files if f.name == "neuzip-long.parquet"))
    assert set(long["table"]) == {"table", "throughput", "tradeoff", "process-memory"}  # the page's tables in one
    assert all(f.stat().st_size > 0 for f in files)
    html = next(f for f in files if f.name == "neuzip-tradeoff.html").read_text()
    assert "Memory vs perplexity" in html and len(html) > 1_000_000  # plotly.js embedded: works offline
    with pytest.raises(gr.Error):
        tab.download_files({}, False)


@pytest.mark.parametrize("call", [
    lambda: tab.analyse_weights("smollm2-135m", 5, "none", None),
    lambda: tab.analyse_weights("smollm2-135m", 3, "100", None),
    lambda: tab.measure_tradeoff("smollm2-135m", "96", 2000, False, None),
    lambda: tab.measure_tradeoff("smollm2-135m", "128", 50, False, None),
    lambda: tab.measure_tradeoff("", "128", 2000, False, None),
    lambda: tab.measure_throughput("no-such-model", 7, "none", None),
])
def test_bad_input_is_a_gradio_error(with_example, call):
    with pytest.raises(gr.Error):
        call()


def test_tab_builds_with_api_names(with_example):
    with gr.Blocks() as demo:
        model = gr.Dropdown(choices=["smollm2-135m"], value="smollm2-135m", allow_custom_value=True)
        tab.build(type("Ctx", (), {"model": model})())
    deps = [d for d in demo.config["dependencies"] if d["targets"][0][1] != "load"]
    names = {d["api_name"] for d in deps}
    assert {"neuzip_weights", "neuzip_tradeoff", "neuzip_throughput", "neuzip_stop", "neuzip_tradeoff_axis",
            "neuzip_downloads"} <= names
    assert tab.TITLE == "NeuZip"


def test_the_committed_example_matches_the_live_defaults():
    ex, _ = nz.example_parts(tab.EXAMPLE_MODEL)
    if not ex:
        pytest.skip("assets/neuzip has no example yet")
    assert ex["table"]["mantissa_bits"] == 7 and ex["tradeoff"]["block_size"] == 128
    labels = [p["label"] for p in ex["tradeoff"]["points"]]
    assert labels[:2] == ["bf16", "NeuZip k=7 (lossless)"]
    by = {p["label"]: p for p in ex["tradeoff"]["points"]}
    assert by["bf16"]["perplexity"] == by["NeuZip k=7 (lossless)"]["perplexity"]
    assert Path(tab.__file__).parents[2].joinpath("assets", "neuzip", "examples.json").stat().st_size < 1_000_000


def _api_names(demo) -> set:
    return {d["api_name"] for d in demo.config["dependencies"] if d["targets"][0][1] != "load"}


def test_gpu_memory_section_only_on_a_cuda_host_and_it_measures(with_example, monkeypatch):
    """On a CPU host the tab has no GPU-memory button; on a CUDA host (stood in) it has one, and its handler shows the
    measurement's status and MiB table (the measurement itself stands in: no GPU here)."""
    from core.neuzip import memory

    def build():
        with gr.Blocks() as demo:
            model = gr.Dropdown(choices=["mathneuro-tiny"], value="mathneuro-tiny", allow_custom_value=True)
            tab.build(type("Ctx", (), {"model": model})())
        return demo

    monkeypatch.setattr(nz, "cuda_present", lambda: False)
    assert "neuzip_device_memory" not in _api_names(build())
    monkeypatch.setattr(nz, "cuda_present", lambda: True)
    assert "neuzip_device_memory" in _api_names(build())
    r = {"device": "Stand-in GPU", "tokens": 512, "mantissa_bits": 7, "block_size": None,
         "bf16": {"loaded": 256 * 2**20, "forward_peak": 40 * 2**20},
         "compressed": {"loaded": 170 * 2**20, "forward_peak": 44 * 2**20}, "linear_bf16_bytes": 200 * 2**20,
         "linear_resident_bytes": 133 * 2**20, "linear_ratio": 0.665, "loaded_ratio": 170 / 256,
         "max_abs_logit_difference": 0.0}
    monkeypatch.setattr(memory, "require_cuda", lambda device: device)
    monkeypatch.setattr(memory, "device_memory", lambda model, *args: dict(r))
    from ui.gpu import heavy

    assert heavy(tab.measure_device_memory)  # so a ZeroGPU Space runs it with the GPU attached
    status, table = tab.measure_device_memory("mathneuro-tiny", 7, "none", progress=lambda *a, **k: None)
    assert "**170.0 MiB** NeuZip-compressed" in status and "**256.0 MiB** in bf16" in status
    assert list(table["format"]) == ["bf16", "compressed"] and list(table["loaded_MiB"]) == [256.0, 170.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_gpu_memory_on_a_cpu_host_is_one_clear_error():
    with pytest.raises(gr.Error, match="CUDA device"):
        tab.measure_device_memory("mathneuro-tiny", 7, "none", progress=lambda *a, **k: None)


def test_the_trade_off_is_drawn_beside_its_processes(with_example):
    """The committed trade-off and its settings' processes: the tab's chart draws each measured setting's process
    (hollow markers at the idle RSS, the same perplexity) beside its weight-memory point, and says by how much the
    lossless process idles below bf16's."""
    state, shown = nz.example_parts("smollm2-135m")
    fig = shown["tradeoff"].figures["tradeoff"]
    process = next(t for t in fig.data if t.name and t.name.startswith("the process"))
    rows = state["process-memory"]["rows"]
    assert [round(x, 3) for x in process.x] == [round(r["idle_rss_bytes"] / 1e6, 3) for r in rows]
    assert "whole process" in fig.layout.xaxis.title.text
    assert "As the machine sees it" in shown["tradeoff"].status
