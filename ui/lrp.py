"""Tab "MambaLRP": relevance heatmaps for Mamba models over text and images, beside the baselines, and the
conservation and faithfulness evaluation.

The examples come from ``assets/lrp/examples.json`` and the evaluation from ``assets/lrp/evaluation/`` so they show
at once; anything else is computed (the embedded models explain a sentence in well under a second). Logic lives
in ``core.lrp``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from core.errors import LayerwiseError
from core.figures import message_figure, write_output
from core.lrp import METHODS
from core.lrp import demo
from core.lrp import figures as F
from ui.errors import user_errors
from ui.header import AppContext
from ui.stopping import progress_callback, stop_flag

TITLE = "MambaLRP"
TOP = -1  # the target dropdown's "top prediction"
GAMMA_LAYERS = ("in_proj", "out_proj", "conv")


# ---- inputs -------------------------------------------------------------------------------------------------------
def rules_from(silu, ssm, gate, norm, gamma, gamma_layers) -> dict:
    """The rule toggles as :func:`core.lrp.demo.rules_options` input; a blank gamma keeps the model's default
    (LRP-0 for text, LRP-gamma 0.25 for images)."""
    rules = {}
    for name, on in (("silu", silu), ("ssm", ssm), ("gate", gate), ("norm", norm)):
        if not on:
            rules[name] = False
    if gamma is not None and gamma != "":
        layers = set(gamma_layers or [])
        for layer in GAMMA_LAYERS:
            rules[f"gamma_{layer}"] = float(gamma) if layer in layers else 0.0
    return rules


def _target(value):
    return None if value in (None, "", TOP) else int(value)


def _target_update(result: dict) -> dict:
    lm = result.get("model_kind") == "lm"
    preds = result["predictions"][:10] if lm else sorted(result["predictions"], key=lambda p: p["id"])
    choices = [("top prediction", TOP)] + [(demo.target_label(p, lm), p["id"]) for p in preds]
    ids = [c[1] for c in choices]
    return gr.update(choices=choices, value=result["target"] if result["target"] in ids else TOP)


# ---- result texts and files ---------------------------------------------------------------------------------------
def status_text(result: dict) -> str:
    preds = result["predictions"][:3]
    top = ", ".join(f"{p['name']!r} {100 * p['probability']:.1f}%" for p in preds)
    m = result["methods"].get("mambalrp")
    cons = (f" MambaLRP: sum of relevances **{m['total']:.4f}** vs logit **{m['logit']:.4f}** "
            f"(absorbed {m['absorbed']:+.2g})." if m else "")
    src = {"precomputed": " (precomputed example)"}.get(result.get("source", ""), "")
    what = "next token" if result.get("model_kind") == "lm" else "class"
    note = f"\n\n⚠️ {result['note']}" if result.get("note") else ""
    truth = f" True label: {result['label']}." if result.get("label") is not None else ""
    return (f"**{result['model']}** predicts {top}. Explaining {what} **{result['target_name']!r}** "
            f"(id {result['target']}).{truth}{cons}{src}{note}")


def _files(result: dict, fig) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="lrp-"))
    stem = f"lrp-{result['kind']}"
    return [str(write_output(folder / f"{stem}.json", result)),
            str(write_output(folder / f"{stem}.csv", rows=demo.rows(result))),
            str(write_output(folder / f"{stem}.html", figure=fig))]


def _summary(result: dict) -> pd.DataFrame:
    return pd.DataFrame(demo.summary_rows(result))


# ---- handlers -----------------------------------------------------------------------------------------------------
EXAMPLES = demo.read_examples()


def _text(model, text, methods, target, rules, progress=None) -> dict:
    found = demo.find_example(EXAMPLES, model=model, text=text, methods=list(methods or []), target=target,
                              rules=rules)
    if found is not None:
        return {**found, "source": "precomputed"}
    return demo.text_result(model, text, methods, target, rules, progress=progress)


@user_errors
def explain_text(model, text, methods, target, silu, ssm, gate, norm, gamma, gamma_layers,
                 request: gr.Request = None, progress=gr.Progress()):
    """Token relevances of the chosen methods for one text, a table of logits and sums, and downloads."""
    stop_flag(request).clear()
    rules = rules_from(silu, ssm, gate, norm, gamma, gamma_layers)
    res = _text(model, text, methods, _target(target), rules, progress_callback(progress, request))
    return (status_text(res), F.token_html(res), _summary(res), _target_update(res),
            _files(res, F.token_figure(res)))


@user_errors
def text_targets(model, text):
    """The target choices for a text: a classifier's classes, a language model's ten likeliest next tokens."""
    choices = [("top prediction", TOP)] + demo.target_choices(model, text)
    return gr.update(choices=choices, value=TOP)


def _image(model, image, sample, methods, target, rules, progress=None) -> dict:
    if image is None:
        found = demo.find_example(EXAMPLES, model=model, sample=int(sample), methods=list(methods or []),
                                  target=target, rules=rules)
        if found is not None:
            return {**found, "source": "precomputed"}
    return demo.image_result(model, image=image, sample=None if image is not None else sample, methods=methods,
                             target=target, rules=rules, progress=progress)


@user_errors
def explain_image(model, image, sample, methods, target, silu, ssm, gate, norm, gamma, gamma_layers,
                  request: gr.Request = None, progress=gr.Progress()):
    """Patch relevances of the chosen methods over an uploaded image or a test sample."""
    stop_flag(request).clear()
    rules = rules_from(silu, ssm, gate, norm, gamma, gamma_layers)
    res = _image(model, image, sample, methods, _target(target), rules, progress_callback(progress, request))
    fig = F.image_figure(res)
    return status_text(res), fig, _summary(res), _target_update(res), _files(res, fig)


def stop(request: gr.Request = None):
    stop_flag(request).set()
    return "Stopped. Press a button to start again."


# ---- default view -------------------------------------------------------------------------------------------------
def _first(kind: str) -> dict | None:
    for e in EXAMPLES:
        if e["kind"] == kind:
            return {**e["result"], "source": "precomputed"}
    return None


def _method_choices():
    return [(m.label, name) for name, m in METHODS.items()]


def _model_and_methods(models, label: str, kind: str):
    """A model dropdown (a listed model or a folder) and the method checkboxes, in one row."""
    with gr.Row():
        model = gr.Dropdown(list(models), value=models[0], allow_custom_value=True, label=label,
                            elem_id=f"lrp-{kind}-model", scale=1)
        methods = gr.CheckboxGroup(_method_choices(), value=list(demo.DEFAULT_METHODS), label="Methods",
                                   elem_id=f"lrp-{kind}-methods", scale=3)
    return model, methods


def _rules_block():
    with gr.Accordion("MambaLRP rules (switch one off for the paper's ablation)", open=False):
        with gr.Row():
            silu = gr.Checkbox(True, label="SiLU: identity rule")
            ssm = gr.Checkbox(True, label="SSM: A, B, C, Δ as constants")
            gate = gr.Checkbox(True, label="Gate: half rule")
            norm = gr.Checkbox(True, label="RMSNorm: LN-rule")
        with gr.Row():
            gamma = gr.Number(None, label="LRP-γ (blank: model default, 0 for text, 0.25 for images)", minimum=0,
                              elem_id="lrp-gamma")
            gamma_layers = gr.CheckboxGroup(list(GAMMA_LAYERS), value=list(GAMMA_LAYERS), label="γ applies to")
    return [silu, ssm, gate, norm, gamma, gamma_layers]


# ---- evaluation ---------------------------------------------------------------------------------------------------
EVAL_MODELS = ("mamba-sentiment", "vision-mamba-mnist")
SOURCES = {"precomputed": "precomputed", "computed": "computed now"}


def eval_text(res: dict) -> str:
    faith = res.get("faithfulness") or {}
    best = max(faith, key=lambda n: faith[n]["delta_af"]) if faith else None
    cons = (res.get("conservation") or {}).get("mambalrp")
    src = "from the results cache" if res.get("cached") else SOURCES.get(res.get("source", "computed"), "")
    acc = f", model accuracy on them {100 * res['accuracy']:.1f}%" if res.get("accuracy") is not None else ""
    parts = [f"**{res['model']}** on {res['dataset']}/{res['split']}: {res['n_done']} samples{acc}, K = "
             f"{res['steps']} flip steps, {res['baseline']} embedding as baseline ({src})."]
    if not res.get("complete", True):
        parts.append(f"Stopped early: {res['n_done']} of {res['n']} samples.")
    if best:
        parts.append(f"Highest ΔA^F: **{F._label(best)}** ({faith[best]['delta_af']:.3f}).")
    if cons:
        parts.append(f"MambaLRP conservation: mean |sum − logit| = **{cons['mean_abs_error']:.2g}**.")
    return " ".join(parts)


def eval_outputs(res: dict):
    faith, cons = res.get("faithfulness") or {}, res.get("conservation") or {}
    return (eval_text(res),
            F.conservation_figure(cons) if cons and res["n_done"] else message_figure("No samples."),
            F.faithfulness_figure(faith, res["fractions"]) if faith and res["n_done"] else message_figure("No samples."),
            pd.DataFrame(F.delta_rows(faith)) if faith and res["n_done"] else None)


@user_errors
def evaluate(model, n, steps, methods, request: gr.Request = None, progress=gr.Progress()):
    """Conservation and MoRF/LeRF faithfulness of the chosen methods over ``n`` test samples (cached)."""
    from core.lrp import evaluation
    flag = stop_flag(request)
    flag.clear()
    if n is None or steps is None:
        raise LayerwiseError("N and K must be whole numbers.", fix="Enter e.g. N = 50 and K = 10.")
    res = evaluation.evaluate(model, n=int(n), steps=int(steps), methods=demo.check_methods(methods),
                              progress=lambda f, msg: progress(f, desc=msg), should_stop=flag.is_set)
    folder = Path(tempfile.mkdtemp(prefix="lrp-eval-"))
    out = eval_outputs(res)
    files = [str(write_output(folder / "lrp-evaluation.json", res))]
    if res.get("faithfulness") and res["n_done"]:
        files += [str(write_output(folder / "lrp-delta-af.csv", rows=F.delta_rows(res["faithfulness"]))),
                  str(write_output(folder / "lrp-faithfulness.html", figure=out[2])),
                  str(write_output(folder / "lrp-conservation.html", figure=out[1]))]
    return (*out, files)


def show_precomputed(model):
    """The committed evaluation of a model, or a prompt to compute it."""
    from core.lrp import evaluation
    pre = evaluation.precomputed()
    if model in pre:
        return eval_outputs(pre[model])
    return ("No stored evaluation for this model: press Evaluate.", message_figure("Press Evaluate."),
            message_figure("Press Evaluate."), None)


def long_range_figure(res: dict):
    distances = {m: [d for row in st["distances"] for d in row] for m, st in res["methods_stats"].items()}
    return F.long_range_figure(distances, res["k"], f"Long range on {res['model']}: where the {res['k']} most "
                               f"relevant tokens of {res['n_done']} contexts ({res['length']} tokens) sit")


def key_token_rows(res: dict) -> list[dict]:
    rows = [{"method": res["labels"].get(m, m), f"key token in top-{res['k']} (%)": round(100 * v, 1)}
            for m, v in res["hit_rate"].items()]
    return sorted(rows, key=lambda r: -r[f"key token in top-{res['k']} (%)"])


def build_evaluation(stop_btn) -> list:
    from core.lrp import evaluation
    pre = evaluation.precomputed()
    first = pre.get(EVAL_MODELS[0])
    with gr.Accordion("Evaluation: conservation and faithfulness (ΔA^F)", open=True):
        gr.Markdown("Flip the most relevant units first (**MoRF**, solid: the logit should drop fast) or the least "
                    "relevant first (**LeRF**, dashed: it should stay high), replacing their embeddings with zeros. "
                    "**ΔA^F = A_LeRF − A_MoRF**: higher is more faithful. Conservation: on the dashed identity line "
                    "the relevances add up to the logit (Integrated Gradients adds up to logit − baseline logit).")
        with gr.Row():
            model = gr.Dropdown(list(EVAL_MODELS), value=EVAL_MODELS[0], allow_custom_value=True, label="Model",
                                elem_id="lrp-eval-model")
            n = gr.Number(value=first["n"] if first else 50, precision=0, minimum=1, label="Test samples N",
                          elem_id="lrp-eval-n")
            steps = gr.Number(value=first["steps"] if first else 10, precision=0, minimum=1, label="Flip steps K")
            methods = gr.CheckboxGroup(_method_choices(), value=list(first["methods"]) if first else list(METHODS),
                                       label="Methods", scale=3)
            btn = gr.Button("Evaluate", variant="primary", elem_id="lrp-eval-btn")
        out = eval_outputs(first) if first else show_precomputed(None)
        status = gr.Markdown(out[0], elem_id="lrp-eval-status")
        table = gr.Dataframe(out[3], interactive=False, label="ΔA^F per method (best first)", elem_id="lrp-delta-table")
        faith_plot = gr.Plot(out[2], label="Faithfulness", elem_id="lrp-faithfulness")
        cons_plot = gr.Plot(out[1], label="Conservation", elem_id="lrp-conservation")
        files = gr.File(label="Downloads: results (JSON), table (CSV), figures (HTML)", file_count="multiple",
                        height=100)
        with gr.Row():
            if "lm" in pre:
                gr.Plot(long_range_figure(pre["lm"]), label="Long range", elem_id="lrp-long-range")
            if "key-token" in pre:
                kt = pre["key-token"]
                with gr.Column():
                    gr.Markdown(f"**Ground truth** (`{kt['dataset']}`): a key token planted at a random position "
                                f"alone decides the label; how often each method ranks it first over {kt['n_done']} "
                                f"sequences (chance {100 * kt['chance']:.1f}%; the classifier is trained in the "
                                f"evaluation, {100 * kt['model']['accuracy']:.1f}% accurate).")
                    gr.Dataframe(pd.DataFrame(key_token_rows(kt)), interactive=False, label="Key-token hit rate",
                                 elem_id="lrp-key-token")
    show = model.change(show_precomputed, model, [status, cons_plot, faith_plot, table], api_name="lrp_eval_show")
    return [btn.click(evaluate, [model, n, steps, methods], [status, cons_plot, faith_plot, table, files],
                      api_name="lrp_evaluate"), show]


def build(ctx: AppContext) -> None:
    text_ex, image_ex = _first("text"), _first("image")
    gr.Markdown("**MambaLRP** makes Layer-wise Relevance Propagation conserve relevance through Mamba: SiLU, the "
                "selective SSM's input-dependent A, B, C, the multiplicative gate and RMSNorm get rules, and the "
                "relevances (gradient × input of the rewired network) add up to the explained logit. Red tokens or "
                "patches speak **for** the explained output, blue **against**. Compare MambaLRP with gradient × "
                "input, SmoothGrad, Integrated Gradients, attention rollout and MambaAttr; check conservation and "
                "faithfulness below. Models: the embedded **mamba-sentiment**, **mamba-lm** and "
                "**vision-mamba-mnist** (trained here, see their cards), or a local Mamba folder.",
                elem_id="lrp-intro")
    rules = _rules_block()
    stop_btn = gr.Button("Stop", variant="stop", size="sm", elem_id="lrp-stop")

    with gr.Accordion("Text: token relevance", open=True):
        text_model, text_methods = _model_and_methods(demo.TEXT_MODELS, "Text model (or a local Mamba folder)", "text")
        text = gr.Textbox(value=text_ex["text"] if text_ex else demo.TEXT_EXAMPLES["mamba-sentiment"][0], lines=2,
                          label=f"Text (cut to {demo.MAX_TOKENS} tokens)", elem_id="lrp-text")
        gr.Examples([[t, m] for m, ts in demo.TEXT_EXAMPLES.items() for t in ts], [text, text_model],
                    label="Examples (precomputed)")
        with gr.Row():
            text_target = gr.Dropdown([("top prediction", TOP)] + ([(f"{p['id']}: {p['name']}", p["id"]) for p in
                                      sorted(text_ex["predictions"], key=lambda p: p["id"])] if text_ex else []),
                                      value=TOP, label="Explain which class / next token", elem_id="lrp-text-target")
            targets_btn = gr.Button("List targets for this text", size="sm")
            text_btn = gr.Button("Explain text", variant="primary", elem_id="lrp-text-btn")
        text_status = gr.Markdown(status_text(text_ex) if text_ex else "Press Explain.", elem_id="lrp-text-status")
        text_view = gr.HTML(F.token_html(text_ex) if text_ex else "", elem_id="lrp-text-heatmap")
        text_table = gr.Dataframe(_summary(text_ex) if text_ex else None, interactive=False,
                                  label="Per method: explained logit, sum of relevances, time", elem_id="lrp-text-table")
        text_files = gr.File(label="Downloads: relevances (JSON, CSV) and the heatmap (HTML)", file_count="multiple",
                             height=100, elem_id="lrp-text-downloads")

    with gr.Accordion("Image: patch relevance", open=True):
        image_model, image_methods = _model_and_methods(demo.IMAGE_MODELS, "Image model", "image")
        with gr.Row():
            sample = gr.Number(value=image_ex["sample"] if image_ex else 0, precision=0, minimum=0,
                               label="mnist-5k test sample (used when no image is uploaded)", elem_id="lrp-sample")
            upload = gr.Image(type="numpy", image_mode=None, label="…or upload a digit (any size; made grey 28×28)",
                              height=160, elem_id="lrp-upload")
            image_target = gr.Dropdown([("top prediction", TOP)] + [(str(i), i) for i in range(10)], value=TOP,
                                       label="Explain which class", elem_id="lrp-image-target")
            image_btn = gr.Button("Explain image", variant="primary", elem_id="lrp-image-btn")
        image_status = gr.Markdown(status_text(image_ex) if image_ex else "Press Explain.",
                                   elem_id="lrp-image-status")
        image_plot = gr.Plot(F.image_figure(image_ex) if image_ex else message_figure("Press Explain image."),
                             label="Patch relevance", elem_id="lrp-image-plot")
        image_table = gr.Dataframe(_summary(image_ex) if image_ex else None, interactive=False,
                                   label="Per method: explained logit, sum of relevances, time")
        image_files = gr.File(label="Downloads: relevances (JSON, CSV) and the figure (HTML)", file_count="multiple",
                              height=100, elem_id="lrp-image-downloads")

    events = [
        text_btn.click(explain_text, [text_model, text, text_methods, text_target, *rules],
                       [text_status, text_view, text_table, text_target, text_files], api_name="lrp_explain_text"),
        text.submit(explain_text, [text_model, text, text_methods, text_target, *rules],
                    [text_status, text_view, text_table, text_target, text_files], api_name="lrp_explain_text_submit"),
        image_btn.click(explain_image, [image_model, upload, sample, image_methods, image_target, *rules],
                        [image_status, image_plot, image_table, image_target, image_files],
                        api_name="lrp_explain_image"),
    ]
    targets_btn.click(text_targets, [text_model, text], text_target, api_name="lrp_targets")
    events += build_evaluation(stop_btn)
    stop_btn.click(stop, None, text_status, cancels=events, api_name="lrp_stop")
