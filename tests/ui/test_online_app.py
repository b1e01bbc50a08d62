"""The app with ``--online`` against the local hub stand-in: every tab's main action on the papers' hub ids, the
allow-list offered in the pickers and enforced, and bad hub input as one clear message while the app keeps serving.
"""
import subprocess
import sys

import pytest

from tests.conftest import REPO, free_port, gradio_client, online_env, stop_process, wait_http
from tests.hub_repos import LLAMA_ID, MAMBA_ID

pytestmark = pytest.mark.slow
ALLOWED = [MAMBA_ID, LLAMA_ID, "layerwise-test/nothing-here"]


@pytest.fixture(scope="module")
def client(hub_stand_in, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("online-app")
    env = online_env(hub_stand_in, tmp, LAYERWISE_HUB_MODELS=",".join(ALLOWED), GRADIO_TEMP_DIR=tmp / "gradio")
    port = free_port()
    log = open(tmp / "app.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py", "--online", "--port", str(port)], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url, 180)
        yield gradio_client(url, download_files=str(tmp / "downloads"))
    finally:
        stop_process(proc)
        log.close()


def _choices(client, endpoint: str, param: str) -> str:
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"][endpoint]
    return next(p["python_type"]["type"] for p in api["parameters"] if p["parameter_name"] == param)


def test_the_pickers_offer_the_allowed_hub_ids(client):
    header = _choices(client, "/model_card", "ref")
    assert all(i in header for i in ALLOWED)
    lrp = _choices(client, "/lrp_explain_text", "model")
    assert MAMBA_ID in lrp and LLAMA_ID not in lrp


def test_the_header_card_of_the_hub_mamba(client):
    card = client.predict(MAMBA_ID, api_name="/model_card")
    assert "hub" in card and "have no token" in card


def test_mambalrp_tab_explains_the_hub_mamba(client):
    out = client.predict(MAMBA_ID, "The quick brown fox jumps over the lazy dog", ["mambalrp"], -1, True, True, True,
                         True, None, ["in_proj", "out_proj", "conv"], api_name="/lrp_explain_text")
    status = out[0]
    assert MAMBA_ID in status and "sum of relevances" in status


def test_mathneuro_tab_on_the_hub_llama(client):
    out = client.predict(LLAMA_ID, "arithmetic-words", ["review-sentiment"], 0.05, "mathneuro", 8, "count",
                         api_name="/mathneuro_layers")
    assert "review-sentiment" in out[0] and "of 81,920 selected" in out[0]  # the tiny Llama's linear weights


def test_mixln_tab_angular_distance_of_the_hub_llama(client):
    out = client.predict(LLAMA_ID, 2, api_name="/mixln_model_angular")
    plot = out["plot"] if isinstance(out, dict) else str(out)
    assert "SmolLM2-135M" in plot and "heatmap" in plot


def test_neuzip_tab_on_the_hub_llama(client):
    out = client.predict(LLAMA_ID, 7, "none", api_name="/neuzip_weights")
    assert LLAMA_ID in out[0] and "bits" in out[0]


@pytest.mark.parametrize("ref, words", [("layerwise-test/nothing-here", "has no model repository"),
                                        ("someone/not-allowed", "not among the hub models")])
def test_bad_hub_ids_get_one_clear_message_and_the_app_keeps_serving(client, ref, words):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as err:
        client.predict(ref, api_name="/model_card")
    assert words in str(err.value) and "Traceback" not in str(err.value)
    assert "hub" in client.predict(MAMBA_ID, api_name="/model_card")
