"""The CPU codec in C (core/neuzip/pairs/native.c, loaded with ctypes) and its numba twin: the same streams and the
same decoded values, bit for bit; the codec costs a process neither numba nor triton; a bad choice is one message."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from core.neuzip import compress
from core.neuzip.pairs import backend
from core.paths import REPO_ROOT


@pytest.fixture
def restore_codec():
    before = backend.codec()
    yield
    backend._current = before


@pytest.mark.slow  # numba compiles its twin (tens of seconds on a fresh clone)
@pytest.mark.parametrize("k, block", [(7, None), (3, 64), (0, 32)])
def test_the_c_codec_and_its_numba_twin_agree_bit_for_bit(k, block, restore_codec):
    torch.manual_seed(k)
    w = (torch.distributions.StudentT(4).sample((333, 97)) * 0.02).bfloat16()
    w.view(-1)[::997] = torch.tensor(float("inf")).bfloat16()  # specials and rare exponents: escapes
    streams, values = {}, {}
    for name in backend.CHOICES:
        backend.use(name)
        ct = compress(w, k, block, chunk_size=4096)
        streams[name] = ct.arrays()
        values[name] = ct.decompress().view(torch.int16)
    for part in streams["native"]:
        assert np.array_equal(streams["native"][part], streams["numba"][part]), part
    assert torch.equal(values["native"], values["numba"])


def test_an_unknown_codec_is_refused(restore_codec):
    with pytest.raises(ValueError, match="unknown codec"):
        backend.use("zstd")


@pytest.mark.slow  # a fresh interpreter (torch's import)
def test_the_codec_imports_neither_numba_nor_triton_on_a_cpu_host(tmp_path):
    code = ("import sys, torch; from core.neuzip import compress; w = torch.randn(64, 64).bfloat16(); "
            "assert torch.equal(compress(w).decompress(), w); "
            "print(sorted(m for m in ('numba', 'llvmlite', 'triton') if m in sys.modules))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path)}  # no TRITON_INTERPRET
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_build_command_names_the_library_the_codec_loads(capsys, monkeypatch):
    """``python -m core neuzip build`` (the C codec ahead of time) finds or builds the very library the codec loads;
    where it cannot be built it exits 1 and says why and what runs instead."""
    from core.cli import main
    from core.neuzip.pairs import native

    assert main(["neuzip", "build", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["built"] and doc["library"] == str(native.library_path()) and doc["bytes"] > 1000
    assert native.library()._name == doc["library"]
    monkeypatch.setenv("CC", "/no/such/compiler")
    with pytest.raises(SystemExit) as exit_:
        main(["neuzip", "build"])
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert "cannot be built here" in out and "/no/such/compiler" in out and "numba twin" in out
