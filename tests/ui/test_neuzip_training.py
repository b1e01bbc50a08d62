"""The NeuZip tab's Training section, its CLI and its Python API give the same numbers for the same run; the section
opens on the committed runs; bad input is one message."""
import json

import gradio as gr
import pytest

import core.neuzip as nz
import ui.tabs.neuzip_training as section
from core.cli import main

pytestmark = pytest.mark.usefixtures("single_thread")
RUN = {"model": "tiny-llama", "modes": ["lomo", "lomo+neuzip"], "steps": 3, "batch": 1, "seq": 16}


@pytest.mark.slow
def test_cli_api_and_tab_give_the_same_numbers(capsys):
    nz.training_result(RUN["model"], ["lomo"], 1, 1, 16)  # first use: lazy initialisations outside the comparison
    api = nz.training_result(RUN["model"], RUN["modes"], RUN["steps"], RUN["batch"], RUN["seq"])
    capsys.readouterr()
    assert main(["neuzip", "train", "--model", RUN["model"], "--mode", *RUN["modes"], "--steps", str(RUN["steps"]),
                 "--batch", str(RUN["batch"]), "--seq", str(RUN["seq"]), "--json"]) in (0, None)
    cli = json.loads(capsys.readouterr().out)
    status, memory, loss, table, paper, paper2 = section.train_live(RUN["model"], RUN["modes"], RUN["steps"],
                                                                    RUN["batch"], RUN["seq"])
    by = {m["mode"]: m for m in api.data["modes"]}
    for mode in RUN["modes"]:
        assert cli["final_loss"][mode] == by[mode]["final_loss"]
        assert cli["peak_bytes"][mode] == by[mode]["peak_bytes"]
    measured = ["mode", "steps", "final loss", "peak MiB", "weights", "gradients", "optimizer", "activations",
                "memory / vanilla"]  # not the timings and the RSS: those are of each run
    want = section.frame(api.tables["training"]).rename(columns=section.TABLE_COLUMNS)
    assert table[measured].to_dict("records") == want[measured].to_dict("records")
    assert by["lomo"]["losses"] == by["lomo+neuzip"]["losses"]
    assert memory.layout.yaxis.title.text and loss.layout.xaxis.title.text == "step"
    assert "LOMO + NeuZip" in status and len(paper) == len(nz.PAPER_TABLE1) and len(paper2) == 24


def test_the_section_opens_on_the_committed_runs():
    status, memory, loss, table, paper, paper2 = section.show_example("smollm2-135m")
    assert status.startswith("Precomputed example")
    # the paper's Tables 1 and 2 whole: every model, the run that did not fit, QLoRA's double-quantized rows
    assert len(paper) == 9 and list(paper["note"]).count("out of memory (OOM)") == 1 and len(paper2) == 24
    assert {"QLoRA FP4²", "QLoRA NF4²", "QLoRA NF4"} <= set(paper2["the paper's row"])
    assert [t.name for t in memory.data[:4]] == ["weights", "gradients", "optimizer", "activations"]
    assert "LOMO + NeuZip" in list(table["mode"])
    with gr.Blocks():
        section.build()


def test_bad_input_is_one_message():
    with pytest.raises(gr.Error, match="unknown training mode"):
        section.train_live("tiny-llama", ["lomo", "sgd-with-momentum"], 2, 1, 16)
    with pytest.raises(gr.Error, match="more than the tab runs live"):
        section.train_live("tiny-llama", ["lomo"], 10_000, 1, 16)
    with pytest.raises(gr.Error, match="no precomputed training run"):
        section.show_example("gpt-5")
