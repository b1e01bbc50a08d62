"""bench/gpu.py runs end to end: its --smoke mode (tiny shapes, CPU, TRITON_INTERPRET=1) in a subprocess.

The GPU timings cannot be checked here; what can: every comparison is present with finite numbers, every
kernel agrees with its twin on the smoke shapes (within the self-check's tolerance, bit-exact where the kernel
is), every self-check passed, a row killed by its share of the budget leaves its saved parts and the rows after
it in the JSON, the five targets come last, and a host without CUDA gets exit code 2 and one line naming the fix.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.bench.smoke import numbers, run_smoke

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu.py"
COMPARISONS = ("selective_scan_L16", "selective_scan_L32", "neuzip_decode_tiny_64x96", "neuzip_forward",
               "neuzip_generate", "topk_mask", "add_rmsnorm")
TIMED = COMPARISONS + ("neuzip_train",)
# What a CUDA image with only the compute stack (torch, triton, transformers, numba) lacks: bench/gpu.py must not
# need any of it (core imports plotly only where a figure is built, gradio only in ui/).
APP_STACK = ("plotly", "gradio", "pandas", "sklearn", "captum", "mlxtend", "reasoning_gym", "constriction",
             "zstandard", "datasets", "dill", "bitsandbytes", "gguf", "matplotlib")
EXACT = ("neuzip_decode_tiny_64x96", "neuzip_forward", "neuzip_generate", "topk_mask")  # bit-exact (lossless, masks)


def _run(tmp_path, *args, timeout=180):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)  # the script must set it itself in --smoke mode
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return run_smoke(tmp_path_factory.mktemp("gpu_bench"), "gpu.py", timeout=600, unset=("TRITON_INTERPRET",))


@pytest.mark.slow
def test_smoke_has_every_comparison_with_finite_numbers(smoke):
    assert smoke["mode"] == "smoke" and smoke["timings_meaningful"] is False
    assert "meaningless" in smoke["timing_note"]
    assert smoke["failed"] == []
    assert set(COMPARISONS) <= set(smoke["comparisons"])
    for name in COMPARISONS:
        row = smoke["comparisons"][name]
        assert "error" not in row, (name, row.get("error"))
        found = numbers(row)
        assert found and all(math.isfinite(n) for n in found), name
        medians = row["median_s"] if "median_s" in row else \
            {k: v for m in row["matrices"].values() for k, v in m["median_s"].items()}
        assert len(medians) >= 2 and all(v > 0 for v in medians.values()), name


@pytest.mark.slow
def test_smoke_kernels_agree_with_their_twins_and_pass_the_self_check(smoke):
    for name in COMPARISONS:
        row = smoke["comparisons"][name]
        assert row["agrees_with_twin"] is True, (name, row["max_abs_err_vs_twin"])
        assert row["self_check"]["ok"] is True and row["self_check"]["rows"], name
        if name in EXACT:
            assert row["max_abs_err_vs_twin"] == 0.0, name
    scan = smoke["comparisons"]["selective_scan_L16"]
    assert scan["max_abs_err_vs_twin"] < 1e-4 and "ref_twin" in scan["median_s"]
    # the tiles and pipelining depths of the scan kernel (timed to tune it) compute the same
    assert {(t["block_d"], t["chunk"], t["stages"]) for t in scan["tiles"].values()} == {(2, 4, 2), (2, 4, 1)}
    assert all(t["max_abs_err_vs_twin"] < 1e-4 for t in scan["tiles"].values())
    mamba = smoke["comparisons"]["selective_scan_vs_mamba_ssm_L32"]
    assert "mamba_ssm" in mamba.get("median_s", {}) or mamba["mamba_ssm"].startswith("skipped: mamba_ssm is not")
    generate = smoke["comparisons"]["neuzip_generate"]
    assert generate["same_tokens"] is True and generate["target_at_least_0_8"] is None  # no verdict off CUDA
    # eager and graph-captured (off CUDA the captured steps run eagerly), bf16 and compressed, the fused GEMV too
    assert set(generate["tokens_per_s"]) == {"bf16", "bf16_graph", "compressed", "compressed_graph",
                                             "compressed_graph_fused_gemv"} and generate["graph_failed"] == {}
    assert generate["fused_same_tokens"] is True and generate["peer"] == "bf16_graph"
    assert all(v > 0 for v in generate["tokens_per_s"].values())
    train = smoke["comparisons"]["neuzip_train"]  # vanilla / LOMO / LOMO + NeuZip, the same batches
    assert set(train["modes"]) == {"vanilla", "lomo", "lomo+neuzip"} and train["stopped"] is None
    assert train["identical"]["lomo+neuzip vs lomo"] == {"losses": True, "weights": True}
    assert train["target_at_most_0_55"] is None and train["allocated_bytes"]["vanilla"] is None  # no CUDA memory
    assert 0.49 < train["paper_table1_llama3_8b"]["memory_lomo_neuzip_over_vanilla"] < 0.5
    assert all(m["steps"] == 2 and m["it_per_s"] > 0 for m in train["modes"].values())
    decode = smoke["comparisons"]["neuzip_decode_tiny_64x96"]
    assert decode["bit_exact_vs_original"] is True and decode["device_flag_clean"] is True
    layouts = decode["layouts"]  # every segment layout decodes the same bits, its index costing what it says
    assert {(v["segment"], v["rows"]) for v in layouts.values()} == {(1024, 4), (256, 4), (64, 2), (32, 1)}
    assert all(v["bit_exact"] for v in layouts.values())
    assert all(v["index_bytes"] == 80 * -(-64 * 96 // v["segment"]) + 16 for v in layouts.values())
    assert smoke["comparisons"]["topk_mask"]["matrices"]["tiny_matrix"]["k"] > 0
    assert all(row["ok"] for row in smoke["self_check"])


@pytest.mark.slow
def test_smoke_explains_end_to_end_and_agrees_with_the_cpu(smoke):
    """Each length is its own row (a slow one cannot starve the others); explain's peer is its own forward through
    the same scan, transformers' forward is timed beside it (once, on its PyTorch reference path) and agrees."""
    rows = {k: v for k, v in smoke["comparisons"].items() if k.startswith("lrp_explain")}
    assert set(rows) == {"lrp_explain_L8", "lrp_explain_L16", "lrp_explain_L24"}
    assert {"lrp_explain_512", "lrp_explain_2048", "lrp_explain_8192"} <= set(smoke["rows"])
    for r in rows.values():
        assert "error" not in r and r["self_check"]["ok"] is True
        assert set(r["median_s"]) == {"explain", "forward", "forward_transformers"}
        assert all(v > 0 for v in r["median_s"].values()) and math.isfinite(r["ratio_explain_over_forward"])
        assert r["conservation_abs"] <= 1e-5 * max(1.0, abs(r["logit"]))
        assert r["forward_max_abs_diff_vs_transformers"] <= 1e-4  # the peer computes transformers' logits
        if not r["forward_transformers_path"]["fast"]:
            assert r["rounds"]["forward_transformers"] == 1  # the slow reference path: one round
    for name in ("profile_explain", "profile_forward"):  # where the time goes, for the GPU run to read
        profile = rows["lrp_explain_L16"][name]
        assert profile["top"] and all(op["self_ms"] >= 0 and op["calls"] > 0 for op in profile["top"])
        assert 0 < sum(op["share"] for op in profile["top"]) <= 1 + 1e-9 and profile["total_ms"] > 0
    cpu = rows["lrp_explain_L8"]["vs_cpu"]
    assert cpu["max_abs_diff"] <= 1e-4 * cpu["relevance_scale"] and cpu["same_top10_tokens"] is True
    explains = [t for t in smoke["targets"] if t["target"].startswith("explain / forward")]
    assert [t["target"] for t in explains] == [f"explain / forward, {n} tokens" for n in (8, 16, 24)]
    forward = smoke["comparisons"]["neuzip_forward"]
    # tiny layers: the resident decode tables (32 KB each) outweigh the weights; SmolLM2's: tests/core, docs/gpu.md
    assert forward["compressed_arrays_on"] == ["cpu"] and forward["linear_weights_bytes"]["ratio"] > 0
    assert all(forward["same_logits"].values()) and forward["graph_failed"] == {}
    assert {"compressed_unfused", "compressed_graph", "bf16_graph"} <= set(forward["median_s"])
    decode = smoke["comparisons"]["neuzip_decode_tiny_64x96"]
    assert set(decode["profile"]) == {"app", "app_unfused", "copy"} and decode["median_s"]["app_unfused"] > 0
    assert decode["bit_exact_vs_original"] is True  # every contestant, the unfused path included


@pytest.mark.slow
def test_the_compute_paths_need_only_the_compute_stack(tmp_path):
    """bench/gpu.py's explain and NeuZip rows run with every package of the app stack made unimportable, as on a
    CUDA image with only torch, triton, transformers and numba."""
    code = (f"import runpy, sys\nfor m in {APP_STACK!r}: sys.modules[m] = None\n"
            f"sys.argv = [{str(SCRIPT)!r}, '--smoke', '--only', 'lrp_explain,neuzip_decode,neuzip_model']\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["failed"] == [] and set(report["comparisons"]) == {
        "lrp_explain_L8", "lrp_explain_L16", "lrp_explain_L24", "neuzip_decode_tiny_64x96", "neuzip_forward",
        "neuzip_generate"}  # --only's group names: lrp_explain (every length), neuzip_model (forward, generation)


def test_a_rows_extras_stop_at_its_deadline_and_keep_the_timed_part(tmp_path, monkeypatch):
    """A row saves its timed part first, then each extra (profiles, peaks, sync counts) while its share allows: an
    extra past the deadline is listed as not measured, and what was saved stays in the row's JSON."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    gpu = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_gpu", gpu)  # its dataclasses look their module up
    spec.loader.exec_module(gpu)
    ctx = gpu.RowContext(time.time() + 60, tmp_path / "row.json")
    result = {"median_s": {"compressed": 1.0}}

    def first():
        assert json.loads((tmp_path / "row.json").read_text())["neuzip_forward"] == result  # saved before
        ctx.deadline = 0.0  # this part takes the rest of the share
        return 1.5

    gpu.extras(ctx, "neuzip_forward", result, {"peak_bytes": first, "profile": lambda: pytest.fail("past it")})
    saved = json.loads((tmp_path / "row.json").read_text())["neuzip_forward"]
    assert saved == {"median_s": {"compressed": 1.0}, "peak_bytes": 1.5, "not_measured": ["profile"]}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_without_cuda_and_without_smoke_exits_2_naming_the_fix(tmp_path):
    done = _run(tmp_path, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--smoke" in lines[0] and "CUDA" in lines[0]
    assert done.stdout == ""


@pytest.mark.slow
def test_mamba_ssm_branch_with_a_stand_in_module(tmp_path):
    """The mamba_ssm comparison's plumbing (import, call, ratio, error against the twin), exercised on the CPU
    with a stand-in ``mamba_ssm`` whose ``selective_scan_fn`` is this project's ordinary reference scan; the
    real library needs CUDA. Nothing here is a measurement."""
    package = tmp_path / "stand_in" / "mamba_ssm" / "ops"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "selective_scan_interface.py").write_text(
        "from kernels.selective_scan import selective_scan_ref\n\n"
        "def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):\n"
        "    assert z is None\n"
        "    return selective_scan_ref(u, delta, A, B, C, D, delta_bias, delta_softplus)\n")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(tmp_path / "stand_in"), str(REPO)]))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--only", "selective_scan_vs_mamba_ssm"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report["comparisons"]) == {"selective_scan_vs_mamba_ssm_L16", "selective_scan_vs_mamba_ssm_L32"}
    for row in report["comparisons"].values():
        assert set(row["median_s"]) == {"triton", "mamba_ssm"}
        assert math.isfinite(row["ratio_triton_over_mamba_ssm"]) and row["ratio_triton_over_mamba_ssm"] > 0
        assert row["max_abs_err_y_mamba_ssm_vs_twin"] < 1e-5  # the stand-in computes the same forward
        assert row["target_at_most_1x_of_mamba_ssm"] is None  # no verdict off CUDA
        assert "mamba_ssm" not in row  # no skip note when the module imports
    scan_targets = [t for t in report["targets"] if t["target"].startswith("scan fwd+bwd vs mamba_ssm")]
    assert len(scan_targets) == 2 and all(t["measured"] > 0 and t["peer"] > 0 for t in scan_targets)


@pytest.mark.slow
def test_a_row_killed_by_its_limit_leaves_its_parts_and_the_rows_after_it(tmp_path):
    """Each row in its own process (--isolate), killed at its share of the budget: a row that hangs after saving one
    part is killed, the JSON keeps that part (marked killed), the next row still runs and is written, the exit code
    says something failed, and the table of the targets is the last thing printed."""
    out = tmp_path / "gpu.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--isolate", "--budget", "45", "--only",
                           "_selftest_hang,topk_mask", "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report == json.loads(done.stdout)
    hung = report["comparisons"]["_selftest_hang"]
    assert hung["killed"] is True and hung["first_part"] == 1.0 and hung["limit_s"] < 20
    assert report["rows"]["_selftest_hang"]["killed"] is True and "_selftest_hang" in report["failed"]
    assert report["rows"]["_selftest_hang"]["wall_s"] < 25  # killed at its share, not at the end of the budget
    topk = report["comparisons"]["topk_mask"]
    assert "error" not in topk and topk["agrees_with_twin"] is True and not report["rows"]["topk_mask"]["killed"]
    assert [t["met"] for t in report["targets"]] and all(t["measured"] is None for t in report["targets"])
    tail = done.stderr.strip().splitlines()
    table_at = next(i for i, line in enumerate(tail) if line.startswith("The targets"))
    assert all(line.startswith("|") or not line.strip() for line in tail[table_at + 1:])
    assert "not measured" in tail[-1]
