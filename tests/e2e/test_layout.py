"""Charts read at talk size: in the presenter view at 1280 x 720 and 1920 x 1080, no text of a stage chart covers
another (the title and subtitle, axis titles, tick labels, the legend, annotations, point labels, colour-bar
titles and ticks), measured on the SVG plotly draws (bounding boxes of the text elements). The house layout that
makes it so is core.figures.fit; its estimates are unit-tested in tests/core/test_figures.py."""
import json
import re

import pytest

import core.examples as ex
from tests import conftest
from tests.e2e.test_browser import CHROMIUM, FLAGS, WAIT_MS, need_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = ({"width": 1280, "height": 720}, {"width": 1920, "height": 1080})

# Every text box of the chart in #<tab>-stage-plot, and each pair that overlaps by more than a pixel both ways
# (tick labels among themselves are plotly's own business: it thins them).
OVERLAPS = """(sel) => {
  const root = document.querySelector(sel);
  const items = [];
  const add = (kind, el, text) => {
    const r = el.getBoundingClientRect();
    if (r.width >= 1 && r.height >= 1)
      items.push({kind, text: (text ?? el.textContent).trim().slice(0, 50), x0: r.left, y0: r.top, x1: r.right,
                  y1: r.bottom});
  };
  root.querySelectorAll('.gtitle, .gtitle-subtitle').forEach(e => add('title', e));
  root.querySelectorAll('[class^="g-x"][class$="title"] text').forEach(e => add('x title', e));
  root.querySelectorAll('[class^="g-y"][class$="title"] text').forEach(e => add('y title', e));
  root.querySelectorAll('.legend').forEach(e => add('legend', e.querySelector('.bg') || e, 'legend'));
  root.querySelectorAll('.annotation').forEach(e => add('annotation', e.querySelector('.annotation-text-g') || e));
  root.querySelectorAll('.textpoint text').forEach(e => add('point label', e));
  root.querySelectorAll('.xtick text, .ytick text').forEach(e => add('tick', e));
  root.querySelectorAll('.colorbar .cbtitle text').forEach(e => add('colour-bar title', e));
  root.querySelectorAll('.colorbar .cbaxis text').forEach(e => add('colour-bar tick', e));
  const hits = [];
  for (let i = 0; i < items.length; i++) for (let j = i + 1; j < items.length; j++) {
    const a = items[i], b = items[j];
    if (a.kind === b.kind && (a.kind === 'tick' || a.kind === 'colour-bar tick')) continue;
    const w = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0), h = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0);
    if (w > 1 && h > 1) hits.push(`${a.kind} "${a.text}" covers ${b.kind} "${b.text}" (${w.toFixed(0)} x ${h.toFixed(0)} px)`);
  }
  return {texts: items.length, hits};
}"""


def _title(tab: str, name: str) -> str:
    """The start of the chart's title as the SVG holds it (tags dropped)."""
    fig = ex.show(ex.default_view(tab, name)).figures[ex.example(tab, name).figure]
    return re.sub(r"<[^>]+>", " ", fig.layout.title.text).split("  ")[0][:30]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s['width']}x{s['height']}")
def test_no_text_of_a_stage_chart_covers_another_at_talk_size(app_url, size):
    need_chromium()
    from playwright.sync_api import sync_playwright

    problems, measured = [], 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport=size)
        page.set_default_timeout(WAIT_MS)
        for tab, examples in ex.registry().items():
            page.goto(f"{app_url}?tab={tab}&example={examples[0].name}&view=talk")
            plot = f"#{tab}-stage-plot"
            for e in examples:
                if e is not examples[0]:
                    page.locator(f"#{tab}-examples label").filter(has_text=e.title).first.click()
                    page.wait_for_function("([tab, name]) => document.querySelector(`#${tab}-examples "
                                           "input:checked`)?.value === name", arg=[tab, e.name])
                want = _title(tab, e.name)
                page.wait_for_function("([sel, text]) => { const t = document.querySelector(sel + ' .gtitle'); "
                                       "return t && t.textContent.includes(text); }", arg=[plot, want])
                page.wait_for_timeout(500)  # the chart drawn, plotly's own layout passes (automargin) settled
                found = page.evaluate(OVERLAPS, plot)
                measured += 1
                assert found["texts"] > 3, (tab, e.name)
                if found["hits"]:
                    problems += [f"{size['width']}x{size['height']} {tab}/{e.name}: {h}" for h in found["hits"]]
                    page.screenshot(path=str(conftest.ARTIFACTS / f"overlap-{size['width']}-{tab}-{e.name}.png"))
        browser.close()
    assert measured == sum(len(v) for v in ex.registry().values())
    assert not problems, json.dumps(problems, indent=1, ensure_ascii=False)
