"""The MambaLRP tab: the examples are precomputed and shown at once, handlers return a heatmap, a labelled figure, a
table and downloads; rule toggles reach core; bad input becomes gr.Error."""
import json
import threading

import gradio as gr
import numpy as np
import pytest

import core.lrp as core_lrp
from core.lrp import LRPRules
from core.zoo import fingerprint, registered_names
from ui.tabs import lrp

pytestmark = pytest.mark.usefixtures("single_thread")
needs = pytest.mark.skipif(not {"mamba-sentiment", "vision-mamba-mnist"} <= set(registered_names()),
                           reason="embedded Mamba models not committed")
RULES_ON = (True, True, True, True, None, list(core_lrp.GAMMA_LAYERS))


def test_rule_toggles_become_core_options():
    assert LRPRules.from_toggles(**lrp._rules(*RULES_ON)).changes() == {}
    assert LRPRules.from_toggles(**lrp._rules(False, True, False, True, None, [])).changes() == {
        "silu": False, "gate": False}
    assert LRPRules.from_toggles(**lrp._rules(True, True, True, True, 0.25, ["conv"])) == LRPRules(
        gamma_in_proj=0.0, gamma_out_proj=0.0, gamma_conv=0.25)
    assert LRPRules.from_toggles(**lrp._rules(*RULES_ON), default_gamma=0.25) == LRPRules.mambalrp(0.25)


@needs
def test_example_text_is_precomputed_and_complete():
    kind, inputs = core_lrp.default_requests()[0]
    status, page, table, target, files = lrp.explain_text(inputs["model"], inputs["text"], inputs["methods"],
                                                          lrp.TOP, *RULES_ON)
    files = files["value"]
    assert "precomputed" in status
    assert "MambaLRP" in page and "linear-gradient" in page
    assert list(table["method"]) == [core_lrp.METHODS[m].label for m in inputs["methods"]]
    assert [c[1] for c in target["choices"]] == [lrp.TOP, 0, 1]
    suffixes = sorted(f.rsplit(".", 1)[1] for f in files)
    assert suffixes == ["csv", "csv", "html", "json", "parquet"]  # the wide and the long-format table
    saved = json.loads(open(next(f for f in files if f.endswith(".json"))).read())
    assert saved["tokens"] and set(saved["methods"]) == set(inputs["methods"])


@needs
def test_new_text_is_computed_with_the_chosen_target_and_rules():
    status, page, table, target, files = lrp.explain_text("mamba-sentiment", "Dull, slow and far too long.",
                                                          ["mambalrp"], 1, False, True, True, True, None, [])
    assert "precomputed" not in status and "'positive'" in status
    assert target["value"] == 1
    row = table.iloc[0]
    assert row["method"] == "MambaLRP"  # SiLU rule off: no longer conservative in general, still reported


@needs
def test_image_upload_and_sample():
    status, fig, table, target, files = lrp.explain_image("vision-mamba-mnist", None, 0, ["mambalrp", "random"],
                                                          lrp.TOP, *RULES_ON)
    assert fig.layout.title.text and "True label" in status
    assert len(files["value"]) == 5  # JSON, CSV, long CSV and Parquet, HTML
    digit = np.zeros((64, 64, 3), dtype=np.uint8)
    digit[12:52, 28:36] = 255
    status, fig, *_ = lrp.explain_image("vision-mamba-mnist", digit, 0, ["mambalrp"], 3, *RULES_ON)
    assert "resized from 64x64" in status and "class **'3'**" in status


@needs
@pytest.mark.parametrize("args", [
    ("mamba-sentiment", "  ", ["mambalrp"], lrp.TOP),
    ("mamba-sentiment", "fine", [], lrp.TOP),
    ("mamba-sentiment", "fine", ["mambalrp"], 7),
    ("vision-mamba-mnist", "fine", ["mambalrp"], lrp.TOP),
])
def test_bad_text_input_is_a_message(args):
    with pytest.raises(gr.Error):
        lrp.explain_text(*args, *RULES_ON)


@needs
def test_bad_image_input_is_a_message():
    with pytest.raises(gr.Error, match="square"):
        lrp.explain_image("vision-mamba-mnist", np.zeros((28, 90), np.uint8), 0, ["mambalrp"], lrp.TOP, *RULES_ON)
    with pytest.raises(gr.Error, match="not an image model"):
        lrp.explain_image("mamba-sentiment", None, 0, ["mambalrp"], lrp.TOP, *RULES_ON)


def _axis_titles(fig):
    return [a.title.text for k in dir(fig.layout) if k.startswith(("xaxis", "yaxis"))
            for a in [getattr(fig.layout, k)] if a is not None and a.title is not None and a.title.text]


def test_precomputed_evaluation_is_labelled_and_mambalrp_conserves():
    for item, model in (("sentiment", "mamba-sentiment"), ("mnist", "vision-mamba-mnist")):
        res = core_lrp.committed_result(model)
        assert res.source == "precomputed" and res.data == core_lrp.committed_result(item).data
        assert not {"cached", "source"} & set(res.data)  # where it came from is the Result's, not the data's
        text, cons, faith, table = lrp.eval_outputs(res)
        assert "precomputed" in text and "ΔA^F" in text
        # a file made before the equal-retention protocol says so and names the command that adds it
        assert (f"not computed in this result: `{res.data['command']}`" in text) == ("retention" not in res.data)
        for fig in (cons, faith):
            assert fig.layout.title.text and _axis_titles(fig) and any(t.showlegend for t in fig.data)
        assert table.iloc[0]["method"] == "MambaLRP"  # best first, on both committed models
        assert res.data["conservation"]["mambalrp"]["max_abs_error"] < 1e-4
        assert res.data["fingerprint"] == fingerprint(model), "stale: lrp precompute-evaluation"
    long_range = core_lrp.committed_result("lm")
    lr = long_range.figures["long-range"]
    assert "Long range" in lr.layout.title.text and len(lr.data) == len(long_range.data["methods"])
    key_token = core_lrp.committed_result("key-token")
    rows, res = key_token.views["hits"], key_token.data
    assert {r["method"] for r in rows} >= {"MambaLRP", "Random"}
    assert res["n_seeds"] >= 5 and "over 5 seeds" in key_token.status
    mamba = next(r for r in rows if r["method"] == "MambaLRP")  # mean, spread and n agree with the seeds
    per_seed = [100 * x for x in res["hit_rate_per_seed"]["mambalrp"]]
    assert mamba["key in top-1 (%)"] == pytest.approx(sum(per_seed) / len(per_seed), abs=0.06)
    assert (mamba["min"], mamba["max"]) == (round(min(per_seed), 1), round(max(per_seed), 1))
    assert mamba["seeds"] == len(per_seed) and mamba["± std"] > 0
    last = key_token.views["last-token"]   # the last-token observation beside the table, its medians quoted
    m = res["last_token"]["methods"]["mambalrp"]
    assert f"{m['median_abs_change_top1_in_misses']:.2f}" in last and f"{m['median_abs_change_key_in_misses']:.2f}" in last
    assert m["median_abs_change_top1_in_misses"] > m["median_abs_change_key_in_misses"]


@needs
def test_evaluate_handler_computes_and_refuses_bad_input(fresh_cache):
    text, cons, faith, table, files = lrp.evaluate("vision-mamba-mnist", 2, 4, ["mambalrp", "random"])
    assert "2 samples" in text and "K = 4" in text and len(table) == 2 and len(files["value"]) == 6
    again = lrp.evaluate("vision-mamba-mnist", 2, 4, ["mambalrp", "random"])
    assert "from the results cache" in again[0] and again[-1]["value"] == files["value"]
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 0, 4, ["mambalrp"])
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 2, 4, [])


class _Bar:
    """A stand-in for ``gr.Progress``: records ``(fraction, desc)``; ``hold`` runs on every call (a test's hook)."""

    def __init__(self, hold=None):
        self.calls, self.hold = [], hold

    def __call__(self, fraction, desc=None, **_):
        self.calls.append((fraction, desc))
        if self.hold is not None:
            self.hold(desc)


@needs
def test_progress_reaches_the_bar_per_method_and_mixer(fresh_cache):
    bar = _Bar()
    status, *_ = lrp.explain_text("mamba-sentiment", "A slow, dull film with a good score.",
                                  ["mambalrp", "gradient_x_input"], lrp.TOP, *RULES_ON, progress=bar)
    assert "precomputed" not in status and "results cache" not in status
    fractions, messages = [f for f, _ in bar.calls], [m for _, m in bar.calls]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == pytest.approx(1.0)
    layers = sum(1 for m in messages if m.startswith("MambaLRP: forward pass: layer"))
    assert layers >= 1 and sum(1 for m in messages if m.startswith("MambaLRP: backward pass: layer")) == layers
    assert "Gradient x Input: forward pass: layer 1 of %d" % layers in messages
    first_of_second = messages.index("Gradient x Input")  # each method fills its own half of the bar
    assert fractions[first_of_second] == pytest.approx(0.5) and max(fractions[:first_of_second]) <= 0.5


@needs
def test_stop_cancels_a_running_explanation_and_caches_nothing(fresh_cache):
    from ui.stopping import STOPPED

    at_layer, pressed = threading.Event(), threading.Event()

    def hold(desc):  # the work waits at its first mixer until Stop was pressed (as a long explanation would run on)
        if desc and "layer" in desc:
            at_layer.set()
            pressed.wait(30)

    outcome = {}

    def work():
        try:
            outcome["result"] = lrp.explain_text("mamba-sentiment", "Stop me before I finish.", ["mambalrp"], lrp.TOP,
                                                 *RULES_ON, progress=_Bar(hold))
        except gr.Error as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    assert at_layer.wait(120)
    assert lrp.stop() == STOPPED  # what the Stop button's click runs (the session's flag)
    pressed.set()
    worker.join(60)
    assert not worker.is_alive() and "result" not in outcome
    assert outcome["error"].title == "Stopped" and "Stopped" in str(outcome["error"].message)
    assert fresh_cache.entries() == []  # a stopped explanation leaves nothing behind
    status, *_ = lrp.explain_text("mamba-sentiment", "Stop me before I finish.", ["mambalrp"], lrp.TOP, *RULES_ON,
                                  progress=_Bar())  # the next press starts afresh
    assert "results cache" not in status and "precomputed" not in status


def test_stop_cancels_every_explanation_and_the_text_cap_says_what_it_costs():
    from ui.header import AppContext

    with gr.Blocks() as blocks:
        lrp.build(AppContext(model=gr.Dropdown(["x"], value="x")))
    deps = blocks.config["dependencies"]
    ids = {d["id"]: d["api_name"] for d in deps}
    cancelled = {ids[i] for d in deps for i in (d.get("cancels") or [])}
    assert {"lrp_explain_text", "lrp_explain_text_submit", "lrp_explain_image", "lrp_evaluate", "lrp_flow",
            "lrp_compare"} <= cancelled
    box = next(c for c in blocks.config["components"] if c.get("props", {}).get("elem_id") == "lrp-text")["props"]
    assert f"cut to {core_lrp.MAX_TOKENS} tokens" in box["label"] and box["info"] == core_lrp.cost_note()
    for (config, tokens), (seconds, ratio) in core_lrp.MEASURED_COST.items():
        assert f"{seconds:.0f} s" in box["info"] and seconds > 0 and ratio > 0


def test_the_side_by_side_section_compares_two_models_and_refuses_one():
    from ui.tabs import layers

    status, plot, table, files = layers.compare_models("mamba-lm", "mamba-sentiment", "A gorgeous, witty film.",
                                                       "mambalrp")
    assert "**mamba-lm**" in status and "**mamba-sentiment**" in status
    assert "two models" in plot.layout.title.text and list(table["model"]) == ["mamba-lm", "mamba-sentiment"]
    assert any(str(f).endswith("lrp-compare.json") for f in files["value"])
    with pytest.raises(gr.Error, match="two different models"):
        layers.compare_models("mamba-lm", "mamba-lm", "A film.", "mambalrp")


def test_ground_truths_name_the_command_of_a_missing_result(monkeypatch):
    """A committed ground truth that is not there is said so, with the command that computes it, and no table."""
    from ui.tabs import layers
    monkeypatch.setattr(layers.lrp, "committed_result", lambda item: None)
    with gr.Blocks() as demo:
        layers.ground_truths()
    texts = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    for item, model, _ in layers.AGREEMENT_ITEMS:
        line = next(t for t in texts if f"`{model}`" in t)
        assert line.startswith("Not computed yet") and f"precompute-evaluation --only {item}`" in line
    assert not any(isinstance(b, gr.Dataframe) for b in demo.blocks.values())
