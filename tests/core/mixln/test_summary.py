"""Summaries over seeds (core.mixln.summary) and their charts, on hand-made run folders whose answers are known:
means, sample standard deviations, min-max bands, diverged seeds left out and counted, n stated on the charts."""
import json
import math

import numpy as np
import pytest

from core.mixln import figures, runs, summary
from core.mixln.requests import RUN_SAMPLES, RUN_WINDOWS


def _write_run(root, job, final_loss, evals, status="finished", grads=None, angular=None, removal=None):
    folder = root / job.relative_folder
    folder.mkdir(parents=True, exist_ok=True)
    spec = runs.RECIPE[job.name]
    layers = job.model["num_layers"]
    meta = {"norm": spec["norm"], "alpha": spec["alpha"], "model": job.model, "train": job.train, "status": status,
            "steps_done": job.train["steps"], "final_eval_loss": final_loss,
            "final_eval_perplexity": None if final_loss is None else math.exp(final_loss), "wall_seconds": 1.0}
    hist = {"status": status, "step": job.train["steps"], "diverged_at": 7 if status == "diverged" else None,
            "train": [{"step": s, "loss": l, "lr": 1e-3, "grad_norm": 1.0} for s, l in evals],
            "eval": [{"step": s, "loss": l, "perplexity": math.exp(l)} for s, l in evals],
            "grad_norms": [{"step": 300, "param": grads or [1.0] * layers, "input": [1.0] * layers}]}
    (folder / "run.json").write_text(json.dumps(meta))
    (folder / "history.json").write_text(json.dumps(hist))
    (folder / "config.json").write_text(json.dumps({"num_layers": layers}))
    if angular is not None:  # on the run default windows (64 spread over the held-out stream)
        where = {"samples": RUN_SAMPLES, "seq_len": 64, "corpus": RUN_WINDOWS}
        diag = {"mixln/angular?position=last": {"raw": [angular], "position": "last", **where},
                "mixln/removal?": {"loss_increase": removal, **where},
                # an older diagnostic (the first 8 windows, all Wikipedia) is never mixed in
                "mixln/angular?old": {"raw": [[9.0] * layers], "samples": 8, "seq_len": 64, "position": "last",
                                      "corpus": "wikipedia-paragraphs"}}
        (folder / "diagnostics.json").write_text(json.dumps(diag))


@pytest.fixture
def root(tmp_path):
    """pre-ln: three seeds ending at 6.0, 6.2, 6.4; post-ln: two finished (7.0, 7.4) and one diverged."""
    for seed, final in enumerate((6.0, 6.2, 6.4)):
        _write_run(tmp_path, runs.Job("main", "pre-ln", seed), final, [(25, 8.0 + seed), (300, final)],
                   grads=[1.0 * (seed + 1)] * 12, angular=[0.1 * (seed + 1)] * 12, removal=[0.01] * 12)
    for seed, final in enumerate((7.0, 7.4, None)):
        status = "diverged" if final is None else "finished"
        evals = [(25, 8.0)] + ([(300, final)] if final is not None else [])
        _write_run(tmp_path, runs.Job("main", "post-ln", seed), final, evals, status)
    _write_run(tmp_path, runs.Job("lr-sweep", "pre-ln", 0, 3e-3), 5.9, [(300, 5.9)])
    _write_run(tmp_path, runs.Job("lr-sweep", "post-ln", 0, 3e-3), None, [(25, 9.0)], "diverged")
    for seed in range(3):
        _write_run(tmp_path, runs.Job("depth-24", "pre-ln", seed), 6.1, [(300, 6.1)], grads=[2.0] * 24,
                   angular=[0.05] * 24, removal=[0.0] * 24)
    return tmp_path


def test_spread_is_mean_sample_std_min_max():
    s = summary.spread([6.0, 6.2, 6.4, None, float("nan")])
    assert s["n"] == 3 and s["mean"] == pytest.approx(6.2) and s["std"] == pytest.approx(0.2)
    assert (s["min"], s["max"]) == (6.0, 6.4)
    assert summary.spread([]) == {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    assert summary.spread([1.5])["std"] == 0.0


def test_seed_table_counts_diverged_seeds_apart(root):
    rows = {r["run"]: r for r in summary.seed_table("main", root)}
    pre, post = rows["pre-ln"], rows["post-ln"]
    assert pre["n"] == 3 and pre["seeds"] == [0, 1, 2] and pre["diverged"] == 0
    assert pre["eval_loss_mean"] == pytest.approx(6.2) and pre["eval_loss_std"] == pytest.approx(0.2)
    ppl = [math.exp(x) for x in (6.0, 6.2, 6.4)]
    assert pre["eval_perplexity_mean"] == pytest.approx(np.mean(ppl))
    assert pre["eval_perplexity_std"] == pytest.approx(np.std(ppl, ddof=1))
    assert post["n"] == 2 and post["diverged"] == 1 and post["eval_loss_mean"] == pytest.approx(7.2)
    table = {r["run"]: r for r in runs.compare_table(root=root)}
    assert table["post-ln"]["n_seeds"] == 2 and table["post-ln"]["diverged"] == 1
    assert table["pre-ln"]["eval_loss_mean"] == pytest.approx(6.2)


def test_loss_bands_take_the_steps_every_seed_reached(root):
    bands = {b["run"]: b for b in summary.loss_bands(root=root)}
    pre = bands["pre-ln"]["eval_loss"]
    assert pre["steps"] == [25, 300] and pre["mean"] == pytest.approx([9.0, 6.2])
    assert pre["min"] == [8.0, 6.0] and pre["max"] == [10.0, 6.4]
    post = bands["post-ln"]
    assert post["eval_loss"]["steps"] == [25] and post["n"] == 3 and post["diverged"] == 1


def test_lr_sweep_and_depth_profiles(root):
    rows = {(r["run"], r["lr"]): r for r in summary.lr_sweep_table(root)}
    assert rows[("pre-ln", 1e-3)]["eval_loss"] == 6.0 and rows[("pre-ln", 3e-3)]["eval_loss"] == 5.9
    assert rows[("post-ln", 3e-3)]["status"] == "diverged" and rows[("post-ln", 3e-3)]["diverged_at"] == 7
    profiles = {(p["set"], p["run"]): p for p in summary.depth_profiles(root=root)}
    pre = profiles[("main", "pre-ln")]
    assert pre["n"] == 3 and pre["angular"]["mean"] == pytest.approx([0.2] * 12)
    assert pre["angular"]["min"] == pytest.approx([0.1] * 12) and pre["angular"]["max"] == pytest.approx([0.3] * 12)
    assert pre["grad_norm"]["mean"] == pytest.approx([2.0] * 12) and pre["grad_step"] == 300
    assert profiles[("depth-24", "pre-ln")]["layers"] == 24
    assert len(profiles[("depth-24", "pre-ln")]["removal"]["mean"]) == 24


def _titles(fig):
    return [getattr(fig.layout, k).title.text for k in dir(fig.layout) if k.startswith(("xaxis", "yaxis"))
            if getattr(fig.layout, k, None) is not None and getattr(fig.layout, k).title.text]


def test_charts_draw_the_spread_and_state_n(root):
    bands = summary.loss_bands(root=root)
    fig = figures.loss_band_figure(bands)
    means = [t for t in fig.data if t.showlegend is not False]
    assert {t.name for t in means} == {"Pre-LN (n = 3 seeds)", "Post-LN (n = 3 seeds, 1 diverged)"}
    fills = [t for t in fig.data if t.fill == "tonexty"]
    assert len(fills) == 2 and list(fills[0].y) == [8.0, 6.0]          # the band's lower edge: min over seeds
    title = fig.layout.title.text
    assert "no clipping" in title and "lr 0.001" in title and "2√2" in title
    assert _titles(fig) == ["training step", "held-out loss (nats / token)"]
    ppl = figures.loss_band_figure(bands, "perplexity")
    assert ppl.layout.yaxis.type == "log"

    # the comparison: each run minus Pre-LN's mean at its depth (Pre-LN's own seeds 6.0, 6.2, 6.4: 0, bars ± 0.2)
    bars = figures.compare_figure(runs.compare_table(root=root))
    pre = next(t for t in bars.data if t.name == "Pre-LN")
    assert pre.y[0] == pytest.approx(0.0, abs=1e-9)
    assert pre.error_y.array[0] == pytest.approx(0.2, abs=1e-4)
    assert pre.error_y.arrayminus[0] == pytest.approx(0.2, abs=1e-4)
    assert "6.200 ± 0.200 (n = 3)" in pre.text[0]
    post = next(t for t in bars.data if t.name == "Post-LN")
    assert post.y[0] == pytest.approx(1.0, abs=1e-4) and "1 diverged" in post.text[0]  # 7.2 - 6.2; n = 2 finished
    # each depth has its panel (its tick labels need no layer count), on the 12-layer panel's scale
    both = figures.compare_figure(runs.compare_table(root=root) + runs.compare_table(root=root / "depth-24"))
    deep = next(t for t in both.data if t.name == "Pre-LN (24 layers)")
    assert (next(t for t in both.data if t.name == "Pre-LN").xaxis, deep.xaxis) == ("x", "x2")
    assert (deep.x[0], deep.marker.symbol, deep.y[0]) == ("Pre-LN", "diamond", pytest.approx(0.0, abs=1e-9))
    assert both.layout.yaxis2.matches == "y" and "24 layers" in both.layout.annotations[1].text
    # a run at the unigram level is drawn apart, in absolute loss, so it does not flatten the others
    levels = {"unigram": {"loss": 7.3, "perplexity": math.exp(7.3)}, "bigram": {"loss": 5.3, "perplexity": 200.0}}
    apart = figures.compare_figure(runs.compare_table(root=root), reference=levels)
    post = next(t for t in apart.data if t.name == "Post-LN")
    assert post.xaxis == "x2" and post.y[0] == pytest.approx(7.2, abs=1e-4)
    assert next(t for t in apart.data if t.name == "Pre-LN").xaxis == "x"

    sweep = figures.sweep_figure(runs.sweep_table(root=root))
    assert list(sweep.data[0].x) == [0.0, 1.0] and sweep.data[0].name.startswith("12 layers (mean of n = 2/3 seeds")
    assert list(sweep.data[1].x) == [0.0] and sweep.data[1].name.startswith("24 layers (mean of n = 2 seeds")  # the 24-layer set: seeds 0, 1

    lr = figures.lr_sweep_figure(summary.lr_sweep_table(root))
    assert lr.layout.xaxis.type == "log" and "Post-LN diverged" in {t.name for t in lr.data}
    assert _titles(lr) == ["peak learning rate (log scale)", "final held-out loss (nats / token)"]

    depth = figures.depth_figure(summary.depth_profiles(root=root))
    assert [a.text for a in depth.layout.annotations][:2] == ["12 layers", "24 layers"]
    named = [t for t in depth.data if t.showlegend]
    assert [t.name for t in named] == ["Pre-LN (n = 3 seeds per depth)"]  # only placements trained at both depths
    assert depth.layout.yaxis3.type == "log" and len(depth.data) == 2 * 3 * 3  # 2 depths x 3 metrics x (band, mean)
    every = figures.depth_figure(summary.depth_profiles(root=root), common_only=False)
    named = [t.name for t in every.data if t.showlegend]
    assert named == ["Pre-LN (n = 3 seeds per depth)", "Post-LN (n = 3 seeds, 1 diverged per depth)"]
    # Post-LN (12 layers, no diagnostics): gradient norms only
    assert len(every.data) == 3 * (2 * 3 + 1)
