"""The static site (``python -m core site``) shows the app's own views: one view per tab is compared with what the
app's stage serves for it (chart, caption, status) and with the app's download files; the pages need no network;
a rebuild keeps what it did not write and drops what it no longer builds. tests/e2e/test_site.py opens the whole
site from disk in Chromium."""
import json
import re
import shutil
from pathlib import Path

import gradio as gr
import pytest

import core.examples as ex
from core import site_html
from core.cli import main
from core.site import MANIFEST, build
from ui.stage import build_stage, view_outputs

FIRST = {tab: ex.examples(tab)[0].name for tab in ex.PAPERS}  # one view per tab: each tab's first example


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "public"
    (out / ".git").mkdir(parents=True)  # a Space repository's clone: kept
    report = build(out, only=",".join(f"{t}/{n}" for t, n in FIRST.items()))
    return out, report


@pytest.fixture(scope="module")
def stages():
    with gr.Blocks():
        return {tab: build_stage(tab) for tab in ex.PAPERS}


def figure_in(page: str, ident: str = "figure-0") -> dict:
    found = re.search(rf'<script type="application/json" id="{ident}">(.*?)</script>', page, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_each_tabs_view_is_what_the_app_serves(site, stages):
    """The chart JSON in the lab page and the presenter page is the app's (the stage's plot as Gradio serves it), and
    the caption and status are the stage's, rendered."""
    out, report = site
    assert report["views"] == len(FIRST) and not report["skipped"]
    for tab, name in FIRST.items():
        stage = stages[tab]
        picked, fig, caption, status, link, *_ = view_outputs(stage, ex.default_view(tab, name))
        served = json.loads(stage.plot.postprocess(fig).model_dump()["plot"])
        lab = (out / tab / f"{name}.html").read_text()
        talk = (out / "talk" / tab / f"{name}.html").read_text()
        assert figure_in(lab) == served and figure_in(talk) == served, tab
        assert site_html.markdown(caption) in lab and site_html.markdown(status) in lab
        assert site_html.esc(link) in lab  # the app link of the same view
        assert served["layout"]["title"]["text"]  # a titled chart, not an empty frame


def test_the_downloads_are_the_apps_files(site):
    """Each view's downloads hold the same files as the app's Downloads box (JSON, CSV and Parquet byte for byte; the
    HTML figure the same chart, loading the site's one plotly.js instead of inlining it)."""
    out, _ = site
    manifest = json.loads((out / MANIFEST).read_text())
    for tab, name in FIRST.items():
        res = ex.show(ex.default_view(tab, name))
        app_files = {Path(f).name: Path(f) for f in res.files()}
        mine = {Path(f).name: out / f for f in manifest["views"][f"{tab}/{name}"]["files"]}
        assert set(mine) == set(app_files) and mine, tab
        for file_name, path in mine.items():
            if file_name.endswith(".html"):
                text = path.read_text()
                assert 'src="../../plotly.min.js"' in text and (out / "plotly.min.js").is_file()
                assert len(text) < len(app_files[file_name].read_text()) - 3_000_000  # no inlined copy
            elif not file_name.endswith(".parquet"):
                assert path.read_bytes() == app_files[file_name].read_bytes(), file_name
            else:
                import pandas as pd
                assert pd.read_parquet(path).equals(pd.read_parquet(app_files[file_name]))


def test_pages_need_no_network(site):
    """No page, style or script names an address on the network: plotly.js is the installed package's own copy."""
    import plotly

    out, _ = site
    shipped = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert (out / "plotly.min.js").read_bytes() == shipped.read_bytes()
    for path in [*out.rglob("*.html"), out / "site.css", out / "site.js"]:
        text = path.read_text()
        refs = re.findall(r'(?:src|href)="([^"]+)"', text) + re.findall(r"url\(([^)]+)\)", text)
        remote = [r for r in refs if re.match(r"[a-z]+:", r) and not r.startswith("data:")]
        assert not remote, f"{path.relative_to(out)}: {remote[:3]}"


def test_the_index_lists_every_view_and_the_space_front_matter(site):
    out, _ = site
    index = (out / "index.html").read_text()
    data = json.loads(re.search(r'id="lw-site">(.*?)</script>', index, re.S).group(1))
    assert {t: v["order"] for t, v in data.items()} == {t: [n] for t, n in FIRST.items()}
    for tab, name in FIRST.items():
        assert data[tab]["examples"][name]["talk"] == f"talk/{tab}/{name}.html"
        assert (out / data[tab]["examples"][name]["lab"]).is_file()
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\n") and "\nsdk: static\n" in readme and "\napp_file: index.html\n" in readme
    assert (out / "LICENSE").read_text().startswith((Path(__file__).parents[2] / "LICENSE").read_text()[:200])
    assert "patented" in (out / "models-data.html").read_text() and (out / ".git").is_dir()


def test_a_rebuild_drops_what_it_no_longer_builds_and_refuses_a_foreign_folder(site, tmp_path):
    out, _ = site
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    tab, name = next(iter(FIRST.items()))
    build(copy, only=f"{tab}/{name}")
    others = [t for t in FIRST if t != tab]
    assert (copy / tab / f"{name}.html").is_file() and not any((copy / t).exists() for t in others)
    assert not any((copy / "talk" / t).exists() for t in others) and (copy / ".git" / "HEAD").is_file()
    kept = json.loads((copy / MANIFEST).read_text())
    assert all((copy / rel).exists() for rel in kept["written"])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["site", "--out", str(foreign), "--only", f"{tab}/{name}"]) == 2
    assert main(["site", "--out", str(tmp_path / "new"), "--only", "nope"]) == 2
    assert (foreign / "notes.txt").read_text() == "mine" and not (tmp_path / "new").exists()
