"""The HTML of the static site (:mod:`core.site`): its style sheet, its script and the pages, from what the site
hands over (a view's Result and texts). Nothing here computes or words a result: the figures, tables, captions and
status lines are the app's own objects, serialised (figures by plotly's own ``to_json``) or rendered (Markdown).

Every page works from ``file://`` with no network: plotly.js is one shared file beside the pages (``<script src>``
works from disk, ``fetch`` would not), each figure's JSON sits in its page, and the presenter view's keys are links.
"""
from __future__ import annotations

import html
import json

from core.figures import SLIDE

CSS = """
:root {--ink: #0f172a; --muted: #475569; --line: #cbd5e1; --accent: #1d4ed8;}
body {font-family: ui-sans-serif, system-ui, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--ink);
  margin: 0 auto; max-width: 1200px; padding: 12px 20px 40px; font-size: 17px; line-height: 1.45;}
a {color: var(--accent);}
nav.lw-nav {display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: baseline; border-bottom: 1px solid var(--line);
  padding-bottom: 6px; margin-bottom: 10px;}
nav.lw-nav .lw-brand {font-weight: 700; font-size: 20px; text-decoration: none; color: var(--ink);}
nav.lw-nav a.here {font-weight: 700; text-decoration: none; color: var(--ink);}
.lw-picker {display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0 10px;}
.lw-picker a {border: 1px solid var(--line); border-radius: 4px; padding: 3px 10px; text-decoration: none;
  white-space: nowrap;}
.lw-picker a.selected {background: var(--accent); color: #fff; border-color: var(--accent);}
.lw-chart {width: 100%; height: 520px; margin: 8px 0 16px;}
.lw-caption {color: var(--muted); margin: 0 0 6px;}
.lw-link code {font-size: 14px; word-break: break-all;}
.lw-table {overflow: auto; max-height: 480px; border: 1px solid var(--line); margin: 6px 0 16px;}
.lw-table table {border-collapse: collapse; font-size: 14px;}
.lw-table th, .lw-table td {border-bottom: 1px solid #e2e8f0; padding: 3px 8px; text-align: left;
  vertical-align: top;}
.lw-table th {position: sticky; top: 0; background: #f1f5f9;}
.lw-note, footer {color: var(--muted); font-size: 14px;}
footer {border-top: 1px solid var(--line); margin-top: 30px; padding-top: 8px;}
ul.lw-examples li {margin: 2px 0;}
.lw-notice {background: #fef3c7; border: 1px solid #f59e0b; padding: 6px 10px; border-radius: 4px;}
html.lw-talk body {max-width: none; font-size: 22px; padding: 6px 16px;}
html.lw-talk .lw-picker {flex-wrap: nowrap; overflow-x: auto;}
html.lw-talk .lw-picker a {font-size: 22px; padding: 8px 18px;}
html.lw-talk .lw-chart {height: calc(100vh - 170px); min-height: 360px; margin: 0;}
html.lw-talk .lw-caption {font-size: 20px;}
html.lw-talk nav.lw-nav {font-size: 20px;}
"""

# The script every page shares: draw each chart from the JSON in the page (the config the app gives its charts:
# no plotly logo, the camera saves a slide-sized PNG named after the chart's title), and in the presenter view the
# arrow keys go to the previous / next example (links in the page: data-prev, data-next).
JS = """
(() => {
  const slug = (layout) => {
    const title = ((layout && layout.title && layout.title.text) || "").replace(/<[^>]+>/g, " ");
    return "layerwise-" + (title.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60)
                           || "chart");
  };
  const draw = () => {
    const talk = document.documentElement.classList.contains("lw-talk");
    for (const box of document.querySelectorAll(".lw-chart")) {
      const fig = JSON.parse(document.getElementById(box.dataset.figure).textContent);
      const layout = Object.assign({}, fig.layout || {});
      if (layout.height > 700) box.style.height = (talk ? `max(calc(100vh - 170px), ${layout.height}px)`
                                                        : `${layout.height}px`);
      else delete layout.height;  // the chart fills its box (as on the app's stage)
      const config = {responsive: true, displaylogo: false,
                      toImageButtonOptions: Object.assign({format: "png", filename: slug(layout)}, SLIDE)};
      window.Plotly.newPlot(box, fig.data || [], layout, config);
    }
  };
  const typing = (t) => t && (t.isContentEditable || ["TEXTAREA", "SELECT", "INPUT"].includes(t.tagName));
  document.addEventListener("keydown", (ev) => {
    if (!document.documentElement.classList.contains("lw-talk")) return;
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.shiftKey || typing(ev.target)) return;
    const step = {ArrowRight: "next", ArrowLeft: "prev"}[ev.key];
    const to = step && document.body.dataset[step];
    if (to) { ev.preventDefault(); window.location.href = to; }
  });
  const reveal = () => {  // the presenter view's picker scrolls sideways: keep the chosen example in sight
    const chosen = document.querySelector("html.lw-talk .lw-picker a.selected");
    if (chosen) chosen.scrollIntoView({inline: "center", block: "nearest"});
  };
  document.readyState === "loading" ? document.addEventListener("DOMContentLoaded", reveal) : reveal();
  if (window.Plotly) document.readyState === "loading" ? document.addEventListener("DOMContentLoaded", draw) : draw();
})();
""".replace("SLIDE", json.dumps(SLIDE))

# The index resolves an app link: index.html?tab=neuzip&example=tradeoff&view=talk opens that view's page (a tab
# by its id or title, an example alone finds its tab); inputs other than the precomputed ones need the app.
RESOLVE_JS = """
(() => {
  const params = new URLSearchParams(window.location.search);
  if (!params.get("tab") && !params.get("example")) return;
  const site = JSON.parse(document.getElementById("lw-site").textContent);
  const key = (s) => String(s || "").toLowerCase().replace(/[^a-z0-9]/g, "");
  const name = params.get("example"), wanted = params.get("tab");
  let tab = Object.keys(site).find((t) => wanted && [t, site[t].title].some((n) => key(n) === key(wanted)));
  if (!tab && name) {
    const owners = Object.keys(site).filter((t) => site[t].examples[name]);
    if (owners.length === 1) tab = owners[0];
  }
  const say = (text) => {
    const box = document.getElementById("lw-resolve");
    box.textContent = text;
    box.hidden = false;
  };
  if (!tab) return say("This link names no tab or example of this site; every view is listed below.");
  const view = site[tab].examples[name || site[tab].order[0]];
  if (!view) return say(`No example ${name} in ${site[tab].title}; its examples are listed below.`);
  const other = [...params.keys()].filter((k) => !["tab", "example", "view"].includes(k) &&
                                                  String(view.inputs[k]) !== params.get(k));
  const page = params.get("view") === "talk" ? view.talk : view.lab;
  if (other.length) {
    say(`This link asks for inputs that are not precomputed (${other.join(", ")}): they need the app. ` +
        "The precomputed view opens in 4 s.");
    setTimeout(() => window.location.replace(page), 4000);
  } else window.location.replace(page);
})();
"""


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def markdown(text: str) -> str:
    """Markdown (the app's status and caption texts) as HTML; raw HTML in the text is escaped, not passed."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text or "")


def figure_json(fig) -> str:
    """A figure's JSON as plotly writes it (the house template applied: :mod:`core.figures`), safe in a script."""
    return fig.to_json().replace("</", "<\\/")


def chart(fig, ident: str) -> str:
    return (f'<div class="lw-chart" data-figure="{ident}"></div>\n'
            f'<script type="application/json" id="{ident}">{figure_json(fig)}</script>')


def table(name: str, rows: list[dict], download: str | None, limit: int = 300) -> str:
    """A table of rows (every column of every row, in order), at most ``limit`` rows shown."""
    cols = list(dict.fromkeys(k for row in rows for k in row))
    cell = lambda v: "" if v is None else esc(json.dumps(v) if isinstance(v, (list, dict)) else v)  # noqa: E731
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows[:limit])
    more = f" (the first {limit} of {len(rows):,} rows{'; all of them: ' + link(download, 'CSV') if download else ''})"
    note = more if len(rows) > limit else ""
    return (f'<h3>{esc(name)}</h3><p class="lw-note">{len(rows):,} rows{note}</p>'
            f'<div class="lw-table"><table><thead><tr>{"".join(f"<th>{esc(c)}</th>" for c in cols)}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def link(href: str, text: str, here: bool = False) -> str:
    mark = ' class="here"' if here else ""
    return f'<a href="{esc(href)}"{mark}>{esc(text)}</a>'


def page(title: str, body: str, root: str, *, talk: bool = False, charts: bool = False, prev: str | None = None,
         nxt: str | None = None, extra_head: str = "") -> str:
    """A whole page. ``root``: the relative path to the site's root (``""``, ``"../"``, ``"../../"``)."""
    data = "".join(f' data-{k}="{esc(v)}"' for k, v in (("prev", prev), ("next", nxt)) if v)
    scripts = (f'<script src="{root}plotly.min.js"></script>' if charts else "") + \
        f'<script src="{root}site.js" defer></script>'
    mode = ' class="lw-talk"' if talk else ""
    return (f'<!DOCTYPE html>\n<html lang="en"{mode}><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
            f'<link rel="stylesheet" href="{root}site.css">{extra_head}{scripts}</head>\n<body{data}>\n{body}\n'
            f"</body></html>\n")


def nav(root: str, tabs: dict[str, str], here: str | None, first: dict[str, str]) -> str:
    """The bar at the top: the index, each tab (its first example's page), the models, data and licences page."""
    items = [f'<a class="lw-brand" href="{root}index.html">Layerwise</a>']
    items += [link(f"{root}{first[t]}", title, here == t) for t, title in tabs.items() if t in first]
    items.append(link(f"{root}models-data.html", "Models, data and licences", here == "models-data"))
    return f'<nav class="lw-nav">{" ".join(items)}</nav>'


def footer(root: str) -> str:
    return (f'<footer>Layerwise, static site: every view is the app\'s precomputed result, drawn here without a '
            f'server. Code under the Apache License 2.0 ({link(root + "LICENSE", "LICENSE")}); the models, datasets '
            f'and methods keep their own terms, and LRP is described by its authors as patented, free only for '
            f'personal and scientific use: {link(root + "models-data.html", "models, data and licences")}, '
            f'{link(root + "NOTICE.md", "NOTICE.md")}.</footer>')


__all__ = ["CSS", "JS", "RESOLVE_JS", "esc", "markdown", "chart", "table", "link", "page", "nav", "footer",
           "figure_json"]
