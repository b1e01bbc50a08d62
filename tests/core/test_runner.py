"""core.runner (the one lookup: example, then cache, then compute; precompute), core.progress (the one progress +
cancel convention), core.files (the one atomic writer) and core.results (a result's files)."""
import json
import threading

import pandas as pd
import plotly.graph_objects as go
import pytest

from core import files as core_files
from core import progress, results, runner
from core.errors import BadInputError, Cancelled


@pytest.fixture
def private(tmp_path, monkeypatch):
    from core.cache import ResultsCache
    cache = ResultsCache(tmp_path / "results")
    monkeypatch.setattr(runner, "results_cache", lambda: cache)
    monkeypatch.setattr(core_files, "files_dir", lambda: (tmp_path / "files").mkdir(exist_ok=True) or tmp_path / "files")
    return cache


# ---- atomic writes -------------------------------------------------------------------------------------------
def test_atomic_write_file_text_bytes_and_writer(tmp_path):
    p = core_files.atomic_write(tmp_path / "a" / "x.json", '{"a": 1}')
    assert json.loads(p.read_text()) == {"a": 1} and oct(p.stat().st_mode)[-3:] == "644"
    core_files.atomic_write(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    core_files.atomic_write(p, lambda tmp: tmp.write_text("by writer"))
    assert p.read_text() == "by writer"
    assert sorted(x.name for x in p.parent.iterdir()) == ["x.json"]  # no temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    p = core_files.atomic_write(tmp_path / "x.txt", "old")

    def broken(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError):
        core_files.atomic_write(p, broken)
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["x.txt"]


def test_atomic_write_makes_a_folder_in_one_step_and_replaces_only_its_own_entries(tmp_path):
    """A new folder appears whole; into an existing one, each entry written replaces its namesake and the folder's
    other entries stay (issue 42: a command never deletes what it did not write)."""
    out = tmp_path / "model"
    core_files.atomic_write(out, lambda tmp: (tmp / "w.bin").write_bytes(b"1"), folder=True)
    core_files.atomic_write(out, lambda tmp: (tmp / "v.bin").write_bytes(b"2"), folder=True)
    assert sorted(x.name for x in out.iterdir()) == ["v.bin", "w.bin"] and oct(out.stat().st_mode)[-3:] == "755"
    core_files.atomic_write(out, lambda tmp: (tmp / "v.bin").write_bytes(b"3"), folder=True)
    assert (out / "v.bin").read_bytes() == b"3" and (out / "w.bin").read_bytes() == b"1"

    def broken(tmp):
        (tmp / "part").write_text("x")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        core_files.atomic_write(out, broken, folder=True)
    assert sorted(x.name for x in out.iterdir()) == ["v.bin", "w.bin"] and [x.name for x in tmp_path.iterdir()] == [
        "model"]


# ---- progress and cancellation --------------------------------------------------------------------------------
def test_one_progress_convention_with_cancel():
    seen = []
    progress.report(lambda f, m: seen.append((f, m)), 1.7, "clipped")
    assert seen == [(1.0, "clipped")]
    half = progress.scaled(lambda f, m: seen.append((f, m)), 0.5, 1.0)
    half(0.5, "half way")
    assert seen[-1] == (0.75, "half way")
    items = progress.item_progress(lambda f, m: seen.append((f, m)), "layers")
    items(1, 4, "q_proj")
    items(2, 4)
    assert seen[-2:] == [(0.25, "layers 1/4: q_proj"), (0.5, "layers 2/4")]
    flag = threading.Event()
    checked = progress.cancellable(lambda f, m: seen.append((f, m)), flag.is_set)
    checked(0.1, "running")
    flag.set()
    with pytest.raises(Cancelled):
        checked(0.2, "stopped")
    assert seen[-1] == (0.1, "running")
    progress.report(None, 0.5, "nobody listens")  # no callable: nothing happens


# ---- lookup ---------------------------------------------------------------------------------------------------
def test_lookup_example_then_cache_then_compute(private, tmp_path):
    store_path = tmp_path / "examples.json"
    runner.ExampleStore.write(store_path, [{"model": "m", "fingerprint": "fp", "analysis": "a", "params": {"k": 1},
                                            "data": {"value": "precomputed"}}])
    store = runner.ExampleStore(store_path)
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}
    found = runner.lookup("fp", "a", {"k": 1}, compute, examples=store)
    assert found.source == "precomputed" and found.data == {"value": "precomputed"} and not calls
    first = runner.lookup("fp", "a", {"k": 2}, compute, examples=store)
    second = runner.lookup("fp", "a", {"k": 2}, compute, examples=store)
    assert (first.source, second.source) == ("computed", "cache") and second.data == first.data and calls == [1]
    assert first.key == second.key == runner.result_key("fp", "a", {"k": 2})
    other = runner.lookup("other-model", "a", {"k": 1}, compute, examples=store)  # same params, other weights
    assert other.source == "computed"


def test_a_result_with_tensors_goes_the_same_way_and_is_never_an_example(private, tmp_path):
    """``lookup(..., tensors=True)``: the compute returns a CacheEntry (data + tensors), the cache answers it the
    second time, a stored entry that fails ``check`` is recomputed, and ``precompute`` does not write it."""
    import torch
    from core.cache import CacheEntry

    calls = []

    def compute():
        calls.append(1)
        return CacheEntry({"n": len(calls)}, {"v": torch.arange(3.0)})

    first = runner.lookup("fp", "stats", {"k": 1}, compute, tensors=True)
    second = runner.lookup("fp", "stats", {"k": 1}, compute, tensors=True)
    assert (first.source, second.source) == ("computed", "cache") and calls == [1]
    assert second.data.data == {"n": 1} and torch.equal(second.data.tensors["v"], torch.arange(3.0))

    def fits(entry):
        if entry.data["n"] < 2:
            raise ValueError("computed before the model changed")
    refit = runner.lookup("fp", "stats", {"k": 1}, compute, tensors=True, check=fits)
    assert refit.source == "computed" and refit.data.data == {"n": 2}  # the stored entry failed: recomputed
    path = runner.precompute([lambda: (runner.lookup("fp", "stats", {"k": 2}, compute, tensors=True),
                                       runner.lookup("fp", "a", {"k": 2}, lambda: {"ok": 1}))], tmp_path / "ex.json")
    assert [e["analysis"] for e in runner.ExampleStore(path).entries()] == ["a"]


def test_a_cancelled_computation_is_not_cached(private):
    def stopped():
        raise Cancelled("Stopped.")
    with pytest.raises(Cancelled):
        runner.lookup("fp", "a", {}, stopped)
    assert runner.lookup("fp", "a", {}, lambda: {"ok": True}).source == "computed"


def test_example_store_refuses_incomplete_entries_and_reads_nothing_from_a_bad_file(tmp_path):
    with pytest.raises(BadInputError, match="lacks"):
        runner.ExampleStore.write(tmp_path / "e.json", [{"model": "m"}])
    (tmp_path / "bad.json").write_text("{not json")
    assert runner.ExampleStore(tmp_path / "bad.json").entries() == []
    assert runner.ExampleStore(tmp_path / "missing.json").get("fp", "a", {}) is None


# ---- results and files ----------------------------------------------------------------------------------------
def _result(key="k1"):
    fig = go.Figure(go.Bar(x=[1], y=[2]))
    return results.Result("done", {"a": 1}, tables={"rows": [{"x": 1}, {"x": 2}]}, figures={"bars": fig}, key=key,
                         stem="demo")


def test_result_files_are_written_once_per_key(private, tmp_path):
    files = _result().files()
    assert [f.rsplit("/", 1)[1] for f in files] == ["demo.json", "demo.csv", "demo-long.csv", "demo-long.parquet",
                                                    "demo.html"]
    mtimes = [tmp_path.joinpath(f).stat().st_mtime_ns for f in files]
    again = _result().files()
    assert again == files and [tmp_path.joinpath(f).stat().st_mtime_ns for f in again] == mtimes
    only = results.Result("x", {"a": 1}, tables={"t": [{"x": 1}]}, downloads=("json", "csv"), key="k2", stem="s")
    assert [f.rsplit(".", 1)[1] for f in only.files()] == ["json", "csv", "csv", "parquet"]


def test_result_write_is_the_cli_out(tmp_path):
    res = _result()
    assert [p.name for p in res.write(tmp_path)] == ["demo.json", "demo.csv", "demo-long.csv", "demo-long.parquet",
                                                     "demo.html"]
    assert json.loads(res.write(tmp_path / "one.json")[0].read_text()) == {"a": 1}
    assert res.write(tmp_path / "one.csv")[0].read_text().splitlines() == ["x", "1", "2"]
    assert pd.read_parquet(res.write(tmp_path / "one.parquet")[0]).equals(res.frame())
    with pytest.raises(BadInputError, match=".html"):
        res.write(tmp_path / "one.png")
    with pytest.raises(BadInputError, match="does not exist"):
        res.write(tmp_path / "no-such-folder")
    with pytest.raises(BadInputError, match="no figure"):
        results.Result("x", {}, stem="s").write(tmp_path / "f.html")
