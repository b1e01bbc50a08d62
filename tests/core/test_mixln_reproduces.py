"""What reproduces (core.mixln.reproduces): verdicts from hand-made run folders whose answers are known, the
standard errors they rest on, the diagnostics' windows, and the docs page generated from the committed runs."""
import json
import math

import numpy as np
import pytest
import torch

from core.mixln import reproduces, runs, summary
from core.mixln.requests import RUN_SAMPLES, RUN_WINDOWS

LEVELS = {"unigram": {"loss": 7.0, "perplexity": math.exp(7.0)}, "bigram": {"loss": 5.4, "perplexity": 221.4}}


def _write(root, job, final, grads_init, grads_end, angular=None, removal=None):
    folder = root / job.relative_folder
    folder.mkdir(parents=True, exist_ok=True)
    spec = runs.RECIPE[job.name]
    meta = {"norm": spec["norm"], "alpha": spec["alpha"], "model": job.model, "train": job.train,
            "status": "finished", "steps_done": 3000, "final_eval_loss": final,
            "final_eval_perplexity": math.exp(final)}
    hist = {"status": "finished", "train": [], "eval": [{"step": 3000, "loss": final, "perplexity": math.exp(final)}],
            "grad_norms": [{"step": 1, "param": grads_init, "input": grads_init},
                           {"step": 3000, "param": grads_end, "input": grads_end}]}
    (folder / "run.json").write_text(json.dumps(meta))
    (folder / "history.json").write_text(json.dumps(hist))
    if angular is not None:
        where = {"samples": RUN_SAMPLES, "seq_len": 64, "corpus": RUN_WINDOWS}
        diag = {"mixln/angular?a": {"raw": [list(np.mean(angular, 0))], "adjacent_per_window": angular,
                                    "position": "last", **where},
                "mixln/removal?r": {"loss_increase": list(np.mean(removal, 0)), "loss_increase_per_window": removal,
                                    **where}}
        (folder / "diagnostics.json").write_text(json.dumps(diag))


def _windows(early, deep, layers, noise, seed):
    """(64, layers): ``early`` in the first half, ``deep`` in the second, plus N(0, noise) per window."""
    rng = np.random.default_rng(seed)
    base = np.array([early] * (layers // 2) + [deep] * (layers - layers // 2))
    return (base + rng.normal(0, noise, (64, layers))).tolist()


@pytest.fixture
def root(tmp_path):
    """12 layers, 3 seeds: Pre-LN 5.00/5.01/5.02, Mix-LN 0.25 4.90/4.91/4.92 (ahead), Post-LN 5.00-5.02 (tied),
    DeepNorm at the unigram level; 24 layers: Post-LN diverges to the unigram level. Pre-LN's deep layers: smaller
    angular distance and removal cost (idle); Mix-LN's deep layers cost more to remove than Pre-LN's."""
    for seed in range(3):
        d = 0.01 * seed
        pre_g = [1.0] * 6 + [0.5 + 0.01 * seed] * 6
        _write(tmp_path, runs.Job("main", "pre-ln", seed), 5.0 + d, pre_g, pre_g,
               *((_windows(0.2, 0.05, 12, 0.01, 1), _windows(0.2, 0.02, 12, 0.01, 2)) if seed == 0 else ()))
        _write(tmp_path, runs.Job("main", "mix-ln-0.25", seed), 4.9 + d, [1.0] * 12, [1.0] * 12,
               *((_windows(0.2, 0.1, 12, 0.01, 3), _windows(0.2, 0.2, 12, 0.01, 4)) if seed == 0 else ()))
        _write(tmp_path, runs.Job("main", "post-ln", seed), 5.0 + d, [0.2] * 6 + [1.0] * 6, [1.0] * 12,
               *((_windows(0.1, 0.1, 12, 0.01, 5), _windows(0.1, 0.1, 12, 0.01, 6)) if seed == 0 else ()))
    for seed in range(2):
        _write(tmp_path, runs.Job("main", "deepnorm", seed), 6.95, [1.0] * 12, [1.0] * 12)
    _write(tmp_path, runs.Job("depth-24", "pre-ln", 0), 4.95, [1.0] * 24, [1.0] * 24)
    _write(tmp_path, runs.Job("depth-24", "post-ln", 0), 6.99, [1.0] * 24, [1.0] * 24)
    return tmp_path


def _claim(rows, start):
    return next(r for r in rows if r["claim"].startswith(start))


def test_verdicts_follow_the_measured_differences(root):
    rows = reproduces.claims(root, LEVELS)
    mix = _claim(rows, "Mix-LN trains to a lower loss")
    assert mix["depths"] == {"12 layers": "reproduced"}          # -0.1 nats, se 0.008: ahead
    assert "-0.100 ± 0.008" in mix["ours"] and "n = 3 / 3 seeds" in mix["ours"]
    assert "33.12 against 34.77" in mix["paper"]
    assert _claim(rows, "Post-LN fails with depth")["verdict"] == "reproduced"  # 24 layers at the unigram level
    deep = _claim(rows, "DeepNorm trains about as well as Pre-LN: DeepNorm (Mix-LN authors")
    assert deep["verdict"] == "not reproduced" and "at the unigram level" in deep["ours"]
    assert _claim(rows, "Pre-LN's deep layers barely change")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Pre-LN's deep layers can be removed")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Pre-LN's deep layers get smaller gradients (end")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Post-LN's early layers are weak")["verdict"] == "not reproduced"  # equal halves: tied
    assert _claim(rows, "Post-LN's early layers get smaller gradients")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Mix-LN's deep layers cost more")["depths"]["12 layers"] == "reproduced"
    assert "± standard error over 64 held-out windows" in _claim(rows, "Mix-LN's deep layers cost more")["ours"]
    assert _claim(rows, "LayerNorm Scaling trains")["ours"] == "no committed runs"
    assert "| LNS: LayerNorm Scaling trains" in reproduces.claims_markdown(rows)


def test_opposite_when_the_difference_points_the_other_way(root):
    for seed in range(3):  # Mix-LN now behind Pre-LN by 0.1 nats at every seed
        _write(root, runs.Job("main", "mix-ln-0.25", seed), 5.1 + 0.01 * seed, [1.0] * 12, [1.0] * 12)
    assert _claim(reproduces.claims(root, LEVELS), "Mix-LN trains to")["verdict"] == "opposite"


def test_the_init_set_is_judged_apart_and_the_init_table_pairs_each_placement(root):
    """Mix-LN against Pre-LN is judged again with the embedding init std 0.02 (its own measurement of the claim), and
    the init table puts each placement's 0.02 runs beside its sqrt(2/5) runs."""
    for seed in range(2):  # std 0.02: Pre-LN 4.80 / 4.81, Mix-LN 4.95 / 4.96 (behind)
        _write(root, runs.Job("init-0.02", "pre-ln", seed), 4.8 + 0.01 * seed, [1.0] * 12, [1.0] * 12)
        _write(root, runs.Job("init-0.02", "mix-ln-0.25", seed), 4.95 + 0.01 * seed, [1.0] * 12, [1.0] * 12)
    mix = _claim(reproduces.claims(root, LEVELS), "Mix-LN trains to a lower loss")
    assert mix["depths"] == {"12 layers": "reproduced", "12 layers, embedding init std 0.02": "opposite"}
    assert "+0.150 ± 0.007 nats (n = 2 / 2 seeds)" in mix["ours"]  # std 0.007 each side, n = 2
    rows = {r["run"]: r for r in reproduces.init_rows(root)}
    assert set(rows) == {"pre-ln", "mix-ln-0.25"}  # LNS has no runs in either setting here
    assert rows["pre-ln"]["delta"] == pytest.approx(4.805 - 5.01) and rows["pre-ln"]["0.02 is"] == "better"
    assert rows["mix-ln-0.25"]["0.02 is"] == "worse" and "(n = 2)" in rows["mix-ln-0.25"]["std_0.02"]


def test_difference_borrows_the_seed_spread_of_the_side_with_seeds():
    a = {"eval_loss_mean": 5.0, "eval_loss_std": 0.0, "n": 1}
    b = {"eval_loss_mean": 4.9, "eval_loss_std": 0.03, "n": 3}
    d = summary.difference(a, b)
    assert d["se"] == pytest.approx(math.sqrt(0.03 ** 2 / 1 + 0.03 ** 2 / 3))
    assert d["verdict"] == "higher" and d["delta"] == pytest.approx(0.1)
    one = summary.difference(a, {**b, "n": 1, "eval_loss_std": 0.0})
    assert one["verdict"] == "unresolved" and one["se"] is None


def test_spread_text_without_plus_minus_for_one_seed():
    assert summary.mean_std_text(4.946, 0.0, 1) == "4.946 (n = 1)"
    assert summary.mean_std_text(4.96, 0.007, 3, seeds=True) == "4.960 ± 0.007 (n = 3 seeds)"


def test_window_losses_average_to_the_loss_and_give_a_paired_standard_error():
    from core.mixln import MixLNConfig, MixLNForCausalLM
    from core.mixln.diagnostics import evaluate_loss, layer_removal, window_losses
    torch.manual_seed(0)
    model = MixLNForCausalLM(MixLNConfig(vocab_size=40, hidden_size=16, num_layers=3, num_heads=2,
                                         intermediate_size=32)).eval()
    ids = torch.randint(0, 40, (6, 10), generator=torch.Generator().manual_seed(1))
    w = window_losses(model, ids, batch_size=4)
    assert w.shape == (6,) and float(w.mean()) == pytest.approx(evaluate_loss(model, ids), rel=1e-6)
    r = layer_removal(model, ids, batch_size=4, per_sample=True)
    plain = layer_removal(model, ids, batch_size=4)
    assert r.loss_increase == pytest.approx(plain.loss_increase, abs=1e-5)
    per = r.increase_per_window
    assert per.shape == (6, 3)
    assert r.loss_increase_se == pytest.approx((per.std(dim=0, unbiased=True) / math.sqrt(6)).tolist())


def test_run_diagnostics_windows_are_spread_over_the_held_out_stream(monkeypatch):
    from core.mixln import folders
    windows = torch.arange(256 * 4).view(256, 4)
    monkeypatch.setattr(folders, "eval_tokens_of", lambda ref, root=None: windows)
    picked = folders.sample_windows("x", n=64)
    assert picked[:, 0].tolist() == [4 * 4 * i for i in range(64)]  # every 4th window, the last one near the end
    assert folders.sample_windows("x", n=512).shape == (256, 4)


def test_the_docs_page_holds_the_tables_of_the_committed_runs():
    """docs/mixln-reproduces.md is generated (between its markers) from the committed runs: not hand-typed."""
    page = reproduces.DOCS_PAGE.read_text()
    assert page == reproduces.render_docs(page, reproduces.markdown())
    for name in reproduces.BLOCKS:
        assert f"generated:{name}" in page
