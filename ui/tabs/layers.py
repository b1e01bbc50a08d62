"""The MambaLRP tab's sections for the hybrids and the transformers: how one text's relevance passes through the
attention layers, the SSM layers and the MLPs (per layer and token, summed by kind: ``core.lrp.flow_result``), one
text on a transformer beside an SSM (``core.lrp.compare_result``), the key-token ground truth on the Mamba-2 and
hybrid classifiers beside the paper's, and the subject-verb agreement ground truth. Gradio wiring only."""
from __future__ import annotations

import gradio as gr

import core.lrp as lrp
from core.zoo import hub_choices
from ui.errors import user_errors
from ui.stopping import job
from ui.widgets import downloads_box, downloads_update, figure_or, frame

NOTE = ("A hybrid mixes Mamba-2 layers with attention layers; a transformer (smollm2-135m) alternates attention and "
        "MLPs. Each layer hands relevance back to the tokens it reads (its **input relevance**): the top chart shows it "
        "per layer and token, the bars sum it over the layers of each kind, so you see which tokens' evidence travels "
        "through the **attention** layers, the **SSM** layers and the **MLPs**. Biases and the softmax (AttnLRP's rule, "
        "as published) keep part of the relevance; the status says how much (on hybrid-sentiment the attention "
        "softmax keeps about half of the logit, on smollm2-135m most of it).")
COMPARE_NOTE = ("One text, two models, each explaining **its own** next-token prediction with the same method: how a "
                "transformer and an SSM spread the relevance over the words they read. Their tokenizers differ, so each "
                "model's token relevances are summed per word (as typed); the lower chart shows how much of each "
                "one's |relevance| lies within the last d words. Offline the SSM beside smollm2-135m (135M parameters) "
                "is the embedded mamba-lm (1M); online, state-spaces/mamba-130m-hf is the same size.")


@user_errors
def explain_layers(model, text, target, request: gr.Request = None, progress=gr.Progress()):
    """Where one text's relevance passes: per layer and token, and summed by layer kind."""
    res = lrp.flow_result(model, text, target, job(request, progress))
    return res.status, res.figures["layer-flow"], frame(res.tables["blocks"]), downloads_update(res)


@user_errors
def compare_models(model_a, model_b, text, method, request: gr.Request = None, progress=gr.Progress()):
    """One text on two models, side by side: per word and how close to the end each one's relevance lies."""
    res = lrp.compare_result([model_a, model_b], text, method, job(request, progress))
    return res.status, res.figures["compare"], frame(res.tables["models"]), downloads_update(res)


def build_compare() -> list:
    """The side-by-side section (the precomputed pair first). Returns its events."""
    ex = lrp.example_result("compare")
    pair = [s["model"] for s in ex.data["models"]] if ex else list(lrp.COMPARE_MODELS)
    models = list(dict.fromkeys(lrp.TEXT_MODELS + tuple(hub_choices("lrp"))))
    with gr.Accordion("Side by side: a transformer and an SSM on the same text", open=True):
        gr.Markdown(COMPARE_NOTE, elem_classes="lw-explain")
        with gr.Row():
            a = gr.Dropdown(models, value=pair[0], allow_custom_value=True, label="Model A (a transformer)",
                            elem_id="lrp-compare-a")
            b = gr.Dropdown(models, value=pair[1], allow_custom_value=True, label="Model B (an SSM)",
                            elem_id="lrp-compare-b")
            method = gr.Dropdown(lrp.method_choices(), value="mambalrp", label="Method", elem_id="lrp-compare-method")
        with gr.Row():
            text = gr.Textbox(ex.data["text"] if ex else next(iter(lrp.COMPARE_EXAMPLES.values()))[0], lines=1,
                              label="Text (the same for both)", elem_id="lrp-compare-text", scale=4)
            btn = gr.Button("Compare", variant="primary", elem_id="lrp-compare-btn")
        status = gr.Markdown(ex.status if ex else "Press Compare.", elem_id="lrp-compare-status")
        plot = gr.Plot(figure_or(ex, "compare", "Press Compare."), show_label=False, elem_id="lrp-compare-plot")
        table = gr.Dataframe(frame(ex.tables["models"]) if ex else None, interactive=False,
                             label="Per model: its prediction, conservation, how local its relevance is",
                             elem_id="lrp-compare-table")
        files = downloads_box(ex, "Downloads: per word and per model (JSON, CSV) and the figure (HTML)",
                              "lrp-compare-downloads")
    return [btn.click(compare_models, [a, b, text, method], [status, plot, table, files], api_name="lrp_compare")]


def build(target_box) -> list:
    """The section; ``target_box(res, label, elem_id)`` is the tab's target dropdown. Returns its events."""
    ex = lrp.example_result("flow")
    with gr.Accordion("Layers: how the relevance passes through attention, SSM layers and MLPs", open=True):
        gr.Markdown(NOTE, elem_classes="lw-explain")
        with gr.Row():
            model = gr.Dropdown(list(lrp.FLOW_MODELS), value=ex.data["model"] if ex else lrp.FLOW_MODELS[0],
                                allow_custom_value=True, label="Model (a hybrid shows every kind)",
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
    return [btn.click(explain_layers, [model, text, target], [status, plot, table, files], api_name="lrp_flow")] + \
        build_compare()


AGREEMENT_ITEMS = (  # committed item, model, why it may be missing
    ("agreement", "mamba-lm", ""),
    ("agreement-smollm2", "smollm2-135m",
     " (SmolLM2-135M: 135 M parameters, 300 sentences x every method; not computed on this 2-core machine yet)"))


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
