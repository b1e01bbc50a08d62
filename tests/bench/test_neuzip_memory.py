"""bench/neuzip_memory.py --smoke: the codec's fixed cost, inference, training and the RSS over steps, each from fresh
processes, on tiny-llama; the report holds every part, its numbers are finite, and what must hold whatever the
machine holds (lossless logits, LOMO + NeuZip = LOMO, a fixed cost within the target) holds."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_runs_every_part_but_the_cap(tmp_path):
    report = run_smoke(tmp_path, "neuzip_memory.py", timeout=900)
    assert_finite(report, ("fixed-cost", "inference", "training", "steps", "seconds"))
    assert "cap" not in report
    native = report["fixed-cost"]["native"]
    assert native["lossless"] and native["heavy_modules_imported"] == [] and native["import_and_first_call_MiB"] <= 30
    inference = report["inference"]
    assert inference["same_logits"] and inference["rows"]["neuzip"]["tensor_MiB"] < inference["rows"]["bf16"]["tensor_MiB"]
    assert report["training"]["identical"]["lomo+neuzip vs lomo"] == {"losses": True, "weights": True}
    for row in report["steps"]["rows"].values():
        assert len(row["rss_after_each_step_MiB"]) == 4 and row["peak_rss_MiB"] > 0
    assert report["machine"]["cpu_model"] and report["machine"]["cpu_capability"]
    assert "codec fixed cost (MiB) <=" in report["targets"]
