"""The MambaLRP tab's section for the hybrids: how one text's relevance passes through the attention layers and the
SSM layers (per layer and token, summed by kind: ``core.lrp.flow_result``), the key-token ground truth on the
Mamba-2 and hybrid classifiers beside the paper's, and the subject-verb agreement ground truth. Gradio wiring only."""
from __future__ import annotations

import gradio as gr

import core.lrp as lrp
from ui.errors import user_errors
from ui.stopping import job
from ui.widgets import downloads_box, downloads_update, figure_or, frame

NOTE = ("A hybrid mixes Mamba-2 layers with attention layers. Each layer hands relevance back to the tokens it reads "
        "(its **input relevance**): the top chart shows it per layer and token, the bars sum it over the layers of "
        "each kind, so you see which tokens' evidence travels through the **attention** layers and which through the "
        "**SSM** layers. Biases and the softmax (AttnLRP's rule, as published) keep part of the relevance; the status "
        "says how much (on hybrid-sentiment the attention softmax keeps about half of the logit).")


@user_errors
def explain_layers(model, text, target, request: gr.Request = None, progress=gr.Progress()):
    """Where one text's relevance passes: per layer and token, and summed by layer kind."""
    res = lrp.flow_result(model, text, target, job(request, progress))
    return res.status, res.figures["layer-flow"], frame(res.tables["blocks"]), downloads_update(res)


def build(target_box) -> list:
    """The section; ``target_box(res, label, elem_id)`` is the tab's target dropdown. Returns its events."""
    ex = lrp.example_result("flow")
    with gr.Accordion("Hybrid: how the relevance passes through attention vs SSM layers", open=True):
        gr.Markdown(NOTE, elem_classes="lw-explain")
        with gr.Row():
            model = gr.Dropdown(list(lrp.FLOW_MODELS), value=ex.data["model"] if ex else lrp.FLOW_MODELS[0],
                                allow_custom_value=True, label="Model (a hybrid shows both kinds)",
                                elem_id="lrp-flow-model", scale=1)
            text = gr.Textbox(ex.data["text"] if ex else next(iter(lrp.FLOW_EXAMPLES.values()))[0], lines=1,
                              label="Text", elem_id="lrp-flow-text", scale=3)
            target = target_box(None, "Explain which class / next token", "lrp-flow-target")
            btn = gr.Button("Trace the layers", variant="primary", elem_id="lrp-flow-btn")
        status = gr.Markdown(ex.status if ex else "Press Trace.", elem_id="lrp-flow-status")
        plot = gr.Plot(figure_or(ex, "layer-flow", "Press Trace the layers."), label="Relevance by layer",
                       elem_id="lrp-flow-plot")
        table = gr.Dataframe(frame(ex.tables["blocks"]) if ex else None, interactive=False,
                             label="Per layer: relevance out, in, and its share of what all layers hand back",
                             elem_id="lrp-flow-table")
        files = downloads_box(ex, "Downloads: per layer and token (JSON, CSV) and the figure (HTML)",
                              "lrp-flow-downloads")
    return [btn.click(explain_layers, [model, text, target], [status, plot, table, files], api_name="lrp_flow")]


AGREEMENT_ITEMS = (  # committed item, model, why it may be missing
    ("agreement", "mamba-lm", ""),
    ("agreement-smollm2", "smollm2-135m",
     " (a Llama transformer: this build has no LRP rules for plain transformers yet)"))


def ground_truths() -> None:
    """The key-token ground truth on a Mamba-2 and on a hybrid classifier (committed), below the paper's; then the
    subject-verb agreement ground truth on a language model (committed, core.lrp.agreement)."""
    for family in ("mamba2", "hybrid"):
        res = lrp.committed_result(f"key-token-{family}")
        if res:
            gr.Markdown(res.status)
            gr.Dataframe(frame(res.views["hits"]), interactive=False, elem_id=f"lrp-key-token-{family}",
                         label=f"Key-token hit rate, {family} classifier, over seeds")
    gr.Markdown("#### Subject-verb agreement (a language model)")
    for item, model, note in AGREEMENT_ITEMS:
        res = lrp.committed_result(item)
        if not res:
            gr.Markdown(f"Not computed yet on `{model}`{note}: `python -m core lrp precompute-evaluation --only {item}` "
                        "computes it.", elem_id=f"lrp-{item}-status")
            continue
        gr.Markdown(res.status, elem_id=f"lrp-{item}-status")
        gr.Dataframe(frame(res.tables["methods"]), interactive=False, elem_id=f"lrp-{item}",
                     label=f"{model}: where each method ranks the subject the verb agrees with (± standard error; "
                           "MambaLRP minus each method paired over the sentences)")
