"""The Gradio UI: one module per tab (``TITLE`` + ``build(ctx)``), a shared header, theme and error handling.

Only this package imports gradio. :data:`TABS` is the one list of tabs, in display order; each
paper's tab module is added here.
"""
from __future__ import annotations

import importlib

import gradio as gr

from ui.header import build_header
from ui.theme import CSS, projector_theme

TABS = ("ui.models_data", "ui.lrp", "ui.mathneuro", "ui.mixln", "ui.neuzip")


def build_app() -> gr.Blocks:
    """The whole app (not launched)."""
    # delete_cache: Gradio's copies of served and uploaded files older than an hour go every hour, and all of them
    # when the server stops or restarts (the app cleans its own temp files)
    with gr.Blocks(title="Layerwise", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        ctx = build_header()
        with gr.Tabs():
            for module_name in TABS:
                module = importlib.import_module(module_name)
                with gr.Tab(module.TITLE, id=module_name.rsplit(".", 1)[-1]):
                    module.build(ctx)
    return demo


__all__ = ["build_app", "projector_theme", "CSS", "TABS"]
