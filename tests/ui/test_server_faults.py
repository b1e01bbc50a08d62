"""The server SIGKILLed while it writes a heavy result into the results cache, then restarted: no corrupt entry,
the result is recomputed (the same result), then served from the cache.

The kill is made to land inside the write, every time: a ``sitecustomize`` module put on the server's
PYTHONPATH (test-only; the app has no fault hook) lets the cache's safetensors writer write half the file, drop a
marker and wait; the test kills the server as soon as the marker appears.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.cache import ResultsCache
from tests.conftest import REPO, free_port, gradio_client, stop_process, wait_http

STALL = '''
import os
marker = os.environ.get("LAYERWISE_TEST_STALL_WRITE")
if marker:
    import safetensors.torch as st
    real = st.save_file

    def stalled(tensors, filename, metadata=None):
        real(tensors, filename, metadata=metadata)
        if os.sep + "results" + os.sep in str(filename):
            with open(filename, "r+b") as fh:  # half of the entry is on disk when the server dies
                fh.truncate(os.path.getsize(filename) // 2)
            with open(marker, "w") as fh:
                fh.write(str(filename))
            import time
            time.sleep(3600)
        return None
    st.save_file = stalled
'''

ARGS = ("mathneuro-tiny", "arithmetic-words", ["review-sentiment"], 0.03, "mathneuro", 2, "count")  # 2 samples: small


def start(home: Path, tmp: Path, log: Path, **extra) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "LAYERWISE_HOME": str(home), "PYTHONUNBUFFERED": "1", **extra}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, env=env,
                            stdout=open(log, "a"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url, 180)
    except BaseException:
        proc.kill()
        raise
    return proc, url


@pytest.mark.slow
def test_server_killed_while_caching_a_heavy_result_loses_nothing(tmp_path):
    from core.paths import data_dir, models_dir

    home = tmp_path / "home"
    home.mkdir()
    (home / "data").symlink_to(data_dir(), target_is_directory=True)
    (home / "models").symlink_to(models_dir(), target_is_directory=True)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(STALL)
    marker, log = tmp_path / "writing", tmp_path / "app.log"
    path = os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    proc, url = start(home, tmp_path, log, PYTHONPATH=path, LAYERWISE_TEST_STALL_WRITE=str(marker))
    try:
        job = gradio_client(url).submit(*ARGS, api_name="/mathneuro_layers")
        t0 = time.time()
        while not marker.exists() and time.time() - t0 < 300 and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), log.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    del job
    results = home / "results"
    half = Path(marker.read_text())
    assert half.exists() and half.parent == results and half.name.endswith(".tmp")  # killed inside the write
    cache = ResultsCache(results)
    assert cache.entries() == []  # the half-written file is not an entry

    proc, url = start(home, tmp_path, log)
    try:
        client = gradio_client(url)
        status, plot, _ = client.predict(*ARGS, api_name="/mathneuro_layers")
        assert "(computed now)" in status, status
        again, plot_again, _ = client.predict(*ARGS, api_name="/mathneuro_layers")
        assert "(from the results cache)" in again
        assert again.replace("from the results cache", "computed now") == status and plot_again == plot
    finally:
        stop_process(proc)
    entries = cache.entries()
    assert len(entries) == 2 and all(cache.get(p.stem) is not None for p in entries)  # statistics + result, whole
