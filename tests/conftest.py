"""Shared test set-up.

Triton kernels run on CPU only under its interpreter, which must be switched on before triton is
imported anywhere, so it is set here, first; NeuZip's training comparisons run in this process unless a test asks
for fresh processes. Prepared datasets and converted models are read from
the real user cache (preparing them is the job of `python -m core data prepare` / `models prepare`,
which the test command runs first); tests that write use a private folder.
"""
import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("LAYERWISE_ONLINE", "0")
# NeuZip training runs every mode in this process (fresh processes cost each mode two interpreter starts); the tests of
# the fresh-process path ask for it explicitly (fresh=True)
os.environ.setdefault("LAYERWISE_NEUZIP_FRESH", "0")
# pytest-xdist (opt-in: python -m pytest -n auto --dist loadfile) runs the tests in one worker process per core: each
# worker and what it starts (apps, CLI subprocesses) computes on its share of the cores, so two workers do not fight
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    os.environ.setdefault("MKL_NUM_THREADS", str(_share))

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# Screenshots and the session app's log: under pytest's base temp folder unless LAYERWISE_ARTIFACTS names a folder
# (CI sets it to keep them); resolved in pytest_configure.
ARTIFACTS = Path(os.environ["LAYERWISE_ARTIFACTS"]) if os.environ.get("LAYERWISE_ARTIFACTS") else None


# ---- temporary files: the whole run (its subprocesses and the app included) writes under pytest's base temp --------
ORIGINAL_TMP = Path(tempfile.gettempdir())


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """Point TMPDIR, Python's ``tempfile`` and Gradio's temp dir at folders inside pytest's base temp folder, so
    that nothing the run starts (torch, gradio and gradio_client, the app, CLI subprocesses) writes into /tmp
    itself; pytest keeps (and prunes) its base temp folders as usual."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:  # pytest without its tmp_path plugin
        return
    base = factory.getbasetemp()
    for name, var in (("tmp", "TMPDIR"), ("gradio", "GRADIO_TEMP_DIR")):
        (base / name).mkdir(exist_ok=True)
        os.environ[var] = str(base / name)
    tempfile.tempdir = str(base / "tmp")
    config.stash[TMP_ROOT] = base
    global ARTIFACTS
    ARTIFACTS = ARTIFACTS or base / "artifacts"


WORKER = f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""  # xdist's gw0, ...
TMP_ROOT = pytest.StashKey[Path]()
TMP_BEFORE = pytest.StashKey[set]()
# names in /tmp that Layerwise's own code or tests would create (result files, downloads, recompute folders); other
# programs on a shared machine write /tmp too, so only these count
OWN_TMP_NAMES = re.compile(r"^(lrp|mathneuro|neuzip|mixln|layerwise)[-_.]")


def pytest_sessionstart(session):
    session.config.stash[TMP_BEFORE] = set(os.listdir(ORIGINAL_TMP))


def pytest_sessionfinish(session, exitstatus):
    """Stop the app if no test asked for it after all; fail the run if it left a Layerwise temp file or folder in
    /tmp itself (outside pytest's base temp)."""
    _stop_app(session.config)
    before = session.config.stash.get(TMP_BEFORE, None)
    if before is None:
        return
    left = sorted(n for n in set(os.listdir(ORIGINAL_TMP)) - before if OWN_TMP_NAMES.match(n))
    if left:
        print(f"\nerror: the test run left {len(left)} entries in {ORIGINAL_TMP}: {', '.join(left[:10])}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, grace: float = 10) -> None:
    """Terminate a server subprocess; kill it if it has not stopped within ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def wait_http(url: str, timeout: float) -> float:
    """Seconds until ``url`` answers 200, or raise."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


HTTP_TIMEOUT_S = 120  # a busy shared machine can take tens of seconds to answer; httpx's default is 5 s


def gradio_client(url: str, **kwargs):
    """A ``gradio_client.Client`` of the app at ``url`` that waits up to HTTP_TIMEOUT_S for each HTTP answer (its
    config included): how long a loaded machine takes to answer is not what a test checks."""
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": HTTP_TIMEOUT_S}, **kwargs)


def linked_home(home: Path) -> Path:
    """A private LAYERWISE_HOME at ``home``: the prepared datasets and models linked in (read where they are),
    its results cache and downloads its own, so a test app or CLI never writes the user's folder."""
    from core.paths import data_dir, models_dir

    home.mkdir(parents=True, exist_ok=True)
    for name, real in (("data", data_dir()), ("models", models_dir())):
        if not (home / name).exists():
            (home / name).symlink_to(real, target_is_directory=True)
    return home


# ---- the two tiers ---------------------------------------------------------------------------------------------
FULL_COMMAND = 'python -m pytest -m "slow or not slow"'  # every test (what CI runs, README "Set up")
QUICK_SLOW_S = 5.0  # a quick-tier test past this on this machine is named at the end (mark it slow if it always is)
QUICK_LEFT_OUT = pytest.StashKey[int]()


def _quick(config) -> bool:
    """The quick tier: ``python -m pytest`` with no test paths and no ``-m`` runs the tests not marked slow. Naming
    files or tests (``python -m pytest tests/core/test_x.py``) or giving any ``-m`` (the full command:
    ``-m "slow or not slow"``) selects as pytest always does. (xdist's workers get the same arguments.)"""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr


def pytest_collection_modifyitems(config, items):
    if not _quick(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    config.stash[QUICK_LEFT_OUT] = len(slow)
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the summary
        config.workeroutput["quick_left_out"] = len(slow)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: what a worker counted (it collected the tests; the controller did not)."""
    out = getattr(node, "workeroutput", None) or {}
    if "quick_left_out" in out:
        node.config.stash[QUICK_LEFT_OUT] = out["quick_left_out"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say which tier ran; in the quick tier, name the tests that took over QUICK_SLOW_S here (a hint, not a
    failure: a loaded machine is slow)."""
    if not _quick(config):
        return
    long = sorted(((r.duration, r.nodeid) for rs in terminalreporter.stats.values() for r in rs
                   if getattr(r, "when", None) == "call" and getattr(r, "duration", 0) > QUICK_SLOW_S), reverse=True)
    terminalreporter.write_line(f"quick tier: {config.stash.get(QUICK_LEFT_OUT, 0)} slow tests left out; "
                                f"the full suite: {FULL_COMMAND}")
    if long:
        terminalreporter.write_line(f"quick-tier tests over {QUICK_SLOW_S:.0f} s here (load {os.getloadavg()[0]:.1f}; "
                                    "mark one @pytest.mark.slow if it is always this slow): "
                                    + ", ".join(f"{n} {d:.1f} s" for d, n in long[:10]))


APP = pytest.StashKey[dict]()


def _launch_app(config) -> dict:
    """Start the real app as a user would (`python app.py`) on a free port and a private home; do not wait for it."""
    port = free_port()
    home = linked_home(config._tmp_path_factory.mktemp("app") / "layerwise")
    log = open(ARTIFACTS.mkdir(parents=True, exist_ok=True) or ARTIFACTS / f"app{WORKER}.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "LAYERWISE_HOME": str(home)})
    app = {"proc": proc, "log": log, "url": f"http://127.0.0.1:{port}/"}
    config.stash[APP] = app
    return app


def _stop_app(config) -> None:
    app = config.stash.get(APP, None)
    if app is not None and not app["log"].closed:
        stop_process(app["proc"])
        app["log"].close()


def pytest_collection_finish(session):
    """When a selected test uses the app (``app_url``), start it as soon as the tests are known, so its start (about
    20 s) overlaps the tests before the first one that waits for it; an xdist worker starts it when a test asks."""
    if session.config.option.collectonly or WORKER:
        return
    if any("app_url" in getattr(item, "fixturenames", ()) for item in session.items):
        _launch_app(session.config)


@pytest.fixture(scope="session")
def app_url(request):
    """The real app, launched once per test session as a user would (`python app.py`), on a private home."""
    app = request.config.stash.get(APP, None) or _launch_app(request.config)
    try:
        wait_http(app["url"], 120)
        yield app["url"]
    finally:
        _stop_app(request.config)


@pytest.fixture(scope="module")
def single_thread():
    """Run a module's tiny-tensor tests on one thread (faster on a small shared machine), then restore.

    Use with ``pytestmark = pytest.mark.usefixtures("single_thread")``.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session", autouse=True)
def private_results(tmp_path_factory):
    """Every test session gets its own results cache and download folder (the user's cache is never written);
    a test that needs an empty cache patches ``core.runner.results_cache`` itself."""
    from core import files as core_files
    from core import runner
    from core.cache import ResultsCache

    root = tmp_path_factory.mktemp("layerwise")
    cache = ResultsCache(root / "results")
    files = root / "files"
    files.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "results_cache", lambda: cache)
        mp.setattr(core_files, "files_dir", lambda: files)
        yield root


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty results cache for one test."""
    from core import runner
    from core.cache import ResultsCache

    cache = ResultsCache(tmp_path / "results")
    monkeypatch.setattr(runner, "results_cache", lambda: cache)
    return cache


# ---- the hub, stood in locally (tests/hub.py) -----------------------------------------------------------------
@pytest.fixture(scope="session")
def hub_stand_in(tmp_path_factory):
    """A local stand-in of the hub's file API serving tiny models and datasets under the papers' real ids."""
    from tests.hub import HubStandIn
    from tests.hub_repos import build_datasets, build_models

    root = tmp_path_factory.mktemp("hub")
    hub = HubStandIn(root / "served")
    for repo_id, folder in build_models(root / "models").items():
        hub.add(repo_id, folder)
    for repo_id, folder in build_datasets(root / "datasets").items():
        hub.add(repo_id, folder, kind="dataset")
    hub.start()
    yield hub
    hub.stop()


def online_env(hub, tmp_path, **extra) -> dict:
    """Environment for a subprocess that talks to ``hub``: online, private caches under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                              "TRANSFORMERS_OFFLINE", "SPACE_ID")}
    home = linked_home(tmp_path / "layerwise")  # private caches; the prepared datasets and models read where they are
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), LAYERWISE_ONLINE="1",
               LAYERWISE_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_ETAG_TIMEOUT="3", HF_HUB_DOWNLOAD_TIMEOUT="3", LAYERWISE_HUB_TIMEOUT="3",
               PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env
