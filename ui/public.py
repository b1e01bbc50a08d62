"""Public mode at the HTTP layer: no request may make the server look at a path of its choosing, and no answer names one.

``core`` refuses every model or run reference that the server does not list (:func:`core.references.check_reference`,
one message, no file system call). Gradio itself takes paths in three places, and :class:`ServerPathGuard` (an ASGI
middleware, on only in public mode) closes them before Gradio sees the request:

- ``GET /gradio_api/file=<path>`` and the deprecated ``/gradio_api/file/<path>``: a path outside the folders the app
  serves (its download files, Gradio's upload and cache folders) or a URL (Gradio would fetch it) is refused with
  one answer, without the ``stat`` Gradio would do first (which tells a file from a folder from nothing, at least by
  its timing);
- a file argument (``{"path": ...}`` in a JSON body: every body FastAPI reads as JSON, :func:`ui.fence.json_body`,
  whatever the case of its content type): a path outside the upload folder, or a URL, is replaced by an empty file
  of the upload folder (:func:`refused_upload`), so every such call ends in the handler's own message about an
  empty file, whatever the path named.

And no answer names a server path: the folders the app serves appear in every text answer (JSON, the event streams,
the page) as opaque names (``/layerwise-uploads/...``, ``/layerwise-files/...``), which the guard maps back when a
request names them; an upload's answer, a result's download link and an MCP tool's file URL alike.
"""
from __future__ import annotations

import json
import os

from ui.fence import BadBody, answer, json_body, parse_json, read_body, replay, rewrite_text_answers

FILE_REFUSAL = {"detail": "File not allowed."}
REFUSED_NAME = "not-an-upload.txt"  # what a file argument naming a server path becomes: an empty file


def _absolute(path: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def _inside(path: str, roots: list[str]) -> bool:
    """Whether ``path`` lies in one of ``roots``, read lexically (no file system call)."""
    full = _absolute(path)
    return any(full == r or full.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _url(text: str) -> bool:
    return "://" in text[:16] or text.startswith("//")


def served_roots(extra=()) -> list[str]:
    """The folders whose files a visitor may fetch: Gradio's upload and cache folders and ``extra`` (the app's
    ``allowed_paths``), each as an absolute, normalised path."""
    from gradio.utils import get_cache_folder, get_upload_folder

    roots = [get_upload_folder(), str(get_cache_folder()), *map(str, extra)]
    return [_absolute(r) for r in roots]


def opaque_names(extra=()) -> dict[str, str]:
    """``{served folder (absolute): its opaque name}``: the upload folder is ``/layerwise-uploads``, Gradio's examples
    cache ``/layerwise-cache``, the app's download folders ``/layerwise-files``, ``/layerwise-files-1``, ..."""
    roots = served_roots(extra)
    names = {roots[0]: "/layerwise-uploads", roots[1]: "/layerwise-cache"}
    for i, r in enumerate(roots[2:]):
        names.setdefault(r, "/layerwise-files" + (f"-{i}" if i else ""))
    return names


def refused_upload() -> str:
    """An empty file in the upload folder (made again if Gradio's hourly sweep removed it): what a file argument
    naming a server path is replaced by, so the handler answers with its own message about the file."""
    from gradio.utils import get_upload_folder

    path = os.path.join(_absolute(get_upload_folder()), "layerwise", REFUSED_NAME)
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").close()
    return path


class ServerPathGuard:
    """ASGI middleware for public mode (see the module doc). ``served``: the app's ``allowed_paths``."""

    def __init__(self, app, served=()):
        self.app = app
        self.served = list(served)

    def _names(self) -> dict[str, str]:
        return opaque_names(self.served)

    def _real(self, text: str) -> str:
        """``text`` with an opaque folder name at its start mapped back to the folder."""
        for real, name in self._names().items():
            if text == name or text.startswith(name + "/"):
                return real + text[len(name):]
        return text

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        send = self._opaque_answers(scope, send)
        target = _file_route(path)
        if target is not None:
            real = self._real(target)
            if _url(real) or not _inside(real, served_roots(self.served)):
                body = json.dumps(FILE_REFUSAL).encode()
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                return await send({"type": "http.response.body", "body": body})
            if real != target:  # an opaque name: Gradio gets the real path
                prefix = path[: len(path) - len(target)]
                scope = {**scope, "path": prefix + real, "raw_path": (prefix + real).encode()}
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if scope.get("method") not in ("POST", "PUT", "PATCH") or not json_body(headers) or path.endswith("/upload"):
            return await self.app(scope, receive, send)
        body, other = await read_body(receive)
        if other is not None:  # the client went while sending
            return await self.app(scope, replay([{"type": "http.request", "body": body}, other], receive), send)
        try:
            doc = parse_json(body)
            changed = self._file_arguments(doc)
            if changed:
                body = json.dumps(doc).encode()
        except BadBody as bad:

            return await answer(send, 400, str(bad))
        except (ValueError, RecursionError):  # not JSON after all: Gradio answers it
            changed = False
        if changed:
            scope = {**scope, "headers": [(k, str(len(body)).encode() if k == b"content-length" else v)
                                          for k, v in scope.get("headers") or []]}
        return await self.app(scope, replay([{"type": "http.request", "body": body}], receive), send)

    def _file_arguments(self, doc) -> bool:
        """Map opaque names back and replace every ``{"path": ...}`` outside the upload folder (or a URL) with
        :func:`refused_upload`, in place, walking the document without recursion; whether anything changed."""
        from gradio.utils import get_upload_folder

        uploads = [_absolute(get_upload_folder())]
        changed, stack = False, [doc]
        while stack:
            value = stack.pop()
            if isinstance(value, list):
                stack.extend(value)
            elif isinstance(value, dict):
                for key in ("path", "url"):
                    text = value.get(key)
                    if isinstance(text, str):
                        real = self._real(text)
                        if key == "path" and (_url(real) or not _inside(real, uploads)):
                            real = refused_upload()
                        if key == "url" and _url(real):
                            real = None  # Gradio may fetch a URL it is given: never on a visitor's word
                        if real != text:
                            value[key], changed = real, True
                stack.extend(v for k, v in value.items() if k not in ("path", "url"))
        return changed

    def _opaque_answers(self, scope, send):
        """``send`` with every served folder in a text answer replaced by its opaque name (a file's own bytes, from
        the file routes, are left as they are)."""
        if _file_route(scope.get("path", "")) is not None:
            return send
        return rewrite_text_answers(send, [(real.encode() + b"/", name.encode() + b"/")  # a folder's files
                                           for real, name in self._names().items()])


def _file_route(path: str) -> str | None:
    """The path a request to Gradio's file routes names (``.../file=<path>``, or the deprecated
    ``/gradio_api/file/<path>``, which Gradio reads relative to its working folder), or None for any other
    request."""
    if "/file=" in path:
        return path.split("/file=", 1)[1]
    for prefix in ("/gradio_api/file/", "/file/"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return None


__all__ = ["ServerPathGuard", "served_roots", "opaque_names", "refused_upload", "FILE_REFUSAL", "REFUSED_NAME"]
