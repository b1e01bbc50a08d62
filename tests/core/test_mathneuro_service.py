"""core.mathneuro's service: the committed examples answer at once without loading the model, every analysis has a
status, its table and figure, and a repeated request is a cache hit."""
import time

import pytest

import core.mathneuro as mn
from core.mathneuro.service import default_calls
from core.zoo import registered_names

pytestmark = pytest.mark.usefixtures("single_thread")
needs_model = pytest.mark.skipif(mn.DEMO_NAME not in registered_names(), reason="mathneuro-tiny not committed")


@needs_model
def test_default_view_is_answered_by_the_examples_without_loading(fresh_cache):
    from core.zoo import clear_loaded, loading

    clear_loaded()
    for analysis, fn, kwargs in default_calls():
        t0 = time.perf_counter()
        res = fn(**kwargs) if analysis != "drill" else None
        if res is None:  # the drill-down lists the model's matrices, so it loads the model
            continue
        assert res.source == "precomputed" and time.perf_counter() - t0 < 2, analysis
        assert res.status and res.tables[analysis] and res.figures[analysis].layout.title.text
        assert [f.rsplit(".", 1)[1] for f in res.files()] == ["json", "csv"]
    assert not loading._loaded


@needs_model
def test_a_repeated_analysis_is_a_cache_hit(fresh_cache):
    args = (mn.DEMO_NAME, "arithmetic-words", ["review-sentiment"], 6, 0.02, "mathneuro")
    first = mn.layer_distribution_result(*args)
    second = mn.layer_distribution_result(*args, show="share")
    assert (first.source, second.source) == ("computed", "cache") and second.data == first.data
    assert "from the results cache" in second.status and first.key == second.key
