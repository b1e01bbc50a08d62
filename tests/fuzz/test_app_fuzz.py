"""Fuzz every named API endpoint of the running app through ``gradio_client``. The endpoints and their parameters
come from ``client.view_api()``, so a new endpoint is fuzzed without editing this file.

The property, for every input: a result, or one clear message (``gr.Error``, which the client raises as
``AppError``); never an unexpected exception on the server (its log shows one as a traceback that does not end
in ``gradio.exceptions.Error``), never longer than the per-call limit, never an absolute path outside the
project's folders in the message, never a half-written results-cache entry; the app still answers afterwards.
While the fuzz runs, another session keeps loading model folders under fresh spellings (issue 22), and every one of
its loads must succeed too. Raw NaN and infinity (which ``gradio_client`` cannot send) go to every number field over
plain HTTP, and an oversized request is refused before it is read.
"""
from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import (CALL_LIMIT_S, FUZZ_SETTINGS, TALLIES, TINY_MODELS, booleans, cache_problems, known,
                               leaked_paths, name_lists, names, numbers, odd_files, raised_exceptions, texts)
from tests.fuzz.load import folder_copies

pytestmark = pytest.mark.slow
_TRACEBACK = "Traceback (most recent call last)"


def _choices(type_text: str) -> list:
    """The choices of a ``Literal[...]`` type; a numeric one also as a number (the API lists a Radio of ints as
    strings, and only one of the two is valid)."""
    found = re.findall(r"'((?:[^'\\]|\\.)*)'", type_text)
    found = sorted(found, key=lambda c: c not in TINY_MODELS)  # the embedded models first: cheap valid inputs
    return found + [int(c) for c in found if re.fullmatch(r"-?\d+", c)]


def _images(files: dict) -> st.SearchStrategy:
    from gradio_client import handle_file

    return st.sampled_from([handle_file(str(files["digit_png"])), handle_file(str(files["huge_png"])),
                            handle_file(str(files["random_bytes"])), handle_file(str(files["text_file"])),
                            None, "/etc/passwd", {"path": "../../etc/passwd"}, 7])


def parameter_values(param: dict, files: dict) -> st.SearchStrategy:
    kind = param["python_type"]["type"]
    default = param.get("parameter_default")
    if kind.startswith("list[Literal"):
        return name_lists(_choices(kind))
    if kind.startswith("Literal"):
        return names(_choices(kind))
    if kind in ("int", "float"):
        small = [1, 2] + ([default] if isinstance(default, (int, float)) and not isinstance(default, bool) else [])
        return numbers(small, finite=True)
    if kind == "bool":
        return booleans()
    if kind == "filepath":
        return _images(files)
    return texts()


def _clear(exception: str) -> bool:
    """A message meant for the user: ``gr.Error`` (ours, via ui.errors), or gradio refusing a payload the
    component cannot take before any app code runs (``Could not preprocess``, or the payload's pydantic model)."""
    return exception.startswith(("gradio.exceptions.Error",
                                 "gradio.exceptions.ComponentProcessingError: Could not preprocess")) or (
        exception.startswith("pydantic_core._pydantic_core.ValidationError") and "in preprocess_data" in exception)


def judge(endpoint: str, answer, error: BaseException | None, log: str, inputs, extra_roots) -> tuple[str, str]:
    """('result' | 'clear' | 'known' | 'bad', why) of one call, from its answer or error and the new server log."""
    from gradio_client.exceptions import AppError

    unexpected = [e for e in raised_exceptions(log) if not _clear(e)]
    if error is None:
        if _TRACEBACK in str(answer):
            return "bad", f"a traceback in the answer: {str(answer)[:300]}"
        if unexpected:
            return "bad", f"answered, but the server logged {unexpected[-1][:600]}"
        return "result", ""
    if isinstance(error, FutureTimeout):
        return "bad", f"no answer within {CALL_LIMIT_S:.0f} s"
    if not isinstance(error, AppError):
        return "bad", f"{type(error).__name__}: {str(error)[:300]}"
    message = error.message or ""
    if unexpected:
        where = "known" if known(endpoint, message + unexpected[-1]) else "bad"
        return where, f"unexpected exception on the server: {unexpected[-1][:600]}"
    if not message.strip() or _TRACEBACK in message:
        return "bad", f"no clear message: {message[:300]!r}"
    leaks = leaked_paths(message, inputs, extra_roots)
    if leaks:
        return "bad", f"leaked paths {leaks}: {message[:300]}"
    return "clear", ""


@pytest.fixture(scope="module")
def fuzz_files(app_server):
    from PIL import Image

    files = odd_files(app_server.root / "odd")
    files["digit_png"] = app_server.root / "odd" / "digit.png"
    Image.new("L", (28, 28), 0).save(files["digit_png"])
    files["huge_png"] = app_server.root / "odd" / "huge.png"
    Image.new("RGB", (4000, 3000), (200, 10, 10)).save(files["huge_png"])
    return files


@pytest.fixture(scope="module")
def client(app_server):
    return app_server.client()


@pytest.fixture
def loading_session(app_server):
    """Another session loading copies of two models under fresh spellings (/model_card) for as long as the test runs;
    yields its record (loads, failures), which must hold no failure at the end."""
    folders = folder_copies(app_server.root / "folders")
    loader, stop, record = app_server.client(), threading.Event(), {"loads": 0, "failures": []}

    def load():
        k = 1
        while not stop.is_set():
            for folder in folders:
                try:
                    card = loader.submit(folder + "/." * k, api_name="/model_card").result(timeout=CALL_LIMIT_S)
                    record["loads"] += 1
                    if "parameters" not in str(card):
                        record["failures"].append(str(card)[:200])
                except Exception as exc:  # noqa: BLE001 - every failed load is a finding
                    record["failures"].append(f"{type(exc).__name__}: {exc}"[:300])
            k += 1
            stop.wait(3.0)  # a round of loads every few seconds: concurrent, without doubling the app's work

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    yield record
    stop.set()
    thread.join(CALL_LIMIT_S)
    assert not record["failures"], record["failures"][:3]


def test_every_endpoint_answers_bad_input_with_one_clear_message(app_server, client, fuzz_files, loading_session):
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert len(api) >= 30, sorted(api)  # every tab's endpoints are listed
    tally = TALLIES["app"]
    bad = []
    for endpoint, spec in api.items():
        params = spec["parameters"]

        @FUZZ_SETTINGS
        @given(st.tuples(*(parameter_values(p, fuzz_files) for p in params)))
        def one(inputs):
            start = app_server.log_size()
            answer, error = None, None
            job = client.submit(*inputs, api_name=endpoint)
            try:
                answer = job.result(timeout=CALL_LIMIT_S)
            except BaseException as exc:  # noqa: BLE001 - every failure is judged below
                error = exc
                if isinstance(exc, FutureTimeout):
                    job.cancel()
            time.sleep(0.05)  # the server's log lines of this call
            verdict, why = judge(endpoint, answer, error, app_server.log_text(start), inputs, [app_server.root])
            tally.record(endpoint, verdict, why, f"{endpoint} {str(inputs)[:300]}", bad)

        one()
        assert "smollm2-135m" in client.predict("smollm2-135m", api_name="/registered_model_card"), \
            f"the app stopped answering after fuzzing {endpoint}"
    bad += cache_problems(app_server.root / "home" / "results")
    tally.bad += bad
    print(f"\nmeanwhile another session loaded {loading_session['loads']} models: "
          f"{len(loading_session['failures'])} failed")
    assert not bad, "\n".join(bad)
    assert app_server.proc.poll() is None and loading_session["loads"] >= 2


def raw_call(url: str, endpoint: str, data: list, limit: float = CALL_LIMIT_S) -> tuple[str, dict | str]:
    """Call ``endpoint`` over plain HTTP with a JSON body that may hold NaN and Infinity literals (as any client but
    ``gradio_client`` can send); ``(event, its data)`` of the answer stream (``complete`` or ``error``)."""
    body = json.dumps({"data": data}).encode()
    request = urllib.request.Request(f"{url.rstrip('/')}/gradio_api/call{endpoint}", body,
                                     {"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=limit).read())["event_id"]
    stream = urllib.request.urlopen(f"{url.rstrip('/')}/gradio_api/call{endpoint}/{event_id}", timeout=limit)
    event = None
    for line in stream.read().decode().splitlines():
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: ") and event in ("complete", "error"):
            raw = line[6:]
            try:
                return event, json.loads(raw)
            except ValueError:
                return event, raw
    return event or "none", ""


def test_raw_nan_and_infinity_in_every_number_field_get_the_apps_message(app_server, client):
    """Issue 22: a raw NaN got gradio's generic "Could not preprocess" on 6 endpoints and "cannot convert float NaN to
    integer" on /mixln_model_angular. Every number field of every endpoint now answers NaN, +inf and -inf with the
    app's own message naming the field and its range, before any work (the other inputs are the defaults)."""
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    start, tried, wrong = app_server.log_size(), 0, []
    for endpoint, spec in api.items():
        params = spec["parameters"]
        for i, p in enumerate(params):
            if p["python_type"]["type"] not in ("int", "float"):
                continue
            for bad in (math.nan, math.inf, -math.inf):
                data = [q.get("parameter_default") for q in params]
                data[i] = bad
                event, answer = raw_call(app_server.url, endpoint, data)
                tried += 1
                message = answer.get("error", "") if isinstance(answer, dict) else str(answer)
                if event != "error" or "is not allowed. Fix: type a number" not in message \
                        or f"{p['label']} = {bad!r}" not in message:
                    wrong.append(f"{endpoint} {p['label']} = {bad}: {event} {str(answer)[:200]}")
    unexpected = [e for e in raised_exceptions(app_server.log_text(start)) if not _clear(e)]
    print(f"\nraw NaN / inf: {tried} inputs to {tried // 3} number fields, {len(wrong)} without the app's message")
    assert tried >= 60 and not wrong, wrong[:5]
    assert not unexpected, unexpected[:3]


def test_an_oversized_request_is_refused_before_it_is_read(app_server, client):
    """A 3 MB text (the cap is 2 MiB) gets 413 with one message, at once; the app answers normally afterwards."""
    text = "a witty film. " * 230_000
    with pytest.raises(urllib.error.HTTPError) as err:
        raw_call(app_server.url, "/lrp_explain_text", ["mamba-sentiment", text, ["gradient_x_input"], -1, True, True,
                                                       True, True, None, ["in_proj"]])
    assert err.value.code == 413
    assert "the app takes at most 2,097,152" in err.value.read().decode()
    event, answer = raw_call(app_server.url, "/lrp_explain_text", ["mamba-sentiment", text[:20_000], ["gradient_x_input"],
                                                                   -1, True, True, True, True, None, ["in_proj"]])
    assert event == "complete" and "only the first 8,192 were read" in str(answer)
