"""The static site: every precomputed view of every tab as plain files that open from disk with no network and
deploy unchanged on any static host, e.g. a free Static Space (docs/space.md).

    python -m core site --out public/                 # every example of every tab
    python -m core site --out public/ --only lrp,mixln/compare

What it writes into ``--out`` (a new folder, a new Static Space's clone, or one a previous build wrote: it keeps
anything else there, e.g. the clone's ``.git``):

- ``index.html``: every tab's examples, each with its lab page and its presenter page; it also opens an app link
  (``index.html?tab=neuzip&example=tradeoff&view=talk`` goes to that view's page);
- ``<tab>/<example>.html``: a view as the app shows it (the stage's chart, then the result's other charts, its
  caption and status, its tables and its downloads), interactive: plotly.js, one copy beside the pages
  (``plotly.min.js``, from the installed plotly package);
- ``talk/<tab>/<example>.html``: the presenter view: the chart at projector size, the tab's examples as large
  buttons, the arrow keys for the previous / next example;
- ``files/<result key>/``: the downloads of each result, named as the app names them (an HTML figure there loads
  the shared plotly.js instead of inlining its own copy);
- ``models-data.html``, ``LICENSE``, ``NOTICE.md``: the licences (:mod:`core.notices`); ``README.md``: the Static
  Space front matter; ``site.json``: what was written, for the next build and the tests.

Everything comes from the one registry of views (:func:`core.examples.registry`), shown by :func:`core.examples.show`,
the function the app's stage calls: a view added to a paper appears here with no change, with the app's numbers.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import core.examples as ex
from core import site_html as h
from core.errors import BadInputError, LayerwiseError
from core.files import atomic_write
from core.runner import digest

FORMAT = "layerwise-site/1"
SPACE_FILES = {".git", ".gitattributes", "README.md", "index.html", "style.css"}  # a new Static Space's clone
MANIFEST = "site.json"
SPACE_README = """---
title: Layerwise (static)
emoji: 🔬
colorFrom: blue
colorTo: indigo
sdk: static
app_file: index.html
license: apache-2.0
pinned: false
---

# Layerwise, every precomputed view

The static site of Layerwise: the precomputed views of its tabs, with their charts,
tables and downloads, written by `python -m core site --out DIR`. Open `index.html`. Licences: `LICENSE`,
`NOTICE.md`.
"""


def paper_titles() -> dict[str, str]:
    """Each tab with examples by its paper's title (:func:`core.papers.titles`)."""
    from core import papers

    titles = papers.titles()
    return {tab: titles.get(tab, tab) for tab in ex.PAPERS}


def selection(only: str | None) -> dict[str, list[str]]:
    """``{tab: [example, ...]}`` of ``--only`` (``tab`` or ``tab/example``, comma-separated; None: everything),
    in the registry's order; one clear message for a name it does not know."""
    everything = {tab: [e.name for e in ex.examples(tab)] for tab in ex.PAPERS}
    if not only:
        return everything
    chosen: dict[str, set] = {}
    for part in (p.strip() for p in only.split(",") if p.strip()):
        tab, _, name = part.partition("/")
        if tab not in everything:
            raise BadInputError(f"--only {part}: no tab {tab!r}.", fix=f"use one of {', '.join(everything)}.")
        if name and name not in everything[tab]:
            raise BadInputError(f"--only {part}: no example {name!r} in {tab}.",
                                fix=f"use one of {', '.join(everything[tab])}.")
        chosen.setdefault(tab, set()).update([name] if name else everything[tab])
    if not chosen:
        raise BadInputError("--only names nothing.", fix="give TAB or TAB/EXAMPLE, e.g. --only lrp,mixln/compare")
    return {tab: [n for n in names if n in chosen[tab]] for tab, names in everything.items() if tab in chosen}


@dataclass
class SiteView:
    """One view as the site shows it."""

    tab: str
    view: ex.View
    result: object  # core.results.Result
    files: list[str] = field(default_factory=list)  # the downloads, relative to the site's root

    @property
    def lab(self) -> str:
        return f"{self.tab}/{self.view.example.name}.html"

    @property
    def talk(self) -> str:
        return f"talk/{self.tab}/{self.view.example.name}.html"


def _check_out(out: Path) -> dict | None:
    """The manifest of a previous build in ``out`` (None for a new or empty folder); refuses a folder of other
    files, so that a build never mixes with, or deletes, what it did not write."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise BadInputError(f"--out {out} is a file.", fix="give a folder.")
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        if manifest.get("format") == FORMAT:
            return manifest
    except (OSError, ValueError):
        pass
    if any(p.name not in SPACE_FILES for p in out.iterdir()):
        raise BadInputError(f"--out {out} holds files that no site build wrote.",
                            fix="give a new or empty folder, or a new Static Space's clone.")
    return None


def _downloads(out: Path, res, written: set) -> list[str]:
    """The result's downloads under ``files/<key>/`` (once per key: two views of one result share them)."""
    key = res.key or f"{res.stem}-{digest(res.data)}"
    folder = out / "files" / key
    plan = list(res.file_plan(res.downloads))
    if not plan:
        return []
    if f"files/{key}" not in written:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        res.write_files(folder, plotly_js="../../plotly.min.js")
        written.add(f"files/{key}")
    return [f"files/{key}/{name}" for name in plan]


def _picker(items: list[SiteView], here: SiteView) -> str:
    """The tab's examples as a row of links (the current one marked), like the app's picker."""
    mark = {id(here): ' class="selected"'}
    return "".join(f'<a href="{h.esc(i.view.example.name)}.html"{mark.get(id(i), "")}>'
                   f"{h.esc(i.view.example.title)}</a>" for i in items)


def _lab_page(s: SiteView, items: list[SiteView], titles: dict, first: dict) -> str:
    res, v, root = s.result, s.view, "../"
    names = [v.example.figure] + [n for n in res.figures if n != v.example.figure]
    charts = "\n".join(h.chart(res.figures[n], f"figure-{i}") for i, n in enumerate(names))
    wide = [f for f in s.files if f.endswith(".csv") and not f.endswith("-long.csv")]  # the tables' CSVs, in order
    csv = dict(zip(res.tables, wide))
    tables = "".join(h.table(name, rows, root + csv[name] if name in csv else None)
                     for name, rows in res.tables.items())
    views = ""
    for name, value in res.views.items():  # what the app's lab shows beside the charts: summary tables, HTML
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            views += h.table(name, value, None)
        elif isinstance(value, str) and value.lstrip().startswith("<"):
            views += f'<div class="lw-view">{value}</div>'
    downloads = "".join(f"<li>{h.link(root + f, f.rsplit('/', 1)[-1])}</li>" for f in s.files)
    body = f"""{h.nav(root, titles, s.tab, first)}
<div class="lw-picker">{_picker(items, s)}</div>
<div class="lw-caption">{h.markdown(v.caption(res))}</div>
{charts}
<p class="lw-link">In the app: <code>{h.esc(v.query())}</code> · {h.link("../" + s.talk, "presenter view")}</p>
<div class="lw-status">{h.markdown(v.status(res))}</div>
{views}{tables}
<h3>Downloads</h3><ul>{downloads or "<li>none</li>"}</ul>
{h.footer(root)}"""
    return h.page(f"{v.example.title} · {titles[s.tab]} · Layerwise", body, root, charts=True)


def _talk_page(s: SiteView, items: list[SiteView], titles: dict) -> str:
    res, v, root = s.result, s.view, "../../"
    i = items.index(s)
    prev, nxt = items[i - 1] if i else None, items[i + 1] if i + 1 < len(items) else None
    body = f"""<nav class="lw-nav"><a class="lw-brand" href="{root}index.html">Layerwise</a> {h.esc(titles[s.tab])}
 · {h.link(root + s.lab, "lab page")} · <span class="lw-note">← → examples, F11 full screen</span></nav>
<div class="lw-picker">{_picker(items, s)}</div>
{h.chart(res.figures[v.example.figure], "figure-0")}
<div class="lw-caption">{h.markdown(v.caption(res))}</div>"""
    return h.page(f"{v.example.title} · {titles[s.tab]} · Layerwise", body, root, talk=True, charts=True,
                  prev=f"{prev.view.example.name}.html" if prev else None,
                  nxt=f"{nxt.view.example.name}.html" if nxt else None)


def _index(shown: dict[str, list[SiteView]], titles: dict, first: dict, skipped: list[str]) -> str:
    site = {tab: {"title": titles[tab], "order": [s.view.example.name for s in items],
                  "examples": {s.view.example.name: {"inputs": {p.name: p.format(s.view.values[p.name])
                                                                 for p in s.view.example.params},
                                                     "lab": s.lab, "talk": s.talk} for s in items}}
            for tab, items in shown.items()}
    sections = ""
    for tab, items in shown.items():
        rows = "".join(f"<li>{h.link(s.lab, s.view.example.title)} · {h.link(s.talk, 'presenter view')} · "
                       f"<code>{h.esc(s.view.query())}</code></li>" for s in items)
        sections += f"<h2>{h.esc(titles[tab])}</h2><ul class=\"lw-examples\">{rows}</ul>"
    gone = (f'<p class="lw-notice">Not built (the app could not show them on this machine): '
            f'{h.esc("; ".join(skipped))}</p>') if skipped else ""
    data = json.dumps(site).replace("</", "<\\/")
    body = f"""{h.nav("", titles, None, first)}
<p id="lw-resolve" class="lw-notice" hidden></p>
<h1>Layerwise: every precomputed view</h1>
<p>Each view below is the app's precomputed result with the app's charts, tables and downloads, drawn in the
browser with no server and no network. Its lab page shows everything the result holds; its presenter view
shows the chart at projector size (← → for the previous / next example). An app link opens here too:
<code>index.html?tab=neuzip&amp;example=tradeoff&amp;view=talk</code>. Other inputs than the precomputed ones
are computed by the app itself (<code>python app.py</code>).</p>
{gone}{sections}
<script type="application/json" id="lw-site">{data}</script>
<script>{h.RESOLVE_JS}</script>
{h.footer("")}"""
    return h.page("Layerwise: every precomputed view", body, "")


def _models_page(titles: dict, first: dict) -> str:
    from core.notices import METHOD_TERMS, dataset_rows, model_rows

    terms = "".join(f"<li><b>{h.esc(m)}</b>: {h.esc(what)} <span class=\"lw-note\">Source: {h.esc(src)}.</span></li>"
                    for m, what, src in METHOD_TERMS)
    body = f"""{h.nav("", titles, "models-data", first)}
<h1>Models, data and licences</h1>
<p>Layerwise's own code, documentation, weights and results are under the {h.link("LICENSE", "Apache License 2.0")}.
The models, datasets and methods keep their own terms ({h.link("NOTICE.md", "NOTICE.md")} says the same).</p>
<h2>Methods</h2><ul>{terms}</ul>
{h.table("Models", model_rows(), None)}{h.table("Datasets", dataset_rows(), None)}
{h.footer("")}"""
    return h.page("Models, data and licences · Layerwise", body, "")


def build(out, only: str | None = None, log=None) -> dict:
    """Write the static site into ``out`` (see the module doc); returns what it wrote: ``{"out", "views",
    "pages", "files", "bytes", "seconds", "skipped"}``. ``log(message)`` hears of each view."""
    from core.notices import NOTICE_PATH, notice_markdown

    t0 = time.perf_counter()
    out = Path(out)
    chosen = selection(only)
    previous = _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    titles = paper_titles()
    written: set[str] = set()
    shown: dict[str, list[SiteView]] = {}
    skipped: list[str] = []
    for tab, names in chosen.items():
        for name in names:
            v = ex.default_view(tab, name)
            try:
                res = ex.show(v)
            except LayerwiseError as err:  # e.g. a model not prepared: the app shows a message there too
                skipped.append(f"{tab}/{name}: {err}")
                continue
            s = SiteView(tab, v, res)
            s.files = _downloads(out, res, written)
            shown.setdefault(tab, []).append(s)
            if log is not None:
                log(f"{tab}/{name}")
    if not shown:
        raise BadInputError("no view could be shown, so nothing was built.", fix="run python -m core models prepare")
    first = {tab: items[0].lab for tab, items in shown.items()}
    pages = {}
    for tab, items in shown.items():
        for s in items:
            pages[s.lab] = _lab_page(s, items, titles, first)
            pages[s.talk] = _talk_page(s, items, titles)
    pages["index.html"] = _index(shown, titles, first, skipped)
    pages["models-data.html"] = _models_page(titles, first)
    pages["site.css"], pages["site.js"] = h.CSS, h.JS
    pages["README.md"], pages["NOTICE.md"] = SPACE_README, notice_markdown()
    pages["LICENSE"] = (NOTICE_PATH.parent / "LICENSE").read_text()
    for rel, text in pages.items():
        atomic_write(out / rel, text)
    shutil.copyfile(_plotly_js(), out / "plotly.min.js")
    written |= set(pages) | {"plotly.min.js"}
    _forget(out, previous, written)
    views = {f"{s.tab}/{s.view.example.name}": {"lab": s.lab, "talk": s.talk, "query": s.view.query(),
                                                 "figures": [s.view.example.figure] +
                                                 [n for n in s.result.figures if n != s.view.example.figure],
                                                 "files": s.files}
             for items in shown.values() for s in items}
    atomic_write(out / MANIFEST, json.dumps({"format": FORMAT, "views": views, "written": sorted(written)},
                                            indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and ".git" not in p.relative_to(out).parts)
    return {"out": str(out), "views": len(views), "pages": sum(r.endswith(".html") for r in pages),
            "files": sum(len(s.files) for items in shown.values() for s in items), "bytes": size,
            "seconds": round(time.perf_counter() - t0, 1), "skipped": skipped}


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _forget(out: Path, previous: dict | None, written: set) -> None:
    """Remove what the previous build wrote and this one did not (a view since renamed or removed)."""
    for rel in (previous or {}).get("written", []):
        if rel in written or ".." in Path(rel).parts:
            continue
        path = out / rel
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink()
    for folder in sorted((p for p in out.rglob("*") if p.is_dir() and ".git" not in p.relative_to(out).parts),
                         reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()


__all__ = ["build", "selection", "paper_titles", "FORMAT", "MANIFEST"]
