"""The MathNeuro tab: the default view is precomputed and labelled; handlers return figures with titles, axis labels
and legends; bad input becomes gr.Error; Stop cancels; every event has an API name."""
import gradio as gr
import pytest

import core.mathneuro as demo
from core.mathneuro.recipe import DEMO_NAME
from core.zoo import registered_names
from ui.tabs import mathneuro
from ui.header import AppContext

pytestmark = pytest.mark.usefixtures("single_thread")
needs_model = pytest.mark.skipif(DEMO_NAME not in registered_names(), reason="mathneuro-tiny not committed")


@pytest.fixture(autouse=True)
def private_cache(fresh_cache):
    return fresh_cache


def axis_titles(fig) -> list[str]:
    layout = fig.layout
    out = []
    for key in dir(layout):
        if key.startswith(("xaxis", "yaxis")):
            axis = getattr(layout, key, None)
            if axis is not None and axis.title is not None and axis.title.text:
                out.append(axis.title.text)
    return out


def assert_labelled(fig, legend=True):
    assert fig.layout.title.text
    titles = axis_titles(fig)
    assert titles and all(t for t in titles)
    assert len(fig.data) > 0
    if legend:
        assert all(t.name for t in fig.data)
    return titles


def test_precomputed_default_view_is_labelled():
    ex = {name: res.data for name, res in demo.example_results().items()}
    assert set(ex) == {"layers", "effect", "proportion-sweep", "scale-sweep", "consistency", "drill"}
    from core.analyses import Shown
    from core.mathneuro.views import ANALYSES
    for name, result in ex.items():
        titles = assert_labelled(ANALYSES[name].figures(result, Shown())[name], legend=name != "drill")
        assert any("(" in t for t in titles), f"{name}: no unit in {titles}"
    effect = ex["effect"]
    assert {r["method"] for r in effect["rows"]} == set(demo.DEFAULTS["methods"])
    names = [t.name for t in ANALYSES["effect"].figures(effect, Shown())["effect"].data]
    assert "unmodified model" in names and "ideal: math lost, non-math kept" in names


@needs_model
@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_handlers_return_labelled_figures():
    model, math, nonmath = DEMO_NAME, "arithmetic-words", ["review-sentiment"]
    text, fig, files = mathneuro.layers(model, math, nonmath, 0.05, "mathneuro", 6, "share")
    titles = assert_labelled(fig)
    assert "layer" in titles and any("%" in t for t in titles) and len(files["value"]) == 4
    text, fig, table, files = mathneuro.effect(model, math, nonmath, 0.05, ["mathneuro", "random"], 6, 5, "auto")
    assert_labelled(fig)
    assert list(table["method"]) == ["MathNeuro", "Random"] and "accuracy" in text
    text, fig, files = mathneuro.sweep_scale(model, math, nonmath, 0.05, "mathneuro", 1.3, 6, 5, "auto")
    assert_labelled(fig)
    assert 1.3 in list(fig.data[0].x)
    text, fig, files = mathneuro.consistency(model, math, nonmath, "mathneuro", 4)
    assert_labelled(fig)
    text, fig, choices, files = mathneuro.drill(model, math, nonmath, 0.05, "mathneuro", 6,
                                                "model.layers.0.self_attn.q_proj.weight")
    assert_labelled(fig, legend=False)
    assert "q_proj" in fig.layout.title.text and fig.data[0].type == "heatmap"


@pytest.mark.parametrize("kwargs, needle", [
    ({"proportion": 0}, "(0, 1]"), ({"proportion": 1.5}, "(0, 1]"), ({"method": "magic"}, "Unknown method"),
    ({"nonmath": []}, "non-math"), ({"model": "no-such-model-xyz"}, "no-such-model-xyz"),
    ({"nonmath": ["review-sentiment", "movie-sentiment", "mmlu"]}, "at most two"),  # the service's rule, via the API
])
def test_bad_input_becomes_gr_error(kwargs, needle):
    args = {"model": DEMO_NAME, "math": "arithmetic-words", "nonmath": ["review-sentiment"], "proportion": 0.05,
            "method": "mathneuro", "n": 4}
    args.update(kwargs)
    with pytest.raises(gr.Error) as err:
        mathneuro.layers(**args)
    assert needle in str(err.value.message)


def test_non_finite_scale_factor_is_refused():
    with pytest.raises(gr.Error, match="finite"):
        mathneuro.sweep_scale(DEMO_NAME, "arithmetic-words", ["review-sentiment"], 0.05, "mathneuro", float("nan"),
                              4, 4, "auto")


def test_every_event_has_an_api_name_and_stop_cancels():
    with gr.Blocks() as blocks:
        model = gr.Dropdown([DEMO_NAME], value=DEMO_NAME)
        mathneuro.build(AppContext(model=model))
    deps = blocks.config["dependencies"]
    names = {d["api_name"] for d in deps}
    assert all(d["api_name"] for d in deps)
    assert {"mathneuro_effect", "mathneuro_layers", "mathneuro_sweep_proportion", "mathneuro_sweep_scale",
            "mathneuro_consistency", "mathneuro_drill", "mathneuro_stop"} <= names
    # gradio 6 attaches the cancellation of the six analyses to the Stop click as its own dependency
    cancelled = next(d["cancels"] for d in deps if len(d.get("cancels") or []) == 6)
    ids = {d["id"]: d["api_name"] for d in deps}
    assert {ids[i] for i in cancelled} == {"mathneuro_effect", "mathneuro_layers", "mathneuro_sweep_proportion",
                                           "mathneuro_sweep_scale", "mathneuro_consistency", "mathneuro_drill"}
