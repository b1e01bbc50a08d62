"""Jobs: who owns a piece of heavy work, how many one visitor may have, and what stops one.

``cancels=`` stops Gradio from waiting for an event, but the worker thread of a plain (non-generator) handler runs
on; so the work polls a predicate: :func:`job` gives ``core`` a ``progress(fraction, message)`` that drives
``gr.Progress`` and raises :class:`core.errors.Cancelled` once the job should stop (issue 42):

- its owner pressed **Stop** (:func:`stop`), in any session it owns: in public mode a job is owned by the visitor
  (:func:`owner`: the client's address), so a Stop from another tab or another API session of the same visitor stops
  it; locally by the browser session, so one tab's Stop never stops another tab's work;
- its **client left**: Gradio marks the event dead when the page (or an API client's event stream) disconnects, and
  the job stops at its next progress report instead of computing for nobody.

In public mode one visitor may have :func:`visitor_limit` jobs computing at once (``LAYERWISE_VISITOR_JOBS``,
default 1); another is refused with one message. The jobs of one handler call end when it returns
(:func:`ui.lanes.bound_heavy` wraps every heavy handler); the total of heavy work is Gradio's one ``heavy`` lane
(:mod:`ui.lanes`).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import gradio as gr

from core.errors import BadInputError
from core.progress import cancellable

STOPPED = "Stopped. Press a button to start again."
DEFAULT_VISITOR_JOBS = 1


@dataclass(eq=False)
class Job:
    """One piece of heavy work: its owner, session, Stop flag and Gradio event (None outside a queue)."""

    owner: str
    session: str
    scope: object
    event: object = None
    flag: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)

    def gone(self) -> bool:
        """Whether the client that asked for it left (Gradio marked its event dead)."""
        return self.event is not None and not getattr(self.event, "alive", True)

    def stopped(self) -> bool:
        return self.flag.is_set() or self.gone()


_lock = threading.Lock()
_jobs: list[Job] = []


def _public() -> bool:
    from core.settings import is_public

    return is_public()


def visitor_address(request: gr.Request | None) -> str:
    """The address of the client that made ``request``: on a Hugging Face Space (``SPACE_ID``) the last address its
    proxy added to ``X-Forwarded-For`` (a client can prepend any address, not append one), else the peer's."""
    headers = dict(getattr(request, "headers", None) or {})
    forwarded = headers.get("x-forwarded-for", "")
    if os.environ.get("SPACE_ID") and forwarded.strip():
        return forwarded.split(",")[-1].strip()
    client = getattr(request, "client", None)
    return str(getattr(client, "host", None) or "local")


def owner(request: gr.Request | None) -> str:
    """Who owns the work ``request`` starts: the visitor's address in public mode, the browser session locally."""
    if _public():
        return "visitor:" + visitor_address(request)
    return "session:" + (getattr(request, "session_hash", None) or "default")


def visitor_limit() -> int | None:
    """How many jobs one visitor may have computing at once: ``LAYERWISE_VISITOR_JOBS`` (default 1) in public mode,
    no limit locally (the total is the heavy lane's)."""
    if not _public():
        return None
    raw = os.environ.get("LAYERWISE_VISITOR_JOBS", "").strip()
    return max(1, int(raw)) if raw.isdigit() else DEFAULT_VISITOR_JOBS


def _scope():
    """What identifies one handler call: its Gradio event (every step of a streaming handler too), else the thread."""
    from gradio.context import LocalContext

    return LocalContext.event_id.get(None) or threading.get_ident()


def _event(event_id):
    """The running Gradio event ``event_id`` (to see whether its client is still there), or None."""
    from gradio.context import LocalContext

    blocks = LocalContext.blocks.get(None)
    queue = getattr(blocks, "_queue", None)
    for batch in getattr(queue, "active_jobs", None) or []:
        for event in batch or []:
            if getattr(event, "_id", None) == event_id:
                return event
    return None


def watch(request: gr.Request | None, show=None):
    """A new job for the owner of ``request`` (refused over :func:`visitor_limit`): the ``progress(fraction,
    message)`` to hand to ``core``, calling ``show(fraction, message)`` and raising ``Cancelled`` once the job should
    stop (see the module doc)."""
    key, scope = owner(request), _scope()
    limit = visitor_limit()
    with _lock:
        _jobs[:] = [j for j in _jobs if j.scope != scope]  # a call has one job at a time (a thread's earlier call)
        mine = [j for j in _jobs if j.owner == key and j.scope != scope]
        if limit is not None and len(mine) >= limit:
            raise BadInputError(f"You already have {len(mine)} computation{'s' if len(mine) > 1 else ''} running on "
                                f"this public server, the most one visitor may have at once.",
                                fix="wait for it to finish, or press its Stop; precomputed views draw at once.")
        j = Job(key, getattr(request, "session_hash", None) or "default", scope,
                _event(scope) if not isinstance(scope, int) else None)
        _jobs.append(j)
    return cancellable(show, j.stopped)


def job(request: gr.Request | None, progress=None):
    """A new piece of work for this visitor or session (:func:`watch`) reporting to ``gr.Progress``."""
    show = (lambda fraction, message: progress(fraction, desc=message)) if progress is not None else None
    return watch(request, show)


def end_jobs() -> int:
    """End the jobs of the handler call running in this thread (:func:`ui.lanes.bound_heavy` calls it when a heavy
    handler returns); returns how many."""
    scope = _scope()
    with _lock:
        ended = [j for j in _jobs if j.scope == scope]
        _jobs[:] = [j for j in _jobs if j.scope != scope]
    return len(ended)


def running(key: str | None = None) -> list[Job]:
    """The jobs computing now (of owner ``key``)."""
    with _lock:
        return [j for j in _jobs if key is None or j.owner == key]


def stop(request: gr.Request = None) -> str:
    """Ask every running job of this request's owner to stop (:func:`owner`: in public mode from any session of the
    same visitor)."""
    key = owner(request)
    for j in running(key):
        j.flag.set()
    return STOPPED


__all__ = ["job", "watch", "stop", "end_jobs", "running", "owner", "visitor_limit", "visitor_address", "STOPPED",
           "Job"]
