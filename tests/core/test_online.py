"""The online path, end to end through the CLI, against the local hub stand-in (tests/hub.py).

Each command runs as a user runs it (`python -m core --online ...`) with ``HF_ENDPOINT`` pointing at the stand-in
and private caches under ``tmp_path``.
"""
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, online_env
from tests.hub import HubStandIn
from tests.hub_repos import LLAMA_ID, MAMBA_ID, PADDING

pytestmark = pytest.mark.slow


def cli(hub, tmp_path, *args, timeout=180, **env):
    return subprocess.run([sys.executable, "-m", "core", "--online", *args], cwd=REPO, capture_output=True, text=True,
                          env=online_env(hub, tmp_path, **env), timeout=timeout)


def one_clear_line(proc, *words):
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Fix:" in lines[0], proc.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_the_stand_in_answers_like_the_hub(hub_stand_in, tmp_path, monkeypatch):
    from huggingface_hub import HfApi, constants, hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError

    # In-process: an earlier import of core.settings may have switched huggingface_hub offline
    # (its flag is read once, at import); this test talks to the stand-in directly.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    api = HfApi(endpoint=hub_stand_in.url)
    info = api.model_info(MAMBA_ID)
    assert {s.rfilename for s in info.siblings} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert len(info.sha) == 40
    assert set(api.list_repo_files("openai/gsm8k", repo_type="dataset")) >= {"README.md",
                                                                             "main/train-00000-of-00001.parquet"}
    path = hf_hub_download(MAMBA_ID, "config.json", endpoint=hub_stand_in.url, cache_dir=tmp_path)
    assert json.loads(open(path).read())["vocab_size"] > 0
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("nobody/nothing")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(MAMBA_ID, "nope.json", endpoint=hub_stand_in.url, cache_dir=tmp_path)


def test_a_hub_mamba_with_a_padded_vocabulary_loads_with_its_card(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "models", "card", MAMBA_ID, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = json.loads(proc.stdout)
    assert card["source"] == "hub" and card["kind"] == "causal-lm" and card["parameters"] > 0
    assert "have no token" in card["tokenizer"] and card["tokenizer"].count("tokens") == 1
    n = int(card["tokenizer"].split()[0])
    assert f"ids {n}-{n + PADDING - 1} have no token" in card["tokenizer"]


@pytest.mark.parametrize("repo, words", [
    ("layerwise-test/nothing-here", ["has no model repository", "layerwise-test/nothing-here"]),
    ("layerwise-test/no-weights", ["has no safetensors weights"]),
    ("layerwise-test/pickle-only", ["only pickle checkpoints", "--allow-pickle"]),
])
def test_bad_hub_repositories_get_one_clear_line(hub_stand_in, tmp_path, repo, words):
    one_clear_line(cli(hub_stand_in, tmp_path, "models", "card", repo), *words)


def test_a_model_without_a_tokenizer_says_why(hub_stand_in, tmp_path):
    card = json.loads(cli(hub_stand_in, tmp_path, "models", "card", "layerwise-test/no-tokenizer", "--json").stdout)
    assert card["tokenizer"] == "none (layerwise-test/no-tokenizer has no tokenizer files)"
    broken = cli(hub_stand_in, tmp_path, "models", "card", "layerwise-test/broken-tokenizer", "--json")
    card = json.loads(broken.stdout)
    assert card["tokenizer"].startswith("none (the tokenizer (tokenizer.json, tokenizer_config.json) failed to load: ")
    assert "JSONDecodeError" in card["tokenizer"]


def test_the_allow_list_refuses_other_ids(hub_stand_in, tmp_path):
    before = len(hub_stand_in.requests)
    proc = cli(hub_stand_in, tmp_path, "models", "card", LLAMA_ID, LAYERWISE_HUB_MODELS=MAMBA_ID)
    one_clear_line(proc, "not among the hub models", MAMBA_ID)
    assert not [p for _, p in hub_stand_in.requests[before:] if LLAMA_ID in p]  # refused before any download
    ok = cli(hub_stand_in, tmp_path, "models", "card", MAMBA_ID, "--json", LAYERWISE_HUB_MODELS=MAMBA_ID)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_on_a_space_only_the_paper_checkpoints_are_allowed(hub_stand_in, tmp_path):
    proc = cli(hub_stand_in, tmp_path, "models", "card", "layerwise-test/no-tokenizer", SPACE_ID="someone/layerwise")
    one_clear_line(proc, "not among the hub models", MAMBA_ID)


def test_a_hub_that_does_not_answer_gets_a_clear_message_and_caches_nothing(tmp_path):
    silent = HubStandIn(tmp_path / "silent").start()
    silent.hang = True
    try:
        proc = cli(silent, tmp_path, "models", "card", MAMBA_ID, timeout=120)
    finally:
        silent.stop()
    one_clear_line(proc, "did not answer")  # it gave up on its own, within the 120 s the test waits
    snapshots = list((tmp_path / "hf").rglob("snapshots/*/*"))
    assert snapshots == []


@pytest.mark.parametrize("name, field", [("sst2", "text"), ("gsm8k", "answer"), ("wikitext-2", "text"),
                                         ("mmlu-hub", "choices"), ("race", "passage")])
def test_hub_datasets_load_through_datasets(hub_stand_in, tmp_path, name, field):
    proc = cli(hub_stand_in, tmp_path, "data", "show", name, "--split", "test", "-n", "3", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert len(rows) == 3 and all(r.get(field) not in (None, "") for r in rows)


def test_a_missing_hub_dataset_gets_one_clear_line(tmp_path):
    empty = HubStandIn(tmp_path / "empty").start()
    try:
        one_clear_line(cli(empty, tmp_path, "data", "show", "sst2", "--split", "test"), "stanfordnlp/sst2")
    finally:
        empty.stop()
