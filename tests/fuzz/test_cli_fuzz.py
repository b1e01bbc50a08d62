"""Fuzz every CLI command (``python -m core GROUP COMMAND ...``), enumerated from the argparse parser so a new
command is fuzzed without editing this file. Each input runs in-process through :func:`core.cli.main`.

Numbers: valid small ones, zero, negative, fractional, NaN, infinite, words; counts are not drawn huge (on the CLI
``-n 10**12`` is a valid request for all the data and a long run).

The property, for every input: exit 0 (a result), or exit 2 with one ``error:`` line on stderr; never a
traceback, never longer than the per-call limit, never an absolute path outside the project's folders in the
message, never a half-written results-cache entry.

Commands that download, train a model (``lrp key-token`` trains its classifier in every run) or rewrite the
committed example stores take minutes to hours with any valid input, so they (``PARSE_ONLY``) get the same bad
values plus one option argparse refuses: their argument parsing is fuzzed, not their run.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import tempfile
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.cli import all_commands
from tests.fuzz.common import (CALL_LIMIT_S, FUZZ_SETTINGS, TALLIES, TINY_MODELS, booleans, cache_problems, known,
                               leaked_paths, names, numbers, odd_files, odd_paths)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_thread")]

PARSE_ONLY = {("data", "prepare"), ("models", "prepare"), ("lrp", "train"), ("lrp", "key-token"),
              ("lrp", "precompute-examples"),
              ("lrp", "precompute-evaluation"), ("lrp", "precompute-bias"), ("mathneuro", "train-demo"), ("mathneuro", "precompute"),
              ("mixln", "reproduce"), ("neuzip", "precompute"), ("neuzip", "train-example"),
              ("neuzip", "recipe-effects"),
              ("site", ""), ("notices", "")}  # the whole static site (a minute; tests/ui/test_site.py); NOTICE.md
SPLITS = ["train", "validation", "test", "all"]


def _values(action: argparse.Action, files: dict, out_dir) -> st.SearchStrategy:
    """Strings for one argument: valid-looking ones (tiny models, small numbers) and bad ones."""
    from core.data import DATASETS

    dest = action.dest
    paths = odd_paths(files)
    if dest == "out":
        return st.sampled_from([str(out_dir), str(files["text_file"]), str(files["text_file"] / "sub"), ""])
    if action.choices:
        return names(list(action.choices)).map(str)
    if action.type in (int, float) or getattr(action.type, "__name__", "") in ("_number", "_alpha"):
        default = action.default if isinstance(action.default, (int, float)) else 1
        valid = [1, 2, 3] if action.type is int else [0.05, 0.5, min(default, 2)]
        return numbers(valid, huge=action.type is not int).map(str)  # a huge count: all the data, a long run
    if dest in ("model", "ref", "init_from"):
        return st.one_of(st.sampled_from(TINY_MODELS), st.sampled_from(paths + ["smollm-1t", "org/model"]))
    if dest in ("dataset", "name", "math", "nonmath", "only"):
        return names(list(DATASETS)).map(str)
    if dest == "split":
        return names(SPLITS).map(str)
    if dest in ("tokenizer", "resume", "file", "names"):
        return st.sampled_from(paths)
    default = action.default if isinstance(action.default, str) else (action.default or [None])[0] \
        if isinstance(action.default, list) else None
    return names([default] if default else ["x"]).map(str)


def _forced(action: argparse.Action) -> bool:
    """Arguments always given: positionals, the model, the output folder, the training steps (their default may be
    spelled in the help only: ``mixln train`` trains the 3,000-step recipe) and big numeric defaults (a sweep of
    2,000 words or 3,000 training steps is a valid input, but not one a fuzz budget can afford)."""
    if not action.option_strings:
        return action.nargs not in ("*", "?")
    return action.dest in ("model", "out", "steps") or (isinstance(action.default, (int, float))
                                                        and not isinstance(action.default, bool) and action.default > 8)


@st.composite
def argvs(draw, group: str, command: str, parser: argparse.ArgumentParser, files: dict, out_dir):
    argv = [group, command] if command else [group]  # a group that is one command itself (site, notices)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest == "json":
            continue
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if draw(booleans()) is True:
                argv.append(action.option_strings[0])
            continue
        if not _forced(action) and not draw(st.booleans()):
            continue
        many = action.nargs in ("+", "*")
        vals = draw(st.lists(_values(action, files, out_dir), min_size=1, max_size=3 if many else 1))
        if action.option_strings:
            argv.append(action.option_strings[-1])
        argv += vals
    if draw(st.booleans()):
        argv.append("--json")
    if (group, command) in PARSE_ONLY:
        argv.append("--fuzz-unknown-option")
    return argv


class _CallTooLong(BaseException):
    """Raised by the alarm: not an Exception, so no handler in the code under test swallows it."""


def _on_alarm(signum, frame):
    raise _CallTooLong()


def run_cli(argv: list[str]) -> tuple[int | str, str, str, float]:
    """(exit code or 'traceback'/'hang', stdout, stderr, seconds) of ``python -m core *argv``, in-process."""
    import torch

    from core.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    except _CallTooLong:
        code = "hang"
    except Exception:  # noqa: BLE001 - an exception escaping main is exactly what the fuzz looks for
        code = "traceback"
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        torch.set_num_threads(1)  # --threads may have changed it
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def judge(argv: list[str], code, stdout: str, stderr: str, seconds: float) -> tuple[str, str]:
    """('result' | 'clear' | 'known' | 'bad', why)."""
    where = " ".join(argv[:2])
    if code == "hang":
        return "bad", f"no answer within {CALL_LIMIT_S:.0f} s"
    if code == "traceback" or "Traceback (most recent call last)" in stderr + stdout:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        return ("known" if known(where, stderr) else "bad"), f"traceback: {last[:300]}"
    if code == 0:
        return "result", ""
    if code == 2:
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        if len(errors) != 1:
            return "bad", f"exit 2 with {len(errors)} 'error:' lines: {stderr[-300:]!r}"
        leaks = leaked_paths(errors[0], argv)
        if leaks:
            return "bad", f"leaked paths {leaks}: {errors[0][:300]}"
        return "clear", ""
    return "bad", f"exit {code}: {stderr[-300:]!r}"


@pytest.fixture(scope="module")
def cli_home(tmp_path_factory):
    """A private LAYERWISE_HOME (the prepared data and models linked read-only into it), odd files, an output dir."""
    from core.paths import data_dir, models_dir

    root = tmp_path_factory.mktemp("cli-fuzz")
    home = root / "home"
    home.mkdir()
    shutil.copytree(data_dir(), home / "data", symlinks=True)  # small; a command may not write the real one
    (home / "models").symlink_to(models_dir(), target_is_directory=True)
    mp = pytest.MonkeyPatch()
    (root / "tmp").mkdir()
    mp.setattr(tempfile, "tempdir", str(root / "tmp"))  # the commands' temporary files stay under tmp_path
    mp.setenv("LAYERWISE_HOME", str(home))
    mp.setenv("LAYERWISE_ONLINE", "0")
    yield {"home": home, "files": odd_files(root / "odd"), "out": root / "out"}
    mp.undo()


COMMANDS = all_commands()  # core.cli: every group's commands


@pytest.mark.parametrize("group, command", [(g, c) for g, c, _ in COMMANDS])
def test_every_cli_command_answers_bad_input_with_one_clear_line(group, command, cli_home):
    parser = next(p for g, c, p in COMMANDS if (g, c) == (group, command))
    tally = TALLIES["cli"]
    bad = []

    @FUZZ_SETTINGS
    @given(argvs(group, command, parser, cli_home["files"], cli_home["out"]))
    def one(argv):
        code, stdout, stderr, seconds = run_cli(argv)
        verdict, why = judge(argv, code, stdout, stderr, seconds)
        tally.record(f"{group} {command}", verdict, why, " ".join(argv), bad)

    one()
    from core.paths import results_dir
    from core.runner import results_cache
    for root in {results_dir(), results_cache().root}:
        bad += [f"{group} {command}: {p}" for p in cache_problems(root)]
    tally.bad += bad
    assert not bad, "\n".join(bad)


# ---- every --out path: written or refused in one line, before any work (issue 38) -----------------------------------
OUT_COMMANDS = [(g, c) for g, c, p in COMMANDS if any(a.dest == "out" for a in p._actions)]


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """The least argv argparse takes for a command, --out aside: a value for each positional and required option."""
    argv = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest == "out":
            continue
        if action.option_strings and not action.required:
            continue
        if not action.option_strings and action.nargs in ("*", "?"):
            continue
        value = str(action.choices[0] if action.choices else "mamba-sentiment" if action.dest == "model" else "x")
        argv += ([action.option_strings[-1]] if action.option_strings else []) + [value]
    return argv


@pytest.fixture(scope="module")
def bad_outs(cli_home):
    """``--out`` values that cannot be written, each with what must be left as it was."""
    root = cli_home["out"].parent / "bad-outs"
    folder = root / "a-folder.json"  # a folder where a file is named
    folder.mkdir(parents=True)
    read_only = root / "read-only"
    read_only.mkdir()
    users = root / "users-folder"  # issue 42: a train command deleted everything in it
    users.mkdir()
    (users / "thesis.tex").write_text("not the command's\n")
    os.mkfifo(root / "pipe.json")
    text_file = cli_home["files"]["text_file"]
    return {"traversal to /proc": "../../../../../../../../proc/self/x.json", "/proc": "/proc/x.json",
            "/sys": "/sys/x.json", "a folder": str(folder), "under a file": str(text_file / "sub.json"),
            "read-only folder": str(read_only / "x.json"), "empty": "", "a NUL": "x\x00.json",
            "a folder holding the user's files": str(users), "a FIFO": str(root / "pipe.json")}


@pytest.mark.parametrize("group, command", OUT_COMMANDS)
def test_every_out_path_is_written_or_refused_with_one_line_and_exit_2(group, command, cli_home, bad_outs,
                                                                       monkeypatch):
    """Issue 38: ``lrp explain ... --out ../../../../../../proc/self/x.json`` ended in a FileNotFoundError traceback
    from the atomic write. Each bad --out now gets one ``error:`` line naming --out and exit code 2, before the
    command does any work (a precompute or a training run is refused at once), and nothing is written. A read-only
    folder is simulated (the tests run as root, which may write anywhere): creating a file there fails with EROFS."""
    import errno

    import core.files

    parser = next(p for g, c, p in COMMANDS if (g, c) == (group, command))
    read_only = bad_outs["read-only folder"].rsplit("/", 1)[0]
    real_mkstemp = core.files.tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir) == read_only:
            raise OSError(errno.EROFS, "Read-only file system", str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(core.files.tempfile, "mkstemp", mkstemp)
    before = sorted(p.name for p in Path(read_only).parent.rglob("*"))
    bad = []
    for kind, out in bad_outs.items():
        argv = [group, *([command] if command else []), *_required(parser), "--out", out]
        code, stdout, stderr, seconds = run_cli(argv)
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        if code != 2 or len(errors) != 1 or "--out" not in errors[0] or "Traceback" in stderr:
            bad.append(f"{kind}: exit {code}, {stderr.strip()[-300:]!r}")
        TALLIES["cli"].record(f"{group} {command}", "clear" if not bad else "bad", "", " ".join(argv), [])
    assert sorted(p.name for p in Path(read_only).parent.rglob("*")) == before  # nothing written, no probe left
    assert (Path(read_only).parent / "users-folder" / "thesis.tex").read_text() == "not the command's\n"
    assert not bad, "\n".join(bad)
