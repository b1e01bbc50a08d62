"""bench/neuzip_memory.py --smoke: the codec's fixed cost, inference and the RSS over steps, each from fresh processes,
on tiny-llama; the report holds every part, its numbers are finite, and what must hold whatever the machine
(lossless logits, the C codec's fixed cost within the target and without numba or triton) holds."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_runs_the_fixed_cost_inference_and_steps(tmp_path):
    report = run_smoke(tmp_path, "neuzip_memory.py", timeout=900)
    assert_finite(report, ("fixed-cost", "inference", "steps", "seconds"))
    assert "cap" not in report and "training" not in report
    native = report["fixed-cost"]["native"]
    assert native["lossless"] and native["heavy_modules_imported"] == [] and native["import_and_first_call_MiB"] <= 30
    inference = report["inference"]
    assert inference["same_logits"] and inference["rows"]["neuzip"]["tensor_MiB"] < inference["rows"]["bf16"]["tensor_MiB"]
    row = report["steps"]["rows"]["lomo+neuzip"]
    assert len(row["rss_after_each_step_MiB"]) == 3 and row["peak_rss_MiB"] > 0 and row["storage"]["layers"] == 14
    assert report["machine"]["cpu_model"] and report["machine"]["cpu_capability"]
    assert "codec fixed cost (MiB) <=" in report["targets"]
