"""The MambaLRP tab: the examples are precomputed and shown at once, handlers return a heatmap, a labelled figure, a
table and downloads; rule toggles reach core; bad input becomes gr.Error."""
import json
import time

import gradio as gr
import numpy as np
import pytest

import core.lrp as core_lrp
from core.lrp import LRPRules
from core.zoo import fingerprint, registered_names
from ui import lrp

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
    t0 = time.perf_counter()
    status, page, table, target, files = lrp.explain_text(inputs["model"], inputs["text"], inputs["methods"],
                                                          lrp.TOP, *RULES_ON)
    files = files["value"]
    assert "precomputed" in status and time.perf_counter() - t0 < 5
    assert "MambaLRP" in page and "linear-gradient" in page
    assert list(table["method"]) == [core_lrp.METHODS[m].label for m in inputs["methods"]]
    assert [c[1] for c in target["choices"]] == [lrp.TOP, 0, 1]
    suffixes = sorted(f.rsplit(".", 1)[1] for f in files)
    assert suffixes == ["csv", "html", "json"]
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
    assert len(files["value"]) == 3
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
    from core.lrp import evaluation
    pre = evaluation.precomputed()
    assert {"mnist", "sentiment", "lm", "key-token", "mamba-sentiment", "vision-mamba-mnist"} <= set(pre)
    for model in ("mamba-sentiment", "vision-mamba-mnist"):
        text, cons, faith, table = lrp.eval_outputs(core_lrp.committed_result(model))
        assert "precomputed" in text and "ΔA^F" in text
        for fig in (cons, faith):
            assert fig.layout.title.text and _axis_titles(fig) and any(t.showlegend for t in fig.data)
        assert table.iloc[0]["method"] == "MambaLRP"  # best first, on both committed models
        assert pre[model]["conservation"]["mambalrp"]["max_abs_error"] < 1e-4
        assert pre[model]["fingerprint"] == fingerprint(model), "stale: lrp precompute-evaluation"
    lr = core_lrp.committed_result("lm").figures["long-range"]
    assert "Long range" in lr.layout.title.text and len(lr.data) == len(pre["lm"]["methods"])
    rows = core_lrp.committed_result("key-token").views["hits"]
    assert {r["method"] for r in rows} >= {"MambaLRP", "Random"}


@needs
def test_evaluate_handler_computes_and_refuses_bad_input(fresh_cache):
    text, cons, faith, table, files = lrp.evaluate("vision-mamba-mnist", 2, 4, ["mambalrp", "random"])
    assert "2 samples" in text and "K = 4" in text and len(table) == 2 and len(files["value"]) == 4
    again = lrp.evaluate("vision-mamba-mnist", 2, 4, ["mambalrp", "random"])
    assert "from the results cache" in again[0] and again[-1]["value"] == files["value"]
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 0, 4, ["mambalrp"])
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 2, 4, [])
