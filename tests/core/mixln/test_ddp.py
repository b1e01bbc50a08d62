"""Data-parallel Mix-LN training: ``torchrun --nproc_per_node 2 -m core mixln train ...`` (gloo on this CPU) trains the
single-process run: the same global batch split over the ranks, every logged value equal to float rounding, one run
folder written by rank 0 (checkpoints and --resume included); a batch that does not split and a rank that dies each
end in one message, and a run that did not end never looks finished."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from core.errors import BadInputError
from core.mixln.train import TrainConfig, check_world, train_batch

REPO = Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "assets" / "mixln" / "tokenizer.json"
# a tiny model, a few steps: per-layer gradient norms at steps 1, 2, 4, 6; held-out loss at 3 and 6; a checkpoint at 3
ARGS = ["--norm", "pre", "--layers", "2", "--hidden", "32", "--heads", "2", "--batch", "4", "--seq", "32",
        "--warmup", "1", "--eval-every", "3", "--eval-batches", "2", "--grad-every", "2", "--checkpoint-every", "3",
        "--tokenizer", str(TOKENIZER), "--threads", "1"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
needs_tokenizer = pytest.mark.skipif(not TOKENIZER.is_file(), reason="no committed tokenizer in assets/mixln")


def launch(cmd, timeout=300):
    return subprocess.run([*cmd], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def train_cmd(*extra, world=2):
    return [*(TORCHRUN if world > 1 else [sys.executable]), "-m", "core", "mixln", "train", *extra]


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def max_rel_difference(h1: dict, h2: dict) -> dict:
    """The largest relative difference of each logged curve between two histories (same steps required)."""
    assert [r["step"] for r in h1["train"]] == [r["step"] for r in h2["train"]]
    assert [r["step"] for r in h1["eval"]] == [r["step"] for r in h2["eval"]]
    assert [r["step"] for r in h1["grad_norms"]] == [r["step"] for r in h2["grad_norms"]]
    out = {"loss": max(rel(a["loss"], b["loss"]) for a, b in zip(h1["train"], h2["train"])),
           "grad_norm": max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(h1["train"], h2["train"])),
           "lr": max(rel(a["lr"], b["lr"]) for a, b in zip(h1["train"], h2["train"])),
           "eval_loss": max(rel(a["loss"], b["loss"]) for a, b in zip(h1["eval"], h2["eval"]))}
    for kind in ("param", "input"):
        out[f"layer_{kind}_grad_norm"] = max(rel(x, y) for a, b in zip(h1["grad_norms"], h2["grad_norms"])
                                             for x, y in zip(a[kind], b[kind]))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same command run in one process and under torchrun with 2 gloo processes: (folder, seconds, output)."""
    root = tmp_path_factory.mktemp("ddp")
    found = {}
    for name, world in (("single", 1), ("ddp", 2)):
        t0 = time.perf_counter()
        res = launch(train_cmd(*ARGS, "--steps", "6", "--out", str(root / name), world=world))
        assert res.returncode == 0, res.stderr[-3000:]
        found[name] = (root / name, time.perf_counter() - t0, res)
    return found


def history(folder: Path) -> dict:
    return json.loads((folder / "history.json").read_text())


# ---- the global batch -----------------------------------------------------------------------------------------

def test_each_rank_takes_its_share_of_the_same_global_batch():
    tokens = torch.arange(5000)
    config = TrainConfig(steps=3, batch_size=8, seq_len=16, seed=3)
    for step in (1, 2, 3):
        whole = train_batch(tokens, step, config)
        for world in (1, 2, 4, 8):
            shares = [train_batch(tokens, step, config, rank, world) for rank in range(world)]
            assert all(s.shape == (8 // world, 16) for s in shares)
            assert torch.equal(torch.cat(shares), whole)  # the run's data does not depend on the number of processes


def test_a_batch_that_does_not_split_over_the_processes_is_refused():
    check_world(6, 2)
    check_world(5, 1)
    with pytest.raises(BadInputError, match=r"--batch 6 does not split over 4 processes.*multiple of 4 \(e.g. 4 or 8\)"):
        check_world(6, 4)


@needs_tokenizer
def test_a_run_in_progress_says_running(tmp_path):
    from core.mixln import train_run
    seen = []

    def look(fraction, message):
        if not seen and fraction > 0:  # the first training step
            seen.append(json.loads((tmp_path / "run" / "run.json").read_text())["status"])
    meta = train_run(tmp_path / "run", "pre", 0.0, dict(vocab_size=4096, hidden_size=16, num_layers=1, num_heads=2,
                                                        intermediate_size=32),
                     dict(steps=2, batch_size=2, seq_len=16, warmup_steps=1, eval_every=0, eval_batches=1,
                          grad_log_every=0), TOKENIZER, progress=look)
    assert seen == ["running"]  # from the start: a run killed midway never looks finished
    assert meta["status"] == json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"


# ---- two gloo processes against one -----------------------------------------------------------------------------

@pytest.mark.slow
@needs_tokenizer
def test_two_gloo_processes_train_the_single_process_run(runs):
    (single, t1, r1), (ddp, t2, r2) = runs["single"], runs["ddp"]
    h1, h2 = history(single), history(ddp)
    assert h1["status"] == h2["status"] == "finished" and len(h2["train"]) == 6
    diff = max_rel_difference(h1, h2)
    print(f"\n2 gloo processes vs 1 process, 6 steps: max relative difference {json.dumps(diff)}; "
          f"wall {t1:.1f} s (1 process) / {t2:.1f} s (torchrun, 2 processes)")
    assert all(v <= 1e-3 for v in diff.values()), diff  # every logged step, every curve
    meta = json.loads((ddp / "run.json").read_text())
    assert meta["world_size"] == 2 and meta["train"]["batch_size"] == 4 and meta["train"]["seed"] == 0
    # one run folder, the files of the single-process run, written once: rank 0 alone printed the result
    assert sorted(p.name for p in ddp.iterdir()) == sorted(p.name for p in single.iterdir())
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["history.json", "step-0000003", "step-0000006"]
    assert r2.stdout.count("finished:") == 1 and r2.stderr.count("step 6/6 held-out loss") == 1
    assert "Traceback" not in r2.stderr
    from safetensors.torch import load_file
    w1, w2 = load_file(str(single / "model.safetensors")), load_file(str(ddp / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(torch.allclose(w1[k], w2[k], rtol=1e-4, atol=1e-6) for k in w1)


@pytest.mark.slow
@needs_tokenizer
def test_resume_under_two_processes_continues_the_run(runs, tmp_path):
    """Resumed from rank 0's step-3 checkpoint under torchrun, the run ends as the uninterrupted one."""
    single, ddp = runs["single"][0], runs["ddp"][0]
    folder = tmp_path / "resumed"
    shutil.copytree(ddp, folder)
    shutil.rmtree(folder / "checkpoints" / "step-0000006")
    for f in ("model.safetensors", "history.json"):
        (folder / f).unlink()
    res = launch(train_cmd("--steps", "6", "--threads", "1", "--resume", str(folder)))
    assert res.returncode == 0, res.stderr[-3000:]
    diff = max_rel_difference(history(single), history(folder))
    print(f"\nresumed at step 3 under 2 processes vs 1 process: max relative difference {json.dumps(diff)}")
    assert all(v <= 1e-3 for v in diff.values()), diff
    assert json.loads((folder / "run.json").read_text())["status"] == "finished"


# ---- bad launches -------------------------------------------------------------------------------------------------

@pytest.mark.slow
@needs_tokenizer
def test_a_batch_that_does_not_split_is_one_message(tmp_path):
    res = launch(train_cmd(*[a if a != "4" else "3" for a in ARGS], "--steps", "2", "--out", str(tmp_path / "r")))
    assert res.returncode != 0
    text = res.stdout + res.stderr
    assert text.count("--batch 3 does not split over 2 processes") == 1, text[-3000:]
    assert "Fix: use a --batch that is a multiple of 2" in text
    assert f'File "{REPO / "core"}' not in text  # no traceback through Layerwise (torchrun adds its own report)
    assert not (tmp_path / "r").exists()


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of the worker with RANK=rank among the children of ``parent`` (Linux /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(entry)
    return None


@pytest.mark.slow
@needs_tokenizer
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank's process in /proc")
def test_a_rank_that_dies_stops_the_others_and_nothing_looks_finished(tmp_path):
    out = tmp_path / "run"
    args = [a for a in ARGS]
    args[args.index("--checkpoint-every") + 1] = "5"
    proc = subprocess.Popen(train_cmd(*args, "--steps", "100000", "--out", str(out)), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "step 10/" in line or not line:
                break
        assert "step 10/" in lines[-1], "".join(lines)[-3000:]
        victim = _rank_pid(proc.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        rest_out, rest_err = proc.communicate(timeout=120)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest_err + rest_out
    print(f"\nrank 1 killed at step >= 10: torchrun ended in {stopped_in:.1f} s with exit code {proc.returncode}")
    assert proc.returncode != 0
    # rank 0 saw its peer go and said so once, without a traceback of its own
    assert text.count("another process of this run stopped") == 1, text[-3000:]
    assert f'File "{REPO / "core"}' not in text  # no traceback through Layerwise on any rank
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] in ("failed", "running") and meta["status"] != "finished"
    assert not (out / "model.safetensors").exists() and not (out / "history.json").exists()
    done = [p for p in (out / "checkpoints").iterdir() if p.name.startswith("step-")]
    assert done and all((p / "trainer_state.json").is_file() and (p / "model.safetensors").is_file() for p in done)
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporary file left behind
