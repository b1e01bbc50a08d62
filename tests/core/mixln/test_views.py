"""The Mix-LN analyses are shown through one registry (core.mixln.views.ANALYSES) and one view().

A new analysis is its registry entry plus its compute function: the test registers one (the final training loss of
committed runs) and gets a whole Result (status, JSON, table, figure, files) without touching anything else.
"""
import plotly.graph_objects as go
import pytest

from core.analyses import request_for
from core.errors import BadInputError
from core.mixln import folders, views
from core.mixln.requests import RunsRequest


def test_every_registered_analysis_parses_its_request_and_names_its_files():
    for name, a in views.ANALYSES.items():
        assert hasattr(a.request, "parse"), name
        assert a.stored_as is None or a.schema is not None, f"{name}: a stored analysis says what its view reads"
    req = request_for(views.ANALYSES, "loss", ["pre-ln"])
    assert isinstance(req, RunsRequest) and req.runs == ("pre-ln",)
    with pytest.raises(BadInputError, match="no run chosen"):
        request_for(views.ANALYSES, "loss", [])


def test_a_new_analysis_is_one_registry_entry_and_its_compute_function(monkeypatch, tmp_path):
    from core.analyses import Analysis
    from core.mixln import service

    def final_loss_status(rows, shown):
        return f"Final training loss of {len(rows)} runs ({shown.source})."

    def final_loss(req, progress=None):  # the compute function: the request parsed, the data read
        return [{"run": r.name, "loss": r.history["train"][-1]["loss"]} for r in map(folders.load_run, req.runs)]

    monkeypatch.setitem(views.ANALYSES, "final-loss", Analysis(
        RunsRequest, final_loss_status, final_loss, tables=lambda rows, shown: {"final-loss": rows},
        figures=lambda rows, shown: {"final-loss": go.Figure(go.Bar(x=[r["run"] for r in rows],
                                                                    y=[r["loss"] for r in rows]))},
        stem="mixln-final-loss"))

    def final_loss_result(names):  # an action, shaped like every action of core.mixln.service
        return service.analysis_result("final-loss", names)

    res = final_loss_result(["pre-ln", "post-ln"])
    assert res.status == "Final training loss of 2 runs (computed)."
    assert [r["run"] for r in res.data] == ["pre-ln", "post-ln"] and res.tables["final-loss"] == res.data
    assert all(r["loss"] > 0 for r in res.data)
    assert list(res.figures["final-loss"].data[0].x) == ["pre-ln", "post-ln"]
    names = sorted(p.name for p in res.write(tmp_path))
    assert names == ["mixln-final-loss-long.csv", "mixln-final-loss-long.parquet", "mixln-final-loss.csv",
                     "mixln-final-loss.html", "mixln-final-loss.json"]


def test_the_comparison_says_how_far_mix_ln_is_from_pre_ln_per_depth():
    """A hand-made table: Mix-LN 0.25 behind Pre-LN at 12 layers, ahead at 24; the paper's scale is named."""
    from core.mixln.views import mix_vs_pre_text

    def row(run, layers, loss):
        return {"run": run, "layers": layers, "eval_loss_mean": loss, "eval_loss_std": 0.01, "n_seeds": 3,
                "eval_loss_per_seed": [loss - 0.01, loss, loss + 0.01]}

    text = mix_vs_pre_text([row("pre-ln", 12, 4.95), row("mix-ln-0.25", 12, 4.975), row("post-ln", 12, 4.98),
                            row("depth-24/pre-ln", 24, 4.93), row("depth-24/mix-ln-0.25", 24, 4.91)])
    assert "12 layers: Mix-LN 0.25 is **0.025 nats behind** Pre-LN (4.975 ± 0.010 (n = 3 seeds)" in text
    assert "+0.025 ± 0.008 nats (t = 3.06, df 4.0, p = 0.038; exact p = 0.10): behind)" in text  # Welch, the rule
    assert "24 layers: Mix-LN 0.25 is **0.020 nats ahead of** Pre-LN" in text and "ahead, suggestive" in text
    assert "71 M to 1 B parameters" in text
    assert mix_vs_pre_text([row("pre-ln", 12, 4.95)]) == ""


def test_the_run_sets_a_user_picks_have_distinct_names():
    """The seed-curve sets are told apart by their labels (the init set has 12 layers, as the main set does)."""
    from core.mixln import set_choices
    from core.mixln.recipe import RUN_SETS
    labels = [label for label, _ in set_choices()]
    assert len(set(labels)) == len(labels) and "init-0.02" in dict(map(reversed, set_choices()))
    assert dict(set_choices())["12 layers, embedding init std 0.02"] == "init-0.02" and RUN_SETS["main"].choice == ""
