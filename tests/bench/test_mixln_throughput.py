"""bench/mixln_throughput.py --smoke: the three models measured side by side at tiny sizes, and the committed runs'
final held-out figures read back (the script measured and then crashed at its end: ``KeyError: 'eval_perplexity'``)."""
import math

import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_measures_every_model_and_reads_every_committed_run(tmp_path):
    report = run_smoke(tmp_path, "mixln_throughput.py")
    assert_finite(report, ("forward", "train_step", "size", "committed_runs"))
    for part in ("forward", "train_step"):
        assert set(report[part]["tokens_per_s"]) == {"mixln_pre", "mixln_mix", "hf_llama"}
        assert all(v > 0 for v in report[part]["tokens_per_s"].values())
        assert set(report[part]["ratio_vs_hf"]) == {"mixln_pre", "mixln_mix"}
    assert report["size"]["hidden_size"] == 32 and report["reps"] == 1
    from core.mixln import list_runs

    runs = report["committed_runs"]
    assert set(runs) == set(list_runs()) and "pre-ln" in runs
    for name, run in runs.items():
        assert run["final_eval_perplexity"] > 1, name
        assert math.isclose(run["final_eval_perplexity"], math.exp(run["final_eval_loss"]), rel_tol=1e-6), name
