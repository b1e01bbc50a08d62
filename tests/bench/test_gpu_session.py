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
    assert "dry run: build script and sdist usable: 2 sources" in summary
    report = json.loads((out / "gpu.json").read_text())
    assert report["mode"] == "smoke" and report["isolated_rows"] is True and report["failed"] == []
    assert report["comparisons"]["neuzip_decode_tiny_64x96"]["agrees_with_twin"] is True
    assert "| NeuZip decode GB/s vs device copy, tiny_64x96 |" in summary
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith(f"files in {out}") and "=== " in "\n".join(lines[-25:])  # the summary comes last
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("layerwise-session.")]  # its work folder removed
