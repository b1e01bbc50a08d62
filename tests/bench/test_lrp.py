"""bench/lrp.py --smoke: MambaLRP against a plain forward + backward and Integrated Gradients on the embedded models,
the selective scan's memory (reference, interpreted Triton kernel, chunked path), a random 2-layer Mamba in a fresh
process (the chunked and the previous path), Mamba-2, Falcon-H1 and SmolLM2-135M at one real-width layer, and the
committed evaluation tables."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow
MODELS = ("vision-mamba-mnist", "mamba-sentiment", "mamba-lm")


def test_smoke_runs_every_part(tmp_path):
    report = run_smoke(tmp_path, "lrp.py")
    assert_finite(report, ("time", "scan_memory", "real_size", "ssm2_size", "ssm2_conservation", "decoder_size",
                           "decoder_conservation", "evaluation"))
    assert set(report["time"]) == set(MODELS)
    for name, row in report["time"].items():
        assert row["plain_forward_backward_ms"] > 0 and row["mambalrp_ms"] > 0 and row["integrated_gradients_ms"] > 0
        assert row["mambalrp_conservation_abs_error"] < 1e-4, name
    assert report["time"]["mamba-lm"]["input"] == {"input_ids_length": 8} and report["ig_steps"] == 2
    scan = report["scan_memory"]
    runs = {"reference_lrp_D4", "triton_interpreted_D4", "reference_lrp_D8", "chunked_lrp_D8",
            "reference_full_autograd_D8"}
    assert runs <= set(scan) and all("error" not in scan[k] for k in runs), {k: scan[k] for k in runs}
    assert scan["chunked_lrp_D8"]["max_abs_diff_y"] == 0.0  # the chunked forward repeats the reference's operations
    assert scan["triton_interpreted_D4"]["max_abs_diff_grad"] < 1e-4
    real = report["real_size"]
    cases = ["mamba-tiny-random_16_tokens", "mamba-tiny-random_16_tokens_reference_path"]
    assert all("error" not in real[c] for c in cases), {c: real[c] for c in cases}
    for case in cases:
        assert real[case]["config"]["layers"] == 2 and real[case]["conservation_rel_error"] < 1e-4
        assert real[case]["mambalrp_over_forward"] > 0
    assert real[cases[1]]["config"]["path"] == "reference scan (previous)"
    ssm2 = report["ssm2_size"]
    keys = ["mamba2-130m-random_1_layers_16_tokens_cpu", "falcon-h1-0.5b-random_1_layers_16_tokens_cpu"]
    assert all("error" not in ssm2[k] for k in keys), {k: ssm2[k] for k in keys}
    assert ssm2[keys[0]]["absorbed"] != 0 and ssm2[keys[1]]["mambalrp_over_forward"] > 0  # conv bias; softmax
    cons = report["ssm2_conservation"]
    assert all(cons[n]["residual_over_logit"] < 1e-6 for n in ("mamba2-130m", "falcon-h1-0.5b")), cons
    dec = report["decoder_size"]["smollm2-135m-random_1_layers_16_tokens_cpu"]
    assert dec["config"]["layer_kinds"] == ["attention"] and dec["mambalrp_over_forward"] > 0
    assert report["decoder_conservation"]["smollm2-135m_float64"]["residual_over_logit"] < 1e-10
    assert all(0 <= cons[n]["share_off_explained_token"] <= 1 and 1 <= cons[n]["effective_tokens"] <= 8
               for n in ("mamba2-130m", "falcon-h1-0.5b")), cons
    assert report["evaluation"]
