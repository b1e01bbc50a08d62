"""The reference levels of the Mix-LN charts: count-based unigram / bigram of the training data on the runs' windows."""
import math

import numpy as np
import pytest
import torch

from core.mixln import figures, reference, runs


def test_known_answer_on_a_hand_made_stream():
    counts = reference.ngram_counts(torch.tensor([0, 1, 0, 1, 0, 2]), vocab_size=3)
    got = reference.score_windows(counts, torch.tensor([[0, 1, 2]]))
    p_uni = {1: 3 / 9, 2: 2 / 9}                                # add-one: (c + 1) / (6 + 3)
    p_1_after_0 = (2 - 0.75) / 3 + 0.75 * 2 / 3 * p_uni[1]      # c(0,1) = 2, c(0) = 3, two successors of 0
    p_2_after_1 = 0.0 + 0.75 * 1 / 2 * p_uni[2]                 # (1, 2) never seen: the discounted mass only
    assert got["targets"] == 2
    assert got["unigram"]["loss"] == pytest.approx(-(math.log(p_uni[1]) + math.log(p_uni[2])) / 2, rel=1e-12)
    assert got["bigram"]["loss"] == pytest.approx(-(math.log(p_1_after_0) + math.log(p_2_after_1)) / 2, rel=1e-12)
    assert got["bigram"]["perplexity"] == pytest.approx(math.exp(got["bigram"]["loss"]))


def test_the_bigram_is_a_distribution_for_every_context():
    rng = np.random.default_rng(0)
    vocab = 12
    counts = reference.ngram_counts(torch.from_numpy(rng.zipf(1.6, 3000) % vocab), vocab)
    for v in range(vocab):
        pairs = torch.tensor([[v, w] for w in range(vocab)])
        total = sum(math.exp(-reference.score_windows(counts, pairs[w:w + 1])["bigram"]["loss"]) for w in range(vocab))
        assert total == pytest.approx(1.0, abs=1e-12), v
    unigram = sum(math.exp(-reference.score_windows(counts, torch.tensor([[0, w]]))["unigram"]["loss"])
                  for w in range(vocab))
    assert unigram == pytest.approx(1.0, abs=1e-12)


def test_every_loss_chart_draws_the_levels_it_is_given():
    ref = {"unigram": {"loss": 6.9, "perplexity": math.exp(6.9)}, "bigram": {"loss": 5.4, "perplexity": math.exp(5.4)}}
    history = {"train": [{"step": 1, "loss": 7.0}], "eval": [{"step": 1, "loss": 7.0, "perplexity": math.exp(7)}]}
    charts = {
        "loss": (figures.loss_figure([{"label": "Pre-LN", "colour": "#000000", "history": history}], reference=ref),
                 "loss"),
        "lr": (figures.lr_sweep_figure([{"run": "pre-ln", "label": "Pre-LN", "norm": "pre", "alpha": 0.0, "lr": 1e-3,
                                         "eval_loss": 5.0}], reference=ref), "loss"),
    }
    for name, (fig, metric) in charts.items():
        lines = {round(s.y0, 6) for s in fig.layout.shapes if s.y0 == s.y1}
        assert lines == {6.9, 5.4}, name
        texts = " ".join(a.text for a in fig.layout.annotations)
        assert "unigram of the training data" in texts and "bigram of the training data" in texts, name
    assert figures.loss_figure([{"label": "x", "colour": "#000000", "history": history}]).layout.shapes == ()


def test_on_the_log_perplexity_axis_each_label_sits_on_its_line():
    """Plotly places a shape at the value and an annotation at log10 of the value on a log axis: the perplexity
    chart's labels must say the level at the height of their line (they once sat at 10^216)."""
    ref = {"unigram": {"loss": 6.9, "perplexity": math.exp(6.9)}, "bigram": {"loss": 5.4, "perplexity": math.exp(5.4)}}
    band = {"steps": [50, 100], "mean": [900.0, 300.0], "min": [890.0, 290.0], "max": [910.0, 310.0]}
    bands = [{"label": "Pre-LN", "norm": "pre", "alpha": 0.0, "n": 2, "diverged": 0, "eval_perplexity": band}]
    fig = figures.loss_band_figure(bands, "perplexity", reference=ref)
    assert fig.layout.yaxis.type == "log"
    lines = sorted(s.y0 for s in fig.layout.shapes if s.y0 == s.y1)
    assert lines == pytest.approx([math.exp(5.4), math.exp(6.9)])
    labels = sorted((a.y, a.text) for a in fig.layout.annotations if "gram of the training data" in (a.text or ""))
    assert [y for y, _ in labels] == pytest.approx([5.4 / math.log(10), 6.9 / math.log(10)])  # log10 of the levels
    assert "perplexity 221" in labels[0][1] and "perplexity 992" in labels[1][1]


needs_runs = pytest.mark.skipif(reference.load_reference() is None, reason="no committed reference.json")


@needs_runs
@pytest.mark.slow
def test_the_committed_levels_are_what_the_project_computes():
    """reference.json is computed, not typed in: recomputing it from the committed tokenizer and the prepared
    corpora gives the same numbers (count-based, so the same on any CPU)."""
    stored = reference.load_reference()
    again = reference.reference_levels()
    for name in ("unigram", "bigram"):
        assert again[name]["loss"] == pytest.approx(stored[name]["loss"], rel=1e-12)
    assert stored["windows"] == [runs.RECIPE_TRAIN["eval_batches"] * runs.RECIPE_TRAIN["batch_size"],
                                 runs.RECIPE_TRAIN["seq_len"]]
    assert stored["bigram"]["loss"] < stored["unigram"]["loss"]


@needs_runs
def test_the_service_charts_draw_the_committed_levels():
    import core.mixln as mixln

    ref = reference.load_reference()
    for res, metric in ((mixln.compare_result(), "loss"), (mixln.sweep_result(), "loss"),
                        (mixln.curves_result(None, "main", "loss"), "loss"),
                        (mixln.curves_result(None, "main", "perplexity"), "perplexity"),
                        (mixln.lr_sweep_result(), "loss"), (mixln.loss_result(), "loss")):
        fig = next(iter(res.figures.values()))
        # horizontal lines, less the comparison's zero lines (Pre-LN's mean, one per depth panel)
        lines = sorted(s.y0 for s in fig.layout.shapes if s.y0 == s.y1 and s.y0 != 0)
        want = sorted(ref[n][metric] for n in ("unigram", "bigram"))
        assert lines == pytest.approx(want), res.stem
