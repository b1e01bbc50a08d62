"""Dataset-level evaluations (faithfulness, conservation, long range, key-token ground truth) through the service and
the CLI: real properties on the embedded models, tiny n; where a result came from is said by the Result alone."""
import json

import numpy as np
import pytest
import torch

import core.lrp as lrp
from core.cli import main
from core.errors import BadInputError
from core.lrp import inputs
from core.lrp.samples import DEFAULT_DATASETS, samples_and_gold, task_kind
from core.progress import cancellable


@pytest.fixture(autouse=True)
def private_cache(fresh_cache):
    """Results go to a private cache (the datasets stay where they are prepared)."""
    torch.set_num_threads(2)


def samples_for(model: str, n: int, target: str = "predicted", seed: int = 0, max_tokens=None) -> list[dict]:
    loaded = inputs.load(model)
    return samples_and_gold(loaded, DEFAULT_DATASETS[task_kind(loaded)], "test", n, seed, target, max_tokens)[0]


def test_samples_for_formats_and_seeding():
    img = samples_for("vision-mamba-mnist", n=3)
    assert len(img) == 3 and set(img[0]) == {"pixel_values", "target"} and img[0]["target"] is None
    px = img[0]["pixel_values"]
    assert px.shape == (1, 1, 28, 28) and px.dtype == torch.float32 and 0 <= px.min() and px.max() <= 1
    text = samples_for("mamba-sentiment", n=4, target="gold", seed=3)
    assert all(s["input_ids"].shape[0] == 1 and s["input_ids"].dtype == torch.int64 for s in text)
    assert all(s["target"] in (0, 1) for s in text)
    again = samples_for("mamba-sentiment", n=4, target="gold", seed=3)
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(text, again))
    other = samples_for("mamba-sentiment", n=4, target="gold", seed=4)
    assert not all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(text, other))
    lm = samples_for("mamba-lm", n=2, max_tokens=24, target="gold")
    assert all(s["input_ids"].shape == (1, 24) and isinstance(s["target"], int) for s in lm)


def test_vision_mambalrp_is_faithful_and_conservative():
    r = lrp.evaluation_result("vision-mamba-mnist", n=3, methods="mambalrp,random", steps=4, cache=False,
                              retention=False).data  # the equal-retention pair: test_cli_writes_a_folder
    json.dumps(r)  # JSON-serialisable as it is
    assert r["complete"] and r["n_done"] == 3 and r["dataset"] == "mnist-5k" and r["methods"] == ["mambalrp", "random"]
    f = r["faithfulness"]
    assert f["mambalrp"]["delta_af"] > f["random"]["delta_af"] + 1.0
    for m in r["methods"]:
        assert len(f[m]["morf"]) == len(f[m]["lerf"]) == 5 == len(r["fractions"])
        assert f[m]["delta_af"] == pytest.approx(f[m]["mean_area_lerf"] - f[m]["mean_area_morf"])
        assert f[m]["morf"][0] == pytest.approx(f[m]["lerf"][0])  # nothing flipped yet: the same logit
    c = r["conservation"]
    assert c["mambalrp"]["conservative"] and c["mambalrp"]["mean_abs_error"] < 1e-4
    assert c["random"]["mean_abs_error"] > 0.1
    assert np.allclose(c["mambalrp"]["logits"], c["random"]["logits"])  # both explain the same prediction
    assert 0 <= r["accuracy"] <= 1 and r["mean_length"] == 16


def test_conservation_only_is_cached_and_stop_is_not():
    kw = {"n": 2, "methods": ["mambalrp", "gradient_x_input"], "faithfulness": False}
    first = lrp.evaluation_result("mamba-sentiment", **kw)
    assert first.source == "computed" and "faithfulness" not in first.data
    assert first.data["conservation"]["mambalrp"]["mean_abs_error"] < 1e-4
    second = lrp.evaluation_result("mamba-sentiment", **kw)
    assert second.source == "cache" and second.key == first.key
    assert second.data["conservation"] == first.data["conservation"]
    assert not {"cached", "source"} & (set(first.data) | set(second.data))  # provenance only beside the data
    calls = []
    stopped = lrp.evaluation_result("mamba-sentiment", n=3, methods=["mambalrp"], faithfulness=False,
                                    progress=cancellable(lambda f, m: calls.append(f), lambda: len(calls) >= 2))
    assert not stopped.data["complete"] and stopped.data["n_done"] == 2 and stopped.key is None
    assert "Stopped early: 2 of 3 samples" in stopped.status
    again = lrp.evaluation_result("mamba-sentiment", n=3, methods=["mambalrp"], faithfulness=False)
    assert again.data["complete"] and again.source == "computed"  # the partial run was not cached


def test_long_range_distances():
    r = lrp.long_range_result("mamba-lm", n=1, methods=["mambalrp", "random"], k=5, max_tokens=16, cache=False).data
    json.dumps(r)
    for m in r["methods"]:
        s = r["methods_stats"][m]
        assert len(s["distances"]) == 1 and len(s["distances"][0]) == 5
        assert all(0 <= d < 16 for d in s["distances"][0]) and len(set(s["distances"][0])) == 5
        assert sum(s["histogram"]) == 5


@pytest.mark.parametrize("call", [
    lambda: lrp.evaluation_result("vision-mamba-mnist", n=0, cache=False),
    lambda: lrp.evaluation_result("vision-mamba-mnist", n=1.5, cache=False),
    lambda: lrp.evaluation_result("vision-mamba-mnist", n=1, steps=True, cache=False),
    lambda: lrp.evaluation_result("vision-mamba-mnist", n=1, methods=["nope"], cache=False),
    lambda: lrp.evaluation_result("vision-mamba-mnist", n=1, methods=[], cache=False),
    lambda: lrp.evaluation_result("vision-mamba-mnist", dataset="movie-sentiment", n=1, cache=False),
    lambda: lrp.evaluation_result("mamba-sentiment", n=1, target="oracle", cache=False),
    lambda: lrp.evaluation_result("mamba-sentiment", n=1, baseline="noise", cache=False),
    lambda: lrp.evaluation_result("mamba-sentiment", n=1, options={"lime": {}}, cache=False),
    lambda: lrp.long_range_result("mamba-sentiment", n=1, cache=False),
    lambda: lrp.long_range_result("mamba-lm", n=1, max_tokens=1, cache=False),
    lambda: lrp.key_token_result(n=1, k=0, cache=False),
    lambda: lrp.key_token_result(n=1, seeds=51, cache=False),
])
def test_bad_input_is_rejected(call):
    with pytest.raises(BadInputError):
        call()


@pytest.mark.parametrize("argv", [
    ["lrp", "faithfulness", "--model", "no-such-model", "-n", "2"],
    ["lrp", "faithfulness", "--model", "vision-mamba-mnist", "-n", "0"],
    ["lrp", "conservation", "--model", "mamba-sentiment", "-n", "2", "--methods", "mambalrp,nope"],
    ["lrp", "long-range", "--model", "mamba-sentiment", "-n", "1"],
    ["lrp", "long-range", "--model", "vision-mamba-mnist", "-n", "1"],  # not a language model
    ["lrp", "precompute-evaluation", "--only", "everything"],
])
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_cli_writes_a_folder(tmp_path, capsys):
    tmp_path = tmp_path / "out"  # an empty folder (one that holds other files needs --overwrite: issue 42)
    tmp_path.mkdir()
    argv = ["lrp", "faithfulness", "--model", "mamba-sentiment", "-n", "2", "--methods", "mambalrp,random",
            "--steps", "4", "--out", str(tmp_path), "--json", "--no-cache"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    data = json.loads((tmp_path / "faithfulness-mamba-sentiment.json").read_text())
    assert data["faithfulness"]["mambalrp"]["delta_af"] == printed["faithfulness"]["mambalrp"]["delta_af"]
    csv = (tmp_path / "faithfulness-mamba-sentiment.csv").read_text().splitlines()
    assert csv[0].startswith("method,label,delta_af") and len(csv) == 3
    assert "pi_soft_nc" in csv[0] and "mambalrp_minus_it_delta_af" in csv[0]
    f, ret = data["faithfulness"], data["retention"]  # equal retention beside ΔA^F, the same inputs scored for all
    assert ret["n_defined"] <= 2 and len(ret["grid"]) == len(f["random"]["nc_curve"]) == 9
    assert ret["n_defined"] == sum(p - q >= ret["min_drop"] for p, q in zip(ret["p_full"], ret["p_empty"]))
    for m in ("mambalrp", "random"):
        scored = [x for x in f[m]["pi_soft_nc_per_input"] if x is not None]
        assert len(scored) == ret["n_defined"] and f[m]["pi_soft_ns"] is None or 0 <= f[m]["pi_soft_ns"] <= 1
    assert [x is None for x in f["mambalrp"]["pi_soft_ns_per_input"]] == [
        x is None for x in f["random"]["pi_soft_ns_per_input"]]
    c = data["conservation"]["mambalrp"]
    assert all(0 <= x <= 1 for x in c["share_off_explained"]) and all(x >= 1 for x in c["effective_units"])
    assert "<html" in (tmp_path / "faithfulness-mamba-sentiment.html").read_text()[:200].lower()


def test_committed_evaluations_answer_their_requests_and_precompute_writes_their_layout(tmp_path):
    from core.lrp import committed, report
    from core.lrp.eval_requests import EvaluationRequest
    from core.runner import result_key
    store = committed.evaluation_store()
    for item in ("mnist", "sentiment"):  # the tab's requests are answered by the committed files, keyed alike
        stem, analysis, model, raw = committed.EVALUATION_ITEMS[item]
        request = EvaluationRequest.parse(**raw)
        if "retention" not in json.loads((committed.EVALUATION_DIR / f"{stem}.json").read_text()):
            # made before the equal-retention protocol: keyed as a request without it, and the page names the command
            request = EvaluationRequest.parse(**raw, retention=False)
            assert f"precompute-evaluation --only {item}` adds it" in report.blocks()[f"faithfulness-{model}"]
        _, fp, params = request.key()
        assert store.get(fp, analysis, params)["n_done"] == raw["n"]
    res = lrp.committed_result("sentiment")
    assert res.source == "precomputed" and res.key == result_key(fp, "lrp-evaluation", params)
    assert "cached" not in res.data and res.data["command"].endswith("--only sentiment")
    out = tmp_path / "evaluation"  # a new folder (tmp_path holds this test's results cache)
    assert main(["lrp", "precompute-evaluation", "--only", "sentiment", "-n", "1", "--out", str(out)]) == 0
    assert json.loads((out / "index.json").read_text())["items"] == {
        "sentiment": "faithfulness-mamba-sentiment.json"}
    written = json.loads((out / "faithfulness-mamba-sentiment.json").read_text())
    assert list(written)[-2:] == ["cached", "command"] and written["cached"] is False and written["n_done"] == 1
    assert written["command"] == "python -m core lrp precompute-evaluation --only sentiment -n 1"
    entry, = committed.evaluation_store(out).entries()
    assert entry["params"] == EvaluationRequest.parse(**{**raw, "n": 1}).key()[2]
    assert entry["data"] == {k: v for k, v in written.items() if k != "cached"}


@pytest.mark.slow
def test_key_token_ground_truth_over_seeds():
    torch.set_num_threads(1)  # two tiny trainings: a second thread only adds contention on a shared CPU
    r = lrp.key_token_result(n=20, methods=["lrp_ln", "random"], cache=False, seeds=2).data
    assert r["seeds"] == [0, 1] and r["n_seeds"] == 2 and r["n_done"] == 40 and r["complete"]
    assert min(r["model"]["accuracy_per_seed"]) > 0.95
    for m in ("lrp_ln", "random"):
        per_seed = r["hit_rate_per_seed"][m]
        assert r["hit_rate"][m] == pytest.approx(np.mean(per_seed))
        assert r["hit_rate_std"][m] == pytest.approx(np.std(per_seed, ddof=1))
        assert r["hit_rate_min"][m] == min(per_seed) and r["hit_rate_max"][m] == max(per_seed)
    assert r["hit_rate"]["lrp_ln"] > r["hit_rate"]["random"] + 0.3
    # the last-token observation: misses counted per seed agree with the hit rates (k = 1)
    lt = r["last_token"]
    for m in ("lrp_ln", "random"):
        misses = lt["methods"][m]["misses_per_seed"]
        assert misses == [round(20 * (1 - h)) for h in r["hit_rate_per_seed"][m]]
        share = lt["methods"][m]["last_first_share_of_misses"]
        assert share is None or 0.0 <= share <= 1.0
    assert lt["median_abs_change_key"] > 0


def test_zeroed_logit_drop_is_the_change_of_the_target_logit_and_of_the_margin():
    """The last-token measurement by hand: zero one token's embedding, run the model, compare the logit and the
    margin over the other class."""
    from core.data.synthetic import key_token_task
    from core.lrp.adapters import adapter_for
    from core.lrp.key_token import _zeroed_logit_drops, train_key_token_model
    model, _ = train_key_token_model(0, config={"steps": 5})
    rec = key_token_task(1, seed=7, length=16)[0]
    ids = torch.tensor([list(rec.tokens)])
    drops, margins = _zeroed_logit_drops(model, ids, rec.label, [rec.key_positions[0], 15])
    adapter = adapter_for(model)
    other = 1 - rec.label  # two classes
    with torch.no_grad():
        emb = adapter.embed(ids, None)
        logits = adapter.logits(emb)[0]
        for pos, d, m in zip([rec.key_positions[0], 15], drops, margins):
            x = emb.clone()
            x[0, pos] = 0
            after = adapter.logits(x)[0]
            assert d == pytest.approx(float(logits[rec.label] - after[rec.label]), abs=1e-5)
            before_margin = logits[rec.label] - logits[other]
            assert m == pytest.approx(float(before_margin - (after[rec.label] - after[other])), abs=1e-5)
