"""Tab "MathNeuro": which parameters carry math, found with forward passes only. The page opens on precomputed
analyses of the embedded model; the buttons recompute for the model in the header (cached by model fingerprint +
parameters). Gradio wiring only: every handler calls :mod:`core.mathneuro`'s service."""
from __future__ import annotations

import gradio as gr

import core.mathneuro as mn
from ui.errors import user_errors
from ui.header import AppContext
from ui.stopping import job, stop
from ui.widgets import downloads_box, downloads_update, figure_or, finite_number, frame

TITLE = "MathNeuro"
D = mn.DEFAULTS
MAX_SAMPLES = 1000  # per dataset in the app (a Space visitor cannot queue an hour's work); the CLI has no cap
INTRO = ("**MathNeuro** scores every weight by |W|·‖X‖ on math inputs and on non-math inputs, keeps each matrix's top "
         "K for both, and calls *math-specific* the weights in the math top-K only. Pruning them should remove math "
         "and keep the rest; scaling them slightly can help math. Defaults: the embedded **mathneuro-tiny** (a "
         "0.93M-parameter Llama trained here on arithmetic word problems and review sentiment), shown at once from "
         "precomputed results; pick `smollm2-135m` at the top with `gsm-symbolic` and `mmlu`/`logiqa` (loss, small N) "
         "for a real model.")


@user_errors
def layers(model, math, nonmath, proportion, method, n, value="count",
           request: gr.Request = None, progress=gr.Progress()):
    """Layer distribution (count or share per layer and module type) for one or two non-math datasets."""
    res = mn.layer_distribution_result(model, math, nonmath, n, proportion, method, progress=job(request, progress),
                                       show=value)
    return res.status, res.figures["layers"], downloads_update(res)


@user_errors
def effect(model, math, nonmath, proportion, methods, n, eval_n, metric,
           request: gr.Request = None, progress=gr.Progress()):
    """Math vs non-math metric after pruning each method's set, per non-math dataset."""
    res = mn.effect_result(model, math, nonmath, n, proportion, methods, eval_n, metric,
                           progress=job(request, progress))
    return res.status, res.figures["effect"], frame(res.views["effect"]), downloads_update(res)


@user_errors
def sweep_proportion(model, math, nonmath, method, n, eval_n, metric,
                     request: gr.Request = None, progress=gr.Progress()):
    """Math / non-math metric after pruning the set found with each K (first non-math dataset)."""
    res = mn.proportion_sweep_result(model, math, nonmath, n, None, method, eval_n, metric,
                                     progress=job(request, progress))
    return res.status, res.figures["proportion-sweep"], downloads_update(res)


@user_errors
def sweep_scale(model, math, nonmath, proportion, method, factor, n, eval_n, metric,
                request: gr.Request = None, progress=gr.Progress()):
    """Math / non-math metric with the set scaled by each factor (the default factors plus the chosen one)."""
    res = mn.scale_sweep_result(model, math, nonmath, n, proportion, method, None, eval_n, metric,
                                progress=job(request, progress), factor=factor)
    return res.status, res.figures["scale-sweep"], downloads_update(res)


@user_errors
def consistency(model, math, nonmath, method, n, request: gr.Request = None, progress=gr.Progress()):
    """Overlap of the set from 1..N random samples with the set from all N, for K = 1, 5, 10%."""
    res = mn.consistency_result(model, math, nonmath, n, None, method, progress=job(request, progress))
    return res.status, res.figures["consistency"], downloads_update(res)


@user_errors
def drill(model, math, nonmath, proportion, method, n, matrix, request: gr.Request = None, progress=gr.Progress()):
    """Heatmap of one weight matrix: where its selected entries sit."""
    res = mn.drill_result(model, math, nonmath, n, proportion, method, matrix, progress=job(request, progress))
    return (res.status, res.figures["drill"], gr.update(choices=res.views["matrices"], value=res.data["name"]),
            downloads_update(res))


@user_errors
def matrices(model):
    """The scored weight matrices of the chosen model (drill-down choices)."""
    names, first = mn.matrix_choices(model)
    return gr.update(choices=names, value=first)


def build(ctx: AppContext) -> None:
    ex = mn.example_results()
    math_names, nonmath_names = mn.dataset_names()
    method_choices = [(m.label, name) for name, m in mn.METHODS.items()]
    shown = ex.get("effect")
    gr.Markdown(INTRO, elem_id="mathneuro-intro", elem_classes="lw-explain")
    with gr.Row():
        math = gr.Dropdown(math_names, value=D["math"], label="Math dataset", allow_custom_value=True,
                           elem_id="mathneuro-math")
        nonmath = gr.Dropdown(nonmath_names, value=D["nonmath"], multiselect=True, max_choices=mn.MAX_NONMATH,
                              label="Non-math dataset(s): one or two", allow_custom_value=True,
                              elem_id="mathneuro-nonmath")
        method = gr.Dropdown(method_choices, value=D["method"], label="Method", elem_id="mathneuro-method")
        metric = gr.Radio(list(mn.METRICS), value=D["metric"], label="Metric (auto: accuracy where the model can)")
    with gr.Row():
        proportion = finite_number(value=D["proportion"], label="K: top share per matrix, in (0, 1]", minimum=0,
                                   maximum=1, step=0.01, elem_id="mathneuro-k")
        factor = finite_number(value=D["factor"], label="Scale factor", step=0.05, elem_id="mathneuro-factor")
        n = finite_number(value=D["n"], label="N: identification samples per dataset", precision=0, minimum=1,
                          maximum=MAX_SAMPLES, elem_id="mathneuro-n")
        eval_n = finite_number(value=D["eval_n"], label="Test items per dataset", precision=0, minimum=1,
                               maximum=MAX_SAMPLES)
        stop_btn = gr.Button("Stop", variant="stop", elem_id="mathneuro-stop")
    status = gr.Markdown(shown.status if shown else "Press a button to compute.", elem_id="mathneuro-status")
    downloads = downloads_box(shown, "Downloads (JSON, CSV) of the last analysis", "mathneuro-downloads")

    def plot(name: str, label: str, elem_id: str):
        return gr.Plot(figure_or(ex.get(name), name, "Press the button to compute."), label=label, elem_id=elem_id)

    with gr.Accordion("Pruning effect (paper Fig. 2)", open=True):
        with gr.Row():
            methods = gr.CheckboxGroup(method_choices, value=D["methods"], label="Methods", scale=3)
            effect_btn = gr.Button("Pruning effect", variant="primary", elem_id="mathneuro-effect-btn", scale=1)
        effect_plot = plot("effect", "Pruning effect", "mathneuro-effect")
        effect_df = gr.Dataframe(frame(shown.views["effect"]) if shown else None, interactive=False,
                                 label="Before / after pruning", elem_id="mathneuro-effect-table")
    with gr.Accordion("Layer distribution (paper Fig. 10)", open=True):
        with gr.Row():
            value = gr.Radio([(label, v) for v, label in mn.SHOW.items()], value=D["show"], label="Show", scale=3)
            layers_btn = gr.Button("Layer distribution", elem_id="mathneuro-layers-btn", scale=1)
        layers_plot = plot("layers", "Layer distribution", "mathneuro-layers")
    with gr.Accordion("Sweeps: proportion K (Fig. 16) and scale factor (Fig. 29)", open=True):
        with gr.Row():
            sweep_k_btn = gr.Button("Proportion sweep", elem_id="mathneuro-sweep-k-btn")
            sweep_s_btn = gr.Button("Scale-factor sweep", elem_id="mathneuro-sweep-scale-btn")
        with gr.Row():
            sweep_k_plot = plot("proportion-sweep", "Proportion sweep", "mathneuro-sweep-k")
            sweep_s_plot = plot("scale-sweep", "Scale-factor sweep", "mathneuro-sweep-scale")
    with gr.Accordion("Consistency (Fig. 6) and drill-down", open=True):
        with gr.Row():
            cons_btn = gr.Button("Consistency", elem_id="mathneuro-consistency-btn")
            drill_ex = ex.get("drill")
            drill_matrix = gr.Dropdown(choices=drill_ex.views["matrices"] if drill_ex else [],
                                       value=drill_ex.data["name"] if drill_ex else None, allow_custom_value=True,
                                       label="Weight matrix", elem_id="mathneuro-matrix")
            list_btn = gr.Button("List matrices of the model", size="sm")
            drill_btn = gr.Button("Drill down", elem_id="mathneuro-drill-btn")
        with gr.Row():
            cons_plot = plot("consistency", "Consistency", "mathneuro-consistency")
            drill_plot = plot("drill", "Drill-down", "mathneuro-drill")

    events = [
        effect_btn.click(effect, [ctx.model, math, nonmath, proportion, methods, n, eval_n, metric],
                         [status, effect_plot, effect_df, downloads], api_name="mathneuro_effect"),
        layers_btn.click(layers, [ctx.model, math, nonmath, proportion, method, n, value],
                         [status, layers_plot, downloads], api_name="mathneuro_layers"),
        sweep_k_btn.click(sweep_proportion, [ctx.model, math, nonmath, method, n, eval_n, metric],
                          [status, sweep_k_plot, downloads], api_name="mathneuro_sweep_proportion"),
        sweep_s_btn.click(sweep_scale, [ctx.model, math, nonmath, proportion, method, factor, n, eval_n, metric],
                          [status, sweep_s_plot, downloads], api_name="mathneuro_sweep_scale"),
        cons_btn.click(consistency, [ctx.model, math, nonmath, method, n], [status, cons_plot, downloads],
                       api_name="mathneuro_consistency"),
        drill_btn.click(drill, [ctx.model, math, nonmath, proportion, method, n, drill_matrix],
                        [status, drill_plot, drill_matrix, downloads], api_name="mathneuro_drill"),
    ]
    list_btn.click(matrices, ctx.model, drill_matrix, api_name="mathneuro_matrices")
    stop_btn.click(stop, None, status, cancels=events, api_name="mathneuro_stop")
