"""Tab "Mix-LN": committed Pre/Post/Mix-LN runs, a live run streamed while it trains, and layer diagnostics
(gradient norms, angular distance, layer removal) of the runs or of any causal LM from the model picker."""
from __future__ import annotations

import math

import gradio as gr
import pandas as pd

from core.errors import LayerwiseError
from core.mixln import analysis, runs
from core.mixln.figures import (angular_figure, compare_figure, gradnorm_figure, gradnorm_series, loss_figure,
                                removal_figure, run_color, sweep_figure)
from ui.errors import user_errors
from core.figures import message_figure
from ui.header import AppContext

TITLE = "Mix-LN"
DEFAULT_RUNS = ["pre-ln", "post-ln", "mix-ln-0.25"]
NORM_CHOICES = [("Pre-LN", "pre"), ("Post-LN", "post"), ("Mix-LN", "mix"), ("DeepNorm", "deepnorm"),
                ("Sandwich-LN", "sandwich")]


def _available(names):
    have = runs.list_runs()
    return [n for n in names if n in have]


def _curves(names):
    out = []
    for i, n in enumerate(names):
        r = runs.load_run(n)
        out.append({"label": r.label, "color": run_color(r.meta["norm"], r.meta["alpha"], i), "history": r.history})
    return out


# ---- committed runs ----------------------------------------------------------------------------------------

@user_errors
def runs_loss(names):
    names = list(names or [])
    if not names:
        raise LayerwiseError("no run chosen.", fix="tick at least one committed run.")
    return loss_figure(_curves(names), "Loss of the committed runs (equal steps)")


def _nearest_logged(res: dict, step: float) -> tuple[int, list[float]]:
    k = max([i for i, s in enumerate(res["steps"]) if s <= max(step, res["steps"][0])] or [0])
    return res["steps"][k], res["per_step"][k]


@user_errors
def runs_gradnorms(names, kind="param", step=None):
    names = list(names or [])
    if not names:
        raise LayerwiseError("no run chosen.", fix="tick at least one committed run.")
    results = [analysis.run_gradnorms(n, kind) for n in names]
    if step is not None:
        for r in results:
            r["final_step"], r["final"] = _nearest_logged(r, float(step))
    shown = results[0]["final_step"]
    return gradnorm_figure(gradnorm_series(results), f"Gradient norm per layer: init (dotted), step {shown} (solid)",
                           kind)


def runs_compare():
    rows = runs.compare_table()
    return pd.DataFrame(rows), compare_figure(rows)


def runs_sweep():
    return sweep_figure(runs.sweep_table())


@user_errors
def run_angular(name):
    return angular_figure(analysis.angular_result(name), f"Angular distance d(h_l, h_l+n): committed run {name}")


@user_errors
def runs_removal(names):
    names = list(names or [])
    if not names:
        raise LayerwiseError("no run chosen.", fix="tick at least one committed run.")
    results = []
    for n in names:
        r = analysis.removal_result(n)
        r["label"] = runs.load_run(n).label
        results.append(r)
    colors = [run_color(runs.load_run(n).meta["norm"], runs.load_run(n).meta["alpha"], i) for i, n in enumerate(names)]
    return removal_figure(results, "Layer removal: held-out loss increase when one layer is skipped", colors)


# ---- live run -----------------------------------------------------------------------------------------------

def _live_figs(history: dict, label: str, color: str, kind: str = "param"):
    loss = loss_figure([{"label": label, "color": color, "history": history}],
                       f"Live run ({label}): training and held-out loss")
    logs = history.get("grad_norms", [])
    series = []
    if logs:
        layers = list(range(len(logs[0][kind])))
        series.append({"label": f"at init (step {logs[0]['step']})", "color": color, "layers": layers,
                       "values": logs[0][kind], "dash": "dot"})
        if len(logs) > 1:
            series.append({"label": f"step {logs[-1]['step']}", "color": color, "layers": layers,
                           "values": logs[-1][kind]})
    grad = gradnorm_figure(series, f"Live run ({label}): gradient norm per layer", kind)
    return loss, grad


@user_errors
def live_train(norm, alpha, layers, steps, progress=gr.Progress()):
    """Train a small model and stream (status, loss figure, grad-norm figure) while it trains."""
    alpha = float(alpha)
    if math.isnan(alpha) or not 0.0 <= alpha <= 1.0:
        raise LayerwiseError(f"alpha = {alpha} is outside [0, 1].", fix="choose alpha between 0 and 1.")
    sizes = {**runs.LIVE_MODEL, "num_layers": int(layers)}
    tcfg = {**runs.LIVE_TRAIN, "steps": int(steps), "eval_every": max(5, int(steps) // 6)}
    tok = runs.ASSETS / "tokenizer.json"
    label = dict((v, k) for k, v in NORM_CHOICES)[norm] + (f" alpha {alpha:g}" if norm == "mix" else "")
    color = run_color(norm, alpha)
    progress(0, desc="tokenizing the corpora")
    yield "Preparing the tokenizer and data...", gr.skip(), gr.skip()
    last = None
    for ev in runs.train_run_iter(None, norm, alpha, sizes, tcfg, tok if tok.is_file() else None):
        last = ev
        if ev.kind == "step":
            progress(ev.step / ev.total_steps, desc=f"step {ev.step}/{ev.total_steps}")
        if ev.kind in ("eval", "grad_norms", "diverged", "stopped", "done"):
            h = ev.history.to_dict()
            loss = h["train"][-1]["loss"] if h["train"] else float("nan")
            msg = f"**{label}**, {int(layers)} layers: step {ev.step}/{ev.total_steps}, training loss {loss:.3f}"
            if h["eval"]:
                msg += f", held-out perplexity {h['eval'][-1]['perplexity']:.1f}"
            if ev.kind in ("diverged", "stopped", "done"):
                msg += f". **{h['status']}** {h['message']}"
            yield (msg, *_live_figs(h, label, color))
    if last is None:
        yield "Nothing ran.", gr.skip(), gr.skip()


# ---- any model -------------------------------------------------------------------------------------------------

def _progress_cb(progress):
    return lambda f, msg: progress(f, desc=msg)


@user_errors
def model_angular(ref, samples, progress=gr.Progress()):
    res = analysis.angular_result(ref, int(samples), 64, progress=_progress_cb(progress))
    note = " (from the results cache)" if res["cached"] else ""
    return (f"Angular distance of **{res['subject']}**: {res['num_layers']} layers, {int(samples)} held-out "
            f"Wikipedia sequences of 64 tokens{note}.", angular_figure(res))


@user_errors
def model_removal(ref, samples, progress=gr.Progress()):
    res = analysis.removal_result(ref, int(samples), 64, progress=_progress_cb(progress))
    note = " (from the results cache)" if res["cached"] else ""
    worst = max(range(len(res["layers"])), key=lambda i: res["loss_increase"][i] or 0)
    return (f"Layer removal on **{res['subject']}**: baseline held-out perplexity {res['baseline_perplexity']:.1f}; "
            f"skipping layer {worst} hurts most (+{res['loss_increase'][worst]:.3f} nats){note}.",
            removal_figure([res], f"Layer removal: {res['subject']}"))


# ---- the tab -----------------------------------------------------------------------------------------------

def build(ctx: AppContext) -> None:
    have = runs.list_runs()
    default = _available(DEFAULT_RUNS) or have[:3]
    gr.Markdown("**Mix-LN** puts Post-LN in the first alpha x L layers and Pre-LN in the rest. Pre-LN's deep layers "
                "get small gradients and barely change the hidden state; Post-LN's early layers do. Below: small "
                "deep-and-narrow runs committed with the project (12 layers, width 64, equal steps, same seed and "
                "data), a live run, and the same diagnostics for any model in the picker.")
    with gr.Accordion("Committed runs", open=True):
        with gr.Row():
            picked = gr.CheckboxGroup(choices=have, value=default, label="Runs", elem_id="mixln-runs", scale=3)
            kind = gr.Radio([("parameter gradients", "param"), ("gradient at the layer input", "input")],
                            value="param", label="Gradient norm of", scale=2)
            gstep = gr.Slider(0, runs.RECIPE_TRAIN["steps"], value=runs.RECIPE_TRAIN["steps"], step=10,
                              label="Training step shown (solid lines)", scale=2)
        summary = gr.Dataframe(value=lambda: runs_compare()[0], interactive=False, label="Comparison at equal steps",
                               elem_id="mixln-compare-table")
        with gr.Row():
            loss_plot = gr.Plot(show_label=False, value=runs_loss(default) if default else None, label="Loss", elem_id="mixln-loss")
            grad_plot = gr.Plot(show_label=False, value=runs_gradnorms(default) if default else None, label="Gradient norms",
                                elem_id="mixln-gradnorms")
        with gr.Row():
            compare_plot = gr.Plot(show_label=False, value=runs_compare()[1] if have else None, label="Comparison",
                                   elem_id="mixln-compare")
            sweep_plot = gr.Plot(show_label=False, value=runs_sweep() if have else None, label="Alpha sweep", elem_id="mixln-sweep")
        with gr.Row():
            one = gr.Dropdown(choices=have, value=(default or [None])[-1], label="Run for the angular-distance heatmap",
                              scale=1)
        angular_plot = gr.Plot(show_label=False, value=run_angular(one.value) if one.value else None, label="Angular distance",
                               elem_id="mixln-run-angular")
        removal_plot = gr.Plot(show_label=False, value=runs_removal(default) if default else None, label="Layer removal",
                               elem_id="mixln-run-removal")
    with gr.Accordion("Live run (a small model, trained here in about a minute)", open=True):
        with gr.Row():
            norm = gr.Radio(NORM_CHOICES, value="mix", label="Norm placement", scale=3)
            alpha = gr.Slider(0, 1, value=0.25, step=0.125, label="alpha (Mix-LN: fraction of Post-LN layers)", scale=2)
            layers = gr.Slider(2, 16, value=runs.LIVE_MODEL["num_layers"], step=1, label="layers", scale=1)
            steps = gr.Slider(10, 400, value=runs.LIVE_TRAIN["steps"], step=10, label="steps", scale=1)
        with gr.Row():
            start = gr.Button("Start live run", variant="primary", elem_id="mixln-live-start")
            stop = gr.Button("Stop", variant="stop", elem_id="mixln-live-stop")
        live_status = gr.Markdown("Press *Start live run*: width 64, batch 8 x 64 tokens, Adam with warmup and cosine "
                                  "decay; curves update while it trains.", elem_id="mixln-live-status")
        with gr.Row():
            live_loss = gr.Plot(show_label=False, label="Live loss", elem_id="mixln-live-loss",
                                value=message_figure("Press Start live run", "Live run: loss"))
            live_grad = gr.Plot(show_label=False, label="Live gradient norms", elem_id="mixln-live-gradnorms",
                                value=message_figure("Press Start live run", "Live run: gradient norm per layer"))
    with gr.Accordion("Analyse the model from the picker (any causal LM, e.g. smollm2-135m)", open=True):
        with gr.Row():
            samples = gr.Slider(1, 32, value=4, step=1, label="held-out sequences (64 tokens each)", scale=2)
            ang_btn = gr.Button("Angular distance", elem_id="mixln-model-angular-btn", scale=1)
            rem_btn = gr.Button("Layer removal", elem_id="mixln-model-removal-btn", scale=1)
        model_status = gr.Markdown("Uses the model chosen at the top of the page; results are cached, so asking "
                                   "again is instant.", elem_id="mixln-model-status")
        model_ang = gr.Plot(show_label=False, label="Angular distance (model)", elem_id="mixln-model-angular",
                            value=message_figure("Press Angular distance", "Angular distance of the picked model"))
        model_rem = gr.Plot(show_label=False, label="Layer removal (model)", elem_id="mixln-model-removal",
                            value=message_figure("Press Layer removal", "Layer removal on the picked model"))

    picked.change(runs_loss, inputs=picked, outputs=loss_plot, api_name="mixln_runs_loss")
    picked.change(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_runs_gradnorms")
    picked.change(runs_removal, inputs=picked, outputs=removal_plot, api_name="mixln_runs_removal")
    kind.change(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_gradnorm_kind")
    gstep.release(runs_gradnorms, inputs=[picked, kind, gstep], outputs=grad_plot, api_name="mixln_gradnorm_step")
    one.change(run_angular, inputs=one, outputs=angular_plot, api_name="mixln_run_angular")
    running = start.click(live_train, inputs=[norm, alpha, layers, steps], outputs=[live_status, live_loss, live_grad],
                          api_name="mixln_live_train", concurrency_limit=1)
    stop.click(lambda: "Stopped.", outputs=live_status, cancels=[running], api_name="mixln_live_stop")
    ang_btn.click(model_angular, inputs=[ctx.model, samples], outputs=[model_status, model_ang],
                  api_name="mixln_model_angular")
    rem_btn.click(model_removal, inputs=[ctx.model, samples], outputs=[model_status, model_rem],
                  api_name="mixln_model_removal")
