"""bench/load.py --smoke: cheap users alone and beside heavy ones, then a session loading models beside a MathNeuro
session (issue 22), on one app with a private user cache."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_measures_both_runs_and_no_call_fails(tmp_path):
    report = run_smoke(tmp_path, "load.py", timeout=600)
    assert_finite(report, ("cheap_1_user", "cheap_alone", "cheap_while_heavy_run", "heavy", "server_rss_mib",
                           "loading"))
    assert report["users"] == {"cheap": 2, "heavy": 2, "heavy_calls_each": 3, "app_concurrency": 2, "cheap_lane": 8}
    assert report["cheap_alone"]["n"] == 6 and report["heavy"]["n"] == 6 and report["cheap_while_heavy_run"]["n"] >= 1
    for phase in ("cheap_1_user", "cheap_alone", "cheap_while_heavy_run"):  # every cheap call traced by the server
        part = report[phase]
        assert part["server_queue_wait"]["n"] == part["server_processing"]["n"] == part["n"], part
        assert part["handler"]["p50_s"] <= part["server_processing"]["p50_s"], part
    assert report["failed_calls"] == 0 and report["app_start_s"] > 0 and report["p50_ratio_loaded_to_alone"] > 0
    assert 0 < report["server_rss_mib"]["idle"] <= report["server_rss_mib"]["peak"]
    loading = report["loading"]
    assert loading["mathneuro_calls"] >= 1 and loading["models_loaded"] >= 1
    assert loading["failed"] == loading["different"] == loading["load_failures"] == 0 and loading["examples"] == []
