"""The command line loses no data (issue 42): ``--out`` never deletes or replaces what it did not write, FIFOs and
devices are refused as inputs and outputs, a damaged batch part is repaired or refused in words, and a count of 0
is refused. In-process through :func:`core.cli.main` (cheap: every refusal comes before any work)."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from core.cli import main
from core.errors import BadInputError
from core.files import atomic_write, check_in, check_out


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def users_folder(tmp_path) -> Path:
    """A folder of the user's own files (a thesis, a subfolder of data)."""
    folder = tmp_path / "my-work"
    (folder / "data").mkdir(parents=True)
    (folder / "thesis.tex").write_text("three years of work\n")
    (folder / "data" / "runs.csv").write_text("a,b\n1,2\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("argv", [("lrp", "train", "sentiment"), ("mathneuro", "train-demo"),
                                  ("lrp", "explain", "--model", "mamba-sentiment", "--text", "fine")])
def test_out_on_a_folder_that_holds_files_is_refused_before_any_work(users_folder, argv):
    """Issue 42, item 3: ``lrp train`` and ``mathneuro train-demo --out <existing folder>`` deleted everything in it
    and exited 0. Now the folder is refused in one line (exit 2) and left byte for byte as it was."""
    before = snapshot(users_folder)
    code, _, err = run(*argv, "--out", str(users_folder))
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1, err
    assert "already holds 2 entries (data, thesis.tex); nothing was written" in lines[0] and "--overwrite" in lines[0]
    assert snapshot(users_folder) == before


def test_overwrite_replaces_only_the_commands_own_files(users_folder):
    """With ``--overwrite`` a folder write (``save_trained``, ``save_checkpoint``: :func:`atomic_write` with
    ``folder=True``) replaces the files it writes and nothing else."""
    from core.zoo.training import save_trained

    (users_folder / "model.safetensors").write_bytes(b"old weights")
    before = snapshot(users_folder)

    def write(tmp: Path) -> str:
        (tmp / "model.safetensors").write_bytes(b"new weights")
        (tmp / "card.json").write_text("{}")
        return "measured"

    assert save_trained(users_folder, write) == "measured"
    after = snapshot(users_folder)
    assert after.pop("model.safetensors") == b"new weights" and after.pop("card.json") == b"{}"
    before.pop("model.safetensors")
    assert after == before
    assert sorted(p.name for p in users_folder.parent.iterdir()) == ["my-work"]  # nothing set aside is left


def test_a_folder_write_that_fails_half_way_puts_everything_back(users_folder, monkeypatch):
    (users_folder / "a.json").write_text("old a")
    before = snapshot(users_folder)
    real = os.replace

    def failing(src, dst):
        if Path(dst).name == "b.json":
            raise OSError(28, "No space left on device")
        return real(src, dst)

    def write(tmp: Path) -> None:
        for name in ("a.json", "b.json"):
            (tmp / name).write_text("new")

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        atomic_write(users_folder, write, folder=True)
    monkeypatch.undo()
    assert snapshot(users_folder) == before
    assert sorted(p.name for p in users_folder.parent.iterdir()) == ["my-work"]


def test_an_empty_or_new_folder_and_an_explicit_overwrite_pass_the_check(tmp_path, users_folder):
    (tmp_path / "empty").mkdir()
    assert check_out(tmp_path / "empty") == tmp_path / "empty"
    assert check_out(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert check_out(users_folder, overwrite=True) == users_folder
    assert check_out(users_folder, adds=True) == users_folder  # --resume: a run continued in its own folder


def test_fifos_are_refused_as_outputs_and_inputs(tmp_path):
    """A FIFO given as ``--in`` hung the batch (reading waits for a writer that never comes)."""
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="a named pipe"):
        check_in(fifo)
    with pytest.raises(BadInputError, match="it is a named pipe"):
        check_out(fifo)
    with pytest.raises(BadInputError, match="character device"):
        check_out("/dev/null")
    code, _, err = run("lrp", "batch", "--model", "mamba-sentiment", "--in", str(fifo), "--out",
                       str(tmp_path / "r.parquet"))
    assert code == 2 and "it is a named pipe (FIFO), not a file" in err


def test_a_count_of_zero_is_refused_not_read_as_the_default(tmp_path):
    """``mathneuro batch -n 0`` silently ran n = 100."""
    source = tmp_path / "prompts.csv"
    source.write_text("prompt\n2 + 2 =\n")
    code, _, err = run("mathneuro", "batch", "--in", str(source), "--out", str(tmp_path / "s.parquet"), "-n", "0")
    assert code == 2 and "The number of samples N must be a positive integer, got 0" in err
    assert not (tmp_path / "s.parquet").exists()
