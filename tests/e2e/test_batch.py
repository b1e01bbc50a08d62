"""The MambaLRP tab's Batch section in headless Chromium: upload a CSV, run it with progress, Stop it, run it again
(it continues with the rows it had not finished) and get the results as Parquet and CSV."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from tests import conftest
from tests.e2e.test_browser import WAIT_MS, page  # noqa: F401  (page: the browser tests' page fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
WORDS = ["dull", "bright", "slow", "witty", "flat", "moving", "clumsy", "tender", "long", "sharp"]


def test_batch_upload_progress_stop_resume_and_results(page, tmp_path):
    from playwright.sync_api import expect

    n = 48
    source = tmp_path / "reviews.csv"
    pd.DataFrame({"text": [f"A {WORDS[i % 10]} and {WORDS[(7 * i + 3) % 10]} film, number {i}." for i in range(n)],
                  "id": range(n)}).to_csv(source, index=False)
    page.get_by_role("tab", name="MambaLRP").click()
    page.locator("#lrp-batch").get_by_text("Batch: a file of texts").click()
    page.locator("#lrp-batch-upload input[type=file]").set_input_files(str(source))
    expect(page.locator("#lrp-batch-upload")).to_contain_text("reviews.csv")
    page.locator("#lrp-batch-run").click()
    expect(page.locator("#lrp-batch")).to_contain_text(re.compile(r"of 48 rows"), timeout=WAIT_MS)  # the progress
    page.locator("#lrp-batch-stop").click()
    status = page.locator("#lrp-batch-status")
    done = "48 rows of reviews.csv"  # the finished status (the progress bar over it says "k of 48 rows")
    expect(status).to_contain_text(re.compile(r"Stopped after \d+ of 48 rows|" + done), timeout=WAIT_MS)
    stopped = re.search(r"Stopped after (\d+) of 48", status.inner_text())
    page.screenshot(path=str(conftest.ARTIFACTS / "e2e-lrp-batch-stopped.png"), full_page=False)
    if stopped:  # (a very quick machine may finish first)
        page.locator("#lrp-batch-run").click()
        expect(status).to_contain_text(f"{stopped.group(1)} done before", timeout=WAIT_MS)
    expect(status).to_contain_text(done, timeout=WAIT_MS)
    files = page.locator("#lrp-batch-files")
    expect(files).to_contain_text(re.compile(r"lrp-batch\s*\.parquet"), timeout=WAIT_MS)
    expect(files).to_contain_text(re.compile(r"lrp-batch\s*\.csv"))
    expect(page.locator("#lrp-batch-preview")).to_contain_text(re.compile("positive|negative"))
    page.locator("#lrp-batch").scroll_into_view_if_needed()
    page.screenshot(path=str(conftest.ARTIFACTS / "e2e-lrp-batch.png"), full_page=False)
    with page.expect_download() as download:
        files.locator("tr").filter(has_text="parquet").locator("a").first.click()
    saved = tmp_path / "got.parquet"
    download.value.save_as(saved)
    got = pd.read_parquet(saved)
    assert list(got["index"]) == list(range(n)) and list(got["id"]) == [str(i) for i in range(n)]
    assert got["error"].isna().all() and (got["attempt"] <= 2).all()


def test_the_bias_audit_opens_from_its_deep_link(page, app_url):
    from playwright.sync_api import expect

    page.goto(app_url + "?tab=lrp&example=bias-audit")
    plot = page.locator("#lrp-stage-plot")
    expect(plot).to_contain_text("Bias audit of mamba-sentiment", timeout=WAIT_MS)
    expect(plot).to_contain_text("my sister")
    expect(page.locator("#lrp-stage-status")).to_contain_text("female higher in")
    expect(page.locator("#lrp-stage-caption")).to_contain_text("Bias audit")
    plot.scroll_into_view_if_needed()
    page.screenshot(path=str(conftest.ARTIFACTS / "e2e-lrp-bias-audit.png"), full_page=False)
