"""bench/neuzip.py --smoke: the codecs on every weight set, the compressed forward, the trade-off and the tab's
example, on the project's mathneuro-tiny, and the training modes on tiny-llama, without touching the user's results
cache."""
import pytest

from tests.bench.smoke import assert_finite, results_written, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_runs_every_part_on_a_tiny_model(tmp_path):
    report = run_smoke(tmp_path, "neuzip.py")
    assert_finite(report, ("codecs", "forward", "tradeoff", "seconds"))
    assert set(report["codecs"]) == {"mathneuro-tiny", "trained", "gaussian", "student-t"}
    for name, row in report["codecs"].items():
        assert row["tensors"] == 4, name
        codecs = row["codecs"]
        assert {"neuzip", "zstd", "memcpy"} <= set(codecs), name
        assert 0 < codecs["neuzip"]["bits_per_weight"] < 16 and codecs["memcpy"]["bits_per_weight"] == 16, name
        assert codecs["neuzip"]["bits_per_weight"] >= row["entropy_bound"] - 1e-6, name  # lossless: not below it
    forward = report["forward"]
    assert forward["model"] == "mathneuro-tiny" and forward["tokens"] == 16 and forward["bf16_seconds"] > 0
    assert len(forward["rows"]) == 8 and all(r["ratio_vs_bf16"] > 0 for r in forward["rows"])
    assert [r["max_abs_logit_diff"] for r in forward["rows"] if "k=7" in r["setting"]] == [0.0, 0.0]  # lossless
    rows = {r["setting"]: r for r in report["tradeoff"]["rows"]}
    assert {"bf16", "NeuZip k=7 (lossless)", "NeuZip k=0"} <= set(rows)
    assert rows["NeuZip k=7 (lossless)"]["word_perplexity"] == rows["bf16"]["word_perplexity"]
    assert rows["NeuZip k=0"]["memory_MB"] < rows["NeuZip k=7 (lossless)"]["memory_MB"] < rows["bf16"]["memory_MB"]
    training = report["training"]
    rows = {r["mode"]: r for r in training["rows"]}
    assert set(rows) == {"vanilla", "lomo", "lomo+neuzip"} and training["model"] == "tiny-llama"
    assert rows["vanilla"]["memory_vs_vanilla"] == 1.0 and rows["vanilla"]["speed_vs_vanilla"] == 1.0
    assert training["identical"]["lomo+neuzip vs lomo"] == {"losses": True, "weights": True}
    assert rows["lomo+neuzip"]["final_loss"] == rows["lomo"]["final_loss"]
    for r in rows.values():
        assert r["peak_MiB"] > 0 and abs(sum(r["split_MiB"].values()) - r["peak_MiB"]) < 0.5
    assert set(training["targets"]) == {"lomo+neuzip memory_vs_vanilla <= 0.55", "lomo+neuzip speed_vs_vanilla >= 0.5",
                                        "lomo+neuzip cpu_speed_vs_vanilla >= 0.5"}
    assert report["example"] == {"written_and_removed": True, "keys": ["entries", "format"]}
    assert results_written(tmp_path) == []  # computed under recomputing(): the user's results cache is left alone
