"""The MambaLRP tab: the examples are precomputed and shown at once, handlers return a heatmap, a labelled figure, a
table and downloads; rule toggles reach core; bad input becomes gr.Error."""
import json
import time

import gradio as gr
import numpy as np
import pytest

from core.lrp import demo
from core.zoo import registered_names
from ui import lrp

pytestmark = pytest.mark.usefixtures("single_thread")
needs = pytest.mark.skipif(not {"mamba-sentiment", "vision-mamba-mnist"} <= set(registered_names()),
                           reason="embedded Mamba models not committed")
RULES_ON = (True, True, True, True, None, list(lrp.GAMMA_LAYERS))


def test_rule_toggles_become_core_options():
    assert lrp.rules_from(*RULES_ON) == {}
    assert lrp.rules_from(False, True, False, True, None, []) == {"silu": False, "gate": False}
    assert lrp.rules_from(True, True, True, True, 0.25, ["conv"]) == {
        "gamma_in_proj": 0.0, "gamma_out_proj": 0.0, "gamma_conv": 0.25}


@needs
def test_example_text_is_precomputed_and_complete():
    kind, inputs = demo.default_calls()[0]
    t0 = time.perf_counter()
    status, page, table, target, files = lrp.explain_text(inputs["model"], inputs["text"], inputs["methods"],
                                                          lrp.TOP, *RULES_ON)
    assert "precomputed" in status and time.perf_counter() - t0 < 5
    assert "MambaLRP" in page and "linear-gradient" in page
    assert list(table["method"]) == [demo.METHODS[m].label for m in inputs["methods"]]
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
    assert len(files) == 3
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
        text, cons, faith, table = lrp.eval_outputs(pre[model])
        assert "precomputed" in text and "ΔA^F" in text
        for fig in (cons, faith):
            assert fig.layout.title.text and _axis_titles(fig) and any(t.showlegend for t in fig.data)
        assert table.iloc[0]["method"] == "MambaLRP"  # best first, on both committed models
        assert pre[model]["conservation"]["mambalrp"]["max_abs_error"] < 1e-4
        assert pre[model]["fingerprint"] == demo.load(model).fingerprint, "stale: lrp precompute-evaluation"
    lr = lrp.long_range_figure(pre["lm"])
    assert "Long range" in lr.layout.title.text and len(lr.data) == len(pre["lm"]["methods"])
    rows = lrp.key_token_rows(pre["key-token"])
    assert {r["method"] for r in rows} >= {"MambaLRP", "Random"}


@needs
def test_evaluate_handler_computes_and_refuses_bad_input(tmp_path, monkeypatch):
    import core.cache
    real = core.cache.ResultsCache
    monkeypatch.setattr(core.cache, "ResultsCache", lambda: real(tmp_path / "results"))  # a private cache
    text, cons, faith, table, files = lrp.evaluate("vision-mamba-mnist", 2, 4, ["mambalrp", "random"])
    assert "2 samples" in text and "K = 4" in text and len(table) == 2 and len(files) == 4
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 0, 4, ["mambalrp"])
    with pytest.raises(gr.Error):
        lrp.evaluate("vision-mamba-mnist", 2, 4, [])
