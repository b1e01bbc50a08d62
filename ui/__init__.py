"""The Gradio UI: one module per tab (``TITLE`` + ``build(ctx)``), a shared header, theme and error handling.

Only this package imports gradio. :func:`tab_modules` lists the tabs, in display order: the models and data tab,
then one per paper of :mod:`core.papers` (its module ``ui/tabs/<paper>.py``), titled as the registry titles it. A paper's tab opens with its stage (:mod:`ui.stage`: the precomputed examples of
:mod:`core.examples`, one chart, the link to it); a link ``?tab=...&example=...`` opens that tab on that view
(:mod:`ui.links`), and ``view=talk`` (:mod:`ui.talk`) is the presenter view.
"""
from __future__ import annotations

import importlib

import gradio as gr

import core.papers as papers
from ui import tool_endpoints
from ui.gpu import on_gpu
from ui.header import build_header
from ui.links import connect_links, publish
from ui.stage import build_stage
from ui.talk import TALK_CSS, head
from ui.theme import CSS as BASE_CSS
from ui.theme import projector_theme



def tab_modules() -> tuple[str, ...]:
    """The tabs' modules in display order: the models and data, then each paper's (:mod:`core.papers`)."""
    return ("ui.tabs.models_data", *(f"ui.tabs.{name}" for name in papers.names()))


TABS = tab_modules()
CSS = BASE_CSS + TALK_CSS


def build_app() -> gr.Blocks:
    """The whole app (not launched)."""
    # delete_cache: Gradio's copies of served and uploaded files older than an hour go every hour, and all of them
    # when the server stops or restarts (the app cleans its own temp files)
    with gr.Blocks(title="Layerwise", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        ctx = build_header()
        notice = gr.Markdown(visible=False, elem_id="lw-notice", elem_classes="lw-notice")
        titles, stages, labs = {}, {}, {}
        with gr.Tabs() as tabs:
            paper_titles = papers.titles()
            for module_name in tab_modules():
                module = importlib.import_module(module_name)
                tab = module_name.rsplit(".", 1)[-1]
                titles[tab] = paper_titles.get(tab) or module.TITLE
                with gr.Tab(titles[tab], id=tab, elem_id=f"tab-{tab}"):
                    if tab in paper_titles:
                        stages[tab] = build_stage(tab)
                    with gr.Column(elem_classes="lw-lab", elem_id=f"lab-{tab}") as labs[tab]:
                        module.build(ctx)
        connect_links(demo, tabs, notice, titles, stages, labs)
        tool_endpoints.build()  # the analyses for agents: JSON endpoints, MCP tools with --mcp (ui.tools)
    on_gpu(demo)  # on a GPU Space the heavy handlers get the GPU (with the spaces package loaded; else nothing)
    return demo


__all__ = ["build_app", "projector_theme", "CSS", "TABS", "tab_modules", "head", "publish"]
