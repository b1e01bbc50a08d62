"""Offline-by-default switches, and public mode.

Layerwise never reaches a model or dataset hub unless the user opts in (``--online`` on the app
or CLI, or ``LAYERWISE_ONLINE=1``). The switches must be set before ``huggingface_hub``,
``transformers`` or ``gradio`` are imported, so entry points call :func:`configure` first.

Public mode (:func:`is_public`: ``LAYERWISE_PUBLIC=1``, which ``app.py`` sets on a Space or with ``--public``) is for
an app any visitor can reach: models come only from the registry and the hub allow-list, and no input names a path
on the server (:func:`core.zoo.hub.not_offered` is the one message for every refused reference).
"""
from __future__ import annotations

import os
import time

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def is_online() -> bool:
    """True when the user opted in to hub access."""
    return os.environ.get("LAYERWISE_ONLINE", "0") == "1"


def is_public() -> bool:
    """True in public mode (``LAYERWISE_PUBLIC=1``): no input may name a path on the server (see the module doc)."""
    return os.environ.get("LAYERWISE_PUBLIC", "0") == "1"


def configure(online: bool | None = None, public: bool | None = None) -> bool:
    """Set the process environment for offline (default) or online use, and public mode when ``public`` is given;
    return the online mode."""
    if online is None:
        online = is_online()
    if public is not None:
        os.environ["LAYERWISE_PUBLIC"] = "1" if public else "0"
    os.environ["LAYERWISE_ONLINE"] = "1" if online else "0"
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # transformers would otherwise ask the hub's conversion bot (a Space) to convert a pickle-only repository
    os.environ.setdefault("DISABLE_SAFETENSORS_CONVERSION", "1")
    for var in _OFFLINE_VARS:
        if online:
            os.environ.pop(var, None)
        else:
            os.environ[var] = "1"
    return online


DEFAULT_HUB_TIMEOUT = 20.0
_bounded = False


def lrp_activation_mib() -> float | None:
    """MiB of kept activations an explanation on the CPU may hold before it recomputes its mixers
    (``LAYERWISE_LRP_ACTIVATION_MB``; unset, empty or not a positive number: None, the default budget of
    :func:`core.lrp.methods.activation_budget`). More memory for less time: SmolLM2-135M at 512 tokens needs about
    700 MiB to keep every attention layer's activations and then explains in about 3 forwards instead of 4.5."""
    try:
        value = float(os.environ.get("LAYERWISE_LRP_ACTIVATION_MB", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def hub_timeout() -> float:
    """Seconds a hub connection may stay silent (``LAYERWISE_HUB_TIMEOUT``, default 20)."""
    try:
        value = float(os.environ.get("LAYERWISE_HUB_TIMEOUT", DEFAULT_HUB_TIMEOUT))
    except ValueError:
        return DEFAULT_HUB_TIMEOUT
    return value if value > 0 else DEFAULT_HUB_TIMEOUT


def bound_hub_requests() -> None:
    """Give every ``huggingface_hub`` request (models through transformers, datasets through datasets) a connect
    and read timeout. Its own default is none for some calls, so a hub that accepts the connection and never
    answers would hang a request, and a talk, forever. A slow but flowing download is not cut: the read timeout
    counts silence, not total time. Idempotent."""
    global _bounded
    if _bounded:
        return
    import huggingface_hub
    from huggingface_hub.utils import _http

    httpx = _http.httpx2
    seconds = hub_timeout()

    silent_until: dict[str, float] = {}

    class BoundedTransport(httpx.HTTPTransport):
        """Timeouts on every request; after one timed out, requests to that host fail at once for a while (the
        client's retries with back-off would otherwise wait minutes on a hub that is not answering)."""

        def handle_request(self, request):
            host = request.url.host
            if time.monotonic() < silent_until.get(host, 0.0):
                raise httpx.RemoteProtocolError(f"the hub at {host} did not answer a moment ago", request=request)
            timeout = dict(request.extensions.get("timeout") or {})
            for part in ("connect", "read", "write", "pool"):
                if timeout.get(part) is None:
                    timeout[part] = seconds
            request.extensions["timeout"] = timeout
            try:
                return super().handle_request(request)
            except httpx.TimeoutException:
                silent_until[host] = time.monotonic() + max(30.0, 3 * seconds)
                raise

    def factory():
        return httpx.Client(event_hooks={"request": [_http.hf_request_event_hook]}, follow_redirects=True,
                            timeout=None, transport=BoundedTransport())

    huggingface_hub.set_client_factory(factory)
    _bounded = True
