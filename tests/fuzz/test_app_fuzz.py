"""Fuzz every named API endpoint of the running app through ``gradio_client``. The endpoints and their parameters
come from ``client.view_api()``, so a new endpoint is fuzzed without editing this file.

The property, for every input: a result, or one clear message (``gr.Error``, which the client raises as
``AppError``); never an unexpected exception on the server (its log shows one as a traceback that does not end
in ``gradio.exceptions.Error``), never longer than the per-call limit, never an absolute path outside the
project's folders in the message, never a half-written results-cache entry; the app still answers afterwards.
"""
from __future__ import annotations

import re
import time
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import (CALL_LIMIT_S, FUZZ_SETTINGS, TALLIES, TINY_MODELS, booleans, cache_problems, known,
                               leaked_paths, name_lists, names, numbers, odd_files, raised_exceptions, texts)

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


def test_every_endpoint_answers_bad_input_with_one_clear_message(app_server, client, fuzz_files):
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
    assert not bad, "\n".join(bad)
    assert app_server.proc.poll() is None
