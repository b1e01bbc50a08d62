"""A test run leaves /tmp as it found it: every temporary file of the run, of its subprocesses and of the app it
launches goes under pytest's base temp folder (tests/conftest.py), and the session fails if a Layerwise temp
entry appears in /tmp itself."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ORIGINAL_TMP, OWN_TMP_NAMES, TMP_ROOT


def test_temp_files_of_the_run_and_its_subprocesses_go_under_pytest_base_temp(request, tmp_path):
    root = request.config.stash[TMP_ROOT]
    assert tmp_path.is_relative_to(root) and root.resolve() != ORIGINAL_TMP.resolve()
    assert Path(tempfile.gettempdir()) == root / "tmp" and os.environ["TMPDIR"] == str(root / "tmp")
    assert os.environ["GRADIO_TEMP_DIR"] == str(root / "gradio")
    with tempfile.TemporaryDirectory(prefix="lrp-") as made:
        assert Path(made).parent == root / "tmp"
    code = ("import tempfile, os; from gradio_client.client import DEFAULT_TEMP_DIR; "
            "print(tempfile.gettempdir()); print(DEFAULT_TEMP_DIR)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [str(root / "tmp"), str(root / "gradio")]


def test_the_session_check_knows_layerwise_names():
    for name in ("lrp-0dvnjc5j", "mathneuro-layers-6na4mhsj", "layerwise-recompute-_twdn36i", "neuzip-x"):
        assert OWN_TMP_NAMES.match(name)
    for name in ("pytest-of-root", "gradio", "0636c7327ede6136cb92f28c79b2e3e7c3e42adf", "tmp.gPQ1L68Dfs"):
        assert not OWN_TMP_NAMES.match(name)


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_the_app_deletes_its_gradio_temp_files():
    from ui import build_app
    assert build_app().delete_cache == (3600, 3600)
