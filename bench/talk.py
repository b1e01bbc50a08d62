"""A talk's timings in headless Chromium: how fast a deep link, a click on an example and a key in the presenter view
draw their chart, p50 / p95 beside the one-second target. Prints JSON.

    python bench/talk.py [--reps 5]     # every tab's deep link and click, the presenter keys, 5 rounds
    python bench/talk.py --smoke        # one round, one tab, two keys (CI: the script runs end to end; its figures
                                        # are meaningless)

Starts ``python app.py`` with a private LAYERWISE_HOME (the prepared data and models linked in) and a browser that
has opened the app once (a speaker's browser has the page's files). Per round and tab (tests/e2e/talk_page.py's
``DEEP``): a fresh page at ``?tab=<tab>&example=<name>``, the milliseconds from the page being ready (the tab bar
visible) to the linked chart drawn (its title shown) and from navigation to it; then a click on another example,
the milliseconds to its chart. Then the presenter view of MathNeuro: each ArrowRight to the next example's chart.
Times are taken in the page (``performance.now``) and recorded with the machine's load average. Before the browser,
``examples_draw``: the server's share, each tab's precomputed examples drawn in this process (``core.examples.show``),
per example.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz.load import percentile  # noqa: E402

TARGET_MS = 1000  # from the page being ready, a click or a key to the chart drawn


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_ms": round(percentile(xs, 0.5)), "p95_ms": round(percentile(xs, 0.95)),
            "max_ms": round(max(xs)), "target_ms": TARGET_MS, "p95_within_target": percentile(xs, 0.95) <= TARGET_MS}


def measure(url: str, reps: int, tabs: list[str] | None = None, keys_at_most: int | None = None) -> dict:
    """The page timings of ``reps`` rounds over ``tabs`` (default every tab of DEEP), and the presenter keys (the
    first ``keys_at_most``, default all)."""
    import core.examples as ex
    from playwright.sync_api import sync_playwright
    from tests.e2e.talk_page import (DEEP, TALK, WAIT_MS, click_and_time, drawn, example_label, key_and_time,
                                     open_page, picked, title)
    from tests.e2e.test_browser import CHROMIUM, FLAGS

    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    times = {tab: {"ready_to_chart": [], "navigation_to_chart": [], "click_to_chart": []} for tab in tabs or DEEP}
    keys = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        ctx = browser.new_context(viewport=TALK)
        warm = ctx.new_page()
        warm.goto(url)
        warm.get_by_role("tab").first.wait_for(timeout=WAIT_MS)
        warm.close()
        for _ in range(reps):
            for tab in times:
                name, other = DEEP[tab]
                plot = f"#{tab}-stage-plot"
                page = open_page(ctx, f"{url}?tab={tab}&example={name}", {plot: title(tab, name)})
                at = drawn(page, plot)
                ready = page.evaluate("() => window.__lw.ready")
                click = click_and_time(page, plot, title(tab, other), example_label(page, tab, other))
                if picked(page, tab) != other:
                    raise SystemExit(f"{tab}: clicking {other} picked {picked(page, tab)}")
                page.close()
                for key, ms in (("ready_to_chart", at - ready), ("navigation_to_chart", at), ("click_to_chart", click)):
                    times[tab][key].append(ms)
            tab = "mathneuro"
            names = [e.name for e in ex.examples(tab)]
            plot = f"#{tab}-stage-plot"
            page = open_page(ctx, f"{url}?tab={tab}&view=talk", {plot: title(tab, names[0])})
            drawn(page, plot)
            page.locator("body").click(position={"x": 5, "y": 5})  # the keys go to the page, not to a control
            keys += [key_and_time(page, plot, title(tab, name), "ArrowRight") for name in names[1:][:keys_at_most]]
            page.close()
        browser.close()
    per_tab = {tab: {k: summary(v) for k, v in t.items()} for tab, t in times.items()}
    every = {k: summary([x for t in times.values() for x in t[k]]) for k in ("ready_to_chart", "click_to_chart")}
    return {"per_tab": per_tab, "all_tabs": every, "presenter_key_to_chart": summary(keys)}


def draw_times(reps: int) -> dict:
    """Milliseconds to draw each precomputed example in this process (what the app does for a click), per example."""
    import core.examples as ex
    times = {}
    for tab, examples in ex.registry().items():
        for e in examples:
            view = ex.default_view(tab, e.name)
            times[f"{tab}/{e.name}"] = []
            for _ in range(reps):
                t0 = time.perf_counter()
                ex.show(view)
                times[f"{tab}/{e.name}"].append(1000 * (time.perf_counter() - t0))
    return {"per_example_p50_ms": {k: round(percentile(v, 0.5)) for k, v in times.items()},
            "all_examples": summary([x for v in times.values() for x in v])}


def main(argv=None) -> None:
    from tests.fuzz.conftest import serving

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="rounds over every tab")
    ap.add_argument("--smoke", action="store_true", help="one round, one tab, two keys; figures meaningless (CI)")
    a = ap.parse_args(argv)
    reps = 1 if a.smoke else a.reps
    draws = draw_times(reps)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="layerwise-talk-") as root, serving(Path(root)) as server:
        started = time.perf_counter() - t0
        figures = measure(server.url, reps, ["lrp"] if a.smoke else None, 2 if a.smoke else None)
    report = {
        "mode": "smoke" if a.smoke else "full", "reps": reps, "app_start_s": round(started, 1),
        "examples_draw": draws, **figures,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.python_version()}",
        "timings_meaningful": not a.smoke,
        "timing_note": "smoke run: one round on a CI machine, timings meaningless" if a.smoke else
                       "medians of rounds on this machine at the load average given (p95 beside the target)",
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
