"""The command line as a user runs it: help, --json output, exit code 2 on bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli(*args, home=None):
    env = dict(os.environ)
    if home is not None:
        env["LAYERWISE_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=300)


def test_help_lists_the_subcommands():
    out = cli("--help")
    assert out.returncode == 0
    for group in ("data", "models", "cache"):
        assert group in out.stdout
    sub = cli("data", "--help")
    assert all(c in sub.stdout for c in ("prepare", "list", "show"))


def test_data_list_json():
    out = cli("data", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["mmlu"]["status"] == "ready" and rows["mmlu"]["splits"]["test"] == 1404
    assert rows["sst2"]["status"] == "missing" and "--online" in rows["sst2"]["fix"]


def test_data_show_json_rows():
    out = cli("data", "show", "logiqa", "--split", "test", "-n", "2", "--json")
    rows = json.loads(out.stdout)
    assert len(rows) == 2 and len(rows[0]["choices"]) == 4


def test_models_list_json():
    rows = json.loads(cli("models", "list", "--json").stdout)
    assert any(r["name"] == "smollm2-135m" for r in rows)


@pytest.mark.parametrize("args", [
    ("data", "show", "no-such-dataset"),
    ("data", "show", "mmlu", "--split", "dev"),
    ("data", "show", "mmlu", "-n", "-3"),
    ("models", "card", "/no/such/folder"),
    ("models", "prepare", "not-packaged"),
    ("data", "prepare", "--only", "nope"),
    ("bogus",),
    ("data", "show"),
])
def test_bad_input_exits_2_with_one_clear_line(args):
    out = cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "error" in out.stderr


def test_bad_input_json_error(tmp_path):
    out = cli("data", "show", "nope", "--json")
    assert out.returncode == 2 and json.loads(out.stdout)["fix"].startswith("choose one of")


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_cache_info_and_clear(tmp_path):
    from core.cache import CacheEntry, ResultsCache

    ResultsCache(tmp_path / "results").put("k", CacheEntry({"v": 1}))
    info = json.loads(cli("cache", "info", "--json", home=tmp_path).stdout)
    assert info["entries"] == 1
    cleared = json.loads(cli("cache", "clear", "--json", home=tmp_path).stdout)
    assert cleared["entries"] == 1 and not list((tmp_path / "results").glob("*.safetensors"))


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_cache_clear_of_one_analysis_and_one_model(tmp_path):
    """``cache clear --analysis A --model M`` removes only the entries computed for A on M (M by name, folder or
    fingerprint); an unknown model is a clear error (exit 2) that removes nothing."""
    from core.cache import CacheEntry, ResultsCache
    from core.zoo import fingerprint

    tiny, lm = fingerprint("mathneuro-tiny"), fingerprint("mamba-lm")
    c = ResultsCache(tmp_path / "results")
    for fp in (tiny, lm):
        for analysis in ("mathneuro-layers", "mixln/removal"):
            c.get_or_compute(fp, analysis, {"n": 1}, lambda: CacheEntry({"v": 1}))
    out = cli("cache", "clear", "--analysis", "mixln/removal", "--model", "mathneuro-tiny", "--json", home=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["entries"] == 1
    assert sorted((c.about(p)["fingerprint"], c.about(p)["analysis"]) for p in c.entries()) == sorted(
        [(tiny, "mathneuro-layers"), (lm, "mathneuro-layers"), (lm, "mixln/removal")])
    out = cli("cache", "clear", "--model", "no-such-model", home=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(c.entries()) == 3
    out = cli("cache", "clear", "--model", lm, "--json", home=tmp_path)  # a fingerprint as a result's JSON names it
    assert json.loads(out.stdout) == {"entries": 2, "bytes": json.loads(out.stdout)["bytes"], "kept": 1}
