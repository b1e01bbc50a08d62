"""The app as an MCP server (``python app.py --mcp``): an MCP client (the ``mcp`` package, streamable HTTP) lists
exactly the agent tools (ui.tools) with their descriptions, ranges and defaults, calls a cheap and a heavy one (which
reports progress) and gets what ``gradio_client`` gets from the same endpoints; bad input gets the app's own message.
Off by default: the plain app serves no MCP endpoint."""
from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from tests.fuzz.conftest import serving
from ui.tools import TOOL_NAMES

pytestmark = pytest.mark.slow
TEXT = "A gorgeous, witty and seductive movie."


@pytest.fixture(scope="module")
def mcp_app(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("mcp"), "--mcp") as server:
        yield server


def _mcp(url: str, calls):
    """Run ``calls(session)`` (a coroutine function) in an MCP session with the app's streamable HTTP endpoint."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def go():
        async with streamablehttp_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await calls(session)
    return asyncio.run(go())


def _same(a: str, b: str) -> None:
    """Two answers of one tool are the same result: equal but for where it came from (computed, then cached)."""
    x, y = json.loads(a), json.loads(b)
    for d in (x, y):
        d["status"] = d["status"].replace(" (from the results cache)", "").replace("from the results cache", "")
        d["status"] = d["status"].replace(" (computed now)", "").replace("computed now", "")
        d.pop("source")
    assert x == y


def test_the_tools_are_listed_with_descriptions_ranges_and_defaults(mcp_app):
    tools = _mcp(mcp_app.url, lambda s: s.list_tools())
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == set(TOOL_NAMES)  # the page's own endpoints (explain_text, lrp_stop, ...) are not tools
    faith = by_name["lrp_faithfulness"]
    assert "Delta A^F" in faith.description and "progress" in faith.description
    n = faith.inputSchema["properties"]["n"]
    assert "from 1 to 1000" in n["description"] and n.get("default") == 20
    methods = faith.inputSchema["properties"]["methods"]
    assert "mambalrp" in methods["items"]["enum"] and "integrated_gradients" in methods["items"]["enum"]
    relevance = by_name["lrp_relevance"].inputSchema["properties"]
    assert relevance["model"]["default"] == "mamba-sentiment" and "mamba-lm" in relevance["model"]["description"]
    assert relevance["target"]["default"] == -1 and "top prediction" in relevance["target"]["description"]


def test_a_cheap_and_a_heavy_tool_answer_as_gradio_client_does(mcp_app):
    progress = []

    async def calls(session):
        cheap = await session.call_tool("lrp_relevance", {"model": "mamba-sentiment", "text": TEXT,
                                                          "methods": ["mambalrp"], "target": -1})
        heavy = await session.call_tool("lrp_faithfulness", {"model": "mamba-sentiment", "n": 2, "steps": 2,
                                                             "methods": ["mambalrp", "random"]},
                                        progress_callback=lambda p, total, message: progress.append((p, message)))
        views = await session.call_tool("layerwise_view", {"tab": "lrp", "example": "bias-audit", "inputs": ""})
        return cheap, heavy, views

    cheap, heavy, views = _mcp(mcp_app.url, calls)
    assert not cheap.isError and not heavy.isError, (cheap.content, heavy.content)
    cheap_text, heavy_text = cheap.content[0].text, heavy.content[0].text
    answer = json.loads(cheap_text)
    rel = answer["tables"]["relevance"]
    assert [r["token"] for r in rel][:2] == ["A", " gorgeous"] and answer["target_name"] == "positive"
    assert abs(sum(r["mambalrp"] for r in rel) - answer["summary"][0]["logit"]) < 1e-3  # conservation, via MCP
    assert any(f["name"].endswith("-long.parquet") for f in answer["files"])
    assert progress and any("of 100" in (m or "") for _, m in progress)  # the heavy tool reported progress
    faith = json.loads(heavy_text)
    assert [r["method"] for r in faith["tables"]["methods"]] == ["mambalrp", "random"]
    bias = json.loads(views.content[0].text)
    assert bias["source"] == "precomputed" and len(bias["tables"]["terms"]) == 22

    client = mcp_app.client()
    again_cheap = client.predict("mamba-sentiment", TEXT, ["mambalrp"], -1, api_name="/lrp_relevance")
    again_heavy = client.predict("mamba-sentiment", 2, 2, ["mambalrp", "random"], api_name="/lrp_faithfulness")
    _same(cheap_text, again_cheap)
    _same(heavy_text, again_heavy)
    assert json.loads(again_heavy)["source"] == "cache"
    with urllib.request.urlopen(answer["files"][0]["url"], timeout=30) as r:  # the links serve the files
        assert r.status == 200 and r.read()


def test_bad_inputs_get_the_apps_own_message(mcp_app):
    async def calls(session):
        return (await session.call_tool("lrp_faithfulness", {"model": "mamba-sentiment", "n": 0, "steps": 2,
                                                             "methods": ["mambalrp"]}),
                await session.call_tool("lrp_relevance", {"model": "no-such-model", "text": "hi",
                                                          "methods": ["mambalrp"], "target": -1}),
                await session.call_tool("layerwise_view", {"tab": "lrp", "example": "nope", "inputs": ""}))

    n_zero, no_model, no_view = _mcp(mcp_app.url, calls)
    assert n_zero.isError and "n = 0 is not allowed. Fix: type a number from 1 to 1000" in n_zero.content[0].text
    assert no_model.isError and "no-such-model" in no_model.content[0].text
    assert "Traceback" not in no_model.content[0].text
    assert no_view.isError and "no example 'nope' in lrp" in no_view.content[0].text


def test_the_plain_app_serves_no_mcp(app_url):
    try:
        urllib.request.urlopen(app_url + "gradio_api/mcp/schema", timeout=30)
        served = True
    except urllib.error.HTTPError:
        served = False
    assert not served
