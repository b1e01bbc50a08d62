"""Model loads and computations at once, in threads, as the app runs them for several sessions.

Issue 22: one session loading model folders (``from_pretrained``) while another ran MathNeuro broke MathNeuro every
time (``KeyError: 'lm_head.weight'``), because transformers patches process-wide state while it builds a model and two
builds at once leave each other's models untied. Every construction now holds one process-wide lock
(:mod:`core.zoo.construction`), and requests change only private views of the shared models.
"""
from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
import torch

from core.paths import ASSETS_DIR
from core.zoo import clear_loaded, load_model, registered_names
from core.zoo.construction import constructing, global_state

pytestmark = pytest.mark.skipif("mathneuro-tiny" not in registered_names() or "mamba-lm" not in registered_names(),
                                reason="embedded models not committed")


def _copies(tmp_path) -> dict[str, str]:
    out = {}
    for name in ("mathneuro-tiny", "mamba-lm"):
        shutil.copytree(ASSETS_DIR / "models" / name, tmp_path / name)
        out[name] = str(tmp_path / name)
    return out


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_patch_left_by_a_construction_is_put_back():
    """A library that leaves process-wide state patched (as two interleaved from_pretrained calls did) cannot break
    the loads after it: leaving the lock puts back the tie_weights method and torch's default dtype."""
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.tie_weights
    before = global_state()
    with constructing():
        PreTrainedModel.tie_weights = lambda self, *a, **k: None  # what a leaked no_tie_weights() leaves behind
        torch.set_default_dtype(torch.bfloat16)
    assert PreTrainedModel.tie_weights is original and torch.get_default_dtype() == torch.float32
    assert global_state() == before
    lm = load_model("mathneuro-tiny", use_cache=False)
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight  # tied again


def test_loads_in_four_threads_give_whole_tied_models(tmp_path):
    """Four threads load two model folders under fresh spellings at once (every call builds a model): every model
    is tied and bit-identical to the one loaded alone. Without the lock most of them came out untied."""
    folders = _copies(tmp_path)
    quiet = {name: _state(load_model(folder, use_cache=False).model) for name, folder in folders.items()}
    problems, done = [], []

    def loader(t: int):
        for i in range(6):
            name = ("mathneuro-tiny", "mamba-lm")[(t + i) % 2]
            ref = folders[name] + "/." * (1 + t * 10 + i)  # a spelling no other call used: never a cached model
            try:
                model = load_model(ref, use_cache=False).model
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                problems.append(f"{ref}: {type(exc).__name__}: {exc}")
                continue
            state = _state(model)
            if state.keys() != quiet[name].keys() or not all(torch.equal(state[k], quiet[name][k]) for k in state):
                problems.append(f"{ref}: weights differ from the quiet load")
            out, emb = model.get_output_embeddings(), model.get_input_embeddings()
            if out.weight is not emb.weight:
                problems.append(f"{ref}: lm_head is not tied")
            done.append(ref)

    threads = [threading.Thread(target=loader, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems, problems[:5]
    assert len(done) == 24


def _watch(model, ids, stop: threading.Event, seen: list) -> None:
    """Run ``model`` on ``ids`` until ``stop``; record every output that differs from the first, and every parameter
    flag or forward attribute another request changed."""
    with torch.no_grad():
        reference = model(ids).logits
    flags = [p.requires_grad for p in model.parameters()]
    while not stop.is_set():
        with torch.no_grad():
            out = model(ids).logits
        if not torch.equal(out, reference):
            seen.append("output changed")
        if [p.requires_grad for p in model.parameters()] != flags:
            seen.append("requires_grad changed")
        if any("forward" in m.__dict__ for m in model.modules()):
            seen.append("a forward was rewired")
        time.sleep(0.001)


def test_layer_removal_and_explanations_never_change_the_shared_model():
    """Mix-LN's layer removal (it skips each layer in turn) and MambaLRP's explanations (they rewire forwards and
    freeze parameters) run on private views: a request using the same model meanwhile sees it whole and unchanged.
    Before, layer removal swapped the layers of the shared model and the rules rewired and froze it."""
    from core.lrp import explain
    from core.mixln import layer_removal

    for name, work in (("mathneuro-tiny", lambda m: layer_removal(m, torch.randint(4, 600, (4, 24)), batch_size=2)),
                       ("mamba-lm", lambda m: [explain(m, torch.randint(4, 300, (1, 24)), method=x)
                                               for x in ("mambalrp", "gradient_x_input", "mambalrp")])):
        model = load_model(name).model
        ids = torch.randint(4, 300, (1, 16))
        stop, seen = threading.Event(), []
        watcher = threading.Thread(target=_watch, args=(model, ids, stop, seen))
        watcher.start()
        try:
            for _ in range(3):
                work(model)
        finally:
            stop.set()
            watcher.join()
        assert not seen, f"{name}: {sorted(set(seen))}"


class _NeverHit:
    """A results cache that computes every time (and stores nothing): each call below really runs."""

    def get_or_compute(self, fingerprint, analysis, params, compute, check=None, schema=None):
        from core.cache import check_entry

        entry = compute()
        check_entry(entry, check, analysis, schema)
        return entry, False


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in ("seconds", "cached", "source")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


COMPUTATIONS = {
    "mathneuro layers": lambda i: __import__("core.mathneuro", fromlist=["x"]).layer_distribution_result(
        "mathneuro-tiny", "arithmetic-words", ["review-sentiment"], 12, 0.03, "mathneuro").data,
    "mambalrp text": lambda i: __import__("core.lrp", fromlist=["x"]).text_result(
        "mamba-sentiment", f"a witty and tender film, take {i % 2}", ["mambalrp", "gradient_x_input"]).data,
    "mixln removal": lambda i: __import__("core.mixln", fromlist=["x"]).layer_removal_result(
        ["mathneuro-tiny"], samples=2, seq_len=16).data,
    "mixln angular (mamba-lm)": lambda i: __import__("core.mixln", fromlist=["x"]).angular_distance_result(
        "mamba-lm", samples=2, seq_len=16).data,
}


@pytest.mark.slow
def test_loads_and_computations_at_once_give_the_quiet_answers(tmp_path, monkeypatch):
    """The issue's failure, in one process: a session loads copies of mathneuro-tiny and mamba-lm under fresh
    spellings (every call builds a model, and with two models kept the registered ones are evicted and built again
    by the computations) while three sessions run MathNeuro, MambaLRP and Mix-LN computations on the registered
    models, recomputed every time. Every answer equals the one the same call gets with nothing else running.
    Before the construction lock, 0 of 205 MathNeuro calls succeeded in this setting (KeyError 'lm_head.weight')."""
    from core import runner

    monkeypatch.setattr(runner, "results_cache", lambda: _NeverHit())
    monkeypatch.setenv("LAYERWISE_MAX_MODELS", "2")
    folders = _copies(tmp_path)
    clear_loaded()
    quiet = {(name, i): json.dumps(_without_timings(fn(i)), sort_keys=True)
             for name, fn in COMPUTATIONS.items() for i in range(2)}
    clear_loaded()
    stop, loads, answers, failures = threading.Event(), [0], [], []

    def loader():
        k = 1
        while not stop.is_set():
            for folder in folders.values():
                try:
                    load_model(folder + "/." * k)
                    loads[0] += 1
                except Exception as exc:  # noqa: BLE001 - a failed load is a finding too
                    failures.append(f"load: {type(exc).__name__}: {exc}")
            k += 1

    def session(name: str, rounds: int):
        for i in range(rounds):
            try:
                answer = json.dumps(_without_timings(COMPUTATIONS[name](i)), sort_keys=True)
            except Exception as exc:  # noqa: BLE001 - recorded and counted
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            answers.append((name, answer == quiet[(name, i % 2)]))

    loading = threading.Thread(target=loader)
    loading.start()
    sessions = [threading.Thread(target=session, args=(name, 4)) for name in COMPUTATIONS]
    try:
        for t in sessions:
            t.start()
        for t in sessions:
            t.join()
    finally:
        stop.set()
        loading.join()
        clear_loaded()
    different = [name for name, same in answers if not same]
    print(f"\n{len(answers)} answers while {loads[0]} models loaded: {len(failures)} failed, {len(different)} different")
    assert not failures, failures[:5]
    assert not different, different
    assert len(answers) == 4 * len(COMPUTATIONS) and loads[0] >= 10
