"""The app under fuzz and load (a real ``python app.py`` in a subprocess, all its state under ``tmp_path``), and
the fuzz tallies (inputs tried, results, clear errors, bad outcomes) printed at the end of the session."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, gradio_client, linked_home, stop_process, wait_http
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
        return gradio_client(self.url, download_files=str(self.root / "downloads"))


def start_app(root: Path, *args: str, **env_extra) -> tuple[subprocess.Popen, Path, str]:
    """``python app.py`` with a private LAYERWISE_HOME under ``root`` (prepared data and models linked in)."""
    home = linked_home(root / "home")
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


@contextlib.contextmanager
def serving(root: Path, *args: str, **env_extra):
    """An app started under ``root`` (see ``start_app``), answering, stopped on exit."""
    proc, log, url = start_app(root, *args, **env_extra)
    try:
        wait_http(url, 180)
        yield AppServer(url, proc, log, root)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """One app for the fuzz and load tests of the session (an app takes a while to start on a small machine)."""
    with serving(tmp_path_factory.mktemp("app-fuzz")) as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def hypothesis_home(tmp_path_factory):
    """Hypothesis keeps its caches under the session's tmp folder, not in the checkout."""
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)
