"""The agent tools' answers and the tab's batch section, without a server: a tool answers one JSON text with the
result's tables, long-format columns and file links; only the tools are left to an MCP server; the batch section
refuses a missing or oversized upload with one message and explains a small file into Parquet and CSV."""
from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest

from core.results import Result
from core.zoo import registered_names
from ui import answers, tool_endpoints, tools
from ui.tabs import batch as tab_batch


def test_an_answer_is_one_json_text_with_tables_long_columns_and_links(tmp_path, monkeypatch):
    res = Result("**done**", {"a": 1}, tables={"t": [{"k": "x", "v": 1.5}] * 3}, key="k-answer", stem="demo")
    monkeypatch.setattr(answers, "MAX_TABLE_ROWS", 2)
    request = SimpleNamespace(headers={"host": "example.org:7860", "x-forwarded-proto": "https"})
    answer = json.loads(answers.answer(res, request, extra_field=3))
    assert answer["status"] == "**done**" and answer["source"] == "computed" and answer["extra_field"] == 3
    assert answer["tables"] == {"t": [{"k": "x", "v": 1.5}] * 2} and answer["truncated"] == {"t": 3}
    assert answer["long_table"]["columns"] == ["table", "record", "k", "measure", "value"]
    names = [f["name"] for f in answer["files"]]
    assert names == ["demo.json", "demo.csv", "demo-long.csv", "demo-long.parquet"]
    assert all(f["url"].startswith("https://example.org:7860/gradio_api/file=") for f in answer["files"])


def test_only_the_tools_are_left_to_the_mcp_server():
    endpoints = {name: f"/{name}" for name in tools.TOOL_NAMES} | {"explain_text": "/lrp_explain_text",
                                                                   "stop": "/lrp_stop"}
    demo = SimpleNamespace(mcp_server_obj=SimpleNamespace(tool_to_endpoint=dict(endpoints)))
    assert tool_endpoints.only_tools(demo) == list(tools.TOOL_NAMES)
    assert set(demo.mcp_server_obj.tool_to_endpoint.values()) == {f"/{n}" for n in tools.TOOL_NAMES}
    taken = SimpleNamespace(mcp_server_obj=SimpleNamespace(tool_to_endpoint={"effect": "/mathneuro_effect"}))
    with pytest.raises(RuntimeError, match="not"):  # a tool whose api_name a page endpoint took is a bug, said loudly
        tool_endpoints.only_tools(taken)
    assert tool_endpoints.only_tools(SimpleNamespace()) == []


def test_the_tools_have_descriptions_and_one_line_per_input():
    from gradio.utils import get_function_description

    for handler in tools.HANDLERS:
        description, params, returns = get_function_description(handler)
        assert description and returns, handler.__name__
        inputs = [p for p in params if p not in ("request", "progress")]
        assert all(params[p] for p in inputs), (handler.__name__, params)  # every input is described


def test_the_batch_section_refuses_a_missing_or_oversized_upload(tmp_path, monkeypatch):
    with pytest.raises(gr.Error, match="No file uploaded"):
        tab_batch.run_batch(None, "mamba-sentiment", ["mambalrp"], 5)
    big = tmp_path / "big.csv"
    big.write_text("text\n" + "a review\n" * 100)
    monkeypatch.setattr(tab_batch, "MAX_UPLOAD_BYTES", 100)
    with pytest.raises(gr.Error, match="at most 100"):
        tab_batch.run_batch(str(big), "mamba-sentiment", ["mambalrp"], 5)


@pytest.mark.skipif("mamba-sentiment" not in registered_names(), reason="mamba-sentiment not committed")
def test_the_batch_section_explains_a_small_file(tmp_path):
    source = tmp_path / "two.jsonl"
    source.write_text('{"text": "A gorgeous, witty film.", "id": 7}\n{"text": ""}\n')
    status, preview, files = tab_batch.run_batch(str(source), "mamba-sentiment", ["mambalrp"], 2)
    assert "**2 rows** of two.jsonl" in status and "1 refused" in status
    assert list(preview["prediction"])[0] == "positive" and "empty" in list(preview["error"])[1]
    parquet, csv = files["value"]
    out = pd.read_parquet(parquet)
    assert out.loc[0, "id"] == "7" and pd.isna(out.loc[1, "id"]) and len(out.loc[0, "mambalrp_top_tokens"]) == 2
    assert pd.read_csv(csv).shape[0] == 2
    with pytest.raises(gr.Error, match="at most 2,000 rows|takes images"):
        tab_batch.run_batch(str(source), "vision-mamba-mnist", ["mambalrp"], 2)
