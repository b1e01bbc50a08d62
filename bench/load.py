"""Many users at once: latency of cheap calls while heavy ones run, and the server's peak memory, as JSON.

    python bench/load.py                       # 8 cheap + 2 heavy users, 5 heavy calls each
    python bench/load.py --cheap 16 --heavy 4 --heavy-calls 3
    python bench/load.py --loading 40          # issue 22: one session loads model folders, another runs MathNeuro
    python bench/load.py --smoke               # both on one app with 2 + 2 users, in seconds (CI)

Starts ``python app.py`` with a private LAYERWISE_HOME (the prepared data and models linked in, an empty results
cache), measures cheap calls alone first (the same users, no heavy ones), then with the heavy users, side by side
in one run (each cheap user makes 3 calls alone, and up to 50 while the heavy calls run). Cheap: a dataset page, the target choices of a text. Heavy: relevance heatmaps (MambaLRP,
Gradient x Input, Integrated Gradients) of distinct 60-word texts on mamba-lm, and NeuZip weight statistics of
the registered models in turn, SmolLM2-135M included (so the server keeps loading models).
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

from tests.conftest import stop_process, wait_http  # noqa: E402
from tests.fuzz.conftest import AppServer, start_app  # noqa: E402
from tests.fuzz.load import folder_copies, percentile, rss_mib, run_load, run_loading  # noqa: E402

HEAVY_METHODS = ("mambalrp", "gradient_x_input", "integrated_gradients")


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_s": round(percentile(xs, 0.5), 3), "p95_s": round(percentile(xs, 0.95), 3),
            "max_s": round(max(xs), 3) if xs else None}


# --smoke: users, calls, loading seconds (3 heavy calls each, so that on a quiet machine the cheap users still meet them)
SMOKE = {"cheap": 2, "heavy": 2, "heavy_calls": 3, "loading": 2.0}


def load_figures(server, proc, cheap: int, heavy: int, heavy_calls: int, concurrency: int, started: float,
                 heavy_methods=HEAVY_METHODS, cheap_max: int = 50) -> dict:
    """Cheap users alone, then beside the heavy users: latencies, failed calls, the server's memory."""
    idle = rss_mib(proc.pid)
    downloads = str(server.root / "downloads")
    t0 = time.perf_counter()
    alone = run_load(server.client, proc.pid, downloads, cheap_users=cheap, heavy_users=0, cheap_calls=3)
    loaded = run_load(server.client, proc.pid, downloads, cheap_users=cheap, heavy_users=heavy, cheap_calls=3,
                      heavy_calls=heavy_calls, cheap_max=cheap_max, heavy_methods=heavy_methods)
    failed = sum(a.startswith("error:") for _, _, a in [*alone.answers, *loaded.answers])
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), {platform.python_version()}",
        "users": {"cheap": cheap, "heavy": heavy, "heavy_calls_each": heavy_calls, "app_concurrency": concurrency},
        "app_start_s": round(started, 1),
        "cheap_alone": summary(alone.cheap_latencies or []),
        "cheap_while_heavy_run": summary(loaded.cheap_latencies),
        "heavy": summary(loaded.heavy_latencies),
        "p50_ratio_loaded_to_alone": round(percentile(loaded.cheap_latencies, 0.5)
                                           / percentile(alone.cheap_latencies, 0.5), 2),
        "failed_calls": failed,
        "server_rss_mib": {"idle": round(idle), "peak": round(max(alone.peak_rss_mib, loaded.peak_rss_mib))},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def loading_figures(server, proc, seconds: float, concurrency: int) -> dict:
    """Issue 22: one session loads model folders while another repeats /mathneuro_layers; failed and different
    answers."""
    run, _ = run_loading(server.client, folder_copies(server.root / "folders"), seconds, str(server.root / "downloads"))
    return {"app_concurrency": concurrency, "seconds": run.seconds, "mathneuro_calls": run.calls,
            "failed": len(run.failed), "different": len(run.different), "models_loaded": run.loads,
            "load_failures": len(run.load_failures), "examples": (run.failed + run.different)[:3],
            "server_rss_mib_end": round(rss_mib(proc.pid))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cheap", type=int, default=8, help="cheap users")
    p.add_argument("--heavy", type=int, default=2, help="heavy users")
    p.add_argument("--heavy-calls", type=int, default=5, help="calls per heavy user")
    p.add_argument("--concurrency", type=int, default=2, help="the app's --concurrency")
    p.add_argument("--loading", type=float, default=0, metavar="SECONDS",
                   help="instead: for this long one session loads copies of mathneuro-tiny and mamba-lm under fresh "
                        "spellings (/model_card) while another repeats /mathneuro_layers; count failed and different "
                        "answers")
    p.add_argument("--smoke", action="store_true",
                   help="both measurements on one app, 2 cheap and 2 heavy users (MambaLRP only), three heavy calls "
                        "each, 2 s of loading (CI); the figures are meaningless")
    args = p.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    with tempfile.TemporaryDirectory(prefix="layerwise-load-") as tmp:
        root = Path(tmp)
        proc, log, url = start_app(root, "--concurrency", str(args.concurrency))
        try:
            started = wait_http(url, 240)
            server = AppServer(url, proc, log, root)
            if args.smoke:
                out = {"mode": "smoke", "timings_meaningful": False,
                       "timing_note": "smoke run: 2 cheap and 2 heavy users, three heavy calls each, 2 s of loading; "
                                      "the latencies and memory are meaningless",
                       **load_figures(server, proc, args.cheap, args.heavy, args.heavy_calls, args.concurrency,
                                      started, heavy_methods=("mambalrp",), cheap_max=3),
                       "loading": loading_figures(server, proc, args.loading, args.concurrency)}
            elif args.loading:
                out = loading_figures(server, proc, args.loading, args.concurrency)
            else:
                out = load_figures(server, proc, args.cheap, args.heavy, args.heavy_calls, args.concurrency, started)
        finally:
            stop_process(proc)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
