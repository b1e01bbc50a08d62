"""Bounded heavy work (issue 42, items 6 and 7), on a small app served in-process with the real lanes and jobs
(:mod:`ui.lanes`, :mod:`ui.stopping`): heavy events share one lane for the whole server (one visitor had 11 in
flight, up to 55 could run at once), a visitor of a public server has one computing at a time, and a job stops when
its owner presses Stop in another session or its client leaves."""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import pytest

from tests.conftest import free_port, gradio_client
from ui.errors import user_errors
from ui.lanes import assign_lanes
from ui.stopping import job, running, stop

pytestmark = pytest.mark.slow  # an app served in-process and bursts of calls: about 12 s on the shared machine
HEAVY_LIMIT = 2


class Meter:
    """How many heavy calls are inside their work at once (and at most), and how each one ended."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.ended: list[str] = []
        self.release = threading.Event()

    def enter(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self, how: str):
        with self.lock:
            self.now -= 1
            self.ended.append(how)


EARLIER: list = []  # jobs another test of this process left registered (not this server's)


def ours() -> list:
    """The jobs running now of this module's server: a job an earlier test in this process left registered (a
    handler called in-process whose generator was never closed) is not one of them."""
    return [j for j in running() if not any(j is e for e in EARLIER)]


@pytest.fixture(scope="module")
def served():
    EARLIER.extend(running())
    meter = Meter()

    def work(seconds: float, request: gr.Request = None, progress=gr.Progress()):
        """Heavy: reports progress until released (or ``seconds`` pass), as a long computation does."""
        step = job(request, progress)
        meter.enter()
        how = "finished"
        try:
            t0 = time.monotonic()
            while not meter.release.is_set() and time.monotonic() - t0 < float(seconds):
                step(0.5, "working")
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - Cancelled: recorded, then raised as the app would
            how = type(exc).__name__
            raise
        finally:
            meter.leave(how)
        return how

    with gr.Blocks() as demo:
        seconds, out = gr.Number(1), gr.Textbox()
        gr.Button("a").click(user_errors(work), seconds, out, api_name="work_a")
        gr.Button("b").click(user_errors(work), seconds, out, api_name="work_b")  # another handler, the same lane
        gr.Button("stop").click(stop, None, out, api_name="stop")
    moved = assign_lanes(demo, 8, heavy_limit=HEAVY_LIMIT)
    demo.queue(default_concurrency_limit=HEAVY_LIMIT)
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, show_error=True)
    try:
        yield f"http://127.0.0.1:{port}/", meter, moved
    finally:
        demo.close()


def burst(url: str, n: int, seconds: float) -> list[str]:
    """``n`` heavy calls at once from one address (alternating the two handlers), each one's outcome."""
    client = gradio_client(url)
    jobs = [client.submit(seconds, api_name="/work_a" if i % 2 else "/work_b") for i in range(n)]
    outcomes = []
    for j in jobs:
        try:
            outcomes.append(j.result(timeout=120))
        except Exception as exc:  # noqa: BLE001 - a refusal is an outcome
            outcomes.append(f"refused: {exc}")
    return outcomes


def test_heavy_handlers_share_one_lane_for_the_whole_server(served, monkeypatch):
    """Locally (no per-visitor limit) five calls of two heavy handlers: never more than the lane at once."""
    url, meter, moved = served
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    assert {"work_a", "work_b"} <= set(moved)
    meter.most, meter.release = 0, threading.Event()
    outcomes = burst(url, 5, 0.6)
    assert outcomes == ["finished"] * 5 and meter.most == HEAVY_LIMIT
    assert ours() == []  # every job ended with its call


def test_one_visitor_cannot_run_past_the_limit(served, monkeypatch):
    """Issue 42, item 7: a burst of heavy calls from one visitor of a public server, past the global limit: one
    computes at a time, every other gets the app's message at once; the total never passes the lane."""
    url, meter, _ = served
    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    meter.most, meter.release = 0, threading.Event()
    outcomes = burst(url, 6, 1.5)
    refused = [o for o in outcomes if o.startswith("refused")]
    assert meter.most == 1 and 1 <= len(outcomes) - len(refused) and len(refused) >= 1, outcomes
    assert all("You already have 1 computation running on this public server" in o for o in refused), refused[:1]
    assert ours() == []


def test_stop_from_another_session_of_the_visitor_stops_the_job(served, monkeypatch):
    """Issue 42, item 6: a training kept running after Stop from another session. In public mode a job is the
    visitor's: Stop from any of their sessions ends it at its next progress report."""
    url, meter, _ = served
    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    meter.release, meter.ended = threading.Event(), []
    first = gradio_client(url).submit(60, api_name="/work_a")
    deadline = time.monotonic() + 60
    while not ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ours(), "the job did not start"
    gradio_client(url).predict(api_name="/stop")  # another session, the same visitor
    with pytest.raises(Exception, match="Stopped"):
        first.result(timeout=60)
    assert meter.ended == ["Cancelled"] and ours() == []


def test_a_job_stops_when_its_client_leaves(served, monkeypatch):
    """Issue 42, item 6: a job kept running after its client left. The client's event stream closes, Gradio marks
    the event dead, and the job stops at its next progress report."""
    url, meter, _ = served
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    meter.release, meter.ended = threading.Event(), []
    request = urllib.request.Request(f"{url}gradio_api/call/work_a", json.dumps({"data": [60]}).encode(),
                                     {"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=60).read())["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/work_a/{event_id}", timeout=60)
    deadline = time.monotonic() + 60
    while not ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ours(), "the job did not start"
    stream.close()  # the client leaves
    deadline = time.monotonic() + 60
    while not meter.ended and time.monotonic() < deadline:
        time.sleep(0.1)
    assert meter.ended == ["Cancelled"] and ours() == []
