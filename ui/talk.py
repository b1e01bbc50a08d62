"""The presenter view (``?view=talk``, or every page with ``python app.py --talk``): the projector theme at talk size,
the explanatory paragraphs folded away, each chart at full width (the stage's one fills the screen), the example
picker as large buttons, and the keyboard: left / right for the previous / next example of the open tab.

It is a class on the page (``html.lw-talk``) set before the page draws, so nothing moves once it is up; the keys, the
class and the chart toolbar's SVG button are one script in the page's head (:func:`head`).
"""
from __future__ import annotations

import json
from pathlib import Path

from core.figures import SLIDE  # a chart's export: 16:9; the PNG is 1920 x 1080 pixels

TALK_CSS = """
html.lw-talk {--text-xxs: 14px; --text-xs: 16px; --text-sm: 20px; --text-md: 22px; --text-lg: 24px;
  --text-xl: 30px; --text-xxl: 36px; --block-label-text-size: 20px; --block-info-text-size: 20px;
  --checkbox-label-text-size: 20px; --button-small-text-size: 20px; --button-large-text-size: 22px;
  --section-header-text-size: 22px; --input-text-size: 22px; --prose-text-size: 22px; --table-text-size: 20px;}
html.lw-talk body, html.lw-talk .prose, html.lw-talk .prose p, html.lw-talk .prose li {font-size: 22px;}
html.lw-talk .lw-header, html.lw-talk .lw-explain, html.lw-talk .lw-inputs {display: none !important;}
html.lw-talk .gradio-container {max-width: 100% !important; padding-top: 4px !important;}
html.lw-talk .lw-picker .wrap {flex-wrap: nowrap; overflow-x: auto; scrollbar-width: thin;}
html.lw-talk .lw-picker label {font-size: 22px !important; padding: 8px 18px !important; white-space: nowrap;
  flex: 0 0 auto;}
html.lw-talk .lw-picker input[type="radio"], html.lw-talk .lw-picker > [data-testid="block-info"] {display: none;}
html.lw-talk .lw-picker label.selected {background: #1d4ed8 !important; color: #fff !important;}
html.lw-talk .lw-stage-plot [data-testid="plotly"] {height: calc(100vh - 250px) !important; min-height: 360px;}
html.lw-talk .row:has(> div [data-testid="plotly"]), html.lw-talk .row:has(> div > div [data-testid="plotly"]) {
  flex-direction: column !important;}
html.lw-talk .row:has([data-testid="plotly"]) > div {min-width: 100% !important;}
html.lw-talk .block:has([data-testid="plotly"]) > label[data-testid="block-label"] {display: none;}
.lw-stage-plot [data-testid="plotly"] {height: 520px;}
.lw-picker label {cursor: pointer;}
"""

_SCRIPT = """
(() => {
  const params = new URLSearchParams(window.location.search);
  const view = params.get("view") || DEFAULT_VIEW;
  if (view === "talk") document.documentElement.classList.add("lw-talk");
  // A link opens on its tab and, when it names a precomputed view, with that view drawn: the page's config holds
  // every precomputed view (ui.links.publish) and is set here, before anything is drawn. Anything else (other
  // inputs, a bad link) the server's load event does.
  const cfg = window.gradio_config, key = (s) => String(s || "").toLowerCase().replace(/[^a-z0-9]/g, "");
  let linked = false;
  if (cfg && cfg.components) {
    const links = cfg.layerwise_links || {}, name = params.get("example");
    const items = cfg.components.filter((c) => c.type === "tabitem");
    const named = (c) => [c.props.id, c.props.label].some((n) => key(n) === key(params.get("tab")));
    let item = params.get("tab") ? items.find(named) : undefined;
    const owners = Object.keys(links).filter((t) => name && links[t].examples[name]);
    if (!params.get("tab") && owners.length === 1) item = items.find((c) => c.props.id === owners[0]);
    const tabs = cfg.components.find((c) => c.type === "tabs");
    if (item && tabs) tabs.props.selected = item.props.id;
    linked = !!item;
    // the rest of the linked tab waits until its stage is drawn (the load event of ui.links then shows it)
    const lab = item && cfg.components.find((c) => c.props.elem_id === "lab-" + item.props.id);
    if (lab) lab.props.visible = false;
    const stage = item && links[item.props.id], view = stage && stage.examples[name || stage.order[0]];
    const inputs = [...params.keys()].filter((k) => !["tab", "example", "view", "deep_link"].includes(k) &&
                                                     !k.startsWith("__"));
    if (view && inputs.every((k) => view.inputs[k] === params.get(k))) {
      const byId = new Map(cfg.components.map((c) => [c.id, c]));
      const drawn = cfg.components.find((c) => c.props.elem_id === "lw-drawn");
      if (drawn) drawn.props.value = item.props.id + "/" + (name || stage.order[0]);
      for (const p of view.props) {
        const c = byId.get(p.id);
        if (c && "value" in p) c.props.value = p.value;
        if (c && "visible" in p) c.props.visible = p.visible;
      }
    }
    delete cfg.layerwise_links;
  }
  const typing = (t) => t && (t.isContentEditable || t.tagName === "TEXTAREA" || t.tagName === "SELECT" ||
    (t.tagName === "INPUT" && !["radio", "checkbox", "button"].includes(t.type)));
  document.addEventListener("keydown", (ev) => {
    if (!document.documentElement.classList.contains("lw-talk")) return;
    if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.shiftKey || typing(ev.target)) return;
    const picker = [...document.querySelectorAll(".lw-picker")].find((el) => el.offsetParent !== null);
    if (!picker) return;
    const radios = [...picker.querySelectorAll('input[type="radio"]')];
    const i = radios.findIndex((r) => r.checked);
    const j = Math.min(radios.length - 1, Math.max(0, i + (ev.key === "ArrowRight" ? 1 : -1)));
    ev.preventDefault();
    ev.stopPropagation();
    if (j !== i && radios[j]) radios[j].click();
  }, true);
  // Every chart's toolbar exports it for a slide: the camera saves a PNG of 1920 x 1080 pixels (plotly's image button,
  // configured here), the button added beside it an SVG of the same size; both are named after the chart's title.
  const slug = (layout) => {
    const title = ((layout && layout.title && layout.title.text) || "").replace(/<[^>]+>/g, " ");
    return "layerwise-" + (title.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60)
                           || "chart");
  };
  const svg = {name: "svg", title: "Download plot as an SVG (slide size)",
    icon: {width: 1000, height: 1000,
           path: "M150 100h500l200 200v600H150z M200 150v700h600V330H620V150z M280 500h440v60H280z"},
    click: (gd) => window.Plotly.downloadImage(gd, {format: "svg", width: SLIDE.width, height: SLIDE.height,
                                                    filename: gd._context.toImageButtonOptions.filename})};
  // The stage's chart is drawn first and fills its box (the screen's height: CSS); the other charts of a tab
  // follow one per task, so that a tab full of charts (a deep link opens one) shows its stage without waiting.
  const later = new Map();
  const drawNext = () => {
    const [gd, draw] = later.entries().next().value || [];
    if (!gd) return;
    later.delete(gd);
    draw();
    if (later.size) setTimeout(drawNext, 0);
  };
  const patch = (plotly) => {
    if (!plotly || plotly.__layerwise) return plotly;
    const react = plotly.react, resize = plotly.Plots.resize;
    plotly.react = function (gd, data, layout, config) {
      const onStage = !!(gd.closest && gd.closest(".lw-stage"));
      config = Object.assign({}, config, {displaylogo: false, modeBarButtonsToAdd: [svg],
        toImageButtonOptions: Object.assign({format: "png", filename: slug(layout)}, SLIDE)});
      // a chart drawn for an ordinary box fills the stage; a tall one (several rows of panels) keeps its height at
      // least (its box grows, and the page scrolls: plotly's resize forgets a layout's height, so the box holds it)
      const box = onStage && gd.closest && gd.closest('[data-testid="plotly"]');
      if (box) box.style.removeProperty("height");
      if (onStage && layout && layout.height > 700) {
        if (box) box.style.setProperty("height", `max(calc(100vh - 250px), ${layout.height}px)`, "important");
      } else if (onStage && layout) layout = Object.assign({}, layout, {height: undefined});
      const draw = () => react.call(plotly, gd, data, layout, config);
      if (onStage) return draw();
      if (!later.size) requestAnimationFrame(() => setTimeout(drawNext, 0));
      later.set(gd, draw);
      return Promise.resolve(gd);
    };
    plotly.Plots.resize = function (gd) {
      return later.has(gd) ? Promise.resolve(gd) : resize.apply(this, arguments);
    };
    plotly.__layerwise = true;
    return plotly;
  };
  // Gradio's plotly bundle is fetched and run now, not when the first chart appears. A page opened by a link is
  // shown once it has run (at most 3 s later), so that it appears with its chart rather than an empty frame first.
  const loaded = PLOTLY_CHUNK ? import(new URL(PLOTLY_CHUNK, document.baseURI).href) : Promise.resolve();
  if (linked) {
    const root = document.documentElement, show = () => { root.style.visibility = ""; };
    root.style.visibility = "hidden";
    loaded.then(show, show);
    setTimeout(show, 3000);
  }
  // keep the chosen example in sight in a picker that scrolls sideways (a deep link may choose the tenth)
  let queued = false;
  const reveal = () => {
    queued = false;
    for (const label of document.querySelectorAll(".lw-picker label.selected")) {
      const row = label.parentElement;
      if (label.offsetParent === null || !row) continue;
      const a = label.getBoundingClientRect(), b = row.getBoundingClientRect();
      if (a.left < b.left || a.right > b.right) row.scrollLeft += (a.left + a.right - b.left - b.right) / 2;
    }
  };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(reveal); } })
    .observe(document.documentElement, {subtree: true, childList: true, attributes: true, attributeFilter: ["class"]});
  let current;
  Object.defineProperty(window, "Plotly", {configurable: true, get: () => current,
                                           set: (v) => { current = patch(v); }});
})();
"""


def plotly_chunk() -> str | None:
    """The path of Gradio's plotly bundle (``assets/PlotlyPlot-<hash>.js``), which the page starts loading at once
    rather than when the first chart appears (a deep link's chart then waits for nothing but its data)."""
    import gradio

    found = sorted((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    return f"assets/{found[0].name}" if len(found) == 1 else None


def head(talk: bool = False) -> str:
    """The page's head script: the presenter view (on when the link says ``view=talk``, or always with ``talk``,
    unless the link says ``view=lab``), its keys, the SVG export button, the stage's chart drawn first."""
    script = (_SCRIPT.replace("DEFAULT_VIEW", json.dumps("talk" if talk else "lab"))
              .replace("SLIDE", json.dumps(SLIDE)).replace("PLOTLY_CHUNK", json.dumps(plotly_chunk())))
    return f"<script>{script}</script>"


__all__ = ["TALK_CSS", "head"]
