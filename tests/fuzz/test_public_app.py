"""A public Space, as a visitor meets it (issue 38): ``python app.py --public`` in a subprocess, every named endpoint
(public and undocumented, listed from the app's ``/config``, so a new one is driven without editing this file) given
server paths in every text, choice and file input: an existing file, an existing folder, a folder holding a model that
loads in local mode, a missing path, traversal strings and absolute paths.

Per endpoint and input, the outcome may not depend on what the path names: every kind gets the same answer (the same
refusal, word for word once the echoed input is set aside), and a model or run reference gets the app's one message.
Events of one kind (the same inputs and outputs: a stage's inputs all run the stage's handler) get every path on
their first endpoint and two on the others.
Nothing under the planted folder is opened or read meanwhile (inotify watches it). A deep link naming a folder, a
100 MB upload, Gradio's file route and long links get their one answer too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import http.client
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from core.paths import ASSETS_DIR
from core.zoo.hub import PUBLIC_REFUSAL
from tests.fuzz.conftest import serving

pytestmark = pytest.mark.slow
CALL_LIMIT_S = 120
TEMP_CAP_MB = 30  # Gradio's temp folder of the public app under test (the default is 512)
PATH_INPUTS = ("textbox", "dropdown", "radio", "checkboxgroup", "image", "file")


class Inotify:
    """Opens and reads under some folders, as Linux reports them (``IN_OPEN | IN_ACCESS``); stat is not seen."""

    IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000

    def __init__(self, folders):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        if self.fd < 0:
            pytest.skip("inotify is not available here")
        self.names = {}
        for folder in folders:
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), self.IN_ACCESS | self.IN_OPEN)
            assert wd >= 0, f"cannot watch {folder}"
            self.names[wd] = folder

    def events(self) -> list[str]:
        out = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            at = 0
            while at < len(buf):
                wd, mask, _, length = __import__("struct").unpack_from("iIII", buf, at)
                name = buf[at + 16: at + 16 + length].rstrip(b"\0").decode()
                out.append(f"{'open' if mask & self.IN_OPEN else 'read'} {self.names.get(wd)}/{name}")
                at += 16 + length

    def close(self):
        os.close(self.fd)


@pytest.fixture(scope="module")
def public_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("public")
    planted = root / "planted"
    (planted / "folder").mkdir(parents=True)
    (planted / "secret.txt").write_text("not for visitors\n")
    shutil.copytree(ASSETS_DIR / "models" / "mamba-sentiment", planted / "model")
    shutil.copytree(ASSETS_DIR / "mixln" / "pre-ln", planted / "run", ignore=shutil.ignore_patterns("seed-*"))
    with serving(root, "--public", LAYERWISE_MAX_TEMP_MB=TEMP_CAP_MB) as server:
        yield server, planted


def kinds(planted: Path) -> dict[str, str]:
    return {"file": str(planted / "secret.txt"), "folder": str(planted / "folder"), "model": str(planted / "model"),
            "missing": str(planted / "nothing-here.json"), "traversal": "../../../../../../../etc/passwd",
            "dots": "../" * 14 + str(planted / "model").lstrip("/"), "absolute": "/etc", "proc": "/proc/self/environ"}


def mixln_kinds(planted: Path) -> dict[str, str]:
    """``mixln:`` followed by a path (issue 42: NeuZip's training joined it under assets/mixln): into the committed
    models beside the runs, to the planted model and to a planted run folder; given to every input that offers a
    ``mixln:`` choice (every model input goes through the same check: tests/core/test_public.py)."""
    return {"mixln-dots": "mixln:../models/mamba-sentiment", "mixln-model": "mixln:" + str(planted / "model"),
            "mixln-run": "mixln:" + str(planted / "run"), "mixln-traversal": "mixln:../../../../../../etc"}


def call(url: str, api: str, data: list, query: str = "") -> tuple[str, str]:
    """(``complete`` | ``error``, the answer) of one call over plain HTTP, as any client can send it."""
    base = f"{url.rstrip('/')}/gradio_api/call/{api}"
    request = urllib.request.Request(base + query, json.dumps({"data": data}).encode(),
                                     {"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=CALL_LIMIT_S).read())["event_id"]
    event, payload = "none", ""
    for line in urllib.request.urlopen(f"{base}/{event_id}", timeout=CALL_LIMIT_S).read().decode().splitlines():
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: ") and event in ("complete", "error"):
            payload = line[6:]
    return event, payload


def without(text: str, value: str) -> str:
    """``text`` with the input ``value`` (as text, repr or JSON) set aside, so answers to two paths compare."""
    for v in sorted({value, repr(value), json.dumps(value), json.dumps(value)[1:-1], os.path.abspath(value)},
                    key=len, reverse=True):
        text = text.replace(v, "<input>")
    return text


def endpoints(url: str) -> list[tuple[str, list[dict], bool]]:
    """(api name, input components with their current values, whether it is the first of its kind) of every named
    event, from the page config. Events with the same inputs and outputs (a stage's inputs, which all run the stage's
    one handler; one button and its text box's Enter) are of one kind."""
    config = json.loads(urllib.request.urlopen(f"{url.rstrip('/')}/config", timeout=60).read())
    components = {c["id"]: c for c in config["components"]}
    out, kinds = [], set()
    for dep in config["dependencies"]:
        if isinstance(dep.get("api_name"), str) and dep.get("api_visibility") in ("public", "undocumented") \
                and dep.get("backend_fn"):
            kind = (tuple(dep["inputs"]), tuple(dep["outputs"]))
            out.append((dep["api_name"], [components[i] for i in dep["inputs"]], kind not in kinds))
            kinds.add(kind)
    return out


def value_for(component: dict, path: str):
    kind = component["type"]
    if kind in ("image", "file"):
        return {"path": path, "meta": {"_type": "gradio.FileData"}}
    return [path] if kind == "checkboxgroup" else path


def test_every_endpoint_answers_every_server_path_alike_and_reads_none(public_app):
    server, planted = public_app
    paths = kinds(planted)
    watch = Inotify([planted, planted / "folder", planted / "model", planted / "run"])
    watch.events()
    outcomes, driven, inputs_driven = {}, set(), 0
    for api, inputs, first in endpoints(server.url):
        defaults = [c["props"].get("value") for c in inputs]
        for i, component in enumerate(inputs):
            if component["type"] not in PATH_INPUTS:
                continue
            inputs_driven += 1
            driven.add(api)
            seen = {}
            tried = paths if first else dict(list(paths.items())[2:4])  # another event of a kind: two paths
            if first and "mixln:" in json.dumps(component.get("props", {}).get("choices")):  # offers mixln:<run>
                tried = {**tried, **mixln_kinds(planted)}
            for n, (kind, path) in enumerate(tried.items()):
                data = list(defaults)
                data[i] = value_for(component, path)
                event, answer = call(server.url, api, data)
                seen[kind] = (event, without(answer, path) if event == "error" else "a result")
                if n == 1 and {e for e, _ in seen.values()} == {"complete"}:
                    break  # two paths answered as text to work on (a text to explain): not a path input
            outcomes[(api, component.get("props", {}).get("label"))] = seen
    differing = {k: v for k, v in outcomes.items() if len(set(v.values())) > 1}
    assert not differing, json.dumps({f"{a} / {b}": v for (a, b), v in list(differing.items())[:3]}, indent=1)
    refusals = {k: next(iter(v.values()))[1] for k, v in outcomes.items() if next(iter(v.values()))[0] == "error"}
    ours = [k for k, m in refusals.items() if PUBLIC_REFUSAL in m]
    print(f"\npublic mode: {len(driven)} endpoints, {inputs_driven} inputs, {sum(map(len, outcomes.values()))} calls "
          f"with server paths; {len(refusals)} inputs refused every path alike ({len(ours)} with the app's model "
          f"message), {len(outcomes) - len(refusals)} took them as text")
    for (api, label), message in refusals.items():
        assert "Traceback" not in message and str(planted) not in message, (api, label, message)
    assert len(driven) >= 30 and len(ours) >= 10
    for api in ("model_card", "mixln_model_angular", "lrp_targets", "neuzip_tradeoff", "neuzip_train"):  # models
        said = [m for (a, label), m in refusals.items() if a == api and "model" in str(label).lower()]
        assert said and all(PUBLIC_REFUSAL in m for m in said), (api, said)
    events = watch.events()
    watch.close()
    assert events == [], events[:5]


def test_a_deep_link_naming_a_server_path_gets_one_notice(public_app):
    server, planted = public_app
    notices = set()
    for path in kinds(planted).values():
        _, answer = call(server.url, "open_link", [""], "?tab=neuzip&example=tradeoff&model=" + quote(path))
        notices.add(re.search(r'"(This link:[^"]*)"', answer).group(1))
    assert notices == {f"This link: {PUBLIC_REFUSAL.rstrip('.')}; showing model=smollm2-135m."}


def test_uploads_and_files_get_the_apps_one_answer(public_app):
    server, planted = public_app
    host = urlsplit(server.url)
    big = planted / "big.png"
    with open(big, "wb") as f:
        f.truncate(100 * 1024**2)  # 100 MB (sparse: no disk)
    boundary = "lwupload"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.png\"\r\n"
            "Content-Type: image/png\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=CALL_LIMIT_S)
    conn.putrequest("POST", "/gradio_api/upload")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(len(head) + big.stat().st_size + len(tail)))
    conn.endheaders()
    conn.send(head)
    try:
        with open(big, "rb") as f:
            while chunk := f.read(1 << 20):
                conn.send(chunk)
        conn.send(tail)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer before it has read everything
    answer = conn.getresponse()
    text = answer.read().decode()
    assert answer.status == 413 and "The upload is 104,857,7" in text and "Fix: upload fewer or smaller files" in text
    assert not [p for p in (server.root / "gradio").rglob("*") if p.is_file() and p.stat().st_size > 10**7]
    for path in (kinds(planted)["file"], kinds(planted)["folder"], kinds(planted)["missing"], "/etc/passwd"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.url.rstrip('/')}/gradio_api/file={path}", timeout=60)
        assert (err.value.code, err.value.read()) == (403, b'{"detail": "File not allowed."}')


@pytest.mark.parametrize("size", [64 * 1024, 1024**2])
def test_a_long_link_opens_the_page_with_the_apps_notice(public_app, size):
    server, _ = public_app
    query = "tab=neuzip&example=tradeoff&junk=" + "a" * size
    with urllib.request.urlopen(f"{server.url}?{query}", timeout=CALL_LIMIT_S) as page:
        assert page.status == 200 and "cut=" in page.url and len(urlsplit(page.url).query) <= 2048
        assert b"gradio_config" in page.read()
    _, answer = call(server.url, "open_link", [""], "?" + urlsplit(page.url).query)
    notice = re.search(r'"(This link:[^"]*)"', answer).group(1)
    assert notice == (f"This link: it had {len(query):,} characters, more than the 2,048 a link may have: used tab, "
                      "example; ignored 1 part (junk).")


def memory_kib(pid: int) -> dict[str, int]:
    """The process's resident set now (``VmRSS``) and at its peak (``VmHWM``), in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def test_an_image_bomb_is_refused_by_its_header(public_app):
    """Issue 42, item 2: a 13,000 x 13,000 PNG (~740 KB) sent to the image explainer took the server from 0.8 to
    5.95 GB. Now it gets the app's message, and the server's peak resident memory does not move by more than a
    fraction of what one decode would take (169 MB as grey bytes, 676 MB as the float32 copy)."""
    from tests.pngs import png_bomb

    server, planted = public_app
    bomb = png_bomb(planted / "bomb.png")
    client = server.client()
    from gradio_client import handle_file

    digit = png_bomb(planted / "digit.png", 56, 56)  # a small image first: the model and the code are loaded
    args = (0, ["mambalrp"], -1, True, True, True, True, None, ["in_proj"])
    client.predict("vision-mamba-mnist", handle_file(str(digit)), *args, api_name="/lrp_explain_image")
    before = memory_kib(server.proc.pid)
    with pytest.raises(Exception) as err:
        client.predict("vision-mamba-mnist", handle_file(str(bomb)), *args, api_name="/lrp_explain_image")
    after = memory_kib(server.proc.pid)
    assert "13,000 x 13,000 pixels" in str(err.value) and "decodes at most" in str(err.value)
    assert after["VmHWM"] - before["VmHWM"] < 100 * 1024, (before, after)


def chunked(server, path: str, headers: dict, parts) -> tuple[int, str]:
    """POST ``parts`` (bytes chunks) with ``Transfer-Encoding: chunked`` (no length to refuse it by); (status, body)."""
    host = urlsplit(server.url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=CALL_LIMIT_S)
    conn.putrequest("POST", path)
    for k, v in {**headers, "Transfer-Encoding": "chunked"}.items():
        conn.putheader(k, v)
    conn.endheaders()
    try:
        for part in parts:
            conn.send(b"%x\r\n%s\r\n" % (len(part), part))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer before it has read everything
    answer = conn.getresponse()
    return answer.status, answer.read().decode()


def gradio_files(server) -> list[Path]:
    return [p for p in (server.root / "gradio").rglob("*") if p.is_file()]


def test_the_fence_reads_bodies_as_the_server_does(public_app):
    """Issue 42, items 4, 5 and 8, against the running app: a cased content type no longer carries a server path to
    Gradio; a chunked upload of 300 files under a cased boundary, or of 12 MB, is answered 413 and leaves no file; a
    deeply nested body is 400 and a chunked 3 MB body 413 (both were HTTP 500); the deprecated file route is
    refused like the other."""
    server, planted = public_app
    watch = Inotify([planted])
    watch.events()
    base = server.url.rstrip("/")
    data = json.dumps({"data": ["vision-mamba-mnist", {"path": str(planted / "secret.txt"), "meta": {
        "_type": "gradio.FileData"}}, 0, ["mambalrp"], -1, True, True, True, True, None, ["in_proj"]]}).encode()
    for ctype in ("APPLICATION/JSON", "application/x+json"):
        request = urllib.request.Request(f"{base}/gradio_api/call/lrp_explain_image", data, {"Content-Type": ctype})
        event_id = json.loads(urllib.request.urlopen(request, timeout=CALL_LIMIT_S).read())["event_id"]
        stream = urllib.request.urlopen(f"{base}/gradio_api/call/lrp_explain_image/{event_id}", timeout=CALL_LIMIT_S)
        text = stream.read().decode()
        assert "event: error" in text and "That file is not an image" in text, text[-300:]
    assert watch.events() == []
    watch.close()
    before = set(gradio_files(server))
    boundary = "LwBoundary"
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"f.png\"\r\n"
            "Content-Type: image/png\r\n\r\nx\r\n").encode()
    for header in (f"multipart/form-data; BOUNDARY={boundary}", f"multipart/form-data; xboundary=d; boundary={boundary}"):
        status, text = chunked(server, "/gradio_api/upload", {"Content-Type": header}, [part * 30] * 10)
        assert status == 413 and "more than 16 files" in text, (status, text)
    big = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.png\"\r\n"
           "Content-Type: image/png\r\n\r\n").encode()
    status, text = chunked(server, "/gradio_api/upload", {"Content-Type": f"multipart/form-data; boundary={boundary}"},
                           [big] + [b"\x89" * 1024**2] * 12)
    assert status == 413 and "The upload is over 10,065,536 bytes" in text
    time.sleep(1)
    assert set(gradio_files(server)) - before == set(), "a refused upload left a file"
    status, text = chunked(server, "/gradio_api/call/lrp_explain_text", {"Content-Type": "application/json"},
                           [b'{"data": ["' + b"a" * 65536] * 48)
    assert status == 413 and json.loads(text)["error"].startswith("The request is over 2,097,152 bytes")
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(f"{base}/gradio_api/call/lrp_explain_text", deep,
                                                      {"Content-Type": "application/json"}), timeout=CALL_LIMIT_S)
    assert err.value.code == 400 and json.loads(err.value.read())["error"].startswith("The request body is nested")
    for path in (f"/gradio_api/file/{planted / 'secret.txt'}", "/gradio_api/file/etc/passwd"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + path, timeout=60)
        assert (err.value.code, err.value.read()) == (403, b'{"detail": "File not allowed."}')


def test_no_answer_names_a_server_path(public_app):
    """Upload answers and result links carried the server's temp and cache paths (issue 42, item 8): now they name
    the served folders by opaque names, which still fetch the files, and a call given such a name gets the upload."""
    from tests.pngs import png_bomb

    server, planted = public_app
    base = server.url.rstrip("/")
    digit = png_bomb(planted / "small.png", 56, 56).read_bytes()
    body = (b"--B\r\nContent-Disposition: form-data; name=\"files\"; filename=\"small.png\"\r\n"
            b"Content-Type: image/png\r\n\r\n" + digit + b"\r\n--B--\r\n")
    request = urllib.request.Request(f"{base}/gradio_api/upload", body, {"Content-Type": "multipart/form-data; boundary=B"})
    (uploaded,) = json.loads(urllib.request.urlopen(request, timeout=CALL_LIMIT_S).read())
    assert uploaded.startswith("/layerwise-uploads/") and uploaded.endswith("/small.png")
    event, answer = call(server.url, "lrp_explain_image", ["vision-mamba-mnist", {"path": uploaded, "meta": {
        "_type": "gradio.FileData"}}, 0, ["mambalrp"], -1, True, True, True, True, None, ["in_proj"]])
    assert event == "complete" and "resized from 56x56" in answer
    roots = {str(server.root), os.path.realpath(server.root), str(server.root / "gradio")}
    assert not any(r in answer for r in roots)
    links = re.findall(r'"url": ?"([^"]+)"', answer)
    assert links and all("/gradio_api/file=/layerwise-" in u for u in links), links
    for url in links:
        with urllib.request.urlopen(base + url[url.index("/gradio_api/"):], timeout=60) as got:
            assert got.status == 200 and got.read()
    page = urllib.request.urlopen(server.url, timeout=60).read().decode()
    assert not any(r in page for r in roots)


def test_the_temp_folder_stays_under_its_cap(public_app):
    """Issue 42, item 8: each distinct explanation added 4.85 MB to Gradio's temp folder, bounded only by an hourly
    sweep. Ten distinct explanations (~50 MB of downloads) against a 30 MB cap: the folder is back under the cap
    once the files of the last seconds have aged (the sweep spares them: their answers may be on their way)."""
    from ui.tempfolder import GRACE_SECONDS, SWEEP_SECONDS, folder_bytes

    server, _ = public_app
    temp, cap = server.root / "gradio", TEMP_CAP_MB * 10**6
    seen = []
    for i in range(10):
        event, _ = call(server.url, "lrp_explain_text", ["mamba-sentiment", f"A film, take {i}: fine.",
                                                         ["gradient_x_input"], -1, True, True, True, True, None,
                                                         ["in_proj"]])
        assert event == "complete"
        seen.append(folder_bytes(temp))
    deadline = time.monotonic() + GRACE_SECONDS + 3 * SWEEP_SECONDS
    while folder_bytes(temp) > cap and time.monotonic() < deadline:
        time.sleep(1)
    print(f"\ntemp folder after each of 10 explanations (MB): {[round(b / 1e6, 1) for b in seen]}; "
          f"then {folder_bytes(temp) / 1e6:.1f} MB (cap {TEMP_CAP_MB} MB)")
    assert folder_bytes(temp) <= cap and len(list(temp.rglob("*.html"))) < 10  # some explanations' files went
