"""Many ``gradio_client`` users on one app at once (the load test and ``bench/load.py`` share this).

Cheap users ask for dataset pages and the target choices of a text; heavy users ask for relevance heatmaps of
distinct texts and NeuZip weight statistics of different models (so the server keeps loading other models).
Every user's inputs are its own, so every answer can be compared with the answer the same input gets alone.
"""
from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

CHEAP_DATASETS = ["movie-sentiment", "gsm-symbolic", "mmlu", "logiqa", "arithmetic-words", "pydoc-topics",
                  "wikipedia-paragraphs", "openwebtext-paragraphs"]
WORDS = ["gorgeous", "dull", "witty", "tedious", "bright", "clumsy", "tender", "cold", "brilliant", "flat"]
HEAVY_MODELS = ["mathneuro-tiny", "mamba-sentiment", "mamba-lm", "vision-mamba-mnist", "smollm2-135m"]


def cheap_call(user: int, i: int) -> tuple[str, tuple]:
    """(api name, inputs) of cheap call ``i`` of ``user``; no two (user, i) share inputs."""
    if user % 2 == 0:
        return "/dataset_sample", (CHEAP_DATASETS[user % len(CHEAP_DATASETS)], "test", 1 + i + 3 * user)
    text = f"A {WORDS[user % len(WORDS)]} and {WORDS[(user + i + 3) % len(WORDS)]} film, take {i}."
    return "/lrp_targets", ("mamba-sentiment", text)


def heavy_call(user: int, i: int, methods=("mambalrp", "gradient_x_input")) -> tuple[str, tuple]:
    """Relevances of a distinct 60-word text on mamba-lm (even users), NeuZip statistics of the models in turn."""
    if user % 2 == 0:
        text = " ".join(WORDS[(user * 7 + i + j * j) % len(WORDS)] for j in range(60)) + f" ({user}, {i})"
        return "/lrp_explain_text", ("mamba-lm", text, list(methods), -1,
                                     True, True, True, True, None, ["in_proj", "out_proj", "conv"])
    return "/neuzip_weights", (HEAVY_MODELS[(user + i) % len(HEAVY_MODELS)], 3, "none")


_NUMBER_WITH_UNIT = re.compile(r"\d+(?:[.,]\d+)*\s?(?:s|ms|min|seconds?)\b")


_TIMING_HEADER = re.compile(r"time|seconds|\((?:ms|s)\)", re.I)


def _without_timings(value):
    """``value`` with the timing columns of its tables (gradio's {"headers", "data"}) left out."""
    if isinstance(value, dict):
        if isinstance(value.get("headers"), list) and isinstance(value.get("data"), list):
            keep = [i for i, h in enumerate(value["headers"]) if not _TIMING_HEADER.search(str(h))]
            value = {**value, "headers": [value["headers"][i] for i in keep],
                     "data": [[row[i] for i in keep] for row in value["data"]]}
        return {k: _without_timings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_timings(v) for v in value]
    return value


def normalise(answer, download_root: str) -> str:
    """An answer as text without what legitimately differs between two runs: where the client saved files and
    how long the computation took (timing columns, "1.2 s")."""
    text = json.dumps(_without_timings(answer), default=str, sort_keys=True)
    text = re.sub(re.escape(download_root) + r"[^\"]*", "<file>", text)
    text = re.sub(r"/gradio_api/file=[^\"]*", "<file>", text)
    return _NUMBER_WITH_UNIT.sub("<time>", text)


@dataclass
class LoadRun:
    cheap_latencies: list = field(default_factory=list)
    heavy_latencies: list = field(default_factory=list)
    answers: list = field(default_factory=list)  # (api, inputs, normalised answer or "error: ...")
    peak_rss_mib: float = 0.0


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, MiB (Linux /proc)."""
    total = 0
    pids = [pid]
    try:
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def ask(client, api: str, inputs: tuple, download_root: str, timeout: float) -> str:
    try:
        return normalise(client.submit(*inputs, api_name=api).result(timeout=timeout), download_root)
    except Exception as exc:  # noqa: BLE001 - a failed answer is recorded and compared like any other
        return f"error: {type(exc).__name__}: {exc}"


def run_load(make_client, server_pid: int, download_root: str, *, cheap_users: int = 8, heavy_users: int = 2,
             cheap_calls: int = 3, heavy_calls: int = 1, cheap_max: int = 50, timeout: float = 300,
             heavy_methods=("mambalrp", "gradient_x_input")) -> LoadRun:
    """All users at once, each with its own client; cheap users start once every heavy user has sent a call,
    and keep calling until the heavy ones are done (at least ``cheap_calls``, at most ``cheap_max`` each)."""
    run = LoadRun()
    lock = threading.Lock()
    heavy_done = threading.Event()
    heavy_started = threading.Barrier(heavy_users + 1)
    stop_sampling = threading.Event()

    def sample_memory():
        while not stop_sampling.is_set():
            run.peak_rss_mib = max(run.peak_rss_mib, rss_mib(server_pid))
            time.sleep(0.2)

    def heavy_user(u: int):
        client = make_client()
        heavy_started.wait()
        for i in range(heavy_calls):
            api, inputs = heavy_call(u, i, heavy_methods)
            t0 = time.perf_counter()
            answer = ask(client, api, inputs, download_root, timeout)
            with lock:
                run.heavy_latencies.append(time.perf_counter() - t0)
                run.answers.append((api, inputs, answer))

    def cheap_user(u: int):
        client = make_client()
        i = 0
        while i < cheap_calls or not heavy_done.is_set():
            api, inputs = cheap_call(u, i)
            during = not heavy_done.is_set()  # with heavy users: the calls sent while they run
            t0 = time.perf_counter()
            answer = ask(client, api, inputs, download_root, timeout)
            with lock:
                if heavy_users == 0 or during:
                    run.cheap_latencies.append(time.perf_counter() - t0)
                run.answers.append((api, inputs, answer))
            i += 1
            if i >= cheap_max:
                break

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(cheap_users + heavy_users) as pool:
        heavy = [pool.submit(heavy_user, u) for u in range(heavy_users)]
        heavy_started.wait()
        time.sleep(1.0)  # the heavy calls are in the queue before the cheap users start
        cheap = [pool.submit(cheap_user, u) for u in range(cheap_users)]
        for f in heavy:
            f.result()
        heavy_done.set()
        for f in cheap:
            f.result()
    stop_sampling.set()
    sampler.join()
    return run


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between order statistics."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# ---- a session that loads models while others compute (issue 22) ---------------------------------------------------
LOADED_FOLDERS = ("mathneuro-tiny", "mamba-lm")  # copied under ``root`` and loaded under fresh spellings
MATHNEURO_LAYERS = ("mathneuro-tiny", "arithmetic-words", ["review-sentiment"], 0.03, "mathneuro", 12, "count")


def folder_copies(root: Path) -> list[str]:
    """Copies of the embedded models named in :data:`LOADED_FOLDERS`, as folders a user could type."""
    import shutil

    from core.paths import ASSETS_DIR

    out = []
    for name in LOADED_FOLDERS:
        if not (root / name).exists():
            shutil.copytree(ASSETS_DIR / "models" / name, root / name)
        out.append(str(root / name))
    return out


@dataclass
class LoadingRun:
    """What :func:`run_loading` saw: the computing session's calls, failures and answers unlike the quiet one."""

    calls: int = 0
    failed: list = field(default_factory=list)
    different: list = field(default_factory=list)
    loads: int = 0
    load_failures: list = field(default_factory=list)
    seconds: float = 0.0


def mathneuro_layers_call(i: int) -> tuple:
    """The issue's /mathneuro_layers inputs with K salted by ``i`` so the results cache is missed every time (the
    salt is far below one weight of any matrix: the selection, and so the answer, stays the same)."""
    args = list(MATHNEURO_LAYERS)
    args[3] = MATHNEURO_LAYERS[3] + i * 1e-12
    return tuple(args)


def _layers_answer(answer, download_root: str) -> str:
    """A /mathneuro_layers answer without what a salted K legitimately changes (its downloads' names and the source
    wording), so answers compare by what the page shows."""
    status, figure = answer[0], answer[1]
    return normalise([re.sub(r"\((computed now|from the results cache)\)", "(source)", str(status)), figure],
                     download_root)


def run_loading(make_client, folders: list[str], seconds: float, download_root: str, *, timeout: float = 300,
                quiet_calls: int = 2) -> tuple[LoadingRun, str]:
    """One session calls /model_card on ``folders`` under fresh spellings (``DIR/.``, ``DIR/./.``, ...: every call
    builds a model with ``from_pretrained``) for ``seconds``, while another repeats /mathneuro_layers with a salted K;
    every MathNeuro answer is compared with the quiet one (asked first, with nothing else running).
    Returns the run and the quiet answer."""
    worker, loader = make_client(), make_client()
    quiet = {_layers_answer(worker.predict(*mathneuro_layers_call(-1 - j), api_name="/mathneuro_layers"),
                            download_root) for j in range(quiet_calls)}
    assert len(quiet) == 1, "the quiet answers differ among themselves"
    quiet_answer = quiet.pop()
    run = LoadingRun()
    stop = threading.Event()

    def load_models():
        k = 1
        while not stop.is_set():
            for folder in folders:
                if stop.is_set():
                    break
                try:
                    card = loader.submit(folder + "/." * k, api_name="/model_card").result(timeout=timeout)
                    run.loads += 1
                    if "parameters" not in str(card):
                        run.load_failures.append(f"{folder}/.x{k}: {str(card)[:200]}")
                except Exception as exc:  # noqa: BLE001 - counted
                    run.load_failures.append(f"{folder}/.x{k}: {type(exc).__name__}: {exc}"[:300])
            k += 1

    t0 = time.perf_counter()
    thread = threading.Thread(target=load_models, daemon=True)
    thread.start()
    i = 0
    try:
        while time.perf_counter() - t0 < seconds:
            i += 1
            run.calls += 1
            try:
                answer = worker.submit(*mathneuro_layers_call(i), api_name="/mathneuro_layers").result(timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - counted
                run.failed.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            got = _layers_answer(answer, download_root)
            if got != quiet_answer:
                at = next((j for j, (a, b) in enumerate(zip(got, quiet_answer)) if a != b), 0)
                run.different.append(f"...{got[max(0, at - 80):at + 120]} vs ...{quiet_answer[max(0, at - 80):at + 120]}")
    finally:
        stop.set()
        thread.join(timeout)
        run.seconds = round(time.perf_counter() - t0, 1)
    return run, quiet_answer
