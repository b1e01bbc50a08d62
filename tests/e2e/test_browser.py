"""End to end in headless Chromium: open the page, click every tab, check that something real rendered
in each, and save screenshots to artifacts/ (kept by CI as test artifacts)."""
import os
import shutil

import pytest

from tests import conftest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium() -> None:
    """Skip without chromium, or fail where the browser tests must run (CI: LAYERWISE_REQUIRE_BROWSER=1)."""
    if CHROMIUM is None:
        if os.environ.get("LAYERWISE_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

WAIT_MS = 90_000  # a loaded 2-core machine can take a while to render a tab's first figures

# what must be visible once each tab is opened: tab title -> (element, text) that only real content produces
EXPECTED = {
    "Models & data": [("#models-table", "smollm2-135m"), ("#datasets-table", "movie-sentiment"),
                      ("#dataset-info", "records, page 1 of"), ("#dataset-rows", "text")],
    "MambaLRP": [("#lrp-text-status", "mamba-sentiment predicts"), ("#lrp-text-heatmap", "MambaLRP"),
                 ("#lrp-image-plot", "Patch relevance for class"), ("#lrp-delta-table", "MambaLRP"),
                 ("#lrp-faithfulness", "Faithfulness: target logit"), ("#lrp-conservation", "Conservation: sum"),
                 ("#lrp-long-range", "Long range on mamba-lm"), ("#lrp-key-token", "MambaLRP"),
                 ("#lrp-key-token-last", "Where MambaLRP misses the key")],
    "MathNeuro": [("#mathneuro-status", "MathNeuro vs review-sentiment: math 96 → 38"),
                  ("#mathneuro-effect", "Effect of pruning each method's set"),
                  ("#mathneuro-effect-table", "Wanda (math only)"),
                  ("#mathneuro-layers", "Where the math-specific parameters sit"),
                  ("#mathneuro-sweep-k", "Pruning the mathneuro set as K grows"),
                  ("#mathneuro-sweep-scale", "Scaling the mathneuro set"),
                  ("#mathneuro-consistency", "Consistency of the mathneuro set"),
                  ("#mathneuro-drill", "Drill-down: model.layers.0.mlp.down_proj")],
    "Mix-LN": [("#mixln-runs", "pre-ln"), ("#mixln-compare-table", "mix-ln-0.25"), ("#mixln-loss", "Pre-LN held-out"),
               ("#mixln-gradnorms", "Grad norm per layer"), ("#mixln-sweep", "Alpha sweep"),
               ("#mixln-settings", "no clipping"), ("#mixln-compare-status", "against Pre-LN"),
               ("#mixln-compare", "against Pre-LN (equal steps)"), ("#mixln-reproduces", "Mix-LN trains to a lower loss"),
               ("#mixln-followups", "LayerNorm Scaling"), ("#mixln-curves-loss", "Held-out loss over seeds"),
               ("#mixln-curves-perplexity", "n = 3 seeds"), ("#mixln-lr-sweep", "Learning-rate sweep"),
               ("#mixln-depth", "12 and 24 layers"),
               ("#mixln-run-angular", "Angular distance"), ("#mixln-run-removal", "Layer removal"),
               ("#mixln-live-status", "Start live run")],
    "NeuZip": [("#neuzip-weights-summary", "bits/weight"), ("#neuzip-histograms", "Bit fields of"),
               ("#neuzip-table", "total"), ("#neuzip-tradeoff", "Memory vs perplexity"),
               ("#neuzip-tradeoff-table", "NeuZip k=3, B=128"), ("#neuzip-throughput", "Throughput on this machine"),
               ("#neuzip-training-summary", "bit for bit the same"),
               ("#neuzip-training-memory", "Peak memory while training smollm2-135m"),
               ("#neuzip-training-loss", "LOMO + NeuZip"), ("#neuzip-training-paper", "15.25")],
}


@pytest.fixture(scope="module")
def page(app_url):
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(WAIT_MS)
        pg.goto(app_url)
        pg.get_by_role("tab").first.wait_for()
        yield pg
        browser.close()


def test_every_tab_renders_real_content(page):
    import importlib

    from playwright.sync_api import expect

    from ui import TABS

    titles = [importlib.import_module(m).TITLE for m in TABS]
    assert set(EXPECTED) == set(titles), "add the expectations of each new tab here"
    for title in titles:
        page.get_by_role("tab", name=title).click()
        for where, text in EXPECTED[title]:
            expect(page.locator(where)).to_be_visible(timeout=WAIT_MS)
            expect(page.locator(where)).to_contain_text(text, timeout=WAIT_MS)
        page.screenshot(path=str(conftest.ARTIFACTS / f"e2e-{title.lower().replace(' ', '-').replace('&', 'and')}.png"),
                        full_page=True)


def test_browsing_an_image_dataset_shows_a_grid(page):
    page.get_by_role("tab", name="Models & data").click()
    box = page.get_by_label("Dataset", exact=True)
    box.click()
    box.fill("mnist-5k")
    page.get_by_role("option", name="mnist-5k").click()
    from playwright.sync_api import expect

    expect(page.locator("#dataset-info")).to_contain_text("MNIST, 5,000 digits", timeout=WAIT_MS)
    grid = page.locator("#dataset-grid img")
    grid.nth(11).wait_for(state="visible")
    assert grid.count() >= 12
    expect(page.locator("#dataset-grid")).to_contain_text("label", timeout=WAIT_MS)
    page.screenshot(path=str(conftest.ARTIFACTS / "e2e-mnist-grid.png"), full_page=True)
