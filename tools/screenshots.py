"""The README's and the docs' pictures of the views: start the real app, open each pictured view in headless Chromium
and save one small PNG per picture into ``docs/images/``, and record beside them what each picture shows.

    python tools/screenshots.py                  # every picture (the one command after a view changed)
    python tools/screenshots.py --only mixln     # one picture
    python tools/screenshots.py --check          # which pictures show an older version of their view (exit 1)

``tools/screenshots.json`` holds, for each picture, the link of the view it shows and a *fingerprint* of that view as
it was when the picture was taken: the sha256 of the chart's JSON and its caption (a paper's view), or of the
registries' tables (Models & data). ``tests/test_docs.py`` computes the fingerprints of the current views (cheap: the
precomputed results, no browser) and fails, naming the picture and this command, when a view changed and its
picture did not.

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
# picture -> (its file in docs/images, the link that opens it, what must be drawn before it is taken: selector, text in
# it, and the element to photograph: None for the page)
SHOTS = {
    "models-data": ("tab-models-data.png", "?tab=models_data", "#datasets-table", "movie-sentiment", None),
    "mambalrp": ("tab-mambalrp.png", "?tab=lrp&example=sentiment-1&view=talk", "#lrp-stage-plot .gtitle", "", None),
    "mathneuro": ("tab-mathneuro.png", "?tab=mathneuro&example=effect&view=talk", "#mathneuro-stage-plot .gtitle", "",
                  None),
    "mixln": ("tab-mixln.png", "?tab=mixln&example=compare&view=talk", "#mixln-stage-plot .gtitle", "", None),
    "neuzip": ("tab-neuzip.png", "?tab=neuzip&example=tradeoff&view=talk", "#neuzip-stage-plot .gtitle", "", None),
    "neuzip-training": ("tab-neuzip-training.png", "?tab=neuzip&example=training&view=talk",
                        "#neuzip-stage-plot .gtitle", "Peak memory", None),
    "mambalrp-ssm2-flow": ("mambalrp-ssm2-flow.png", "?tab=lrp&example=flow-1&view=lab", "#lrp-stage-plot .gtitle",
                           "Where the relevance", "#lrp-stage-plot"),
}
RECORD = REPO / "tools" / "screenshots.json"


def fingerprint(link: str) -> str:
    """What a picture shows, as one hash: the chart's JSON and caption of a paper's view (the precomputed one its
    link opens), or the registries' model and dataset tables for Models & data."""
    import hashlib
    import json
    from urllib.parse import parse_qsl

    sys.path.insert(0, str(REPO))
    import core.examples as ex

    opened = ex.resolve(dict(parse_qsl(link.lstrip("?"))), {t: t for t in (*ex.PAPERS, "models_data")})
    if opened.view is not None:
        res = ex.show(opened.view)
        payload = res.figures[opened.view.example.figure].to_json() + opened.view.caption(res)
    else:
        from core.notices import dataset_rows, model_rows
        payload = json.dumps([model_rows(), dataset_rows()], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def recorded() -> dict:
    import json

    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


def stale() -> list[str]:
    """One line per picture whose view changed since it was taken (or that was never recorded), naming the command
    that takes it again."""
    import hashlib

    record, out = recorded(), []
    for name, (file, link, *_rest) in SHOTS.items():
        entry = record.get(name, {})
        image = REPO / "docs" / "images" / file
        if not entry or entry.get("link") != link:
            out.append(f"docs/images/{file} has no fingerprint of {link}")
        elif entry.get("view") != fingerprint(link):
            out.append(f"docs/images/{file} shows an older version of the view {link}")
        elif not image.is_file() or entry.get("image") != hashlib.sha256(image.read_bytes()).hexdigest():
            out.append(f"docs/images/{file} is not the picture tools/screenshots.py took of {link}")
        else:
            continue
        out[-1] += f". Fix: python tools/screenshots.py --only {name}"
    return out


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


def wait_http(url: str, timeout: float = 600) -> None:  # a loaded shared machine starts the app slowly
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
            file, link, selector, text, element = SHOTS[name]
            page.goto(url + link)
            page.locator(selector).filter(has_text=text).first.wait_for()
            page.wait_for_timeout(1500)  # let plotly finish its transitions and Gradio its layout
            path = out / file
            shot = page.locator(element).first.screenshot() if element else page.screenshot()
            path.write_bytes(small_png(shot, scale))
            print(f"{path.relative_to(REPO) if REPO in path.parents else path}: {path.stat().st_size:,} bytes")
            written.append(path)
        browser.close()
    return written


def record(names: list[str], out: Path) -> None:
    """Write the fingerprints of the pictures just taken into tools/screenshots.json (the others kept)."""
    import hashlib
    import json

    entries = recorded()
    for name in names:
        file, link, *_rest = SHOTS[name]
        entries[name] = {"image": hashlib.sha256((out / file).read_bytes()).hexdigest(), "link": link,
                         "view": fingerprint(link)}
    RECORD.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--scale", type=float, default=0.75, help="downscale factor of the saved PNG")
    parser.add_argument("--only", default=",".join(SHOTS), help=f"comma-separated, of {', '.join(SHOTS)}")
    parser.add_argument("--check", action="store_true", help="list the pictures older than their views (exit 1)")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        print("\n".join(problems) or "every picture shows its view as it is now")
        return 1 if problems else 0
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
                if args.out.resolve() == (REPO / "docs" / "images").resolve():
                    record(only, args.out)
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
