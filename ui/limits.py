"""How big a request the app takes: a request body over :data:`MAX_REQUEST_BYTES` is refused before Gradio reads it
into its queue (a 50 MB text once took 59 s and left the server at 6.4 GB). File uploads are not counted here."""
from __future__ import annotations

import json

MAX_REQUEST_BYTES = 2 * 1024**2  # far above any input the app explains: MambaLRP reads at most 8,192 characters
DRAIN_BYTES = 256 * 1024**2  # an oversized body up to this is read and dropped, so the client gets the 413 message


class RequestSizeLimit:
    """ASGI middleware: answer 413 with one clear message to an HTTP request whose body (except an upload's) is over
    ``max_bytes``, by its Content-Length or, without one, as it streams in."""

    def __init__(self, app, max_bytes: int = MAX_REQUEST_BYTES):
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send, size: str) -> None:
        body = json.dumps({"error": f"The request is {size} bytes; the app takes at most {self.max_bytes:,}. Fix: "
                                    "shorten the text (MambaLRP reads only its first or last 8,192 characters)."})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body.encode()})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "/upload" in scope.get("path", ""):
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            if int(length) <= DRAIN_BYTES:  # read it in chunks and drop them (nothing is kept), then answer
                more = True
                while more:
                    message = await receive()
                    more = message["type"] == "http.request" and message.get("more_body", False)
            return await self._refuse(send, f"{int(length):,}")
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # no Content-Length: stop reading, as if the client had gone
                    return {"type": "http.disconnect"}
            return message

        return await self.app(scope, counted, send)
