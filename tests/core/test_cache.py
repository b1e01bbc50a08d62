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
