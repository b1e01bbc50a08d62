"""Many users at once: latency of cheap calls (split into queue wait and compute) with 1 user, with 8, and while heavy
calls run, and the server's peak memory, as JSON.

    python bench/load.py                       # 1 and 8 cheap users, then 8 cheap + 2 heavy users (5 heavy calls each)
    python bench/load.py --lanes               # the same on two apps side by side: --cheap-lane 0 (before) and 8
    python bench/load.py --cheap 16 --heavy 4 --heavy-calls 3
    python bench/load.py --loading 40          # issue 22: one session loads model folders, another runs MathNeuro
    python bench/load.py --smoke               # both on one app with 2 + 2 users, in seconds (CI)

Starts ``python app.py`` with a private LAYERWISE_HOME (the prepared data and models linked in, an empty results
cache) and measures, side by side in one run: one cheap user alone (12 calls), the cheap users alone (3 calls each),
then the cheap users while the heavy users run (each cheap user calls until the heavy calls are done, at most 50
times). Cheap: a dataset page, the target choices of a text. Heavy: relevance heatmaps (MambaLRP, Gradient x Input,
Integrated Gradients) of distinct 60-word texts on mamba-lm, and NeuZip weight statistics of the registered models in
turn, SmolLM2-135M included (so the server keeps loading models).

Every cheap call's time is split by the server's own account (the app runs with ``GRADIO_PROFILING=1``; Gradio traces
each event): the queue wait (from joining the queue to leaving it for a worker) and the processing (preprocess, the
handler, postprocess); what the client saw beyond both is the client and the protocol (joining, the event stream). ``--lanes`` runs each phase on the app without the cheap lane, then on
the app with it (both started at once, so the machine's load drifts alike), and prints the ratios.
The machine's load average is recorded before and after: on a shared machine compare ratios, not seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import stop_process, wait_http  # noqa: E402
from tests.fuzz.conftest import AppServer, start_app  # noqa: E402
from tests.fuzz.load import folder_copies, percentile, rss_mib, run_load, run_loading  # noqa: E402

HEAVY_METHODS = ("mambalrp", "gradient_x_input", "integrated_gradients")
ONE_USER_CALLS = 12


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_s": round(percentile(xs, 0.5), 3), "p95_s": round(percentile(xs, 0.95), 3),
            "max_s": round(max(xs), 3) if xs else None}


CHEAP_APIS = ("dataset_sample", "lrp_targets")  # what tests/fuzz/load.cheap_call asks


def _p(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_s": round(percentile(xs, 0.5), 3), "p95_s": round(percentile(xs, 0.95), 3)}


def traces(url: str, clear: bool = False) -> list[dict]:
    """Gradio's own timings of every event since the last clear (the app runs with ``GRADIO_PROFILING=1``): per event
    its ``queue_wait_ms`` (from joining the queue to leaving it for a worker) and ``total_ms`` (preprocess, the
    handler, postprocess)."""
    base = url.rstrip("/") + "/gradio_api/profiling/"
    if clear:
        urllib.request.urlopen(urllib.request.Request(base + "clear", data=b"", method="POST"), timeout=60).read()
        return []
    return json.loads(urllib.request.urlopen(base + "traces", timeout=60).read())


def split(run, server_traces: list[dict]) -> dict:
    """A run's cheap calls: their total times as the clients saw them, and how the server spent them (Gradio's own
    traces of the same calls): waiting in the queue, then processing (preprocess + handler + postprocess); the rest
    is the client and the protocol (joining, the event stream, thread hand-offs)."""
    out = summary(run.cheap_latencies)
    mine = [t for t in server_traces if t.get("fn_name") in CHEAP_APIS]
    waits = [t["queue_wait_ms"] / 1000 for t in mine]
    work = [t["total_ms"] / 1000 for t in mine]
    out["server_queue_wait"] = _p(waits)
    out["server_processing"] = _p(work)
    out["handler"] = _p([t["fn_call_ms"] / 1000 for t in mine])
    total = percentile(run.cheap_latencies, 0.5)
    out["queue_share_of_p50"] = round(percentile(waits, 0.5) / total, 2) if waits and total else None
    out["client_and_protocol_p50_s"] = round(total - percentile(waits, 0.5) - percentile(work, 0.5), 3) \
        if waits else None
    return out


# --smoke: users, calls, loading seconds (3 heavy calls each, so that on a quiet machine the cheap users still meet them)
SMOKE = {"cheap": 2, "heavy": 2, "heavy_calls": 3, "loading": 2.0}


def load_figures(server, proc, cheap: int, heavy: int, heavy_calls: int, concurrency: int, started: float,
                 heavy_methods=HEAVY_METHODS, cheap_max: int = 50, one_user_calls: int = ONE_USER_CALLS) -> dict:
    """One cheap user alone, the cheap users alone, then beside the heavy users: latencies with their queue / compute
    split, failed calls, the server's memory."""
    idle = rss_mib(proc.pid)
    downloads = str(server.root / "downloads")
    t0 = time.perf_counter()
    runs, seen = {}, {}
    for name, kwargs in (("one", {"cheap_users": 1, "heavy_users": 0, "cheap_calls": one_user_calls,
                                  "cheap_max": one_user_calls}),
                         ("alone", {"cheap_users": cheap, "heavy_users": 0, "cheap_calls": 3, "cheap_max": 3}),
                         ("loaded", {"cheap_users": cheap, "heavy_users": heavy, "cheap_calls": 3,
                                     "heavy_calls": heavy_calls, "cheap_max": cheap_max,
                                     "heavy_methods": heavy_methods})):
        traces(server.url, clear=True)
        runs[name] = run_load(server.client, proc.pid, downloads, **kwargs)
        seen[name] = traces(server.url)
    failed = sum(a.startswith("error:") for r in runs.values() for _, _, a in r.answers)
    alone, loaded = runs["alone"], runs["loaded"]
    return {
        "cheap_1_user": split(runs["one"], seen["one"]),
        "cheap_alone": split(alone, seen["alone"]),
        "cheap_while_heavy_run": split(loaded, seen["loaded"]),
        "heavy": summary(loaded.heavy_latencies),
        "p50_ratio_loaded_to_alone": round(percentile(loaded.cheap_latencies, 0.5)
                                           / percentile(alone.cheap_latencies, 0.5), 2),
        "failed_calls": failed,
        "server_rss_mib": {"idle": round(idle), "peak": round(max(r.peak_rss_mib for r in runs.values()))},
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


def machine() -> dict:
    return {"machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), {platform.python_version()}",
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def lanes_figures(apps: dict, args) -> dict:
    """Each phase on each app in turn (``before``: no cheap lane, ``after``: the lane), and after / before ratios of
    the cheap calls' p50 total, queue wait and compute."""
    out = {name: {} for name in apps}
    for phase, kwargs in (("cheap_1_user", {"cheap_users": 1, "heavy_users": 0, "cheap_calls": ONE_USER_CALLS,
                                            "cheap_max": ONE_USER_CALLS}),
                          ("cheap_alone", {"cheap_users": args.cheap, "heavy_users": 0, "cheap_calls": 3,
                                           "cheap_max": 3}),
                          ("cheap_while_heavy_run", {"cheap_users": args.cheap, "heavy_users": args.heavy,
                                                     "cheap_calls": 3, "heavy_calls": args.heavy_calls,
                                                     "cheap_max": 50, "heavy_methods": HEAVY_METHODS})):
        for name, (server, proc) in apps.items():
            traces(server.url, clear=True)
            run = run_load(server.client, proc.pid, str(server.root / "downloads"), **kwargs)
            out[name][phase] = split(run, traces(server.url))
            if phase == "cheap_while_heavy_run":
                out[name]["heavy"] = summary(run.heavy_latencies)
            out[name].setdefault("failed_calls", 0)
            out[name]["failed_calls"] += sum(a.startswith("error:") for _, _, a in run.answers)
    ratios = {}
    for phase in ("cheap_1_user", "cheap_alone", "cheap_while_heavy_run"):
        b, a = out["before"][phase], out["after"][phase]
        ratios[phase] = {"p50_total": round(a["p50_s"] / b["p50_s"], 2),
                         "p95_total": round(a["p95_s"] / b["p95_s"], 2),
                         "p50_server_queue_wait": round(a["server_queue_wait"]["p50_s"]
                                                        / max(b["server_queue_wait"]["p50_s"], 1e-3), 2),
                         "p50_server_processing": round(a["server_processing"]["p50_s"]
                                                        / max(b["server_processing"]["p50_s"], 1e-3), 2)}
    out["after_to_before"] = ratios
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cheap", type=int, default=8, help="cheap users")
    p.add_argument("--heavy", type=int, default=2, help="heavy users")
    p.add_argument("--heavy-calls", type=int, default=5, help="calls per heavy user")
    p.add_argument("--concurrency", type=int, default=2, help="the app's --concurrency")
    p.add_argument("--cheap-lane", type=int, default=8, help="the app's --cheap-lane (0: none)")
    p.add_argument("--lanes", action="store_true",
                   help="instead: the same phases on an app with --cheap-lane 0 and one with --cheap-lane N, side by "
                        "side, with the after / before ratios")
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
    users = {"cheap": args.cheap, "heavy": args.heavy, "heavy_calls_each": args.heavy_calls,
             "app_concurrency": args.concurrency}
    before = machine()
    with tempfile.TemporaryDirectory(prefix="layerwise-load-") as tmp:
        lanes = {"before": 0, "after": args.cheap_lane} if args.lanes else {"app": args.cheap_lane}
        started, procs = {}, {}
        try:
            for name, lane in lanes.items():
                root = Path(tmp) / name
                root.mkdir()
                proc, log, url = start_app(root, "--concurrency", str(args.concurrency), "--cheap-lane", str(lane),
                                           GRADIO_PROFILING="1")  # Gradio's own per-event timings (traces())
                procs[name] = (proc, log, url, root)
            apps = {}
            for name, (proc, log, url, root) in procs.items():
                started[name] = wait_http(url, 240)
                apps[name] = (AppServer(url, proc, log, root), proc)
            if args.lanes:
                out = {"mode": "lanes", "cheap_lane": {"before": 0, "after": args.cheap_lane}, "users": users,
                       **lanes_figures(apps, args)}
            else:
                server, proc = apps["app"]
                users["cheap_lane"] = args.cheap_lane
                if args.smoke:
                    out = {"mode": "smoke", "timings_meaningful": False,
                           "timing_note": "smoke run: 2 cheap and 2 heavy users, three heavy calls each, 2 s of "
                                          "loading; the latencies and memory are meaningless",
                           "users": users, "app_start_s": round(started["app"], 1),
                           **load_figures(server, proc, args.cheap, args.heavy, args.heavy_calls, args.concurrency,
                                          started["app"], heavy_methods=("mambalrp",), cheap_max=3, one_user_calls=3),
                           "loading": loading_figures(server, proc, args.loading, args.concurrency)}
                elif args.loading:
                    out = loading_figures(server, proc, args.loading, args.concurrency)
                else:
                    out = {"users": users, "app_start_s": round(started["app"], 1),
                           **load_figures(server, proc, args.cheap, args.heavy, args.heavy_calls, args.concurrency,
                                          started["app"])}
        finally:
            for proc, *_ in procs.values():
                stop_process(proc)
    print(json.dumps({**before, "load_average_after": machine()["load_average_1_5_15"], **out}, indent=1))


if __name__ == "__main__":
    main()
