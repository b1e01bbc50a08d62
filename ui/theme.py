"""A theme that reads on a projector: large type, strong contrast, system fonts (no web-font downloads)."""
from __future__ import annotations

import gradio as gr

_FONT = ("ui-sans-serif", "system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif")
_MONO = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace")


def projector_theme() -> gr.themes.Base:
    return gr.themes.Default(primary_hue="blue", secondary_hue="orange", neutral_hue="slate",
                             text_size=gr.themes.sizes.text_lg, radius_size=gr.themes.sizes.radius_sm,
                             font=_FONT, font_mono=_MONO).set(
        body_text_color="#0f172a", block_title_text_weight="600", block_label_text_weight="600",
        button_primary_background_fill="#1d4ed8", button_primary_text_color="#ffffff")


CSS = """
.lw-header h1 {margin-bottom: 0.1em;}
.lw-status-missing {color: #b91c1c; font-weight: 600;}
footer {display: none !important;}
table th .header {word-break: normal !important; overflow-wrap: normal !important; hyphens: none;}
.lw-table td, .lw-table th {word-break: normal !important; overflow-wrap: normal !important; hyphens: none;}
.lw-table td:last-child {min-width: 7.5em;}
"""
