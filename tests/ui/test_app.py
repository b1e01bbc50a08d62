"""The app as a client sees it: every event has an API name, the API answers, bad input is an error
message and the app keeps serving."""
import pytest

import app
from tests.conftest import gradio_client
from ui import TABS, build_app


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_every_event_has_an_api_name():
    demo = build_app()
    user_events = [d for d in demo.config["dependencies"] if d["targets"][0][1] != "load"]
    assert len(user_events) >= 6
    for dep in user_events:  # load events (callable initial values) are named by gradio itself
        assert dep["api_name"] and not dep["api_name"].startswith("lambda"), dep


def test_one_tab_per_ui_module():
    import importlib
    for name in TABS:
        module = importlib.import_module(name)
        assert module.TITLE and callable(module.build)


def test_launch_defaults_are_safe():
    args = app.parse_args([])
    assert args.host == "127.0.0.1" and not args.share and not args.online


@pytest.fixture(scope="module")
def client(app_url):
    return gradio_client(app_url)


@pytest.mark.slow  # over 5 s on the 2-core machine with the app it builds (docs/testing.md)
def test_api_lists_and_samples(client):
    card = client.predict("smollm2-135m", api_name="/registered_model_card")
    assert "134.52 M" in card and "ready" in card
    info, rows, grid = client.predict("logiqa", "test", 2, api_name="/dataset_sample")
    assert "page 2 of 12" in info
    assert len(rows["value"]["data"]) == 12 and set(rows["value"]["headers"]) >= {"question", "choices", "answer"}
    info, rows, grid = client.predict("mnist-5k", "validation", 1, api_name="/dataset_sample")
    assert "500 records" in info and len(grid["value"]) == 12


def test_api_prepare_is_idempotent(client):
    log, models, datasets = client.predict(api_name="/prepare_missing")
    assert log == "Everything was already ready."
    assert {"movie-sentiment", "mmlu"} <= {row[0] for row in datasets["data"]}


def test_api_bad_input_is_a_message_and_the_app_keeps_serving(client):
    with pytest.raises(Exception) as err:
        client.predict("/no/such/model", api_name="/model_card")
    assert "Fix" in str(err.value) or "not a registered model" in str(err.value)
    with pytest.raises(Exception):
        client.predict("no-such-dataset", "test", 1, api_name="/dataset_sample")
    info, _, _ = client.predict("mmlu", "test", 1, api_name="/dataset_sample")
    assert "1404 records" in info


def test_fresh_machine_page_says_what_to_run(tmp_path, monkeypatch):
    from core.data import registry
    from ui.tabs import models_data

    monkeypatch.setenv("LAYERWISE_HOME", str(tmp_path))
    registry._load_all.cache_clear()
    try:
        info, _, _ = models_data.first_sample()
        assert "python -m core data prepare --only movie-sentiment" in info
        table = models_data.models_table()
        row = table[table["model"] == "smollm2-135m"].iloc[0]
        assert row["status"] == "missing" and row["how to get it"] == "python -m core models prepare smollm2-135m"
    finally:
        registry._load_all.cache_clear()
