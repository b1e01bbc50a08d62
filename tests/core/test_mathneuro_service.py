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


@needs_model
def test_a_folder_with_another_config_is_not_answered_with_the_models_results(tmp_path, fresh_cache):
    """A copy of mathneuro-tiny whose config names an unknown architecture gets the loader's clear message, as on the
    CLI, not mathneuro-tiny's precomputed (or cached) result; a plain copy still gets it at once."""
    import json
    import shutil

    from core.errors import ModelLoadError
    from core.paths import ASSETS_DIR

    kwargs = next(kw for analysis, _, kw in default_calls() if analysis == "effect")
    for name in ("plain", "unknown"):
        shutil.copytree(ASSETS_DIR / "models" / mn.DEMO_NAME, tmp_path / name)
    assert mn.effect_result(**{**kwargs, "ref": str(tmp_path / "plain")}).source == "precomputed"
    config = json.loads((tmp_path / "unknown" / "config.json").read_text())
    config.update(architectures=["NoSuchArchForCausalLM"], model_type="nosucharch")
    (tmp_path / "unknown" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="nosucharch"):
        mn.effect_result(**{**kwargs, "ref": str(tmp_path / "unknown")})


@needs_model
def test_statistics_of_other_matrices_in_the_cache_are_dropped_not_used(fresh_cache):
    """A cached statistics entry that does not cover exactly the model's scored matrices (what a race between two
    loads stored: the statistics of an untied twin, with an lm_head.weight entry) is dropped and recomputed."""
    import torch

    from core.cache import CacheEntry
    from core.mathneuro.tasks import MAX_LENGTH

    lm = mn.service.load(mn.DEMO_NAME)
    args = ("arithmetic-words", "review-sentiment", 6, "mathneuro")
    good = mn.service.statistics(lm, *args)
    fresh_cache.clear()
    params = {"math": "arithmetic-words", "nonmath": "review-sentiment", "n": 6, "kind": "column_norms",
              "max_length": MAX_LENGTH}
    tensors = {f"{side}/{k}": v for side in ("math", "nonmath") for k, v in getattr(good, side).sums.items()}
    tensors.update({"math/lm_head.weight": torch.ones(128), "nonmath/lm_head.weight": torch.ones(128)})
    data = {"kind": "column_norms", "math": {"samples": 6, "tokens": 1}, "nonmath": {"samples": 6, "tokens": 1}}
    fresh_cache.get_or_compute(lm.fingerprint, "mathneuro-statistics", params, lambda: CacheEntry(data, tensors))
    again = mn.service.statistics(lm, *args)
    assert set(again.math.sums) == set(good.math.sums) == set(mn.scored_linears(lm.model))
    assert all(torch.equal(again.math.sums[k], good.math.sums[k]) for k in good.math.sums)
    masks = mn.service.masks_for(lm, "arithmetic-words", "review-sentiment", 6, 0.05, "mathneuro")
    assert set(masks) == set(good.math.sums)
