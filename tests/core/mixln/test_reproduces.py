"""What reproduces (core.mixln.reproduces): verdicts from hand-made run folders whose answers are known, the
standard errors they rest on, the diagnostics' windows, and the docs page generated from the committed runs."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core.mixln import reproduces, runs, summary
from core.mixln.requests import RUN_SAMPLES, RUN_WINDOWS
from core.stats import WORDS

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
    assert mix["depths"] == {"12 layers": "reproduced"}          # -0.1 nats, se 0.008, 3 seeds a side: p < 0.05
    assert "-0.100 ± 0.008 nats (t = -12.25, df 4.0, p = 0.00026; exact p = 0.10)" in mix["ours"]
    assert "n = 3 / 3 seeds" in mix["ours"] and "33.12 against 34.77" in mix["paper"]
    assert mix["evidence"]["12 layers"]["p_exact"] == pytest.approx(0.10)
    # 24 layers: Post-LN at the unigram level, but one seed: not resolved (nothing borrowed), the level said in words
    post = _claim(rows, "Post-LN fails with depth")
    assert post["verdict"] == "not resolved" and "(n 1 vs 3: not resolved)" in post["ours"]
    assert "at the unigram level" in post["ours"]
    # DeepNorm 2 seeds at the unigram level against a claimed tie: far apart, but 2 seeds are at most suggestive
    deep = _claim(rows, "DeepNorm trains about as well as Pre-LN: DeepNorm (Mix-LN authors")
    assert deep["verdict"] == "suggestive, opposite" and "at the unigram level" in deep["ours"]
    # mechanisms on seed 0's windows: the comparison is printed, the word is "one model"
    for start in ("Pre-LN's deep layers barely change", "Pre-LN's deep layers can be removed",
                  "Post-LN's early layers are weak", "Mix-LN's deep layers cost more"):
        assert _claim(rows, start)["depths"] == {"12 layers": "one model"}
    assert "paired over 64 held-out windows" in _claim(rows, "Mix-LN's deep layers cost more")["ours"]
    assert "df 63.0" in _claim(rows, "Pre-LN's deep layers can be removed")["ours"]
    # gradient norms over seeds: each seed's ratio against 1 (Pre-LN's deep half 0.50-0.52 of its early half)
    assert _claim(rows, "Pre-LN's deep layers get smaller gradients (end")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Post-LN's early layers get smaller gradients (at")["depths"]["12 layers"] == "reproduced"
    assert _claim(rows, "Post-LN's early layers get smaller gradients (end")["depths"]["12 layers"] == \
        "not reproduced"  # equal halves at the end
    assert _claim(rows, "LayerNorm Scaling trains")["ours"] == "no committed runs"
    assert "| LNS: LayerNorm Scaling trains" in reproduces.claims_markdown(rows)
    assert "26.215" in _claim(rows, "LayerNorm Scaling trains")["paper"]  # the third party's rerun beside the paper


def test_a_mechanism_a_fraction_of_its_claimed_size_is_too_small(root):
    """Gradient norms 10 % smaller in Pre-LN's deep half, at every seed: the claimed direction, p < 0.05, but a claim
    of "diminished" gradients met by a tenth: too small."""
    for seed in range(3):
        g = [1.0] * 6 + [0.9 - 0.001 * seed] * 6
        _write(root, runs.Job("main", "pre-ln", seed), 5.0 + 0.01 * seed, g, g)
    row = _claim(reproduces.claims(root, LEVELS), "Pre-LN's deep layers get smaller gradients (end")
    assert row["depths"]["12 layers"] == "too small" and row["evidence"]["12 layers"]["p"] < 0.05


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
    # 2 seeds a side: however far apart, suggestive at most (the rule wants 3 a side)
    assert mix["depths"] == {"12 layers": "reproduced", "12 layers, embedding init std 0.02": "suggestive, opposite"}
    assert "+0.150 ± 0.007 nats (t = 21.21, df 2.0" in mix["ours"] and "(n = 2 / 2 seeds)" in mix["ours"]
    rows = {r["run"]: r for r in reproduces.init_rows(root)}
    assert set(rows) == {"pre-ln", "mix-ln-0.25"}  # LNS has no runs in either setting here
    assert rows["pre-ln"]["delta"] == pytest.approx(4.805 - 5.01) and rows["pre-ln"]["0.02 is"] == "lower, suggestive"
    assert rows["mix-ln-0.25"]["0.02 is"] == "higher, suggestive" and "(n = 2)" in rows["mix-ln-0.25"]["std_0.02"]


def test_difference_is_welch_over_seeds_and_borrows_nothing():
    a = {"eval_loss_per_seed": [5.0]}
    b = {"eval_loss_per_seed": [4.87, 4.9, 4.93]}
    one = summary.difference(a, b)
    assert not one.resolved and one.se is None and one.delta == pytest.approx(0.1)
    c = summary.difference({"eval_loss_per_seed": [5.0, 5.01, 4.99, None]}, b)  # a diverged seed (None) is left out
    assert c.n_a == 3 and c.se == pytest.approx(math.sqrt(0.01 ** 2 / 3 + 0.03 ** 2 / 3))
    assert summary.difference({"eval_loss_per_seed": [None]}, b) is None


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


def test_the_docs_page_and_the_readme_hold_every_table_of_the_committed_runs():
    """docs/mixln-reproduces.md and the README are generated (between their markers, by tools/docs.py, which
    tests/test_docs_blocks.py checks) from the committed runs: every table of :func:`reproduces.markdown` has a place
    in one of them."""
    from tools import docs

    root = Path(__file__).resolve().parents[3]
    held = docs.names((root / "docs" / "mixln-reproduces.md").read_text()) + docs.names((root / "README.md").read_text())
    assert set(reproduces.markdown()) == set(held)


# ---- the words against the committed runs, recomputed from the run files by hand ---------------------------------
def _finals(set_name, name):
    """Final held-out loss of every finished seed of a committed run, read from its run.json."""
    out = []
    for seed in runs.RUN_SETS[set_name].seeds_of(name):
        f = runs.ASSETS / runs.Job(set_name, name, seed).relative_folder / "run.json"
        if f.is_file() and (f.parent / "history.json").is_file():
            meta = json.loads(f.read_text())
            if meta.get("status") == "finished":
                out.append(meta["final_eval_loss"])
    return out


def _ratios(set_name, name, log, num):
    out = []
    for seed in runs.RUN_SETS[set_name].seeds_of(name):
        folder = runs.ASSETS / runs.Job(set_name, name, seed).relative_folder
        if (folder / "history.json").is_file() and json.loads((folder / "run.json").read_text())["status"] == "finished":
            g = np.asarray(json.loads((folder / "history.json").read_text())["grad_norms"][log]["param"])
            half = len(g) // 2
            early, deep = g[:half].mean(), g[half:].mean()
            out.append(deep / early if num == "deep" else early / deep)
    return out


def _rule(p, n, t, delta, expected, too_small):
    """docs/statistics.md's rule, written again from the page."""
    if p is None:
        return "not resolved"
    strong, hint = p < 0.05 and n >= 3, p < 0.10 or abs(t) > 2
    way = "lower" if delta < 0 else "higher"
    if expected == "tied":
        return "not reproduced" if strong else "suggestive, opposite" if hint else "consistent"
    if too_small and (strong or hint) and way == expected:
        return "too small"
    if strong:
        return "reproduced" if way == expected else "opposite"
    if hint:
        return "suggestive" if way == expected else "suggestive, opposite"
    return "not reproduced"


def test_every_word_follows_the_rule_on_the_committed_runs():
    """Each verdict of the committed runs recomputed from run.json / history.json with scipy and the written rule;
    every cell of the README's table carries its p, or says one seed / one model."""
    import re

    from scipy import stats as st
    rows = reproduces.claims()
    checked = 0
    for r in rows:
        for depth, e in r["evidence"].items():
            of = e["of"]
            if of["kind"] == "windows":  # one trained model
                assert e["word"] == "one model"
                continue
            if of["kind"] == "loss":
                a, b = _finals(*of["a"]), _finals(*of["b"])
                assert e["delta"] == pytest.approx(np.mean(a) - np.mean(b), abs=1e-12)
                ref = st.ttest_ind(a, b, equal_var=False) if min(len(a), len(b)) > 1 else None
                n = min(len(a), len(b))
            else:
                a = _ratios(of["set"], of["name"], of["log"], of["num"])
                assert e["delta"] == pytest.approx(np.mean(a) - 1, abs=1e-12)
                ref = st.ttest_1samp(a, 1.0) if len(a) > 1 else None
                n = len(a)
                assert of["too_small"] == (abs(np.mean(a) - 1) < reproduces.MIN_RELATIVE)
            p, t = (None, None) if ref is None else (float(ref.pvalue), float(ref.statistic))
            if p is not None:
                assert e["p"] == pytest.approx(p, rel=1e-9) and e["t"] == pytest.approx(t, rel=1e-9)
            assert e["word"] == _rule(p, n, t, e["delta"], of["expected"], of["too_small"]), (r["claim"], depth)
            checked += 1
    assert checked >= 20
    # the README's cells: each part a word with its p, or one seed / one model
    words = "|".join(re.escape(w) for w in WORDS)
    part = re.compile(rf"^(({words}) \(.+, (p = [0-9.e-]+(, exact [0-9.e-]+)?|one seed)\)|one model \(.+\))$")
    table = reproduces.readme_markdown(rows).splitlines()[2:]
    assert len(table) == len(rows)
    for line in table:
        cell = line.rstrip(" |").split(" | ")[-1]
        for piece in cell.split("; "):
            assert part.match(piece), piece
