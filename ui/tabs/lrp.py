"""Tab "MambaLRP": relevance heatmaps for Mamba models over text and images beside the baselines, and the
conservation and faithfulness evaluation. Gradio wiring only: every handler calls :mod:`core.lrp`'s service."""
from __future__ import annotations

import gradio as gr

import core.lrp as lrp
from core.zoo import hub_choices
from ui.tabs import batch, layers
from ui.errors import user_errors
from ui.header import AppContext
from ui.stopping import job, stop
from ui.widgets import downloads_box, downloads_update, figure_or, finite_number, frame, image_file

TITLE = "MambaLRP"
TOP = lrp.TOP  # the target dropdown's "top prediction"
INTRO = ("**MambaLRP** makes Layer-wise Relevance Propagation conserve relevance through Mamba: SiLU, the selective "
         "SSM's input-dependent A, B, C, the multiplicative gate and RMSNorm get rules, and the relevances (gradient "
         "× input of the rewired network) add up to the explained logit. Red speaks **for** the explained output, "
         "blue **against**. Compare gradient × input, SmoothGrad, IG, rollout and MambaAttr; conservation and "
         "faithfulness below. Models: mamba-sentiment, mamba-lm, vision-mamba-mnist, mamba2-sentiment, hybrid-"
         "sentiment (AttnLRP on its attention), the transformers smollm2-135m, mathneuro-tiny, or a folder.")
EVAL_NOTE = ("**MoRF** (solid) flips the most relevant units first, **LeRF** (dashed) the least; **ΔA^F = A_LeRF − "
             "A_MoRF**, higher is more faithful; **π-Soft-NC / NS** ask the same with every method keeping the same "
             "expected share of the input. The table compares each method with MambaLRP **paired over the same "
             "samples** (± se, t, df, p) with the verdict rule's word. A conserving method sits at float error.")


def _rules(*values) -> dict:
    """The rule widgets' values (in the order of ``lrp.TOGGLES``) by switch name; core checks and translates them."""
    return dict(zip(lrp.TOGGLES, values))


def _choices(targets) -> list:
    return [("top prediction", TOP)] + list(targets)


def _targets(res) -> dict:
    choices = _choices(res.views["targets"])
    value = res.views["target"] if res.views["target"] in [c[1] for c in choices] else TOP
    return gr.update(choices=choices, value=value)


@user_errors
def explain_text(model, text, methods, target, silu, ssm, gate, norm, gamma, gamma_layers,
                 request: gr.Request = None, progress=gr.Progress()):
    """Token relevances of the chosen methods for one text, a table of logits and sums, and downloads."""
    res = lrp.text_result(model, text, methods, target, _rules(silu, ssm, gate, norm, gamma, gamma_layers),
                          job(request, progress))
    return res.status, res.views["html"], frame(res.views["summary"]), _targets(res), downloads_update(res)


@user_errors
def text_targets(model, text):
    """The target choices for a text: a classifier's classes, a language model's ten likeliest next tokens."""
    return gr.update(choices=_choices(lrp.target_choices(model, text)), value=TOP)


@user_errors
def explain_image(model, image, sample, methods, target, silu, ssm, gate, norm, gamma, gamma_layers,
                  request: gr.Request = None, progress=gr.Progress()):
    """Patch relevances of the chosen methods over an uploaded image or a test sample."""
    res = lrp.image_result(model, image, sample, methods, target, _rules(silu, ssm, gate, norm, gamma, gamma_layers),
                           job(request, progress))
    return res.status, res.figures["patches"], frame(res.views["summary"]), _targets(res), downloads_update(res)


def eval_outputs(res):
    """(status, conservation figure, faithfulness figure, ΔA^F table) of an evaluation Result."""
    return (res.status, figure_or(res, "conservation", "No samples."), figure_or(res, "faithfulness", "No samples."),
            frame(res.views.get("delta")))


@user_errors
def evaluate(model, n, steps, methods, request: gr.Request = None, progress=gr.Progress()):
    """Conservation and MoRF/LeRF faithfulness of the chosen methods over ``n`` test samples (cached)."""
    res = lrp.evaluation_result(model, n, steps, methods, job(request, progress))
    return (*eval_outputs(res), downloads_update(res))


@user_errors
def show_committed(model):
    """The committed evaluation of a model, or a prompt to compute it."""
    res = lrp.committed_result(model)
    if res is None:
        return ("No stored evaluation for this model: press Evaluate.", figure_or(None, "", "Press Evaluate."),
                figure_or(None, "", "Press Evaluate."), None, downloads_update(None))
    return (*eval_outputs(res), downloads_update(res))


def _model_and_methods(models, label: str, kind: str):
    with gr.Row():
        model = gr.Dropdown(list(models), value=models[0], allow_custom_value=True, label=label,
                            elem_id=f"lrp-{kind}-model", scale=1)
        methods = gr.CheckboxGroup(lrp.method_choices(), value=list(lrp.DEFAULT_METHODS), label="Methods",
                                   elem_id=f"lrp-{kind}-methods", scale=3)
    return model, methods


def _rules_block() -> list:
    with gr.Accordion("MambaLRP rules (switch one off for the paper's ablation)", open=False):
        with gr.Row():
            toggles = [gr.Checkbox(True, label=label) for label in lrp.RULE_SWITCHES.values()]
        with gr.Row():
            gamma = finite_number(None, label="LRP-γ (blank: model default, 0 for text, 0.25 for images)", minimum=0,
                                  maximum=lrp.MAX_GAMMA, elem_id="lrp-gamma")
            layers = gr.CheckboxGroup(list(lrp.GAMMA_LAYERS), value=list(lrp.GAMMA_LAYERS), label="γ applies to")
    return [*toggles, gamma, layers]


def _target_box(res, label: str, elem_id: str):
    return gr.Dropdown(_choices(res.views["targets"] if res else []), value=TOP, label=label, elem_id=elem_id)


def build_evaluation() -> list:
    first = lrp.committed_result(lrp.EVAL_MODELS[0])
    data = first.data if first else {"n": lrp.EVAL_N, "steps": lrp.EVAL_STEPS, "methods": list(lrp.METHODS)}
    with gr.Accordion("Evaluation: conservation and faithfulness (ΔA^F)", open=True):
        gr.Markdown(EVAL_NOTE, elem_classes="lw-explain")
        with gr.Row():
            model = gr.Dropdown(list(lrp.EVAL_MODELS), value=lrp.EVAL_MODELS[0], allow_custom_value=True,
                                label="Model", elem_id="lrp-eval-model")
            n = finite_number(value=data["n"], precision=0, minimum=1, maximum=lrp.MAX_EVAL_SAMPLES,
                              label="Test samples N",
                              elem_id="lrp-eval-n")
            steps = finite_number(data["steps"], precision=0, minimum=1, maximum=lrp.MAX_FLIP_STEPS,
                                  label="Flip steps K")
            methods = gr.CheckboxGroup(lrp.method_choices(), value=list(data["methods"]), label="Methods", scale=3)
            btn = gr.Button("Evaluate", variant="primary", elem_id="lrp-eval-btn")
        status, cons, faith, delta = eval_outputs(first) if first else show_committed(None)[:4]
        status = gr.Markdown(status, elem_id="lrp-eval-status")
        table = gr.Dataframe(delta, interactive=False, label="ΔA^F and π-Soft, paired", elem_id="lrp-delta-table")
        faith_plot = gr.Plot(faith, label="Faithfulness", elem_id="lrp-faithfulness")
        cons_plot = gr.Plot(cons, label="Conservation", elem_id="lrp-conservation")
        files = downloads_box(first, "Downloads: results (JSON), table (CSV), figures (HTML)", "lrp-eval-downloads")
        long_range, key_token = lrp.committed_result("lm"), lrp.committed_result("key-token")
        if long_range:
            gr.Plot(long_range.figures["long-range"], label="Long range", elem_id="lrp-long-range")
        if key_token:
            gr.Markdown(key_token.status)
            with gr.Row():
                gr.Dataframe(frame(key_token.views["hits"]), interactive=False, elem_id="lrp-key-token",
                             label="Key-token hit rate over seeds (mean, ± std, min, max)", scale=3)
                gr.Markdown(key_token.views["last-token"], elem_id="lrp-key-token-last")
        layers.ground_truths()
    outputs = [status, cons_plot, faith_plot, table, files]
    show = model.change(show_committed, model, outputs, api_name="lrp_eval_show")
    return [btn.click(evaluate, [model, n, steps, methods], outputs, api_name="lrp_evaluate"), show]


def build(ctx: AppContext) -> None:
    text_ex, image_ex = lrp.example_result("text"), lrp.example_result("image")
    gr.Markdown(INTRO, elem_id="lrp-intro", elem_classes="lw-explain")
    rules = _rules_block()
    with gr.Accordion("Text: token relevance", open=True):
        text_model, text_methods = _model_and_methods(lrp.TEXT_MODELS + tuple(hub_choices("lrp")),
                                                      "Text model (or a local folder)", "text")
        text = gr.Textbox(text_ex.data["text"] if text_ex else lrp.TEXT_EXAMPLES["mamba-sentiment"][0], lines=2,
                          label=f"Text (cut to {lrp.MAX_TOKENS} tokens)", info=lrp.cost_note(), elem_id="lrp-text")
        gr.Examples([[t, m] for m, ts in lrp.TEXT_EXAMPLES.items() for t in ts], [text, text_model],
                    label="Examples (precomputed)")
        with gr.Row():
            text_target = _target_box(text_ex, "Explain which class / next token", "lrp-text-target")
            targets_btn = gr.Button("List targets for this text", size="sm")
            text_btn = gr.Button("Explain text", variant="primary", elem_id="lrp-text-btn")
            stop_btn = gr.Button("Stop", variant="stop", elem_id="lrp-stop", scale=0, min_width=90)
        text_status = gr.Markdown(text_ex.status if text_ex else "Press Explain.", elem_id="lrp-text-status")
        text_view = gr.HTML(text_ex.views["html"] if text_ex else "", elem_id="lrp-text-heatmap")
        text_table = gr.Dataframe(frame(text_ex.views["summary"]) if text_ex else None, interactive=False,
                                  label="Per method: explained logit, sum of relevances, time", elem_id="lrp-text-table")
        text_files = downloads_box(text_ex, "Downloads: relevances (JSON, CSV) and the heatmap (HTML)",
                                   "lrp-text-downloads")
    with gr.Accordion("Image: patch relevance", open=True):
        image_model, image_methods = _model_and_methods(lrp.IMAGE_MODELS, "Image model", "image")
        with gr.Row():
            sample = finite_number(value=image_ex.data["sample"] if image_ex else 0, precision=0, minimum=0,
                                   label="mnist-5k test sample (used when no image is uploaded)", elem_id="lrp-sample")
            upload = image_file(image_mode=None, label="…or upload a digit (up to 16 Mpx; made grey 28×28)",
                                height=160, elem_id="lrp-upload")  # a path: decoded after its header is read
            image_target = _target_box(image_ex, "Explain which class", "lrp-image-target")
            image_btn = gr.Button("Explain image", variant="primary", elem_id="lrp-image-btn")
        image_status = gr.Markdown(image_ex.status if image_ex else "Press Explain.", elem_id="lrp-image-status")
        image_plot = gr.Plot(figure_or(image_ex, "patches", "Press Explain image."), label="Patch relevance",
                             elem_id="lrp-image-plot")
        image_table = gr.Dataframe(frame(image_ex.views["summary"]) if image_ex else None, interactive=False,
                                   label="Per method: explained logit, sum of relevances, time")
        image_files = downloads_box(image_ex, "Downloads: relevances (JSON, CSV) and the figure (HTML)",
                                    "lrp-image-downloads")
    text_in, text_out = [text_model, text, text_methods, text_target, *rules], [text_status, text_view, text_table,
                                                                                text_target, text_files]
    events = [text_btn.click(explain_text, text_in, text_out, api_name="lrp_explain_text"),
              text.submit(explain_text, text_in, text_out, api_name="lrp_explain_text_submit"),
              image_btn.click(explain_image, [image_model, upload, sample, image_methods, image_target, *rules],
                              [image_status, image_plot, image_table, image_target, image_files],
                              api_name="lrp_explain_image")]
    targets_btn.click(text_targets, [text_model, text], text_target, api_name="lrp_targets")
    events += layers.build(_target_box) + build_evaluation()
    stop_btn.click(stop, None, text_status, cancels=events, api_name="lrp_stop")
    batch.build()
