"""The agent tools' endpoints (:mod:`ui.tools`): each handler on hidden components of the page (``api_name`` = the
tool's name, in the app's API but not on the page), whose choices and ranges gradio turns into the MCP input schema;
and :func:`only_tools`, which leaves only these tools to the app's MCP server."""
from __future__ import annotations

import gradio as gr

import core.examples as ex
import core.lrp as lrp
import core.mathneuro as mn
import core.neuzip as nz
from ui.tools import (HANDLERS, TOOL_NAMES, layerwise_view, layerwise_views, list_models, lrp_bias_audit,
                      lrp_faithfulness, lrp_relevance, mathneuro_pruning_effect, neuzip_memory_perplexity)
from ui.widgets import finite_number


def _methods(default):
    return gr.CheckboxGroup([name for _, name in lrp.method_choices()], value=list(default), label="methods")


def _inputs() -> dict:
    """Each tool's input components (built inside the hidden column), by its handler."""
    defaults = mn.DEFAULTS
    math_datasets, nonmath_datasets = mn.dataset_names()
    model = dict(allow_custom_value=True, label="model")
    return {
        layerwise_views: [],
        layerwise_view: [gr.Dropdown(list(ex.PAPERS), value="lrp", label="tab"),
                         gr.Textbox("sentiment-1", label="example"), gr.Textbox("", label="inputs")],
        lrp_relevance: [gr.Dropdown(list(lrp.TEXT_MODELS), value=lrp.TEXT_MODELS[0], **model),
                        gr.Textbox(lrp.TEXT_EXAMPLES["mamba-sentiment"][0], label="text"), _methods(["mambalrp"]),
                        finite_number(-1, precision=0, minimum=-1, label="target")],
        lrp_faithfulness: [gr.Dropdown(list(lrp.EVAL_MODELS), value=lrp.EVAL_MODELS[0], **model),
                           finite_number(20, precision=0, minimum=1, maximum=lrp.MAX_EVAL_SAMPLES, label="n"),
                           finite_number(10, precision=0, minimum=1, maximum=lrp.MAX_FLIP_STEPS, label="steps"),
                           _methods(lrp.DEFAULT_METHODS)],
        lrp_bias_audit: [gr.Dropdown(["mamba-sentiment"], value="mamba-sentiment", **model)],
        mathneuro_pruning_effect: [
            gr.Dropdown([defaults["model"], "smollm2-135m"], value=defaults["model"], **model),
            gr.Dropdown(math_datasets, value=defaults["math"], label="math"),
            gr.Dropdown(nonmath_datasets, value=defaults["nonmath"][0], label="nonmath"),
            finite_number(defaults["n"], precision=0, minimum=1, maximum=1000, label="n"),
            finite_number(defaults["proportion"], minimum=0.0001, maximum=1, label="proportion"),
            finite_number(defaults["eval_n"], precision=0, minimum=1, maximum=1000, label="eval_n")],
        neuzip_memory_perplexity: [
            gr.Dropdown(["smollm2-135m", "mathneuro-tiny"], value="smollm2-135m", **model),
            finite_number(nz.DEFAULT_WORDS, precision=0, minimum=nz.MIN_WORDS, maximum=nz.MAX_WORDS, label="words")],
        list_models: [],
    }


def build() -> None:
    """The tools' endpoints (api_name = the tool's name), on hidden components: in the app's API, not on the page."""
    with gr.Column(visible=False, elem_id="lw-tools"):
        out = gr.Textbox(label="answer (JSON)")
        inputs = _inputs()
        for handler in HANDLERS:
            button = gr.Button(handler.__name__)
            button.click(handler, inputs[handler], out, api_name=handler.__name__, show_progress="hidden")


def only_tools(demo: gr.Blocks) -> list[str]:
    """Let the app's MCP server (after ``launch(mcp_server=True)``) list and call only the tools of :mod:`ui.tools`;
    returns their MCP names. Without an MCP server, nothing happens."""
    server = getattr(demo, "mcp_server_obj", None)
    if server is None:
        return []
    mine = {name: endpoint for name, endpoint in server.tool_to_endpoint.items()
            if endpoint.lstrip("/") in TOOL_NAMES}
    if sorted(mine.values()) != sorted(f"/{n}" for n in TOOL_NAMES):  # an api_name taken by a page endpoint
        raise RuntimeError(f"the MCP tools' endpoints are {sorted(mine.values())}, not {TOOL_NAMES}")
    server.tool_to_endpoint = mine
    return list(mine)


__all__ = ["build", "only_tools"]
