"""What the app takes in one request, the one place every limit lives (the MCP server and batch uploads reuse it).

- **Request bodies** over :data:`MAX_REQUEST_BYTES` are refused before Gradio reads them into its queue (a 50 MB text
  once took 59 s and left the server at 6.4 GB): :class:`RequestSizeLimit`.
- **Uploads** (``/upload``) over :func:`upload_limits` (``LAYERWISE_MAX_UPLOAD_MB``, default 10 MB a request, and
  ``LAYERWISE_MAX_UPLOAD_FILES``, default 16 files a request) are refused by the same guard, by their
  Content-Length or as they stream in, before Gradio writes anything to disk; Gradio's own ``max_file_size``
  (:func:`launch_kwargs`) is a second fence. A handler that takes files checks them with :func:`check_uploads` (the
  same limits, per event: several uploads may be named in one call).
- **Links**: a query string over :data:`core.examples.LINK_MAX_CHARS` characters is cut by
  :class:`ui.links.LinkLengthLimit` (the page is redirected to the part kept, and the notice says what was ignored),
  never an HTTP 500; :data:`ui.links.MAX_URL_BYTES` is how long a request line the server reads at all.

Every refusal is one JSON line ``{"error": ...}`` with status 413 (414 for an address), in the app's words.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInputError
from ui.fence import answer

MAX_REQUEST_BYTES = 2 * 1024**2  # far above any input the app explains: MambaLRP reads at most 8,192 characters
DRAIN_BYTES = 256 * 1024**2  # an oversized body up to this is read and dropped, so the client gets the 413 message
DEFAULT_UPLOAD_MB = 10
DEFAULT_UPLOAD_FILES = 16
MULTIPART_SLACK = 64 * 1024  # multipart headers and boundaries around the files of one upload request


UPLOAD_FIX = "upload fewer or smaller files."


@dataclass(frozen=True)
class UploadLimits:
    """How much one upload request (or one event's files) may hold."""

    max_bytes: int
    max_files: int

    def refusal(self, what: str) -> BadInputError:
        """The app's one message for an upload over the limits (``what``: what was too much)."""
        return BadInputError(f"The upload is {what}; this app takes at most {self.max_files} files and "
                             f"{self.max_bytes / 1e6:g} MB in all.", fix=UPLOAD_FIX)


def _env_number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def upload_limits() -> UploadLimits:
    """The upload limits in force (``LAYERWISE_MAX_UPLOAD_MB``, ``LAYERWISE_MAX_UPLOAD_FILES``)."""
    return UploadLimits(int(_env_number("LAYERWISE_MAX_UPLOAD_MB", DEFAULT_UPLOAD_MB) * 1e6),
                        int(_env_number("LAYERWISE_MAX_UPLOAD_FILES", DEFAULT_UPLOAD_FILES)))


def check_uploads(files) -> list[str]:
    """The paths of the uploaded files a handler received (a path, a ``gr.File`` value, or a list of them), or a
    :class:`BadInputError` with the app's message when there are more files, or more bytes, than
    :func:`upload_limits` allows in one event."""
    items = [] if files is None else list(files) if isinstance(files, (list, tuple)) else [files]
    paths = [str(getattr(f, "path", None) or getattr(f, "name", None) or f) for f in items]
    limits = upload_limits()
    if len(paths) > limits.max_files:
        raise limits.refusal(f"{len(paths)} files")
    total = 0
    for p in paths:
        try:
            total += Path(p).stat().st_size
        except OSError:
            continue  # gradio checked the file came from an upload; a vanished one is the handler's to report
    if total > limits.max_bytes:
        raise limits.refusal(f"{total:,} bytes")
    return paths


def launch_kwargs() -> dict:
    """What ``demo.launch`` needs for these limits: Gradio's own per-file cap."""
    return {"max_file_size": upload_limits().max_bytes}


async def _drain(receive) -> None:
    """Read the rest of a request body (up to :data:`DRAIN_BYTES`) and drop it, so that the client reads the answer
    instead of a reset."""
    more, seen = True, 0
    while more and seen <= DRAIN_BYTES:
        message = await receive()
        seen += len(message.get("body", b""))
        more = message["type"] == "http.request" and message.get("more_body", False)


class RequestSizeLimit:
    """ASGI middleware: answer 413 with one clear message to an HTTP request whose body is over ``max_bytes`` (an
    upload to ``/upload``: over :func:`upload_limits`, in bytes or files), by its Content-Length or as it streams in.
    The files of any body with a multipart boundary (:func:`ui.fence.multipart_boundary`: the parameter as Gradio's
    parser reads it, in any case, quoted or not) are counted by the parser Gradio uses (:class:`ui.fence.PartCounter`),
    so no spelling of the boundary leaves them uncounted."""

    def __init__(self, app, max_bytes: int = MAX_REQUEST_BYTES, uploads: UploadLimits | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.uploads = uploads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from ui.fence import PartCounter, multipart_boundary

        headers = dict(scope.get("headers") or [])
        boundary = multipart_boundary(headers)
        upload = scope.get("path", "").endswith("/upload")
        limits = self.uploads or upload_limits()
        cap = limits.max_bytes + MULTIPART_SLACK if upload else self.max_bytes
        length = headers.get(b"content-length")

        def refusal(size: str) -> str:
            if upload or boundary is not None:
                return str(limits.refusal(f"{size} bytes"))
            return (f"The request is {size} bytes; the app takes at most {self.max_bytes:,}. Fix: shorten the text "
                    "(MambaLRP reads only its first or last 8,192 characters).")

        if length is not None and length.isdigit() and int(length) > cap:
            if int(length) <= DRAIN_BYTES:  # read it in chunks and drop them (nothing is kept), then answer
                await _drain(receive)
            return await answer(send, 413, refusal(f"{int(length):,}"))
        counter = PartCounter(boundary) if boundary is not None else None
        seen, refused = 0, None

        async def counted():
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                seen += len(body)
                if counter is not None:
                    counter.feed(body)
                if seen > cap:
                    refused = refusal(f"over {cap:,}")
                elif counter is not None and counter.parts > limits.max_files:
                    refused = str(limits.refusal(f"more than {limits.max_files} files"))
                if refused and boundary is not None:
                    # drop the rest, then end the body with a part Gradio's parser refuses: it removes every file
                    # of this request (on a disconnect it would leave them); the answer is sent below
                    if message.get("more_body"):
                        await _drain(receive)
                    return {"type": "http.request", "body": b"\r\n--" + boundary + b"\r\n\x01\r\n\r\n",
                            "more_body": False}
                if refused:  # stop reading, as if the client had gone
                    if message.get("more_body"):
                        await _drain(receive)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message):
            if refused is None:  # once refused, the app's own answer (an error about the cut body) is dropped
                await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:  # noqa: BLE001 - the app failing on the body cut short is the refusal, said below
            if refused is None:
                raise
        if refused is not None:  # an upload or a body of any kind (a chunked JSON body: was HTTP 500)
            await answer(send, 413, refused)


def middleware(served=()) -> list:
    """The app's request guards, outermost first, as starlette ``Middleware`` entries for ``app_kwargs``; in public
    mode also :class:`ui.public.ServerPathGuard` (``served``: the folders the app lets Gradio serve)."""
    from starlette.middleware import Middleware

    from core.settings import is_public
    from ui.fence import BodyFence
    from ui.links import LinkLengthLimit
    from ui.public import ServerPathGuard

    guards = [Middleware(LinkLengthLimit), Middleware(RequestSizeLimit), Middleware(BodyFence)]
    return guards + ([Middleware(ServerPathGuard, served=list(served))] if is_public() else [])
