"""``python -m core kernels check``: the self-check of every kernel, as a user on a new machine runs it."""
import json

import pytest
import torch

from core.cli import main
from kernels import dispatch


@pytest.mark.skipif(not dispatch.interpreting(), reason="needs TRITON_INTERPRET=1 (tests/conftest.py sets it)")
@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_check_runs_every_kernel_and_reports_json(capsys):
    try:
        assert main(["kernels", "check", "--device", "cpu", "--json"]) == 0
    finally:
        dispatch.reset_self_checks()
    rows = json.loads(capsys.readouterr().out)
    assert {r["kernel"] for r in rows} == set(dispatch.CHECKS)
    assert all(r["ok"] and r["device"] == "cpu" for r in rows)


@pytest.mark.parametrize("argv, words", [
    (["--device", "tpu"], "not a device"),
    pytest.param(["--device", "cuda:0"], "no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_bad_devices_get_one_clear_line(argv, words, capsys):
    assert main(["kernels", "check", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Fix:" in err and "Traceback" not in err


def test_cpu_without_the_interpreter_says_what_runs_instead(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert main(["kernels", "check", "--device", "cpu"]) == 2
    assert "PyTorch twins" in capsys.readouterr().err
