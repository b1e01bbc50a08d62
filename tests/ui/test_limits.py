"""The app's request guards (``ui.limits``, ``ui.public``) driven as ASGI apps, in-process (issue 38): uploads capped in
bytes and files with the app's message and nothing left on disk, long links cut with a notice that says what was used
and what ignored, and in public mode no server path reaching Gradio. The same guards in a running app:
``tests/fuzz/test_public_app.py``."""
from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qsl

import pytest

import core.examples as ex
from ui.limits import RequestSizeLimit, UploadLimits, check_uploads, upload_limits
from ui.links import LinkLengthLimit
from ui.fence import BodyFence, json_body, multipart_boundary
from ui.public import ServerPathGuard, refused_upload

TABS = {"models_data": "Models & data", "lrp": "MambaLRP", "mathneuro": "MathNeuro", "mixln": "Mix-LN",
        "neuzip": "NeuZip"}


class Recorder:
    """A stand-in app: reads the whole body, records it (or the disconnect), answers 200."""

    def __init__(self):
        self.bodies, self.scopes = [], []

    async def __call__(self, scope, receive, send):
        self.scopes.append(scope)
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.bodies.append("disconnect")
                raise RuntimeError("client gone")  # as starlette's ClientDisconnect
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(guard, scope: dict, chunks: list[bytes], length: bool = True) -> tuple[int | None, dict, list]:
    sent = []
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    headers = list(scope.get("headers", []))
    if length:
        headers.append((b"content-length", str(sum(map(len, chunks))).encode()))

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(guard({"type": "http", "method": "POST", **scope, "headers": headers}, receive, send))
    status = sent[0]["status"] if sent else None
    body = json.loads(sent[1]["body"]) if len(sent) > 1 and sent[1]["body"].startswith(b"{") else {}
    return status, body, sent


def multipart(files: int, size: int, boundary: bytes = b"XyZ") -> tuple[list[bytes], tuple]:
    """An upload body of ``files`` parts of ``size`` bytes, in 4 KiB chunks (boundaries may straddle two)."""
    body = b"".join(b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="f%d.png"\r\n'
                    b"Content-Type: image/png\r\n\r\n" % i + b"\x89" * size + b"\r\n" for i in range(files))
    body += b"--" + boundary + b"--\r\n"
    header = (b"content-type", b"multipart/form-data; boundary=" + boundary)
    return [body[i:i + 4096] for i in range(0, len(body), 4096)], header


UPLOAD = {"path": "/gradio_api/upload"}
SMALL = UploadLimits(max_bytes=100_000, max_files=3)


def test_an_upload_over_the_byte_cap_is_refused_by_its_length_before_it_is_read():
    app = Recorder()
    chunks, header = multipart(1, 100 * 1024**2 // 64)  # declared 1.6 MB against a 100 kB cap
    status, body, _ = run(RequestSizeLimit(app, uploads=SMALL), {**UPLOAD, "headers": [header]}, chunks)
    assert status == 413 and app.bodies == []  # the app never saw it
    assert body["error"].startswith("The upload is 1,638,") and "at most 3 files and 0.1 MB" in body["error"]
    assert body["error"].endswith("Fix: upload fewer or smaller files.")


@pytest.mark.parametrize("files, size, length, what", [(5, 100, True, "more than 3 files"),
                                                        (3, 80_000, False, "over 165,536 bytes")])
def test_an_upload_over_the_caps_as_it_streams_ends_in_a_part_gradio_refuses(files, size, length, what):
    """Too many files (counted by their boundaries, which may straddle chunks), or too many bytes without a
    Content-Length: the app gets the body cut and closed by a malformed part (Gradio's parser then removes every
    file of the request), the client gets the app's 413."""
    app = Recorder()
    chunks, header = multipart(files, size)
    status, body, sent = run(RequestSizeLimit(app, uploads=SMALL), {**UPLOAD, "headers": [header]}, chunks, length)
    assert status == 413 and what in body["error"] and len(sent) == 2
    assert app.bodies and app.bodies[0].endswith(b"\r\n--XyZ\r\n\x01\r\n\r\n")


def test_an_upload_within_the_caps_passes_untouched():
    app = Recorder()
    chunks, header = multipart(3, 20_000)
    status, _, _ = run(RequestSizeLimit(app, uploads=SMALL), {**UPLOAD, "headers": [header]}, chunks)
    assert status == 200 and app.bodies == [b"".join(chunks)]


def test_check_uploads_counts_files_and_bytes_per_event(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERWISE_MAX_UPLOAD_MB", "0.01")
    monkeypatch.setenv("LAYERWISE_MAX_UPLOAD_FILES", "2")
    assert upload_limits() == UploadLimits(10_000, 2)
    files = []
    for i in range(3):
        (tmp_path / f"{i}.txt").write_bytes(b"x" * 4000)
        files.append(str(tmp_path / f"{i}.txt"))
    assert check_uploads(files[:2]) == files[:2] and check_uploads(None) == []
    with pytest.raises(Exception, match="The upload is 3 files; this app takes at most 2 files and 0.01 MB"):
        check_uploads(files)
    monkeypatch.setenv("LAYERWISE_MAX_UPLOAD_FILES", "5")
    with pytest.raises(Exception, match="The upload is 12,000 bytes"):
        check_uploads(files)
    monkeypatch.setenv("LAYERWISE_MAX_UPLOAD_MB", "nonsense")  # a bad setting falls back to the default
    assert upload_limits().max_bytes == 10_000_000


@pytest.mark.parametrize("size", [64 * 1024, 1024**2])
def test_a_long_link_is_redirected_to_the_part_used_and_the_notice_says_what_was_ignored(size):
    app = Recorder()
    query = "tab=neuzip&example=tradeoff&model=smollm2-135m&B=128&junk=" + "a" * size
    status, _, sent = run(LinkLengthLimit(app), {"method": "GET", "path": "/", "query_string": query.encode()}, [b""])
    assert status == 303 and app.scopes == []
    location = dict(sent[0]["headers"])[b"location"].decode()
    assert location.startswith("/?") and len(location) <= ex.LINK_MAX_CHARS
    opened = ex.resolve(dict(parse_qsl(location[2:])), TABS)
    assert opened.tab == "neuzip" and opened.view.example.name == "tradeoff" and opened.view.values["B"] == 128
    assert opened.notice == (f"This link: it had {len(query):,} characters, more than the 2,048 a link may have: used "
                             "tab, example, model, B; ignored 1 part (junk).")


def test_a_link_of_many_parts_keeps_what_fits_and_counts_the_rest():
    query = "tab=lrp&" + "&".join(f"k{i}=v" for i in range(200_000))
    kept = ex.shorten_query(query)
    assert len(kept) <= ex.LINK_MAX_CHARS and kept.startswith("tab=lrp&k0=v")
    opened = ex.resolve(dict(parse_qsl(kept)), TABS)
    assert opened.tab == "lrp" and "ignored 199,7" in opened.notice and len(opened.notice) < 600
    assert "and 2" in opened.notice  # the names are cut short: "k0, ..., k7 and 2xx more"


def test_a_short_link_or_another_address_is_left_alone_or_refused_in_one_line():
    app = Recorder()
    status, _, _ = run(LinkLengthLimit(app), {"method": "GET", "path": "/", "query_string": b"tab=lrp"}, [b""])
    assert status == 200
    status, body, _ = run(LinkLengthLimit(app), {"method": "GET", "path": "/gradio_api/info",
                                                 "query_string": b"x=" + b"a" * 5000}, [b""])
    assert status == 414 and body["error"].startswith("The address is 5,018 characters long")


def test_forged_cut_keys_are_named_not_trusted():
    opened = ex.resolve({"tab": "lrp", "cut": "lots", "ignored": "x"}, TABS)
    assert "not the server's" in opened.notice


def test_public_guard_refuses_files_outside_the_served_folders_without_looking(tmp_path, monkeypatch):
    looked = []
    monkeypatch.setattr("os.stat", lambda *a, **k: looked.append(a) or (_ for _ in ()).throw(OSError()))
    app = Recorder()
    guard = ServerPathGuard(app, served=[str(tmp_path / "served")])
    for path in ("/etc/passwd", "/gradio_api/x", "../../etc", str(tmp_path / "served" / ".." / "secret")):
        status, body, _ = run(guard, {"method": "GET", "path": f"/gradio_api/file={path}"}, [b""])
        assert (status, body) == (403, {"detail": "File not allowed."})
    assert looked == [] and app.scopes == []
    monkeypatch.undo()
    status, _, _ = run(guard, {"method": "GET", "path": f"/gradio_api/file={tmp_path}/served/result.json"}, [b""])
    assert status == 200  # a served file goes on to Gradio


@pytest.mark.parametrize("ctype", [b"application/json", b"APPLICATION/JSON", b"application/x+json",
                                   b"Application/Json; charset=utf-8", None])
def test_public_guard_replaces_server_paths_in_a_calls_files_whatever_the_content_type_says(ctype):
    """Issue 42, item 4: the guard read only an exact lowercase ``application/json``; ``APPLICATION/JSON`` or
    ``application/x+json`` (which FastAPI reads as JSON all the same) let a server path and a URL reach Gradio."""
    from gradio.utils import get_upload_folder

    app = Recorder()
    uploaded = f"{get_upload_folder()}/abc/digit.png"
    data = {"data": ["m", {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}, [{"path": "../x"}],
                     {"path": uploaded}, float("nan"), "/etc/passwd",
                     {"path": "https://example.com/big.bin", "url": "https://example.com/big.bin"},
                     {"path": "/layerwise-uploads/abc/digit.png"}]}
    headers = [(b"content-type", ctype)] if ctype else []
    status, _, _ = run(ServerPathGuard(app), {"path": "/gradio_api/call/x", "headers": headers},
                       [json.dumps(data).encode()])
    got = json.loads(app.bodies[0])["data"]
    refused = refused_upload()
    assert status == 200 and got[1]["path"] == refused and got[2][0]["path"] == refused
    assert got[6] == {"path": refused, "url": None}  # a URL is never fetched on a visitor's word
    assert got[3]["path"] == uploaded and got[5] == "/etc/passwd"  # an upload stays; a text is a text
    assert got[7]["path"] == uploaded  # an opaque upload name is mapped back to the upload
    assert dict(app.scopes[0]["headers"]).get(b"content-length", str(len(app.bodies[0])).encode()) == \
        str(len(app.bodies[0])).encode()
    assert json_body(dict(headers)) and not json_body({b"content-type": b"text/plain"})


def test_public_guard_refuses_the_deprecated_file_route_and_urls():
    app = Recorder()
    for path in ("/gradio_api/file/etc/passwd", "/gradio_api/file//etc/passwd", "/gradio_api/file=https://example.com/x",
                 "/gradio_api/file/../../etc/passwd"):
        status, body, _ = run(ServerPathGuard(app), {"method": "GET", "path": path}, [b""])
        assert (status, body) == (403, {"detail": "File not allowed."}), path
    assert app.scopes == []


def test_public_answers_name_no_server_path():
    """Upload answers, result links and MCP file URLs carried Gradio's temp and cache paths: a public answer names
    the served folders by opaque names (across chunk borders too), and a request naming one reaches the real file."""
    from gradio.utils import get_upload_folder

    real = get_upload_folder().rstrip("/")
    answer = json.dumps([f"{real}/abc/x.png", {"url": f"http://h/gradio_api/file={real}/d/f.json"}]).encode()

    async def app(scope, receive, send):
        app.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"999")]})
        cut = answer.index(real.encode()) + 5  # a chunk border inside the folder's path
        await send({"type": "http.response.body", "body": answer[:cut], "more_body": True})
        await send({"type": "http.response.body", "body": answer[cut:]})
    app.scopes = []
    status, _, sent = run(ServerPathGuard(app), {"method": "GET", "path": "/gradio_api/info"}, [b""])
    text = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    assert real not in text and json.loads(text) == ["/layerwise-uploads/abc/x.png", {
        "url": "http://h/gradio_api/file=/layerwise-uploads/d/f.json"}]
    assert b"content-length" not in dict(sent[0]["headers"])  # streamed: its length is the new one's
    run(ServerPathGuard(app), {"method": "GET", "path": "/gradio_api/file=/layerwise-uploads/d/f.json"}, [b""])
    assert app.scopes[-1]["path"] == f"/gradio_api/file={real}/d/f.json"


def test_a_deeply_nested_body_is_400_in_one_line_in_every_mode():
    """``[[[[...]]]]`` 100,000 deep raised RecursionError in the guard (and in Gradio's own read): HTTP 500."""
    deep = b"[" * 5_000 + b"]" * 5_000  # past Python's parser (about 1,000 levels); the live test sends 200,000
    for guard in (BodyFence(Recorder()), ServerPathGuard(Recorder())):
        status, body, _ = run(guard, {"path": "/gradio_api/call/x", "headers": []}, [deep])
        assert status == 400 and body["error"].startswith("The request body is nested too deeply")
    status, _, _ = run(BodyFence(Recorder()), {"path": "/gradio_api/call/x", "headers": []}, [b'{"data": [1]}'])
    assert status == 200


def test_a_chunked_body_over_the_cap_is_413_not_500():
    app = Recorder()
    chunks = [b'{"data": ["' + b"a" * 65536] * 40  # 2.6 MB, no Content-Length
    status, body, _ = run(RequestSizeLimit(app), {"path": "/gradio_api/call/x", "headers": [
        (b"content-type", b"application/json")]}, chunks, length=False)
    assert status == 413 and body["error"].startswith("The request is over 2,097,152 bytes")


@pytest.mark.parametrize("header", [b"multipart/form-data; BOUNDARY=XyZ", b"multipart/form-data; boundary=\"XyZ\"",
                                    b"Multipart/Form-Data; xboundary=decoy; boundary=XyZ",
                                    b"multipart/form-data; boundary=decoy; Boundary=XyZ"])
def test_the_file_cap_holds_for_every_spelling_of_the_boundary(header):
    """Issue 42, item 5: ``BOUNDARY=`` in capitals or a decoy ``xboundary=`` dodged the 16-file cap (300 files
    accepted). The boundary is now read by the parser Gradio uses, and the parts counted by it."""
    assert multipart_boundary({b"content-type": header}) == b"XyZ"
    app = Recorder()
    chunks, _ = multipart(5, 100)
    status, body, _ = run(RequestSizeLimit(app, uploads=SMALL), {**UPLOAD, "headers": [(b"content-type", header)]},
                          chunks, length=False)
    assert status == 413 and "more than 3 files" in body["error"]
    assert app.bodies and app.bodies[0].endswith(b"\r\n--XyZ\r\n\x01\r\n\r\n")
