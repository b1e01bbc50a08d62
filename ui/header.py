"""The shared header: title and the model picker every tab reads."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from core.settings import is_public
from core.zoo import card_of, hub_choices, load_model, registered_names
from ui.errors import user_errors


@dataclass
class AppContext:
    """Components shared by the tabs."""

    model: gr.Dropdown  # a registered model name, a local folder or (online) a hub id


def default_model() -> str | None:
    names = registered_names()
    return names[0] if names else None


@user_errors
def describe_model(ref: str) -> str:
    """The card of the chosen model; a folder or hub id is loaded to read its facts."""
    if not ref:
        return "Choose a model."
    if ref in registered_names():
        return card_of(ref).markdown()
    return load_model(ref).card.markdown()


def build_header() -> AppContext:
    with gr.Row(elem_classes="lw-header"):
        with gr.Column(scale=3):
            gr.Markdown("# Layerwise\nInside the layers of language models: **MambaLRP** relevance, **MathNeuro** "
                        "parameters, **Mix-LN** layer health, **NeuZip** weight compression.")
        with gr.Column(scale=2):
            info = ("a listed model (this public server opens no folder of its own)" if is_public() else
                    "a listed model, a local folder, or a hub id (with --online)")
            model = gr.Dropdown(choices=registered_names() + hub_choices(), value=default_model(), allow_custom_value=True,
                                label="Model", info=info)
            show = gr.Button("Show model card", size="sm")
    card = gr.Markdown(visible=True)
    show.click(describe_model, inputs=model, outputs=card, api_name="model_card")
    return AppContext(model=model)
