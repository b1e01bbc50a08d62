"""core.mathneuro's service: the committed examples answer at once without loading the model, every analysis has a
status, its table and figure, and a repeated request is a cache hit."""

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
        res = fn(**kwargs) if analysis != "drill" else None
        if res is None:  # the drill-down lists the model's matrices, so it loads the model
            continue
        assert res.source == "precomputed", analysis
        assert res.status and res.tables[analysis] and res.figures[analysis].layout.title.text
        assert [f.rsplit(".", 1)[1] for f in res.files()] == ["json", "csv", "csv", "parquet"]  # and the long table
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


@pytest.mark.parametrize("call", [
    lambda nm: mn.layer_distribution_result(mn.DEMO_NAME, "arithmetic-words", nm, 4, 0.05),
    lambda nm: mn.effect_result(mn.DEMO_NAME, "arithmetic-words", nm, 4, 0.05),
    lambda nm: mn.proportion_sweep_result(mn.DEMO_NAME, "arithmetic-words", nm, 4),
    lambda nm: mn.scale_sweep_result(mn.DEMO_NAME, "arithmetic-words", nm, 4, 0.05),
    lambda nm: mn.consistency_result(mn.DEMO_NAME, "arithmetic-words", nm, 4),
    lambda nm: mn.identify_result(mn.DEMO_NAME, "arithmetic-words", nm, 4, 0.05, "mathneuro"),
])
def test_at_most_two_nonmath_datasets_is_the_services_rule(call):
    """The rule lives in the request (core.mathneuro.requests), so the tab, the CLI and a notebook all get it; none
    of these loads the model to say so."""
    from core.errors import BadInputError
    from core.zoo import clear_loaded, loading

    clear_loaded()
    with pytest.raises(BadInputError, match="at most two"):
        call(["review-sentiment", "movie-sentiment", "mmlu"])
    with pytest.raises(BadInputError, match="No non-math dataset"):
        call([])
    assert not loading._loaded


def test_provenance_is_only_in_found_and_lookup_only_in_one_place():
    """No committed result carries a "source" or "cached" field (where a result came from is ``Found.source``, then
    ``Result.source``), and ``core.runner.lookup`` is asked in known places only: compute.py (the statistics) and
    batch.py (a batch row's prompt scores); every analysis is answered through ``core.analyses.answer``."""
    from pathlib import Path

    from core.mathneuro.service import EXAMPLES

    assert EXAMPLES.entries() and all(not {"source", "cached"} & set(e["data"]) for e in EXAMPLES.entries())
    package = Path(mn.__file__).parent
    callers = sorted(p.name for p in package.glob("*.py") if "lookup(" in p.read_text())
    assert callers == ["batch.py", "compute.py"]


@needs_model
def test_progress_has_one_shape_and_rises_to_the_end(fresh_cache):
    heard = []
    mn.layer_distribution_result(mn.DEMO_NAME, "arithmetic-words", ["review-sentiment", "movie-sentiment"], 4, 0.05,
                                 progress=lambda fraction, message: heard.append((fraction, message)))
    fractions = [f for f, _ in heard]
    assert len(heard) == 16 and fractions == sorted(fractions) and 0 < fractions[0] and fractions[-1] == 1.0
    assert heard[3] == (0.25, "math samples 4/4") and heard[-1] == (1.0, "non-math samples 4/4")


@needs_model
def test_precompute_writes_each_analysis_it_looked_up_and_no_statistics(monkeypatch, fresh_cache, tmp_path):
    """``mathneuro precompute`` is :func:`core.runner.precompute` over the default calls: one entry per analysis
    (named by the model), the statistics beneath them stay in the cache; the store then answers the same request."""
    from core.mathneuro import service
    from core.runner import ExampleStore

    small = {"ref": mn.DEMO_NAME, "math": "arithmetic-words", "nonmath": ["review-sentiment"], "n": 6,
             "proportion": 0.05, "method": "mathneuro"}
    monkeypatch.setattr(service, "default_calls", lambda ref: [("layers", mn.layer_distribution_result, small)])
    computed = mn.layer_distribution_result(**small)
    path = mn.precompute_examples(tmp_path / "examples.json", log=lambda message: None)
    entries = ExampleStore(path).entries()
    assert [(e["model"], e["analysis"]) for e in entries] == [(mn.DEMO_NAME, "mathneuro-layers")]
    assert entries[0]["data"] == computed.data and entries[0]["params"] == computed.data["params"]
    monkeypatch.setattr(service, "EXAMPLES", ExampleStore(path))
    again = mn.layer_distribution_result(**small)
    assert again.source == "precomputed" and again.key == computed.key and again.status == computed.status.replace(
        "computed now", "precomputed example")


@needs_model
def test_an_analysis_is_its_registry_entry_and_its_compute_function(monkeypatch, fresh_cache, tmp_path):
    """Adding an analysis to MathNeuro is one entry in ``core.mathneuro.views.ANALYSES`` (request type, compute
    function, figure, status; default CSV rows), answered by the service's ``analysis_result``. The cache and its
    check, the table, the figure, the downloads, ``precompute`` and the committed examples follow. Here: the
    selected share of each weight matrix."""
    import plotly.graph_objects as go

    from core.mathneuro import service, views
    from core.mathneuro.analysis import selection_summary
    from core.mathneuro.requests import LayersRequest
    from core.runner import ExampleStore, precompute

    def compute(req, progress=None):  # what it computes, from the parsed request
        masks = service.masks_for(service.load(req.ref), req.math, req.nonmath[0], req.n, req.proportion,
                                  req.method, progress=progress)
        return {"params": req.params(), "rows": selection_summary(masks)["matrices"]}

    # the registry entry, with its compute function
    monkeypatch.setitem(views.ANALYSES, "matrix-shares", views.analysis(
        "matrix-shares", LayersRequest, compute,
        figure=lambda d: go.Figure(go.Bar(x=[r["name"] for r in d["rows"]], y=[100 * r["share"] for r in d["rows"]]),
                                   layout={"title": {"text": "Share selected per matrix"}}),
        status=lambda d, src: f"{sum(r['selected'] for r in d['rows']):,} selected in {len(d['rows'])} matrices "
                              f"({src})."))

    def matrix_shares_result(ref, math, nonmath, n, proportion, method="mathneuro", progress=None):
        return service.analysis_result("matrix-shares", progress=progress, ref=ref, math=math, nonmath=nonmath, n=n,
                                       proportion=proportion, method=method)

    args = (mn.DEMO_NAME, "arithmetic-words", "review-sentiment", 6, 0.05)
    first, again = matrix_shares_result(*args), matrix_shares_result(*args)
    identified = mn.identify_result(*args, "mathneuro")
    assert (first.source, again.source) == ("computed", "cache") and again.data == first.data
    assert first.data["rows"] == identified.data["matrices"] and len(first.data["rows"]) == 28  # 4 layers x 7
    assert first.status == f"{identified.data['selected']:,} selected in 28 matrices (computed now)."
    assert first.tables == {"matrix-shares": first.data["rows"]} and first.figures["matrix-shares"].layout.title.text
    assert sorted(f.rsplit("/", 1)[1] for f in first.files()) == [
        "mathneuro-matrix-shares-long.csv", "mathneuro-matrix-shares-long.parquet", "mathneuro-matrix-shares.csv",
        "mathneuro-matrix-shares.json"]
    path = precompute([lambda: matrix_shares_result(*args)], tmp_path / "examples.json")
    monkeypatch.setattr(service, "EXAMPLES", ExampleStore(path))
    assert matrix_shares_result(*args).source == "precomputed"
    assert service.example_results()["matrix-shares"].data == first.data
