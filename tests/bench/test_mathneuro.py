"""bench/mathneuro.py --smoke: identification against plain forward passes on the project's mathneuro-tiny."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_identifies_and_compares_with_plain_forwards(tmp_path):
    report = run_smoke(tmp_path, "mathneuro.py")
    assert_finite(report)
    assert report["model"] == "mathneuro-tiny" and report["samples_per_dataset"] == 2
    assert report["plain_forward_s"] > 0 and report["identify_s"] > 0 and report["time_ratio"] > 0
    for key in ("of_which_collect_s", "of_which_select_s", "extra_peak_rss_mb", "masks_returned_mb"):
        assert isinstance(report[key], (int, float)), key
    assert report["selected"] > 0 and report["model_unchanged"] is True
    assert 0 < report["statistics_kept_mb"] < report["model_weights_mb"]
