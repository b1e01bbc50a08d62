"""Tab "MathNeuro": which parameters carry math, where they sit, and what pruning or scaling them does.

The default view (the embedded model ``mathneuro-tiny``) is read from ``assets/mathneuro/examples.json``; other
settings compute (cached by model fingerprint + parameters). Logic lives in ``core.mathneuro``.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from core.figures import message_figure
from core.errors import LayerwiseError
from core.mathneuro import METHODS
from core.mathneuro import demo
from core.mathneuro.figures import FIGURES, layers_figure
from ui.errors import user_errors
from ui.stopping import progress_callback, stop_flag
from ui.header import AppContext

TITLE = "MathNeuro"
D = demo.DEFAULTS


def _start(request):
    stop_flag(request).clear()


def _files(analysis: str, result: dict) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix=f"mathneuro-{analysis}-"))
    return [demo.write_result(folder / f"mathneuro-{analysis}.{ext}", analysis, result) for ext in ("json", "csv")]


def _nonmath(names) -> list[str]:
    names = [names] if isinstance(names, str) else list(names or [])
    if not names:
        raise LayerwiseError("No non-math dataset chosen.", fix="Pick one or two non-math datasets.")
    if len(names) > 2:
        raise LayerwiseError("Pick at most two non-math datasets.", fix="Untick one.")
    return names


def _source(result: dict) -> str:
    return {"precomputed": "precomputed example", "cache": "from the results cache",
            "computed": "computed now"}.get(result.get("source", ""), "")


# ---- status texts ----------------------------------------------------------------------------------------------
def effect_table(result: dict) -> pd.DataFrame:
    rows = []
    for r in result["rows"]:
        rows.append({"method": r["label"], "non-math dataset": r["nonmath"], "parameters pruned": r["selected"],
                     "math before": round(r["math_before"], 3), "math after": round(r["math_after"], 3),
                     "non-math before": round(r["nonmath_before"], 3), "non-math after": round(r["nonmath_after"], 3)})
    return pd.DataFrame(rows)


def effect_text(result: dict) -> str:
    p, m = result["params"], result["metrics"]
    best = [r for r in result["rows"] if r["method"] == "mathneuro"]
    parts = [f"**{demo.metric_label(k, v)}**" for k, v in m.items()]
    text = f"Metrics: {', '.join(parts)}; K = {100 * p['proportion']:g}%, N = {p['n']} ({_source(result)})."
    for r in best:
        text += (f" MathNeuro vs {r['nonmath']}: math {r['math_before']:.3g} → {r['math_after']:.3g}, "
                 f"non-math {r['nonmath_before']:.3g} → {r['nonmath_after']:.3g}.")
    return text


# ---- handlers --------------------------------------------------------------------------------------------------
@user_errors
def layers(model, math, nonmath, proportion, method, n, value="count",
        request: gr.Request = None, progress=gr.Progress()):
    """Layer distribution (count or share per layer and module type) for one or two non-math datasets."""
    _start(request)
    res = demo.layer_distribution_result(model, math, _nonmath(nonmath), int(n), float(proportion), method,
                                         progress=progress_callback(progress, request))
    sel = ", ".join(f"{nm}: {part['selected']:,} of {part['total']:,}" for nm, part in res["by_nonmath"].items())
    return (f"Layer distribution of **{method}** ({_source(res)}): {sel} selected.",
            layers_figure(res, value="share" if value == "share" else "count"), _files("layers", res))


@user_errors
def effect(model, math, nonmath, proportion, methods, n, eval_n, metric,
        request: gr.Request = None, progress=gr.Progress()):
    """Math vs non-math metric after pruning each method's set, per non-math dataset."""
    _start(request)
    res = demo.effect_result(model, math, _nonmath(nonmath), int(n), float(proportion), list(methods or []),
                             int(eval_n), metric, progress=progress_callback(progress, request))
    return effect_text(res), FIGURES["effect"](res), effect_table(res), _files("effect", res)


def _first(nonmath) -> str:
    return _nonmath(nonmath)[0]


@user_errors
def sweep_proportion(model, math, nonmath, method, n, eval_n, metric,
        request: gr.Request = None, progress=gr.Progress()):
    """Math / non-math metric after pruning the set found with each K (first non-math dataset)."""
    _start(request)
    res = demo.proportion_sweep_result(model, math, _first(nonmath), int(n), D["proportions"], method, int(eval_n),
                                       metric, progress=progress_callback(progress, request))
    return (f"Proportion sweep of **{method}** against {_first(nonmath)} ({_source(res)}).",
            FIGURES["proportion-sweep"](res), _files("proportion-sweep", res))


def _factors(factor: float) -> list[float]:
    factor = float(factor)
    return sorted(set(D["factors"]) | {round(factor, 4)})


@user_errors
def sweep_scale(model, math, nonmath, proportion, method, factor, n, eval_n, metric,
        request: gr.Request = None, progress=gr.Progress()):
    """Math / non-math metric with the set scaled by each factor (the default factors plus the chosen one)."""
    _start(request)
    from core.mathneuro.scoring import check_factor
    factors = D["factors"] if float(factor) in D["factors"] else _factors(check_factor(factor))
    res = demo.scale_sweep_result(model, math, _first(nonmath), int(n), float(proportion), method, factors,
                                  int(eval_n), metric, progress=progress_callback(progress, request))
    row = next((r for r in res["rows"] if abs(r["factor"] - float(factor)) < 1e-9), None)
    extra = f" At x{float(factor):g}: math {row['math']:.3g}, non-math {row['nonmath']:.3g}." if row else ""
    return (f"Scale-factor sweep of **{method}** ({res['selected']:,} parameters, {_source(res)}).{extra}",
            FIGURES["scale-sweep"](res), _files("scale-sweep", res))


@user_errors
def consistency(model, math, nonmath, method, n,
        request: gr.Request = None, progress=gr.Progress()):
    """Overlap of the set from 1..N random samples with the set from all N, for K = 1, 5, 10%."""
    _start(request)
    res = demo.consistency_result(model, math, _first(nonmath), int(n), D["consistency_proportions"], method,
                                  D["repeats"], progress=progress_callback(progress, request))
    return (f"Consistency of **{method}** from 1 to {int(n)} samples ({_source(res)}).",
            FIGURES["consistency"](res), _files("consistency", res))


@user_errors
def drill(model, math, nonmath, proportion, method, n, matrix,
        request: gr.Request = None, progress=gr.Progress()):
    """Heatmap of one weight matrix: where its selected entries sit."""
    _start(request)
    res = demo.drill_result(model, math, _first(nonmath), int(n), float(proportion), method, matrix or None,
                            progress=progress_callback(progress, request))
    rows, cols = res["row_counts"], res["col_counts"]
    top_r = sorted(range(len(rows)), key=lambda i: -rows[i])[:3]
    top_c = sorted(range(len(cols)), key=lambda i: -cols[i])[:3]
    text = (f"**{res['name']}** {res['shape'][0]}×{res['shape'][1]} ({_source(res)}): rows with most selected "
            f"entries {', '.join(f'{i} ({rows[i]})' for i in top_r)}; columns "
            f"{', '.join(f'{i} ({cols[i]})' for i in top_c)}.")
    return (text, FIGURES["drill"](res), gr.update(choices=res["matrices"], value=res["name"]),
            _files("drill", res))


@user_errors
def matrices(model):
    """The scored weight matrices of the chosen model (drill-down choices)."""
    names = demo.matrix_names(model)
    default = next((x for x in names if "mlp.down_proj" in x), names[0])
    return gr.update(choices=names, value=default)


def stop(request: gr.Request = None):
    stop_flag(request).set()
    return "Stopped. Press a button to start again."


# ---- default view ------------------------------------------------------------------------------------------------
def precomputed() -> dict[str, dict]:
    """The committed example results by analysis (empty when the file is missing)."""
    try:
        doc = json.loads(demo.EXAMPLES.read_text())
    except (OSError, ValueError):
        return {}
    return {e["analysis"]: {**e["result"], "source": "precomputed"} for e in doc.get("entries", [])}


def _initial(ex: dict, analysis: str):
    if analysis not in ex:
        return message_figure("Press the button to compute.")
    return FIGURES[analysis](ex[analysis])


def build(ctx: AppContext) -> None:
    ex = precomputed()
    math_names, nonmath_names = demo.dataset_names()
    method_choices = [(m.label, name) for name, m in METHODS.items()]
    gr.Markdown("**MathNeuro** scores every weight by |W|·‖X‖ on math inputs and on non-math inputs, keeps each "
                "matrix's top K for both, and calls *math-specific* the weights in the math top-K only. Pruning "
                "them should remove math and keep the rest; scaling them slightly can help math. Defaults: the "
                "embedded **mathneuro-tiny** (a 0.93M-parameter Llama trained here on arithmetic word problems and "
                "review sentiment), shown at once from precomputed results; pick `smollm2-135m` at the top with "
                "`gsm-symbolic` and `mmlu`/`logiqa` (loss, small N) for a real model.", elem_id="mathneuro-intro")
    with gr.Row():
        math = gr.Dropdown(math_names, value=D["math"], label="Math dataset", allow_custom_value=True,
                           elem_id="mathneuro-math")
        nonmath = gr.Dropdown(nonmath_names, value=D["nonmath"], multiselect=True, max_choices=2,
                              label="Non-math dataset(s): one or two", allow_custom_value=True,
                              elem_id="mathneuro-nonmath")
        method = gr.Dropdown(method_choices, value=D["method"], label="Method", elem_id="mathneuro-method")
        metric = gr.Radio(list(demo.METRICS), value="auto", label="Metric (auto: accuracy where the model can)")
    with gr.Row():
        proportion = gr.Number(value=D["proportion"], label="K: top share per matrix, in (0, 1]", minimum=0,
                               maximum=1, step=0.01, elem_id="mathneuro-k")
        factor = gr.Number(value=D["factor"], label="Scale factor", step=0.05, elem_id="mathneuro-factor")
        n = gr.Number(value=D["n"], label="N: identification samples per dataset", precision=0, minimum=1,
                      elem_id="mathneuro-n")
        eval_n = gr.Number(value=D["eval_n"], label="Test items per dataset", precision=0, minimum=1)
        stop_btn = gr.Button("Stop", variant="stop", elem_id="mathneuro-stop")
    status = gr.Markdown(effect_text(ex["effect"]) if "effect" in ex else "Press a button to compute.",
                         elem_id="mathneuro-status")

    with gr.Accordion("Pruning effect (paper Fig. 2)", open=True):
        with gr.Row():
            methods = gr.CheckboxGroup(method_choices, value=D["methods"], label="Methods", scale=3)
            effect_btn = gr.Button("Pruning effect", variant="primary", elem_id="mathneuro-effect-btn", scale=1)
        effect_plot = gr.Plot(value=_initial(ex, "effect"), label="Pruning effect", elem_id="mathneuro-effect")
        effect_df = gr.Dataframe(value=effect_table(ex["effect"]) if "effect" in ex else None, interactive=False,
                                 label="Before / after pruning", elem_id="mathneuro-effect-table")
    with gr.Accordion("Layer distribution (paper Fig. 10)", open=True):
        with gr.Row():
            value = gr.Radio([("count", "count"), ("share of the module's weights", "share")], value="count",
                             label="Show", scale=3)
            layers_btn = gr.Button("Layer distribution", elem_id="mathneuro-layers-btn", scale=1)
        layers_plot = gr.Plot(value=_initial(ex, "layers"), label="Layer distribution", elem_id="mathneuro-layers")
    with gr.Accordion("Sweeps: proportion K (Fig. 16) and scale factor (Fig. 29)", open=True):
        with gr.Row():
            sweep_k_btn = gr.Button("Proportion sweep", elem_id="mathneuro-sweep-k-btn")
            sweep_s_btn = gr.Button("Scale-factor sweep", elem_id="mathneuro-sweep-scale-btn")
        with gr.Row():
            sweep_k_plot = gr.Plot(value=_initial(ex, "proportion-sweep"), label="Proportion sweep",
                                   elem_id="mathneuro-sweep-k")
            sweep_s_plot = gr.Plot(value=_initial(ex, "scale-sweep"), label="Scale-factor sweep",
                                   elem_id="mathneuro-sweep-scale")
    with gr.Accordion("Consistency (Fig. 6) and drill-down", open=True):
        with gr.Row():
            cons_btn = gr.Button("Consistency", elem_id="mathneuro-consistency-btn")
            drill_matrix = gr.Dropdown(choices=(ex.get("drill") or {}).get("matrices") or [],
                                       value=ex["drill"]["name"] if "drill" in ex else None,
                                       allow_custom_value=True, label="Weight matrix", elem_id="mathneuro-matrix")
            list_btn = gr.Button("List matrices of the model", size="sm")
            drill_btn = gr.Button("Drill down", elem_id="mathneuro-drill-btn")
        with gr.Row():
            cons_plot = gr.Plot(value=_initial(ex, "consistency"), label="Consistency", elem_id="mathneuro-consistency")
            drill_plot = gr.Plot(value=_initial(ex, "drill"), label="Drill-down", elem_id="mathneuro-drill")

    downloads = gr.File(label="Downloads (JSON, CSV) of the last analysis", file_count="multiple", height=120,
                        elem_id="mathneuro-downloads")
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
