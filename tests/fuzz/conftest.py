"""The app under fuzz and load (a real ``python app.py`` in a subprocess, all its state under ``tmp_path``), and
the fuzz tallies (inputs tried, results, clear errors, bad outcomes) printed at the end of the session."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, wait_http
from tests.fuzz.common import summary_lines


def pytest_terminal_summary(terminalreporter):
    lines = summary_lines()
    if lines:
        terminalreporter.section("fuzz")
        for line in lines:
            terminalreporter.write_line(line)


@dataclass
class AppServer:
    url: str
    proc: subprocess.Popen
    log: Path
    root: Path  # LAYERWISE_HOME, GRADIO_TEMP_DIR, TMPDIR and downloads all live under it

    def log_text(self, start: int = 0) -> str:
        with open(self.log, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return self.log.stat().st_size

    def client(self):
        from gradio_client import Client

        return Client(self.url, verbose=False, download_files=str(self.root / "downloads"))


def start_app(root: Path, *args: str, **env_extra) -> tuple[subprocess.Popen, Path, str]:
    """``python app.py`` with a private LAYERWISE_HOME under ``root`` (prepared data and models linked in)."""
    from core.paths import data_dir, models_dir

    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    for name, real in (("data", data_dir()), ("models", models_dir())):
        if not (home / name).exists():
            (home / name).symlink_to(real, target_is_directory=True)
    for sub in ("gradio", "tmp", "downloads"):
        (root / sub).mkdir(exist_ok=True)
    env = {**os.environ, "LAYERWISE_HOME": str(home), "GRADIO_TEMP_DIR": str(root / "gradio"),
           "TMPDIR": str(root / "tmp"), "LAYERWISE_ONLINE": "0", "PYTHONUNBUFFERED": "1",
           **{k: str(v) for k, v in env_extra.items()}}
    port = free_port()
    log = root / "app.log"
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *args], cwd=REPO, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    return proc, log, f"http://127.0.0.1:{port}/"


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("app-fuzz")
    proc, log, url = start_app(root)
    try:
        wait_http(url, 180)
        yield AppServer(url, proc, log, root)
    finally:
        stop_app(proc)


@pytest.fixture(scope="session", autouse=True)
def hypothesis_home(tmp_path_factory):
    """Hypothesis keeps its caches under the session's tmp folder, not in the checkout."""
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)
