"""A talk, in headless Chromium: a deep link per tab draws its chart and a click on an example draws the next, the
presenter view at 1280 x 720 follows the keyboard, a bad link is one line of notice, the link of a view opens that
view, every chart exports PNG and SVG at slide size, a link that asks for a computation shows its progress and stops,
the side-by-side view of a transformer and an SSM opens from its link.
Screenshots go to the artifacts folder. How fast the charts come (the talk's one-second target) is measured by
``bench/talk.py``, not asserted here: a chart must arrive within WAIT_MS however busy the machine is."""
import importlib
import struct
from urllib.parse import parse_qsl, urlsplit

import pytest

import core.examples as ex
from tests import conftest
from tests.e2e.talk_page import (DEEP, TALK, WAIT_MS, click_and_time, drawn, example_label, key_and_time, open_page,
                                 picked, title)
from tests.e2e.test_browser import CHROMIUM, FLAGS, need_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


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


@pytest.mark.parametrize("tab", list(DEEP))
def test_a_deep_link_and_a_click_draw_their_chart(browser, app_url, tab):
    from playwright.sync_api import expect

    name, other = DEEP[tab]
    plot = f"#{tab}-stage-plot"
    page = open_page(browser, f"{app_url}?tab={tab}&example={name}", {plot: title(tab, name)})
    drawn(page, plot)  # the linked example's chart arrives (within WAIT_MS)
    expect(page.get_by_role("tab", selected=True)).to_have_text(importlib.import_module(f"ui.tabs.{tab}").TITLE)
    assert picked(page, tab) == name
    expect(page.locator("#lw-notice")).to_be_hidden()
    click_and_time(page, plot, title(tab, other), example_label(page, tab, other))  # the clicked one's chart arrives
    assert picked(page, tab) == other
    page.screenshot(path=str(conftest.ARTIFACTS / f"deep-link-{tab}.png"))
    page.close()


def test_the_side_by_side_view_opens_from_its_link(browser, app_url):
    """Issue 45: SmolLM2-135M (a transformer) beside mamba-lm (an SSM) on one sentence, drawn from its deep link: the
    precomputed result, both models named in the chart and the status."""
    from playwright.sync_api import expect

    plot = "#lrp-stage-plot"
    link = "?tab=lrp&example=compare-1&model_a=smollm2-135m&model_b=mamba-lm"
    page = open_page(browser, f"{app_url}{link}", {plot: title("lrp", "compare-1")})
    drawn(page, plot)
    assert picked(page, "lrp") == "compare-1"
    expect(page.locator("#lw-notice")).to_be_hidden()
    ticks = " ".join(page.locator(f"{plot} .ytick").all_text_contents())
    assert "smollm2-135m (transformer)" in ticks and "mamba-lm (SSM)" in ticks
    expect(page.locator("#lrp-stage-status")).to_contain_text("smollm2-135m")
    expect(page.locator("#lrp-stage-caption")).to_contain_text("precomputed")
    page.screenshot(path=str(conftest.ARTIFACTS / "deep-link-lrp-compare.png"))
    page.close()


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
        key_and_time(page, plot, title(tab, name), "ArrowRight")
        assert picked(page, tab) == name
        page.screenshot(path=str(conftest.ARTIFACTS / f"talk-{tab}-{name}.png"))
    page.keyboard.press("ArrowRight")  # once more at the end: it stays (nothing to draw, nothing picked)
    page.wait_for_timeout(500)
    assert picked(page, tab) == names[-1]
    key_and_time(page, plot, title(tab, names[-2]), "ArrowLeft")
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
