"""The README's pictures: start the real app, open each tab in headless Chromium and save one small PNG per tab
into ``docs/images/`` (``tab-<tab>.png``).

    python tools/screenshots.py [--out docs/images] [--width 1280] [--height 800] [--scale 0.75] [--only lrp,neuzip]

Why here and not ``python -m core ...``: it starts the app (``app.py``, above ``core`` in the one-way imports) and
drives a browser through playwright (a test dependency), while ``core`` and its command line never import the UI or
a browser. It is a maintainer's tool, like ``bench/``, but it measures nothing.

The app runs on a free port of 127.0.0.1 with a private ``LAYERWISE_HOME`` (the prepared datasets and models linked
in), so the user's results cache is neither read nor written, and every view is the committed precomputed one.
Each screenshot is taken at ``--width`` x ``--height``, scaled by ``--scale`` and stored as a 256-colour PNG (about
100 KB). Needs Debian's chromium (``apt-get install -y chromium``) and ``pip install -r requirements-dev.txt``.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# tab id -> (the link that opens it, what must be drawn before the picture is taken: selector, text in it)
SHOTS = {
    "models-data": ("?tab=models_data", "#datasets-table", "movie-sentiment"),
    "mambalrp": ("?tab=lrp&example=sentiment-1&view=talk", "#lrp-stage-plot .gtitle", ""),
    "mathneuro": ("?tab=mathneuro&example=effect&view=talk", "#mathneuro-stage-plot .gtitle", ""),
    "mixln": ("?tab=mixln&example=compare&view=talk", "#mixln-stage-plot .gtitle", ""),
    "neuzip": ("?tab=neuzip&example=tradeoff&view=talk", "#neuzip-stage-plot .gtitle", ""),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_home(root: Path) -> Path:
    """A LAYERWISE_HOME with the user's prepared datasets and models linked in and its own results cache."""
    sys.path.insert(0, str(REPO))
    from core.paths import data_dir, models_dir

    home = root / "layerwise"
    home.mkdir(parents=True)
    (home / "data").symlink_to(data_dir(), target_is_directory=True)
    (home / "models").symlink_to(models_dir(), target_is_directory=True)
    return home


def wait_http(url: str, timeout: float = 180) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"error: the app did not answer at {url} within {timeout:.0f} s")


def small_png(png: bytes, scale: float) -> bytes:
    """``png`` scaled by ``scale`` (Lanczos) and reduced to a 256-colour palette."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    if scale != 1:
        img = img.resize((round(img.width * scale), round(img.height * scale)), Image.LANCZOS)
    out = io.BytesIO()
    img.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, "PNG",
                                                                                              optimize=True)
    return out.getvalue()


def take(url: str, out: Path, only: list[str], width: int, height: int, scale: float) -> list[Path]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: chromium is not installed. Fix: apt-get install -y chromium")
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(120_000)
        for name in only:
            link, selector, text = SHOTS[name]
            page.goto(url + link)
            page.locator(selector).filter(has_text=text).first.wait_for()
            page.wait_for_timeout(1500)  # let plotly finish its transitions and Gradio its layout
            path = out / f"tab-{name}.png"
            path.write_bytes(small_png(page.screenshot(), scale))
            print(f"{path.relative_to(REPO) if REPO in path.parents else path}: {path.stat().st_size:,} bytes")
            written.append(path)
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--scale", type=float, default=0.75, help="downscale factor of the saved PNG")
    parser.add_argument("--only", default=",".join(SHOTS), help=f"comma-separated, of {', '.join(SHOTS)}")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SHOTS]
    if unknown or not only:
        print(f"error: unknown screenshot(s) {unknown}. Fix: pick from {', '.join(SHOTS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="layerwise-screenshots-") as tmp:
        port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "LAYERWISE_HOME": str(private_home(Path(tmp))),
               "GRADIO_TEMP_DIR": str(Path(tmp) / "gradio"), "TMPDIR": tmp}
        with open(Path(tmp) / "app.log", "w") as log:
            app = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
            try:
                wait_http(f"http://127.0.0.1:{port}/")
                take(f"http://127.0.0.1:{port}/", args.out, only, args.width, args.height, args.scale)
            finally:
                app.terminate()
                try:
                    app.wait(15)
                except subprocess.TimeoutExpired:
                    app.kill()
                    app.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
