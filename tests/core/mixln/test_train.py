"""The training loop: schedule, learning, per-layer gradient logs, divergence, stop and exact resume."""
import copy
import json
import math

import pytest
import torch

from core.errors import BadInputError, Cancelled
from core.mixln import (MixLNConfig, MixLNForCausalLM, TrainConfig, latest_checkpoint, layer_gradient_norms, lr_at,
                        train, train_iter)
from core.mixln.train import train_batch


pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_model(norm="pre", layers=2, seed=0, vocab=16):
    torch.manual_seed(seed)
    return MixLNForCausalLM(MixLNConfig(vocab_size=vocab, hidden_size=16, num_layers=layers, num_heads=2,
                                        intermediate_size=32, norm=norm))


def pattern(n=2000, period=7):
    """A learnable stream: 0 1 2 ... 6 0 1 2 ..."""
    return torch.arange(n) % period


def cfg(**kw):
    base = dict(steps=6, batch_size=4, seq_len=16, lr=1e-2, warmup_steps=2, eval_every=3, eval_batches=2,
                grad_log_every=3)
    base.update(kw)
    return TrainConfig(**base)


def _authors_lambda(current_step, num_warmup_steps, cycle_length, min_lr_ratio):
    """pixeli99/MixLN peft_pretraining/training_utils.py, _get_cyclical_cosine_schedule_with_min_lr_lambda, one
    cycle (re-typed from the authors' definition: the factor LambdaLR applies after ``current_step`` updates)."""
    if current_step < num_warmup_steps:
        return current_step / max(1, num_warmup_steps)
    progress = (current_step - num_warmup_steps) / max(1, cycle_length - num_warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def test_lr_schedule_is_the_authors_warmup_then_cosine_to_ten_percent():
    c = TrainConfig(steps=100, lr=1.0, warmup_steps=10)
    assert c.min_lr_ratio == 0.1
    for step in range(1, 101):  # step k is the k-th update; LambdaLR has taken k - 1 scheduler steps before it
        assert lr_at(step, c) == pytest.approx(_authors_lambda(step - 1, 10, 100, 0.1), abs=1e-12)
    assert lr_at(1, c) == 0.0 and lr_at(11, c) == pytest.approx(1.0)   # warmup from 0, peak after W updates
    assert lr_at(56, c) == pytest.approx(0.1 + 0.9 * 0.5)               # half-way through the cosine
    lrs = [lr_at(s, c) for s in range(11, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:])) and lrs[-1] > 0.1


def test_defaults_are_the_authors_optimizer_settings():
    """torchrun_main.py: torch.optim.Adam(lr, weight_decay=0) (betas (0.9, 0.999)); scripts: --grad_clipping 0.0."""
    c = TrainConfig()
    assert (c.lr, c.betas, c.weight_decay, c.grad_clip, c.min_lr_ratio) == (1e-3, (0.9, 0.999), 0.0, None, 0.1)


def test_no_clipping_means_the_update_sees_the_full_gradient():
    """grad_clip None trains exactly like an unreachable clip threshold (bit for bit), unlike a real clip; the
    recorded gradient norm is the raw one either way."""
    torch.manual_seed(0)
    start = tiny_model("pre")
    runs = {}
    for clip in (None, 1e30, 1e-3):
        model = copy.deepcopy(start)
        hist = train(model, pattern(), pattern(400), cfg(steps=3, warmup_steps=0, lr=1e-2, eval_every=0,
                                                         grad_clip=clip))
        runs[clip] = (model, hist)
    same = all(torch.equal(a, b) for a, b in zip(runs[None][0].parameters(), runs[1e30][0].parameters()))
    assert same and runs[None][1].train == runs[1e30][1].train
    diff = max((a - b).abs().max().item() for a, b in zip(runs[None][0].parameters(), runs[1e-3][0].parameters()))
    assert diff > 1e-4  # clipping to 1e-3 changes Adam's second and third steps
    assert runs[1e-3][1].train[0]["grad_norm"] == pytest.approx(runs[None][1].train[0]["grad_norm"], rel=1e-6)


def test_training_learns_a_pattern_and_logs_curves():
    model = tiny_model("mix")
    reports = []
    events = list(train_iter(model, pattern(), pattern(400), cfg(steps=20, lr=3e-2, eval_every=10),
                             progress=lambda fraction, message: reports.append((fraction, message))))
    hist = events[-1].history
    assert hist.status == "finished" and hist.step == 20
    assert [e["step"] for e in hist.eval] == [10, 20]
    assert hist.eval[-1]["loss"] < math.log(16) - 1.0            # far below chance (uniform over 16 ids)
    assert hist.eval[-1]["perplexity"] == pytest.approx(math.exp(hist.eval[-1]["loss"]))
    assert [r["step"] for r in hist.train] == list(range(1, 21))
    kinds = [e.kind for e in events]
    assert kinds.count("step") == 20 and kinds[-1] == "done" and kinds.count("eval") == 2
    assert all(e.total_steps == 20 and e.history is hist for e in events)
    # progress hears every step (fraction step / steps, its loss) and every evaluation, as a note
    steps = [(f, m) for f, m in reports if not m.startswith("note: ")]
    assert [f for f, _ in steps] == [s / 20 for s in range(1, 21)]
    assert steps[-1][1] == f"step 20/20 loss {hist.train[-1]['loss']:.4f} grad-norm {hist.train[-1]['grad_norm']:.3f}"
    notes = [m for _, m in reports if m.startswith("note: ")]
    assert notes == [f"note: step {e['step']}/20 held-out loss {e['loss']:.4f} ppl {e['perplexity']:.2f}"
                     for e in hist.eval]


def test_gradient_norms_logged_at_init_and_every_k_steps():
    model = tiny_model("post", layers=3)
    at_init = copy.deepcopy(model)
    hist = train(model, pattern(), pattern(400), cfg(steps=7, grad_log_every=3))
    assert [g["step"] for g in hist.grad_norms] == [1, 3, 6]
    assert all(len(g["param"]) == len(g["input"]) == 3 for g in hist.grad_norms)
    # step 1's log is the gradient at initialisation on step 1's batch
    expected = layer_gradient_norms(at_init, train_batch(pattern(), 1, cfg()))
    assert hist.grad_norms[0]["param"] == pytest.approx(expected.param, rel=1e-4)
    assert hist.grad_norms[0]["input"] == pytest.approx(expected.input, rel=1e-4)


def test_divergence_ends_cleanly_with_partial_curves(tmp_path):
    model = tiny_model()

    for event in train_iter(model, pattern(), pattern(400), cfg(steps=10, checkpoint_dir=str(tmp_path))):
        if event.kind == "step" and event.step == 4:  # the weights blow up, as a diverging Post-LN run's would
            with torch.no_grad():
                model.lm_head.weight[0, 0] = float("nan")
    hist = event.history
    assert hist.status == "diverged" and hist.diverged_at == 5 and hist.step == 4
    assert [r["step"] for r in hist.train] == [1, 2, 3, 4] and [e["step"] for e in hist.eval] == [3]
    assert "nan" in hist.message
    saved = json.loads((tmp_path / "history.json").read_text())
    assert saved["status"] == "diverged" and len(saved["train"]) == 4
    assert latest_checkpoint(tmp_path) is None                   # no NaN weights were written


def test_stop_and_resume_is_bit_exact(tmp_path):
    c = cfg(steps=6, checkpoint_dir=str(tmp_path / "a"))
    full = tiny_model("mix", layers=2)
    full_hist = train(full, pattern(), pattern(400), c)

    part = tiny_model("mix", layers=2)
    c_b = cfg(steps=6, checkpoint_dir=str(tmp_path / "b"))
    def stop_after_step_3(fraction, message):  # what the UI's Stop does: the progress callable raises Cancelled
        if fraction >= 3 / 6:
            raise Cancelled("Stopped.")

    first = train(part, pattern(), pattern(400), c_b, progress=stop_after_step_3)
    assert first.status == "stopped" and first.step == 3 and first.message == "stopped at step 3"
    assert latest_checkpoint(tmp_path / "b").name == "step-0000003"

    resumed = tiny_model("mix", layers=2, seed=123)               # different init: weights come from the checkpoint
    hist = train(resumed, pattern(), pattern(400), c_b, resume_from=tmp_path / "b")
    assert hist.status == "finished" and hist.step == 6
    assert [r["loss"] for r in hist.train] == [r["loss"] for r in full_hist.train]
    for (k, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), k


def test_closing_the_stream_marks_the_run_stopped():
    model = tiny_model()
    stream = train_iter(model, pattern(), pattern(400), cfg(steps=50))
    for event in stream:
        if event.kind == "step" and event.step == 2:
            break
    stream.close()
    assert event.history.status == "stopped" and event.history.step == 2


@pytest.mark.parametrize("train_tokens,eval_tokens,match", [
    (torch.zeros(0, dtype=torch.long), pattern(400), "training corpus has 0 tokens"),
    (pattern(), torch.arange(5), "evaluation corpus has 5 tokens"),
    (pattern() + 100, pattern(400), "outside"),
])
def test_bad_corpora_are_clear_errors(train_tokens, eval_tokens, match):
    with pytest.raises(BadInputError, match=match) as err:
        train(tiny_model(), train_tokens, eval_tokens, cfg())
    assert err.value.fix


def test_batch_too_large_for_memory_is_rejected():
    with pytest.raises(BadInputError, match="GiB"):
        train(tiny_model(), pattern(), pattern(400), cfg(batch_size=10 ** 7, seq_len=16))


def test_resume_with_another_configuration_is_rejected(tmp_path):
    train(tiny_model("pre"), pattern(), pattern(400), cfg(steps=2, checkpoint_dir=str(tmp_path)))
    with pytest.raises(BadInputError, match="different model configuration"):
        train(tiny_model("post"), pattern(), pattern(400), cfg(steps=4), resume_from=tmp_path)


@pytest.mark.slow
def test_smoke_train_on_wikipedia_bytes():
    """Byte-level smoke run on the prepared Wikipedia paragraphs (skipped when not prepared)."""
    from core.data import load
    from core.errors import DataMissingError
    try:
        train_text = " ".join(p.text for p in load("wikipedia-paragraphs", "train"))
        eval_text = " ".join(p.text for p in load("wikipedia-paragraphs", "validation"))
    except (DataMissingError, BadInputError) as exc:
        pytest.skip(f"wikipedia-paragraphs not available: {exc}")
    to_ids = lambda s: torch.tensor(list(s.encode("utf-8")[:200_000]), dtype=torch.long)  # noqa: E731
    model = tiny_model("mix", layers=4, vocab=256)
    hist = train(model, to_ids(train_text), to_ids(eval_text), cfg(steps=40, seq_len=64, lr=1e-2, eval_every=20))
    assert hist.status == "finished" and hist.eval[-1]["loss"] < hist.eval[0]["loss"] < math.log(256)
