"""bench/gpu_session.sh, the one device call of a lent GPU, run dry on the CPU (--smoke): every step's plumbing
(wheels into a private folder, the build script and sdist checked, the kernels checked, the benchmark within what
is left, the summary last), with at most 8 files written, all under $OUT."""
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_device_call_runs_dry_on_the_cpu(tmp_path):
    build = tmp_path / "build_cuda_ext.py"  # a stand-in with the real script's interface (SCAN, build)
    build.write_text("SCAN = ['selective_scan.cpp', 'selective_scan_fwd_fp32.cu']\n\n"
                     "def build(name, csrc, files, package_dir, site, arch):\n    raise RuntimeError('not here')\n")
    sdist = tmp_path / "mamba_ssm-0.0"
    (sdist / "csrc" / "selective_scan").mkdir(parents=True)
    (sdist / "mamba_ssm").mkdir()
    for name in ("selective_scan.cpp", "selective_scan_fwd_fp32.cu"):
        (sdist / "csrc" / "selective_scan" / name).write_text("")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), TMPDIR=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_session.sh"), "--smoke", "--total", "400", "--wheels",
                           str(tmp_path / "no-wheels"), "--build-script", str(build), "--mamba-sdist", str(sdist),
                           "--rows", "neuzip_decode"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = {p.name for p in out.iterdir()}
    assert files == {"session.log", "env.txt", "kernels-check.json", "build.log", "gpu.json", "summary.txt"}
    summary = (out / "summary.txt").read_text()
    checks = json.loads((out / "kernels-check.json").read_text())
    assert checks and all(r["ok"] for r in checks)
    assert f"kernels check: {len(checks)} of {len(checks)} pass" in summary
    # rows without the scan-vs-mamba_ssm row: the sdist is checked, nothing is built (the cores go to the bench)
    assert "not needed: --rows names no selective_scan_vs_mamba_ssm (build script and sdist usable: 2 sources)" \
        in summary
    report = json.loads((out / "gpu.json").read_text())
    assert report["mode"] == "smoke" and report["isolated_rows"] is True and report["failed"] == []
    assert report["comparisons"]["neuzip_decode_tiny_64x96"]["agrees_with_twin"] is True
    assert "| NeuZip decode GB/s vs device copy, tiny_64x96 |" in summary
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith(f"files in {out}") and "=== " in "\n".join(lines[-25:])  # the summary comes last
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("layerwise-session.")]  # its work folder removed


STAND_IN_EXTENSION = '''"""A stand-in for mamba_ssm's compiled selective_scan_cuda (2.3.2's fwd / bwd signatures), on the CPU: the
project's reference scan forward, its autograd for du."""
import torch

from kernels.selective_scan import selective_scan_ref


def fwd(u, delta, A, B, C, D, z, delta_bias, softplus):
    assert z is None and B.dim() == 4 and C.dim() == 4
    out = selective_scan_ref(u, delta, A, B[:, 0], C[:, 0], D, delta_bias, softplus)
    return out, torch.zeros(1)


def bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, dz, softplus, recompute):
    with torch.enable_grad():
        u = u.detach().requires_grad_(True)
        y = selective_scan_ref(u, delta, A, B[:, 0], C[:, 0], D, delta_bias, softplus)
        (du,) = torch.autograd.grad(y, u, dout)
    return du, None, None, None, None, None, None
'''

STAND_IN_BUILD = '''import os, shutil, time
SCAN = ["selective_scan.cpp"]


def build(name, csrc, files, package_dir, site, arch):
    assert name == "selective_scan_cuda" and arch == os.environ["LAYERWISE_CUDA_ARCH"] and files == SCAN
    time.sleep(8)
    shutil.copy(os.path.join(csrc, "stand_in_extension.py"), os.path.join(site, "selective_scan_cuda.py"))
    shutil.copytree(package_dir, os.path.join(site, os.path.basename(package_dir)))
    print("built", name, flush=True)
'''


@pytest.mark.slow
def test_the_background_build_is_waited_for_and_its_extension_used_alone(tmp_path):
    """The device path of the call, with a stand-in build (8 s, in the background beside the kernels check) that
    installs a stand-in selective_scan_cuda and a mamba_ssm package that does not import: the scan row runs once
    the build's marker is there, falls back to the extension alone and compares the scan with it."""
    build = tmp_path / "build_cuda_ext.py"
    build.write_text(STAND_IN_BUILD)
    sdist = tmp_path / "mamba_ssm-0.0"
    (sdist / "csrc" / "selective_scan").mkdir(parents=True)
    (sdist / "mamba_ssm").mkdir()
    (sdist / "mamba_ssm" / "__init__.py").write_text("raise ImportError('a part of mamba_ssm this row does not need')")
    (sdist / "csrc" / "selective_scan" / "selective_scan.cpp").write_text("")
    (sdist / "csrc" / "selective_scan" / "stand_in_extension.py").write_text(STAND_IN_EXTENSION)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), TMPDIR=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONDONTWRITEBYTECODE="1", LAYERWISE_SESSION_BUILD="1")
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_session.sh"), "--smoke", "--total", "400", "--wheels",
                           str(tmp_path / "no-wheels"), "--build-script", str(build), "--mamba-sdist", str(sdist),
                           "--rows", "selective_scan_vs_mamba_ssm"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert "mamba_ssm build: built, selective_scan_cuda imports" in summary
    assert "built selective_scan_cuda" in (out / "build.log").read_text()
    report = json.loads((out / "gpu.json").read_text())
    assert report["rows"]["selective_scan_vs_mamba_ssm"]["mamba_build_unfinished"] is False
    for length in (16, 32):
        row = report["comparisons"][f"selective_scan_vs_mamba_ssm_L{length}"]
        assert set(row["median_s"]) == {"triton", "mamba_ssm"}, row
        assert row["mamba_ssm_used"].startswith("selective_scan_cuda directly")
        assert row["max_abs_err_y_mamba_ssm_vs_twin"] < 1e-5  # the stand-in is the reference scan
    assert "| scan fwd+bwd vs mamba_ssm, L = 16 |" in summary and "its selective_scan_cuda alone" in summary
