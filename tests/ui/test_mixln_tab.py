"""The Mix-LN tab: its handlers return figures with titles, axis labels and legends; a live run streams updates
and ends 'finished'; every event has an API name; the model analysis is cached."""
import gradio as gr
import pytest

from core.mixln import runs
from ui.tabs import mixln
from ui.header import AppContext

needs_runs = pytest.mark.skipif(not runs.list_runs(), reason="no committed runs in assets/mixln")


def assert_labelled(fig, *, legend=True):
    layout = fig.layout
    assert layout.title.text
    axes = [getattr(layout, k) for k in dir(layout) if k.startswith(("xaxis", "yaxis"))
            if getattr(layout, k, None) is not None and getattr(getattr(layout, k), "title", None) is not None]
    titles = [a.title.text for a in axes if a.title.text]
    assert any(t for t in titles), "axis titles missing"
    assert len(fig.data) > 0
    if legend:
        assert all(t.name for t in fig.data)


@needs_runs
def test_committed_run_figures():
    names = mixln.DEFAULT_RUNS
    loss = mixln.runs_loss(names)
    assert_labelled(loss)
    assert loss.layout.yaxis.title.text.startswith("loss (nats") and loss.layout.xaxis.title.text == "training step"
    assert {t.name for t in loss.data} >= {"Pre-LN held-out", "Post-LN held-out", "Mix-LN (alpha 0.25) held-out"}
    grads = mixln.runs_gradnorms(names, "param", 150)
    assert_labelled(grads)
    assert grads.layout.yaxis.type == "log" and len(grads.data) == 6  # init + step 150 per run
    assert all(len(t.x) == 12 for t in grads.data) and "step 150" in grads.layout.title.text
    table, bars = mixln.runs_compare()
    assert_labelled(bars)
    assert {"pre-ln", "post-ln", "mix-ln-0.25"} <= set(table["run"])
    sweep = mixln.runs_sweep()
    assert_labelled(sweep)
    assert list(sweep.data[0].x) == sorted(runs.SWEEP)
    ang = mixln.run_angular("mix-ln-0.25")
    assert ang.layout.title.text and len(ang.data) == 2  # raw and scaled
    assert ang.layout.xaxis.title.text == "first layer l" and ang.layout.yaxis.title.text.startswith("block size n")
    rem = mixln.runs_removal(names)
    assert_labelled(rem)
    assert len(rem.data) == 3 and all(len(t.x) == 12 for t in rem.data)


@needs_runs
def test_seed_lr_and_depth_charts_show_spread_and_n():
    for set_name, layers in (("main", 12), ("depth-24", 24)):
        loss, ppl, status = mixln.runs_curves(set_name)
        for fig, unit in ((loss, "nats"), (ppl, "perplexity")):
            assert_labelled(fig, legend=False)
            assert f"{layers} layers" in fig.layout.title.text and "min-max" in fig.layout.title.text
            assert unit in fig.layout.yaxis.title.text and fig.layout.xaxis.title.text == "training step"
            assert any(t.fill == "toself" or t.fill == "tonexty" for t in fig.data), "no spread band"
        assert ("n = 3" if set_name == "main" else "n = 2") in status and "±" in status  # 24 layers: Pre-LN, 2 seeds
    lr, lr_status = mixln.runs_lr_sweep()
    assert_labelled(lr, legend=False)
    assert lr.layout.xaxis.type == "log" and "one seed" in lr_status
    depth, depth_status = mixln.runs_depth()
    assert_labelled(depth, legend=False)
    assert "n = 1/2/3 seeds" in depth_status  # 24 layers: one seed (Pre-LN: two); 12 layers: three (DeepNorm: two)


def test_no_run_chosen_is_a_message():
    with pytest.raises(gr.Error):
        mixln.runs_loss([])


@pytest.mark.slow
def test_live_run_streams_and_finishes():
    updates = list(mixln.live_train("mix", 0.5, 2, 10, progress=lambda *a, **k: None))
    assert len(updates) >= 3
    status, loss, grads = updates[-1]
    assert "finished" in status and "held-out perplexity" in status
    assert_labelled(loss)
    assert_labelled(grads)
    assert len(grads.data[0].x) == 2 and len(loss.data[0].x) == 10


def test_live_run_bad_alpha():
    with pytest.raises(gr.Error, match="outside"):
        list(mixln.live_train("mix", 1.5, 2, 10, progress=lambda *a, **k: None))


def test_tab_builds_and_names_every_event():
    with gr.Blocks() as demo:
        mixln.build(AppContext(model=gr.Dropdown(choices=["smollm2-135m"], value="smollm2-135m")))
    names = {d["api_name"] for d in demo.config["dependencies"] if d["targets"][0][1] != "load"}
    assert {"mixln_live_train", "mixln_live_stop", "mixln_model_angular", "mixln_model_removal",
            "mixln_runs_loss", "mixln_runs_curves"} <= names
    assert mixln.TITLE == "Mix-LN"


@pytest.mark.slow
def test_model_angular_is_cached():
    from core.zoo import card_of
    if not card_of("smollm2-135m").ready:
        pytest.skip("smollm2-135m not prepared")
    text, fig, files = mixln.model_angular("smollm2-135m", 1, progress=lambda *a, **k: None)
    assert "30 layers" in text and fig.layout.title.text.endswith("smollm2-135m")
    text2, _, _ = mixln.model_angular("smollm2-135m", 1, progress=lambda *a, **k: None)
    assert "from the results cache" in text2
