"""The stage at the top of each paper's tab: its precomputed examples as a picker, one chart, the link to what is
shown, and the inputs of the view (:mod:`ui.links` opens a tab on one of them from a link).

Everything is listed from :mod:`core.examples` (one registry), so the tab modules do not change: ``ui.build_app``
puts a stage above each paper's tab. A precomputed view is drawn at once (those events never queue behind heavy
work); other inputs are computed with progress, and the stage's Stop ends them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

import core.examples as ex
from core.errors import BadInputError, LayerwiseError
from core.figures import message_figure
from ui.errors import user_errors
from ui.stopping import job

# the link button: the full address of the view (in the presenter view with view=talk), copied where allowed
COPY_LINK = """(query) => {
  const url = new URL(query || "?", window.location.href);
  if (document.documentElement.classList.contains("lw-talk")) url.searchParams.set("view", "talk");
  if (navigator.clipboard) navigator.clipboard.writeText(url.href).catch(() => {});  // not on plain http elsewhere
  return url.href;
}"""


@dataclass
class Stage:
    """The components of one tab's stage."""

    tab: str
    picker: gr.Radio
    plot: gr.Plot
    caption: gr.Markdown
    status: gr.Markdown
    link: gr.Textbox
    stop: gr.Button
    controls: dict = field(default_factory=dict)  # Param -> its input component
    events: list = field(default_factory=list)

    @property
    def outputs(self) -> list:
        return [self.picker, self.plot, self.caption, self.status, self.link, *self.controls.values()]


def _control(p: ex.Param, value, visible: bool):
    shown = {"label": p.label, "visible": visible, "elem_id": None}
    if p.kind == "multi":
        return gr.CheckboxGroup([str(c) for c in p.choices], value=p.format(value).split(","), **shown)
    if p.kind == "flag":
        return gr.Checkbox(bool(value), **shown)
    if p.kind == "number":
        return gr.Number(value, minimum=p.low, maximum=p.high, precision=0 if p.whole else None, **shown)
    if p.kind == "text":
        return gr.Textbox(p.format(value), max_lines=1, **shown)
    return gr.Dropdown([p.format(c) for c in p.choices], value=p.format(value), allow_custom_value=p.open, **shown)


def view_outputs(stage: Stage, v: ex.View, progress=None) -> list:
    """The stage's outputs for a view: picker, chart, caption, status, link, and every input control (the view's
    shown with its values, the others hidden)."""
    res = ex.show(v, progress)
    controls = [gr.update(value=_value(p, v.values[p.name]), visible=True) if p in v.example.params
                else gr.update(visible=False) for p in stage.controls]
    return [v.example.name, res.figures[v.example.figure], v.caption(res), v.status(res), v.query(), *controls]


def _value(p: ex.Param, value):
    if p.kind == "multi":
        return [str(c) for c in value]
    return value if p.kind in ("flag", "number") else p.format(value)


def _first(v: ex.View) -> tuple:
    """(figure, caption, status) the stage opens on; on a machine not set up yet (a model not prepared), a figure and
    a caption that say what to run, so the app still starts."""
    try:
        res = ex.show(v)
    except LayerwiseError as err:
        return message_figure(str(err), v.example.title), f"**{v.example.title}** · *not available yet*", str(err)
    return res.figures[v.example.figure], v.caption(res), v.status(res)


def build_stage(tab: str) -> Stage:
    """The stage of one tab, drawn with its first example; its events are wired here."""
    examples = ex.examples(tab)
    first = ex.default_view(tab)
    params = {}  # every input of the tab's examples, with its first default
    for e in examples:
        for p in e.params:
            params.setdefault(p, e.defaults[p.name])
    with gr.Column(elem_id=f"{tab}-stage", elem_classes="lw-stage"):
        picker = gr.Radio([(e.title, e.name) for e in examples], value=first.example.name, elem_id=f"{tab}-examples",
                          label="Examples: precomputed, drawn at once (← → in the presenter view)",
                          elem_classes="lw-picker")
        with gr.Accordion("Inputs of this view (other values are computed)", open=False, elem_classes="lw-inputs"):
            with gr.Row():
                mine = first.example.params
                controls = {p: _control(p, first.values[p.name] if p in mine else value, p in mine)
                            for p, value in params.items()}
        figure, shown, told = _first(first)
        plot = gr.Plot(figure, show_label=False, elem_id=f"{tab}-stage-plot", elem_classes="lw-stage-plot")
        caption = gr.Markdown(shown, elem_id=f"{tab}-stage-caption", elem_classes="lw-caption")
        status = gr.Markdown(told, elem_id=f"{tab}-stage-status", elem_classes="lw-explain")
        with gr.Row(elem_classes="lw-link-row"):
            link_btn = gr.Button("Link to this view", size="sm", scale=0, min_width=200, elem_id=f"{tab}-link-btn")
            link = gr.Textbox(first.query(), show_label=False, interactive=False, scale=4, container=False,
                              elem_id=f"{tab}-link", buttons=["copy"])
            stop_btn = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=90, elem_id=f"{tab}-stage-stop")
    stage = Stage(tab, picker, plot, caption, status, link, stop_btn, controls)

    @user_errors
    def pick(name):
        """Draw a precomputed example (never computes: the picker's views are all precomputed)."""
        return view_outputs(stage, ex.default_view(tab, _name(tab, name)))

    @user_errors
    def change(shown: dict, request: gr.Request = None, progress=gr.Progress()):
        """Draw the picked example with the inputs as set (computed, with progress and Stop, unless precomputed).
        ``shown``: component -> value (a set of inputs, so that Gradio hands this handler its request and progress)."""
        e = ex.example(tab, _name(tab, shown.get(picker)))
        v = ex.view(tab, e.name, {p.name: shown.get(c) for p, c in controls.items() if p in e.params})
        return view_outputs(stage, v, None if v.precomputed else job(request, progress))

    stage.events.append(picker.input(pick, picker, stage.outputs, api_name=f"{tab}_example", concurrency_limit=None,
                                     trigger_mode="always_last", show_progress="hidden"))
    for p, c in controls.items():
        trigger = c.submit if p.kind in ("number", "text") else c.input
        stage.events.append(trigger(change, {picker, *controls.values()}, stage.outputs,  # the tabs' own endpoints
                                    api_name=f"{tab}_example_{p.name}_{p.kind}", api_visibility="undocumented"))
    link_btn.click(None, link, link, js=COPY_LINK, api_name=f"{tab}_copy_link")
    return stage


def _name(tab: str, name) -> str:
    if not isinstance(name, str) or name not in [e.name for e in ex.examples(tab)]:
        raise BadInputError(f"{tab} has no example {name!r}.",
                            fix=f"pick one of {', '.join(e.name for e in ex.examples(tab))}.")
    return name
