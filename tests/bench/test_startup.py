"""bench/startup.py --smoke: one cold start of the app to its first page, and one dataset prepared into an empty
user cache from the fetched archives (offline); the venv and Space parts need the package registry."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_starts_the_app_and_prepares_a_dataset(tmp_path):
    report = run_smoke(tmp_path, "startup.py")
    assert_finite(report)
    assert 0 < report["cold_start_to_page_s"] <= report["cold_start_to_config_s"]
    assert len(report["cold_start_runs_s"]) == 1 and report["idle_rss_mib"] > 0
    assert report["data_prepare_fresh_cache_s"] > 0 and report["data_prepare_only"] == ["movie-sentiment"]
    assert report["left_out"] == ["venv", "space"] and "venv_size_mib" not in report
    assert (tmp_path / "home" / "files").is_dir()  # the app ran on the private user cache
