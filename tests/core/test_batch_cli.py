"""Batch runs of the real analyses: ``python -m core lrp batch`` killed (SIGKILL) mid-run resumes without recomputing a
finished row, proven by counting computations (the results-cache entries a run adds and the rows it reports as
computed); every row equals the single request (which the batch cached); the MathNeuro and NeuZip kinds agree with
their own services."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

import core.mathneuro as mathneuro
import core.neuzip as neuzip
from core import batch
from core.zoo import registered_names
from tests.conftest import REPO, linked_home

pytestmark = pytest.mark.slow
needs = pytest.mark.skipif(not {"mamba-sentiment", "mathneuro-tiny"} <= set(registered_names()),
                           reason="embedded models not committed")
ADJECTIVES = ["dull", "bright", "slow", "witty", "flat", "moving", "clumsy", "tender"]


def _texts(n: int) -> list[str]:
    return [f"The {ADJECTIVES[i % 8]} story of film {i} is {ADJECTIVES[(3 * i + 1) % 8]}." for i in range(n)]


def _cli(home, *args, **popen):
    env = {**os.environ, "LAYERWISE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "core", "lrp", "batch", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _entries(home) -> set[str]:
    return {p.name for p in (home / "results").glob("lrp-text-*.safetensors")}


@needs
def test_killed_batch_resumes_without_recomputing_finished_rows(tmp_path):
    home = linked_home(tmp_path / "home")
    texts = _texts(40)
    source, out = tmp_path / "texts.csv", tmp_path / "results.parquet"
    pd.DataFrame({"text": texts, "id": [f"r{i}" for i in range(40)]}).to_csv(source, index=False)
    args = ["--model", "mamba-sentiment", "--in", str(source), "--out", str(out), "--chunk", "4", "--threads", "1",
            "--json"]
    first = _cli(home, *args)
    parts = batch.parts_dir(out)
    deadline = time.time() + 240
    while len(list(parts.glob("part-*.parquet"))) < 3 and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    finished = batch.finished_rows(parts)
    assert 12 <= len(finished) < 40 and finished == set(range(len(finished)))  # whole parts, in input order
    computed_first = _entries(home)  # what the killed run computed (its unflushed rows too: they were cached)
    assert len(computed_first) >= len(finished)

    second = _cli(home, *args)
    stdout, stderr = second.communicate(timeout=600)
    assert second.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["finished_before"] == len(finished) and summary["done_now"] == 40 - len(finished)
    assert summary["attempt"] == 2 and summary["errors"] == 0
    # counting computations: the second run computed exactly the rows no part held and the killed run had not
    # cached, and added exactly that many cache entries; a finished row was neither computed nor looked up again
    added = _entries(home) - computed_first
    assert summary["computed"] == len(added) == 40 - len(computed_first)
    assert summary["cache"] == len(computed_first) - len(finished)
    result = pd.read_parquet(out)
    assert list(result["index"]) == list(range(40)) and list(result["text"]) == texts
    assert list(result["id"]) == [f"r{i}" for i in range(40)]
    assert set(result.index[result["attempt"] == 1]) == finished
    meta = batch.read_meta(out)
    assert meta["settings"]["model"] == "mamba-sentiment" and meta["input"]["rows"] == 40
    assert set(result["model"]) == {"mamba-sentiment"} and not parts.exists()
    # a row is the single request, which the batch cached for it
    os.environ["LAYERWISE_HOME"], old = str(home), os.environ.get("LAYERWISE_HOME")
    try:
        from core import runner
        from core.cache import ResultsCache
        from core.lrp import text_result

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(runner, "results_cache", lambda: ResultsCache(home / "results"))
            single = text_result("mamba-sentiment", texts[5], ["mambalrp"])
    finally:
        os.environ.pop("LAYERWISE_HOME") if old is None else os.environ.__setitem__("LAYERWISE_HOME", old)
    assert single.source == "cache"
    assert list(result.loc[5, "mambalrp_relevance"]) == single.data["methods"]["mambalrp"]["relevance"]
    assert list(result.loc[5, "tokens"]) == single.data["tokens"]
    rel = single.data["methods"]["mambalrp"]["relevance"]
    assert abs(sum(rel) - result.loc[5, "mambalrp_logit"]) < 1e-4  # conservation holds row by row


@needs
def test_bad_input_on_the_command_line_is_one_message_and_exit_code_2(tmp_path):
    home = linked_home(tmp_path / "home")
    (tmp_path / "in.csv").write_text("words\nhello\n")
    proc = _cli(home, "--in", str(tmp_path / "in.csv"), "--out", str(tmp_path / "o.parquet"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "no 'text' column" in err and "Traceback" not in err


@needs
def test_mathneuro_prompt_scores_equal_the_losses_measured_directly(tmp_path):
    from core.mathneuro.evaluation import teacher_forced_loss
    from core.mathneuro.interventions import intervened_view
    from core.mathneuro.service import load, masks_for

    prompts = ["Question: What is 3 plus 4?\nAnswer: 7", "The film was a quiet delight.", ""]
    source = tmp_path / "p.jsonl"
    source.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts))
    summary = batch.run(mathneuro.BATCH, source, tmp_path / "s.parquet", n=3, proportion=0.05)
    out = pd.read_parquet(tmp_path / "s.parquet")
    lm = load("mathneuro-tiny")
    masks = masks_for(lm, "arithmetic-words", "review-sentiment", 3, 0.05, "mathneuro")
    pruned = intervened_view(lm.model, masks, "prune")
    for i, p in enumerate(prompts[:2]):
        assert out.loc[i, "loss"] == pytest.approx(teacher_forced_loss(lm.model, lm.tokenizer, [p])["loss"], rel=1e-6)
        assert out.loc[i, "loss_pruned"] == pytest.approx(teacher_forced_loss(pruned, lm.tokenizer, [p])["loss"],
                                                          rel=1e-6)
    assert out.loc[0, "loss_change"] == pytest.approx(out.loc[0, "loss_pruned"] - out.loc[0, "loss"])
    assert "empty" in out.loc[2, "error"] and summary["errors"] == 1
    again = batch.run(mathneuro.BATCH, source, tmp_path / "t.parquet", n=3, proportion=0.05)
    assert again["cache"] == 2 and again["computed"] == 0  # each prompt's score was cached like a single request


@needs
def test_neuzip_tradeoff_over_a_list_of_models_equals_the_service(tmp_path):
    from core.neuzip import tradeoff_result

    source = tmp_path / "models.csv"
    source.write_text("model\nmathneuro-tiny\nno-such-model\n")
    batch.run(neuzip.BATCH, source, tmp_path / "t.parquet", ks=[7, 1], block_size=0, words=100, baselines=False)
    out = pd.read_parquet(tmp_path / "t.parquet")
    direct = tradeoff_result("mathneuro-tiny", [7, 1], 0, 100, baselines=False)
    assert list(out.loc[0, "settings"]) == [p["label"] for p in direct.data["points"]]
    assert list(out.loc[0, "word_perplexity"]) == [p["perplexity"] for p in direct.data["points"]]
    assert direct.source == "cache" and "no-such-model" in out.loc[1, "error"]
