"""A deep link of 64 KB and of 1 MB in headless Chromium (issue 38): the page completes its load on the part of the
link the app used, the notice says in one line what was used and what ignored, and the linked view is drawn (before,
64 KB got HTTP 500 and a page whose load never completed; 1 MB got a bare 400)."""
import json

import pytest

from tests import conftest
from tests.e2e.test_talk import browser  # noqa: F401  (the talk tests' browser: Chromium, one context)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WAIT_MS = 90_000


@pytest.mark.parametrize("size", [64 * 1024, 1024**2])
def test_a_long_link_loads_the_page_with_one_line_of_notice(browser, app_url, size):
    from playwright.sync_api import expect

    query = "tab=neuzip&example=tradeoff&junk=" + "a" * size
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    answer = page.goto(f"{app_url}?{query}", wait_until="load")  # the load event fires: the page completed
    assert answer is not None and answer.status == 200 and "cut=" in page.url and len(page.url) < 2200
    notice = page.locator("#lw-notice")
    expect(notice).to_be_visible()
    text = notice.inner_text().strip()
    assert text == (f"This link: it had {len(query):,} characters, more than the 2,048 a link may have: used tab, "
                    "example; ignored 1 part (junk).")
    expect(page.get_by_role("tab", selected=True)).to_have_text("NeuZip")
    page.wait_for_function("() => document.querySelector('#neuzip-examples input:checked')?.value === 'tradeoff'")
    page.screenshot(path=str(conftest.ARTIFACTS / f"long-link-{size // 1024}k.png"))
    (conftest.ARTIFACTS / f"long-link-{size // 1024}k.json").write_text(json.dumps({"url": page.url, "notice": text}))
    page.close()
