"""Public mode at the HTTP layer: no request may make the server look at a path of its choosing.

``core`` refuses every model or run reference that the server does not list (:func:`core.zoo.hub.not_offered`, one
message, no file system call). Gradio itself takes paths in two places, and :class:`ServerPathGuard` (an ASGI
middleware, on only in public mode) closes both before Gradio sees them:

- ``GET /gradio_api/file=<path>``: a path outside the folders the app serves (its download files, Gradio's upload
  and cache folders) is refused with one answer, without the ``stat`` Gradio would do first (which tells a file from
  a folder from nothing, at least by its timing);
- a file argument (``{"path": ...}`` in the JSON body of a call): a path outside the upload folder is replaced by a
  constant name before Gradio checks it, so every such call ends in the same refusal (Gradio's, which public mode
  shows as its generic error) whatever the path named.
"""
from __future__ import annotations

import json
import os

REFUSED_PATH = "refused-path"  # what a file argument naming a server path becomes (relative: never a real upload)
FILE_REFUSAL = {"detail": "File not allowed."}


def _inside(path: str, roots: list[str]) -> bool:
    """Whether ``path`` lies in one of ``roots``, read lexically (no file system call)."""
    full = os.path.normpath(os.path.join(os.getcwd(), path)) if not os.path.isabs(path) else os.path.normpath(path)
    return any(full == r or full.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def served_roots(extra=()) -> list[str]:
    """The folders whose files a visitor may fetch: Gradio's upload and cache folders and ``extra`` (the app's
    ``allowed_paths``), each as an absolute, normalised path."""
    from gradio.utils import get_cache_folder, get_upload_folder

    roots = [get_upload_folder(), str(get_cache_folder()), *map(str, extra)]
    return [os.path.normpath(os.path.abspath(r)) for r in roots]


def _without_server_paths(value, roots: list[str]):
    """``value`` (a call's JSON) with every ``{"path": ...}`` outside ``roots`` naming :data:`REFUSED_PATH`."""
    if isinstance(value, dict):
        out = {k: _without_server_paths(v, roots) for k, v in value.items()}
        if isinstance(out.get("path"), str) and not _inside(out["path"], roots):
            out["path"] = REFUSED_PATH
        return out
    if isinstance(value, list):
        return [_without_server_paths(v, roots) for v in value]
    return value


class ServerPathGuard:
    """ASGI middleware for public mode (see the module doc). ``served``: the app's ``allowed_paths``."""

    def __init__(self, app, served=()):
        self.app = app
        self.served = list(served)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if "/file=" in path:
            if not _inside(path.split("/file=", 1)[1], served_roots(self.served)):
                body = json.dumps(FILE_REFUSAL).encode()
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                return await send({"type": "http.response.body", "body": body})
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if scope.get("method") != "POST" or not headers.get(b"content-type", b"").startswith(b"application/json") \
                or path.endswith("/upload"):
            return await self.app(scope, receive, send)
        chunks, more = [], True  # the body is capped (ui.limits.RequestSizeLimit runs first), so read it whole
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([message], receive), send)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            doc = json.loads(body)
        except ValueError:  # not JSON after all: Gradio answers it
            return await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)
        body = json.dumps(_without_server_paths(doc, served_roots(self.served))).encode()
        scope = {**scope, "headers": [(k, str(len(body)).encode() if k == b"content-length" else v)
                                      for k, v in scope.get("headers") or []]}
        return await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _replay(messages: list, receive):
    """A ``receive`` that gives ``messages`` first, then what the client sends (a disconnect, once it goes)."""
    async def replayed():
        return messages.pop(0) if messages else await receive()
    return replayed
