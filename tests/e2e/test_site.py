"""The static site in Chromium, opened from disk with the network off: every view of the registry is built, each
tab's charts are drawn, the presenter view's arrow keys go to the next example at talk size, and an app link on the
index opens its view."""
import json
import re
import shutil

import pytest

import core.examples as ex
from core.site import MANIFEST, build
from tests.e2e.test_browser import FLAGS, need_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WAIT_MS = 90_000


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("static") / "public"
    report = build(out)
    return out, report


@pytest.fixture(scope="module")
def browser_page():
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or shutil.which("chromium-browser"),
                                    args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 720}, offline=True)
        asked = []

        def only_files(route):
            if route.request.url.startswith("file:"):
                return route.continue_()
            asked.append(route.request.url)
            return route.abort()
        context.route("**/*", only_files)
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_default_timeout(WAIT_MS)
        yield page, asked, errors
        browser.close()


def drawn(page) -> list[str]:
    """The titles of the charts plotly drew on the page (each chart box holds its SVG once drawn)."""
    page.wait_for_function("() => [...document.querySelectorAll('.lw-chart')].every("
                           "(b) => b.querySelector('svg.main-svg'))")
    return page.eval_on_selector_all(".lw-chart", "(bs) => bs.map((b) => (b.querySelector('.gtitle') || {}).textContent"
                                                  " || '')")


def words(title: str) -> list[str]:
    return re.sub(r"<[^>]+>", " ", title).split()[:3]


def test_every_view_is_built_and_each_tabs_charts_are_drawn_from_disk(site, browser_page):
    out, report = site
    page, asked, errors = browser_page
    registry = ex.registry()
    manifest = json.loads((out / MANIFEST).read_text())
    assert not report["skipped"] and set(manifest["views"]) == {f"{t}/{e.name}" for t, es in registry.items()
                                                                  for e in es}
    for tab, examples in registry.items():
        e = examples[-1] if len(examples) > 1 else examples[0]  # the last: the first is in the quick tier's test
        res = ex.show(ex.default_view(tab, e.name))
        page.goto((out / tab / f"{e.name}.html").as_uri())
        titles = drawn(page)
        assert len(titles) == len(res.figures), tab
        assert titles[0].split()[:3] == words(res.figures[e.figure].layout.title.text), (tab, titles[0])
    assert not asked and not errors, (asked[:3], errors[:3])


def test_the_presenter_view_keys_and_an_app_link(site, browser_page):
    out, _ = site
    page, asked, errors = browser_page
    tab = next(t for t, es in ex.registry().items() if len(es) > 1)
    first, second = ex.examples(tab)[:2]
    page.goto((out / "index.html").as_uri() + f"?tab={tab}&example={first.name}&view=talk")
    page.wait_for_url(f"**/talk/{tab}/{first.name}.html")
    drawn(page)
    size = page.eval_on_selector(".lw-picker a", "(a) => parseFloat(getComputedStyle(a).fontSize)")
    box = page.eval_on_selector(".lw-chart", "(b) => b.getBoundingClientRect().height")
    assert size >= 20 and box >= 0.6 * 720  # talk-size text, the chart filling the screen below the picker
    page.keyboard.press("ArrowRight")
    page.wait_for_url(f"**/talk/{tab}/{second.name}.html")
    shown = ex.show(ex.default_view(tab, second.name)).figures[second.figure]
    assert drawn(page)[0].split()[:3] == words(shown.layout.title.text)
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(f"**/talk/{tab}/{first.name}.html")
    assert not asked and not errors, (asked[:3], errors[:3])
