"""bench/batch.py --smoke: batch throughput against the single-request path, side by side, on the embedded model and a
random Mamba of the 130m case's shape (tiny in the smoke run); every text computed by both paths."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_measures_both_paths_of_both_cases(tmp_path):
    report = run_smoke(tmp_path, "batch.py")
    assert_finite(report, ("embedded", "130m"))
    for case in ("embedded", "130m"):
        row = report[case]
        assert row["single_texts_per_s"] > 0 and row["batch_texts_per_s"] > 0
        assert row["batch_over_single"] == pytest.approx(row["batch_texts_per_s"] / row["single_texts_per_s"],
                                                         rel=1e-2)
        assert row["last_batch"] == {"computed": row["texts"], "errors": 0}  # each text computed, none refused
    assert report["130m"]["config"]["num_hidden_layers"] == 2 and report["target"] == {"batch_over_single": 0.9}
