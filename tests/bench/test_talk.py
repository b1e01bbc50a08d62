"""bench/talk.py --smoke: a deep link, a click and two presenter keys timed in Chromium, one round, and every
precomputed example drawn in-process (the talk timings the browser tests used to assert; here they are measured and
printed beside the target)."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke
from tests.e2e.test_browser import need_chromium

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_smoke_times_every_tab_and_the_presenter_keys(tmp_path_factory):
    need_chromium()
    # a short folder: Chromium's profile (and its socket, at most 108 characters of path) goes under its TMPDIR
    report = run_smoke(tmp_path_factory.mktemp("talk"), "talk.py", timeout=900)
    assert_finite(report, ("per_tab", "all_tabs", "presenter_key_to_chart", "examples_draw"))
    assert set(report["per_tab"]) == {"lrp"} and report["reps"] == 1
    for tab, figures in report["per_tab"].items():
        for kind in ("ready_to_chart", "navigation_to_chart", "click_to_chart"):
            assert figures[kind]["n"] == 1 and figures[kind]["target_ms"] == 1000, (tab, kind)
    assert report["presenter_key_to_chart"]["n"] == 2
    import core.examples as ex
    assert set(report["examples_draw"]["per_example_p50_ms"]) == {f"{tab}/{e.name}" for tab, examples in
                                                                  ex.registry().items() for e in examples}
