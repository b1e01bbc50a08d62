"""Running a bench/ script's ``--smoke`` mode from a test: a subprocess under ``tmp_path`` that may write nowhere else.

The script runs with its working folder, ``TMPDIR``, ``GRADIO_TEMP_DIR`` and ``LAYERWISE_HOME`` under ``tmp_path``
(the prepared datasets, models and fetched archives linked in, read where they are); :func:`run_smoke` fails the
test if it exits non-zero, if its report does not say its timings are meaningless, or if it changed a file of the
checkout or of the user cache's linked folders.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINKED = ("data", "models", "downloads")  # the user cache's folders a smoke run reads (through links)


def numbers(value) -> list:
    """Every number inside a JSON value (booleans and None left out)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return []


def assert_finite(report: dict, parts=None) -> None:
    """Each of ``parts`` (default: the whole report) is in ``report``, holds numbers, and every number is finite."""
    if parts is None:
        report, parts = {"report": report}, ("report",)
    for part in parts:
        assert part in report, f"part {part!r} missing from {sorted(report)}"
        found = numbers(report[part])
        assert found, f"part {part!r} holds no number"
        assert all(math.isfinite(n) for n in found), (part, [n for n in found if not math.isfinite(n)])


def _checkout_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


def _cache_state(home: Path) -> dict:
    """Every file below the user cache's linked folders, with its size and modification time."""
    out = {}
    for name in LINKED:
        for path in (home / name).rglob("*"):
            if path.is_file():
                stat = path.stat()
                out[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return out


def private_home(root: Path) -> Path:
    """A LAYERWISE_HOME at ``root`` whose data, models and downloads are the user cache's (linked)."""
    from core.paths import home_path

    root.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if (home_path() / name).is_dir():
            (root / name).symlink_to((home_path() / name).resolve(), target_is_directory=True)
    return root


def run_smoke(tmp_path: Path, script: str, *args: str, timeout: float = 300, unset: tuple[str, ...] = ()) -> dict:
    """``python bench/<script> --smoke ARGS`` under ``tmp_path`` (the variables ``unset`` removed from its
    environment); its JSON report (printed on stdout)."""
    from core.paths import home_path

    user_home = home_path()
    home = private_home(tmp_path / "home")
    for name in ("tmp", "gradio"):
        (tmp_path / name).mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
           "LAYERWISE_HOME": str(home), "LAYERWISE_ONLINE": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    for name in unset:
        env.pop(name, None)
    checkout, cache = _checkout_state(), _cache_state(user_home)
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), "--smoke", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _checkout_state() == checkout, "the smoke run changed the checkout"
    assert _cache_state(user_home) == cache, "the smoke run changed the user cache's data, models or downloads"
    report = json.loads(done.stdout)
    assert report["mode"] == "smoke" and report["timings_meaningful"] is False
    assert "meaningless" in report["timing_note"]
    return report


def results_written(tmp_path: Path) -> list[str]:
    """The results-cache entries a smoke run left in its private user cache."""
    folder = tmp_path / "home" / "results"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
