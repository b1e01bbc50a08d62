"""A talk's page in headless Chromium, shared by tests/e2e/test_talk.py (what the page shows) and bench/talk.py (how
fast it shows it): timestamps taken in the page, the chart title a view draws, the example picked."""
from __future__ import annotations

import json
import re

import core.examples as ex

WAIT_MS = 90_000  # a loaded 2-core machine can take a while: the tests wait this long for a chart
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


def open_page(browser, url: str, want: dict | None = None):
    """A new page of ``browser`` (a context) at ``url``, timing the charts of ``want`` (selector -> title text)."""
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    page.add_init_script(INIT + "".join(f"window.__lw.want[{json.dumps(k)}] = {json.dumps(v)};"
                                        for k, v in (want or {}).items()))
    page.goto(url)
    return page


def drawn(page, selector: str) -> float:
    """The page time (ms) at which the chart at ``selector`` showed its wanted title (waits up to WAIT_MS)."""
    page.wait_for_function(f"() => window.__lw.drawn[{json.dumps(selector)}]", timeout=WAIT_MS)
    return page.evaluate(f"() => window.__lw.drawn[{json.dumps(selector)}]")


def want(page, selector: str, text: str) -> None:
    """From now on, time the chart at ``selector`` until it shows ``text``."""
    page.evaluate(f"() => {{ delete window.__lw.drawn[{json.dumps(selector)}]; "
                  f"window.__lw.want[{json.dumps(selector)}] = {json.dumps(text)}; }}")


def click_and_time(page, selector: str, text: str, target) -> float:
    """Milliseconds from a click on ``target`` to the chart at ``selector`` showing ``text``."""
    want(page, selector, text)
    t0 = page.evaluate("(el) => { const t = performance.now(); el.click(); return t; }", target.element_handle())
    return drawn(page, selector) - t0


def key_and_time(page, selector: str, text: str, key: str) -> float:
    """Milliseconds from pressing ``key`` to the chart at ``selector`` showing ``text``."""
    want(page, selector, text)
    t0 = page.evaluate("() => performance.now()")
    page.keyboard.press(key)
    return drawn(page, selector) - t0


def picked(page, tab: str) -> str:
    """The example picked in ``tab``'s example list."""
    return page.evaluate(f"() => document.querySelector('#{tab}-examples input:checked').value")


def example_label(page, tab: str, name: str):
    """The label of example ``name`` in ``tab``'s example list (what a speaker clicks)."""
    return page.locator(f"#{tab}-examples label", has_text=ex.example(tab, name).title).first
