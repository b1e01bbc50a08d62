"""Tab "Mix-LN": committed Pre/Post/Mix-LN runs, a live run streamed while it trains, and layer diagnostics
(gradient norms, angular distance, layer removal) of the runs or of any causal LM from the model picker.
Gradio wiring only: every handler calls :mod:`core.mixln`'s service."""
from __future__ import annotations

import gradio as gr

import core.mixln as mixln
from core.figures import message_figure
from ui.errors import user_errors
from ui.header import AppContext
from ui.stopping import job, stop
from ui.widgets import downloads_box, downloads_update, finite_slider, frame

TITLE = "Mix-LN"
DEFAULT_RUNS = list(mixln.DEFAULT_RUNS)
INTRO = ("**Mix-LN** puts Post-LN in the first alpha x L layers and Pre-LN in the rest. The paper's claim, at 71 M to 1 B "
         "parameters: Pre-LN's deep layers get small gradients and barely change the hidden state, and Mix-LN puts them "
         "to work and trains to a lower loss. Below: small deep-and-narrow runs committed with the project (1.1 M "
         "parameters at 12 layers, 1.7 M at 24; 3,000 steps, equal data), with the unigram and bigram levels of the "
         "training text on every loss chart; what they show at this scale is in each status line. Beside them: the "
         "two follow-ups (LayerNorm Scaling, from the same lab, and Peri-LN), DeepNorm with the Mix-LN authors' "
         "constants and with DeepNet's own formula, and the embedding init both ways; *What reproduces* says claim "
         "by claim what the runs show. Then a learning-rate sweep, a live run, and the same diagnostics for any "
         "model in the picker.")
LIVE = mixln.LiveRequest()  # the live run's defaults


@user_errors
def runs_loss(names):
    return mixln.loss_result(names).figures["loss"]


@user_errors
def runs_gradnorms(names, kind="param", step=None):
    return mixln.gradnorms_result(names, kind, step).figures["gradnorms"]


def runs_compare():
    res = mixln.compare_result()
    return frame(res.tables["compare"]), res.figures["compare"]


def runs_reproduces() -> tuple[str, str, str, str]:
    """(status, claims table, init table, follow-ups table) as Markdown, computed from the committed runs; the runs
    of the recipe not committed yet follow the follow-ups' table."""
    res = mixln.reproduces_result()
    md = res.data["markdown"]
    return res.status, md["claims"], md["init"], (md["followups"] + f"\n\nSources: {res.data['sources']}\n\n"
                                                  f"**Runs of the recipe not committed yet**\n\n{md['pending']}")


def runs_sweep():
    return mixln.sweep_result().figures["sweep"]


@user_errors
def runs_curves(set_name="main"):
    """(loss figure, perplexity figure, status) of the set's placements over seeds: mean line, min-max band."""
    loss, ppl = (mixln.curves_result(None, set_name, m) for m in ("loss", "perplexity"))
    return loss.figures["curves"], ppl.figures["curves"], loss.status


def runs_lr_sweep():
    res = mixln.lr_sweep_result()
    return res.figures["lr-sweep"], res.status


def runs_depth():
    res = mixln.depth_result()
    return res.figures["depth"], res.status


@user_errors
def run_angular(name):
    return mixln.angular_distance_result(name).figures["angular"]


@user_errors
def runs_removal(names):
    return mixln.layer_removal_result(names).figures["removal"]


@user_errors
def live_train(norm, alpha, layers, steps, request: gr.Request = None, progress=gr.Progress()):
    """Train a small model and stream (status, loss figure, grad-norm figure) while it trains."""
    updates = mixln.live_run(norm, alpha, layers, steps, job(request, progress))
    yield "Preparing the tokenizer and data...", gr.skip(), gr.skip()
    last = None
    for last in updates:
        yield last.status, last.figures["loss"], last.figures["gradnorms"]
    if last is None:
        yield "Nothing ran.", gr.skip(), gr.skip()


@user_errors
def model_angular(ref, samples, request: gr.Request = None, progress=gr.Progress()):
    res = mixln.angular_distance_result(ref, samples, 64, progress=job(request, progress))
    return res.status, res.figures["angular"], downloads_update(res)


@user_errors
def model_removal(ref, samples, request: gr.Request = None, progress=gr.Progress()):
    res = mixln.layer_removal_result([ref], samples, 64, progress=job(request, progress))
    return res.status, res.figures["removal"], downloads_update(res)


def _plot(value, label: str, elem_id: str):
    return gr.Plot(show_label=False, value=value, label=label, elem_id=elem_id)


def build(ctx: AppContext) -> None:
    have = mixln.list_runs()
    default = [n for n in DEFAULT_RUNS if n in have] or have[:3]
    compare = mixln.compare_result() if have else None
    gr.Markdown(INTRO, elem_classes="lw-explain")
    with gr.Accordion("Committed runs", open=True):
        with gr.Row():
            picked = gr.CheckboxGroup(choices=have, value=default, label="Runs", elem_id="mixln-runs", scale=3)
            kind = gr.Radio([(label, k) for k, label in mixln.GRADIENT_KINDS.items()], value="param",
                            label="Gradient norm of", scale=2)
            gstep = finite_slider(0, mixln.RECIPE_TRAIN["steps"], value=mixln.RECIPE_TRAIN["steps"], step=10,
                                  label="Training step shown (solid lines)", scale=2)
        gr.Markdown(mixln.settings_text(), elem_id="mixln-settings", elem_classes="lw-explain")
        gr.Markdown(compare.status if compare else "", elem_id="mixln-compare-status")
        gr.Dataframe(value=frame(compare.tables["compare"]) if compare else None, interactive=False,
                     label="Comparison at equal steps (mean, std, min, max over n_seeds)", elem_id="mixln-compare-table")
        downloads_box(compare, "Downloads: the comparison (JSON, CSV, HTML)", "mixln-compare-downloads")
        with gr.Row():
            loss_plot = _plot(runs_loss(default) if default else None, "Loss", "mixln-loss")
            grad_plot = _plot(runs_gradnorms(default) if default else None, "Gradient norms", "mixln-gradnorms")
        _plot(compare.figures["compare"] if compare else None, "Comparison", "mixln-compare")
        status, claims, init, followups = runs_reproduces() if have else ("", "", "", "")
        gr.Markdown("#### What reproduces\n" + status, elem_id="mixln-reproduces-status")
        gr.Markdown(claims, elem_id="mixln-reproduces", elem_classes="lw-table")
        gr.Markdown("#### The init question: embedding std 0.02 against the recipe's sqrt(2/5)\n" + init,
                    elem_id="mixln-init", elem_classes="lw-table")
        gr.Markdown("#### The follow-ups' published perplexities beside these runs\n" + followups,
                    elem_id="mixln-followups", elem_classes="lw-table")
        _plot(runs_sweep() if have else None, "Alpha sweep", "mixln-sweep")
        curves = runs_curves() if have else (None, None, "")
        depth_set = gr.Radio(mixln.set_choices(), value="main", label="Seed curves of the run set", elem_id="mixln-curves-set")
        curves_status = gr.Markdown(curves[2], elem_id="mixln-curves-status")
        curves_loss = _plot(curves[0], "Held-out loss over seeds", "mixln-curves-loss")
        curves_ppl = _plot(curves[1], "Held-out perplexity over seeds", "mixln-curves-perplexity")
        lr, depth = (runs_lr_sweep(), runs_depth()) if have else ((None, ""), (None, ""))
        gr.Markdown(lr[1], elem_id="mixln-lr-status")
        _plot(lr[0], "Learning-rate sweep", "mixln-lr-sweep")
        gr.Markdown(depth[1], elem_id="mixln-depth-status")
        _plot(depth[0], "12 vs 24 layers", "mixln-depth")
        one = gr.Dropdown(choices=have, value=(default or [None])[-1], label="Run for the angular-distance heatmap")
        angular_plot = _plot(run_angular(one.value) if one.value else None, "Angular distance", "mixln-run-angular")
        removal_plot = _plot(runs_removal(default) if default else None, "Layer removal", "mixln-run-removal")
    with gr.Accordion("Live run (a small model, trained here in about a minute)", open=True):
        with gr.Row():
            norm = gr.Radio(mixln.placement_choices(), value=LIVE.placement, label="Norm placement", scale=3)
            alpha = finite_slider(0, 1, value=LIVE.alpha, step=0.125,
                                  label="alpha (Mix-LN: fraction of Post-LN layers)", scale=2)
            layers = finite_slider(2, 16, value=LIVE.layers, step=1, label="layers", scale=1)
            steps = finite_slider(10, 400, value=LIVE.steps, step=10, label="steps", scale=1)
        with gr.Row():
            start = gr.Button("Start live run", variant="primary", elem_id="mixln-live-start")
            stop_btn = gr.Button("Stop", variant="stop", elem_id="mixln-live-stop")
        live_status = gr.Markdown("Press *Start live run*: width 64, batch 8 x 64 tokens, Adam with warmup and cosine "
                                  "decay; curves update while it trains.", elem_id="mixln-live-status")
        with gr.Row():
            live_loss = _plot(message_figure("Press Start live run", "Live run: loss"), "Live loss", "mixln-live-loss")
            live_grad = _plot(message_figure("Press Start live run", "Live run: gradient norm per layer"),
                              "Live gradient norms", "mixln-live-gradnorms")
    with gr.Accordion("Analyse the model from the picker (any causal LM, e.g. smollm2-135m)", open=True):
        with gr.Row():
            samples = finite_slider(1, 32, value=4, step=1, label="held-out sequences (64 tokens each)", scale=2)
            ang_btn = gr.Button("Angular distance", elem_id="mixln-model-angular-btn", scale=1)
            rem_btn = gr.Button("Layer removal", elem_id="mixln-model-removal-btn", scale=1)
        model_status = gr.Markdown("Uses the model chosen at the top of the page; results are cached, so asking "
                                   "again is instant.", elem_id="mixln-model-status")
        model_ang = _plot(message_figure("Press Angular distance", "Angular distance of the picked model"),
                          "Angular distance (model)", "mixln-model-angular")
        model_rem = _plot(message_figure("Press Layer removal", "Layer removal on the picked model"),
                          "Layer removal (model)", "mixln-model-removal")
        model_files = downloads_box(None, "Downloads: the last analysis (JSON, CSV, HTML)", "mixln-model-downloads")

    depth_set.change(runs_curves, inputs=depth_set, outputs=[curves_loss, curves_ppl, curves_status],
                     api_name="mixln_runs_curves")
    picked.change(runs_loss, inputs=picked, outputs=loss_plot, api_name="mixln_runs_loss")
    picked.change(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_runs_gradnorms")
    picked.change(runs_removal, inputs=picked, outputs=removal_plot, api_name="mixln_runs_removal")
    kind.change(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_gradnorm_kind")
    gstep.release(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_gradnorm_step")
    one.change(run_angular, inputs=one, outputs=angular_plot, api_name="mixln_run_angular")
    running = start.click(live_train, inputs=[norm, alpha, layers, steps], outputs=[live_status, live_loss, live_grad],
                          api_name="mixln_live_train", concurrency_limit=1)
    stop_btn.click(stop, outputs=live_status, cancels=[running], api_name="mixln_live_stop")
    ang_btn.click(model_angular, inputs=[ctx.model, samples], outputs=[model_status, model_ang, model_files],
                  api_name="mixln_model_angular")
    rem_btn.click(model_removal, inputs=[ctx.model, samples], outputs=[model_status, model_rem, model_files],
                  api_name="mixln_model_removal")
