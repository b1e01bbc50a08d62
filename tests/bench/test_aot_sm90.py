"""bench/aot_sm90.py: the kernels compile for a Hopper GPU (sm_90) on this CPU machine, with Triton's bundled ptxas,
and the tiles the scan may choose from, the decode block the NeuZip layout uses and the encoder's block neither spill
nor exceed the register file; the scan's chunk loop is pipelined (cp.async in its SASS). No device is used."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_scan_tiles_and_the_decode_block_compile_for_sm90_without_spills(tmp_path):
    from kernels._scan_triton import TILES
    from kernels.neuzip_encode import ENCODE_ROWS
    from kernels.neuzip_rans import DECODE_ROWS

    env = dict(os.environ, TMPDIR=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(REPO / "bench" / "aot_sm90.py"), "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    rows = {r["label"]: r for r in map(json.loads, done.stdout.splitlines())}
    scans = [f"scan {way} {d}x16x{c} stages=2" for way in ("fwd", "bwd") for d, c in TILES]
    decodes = [f"rans {mode} block={DECODE_ROWS}" for mode in ("decode", "merge", "merge flags", "gemv")]
    encodes = [f"encode {way} block={ENCODE_ROWS}" for way in ("count", "write")]
    assert set(rows) == set(scans + decodes + encodes)
    for label, row in rows.items():
        assert row["ok"] and not row["spills"] and row["stack"] == 0 and row["registers"] <= 255, (label, row)
    assert all(rows[label]["cp_async"] > 0 for label in scans)  # the next chunk's loads issued ahead
