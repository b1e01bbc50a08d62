"""A results cache that cannot serve a tampered or broken entry (issue 38). The issue's case: Mix-LN layer removal of
mathneuro-tiny, its entry planted with ``baseline_perplexity: null`` (every later call failed with "unsupported format
string passed to NoneType.__format__", also after a restart), or with a wrong finite value (served "from the results
cache" across a restart). Each kind of plant is written into the entry on disk, the cache is opened afresh (a fresh
cache object, as after a restart; one case in a new process), and the next request recomputes the right answer, with
one log line saying why."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from core import runner
from core.cache import ResultsCache, entry_checksum
from tests.conftest import REPO, linked_home

SAMPLES, SEQ = 2, 16


def removal():
    import core.mixln as mixln

    return mixln.layer_removal_result(["mathneuro-tiny"], SAMPLES, SEQ)


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """The answer computed into an empty cache: (status, data, the entry's file name, its bytes)."""
    root = tmp_path_factory.mktemp("truth")
    cache = ResultsCache(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "results_cache", lambda: cache)
        res = removal()
    assert res.source == "computed"
    (entry,) = [p for p in cache.entries() if "removal" in p.name]
    return res.status, res.data, entry.name, entry.read_bytes()


def _read(path):
    with safe_open(str(path), framework="pt") as fh:
        meta = dict(fh.metadata())
    return load_file(str(path)), meta


def _write(path, tensors, meta, reseal: bool):
    if reseal:  # a plant that recomputes the checksum: only the schema or the record can catch it
        meta["checksum"] = entry_checksum(meta["data"], meta.get("about", ""), tensors)
    save_file(tensors, str(path), metadata=meta)


def plant_null(path):
    tensors, meta = _read(path)
    data = json.loads(meta["data"])
    data["baseline_perplexity"] = None
    meta["data"] = json.dumps(data)
    _write(path, tensors, meta, reseal=True)


def plant_wrong_value(path):
    tensors, meta = _read(path)
    data = json.loads(meta["data"])
    data["baseline_perplexity"] = 561_864.6  # finite and plausible; the checksum is left as it was
    meta["data"] = json.dumps(data)
    _write(path, tensors, meta, reseal=False)


def plant_truncated(path):
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def plant_foreign_model(path):
    """Another model's removal result under this key (its own record and a valid checksum)."""
    tensors, meta = _read(path)
    about = json.loads(meta["about"])
    about["fingerprint"] = "0" * 24
    meta["about"] = json.dumps(about, sort_keys=True)
    _write(path, tensors, meta, reseal=True)


def plant_foreign_analysis(path):
    """An angular-distance entry's record under the removal key (data that fits no removal view)."""
    tensors, meta = _read(path)
    about = json.loads(meta["about"])
    about["analysis"] = "mixln/angular"
    meta["about"] = json.dumps(about, sort_keys=True)
    _write(path, tensors, meta, reseal=True)


def plant_old_version(path):
    tensors, meta = _read(path)
    meta.pop("checksum")
    _write(path, tensors, meta, reseal=False)


PLANTS = {"null field": (plant_null, "data.baseline_perplexity is None"),
          "wrong value, stale checksum": (plant_wrong_value, "checksum does not match"),
          "truncated file": (plant_truncated, "cannot be read as an entry"),
          "another model's entry": (plant_foreign_model, "computed for another model or analysis"),
          "another analysis' entry": (plant_foreign_analysis, "computed for another model or analysis"),
          "no checksum": (plant_old_version, "no checksum")}


QUICK = ("null field", "wrong value, stale checksum")  # the two; the other kinds run in the slow tier


@pytest.mark.parametrize("kind", [k if k in QUICK else pytest.param(k, marks=pytest.mark.slow) for k in PLANTS])
def test_a_planted_entry_is_dropped_with_one_log_line_and_recomputed_after_a_restart(kind, truth, tmp_path, caplog,
                                                                                     monkeypatch):
    status, data, name, whole = truth
    root = tmp_path / "results"
    root.mkdir()
    (root / name).write_bytes(whole)
    plant, why = PLANTS[kind]
    plant(root / name)
    cache = ResultsCache(root)  # a fresh cache object over the planted folder: what a restarted app opens
    monkeypatch.setattr(runner, "results_cache", lambda: cache)
    with caplog.at_level(logging.WARNING, logger="layerwise.cache"):
        res = removal()
    assert res.source == "computed" and res.data == data
    assert res.status == status
    lines = [r.getMessage() for r in caplog.records if r.name == "layerwise.cache"]
    assert len(lines) == 1 and why in lines[0] and name[:-len(".safetensors")] in lines[0], lines
    again = ResultsCache(root)
    monkeypatch.setattr(runner, "results_cache", lambda: again)
    res = removal()  # the recomputed entry is whole: served from the cache, right
    assert res.source == "cache" and res.data == data


@pytest.mark.slow
def test_a_null_field_planted_on_disk_is_recomputed_by_a_new_process(truth, tmp_path):
    """The issue's report end to end: ``mixln removal`` in a fresh process over a cache folder holding the planted
    null gives the right baseline, not a traceback."""
    status, data, name, whole = truth
    home = linked_home(tmp_path / "home")
    (home / "results").mkdir()
    (home / "results" / name).write_bytes(whole)
    plant_null(home / "results" / name)
    env = {**os.environ, "LAYERWISE_HOME": str(home), "LAYERWISE_ONLINE": "0"}
    proc = subprocess.run([sys.executable, "-m", "core", "mixln", "removal", "--model", "mathneuro-tiny", "--samples",
                           str(SAMPLES), "--seq", str(SEQ), "--json"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["baseline_perplexity"] == data[0]["baseline_perplexity"]
    assert "dropped the cached result" in proc.stderr and "data.baseline_perplexity is None" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("field, value", [("logit", 7.5), pytest.param("total", 0.123, marks=pytest.mark.slow)])
def test_a_resealed_mambalrp_result_whose_sum_is_not_its_logit_is_recomputed(field, value, tmp_path, caplog,
                                                                               monkeypatch):
    """Issue 42, item 8: the schema did not check MambaLRP's sum = logit, so a wrong value written with a fresh
    checksum was served beside the right sum. Now the entry is dropped with one log line and computed again."""
    import core.lrp as lrp

    cache = ResultsCache(tmp_path)
    monkeypatch.setattr(runner, "results_cache", lambda: cache)
    text = "A slow, dull film with a good score."
    truth = lrp.text_result("mamba-sentiment", text, ["mambalrp"])
    (entry,) = [p for p in cache.entries() if "lrp" in p.name]
    tensors, meta = _read(entry)
    data = json.loads(meta["data"])
    data["methods"]["mambalrp"][field] = value
    meta["data"] = json.dumps(data)
    _write(entry, tensors, meta, reseal=True)
    fresh = ResultsCache(tmp_path)
    monkeypatch.setattr(runner, "results_cache", lambda: fresh)
    with caplog.at_level(logging.WARNING, logger="layerwise.cache"):
        again = lrp.text_result("mamba-sentiment", text, ["mambalrp"])
    lines = [r.getMessage() for r in caplog.records if r.name == "layerwise.cache"]
    assert again.source == "computed" and again.data["methods"]["mambalrp"][field] == pytest.approx(
        truth.data["methods"]["mambalrp"][field])
    assert len(lines) == 1 and "is not the logit" in lines[0], lines


def test_a_corrupt_example_store_is_said_in_the_log_and_in_the_view(tmp_path, caplog):
    """Issue 42, item 8: a corrupt examples.json silently disabled every precomputed example. Now reading it logs one
    line naming the file and why, and a view it should have answered says it was computed afresh."""
    store_path = tmp_path / "examples.json"
    store_path.write_text('{"format": "layerwise-examples/1", "entries": [{"trunc')
    store = runner.ExampleStore(store_path)
    with caplog.at_level(logging.WARNING, logger=runner.log.name):
        found = runner.lookup("f" * 24, "demo", {"x": 1}, lambda: {"v": 1}, examples=store, cache=False)
        runner.lookup("f" * 24, "demo", {"x": 2}, lambda: {"v": 2}, examples=store, cache=False)
    lines = [r.getMessage() for r in caplog.records if r.name == runner.log.name]
    assert len(lines) == 1 and str(store_path) in lines[0] and "could not be read (JSONDecodeError" in lines[0]
    assert found.source == "computed" and found.data == {"v": 1}
    assert found.note == "the precomputed examples (examples.json) could not be read, so this view was computed afresh"
    from core.analyses import view
    from core.neuzip.views import ANALYSES

    entry = runner.ExampleStore(REPO / "assets" / "neuzip" / "examples.json").entries("neuzip/histograms")[0]
    a = ANALYSES["histograms"]
    data = {"model": entry["model"], **entry["data"]}  # as find names it
    shown = view(a, runner.Found(data, "computed", None, found.note), a.request.parse(entry["model"]))
    assert shown.status.endswith("*Note: the precomputed examples (examples.json) could not be read, so this view was "
                                 "computed afresh.*")
