"""Requests on one shared in-memory model never see each other: interventions and statistics run on private views.

Each concurrent test runs an intervention (or a statistics collection) and plain requests on the same model
object from several threads at once, many times, and compares every answer with its sequential answer bit
for bit; the shared model's state_dict, hooks and flags must be exactly as before.
"""
import threading

import pytest
import torch

import core.mathneuro as mn
from tests.core.mathneuro.test_core import assert_same, samples, snapshot, tiny_llama

pytestmark = pytest.mark.usefixtures("single_thread")


def model_and_masks(tied=False):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)  # big enough that a forward pass takes a while, so the threads overlap
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=tied)
    model = LlamaForCausalLM(cfg).eval()
    masks = mn.identify(model, samples(3, 24, high=256), samples(3, 24, seed=1, high=256), 0.2)
    return model, masks


def run_together(jobs: list, repeats: int) -> list[list]:
    """Run each job ``repeats`` times in its own thread, all starting together; the answers per job."""
    barrier = threading.Barrier(len(jobs))
    answers = [[] for _ in jobs]
    errors = []

    def work(i):
        try:
            barrier.wait()
            for _ in range(repeats):
                answers[i].append(jobs[i]())
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return answers


def test_view_without_replacements_is_the_model_bit_for_bit():
    model, _ = model_and_masks(tied=True)
    ids = samples(1, 20, high=256)[0]
    view = mn.private_view(model)
    with torch.no_grad():
        assert torch.equal(view(ids).logits, model(ids).logits)
    assert view.state_dict().keys() == model.state_dict().keys()
    assert all(a is b for a, b in zip(view.parameters(), model.parameters()))  # shared, not copied
    # a hook and a flag set on the view stay on the view
    view.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    view.train()
    assert not model.model.layers[0].mlp._forward_hooks and not model.training
    assert not any(m.training for m in model.modules())


def test_tied_weights_are_replaced_everywhere():
    model, _ = model_and_masks(tied=True)
    w = model.lm_head.weight
    view = mn.private_view(model, {"lm_head.weight": torch.zeros_like(w)})
    assert view.lm_head.weight is view.model.embed_tokens.weight
    assert not view.lm_head.weight.any() and w.any()


@pytest.mark.parametrize("mode,factor", [("prune", None), ("scale", 1.5)])
def test_intervention_and_plain_request_at_once_match_their_sequential_answers(mode, factor):
    model, masks = model_and_masks()
    snap = snapshot(model)
    plain_ids, other_ids = samples(1, 40, seed=3, high=256)[0], samples(1, 40, seed=4, high=256)[0]

    def plain():
        with torch.no_grad():
            return model(plain_ids).logits

    def intervention():
        with torch.no_grad(), mn.intervened(model, masks, mode, factor) as view:
            return view(other_ids).logits
    expected_plain, expected_intervened = plain(), intervention()
    assert not torch.equal(expected_intervened, model(other_ids).logits)  # the intervention changes the answer
    got_plain, got_intervened = run_together([plain, intervention, plain], repeats=25)[:2]
    assert all(torch.equal(x, expected_plain) for x in got_plain)
    assert all(torch.equal(x, expected_intervened) for x in got_intervened)
    assert_same(model, snap)  # state_dict bit-identical, flags as before


def test_statistics_and_plain_requests_at_once_match_their_sequential_answers():
    model, _ = model_and_masks()
    snap = snapshot(model)
    math_in, plain_ids = samples(4, 30, high=256), samples(1, 40, seed=5, high=256)[0]

    def plain():
        with torch.no_grad():
            return model(plain_ids).logits

    def norms():
        return mn.collect_column_norms(model, math_in).sums
    expected_plain, expected_norms = plain(), norms()
    got_plain, got_norms = run_together([plain, norms], repeats=10)
    assert all(torch.equal(x, expected_plain) for x in got_plain)
    for got in got_norms:  # the plain requests' passes are not counted in the statistics
        assert got.keys() == expected_norms.keys() and all(torch.equal(got[k], expected_norms[k]) for k in got)
    assert_same(model, snap)
    assert not any(m._forward_hooks for m in model.modules())


def test_saving_an_intervened_checkpoint_leaves_the_model_bit_identical(tmp_path):
    from safetensors.torch import load_file
    model = tiny_llama()
    masks = mn.identify(model, samples(2), samples(2, seed=1), 0.2)
    snap = snapshot(model)
    out = mn.save_intervened_checkpoint(model, masks, tmp_path / "pruned", "prune")
    assert_same(model, snap)
    saved = load_file(str(out / "model.safetensors"))
    for name, mask in masks.items():
        assert not saved[name][mask].any() and torch.equal(saved[name][~mask], snap[0][name][~mask])


def test_every_intervened_block_uses_the_view():
    """``intervened`` yields a private view and leaves the model alone: a block that does not bind the view (``as``)
    would evaluate the unchanged model, so none may exist in the project's code."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    pattern = re.compile(r"(?:with\s+|,\s*)(?:mn\.)?intervened\((?:[^()]|\([^()]*\))*\)\s*:")  # no "as view"
    offenders = [f"{path.relative_to(root)}:{text[:m.start()].count(chr(10)) + 1}"
                 for folder in ("core", "ui", "bench", "tests") for path in (root / folder).rglob("*.py")
                 for text in [path.read_text()] for m in pattern.finditer(text)]
    assert not offenders, offenders
