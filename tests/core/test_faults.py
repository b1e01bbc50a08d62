"""Faults lose nothing: corrupt cache entries, a killed `data prepare`, a read-only or full LAYERWISE_HOME, and the
wrong kind of model for an action, each ends in a result or one clear message (exit 2), never a traceback.

(The server killed while it caches a heavy result is in tests/ui/test_server_faults.py.)
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core import cli, runner
from core import files as core_files
from core.cache import CacheEntry, ResultsCache
from core.data import registry

REPO = Path(__file__).resolve().parents[2]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- the wrong kind of model, a file that is not a tokenizer ------------------------------------------------------
@pytest.mark.parametrize("argv,needs", [
    (["mathneuro", "effect", "--model", "mamba-sentiment", "-n", "4", "--eval-n", "4"], "MathNeuro"),  # was an IndexError
    (["mathneuro", "layers", "--model", "vision-mamba-mnist", "-n", "4"], "MathNeuro"),
    (["mathneuro", "identify", "--model", "mamba-sentiment", "-n", "4"], "MathNeuro"),
    (["neuzip", "tradeoff", "--model", "mamba-sentiment", "--words", "100"], "trade-off"),
    (["mixln", "angular", "--model", "mamba-sentiment"], "Mix-LN"),
    (["mixln", "removal", "--model", "vision-mamba-mnist"], "Mix-LN"),
])
def test_wrong_kind_of_model_is_refused_by_its_kind(capsys, argv, needs):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    assert needs in err and "needs a causal language model" in err and "Traceback" not in err
    assert "Fix: pick a causal language model, e.g." in err and "mathneuro-tiny" in err


@pytest.mark.parametrize("content", [b"not json at all", b'{"version": "1.0"}', b"", bytes(range(256))])
def test_mixln_train_with_a_file_that_is_not_a_tokenizer(capsys, tmp_path, content):
    bad = tmp_path / "tokenizer.json"
    bad.write_bytes(content)
    code, _, err = run_cli(capsys, "mixln", "train", "--quick", "--tokenizer", str(bad), "--out", str(tmp_path / "run"))
    assert code == 2, err
    assert "is not a tokenizers tokenizer.json (" in err and "Fix: pass --tokenizer" in err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


# ---- a hand-corrupted cache entry is a miss --------------------------------------------------------------------
def corruptions(path: Path) -> dict:
    """Ways an entry can be damaged by hand or by a crash: name -> bytes to write over it."""
    good = path.read_bytes()
    bad_meta = path.with_name("bad-meta")
    save_file({"t": torch.ones(3)}, str(bad_meta), metadata={"data": "{not json"})
    return {"truncated": good[: len(good) // 2], "header only": good[:12], "empty": b"", "garbage": os.urandom(4096),
            "huge header length": (2**62).to_bytes(8, "little") + good[8:], "bad metadata": bad_meta.read_bytes()}


def test_each_kind_of_corrupt_entry_is_a_miss_and_recomputed(tmp_path):
    cache = ResultsCache(tmp_path / "results")
    calls = []

    def compute():
        calls.append(1)
        return CacheEntry({"answer": 42}, {"t": torch.arange(1000, dtype=torch.float32)})
    entry, hit = cache.get_or_compute("fp", "demo", {"x": 1}, compute)
    path = cache.entries()[0]
    for name, damage in corruptions(path).items():
        path.write_bytes(damage)
        again, hit = cache.get_or_compute("fp", "demo", {"x": 1}, compute)
        assert not hit, name  # a miss ...
        assert again.data == {"answer": 42} and torch.equal(again.tensors["t"], entry.tensors["t"]), name
        assert cache.get(path.stem).data == {"answer": 42}, name  # ... recomputed and stored whole again
    assert len(calls) == 1 + len(corruptions(path))


def test_corrupt_entries_of_a_real_analysis_are_recomputed_to_the_same_result(fresh_cache):
    from core import mathneuro as mn

    args = dict(ref="mathneuro-tiny", math="arithmetic-words", nonmath=["review-sentiment"], n=6, proportion=0.03)
    first = mn.layer_distribution_result(**args)
    assert first.source == "computed" and len(fresh_cache.entries()) == 2  # the statistics and the result
    for path in fresh_cache.entries():
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])  # cut short, as by a crash
    second = mn.layer_distribution_result(**args)
    assert second.source == "computed" and second.data == first.data
    assert mn.layer_distribution_result(**args).source == "cache"


# ---- `data prepare` killed midway -------------------------------------------------------------------------------
@contextmanager
def home_at(folder: Path):
    """LAYERWISE_HOME at ``folder`` for this process (registry caches cleared on the way in and out)."""
    old = os.environ.get("LAYERWISE_HOME")
    os.environ["LAYERWISE_HOME"] = str(folder)
    registry._load_all.cache_clear()
    try:
        yield folder
    finally:
        registry._load_all.cache_clear()
        if old is None:
            os.environ.pop("LAYERWISE_HOME", None)
        else:
            os.environ["LAYERWISE_HOME"] = old


def list_status(capsys) -> dict:
    code, out, _ = run_cli(capsys, "data", "list", "--json")
    assert code == 0
    return {r["name"]: r for r in json.loads(out)}


@pytest.mark.slow
def test_data_prepare_killed_midway_reports_incomplete_and_a_rerun_repairs(tmp_path, capsys):
    home = tmp_path / "home"
    env = {**os.environ, "LAYERWISE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "core", "data", "prepare", "--only", "digits-8x8", "mnist-5k"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = home / "data" / "digits-8x8" / "manifest.json"
    t0 = time.time()
    while not first.exists() and proc.poll() is None and time.time() - t0 < 240:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # digits is done, mnist is being built or written
    proc.wait(30)
    assert first.exists(), "the first dataset was never written"
    (home / "data" / "mnist-5k").mkdir(parents=True, exist_ok=True)
    (home / "data" / "mnist-5k" / ".records.npz.killed.tmp").write_bytes(b"\x93NUMPY half")  # as a kill mid-write
    with home_at(home):
        rows = list_status(capsys)
        assert rows["digits-8x8"]["status"] == "ready" and rows["digits-8x8"]["splits"]["test"] == 179
        assert rows["mnist-5k"]["status"] == "missing" and rows["mnist-5k"]["detail"].startswith("incomplete")
        assert rows["mnist-5k"]["fix"] == "python -m core data prepare --only mnist-5k"
        stale = home / "data" / "mnist-5k" / ".records.npz.killed.tmp"
        os.utime(stale, (time.time() - 3600, time.time() - 3600))
        code, out, _ = run_cli(capsys, "data", "prepare", "--only", "digits-8x8", "mnist-5k")
        assert code == 0
        assert "digits-8x8: ready" in out and "mnist-5k: prepared in" in out  # only the missing one is rebuilt
        rows = list_status(capsys)
        assert rows["mnist-5k"]["status"] == "ready" and not stale.exists()
        repaired = registry.load("mnist-5k", "test")
    registry._load_all.cache_clear()
    reference = registry.load("mnist-5k", "test")  # the user's own prepared copy
    assert len(repaired) == len(reference) == 500
    assert all((a.image == b.image).all() and a.label == b.label for a, b in zip(repaired, reference))


# ---- a read-only or full LAYERWISE_HOME -------------------------------------------------------------------------
@contextmanager
def unwritable(root: Path, code: int = errno.EROFS):
    """Every write under ``root`` fails with ``code`` in this process (a read-only mount without root tricks):
    opening for writing, creating files and folders, renaming, removing, touching."""
    import builtins
    import io

    base = os.path.abspath(root)
    real = {"open": builtins.open, "os_open": os.open, "mkdir": os.mkdir, "replace": os.replace,
            "rename": os.rename, "unlink": os.unlink, "rmdir": os.rmdir, "utime": os.utime}

    def inside(path) -> bool:
        try:
            return os.path.abspath(os.fspath(path)).startswith(base)
        except TypeError:
            return False

    def fail(path):
        raise OSError(code, os.strerror(code), os.fspath(path))

    def open_(file, mode="r", *a, **k):
        if inside(file) and any(c in mode for c in "wax+"):
            fail(file)
        return real["open"](file, mode, *a, **k)

    def os_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            fail(path)
        return real["os_open"](path, flags, *a, **k)

    def mkdir(path, *a, **k):
        if inside(path):
            if os.path.exists(path):
                raise FileExistsError(errno.EEXIST, "File exists", os.fspath(path))
            fail(path)
        return real["mkdir"](path, *a, **k)

    def guarded(name):
        def op(path, *a, **k):
            if inside(path):
                fail(path)
            return real[name](path, *a, **k)
        return op

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builtins, "open", open_)
        mp.setattr(io, "open", open_)
        mp.setattr(os, "open", os_open)
        mp.setattr(os, "mkdir", mkdir)
        for name in ("replace", "rename", "unlink", "rmdir", "utime"):
            mp.setattr(os, name, guarded(name))
        yield


def readable_home(tmp_path: Path) -> Path:
    """A private LAYERWISE_HOME that reads the prepared data and models (links) and has a results cache."""
    from core.paths import data_dir, models_dir

    home = tmp_path / "home"
    home.mkdir()
    (home / "data").symlink_to(data_dir(), target_is_directory=True)
    (home / "models").symlink_to(models_dir(), target_is_directory=True)
    return home


def test_read_only_home_serves_results_uncached_with_a_warning(tmp_path, monkeypatch, capsys):
    from core import mathneuro as mn
    from core.paths import write_problem

    home = readable_home(tmp_path)
    args = dict(ref="mathneuro-tiny", math="arithmetic-words", nonmath=["review-sentiment"], n=5, proportion=0.04)
    with home_at(home):
        cache = ResultsCache(home / "results")  # written while it could be: one entry to read back later
        monkeypatch.setattr(runner, "results_cache", lambda: cache)

        def files_dir():
            (home / "files").mkdir(exist_ok=True)
            return home / "files"
        monkeypatch.setattr(core_files, "files_dir", files_dir)
        stored = mn.layer_distribution_result(**args)
        entries = [p.read_bytes() for p in cache.entries()]
        with unwritable(home):
            assert "read-only" in write_problem()
            assert mn.layer_distribution_result(**args).source == "cache"  # what is stored is still served
            with pytest.warns(RuntimeWarning, match="results are not cached: cannot write to the Layerwise folder"):
                fresh = mn.layer_distribution_result(**{**args, "proportion": 0.06})
            assert fresh.source == "computed" and fresh.data["params"]["proportion"] == 0.06
            with pytest.warns(RuntimeWarning, match="no download files"):
                assert fresh.files() == []  # shown without downloads
            with pytest.warns(RuntimeWarning, match="read-only"):
                readonly = ResultsCache(home / "results-new")  # a cache folder that cannot even be created
            assert "read-only" in readonly.disabled
            with pytest.warns(RuntimeWarning):
                entry, hit = readonly.get_or_compute("fp", "demo", {}, lambda: CacheEntry({"v": 1}))
            assert entry.data == {"v": 1} and not hit
        assert [p.read_bytes() for p in cache.entries()] == entries and stored.source == "computed"
        assert not list((home / "results").glob(".*.tmp"))
    empty = tmp_path / "empty-home"  # nothing linked: the user's prepared data is never at risk here
    empty.mkdir()
    with home_at(empty), unwritable(empty):
        code, _, err = run_cli(capsys, "data", "prepare", "--only", "digits-8x8")
    assert code == 2 and "cannot write to the Layerwise folder" in err and "read-only" in err
    assert "Fix: point LAYERWISE_HOME at a folder you can write" in err and "Traceback" not in err
    assert not any(empty.iterdir())


def test_full_home_keeps_every_old_entry_and_says_so(tmp_path, monkeypatch, capsys):
    """ENOSPC in the middle of a write: the request still gets its result, the half-written file is removed, the
    old entries are intact, and the CLI says the disk is full (exit 2)."""
    from core import cache as cache_mod
    from core import mathneuro as mn

    real_save = cache_mod.save_file

    def disk_fills_up(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as fh:  # keep the first half, as a full disk would
            fh.truncate(os.path.getsize(filename) // 2)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    home = readable_home(tmp_path)
    args = dict(ref="mathneuro-tiny", math="arithmetic-words", nonmath=["review-sentiment"], n=5, proportion=0.05)
    with home_at(home):
        cache = ResultsCache(home / "results")
        monkeypatch.setattr(runner, "results_cache", lambda: cache)
        mn.layer_distribution_result(**args)
        before = {p.name: p.read_bytes() for p in cache.entries()}
        monkeypatch.setattr(cache_mod, "save_file", disk_fills_up)
        with pytest.warns(RuntimeWarning, match="no space left on the device"):
            full = mn.layer_distribution_result(**{**args, "proportion": 0.07})
        assert full.source == "computed" and full.data["params"]["proportion"] == 0.07
        assert {p.name: p.read_bytes() for p in cache.entries()} == before  # nothing lost, nothing half-written
        assert not [p for p in (home / "results").iterdir() if p.suffix == ".tmp"]
        assert "no space left" in cache.info()["problem"]
        monkeypatch.setattr(cache_mod, "save_file", real_save)
        assert mn.layer_distribution_result(**{**args, "proportion": 0.07}).source == "computed"  # room again
        assert mn.layer_distribution_result(**{**args, "proportion": 0.07}).source == "cache"

    real_atomic = registry.atomic_write

    def full_disk(path, content, **kw):
        def half(tmp):
            Path(tmp).write_bytes(b"x" * 100)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
        return real_atomic(path, half, **kw)
    with home_at(tmp_path / "empty-home"):  # nothing linked: the user's prepared data is never at risk here
        monkeypatch.setattr(registry, "atomic_write", full_disk)
        code, _, err = run_cli(capsys, "data", "prepare", "--only", "digits-8x8")
        assert code == 2 and "no space left on the device" in err and "Fix: free some space" in err
        assert registry.status("digits-8x8").detail.startswith("not prepared")  # honest, and no temp file left
        monkeypatch.setattr(registry, "atomic_write", real_atomic)
        code, out, _ = run_cli(capsys, "data", "prepare", "--only", "digits-8x8")
        assert code == 0 and registry.status("digits-8x8").ready
