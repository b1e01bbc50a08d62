"""The request fence: a request's headers and body read the way the HTTP specifications say, by the parsers the server
itself uses, so that no spelling reads one way here and another way in Gradio (issue 42).

- **Content types** (:func:`media_type`, :func:`json_body`): media types and parameter names are case-insensitive and
  values may be quoted (RFC 9110 8.3.1). A body is JSON when FastAPI parses it as JSON: no ``Content-Type``, or
  ``application/json`` or ``application/<anything>+json`` in any case (read with the standard library's
  ``email.message``, as FastAPI does). ``APPLICATION/JSON`` and ``application/x+json`` are JSON here too.
- **Multipart boundaries** (:func:`multipart_boundary`) are read with ``python_multipart``'s
  ``parse_options_header``, the function Gradio's upload parser calls (a parameter named ``BOUNDARY`` is the
  boundary, a decoy ``xboundary`` is not, the last ``boundary`` wins), and the parts of an upload are counted by
  ``python_multipart``'s own streaming parser (:class:`PartCounter`): the parts it sees are the parts Gradio stores.
- **JSON bodies** (:func:`parse_json`): parsed once; a body nested deeper than Python's parser goes is answered 400
  with one line (:class:`BodyFence`), never a ``RecursionError`` and an HTTP 500.
"""
from __future__ import annotations

import email.message
import json

from python_multipart.multipart import MultipartParser, parse_options_header


async def answer(send, status: int, message: str, headers=()) -> None:
    """Send one JSON answer ``{"error": message}`` with ``status`` (the guards' refusals)."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


BAD_JSON = ("The request body is nested too deeply to read (more levels of lists and objects than any input of this "
            "app has). Fix: send the inputs as a flat list (see the app's API page).")


def media_type(headers: dict) -> tuple[str, dict[str, str]]:
    """``(type/subtype in lower case, {parameter name in lower case: value unquoted})`` of the ``Content-Type`` of
    ``headers`` (an ASGI scope's headers as a dict of bytes)."""
    ctype, params = parse_options_header(headers.get(b"content-type", b""))
    return ctype.decode("latin-1"), {k.decode("latin-1"): v.decode("latin-1") for k, v in params.items()}


def json_body(headers: dict) -> bool:
    """Whether FastAPI reads this request's body as JSON: no (or an empty) ``Content-Type``, or a media type
    ``application/json`` or ``application/*+json``, in any case, with any parameters."""
    raw = headers.get(b"content-type")
    if not raw:
        return True
    message = email.message.Message()
    message["content-type"] = raw.decode("latin-1")
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def multipart_boundary(headers: dict) -> bytes | None:
    """The multipart boundary Gradio's upload parser will use (the ``boundary`` parameter of the ``Content-Type``,
    whatever the media type says), or None."""
    _, params = parse_options_header(headers.get(b"content-type", b""))
    return params.get(b"boundary") or None


class PartCounter:
    """The parts of a multipart body as ``python_multipart``'s parser sees them (Gradio's upload parser is the same
    parser with the same boundary), fed chunk by chunk; :attr:`broken` once the parser refuses the body (Gradio then
    refuses it too)."""

    def __init__(self, boundary: bytes):
        self.parts = 0
        self.broken = False
        self.parser = MultipartParser(boundary, {"on_part_begin": self._begin})

    def _begin(self) -> None:
        self.parts += 1

    def feed(self, data: bytes) -> None:
        if self.broken or not data:
            return
        try:
            self.parser.write(data)
        except Exception:  # noqa: BLE001 - a body the parser refuses: Gradio's parser refuses it alike
            self.broken = True


class BadBody(ValueError):
    """A body this app cannot read (one line for the client)."""


def parse_json(body: bytes):
    """The JSON document in ``body``, or :class:`BadBody` when it nests deeper than the parser goes; ``ValueError``
    for a body that is not JSON at all (Gradio answers that one itself)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise BadBody(BAD_JSON) from None


async def read_body(receive) -> tuple[bytes, dict | None]:
    """The whole body (already capped by :class:`ui.limits.RequestSizeLimit`), and the first message that was not
    body (a disconnect), if any."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks), None


def replay(messages: list, receive):
    """A ``receive`` that gives ``messages`` first, then what the client sends (a disconnect, once it goes)."""
    async def replayed():
        return messages.pop(0) if messages else await receive()
    return replayed


class BodyFence:
    """ASGI middleware, in every mode: a JSON body (:func:`json_body`) nested deeper than Python's parser goes is
    answered 400 with one line before Gradio reads it (Gradio's own read raised ``RecursionError``: HTTP 500)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH") or not json_body(headers):
            return await self.app(scope, receive, send)
        body, other = await read_body(receive)
        if other is None:
            try:
                parse_json(body)
            except BadBody as bad:

                return await answer(send, 400, str(bad))
            except ValueError:
                pass  # not JSON: Gradio answers it
        messages = [{"type": "http.request", "body": body}] + ([other] if other else [])
        return await self.app(scope, replay(messages, receive), send)


TEXT_TYPES = (b"application/json", b"text/", b"application/javascript")


def rewrite_text_answers(send, pairs: list[tuple[bytes, bytes]]):
    """``send`` with, in every text answer (JSON, an event stream, a page), each ``old`` of ``pairs`` replaced by its
    ``new`` (longest first), across the borders of the body's chunks too; the length header of a one-piece answer is
    the new one's, a streamed answer goes without it."""
    pairs = sorted(pairs, key=lambda p: -len(p[0]))
    state = {"start": None, "text": False, "carry": b""}

    def swap(data: bytes) -> bytes:
        for old, new in pairs:
            data = data.replace(old, new)
        return data

    async def rewritten(message):
        kind = message["type"]
        if kind == "http.response.start":
            ctype = dict(message.get("headers") or []).get(b"content-type", b"").lower()
            state["text"] = ctype.startswith(TEXT_TYPES) or b"+json" in ctype or b"event-stream" in ctype
            if not state["text"]:
                return await send(message)
            state["start"] = message  # held until the first body: its length may change
            return None
        if kind != "http.response.body" or not state["text"]:
            return await send(message)
        more = message.get("more_body", False)
        data = swap(state["carry"] + message.get("body", b""))
        hold = _partial(data, pairs) if more else 0
        state["carry"], data = (data[len(data) - hold:], data[:len(data) - hold]) if hold else (b"", data)
        if state["start"] is not None:
            start, state["start"] = state["start"], None
            headers = [(k, v) for k, v in start.get("headers") or [] if k != b"content-length"]
            if not more:
                headers.append((b"content-length", str(len(data)).encode()))
            await send({**start, "headers": headers})
        return await send({**message, "body": data})

    return rewritten


def _partial(data: bytes, pairs) -> int:
    """How many bytes at the end of ``data`` could start one of the ``old`` strings (held until the next chunk)."""
    longest = max((len(old) for old, _ in pairs), default=1)
    for k in range(min(longest - 1, len(data)), 0, -1):
        if any(old.startswith(data[-k:]) for old, _ in pairs):
            return k
    return 0


__all__ = ["rewrite_text_answers", "media_type", "json_body", "multipart_boundary", "PartCounter", "parse_json", "BadBody", "BodyFence",
           "read_body", "replay", "BAD_JSON"]
