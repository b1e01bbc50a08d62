"""A hostile visitor's heaviest cheap requests against a public app (issue 42), printed as JSON beside their targets.

    python bench/hostile.py                 # a real `python app.py --public`: the image bomb, 200 explanations
    python bench/hostile.py --explanations 50
    python bench/hostile.py --parts bomb    # or temp
    python bench/hostile.py --smoke         # in-process, seconds (CI): the refusal by header, a sweep; meaningless

- **image bomb**: a 13,000 x 13,000 PNG (~740 KB, 169 Mpx) sent to the image explainer: seconds from the call to
  the app's refusal, and the server's resident memory (VmRSS) and peak (VmHWM) before and after (target: under a
  second, the memory unchanged). Beside it, in a fresh process each, what decoding it costs (peak RSS): the grey
  image as PIL reads it, and the path the app took before (Gradio's numpy RGB array, then the float32 copy).
- **temp folder**: ``--explanations`` distinct text explanations (each writes its downloads, ~4.85 MB with the HTML
  figure, into Gradio's temp folder): the folder's size after each, its largest, and once the last sweep has run,
  against the cap (``LAYERWISE_MAX_TEMP_MB``, default 512; target: under the cap).

Each part records the machine (CPU model, torch's CPU capability) and its load average.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.pngs import png_bomb  # noqa: E402  (a PNG of a given size, written row block by row block)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def machine() -> dict:
    import torch

    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "python": platform.python_version()}


def memory_mib(pid: int) -> dict:
    fields = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in ln)
    return {k: round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM")}


def call(url: str, api: str, data: list) -> tuple[str, str, float]:
    """(event, answer, seconds) of one call over plain HTTP."""
    base = f"{url.rstrip('/')}/gradio_api/call/{api}"
    t0 = time.perf_counter()
    request = urllib.request.Request(base, json.dumps({"data": data}).encode(), {"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=600).read())["event_id"]
    event, payload = "none", ""
    for line in urllib.request.urlopen(f"{base}/{event_id}", timeout=600).read().decode().splitlines():
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: ") and event in ("complete", "error"):
            payload = line[6:]
    return event, payload, time.perf_counter() - t0


def upload(url: str, path: Path) -> str:
    body = (b"--B\r\nContent-Disposition: form-data; name=\"files\"; filename=\"" + path.name.encode() +
            b"\"\r\nContent-Type: image/png\r\n\r\n" + path.read_bytes() + b"\r\n--B--\r\n")
    request = urllib.request.Request(f"{url.rstrip('/')}/gradio_api/upload", body,
                                     {"Content-Type": "multipart/form-data; boundary=B"})
    return json.loads(urllib.request.urlopen(request, timeout=600).read())[0]


IMAGE_ARGS = [0, ["mambalrp"], -1, True, True, True, True, None, ["in_proj"]]


def image_bomb(url: str, pid: int, folder: Path, reps: int) -> dict:
    bomb, digit = png_bomb(folder / "bomb.png"), png_bomb(folder / "digit.png", 56, 56)
    file = {"meta": {"_type": "gradio.FileData"}}
    call(url, "lrp_explain_image", ["vision-mamba-mnist", {**file, "path": upload(url, digit)}, *IMAGE_ARGS])
    before, seconds, answers = memory_mib(pid), [], set()
    for _ in range(reps):
        event, answer, s = call(url, "lrp_explain_image", ["vision-mamba-mnist", {**file, "path": upload(url, bomb)},
                                                           *IMAGE_ARGS])
        seconds.append(s)
        answers.add(f"{event}: {answer[:160]}")
    after = memory_mib(pid)
    return {"image_bomb": {"pixels": 13_000 ** 2, "file_bytes": bomb.stat().st_size, "answers": sorted(answers),
                           "refusal_s_median": round(statistics.median(seconds), 3),
                           "refusal_s": [round(s, 3) for s in seconds], "server_before_mib": before,
                           "server_after_mib": after,
                           "rss_change_mib": round(after["VmRSS"] - before["VmRSS"], 1),
                           "peak_change_mib": round(after["VmHWM"] - before["VmHWM"], 1),
                           "target_refusal_s": 1.0, "target_peak_change_mib": 0},
            "image_bomb_decoded": decode_costs(bomb)}


DECODE = {"grey (PIL)": "from PIL import Image; Image.MAX_IMAGE_PIXELS = None; im = Image.open(P); im.load()",
          "before issue 42 (numpy RGB, float32)": (
              "import numpy as np; from PIL import Image; Image.MAX_IMAGE_PIXELS = None; "
              "a = np.asarray(Image.open(P).convert('RGB')); f = a.astype(np.float32).mean(-1)")}


def decode_costs(bomb: Path) -> dict:
    """Peak RSS (MiB) of a fresh process that decodes ``bomb`` each way, beside one that only reads its header."""
    out = {}
    for name, code in {"header only": "from PIL import Image; im = Image.open(P); im.size", **DECODE}.items():
        probe = (f"P = {str(bomb)!r}; {code}; "  # VmHWM: ru_maxrss would report this process's high water (fork)
                 "print([ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0])")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
        out[name] = round(int(done.stdout.split()[-1]) / 1024, 1) if done.returncode == 0 else done.stderr[-200:]
    return {"peak_rss_mib": out}


def temp_folder(url: str, temp: Path, explanations: int) -> dict:
    from ui.tempfolder import GRACE_SECONDS, SWEEP_SECONDS, folder_bytes, max_temp_bytes

    sizes, seconds = [], []
    for i in range(explanations):
        event, _, s = call(url, "lrp_explain_text", ["mamba-sentiment", f"Review {i}: a film with a good score.",
                                                     ["gradient_x_input"], -1, True, True, True, True, None,
                                                     ["in_proj"]])
        assert event == "complete", event
        sizes.append(folder_bytes(temp))
        seconds.append(s)
    time.sleep(GRACE_SECONDS + SWEEP_SECONDS + 1)
    cap = max_temp_bytes()
    return {"temp_folder": {"explanations": explanations, "cap_mb": cap / 1e6,
                            "largest_mb": round(max(sizes) / 1e6, 1), "after_last_sweep_mb": round(
                                folder_bytes(temp) / 1e6, 1), "mb_every_10": [round(s / 1e6, 1) for s in sizes[9::10]],
                            "written_per_explanation_mb": round(4.85, 2), "explanation_s_median": round(
                                statistics.median(seconds), 3), "target": "after_last_sweep_mb <= cap_mb"}}


def serve(root: Path, **env_extra):
    from tests.conftest import free_port, linked_home, wait_http

    home = linked_home(root / "home")
    (root / "gradio").mkdir(exist_ok=True)
    env = {**os.environ, "LAYERWISE_HOME": str(home), "GRADIO_TEMP_DIR": str(root / "gradio"), "PYTHONUNBUFFERED": "1",
           "LAYERWISE_ONLINE": "0", **env_extra}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--public", "--port", str(port)], cwd=REPO, env=env,
                            stdout=open(root / "app.log", "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_http(url, 300)
    return proc, url


def smoke() -> dict:
    """In-process, seconds: the header refusal of a bomb and a sweep of a small folder (figures meaningless)."""
    from core.errors import BadInputError
    from core.lrp.inputs import prepare_image
    from ui.tempfolder import sweep

    with tempfile.TemporaryDirectory(prefix="layerwise-hostile-") as tmp:
        bomb = png_bomb(Path(tmp) / "bomb.png", rows=4)
        t0 = time.perf_counter()
        try:
            prepare_image(str(bomb))
            refused = False
        except BadInputError:
            refused = True
        seconds = time.perf_counter() - t0
        folder = Path(tmp) / "temp"
        folder.mkdir()
        for i in range(5):
            (folder / f"{i}.html").write_bytes(b"x" * 1000)
            os.utime(folder / f"{i}.html", (time.time() - 100 + i, time.time() - 100 + i))
        swept = sweep(folder, max_bytes=2500, grace=10)
    return {"image_bomb": {"refused": refused, "refusal_s_median": round(seconds, 4)}, "temp_folder": swept,
            "mode": "smoke", "timings_meaningful": False,
            "timing_note": "smoke run: in-process, one header read and one sweep of five files; the figures are "
                           "meaningless"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--explanations", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3, help="image bomb calls (median)")
    ap.add_argument("--parts", nargs="+", choices=("bomb", "temp"), default=["bomb", "temp"])
    ap.add_argument("--smoke", action="store_true", help="in-process, seconds (CI); the figures are meaningless")
    args = ap.parse_args()
    out = {"machine": machine(), "load_average_at_start": load()}
    if args.smoke:
        out.update(smoke())
    else:
        with tempfile.TemporaryDirectory(prefix="layerwise-hostile-") as tmp:
            root = Path(tmp)
            proc, url = serve(root)
            try:
                if "bomb" in args.parts:
                    out.update(image_bomb(url, proc.pid, root, args.reps))
                    out["load_average_after_bomb"] = load()
                if "temp" in args.parts:
                    out.update(temp_folder(url, root / "gradio", args.explanations))
            finally:
                proc.terminate()
                proc.wait(30)
    out["load_average_at_end"] = load()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
