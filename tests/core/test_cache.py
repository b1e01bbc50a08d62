"""The results cache: exact round trips, one computation under concurrency, atomic writes, the size cap."""
import multiprocessing as mp
import os
import threading
import time

import pytest
import torch

from core import cache as cache_mod
from core.cache import CacheEntry, ResultsCache, cache_key


def test_round_trip_is_exact(tmp_path):
    c = ResultsCache(tmp_path)
    t = torch.randn(3, 5, dtype=torch.float64)
    c.put("k", CacheEntry({"a": [1, 2.5, None], "b": "x"}, {"t": t, "m": torch.tensor([True, False])}))
    got = c.get("k")
    assert got.data == {"a": [1, 2.5, None], "b": "x"}
    assert torch.equal(got.tensors["t"], t) and got.tensors["t"].dtype == torch.float64
    assert got.tensors["m"].tolist() == [True, False]


def test_key_covers_model_analysis_and_params():
    k = cache_key("fp1", "lrp/explain", {"a": 1, "b": [2, 3]})
    assert k == cache_key("fp1", "lrp/explain", {"b": [2, 3], "a": 1})  # parameter order does not matter
    assert len({k, cache_key("fp2", "lrp/explain", {"a": 1, "b": [2, 3]}),
                cache_key("fp1", "lrp/other", {"a": 1, "b": [2, 3]}),
                cache_key("fp1", "lrp/explain", {"a": 2, "b": [2, 3]})}) == 4
    assert "/" not in k


def test_threads_compute_once(tmp_path):
    c = ResultsCache(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.3)
        return CacheEntry({"v": 42})

    results = []
    threads = [threading.Thread(target=lambda: results.append(c.get_or_compute("m", "a", {}, compute)))
               for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(calls) == 1
    assert sorted(hit for _, hit in results) == [False] + [True] * 5
    assert all(e.data == {"v": 42} for e, _ in results)


def _worker(root, marker):
    c = ResultsCache(root)

    def compute():
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(0.3)
        return CacheEntry({"pid": os.getpid()})

    entry, _ = c.get_or_compute("m", "a", {"x": 1}, compute)
    return entry.data["pid"]


@pytest.mark.slow
def test_processes_compute_once(tmp_path):
    marker = tmp_path / "calls.txt"
    with mp.get_context("spawn").Pool(3) as pool:
        pids = pool.starmap(_worker, [(str(tmp_path / "c"), str(marker))] * 3)
    assert len(marker.read_text().split()) == 1
    assert len(set(pids)) == 1  # everyone got the one computed result


def test_corrupt_entry_is_a_miss_and_is_removed(tmp_path):
    c = ResultsCache(tmp_path)
    c.put("k", CacheEntry({"v": 1}, {"t": torch.ones(100)}))
    path = tmp_path / "k.safetensors"
    path.write_bytes(path.read_bytes()[:50])
    assert c.get("k") is None and not path.exists()


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    c = ResultsCache(tmp_path)
    c.put("k", CacheEntry({"v": "old"}))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(cache_mod, "save_file", boom)
    with pytest.raises(OSError):
        c.put("k", CacheEntry({"v": "new"}))
    assert c.get("k").data == {"v": "old"}  # the previous entry is intact
    assert not list(tmp_path.glob("*.tmp"))


def test_size_cap_evicts_least_recently_used(tmp_path):
    c = ResultsCache(tmp_path, max_bytes=13_000)  # room for three ~4.1 KB entries
    for i, name in enumerate(("a", "b", "c")):
        c.put(name, CacheEntry({}, {"t": torch.zeros(1000)}))  # ~4 KB each
        os.utime(tmp_path / f"{name}.safetensors", (1000 + i, 1000 + i))
    c.get("a")  # touching "a" makes "b" the least recently used
    c.put("d", CacheEntry({}, {"t": torch.zeros(1000)}))
    names = {p.stem for p in c.entries()}
    assert "b" not in names and {"a", "d"} <= names
    assert c.size_bytes() <= 13_000


def test_clear(tmp_path):
    c = ResultsCache(tmp_path)
    c.get_or_compute("m", "a", {}, lambda: CacheEntry({"v": 1}))
    out = c.clear()
    assert out["entries"] == 1 and c.entries() == [] and c.info()["entries"] == 0


# ---- poison: what must never enter the cache, and what is never served from it (issue 22) ----------------------------
@pytest.mark.parametrize("bad,why", [
    (CacheEntry({"perplexity": float("nan")}), "data.perplexity is nan"),
    (CacheEntry({"rows": [{"loss": 1.0}, {"loss": float("inf")}]}), "data.rows[1].loss is inf"),
    (CacheEntry({"v": 1}, {"norms": torch.tensor([1.0, float("nan")])}), "tensor norms holds NaN"),
    (CacheEntry({"v": 1}, {"w": torch.empty(3, device="meta")}), "tensor w has no data"),
    (CacheEntry({"v": object()}), "data.v is a object"),
])
def test_a_wrong_answer_cannot_enter_the_cache(tmp_path, bad, why):
    """A computed result with a NaN or infinite number, a NaN or meta tensor, or a value that is not JSON data is
    refused with one clear message and nothing is stored; the next request computes again."""
    c = ResultsCache(tmp_path)
    with pytest.raises(cache_mod.InvalidResultError, match="neither shown nor cached") as err:
        c.get_or_compute("fp", "mixln/removal", {"samples": 3}, lambda: bad)
    assert why in str(err.value)
    assert c.entries() == []
    entry, hit = c.get_or_compute("fp", "mixln/removal", {"samples": 3}, lambda: CacheEntry({"perplexity": 5.0}))
    assert (entry.data, hit) == ({"perplexity": 5.0}, False)


def test_a_result_its_view_cannot_show_is_not_stored(tmp_path):
    c = ResultsCache(tmp_path)

    def view(entry):
        return f"{entry.data['baseline_perplexity']:.1f}"

    with pytest.raises(cache_mod.InvalidResultError, match="cannot be shown.*baseline_perplexity"):
        c.get_or_compute("fp", "mixln/removal", {}, lambda: CacheEntry({"layers": [0, 1]}), view)
    assert c.entries() == []


@pytest.mark.parametrize("planted", [
    CacheEntry({"baseline_perplexity": float("nan")}),  # written by hand or by an older version without the checks
    CacheEntry({"layers": [0, 1]}),  # a field the view needs is missing
    CacheEntry({"baseline_perplexity": 3.0}, {"t": torch.tensor([float("inf")])}),
])
def test_a_planted_wrong_entry_is_dropped_and_recomputed_not_served(tmp_path, planted):
    c = ResultsCache(tmp_path)
    key = cache_key("fp", "mixln/removal", {"samples": 3})
    meta = {"data": __import__("json").dumps(planted.data)}  # put() refuses NaN data: write the file as a bad version would
    from safetensors.torch import save_file
    save_file(planted.tensors, str(tmp_path / f"{key}.safetensors"), metadata=meta)

    def view(entry):
        return f"{entry.data['baseline_perplexity']:.1f}"

    calls = []
    entry, hit = c.get_or_compute("fp", "mixln/removal", {"samples": 3},
                                  lambda: calls.append(1) or CacheEntry({"baseline_perplexity": 62425286.0}), view)
    assert (entry.data, hit, calls) == ({"baseline_perplexity": 62425286.0}, False, [1])
    entry, hit = c.get_or_compute("fp", "mixln/removal", {"samples": 3}, lambda: calls.append(1), view)
    assert (entry.data, hit, calls) == ({"baseline_perplexity": 62425286.0}, True, [1])  # the good one, stored


def test_clear_removes_one_analysis_or_one_model(tmp_path):
    c = ResultsCache(tmp_path)
    for fp in ("fpA", "fpB"):
        for analysis in ("mathneuro-layers", "mathneuro-effect", "mixln/removal"):
            c.get_or_compute(fp, analysis, {"n": 1}, lambda: CacheEntry({"v": 1}))
    legacy = cache_key("fpA", "mathneuro-layers", {"n": 2})  # an entry that does not record its model
    c.put(legacy, CacheEntry({"v": 2}))
    assert len(c.entries()) == 7

    def left():
        return sorted((a["fingerprint"], a["analysis"]) if (a := c.about(p)) else ("?", p.stem[:-33])
                      for p in c.entries())

    r = c.clear(analysis="mathneuro-layers", fingerprint="fpB")
    assert (r["entries"], r["kept"]) == (1, 6) and ("fpB", "mathneuro-layers") not in left()
    r = c.clear(fingerprint="fpA")  # the legacy entry cannot say its model: kept
    assert r["entries"] == 3 and left() == [("?", "mathneuro-layers"), ("fpB", "mathneuro-effect"),
                                             ("fpB", "mixln/removal")]
    r = c.clear(analysis="mixln/removal")
    assert r["entries"] == 1 and left() == [("?", "mathneuro-layers"), ("fpB", "mathneuro-effect")]
    r = c.clear(analysis="mathneuro-*")  # a prefix; the legacy entry matches by its file name
    assert r["entries"] == 2 and left() == []
