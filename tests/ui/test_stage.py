"""The stage above each paper's tab and the presenter view's page script, without a browser (tests/e2e/test_talk.py
drives them in Chromium, the charts' slide export included)."""
import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

import app
import core.examples as ex
from tests.conftest import gradio_client
from ui.talk import SLIDE, head, plotly_chunk


@pytest.fixture(scope="module")
def demo():
    from ui import build_app

    return build_app()


@pytest.fixture(scope="module")
def config(demo):
    return demo.config


def test_each_paper_tab_opens_with_its_examples_listed_from_the_registry(config):
    by_id = {c["props"].get("elem_id"): c for c in config["components"] if c["props"].get("elem_id")}
    for tab, examples in ex.registry().items():
        picker = by_id[f"{tab}-examples"]
        assert [c[1] for c in picker["props"]["choices"]] == [e.name for e in examples]
        assert [c[0] for c in picker["props"]["choices"]] == [e.title for e in examples]
        assert picker["props"]["value"] == examples[0].name
        plot = json.loads(by_id[f"{tab}-stage-plot"]["props"]["value"]["plot"])
        first = ex.show(ex.default_view(tab))
        assert plot["layout"]["title"]["text"] == first.figures[examples[0].figure].layout.title.text
        assert by_id[f"{tab}-link"]["props"]["value"] == ex.default_view(tab).query()


def test_the_page_holds_every_precomputed_view_as_its_link_draws_it(demo):
    from ui.links import CONFIG_KEY, publish

    assert CONFIG_KEY not in demo.config  # the app's start does not wait for them
    publish(demo)
    data = demo.config[CONFIG_KEY]
    by_id = {c["id"]: c["props"].get("elem_id") for c in demo.config["components"]}
    for tab, examples in ex.registry().items():
        assert data[tab]["order"] == [e.name for e in examples]
        for e in examples:
            view = ex.default_view(tab, e.name)
            shown = {by_id[p["id"]]: p for p in data[tab]["examples"][e.name]["props"]}
            assert shown[f"{tab}-examples"]["value"] == e.name
            assert shown[f"{tab}-link"]["value"] == view.query()
            title = json.loads(shown[f"{tab}-stage-plot"]["value"]["plot"])["layout"]["title"]["text"]
            assert title == ex.show(view).figures[e.figure].layout.title.text
            linked = {k: v for k, v in parse_qsl(view.query()[1:]) if k not in ("tab", "example")}
            assert data[tab]["examples"][e.name]["inputs"] == linked


def test_the_page_script_sets_the_view_and_preloads_gradios_plotly():
    import gradio

    lab, talk = head(), head(talk=True)
    assert 'params.get("view") || "lab"' in lab and 'params.get("view") || "talk"' in talk
    chunk = plotly_chunk()
    assert chunk and (Path(gradio.__file__).parent / "templates" / "frontend" / chunk).is_file()
    assert json.dumps(chunk) in lab and json.dumps(SLIDE) in lab and "toImageButtonOptions" in lab
    assert SLIDE == {"width": 960, "height": 540, "scale": 2}  # 16:9, the PNG 1920 x 1080 pixels
    assert "ArrowLeft" in lab and "ArrowRight" in lab


def test_talk_flag():
    assert app.parse_args(["--talk"]).talk and not app.parse_args([]).talk


@pytest.fixture(scope="module")
def client(app_url):
    return gradio_client(app_url)


def test_picking_an_example_answers_its_view(client):
    out = client.predict("tradeoff", api_name="/neuzip_example")
    name, plot, caption, status, link = out[:5]
    assert name == "tradeoff" and "Memory vs perplexity" in json.loads(plot["plot"])["layout"]["title"]["text"]
    assert "precomputed" in caption and link == "?tab=neuzip&example=tradeoff&model=smollm2-135m&B=128&log=0"


def test_a_bad_pick_is_one_message(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="'nope'.* is not in the list of choices: \\['bits', 'tradeoff'"):
        client.predict("nope", api_name="/neuzip_example")


def test_the_stage_inputs_answer_bad_values_with_one_message(demo):
    """The inputs' handlers (undocumented endpoints: the tabs' buttons are the API for computing) refuse what
    core.examples cannot read, before anything runs."""
    import gradio as gr

    import inspect

    stage = demo.layerwise_stages["neuzip"]
    block = next(f for f in demo.fns.values() if f.api_name == "neuzip_example_k_choice")
    change = block.fn
    # Gradio hands a handler its request and progress through positional parameters only
    assert [p.name for p in inspect.signature(change).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD] == ["shown", "request", "progress"]
    good = {"model": "smollm2-135m", "k": "7", "B": "none", "log": False}

    def shown(example, values):
        return {stage.picker: example, **{c: values[p.name] for p, c in stage.controls.items()}}
    for example, name, bad, words in (("bits", "k", "9", "k=9 is not one of 7, 3, 1, 0"),
                                      ("bits", "B", "100", "B=100 is not one of none"),
                                      ("tradeoff", "log", None, "log=None is not 0 or 1"),
                                      ("throughput", "k", None, "k=None is not one of"),
                                      ("bits", "B", "64", "B=64 with k=7: B applies to k < 7 only")):
        with pytest.raises(gr.Error, match=re.escape(words)):
            change(shown(example, {**good, name: bad}))
    with pytest.raises(gr.Error, match="neuzip has no example"):
        change(shown("nope", good))
    out = change(shown("bits", good))  # the precomputed view, at once
    assert out[0] == "bits" and "precomputed" in out[2]


@pytest.mark.slow
def test_the_app_starts_on_a_machine_not_set_up_yet(tmp_path):
    """Before `models prepare` the NeuZip examples other than training cannot be drawn (their model's weights are
    missing): the app still builds, its stage says what to run, and every other tab's precomputed views are in the
    page."""
    import subprocess
    import sys

    script = ("from core.settings import configure; configure(False)\n"
              "import json, ui\nfrom ui.links import publish\n"
              "d = ui.build_app(); publish(d, print)\n"
              "shown = {c['props'].get('elem_id'): c['props'].get('value') for c in d.config['components']}\n"
              "print(json.dumps({'caption': shown['neuzip-stage-caption'], 'status': shown['neuzip-stage-status'],"
              " 'links': {t: sorted(v['examples']) for t, v in d.config['layerwise_links'].items()}}))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], text=True,
                         capture_output=True, timeout=600, env={**os.environ, "LAYERWISE_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "not available yet" in got["caption"]
    assert "python -m core models prepare smollm2-135m" in got["status"]
    # the training comparison is drawn from its committed runs alone (assets/neuzip/training.json); the other
    # NeuZip examples need the model's weights
    assert got["links"]["neuzip"] == ["training", "training-loss"]
    # SmolLM2-135M's MambaLRP views (its own, its layer flow, beside mamba-lm) need its weights too
    smollm2 = {"smollm2-1", "smollm2-2", "flow-smollm2-1", "compare-1", "compare-2"}
    assert got["links"]["lrp"] == sorted(e.name for e in ex.examples("lrp") if e.name not in smollm2)
    for tab in ("mathneuro", "mixln"):
        assert got["links"][tab] == sorted(e.name for e in ex.examples(tab))
