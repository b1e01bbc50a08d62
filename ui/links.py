"""Links that open a view: ``/?tab=<tab>&example=<name>&<input>=<value>...`` (:mod:`core.examples` reads them).

Two ways in, so that a talk never waits:

- The page itself: once the app is up, :func:`publish` puts every precomputed view of every stage into the page's
  config (``window.gradio_config.layerwise_links``), and the page script (:mod:`ui.talk`) sets the linked tab and
  view in it before anything is drawn; a precomputed link is then on screen with the page.
- A link too long to read (over :data:`core.examples.LINK_MAX_CHARS` characters of query) is cut before anything
  else by :class:`LinkLengthLimit`: the page is redirected to the part used, and the notice says what was ignored.
- The server, for everything else: when the page loads, :func:`connect_links`'s load event resolves the link (a
  bad part is one line of notice), selects the tab, draws the precomputed part at once (never queued behind heavy
  work) and, when the link asks for other inputs, computes them next, with progress and the stage's Stop.
"""
from __future__ import annotations

import time
from urllib.parse import parse_qsl

import gradio as gr

import core.examples as ex
from core.errors import LayerwiseError
from ui.fence import answer
from ui.stage import Stage, view_outputs
from ui.stopping import job, stop

CONFIG_KEY = "layerwise_links"


def connect_links(demo: gr.Blocks, tabs: gr.Tabs, notice: gr.Markdown, titles: dict, stages: dict,
                  labs: dict) -> None:
    """The page-load events that open a link (see the module doc). ``labs``: each tab's content below its stage, which
    the page script holds back on the tab a link opens until the linked chart is drawn; the load event shows it."""
    order = list(stages.values())
    outputs = [tabs, notice] + [c for s in order for c in s.outputs]
    shown_labs = [gr.update(visible=True)] * len(labs)
    pending = gr.Textbox(visible=False)  # the link, when part of it is still to compute: its change starts that
    drawn = gr.Textbox(visible=False, elem_id="lw-drawn")  # set by the page script: the view it drew from the link

    def skip_all(stage=None, values=None) -> list:
        return [v for s in order for v in (values if s is stage else [gr.skip()] * len(s.outputs))]

    def opened(query: dict) -> ex.Opened:
        return ex.resolve(query, titles) if query else ex.Opened(None, None)

    def open_link(drawn: str, request: gr.Request = None):
        """``drawn``: ``<tab>/<example>`` when the page script has drawn the link's precomputed view already."""
        o = opened(dict(getattr(request, "query_params", None) or {}))
        head = [gr.Tabs(selected=o.tab) if o.tab else gr.skip(), gr.update(value=o.notice, visible=bool(o.notice))]
        if o.view is None:
            return head + skip_all() + [gr.skip()] + shown_labs
        stage = stages[o.tab]
        first = o.view if o.view.precomputed else ex.default_view(o.tab, o.view.example.name)
        on_page = o.view.precomputed and drawn == f"{o.tab}/{first.example.name}"
        later = gr.skip() if o.view.precomputed else o.view.query()
        return head + (skip_all() if on_page else skip_all(stage, view_outputs(stage, first))) + [later] + shown_labs

    def finish_link(query: str, request: gr.Request = None, progress=gr.Progress()):
        o = opened(dict(parse_qsl(query or "")))
        if o.view is None or o.view.precomputed:
            return [gr.skip()] * len(outputs)
        try:
            values = view_outputs(stages[o.tab], o.view, job(request, progress))
        except LayerwiseError as err:  # one line, and the precomputed view stays
            return [gr.skip(), gr.update(value=f"This link: {err}", visible=True)] + skip_all()
        return [gr.skip(), gr.skip()] + skip_all(stages[o.tab], values)

    demo.load(open_link, drawn, [*outputs, pending, *labs.values()], api_name="open_link",
              api_visibility="undocumented", concurrency_limit=None, show_progress="hidden")
    later = pending.change(finish_link, pending, outputs, api_name="open_link_computed", api_visibility="undocumented",
                           show_progress_on=[s.plot for s in order])  # the page's own plumbing, as open_link
    for s in order:
        s.stop.click(stop, None, s.status, cancels=[*s.events, later], api_name=f"{s.tab}_stage_stop")
    demo.layerwise_stages = stages


def _props(stage: Stage, values: list) -> list[dict]:
    """The stage's outputs for a view as the page config holds them: ``{"id", "value"?, "visible"?}`` each."""
    out = []
    for component, value in zip(stage.outputs, values):
        update = value if isinstance(value, dict) and value.get("__type__") == "update" else {"value": value}
        prop = {"id": component._id}
        if "value" in update:
            shown = component.postprocess(update["value"])
            prop["value"] = shown.model_dump() if hasattr(shown, "model_dump") else shown
        if "visible" in update:
            prop["visible"] = update["visible"]
        out.append(prop)
    return out


def presets(stages: dict) -> dict:
    """Every precomputed view of every stage, for the page script: ``{tab: {"examples": {name: {"inputs": {name:
    value as in a link}, "props": [{"id", "value", "visible"}, ...]}}, "order": [names]}}``."""
    data = {}
    for tab, stage in stages.items():
        views = {}
        for e in ex.examples(tab):
            v = ex.default_view(tab, e.name)
            try:
                props = _props(stage, view_outputs(stage, v))
            except LayerwiseError:  # e.g. a model not prepared yet: a link to it gets the server's message instead
                continue
            views[e.name] = {"inputs": {p.name: p.format(v.values[p.name]) for p in e.params}, "props": props}
        data[tab] = {"examples": views, "order": [e.name for e in ex.examples(tab)]}
    return data


def publish(demo: gr.Blocks, log=None) -> float:
    """Put :func:`presets` into the served page config (run once the app is up: building them all takes seconds,
    which the app's start does not wait for; a page served before gets them from the server instead). Returns the
    seconds it took."""
    t0 = time.perf_counter()
    try:
        demo.config[CONFIG_KEY] = presets(demo.layerwise_stages)
    except Exception as err:  # noqa: BLE001  (the load event still opens every link; say why the page cannot)
        if log is not None:
            log(f"links: the precomputed views are not in the page ({type(err).__name__}: {err})")
    return time.perf_counter() - t0


# ---- links too long to read (issue 38) ---------------------------------------------------------------------------
MAX_URL_BYTES = 4 * 1024**2  # the longest request line (and headers) the HTTP server reads; longer: its own 400


class LinkLengthLimit:
    """ASGI middleware: an address whose query string is over :data:`core.examples.LINK_MAX_CHARS` characters. The
    page (``GET /``) is redirected to the part of the link kept (:func:`core.examples.shorten_query`; the notice on
    the page says what was used and what ignored); any other address gets 414 and one message."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from core.examples import LINK_MAX_CHARS, shorten_query

        query = scope.get("query_string", b"")
        path = scope.get("path", "")
        if len(query) <= LINK_MAX_CHARS and len(path) <= LINK_MAX_CHARS:
            return await self.app(scope, receive, send)
        page = path in ("", "/") and scope.get("method") in ("GET", "HEAD")
        if page and len(path) <= LINK_MAX_CHARS:
            kept = shorten_query(query.decode("latin-1"))
            location = (scope.get("root_path", "") + "/?" + kept).encode("latin-1")
            await send({"type": "http.response.start", "status": 303,
                        "headers": [(b"location", location), (b"content-length", b"0"), (b"cache-control", b"no-store")]})
            return await send({"type": "http.response.body", "body": b""})
        return await answer(send, 414, f"The address is {len(path) + len(query):,} characters long; this app takes "
                                        f"at most {LINK_MAX_CHARS:,} in its path and {LINK_MAX_CHARS:,} in its query. "
                                        "Fix: shorten the link.")


def read_long_request_lines(demo) -> None:
    """Let the HTTP server read request lines up to :data:`MAX_URL_BYTES` (h11's default is 16 KiB: a longer link got
    a bare 400 before the app could cut it). Call once the app is launched; new connections use it."""
    config = getattr(getattr(demo, "server", None), "config", None)
    if config is not None:
        config.h11_max_incomplete_event_size = MAX_URL_BYTES
