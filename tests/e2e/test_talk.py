"""A talk, in headless Chromium: a deep link per tab draws its chart within a second of the page being ready, a click
on an example within a second, the presenter view at 1280 x 720 follows the keyboard, a bad link is one line of
notice, the link of a view opens that view, every chart exports PNG and SVG at slide size, a link that asks for a
computation shows its progress and stops. Screenshots and the measured times go to the artifacts folder."""
import importlib
import json
import os
import re
import struct
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

import core.examples as ex
from tests import conftest
from tests.e2e.test_browser import CHROMIUM, FLAGS, need_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WAIT_MS = 90_000
INSTANT_MS = 1000  # the bound: from a click (or the page being ready) to the chart drawn
TALK = {"width": 1280, "height": 720}
# per tab: the example a deep link opens (not the tab's first, so the link and not the page drew it), then one to click
DEEP = {"lrp": ("digit-3", "conservation"), "mathneuro": ("drill", "consistency"), "mixln": ("lr-sweep", "angular"),
        "neuzip": ("tradeoff", "throughput")}

# Timestamps taken in the page (performance.now): "ready" when the tab bar Gradio draws is visible, and for each
# chart selector in __lw.want the moment its plotly title shows the wanted text.
INIT = """
window.__lw = {ready: null, drawn: {}, want: {}};
new MutationObserver(() => {
  const s = window.__lw, now = performance.now(), tab = document.querySelector('[role="tab"]');
  if (s.ready === null && tab && getComputedStyle(tab).visibility === 'visible') s.ready = now;
  for (const [sel, text] of Object.entries(s.want)) {
    if (s.drawn[sel]) continue;
    const t = document.querySelector(sel + ' .gtitle');
    if (t && t.textContent.includes(text)) s.drawn[sel] = now;
  }
}).observe(document, {subtree: true, childList: true, characterData: true, attributes: true,
                      attributeFilter: ['style', 'class']});
"""


def title(tab: str, name: str, values=None) -> str:
    """The start of the chart title of a view, as plotly shows it (tags dropped)."""
    v = ex.view(tab, name, values)
    text = ex.show(v).figures[v.example.figure].layout.title.text
    return re.sub(r"<[^>]+>", " ", text).split("  ")[0][:40]


def record(name: str, **values) -> None:
    """Keep a measurement in the artifacts folder (talk-timings.json), with the machine's load."""
    path = conftest.ARTIFACTS / "talk-timings.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = {**values, "load_1min": round(os.getloadavg()[0], 2)}
    path.write_text(json.dumps(data, indent=1))


@pytest.fixture(scope="module")
def browser(app_url):
    need_chromium()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        ctx = b.new_context(viewport=TALK, accept_downloads=True)
        warm = ctx.new_page()  # a speaker has opened the app once before the talk: the browser has its files
        warm.goto(app_url)
        warm.get_by_role("tab").first.wait_for(timeout=WAIT_MS)
        warm.close()
        yield ctx
        b.close()


def open_page(browser, url: str, want: dict | None = None):
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    page.add_init_script(INIT + "".join(f"window.__lw.want[{json.dumps(k)}] = {json.dumps(v)};"
                                        for k, v in (want or {}).items()))
    page.goto(url)
    return page


def drawn(page, selector: str) -> float:
    page.wait_for_function(f"() => window.__lw.drawn[{json.dumps(selector)}]", timeout=WAIT_MS)
    return page.evaluate(f"() => window.__lw.drawn[{json.dumps(selector)}]")


def click_and_time(page, selector: str, text: str, target) -> float:
    """Milliseconds from a click on ``target`` to the chart at ``selector`` showing ``text``."""
    page.evaluate(f"() => {{ delete window.__lw.drawn[{json.dumps(selector)}]; "
                  f"window.__lw.want[{json.dumps(selector)}] = {json.dumps(text)}; }}")
    t0 = page.evaluate("(el) => { const t = performance.now(); el.click(); return t; }", target.element_handle())
    return drawn(page, selector) - t0


def picked(page, tab: str) -> str:
    return page.evaluate(f"() => document.querySelector('#{tab}-examples input:checked').value")


@pytest.mark.parametrize("tab", list(DEEP))
def test_a_deep_link_and_a_click_draw_their_chart_within_a_second(browser, app_url, tab):
    from playwright.sync_api import expect

    name, other = DEEP[tab]
    plot = f"#{tab}-stage-plot"
    page = open_page(browser, f"{app_url}?tab={tab}&example={name}", {plot: title(tab, name)})
    at = drawn(page, plot)
    ready = page.evaluate("() => window.__lw.ready")
    expect(page.get_by_role("tab", selected=True)).to_have_text(importlib.import_module(f"ui.{tab}").TITLE)
    assert picked(page, tab) == name
    expect(page.locator("#lw-notice")).to_be_hidden()
    other_title = ex.example(tab, other).title
    click_ms = click_and_time(page, plot, title(tab, other),
                              page.locator(f"#{tab}-examples label", has_text=other_title).first)
    assert picked(page, tab) == other
    record(f"{tab}", deep_link=name, page_ready_ms=round(ready), ready_to_chart_ms=round(at - ready),
           navigation_to_chart_ms=round(at), click=other, click_to_chart_ms=round(click_ms))
    page.screenshot(path=str(conftest.ARTIFACTS / f"deep-link-{tab}.png"))
    page.close()
    assert at - ready < INSTANT_MS, f"{tab}: the linked chart came {at - ready:.0f} ms after the page was ready"
    assert click_ms < INSTANT_MS, f"{tab}: the clicked chart came {click_ms:.0f} ms after the click"


def visible_text_sizes(page) -> list:
    """(font size in px, text) of every visible piece of page text inside the window, charts aside."""
    return page.evaluate("""() => {
      const out = [], walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const el = n.parentElement, text = n.textContent.trim();
        if (!text || !el || el.closest('svg, script, style, .js-plotly-plot, [data-testid="status-tracker"]')) continue;
        const r = el.getBoundingClientRect(), s = getComputedStyle(el);
        if (!r.width || !r.height || r.bottom < 0 || r.top > innerHeight || s.visibility === 'hidden'
            || el.closest('[hidden]') || el.offsetParent === null) continue;
        out.push([parseFloat(s.fontSize), text.slice(0, 40)]);
      }
      return out;
    }""")


def test_the_presenter_view_follows_the_keyboard(browser, app_url):
    tab = "mathneuro"
    names = [e.name for e in ex.examples(tab)]
    plot = f"#{tab}-stage-plot"
    page = open_page(browser, f"{app_url}?tab={tab}&view=talk", {plot: title(tab, names[0])})
    drawn(page, plot)
    assert page.evaluate("() => document.documentElement.classList.contains('lw-talk')")
    sizes = visible_text_sizes(page)
    assert sizes and min(s for s, _ in sizes) >= 20, sorted(sizes)[:5]  # talk size at 1280 x 720
    for hidden in (".lw-explain", ".lw-header", ".lw-inputs"):
        assert page.evaluate(f"() => [...document.querySelectorAll('{hidden}')].every(e => !e.offsetParent)"), hidden
    box = page.locator(plot).bounding_box()
    assert box["width"] >= 0.95 * (TALK["width"] - 64) and box["y"] + box["height"] <= TALK["height"]
    page.screenshot(path=str(conftest.ARTIFACTS / f"talk-{tab}-{names[0]}.png"))
    page.locator("body").click(position={"x": 5, "y": 5})  # the keys go to the page, not to a control
    for name in names[1:]:  # right to the end
        page.evaluate(f"() => {{ delete window.__lw.drawn[{json.dumps(plot)}]; "
                      f"window.__lw.want[{json.dumps(plot)}] = {json.dumps(title(tab, name))}; }}")
        t0 = time.perf_counter()
        page.keyboard.press("ArrowRight")
        drawn(page, plot)
        assert picked(page, tab) == name
        record(f"talk-key-{name}", key_to_chart_ms=round(1000 * (time.perf_counter() - t0)))
        page.screenshot(path=str(conftest.ARTIFACTS / f"talk-{tab}-{name}.png"))
    page.keyboard.press("ArrowRight")  # once more at the end: it stays (nothing to draw, nothing picked)
    page.wait_for_timeout(500)
    assert picked(page, tab) == names[-1]
    page.evaluate(f"() => {{ delete window.__lw.drawn[{json.dumps(plot)}]; "
                  f"window.__lw.want[{json.dumps(plot)}] = {json.dumps(title(tab, names[-2]))}; }}")
    page.keyboard.press("ArrowLeft")
    drawn(page, plot)
    assert picked(page, tab) == names[-2]
    page.close()


@pytest.mark.parametrize("tab", list(DEEP))
def test_the_presenter_view_of_each_tab_fits_the_screen(browser, app_url, tab):
    name = DEEP[tab][0]
    plot = f"#{tab}-stage-plot"
    page = open_page(browser, f"{app_url}?tab={tab}&example={name}&view=talk", {plot: title(tab, name)})
    drawn(page, plot)
    page.wait_for_timeout(300)  # the picker scrolls its chosen example into sight
    assert page.evaluate("() => document.documentElement.scrollWidth") <= TALK["width"]
    chosen = page.locator(f"#{tab}-examples label.selected").bounding_box()
    assert 0 <= chosen["x"] and chosen["x"] + chosen["width"] <= TALK["width"]
    page.screenshot(path=str(conftest.ARTIFACTS / f"talk-{tab}.png"))
    page.close()


def test_a_bad_link_opens_the_tab_with_one_line_of_notice(browser, app_url):
    from playwright.sync_api import expect

    plot = "#neuzip-stage-plot"
    page = open_page(browser, f"{app_url}?tab=neuzip&example=nope&k=9&colour=red", {plot: title("neuzip", "bits")})
    drawn(page, plot)
    notice = page.locator("#lw-notice")
    expect(notice).to_be_visible()
    text = notice.inner_text().strip()
    for words in ("no example 'nope' in NeuZip", "k=9 is not one of 7, 3, 1, 0; showing k=7",
                  "bits has no input 'colour'"):
        assert words in text, text
    assert "\n" not in text and picked(page, "neuzip") == "bits"
    assert page.locator(".toast-body").count() == 0  # no error popped up
    page.close()


def test_the_link_to_a_view_opens_that_view(browser, app_url):
    plot = "#mixln-stage-plot"
    values = {"run": "deepnorm"}
    want = title("mixln", "angular", values)
    page = open_page(browser, f"{app_url}?tab=mixln&example=angular&run=deepnorm", {plot: want})
    drawn(page, plot)  # not the precomputed view: drawn by the link's second step
    browser.grant_permissions(["clipboard-read", "clipboard-write"], origin=app_url.rstrip("/"))
    page.locator("#mixln-link-btn").click()
    page.wait_for_function("() => document.querySelector('#mixln-link input, #mixln-link textarea').value"
                           ".startsWith('http')")
    link = page.evaluate("() => document.querySelector('#mixln-link input, #mixln-link textarea').value")
    assert page.evaluate("() => navigator.clipboard.readText()") == link
    assert dict(parse_qsl(urlsplit(link).query)) == {"tab": "mixln", "example": "angular", "run": "deepnorm"}
    page.close()
    again = open_page(browser, link, {plot: want})
    drawn(again, plot)
    assert picked(again, "mixln") == "angular"
    again.close()


def _download(page, plot, label):
    with page.expect_download(timeout=WAIT_MS) as d:
        page.locator(f'{plot} .modebar-btn[data-title="{label}"]').click()
    return d.value.suggested_filename, open(d.value.path(), "rb").read()


def test_every_chart_exports_png_and_svg_at_slide_size(browser, app_url):
    plot = "#neuzip-stage-plot"
    want = title("neuzip", "tradeoff")
    page = open_page(browser, f"{app_url}?tab=neuzip&example=tradeoff", {plot: want})
    drawn(page, plot)
    page.wait_for_function("() => { const g = [...document.querySelectorAll('.js-plotly-plot')]"  # the tab's charts
                           ".filter(g => g.offsetParent); return g.length >= 5 && g.every(g => g._fullLayout); }")
    options = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent)"
                            ".map(g => g._context.toImageButtonOptions)")
    assert len(options) >= 5
    assert all((o["format"], o["width"], o["height"], o["scale"]) == ("png", 960, 540, 2) for o in options), options
    page.locator(plot).hover()
    name, png = _download(page, plot, "Download plot as a PNG")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1920, 1080)
    assert name == "layerwise-memory-vs-perplexity-smollm2-135m-2-000-words-of-wikipedia-p.png"
    (conftest.ARTIFACTS / "slide-neuzip-tradeoff.png").write_bytes(png)
    name, svg = _download(page, plot, "Download plot as an SVG (slide size)")
    text = svg.decode()
    assert name.endswith(".svg") and 'width="960"' in text[:300] and 'height="540"' in text[:300]
    assert "Memory vs perplexity" in text and "Pareto front" in text  # the title and the legend are in it
    (conftest.ARTIFACTS / "slide-neuzip-tradeoff.svg").write_bytes(svg)
    page.close()


def test_a_link_that_needs_computing_shows_progress_and_stops(browser, app_url):
    from playwright.sync_api import expect

    plot = "#neuzip-stage-plot"
    page = open_page(browser, f"{app_url}?tab=neuzip&example=bits&k=1&B=64", {plot: title("neuzip", "bits")})
    drawn(page, plot)  # the precomputed view first, at once
    expect(page.locator("#neuzip-stage-caption")).to_contain_text("precomputed")
    progress = page.locator(f'{plot} [data-testid="status-tracker"] .progress-text, {plot} .eta-bar').first
    expect(progress).to_be_visible()  # the link's own inputs (k=1, B=64) are being computed
    page.screenshot(path=str(conftest.ARTIFACTS / "link-computing.png"))
    page.locator("#neuzip-stage-stop").click()
    expect(page.locator("#neuzip-stage-status")).to_contain_text("Stopped", timeout=WAIT_MS)
    expect(progress).to_be_hidden()
    expect(page.locator("#neuzip-stage-caption")).to_contain_text("precomputed")
    page.close()


def test_an_input_of_the_stage_computes_with_progress_and_stops(browser, app_url):
    from playwright.sync_api import expect

    plot = "#neuzip-stage-plot"
    page = open_page(browser, f"{app_url}?tab=neuzip&example=bits", {plot: title("neuzip", "bits")})
    drawn(page, plot)
    page.locator(".lw-inputs").get_by_text("Inputs of this view").click()
    k = page.locator(".lw-inputs").get_by_label("k", exact=True)
    k.click()
    page.get_by_role("option", name="1", exact=True).click()  # k = 1 is not precomputed: computed here
    progress = page.locator(f'{plot} [data-testid="status-tracker"] .progress-text, {plot} .eta-bar').first
    expect(progress).to_be_visible()
    page.locator("#neuzip-stage-stop").click()
    expect(page.locator("#neuzip-stage-status")).to_contain_text("Stopped")
    expect(progress).to_be_hidden()
    page.close()
