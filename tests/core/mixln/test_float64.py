"""The Mix-LN float64 prefix is float64 end to end, so it is the same on any x86-64 CPU: every floating-point op of a
float64 run (initialisation, forward, loss, backward, gradient norms, Adam, evaluation) is recorded and none is below
float64; its initial weights are torch's float32 draws computed in float64, equal on every CPU path."""
import collections
import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from core.mixln import TrainConfig, runs, train
from core.mixln.rng import normal_float64, round_to_float32
from tests.core.mixln.test_runs import float64_tolerance

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = dict(vocab_size=runs.RECIPE_MODEL["vocab_size"], hidden_size=16, num_layers=2, num_heads=2,
            intermediate_size=32, embedding_init_std=runs.RECIPE_MODEL["embedding_init_std"])
# one step logs the per-layer gradient norms, two steps so Adam's moments are used, an evaluation at the end
TINY_TRAIN = dict(steps=2, batch_size=2, seq_len=16, warmup_steps=1, eval_every=2, eval_batches=1, grad_log_every=1)


class FloatOps(TorchDispatchMode):
    """Counts every op that dispatches to a kernel, and the floating-point tensors below float64 it takes or gives
    (tensors on the meta device hold no numbers: a model constructed there computes nothing)."""

    def __init__(self):
        super().__init__()
        self.ops, self.low = collections.Counter(), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[str(func)] += 1
        for t in tree_flatten((args, kwargs or {}, out))[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta" and t.is_floating_point() \
                    and t.dtype != torch.float64:
                self.low[f"{func} {t.dtype}"] += 1
        return out


def test_a_float64_run_has_no_floating_op_below_float64():
    """The recipe's float64 path (what ``float64_prefix`` trains: ``train_run`` with dtype float64, the committed
    tokenizer and corpora) for Mix-LN (a Post-LN and a Pre-LN layer), and the DeepNorm and Sandwich-LN placements."""
    probe = FloatOps()
    with probe:
        hist = runs.train_run(None, "mix", 0.5, TINY, {**TINY_TRAIN, "dtype": "float64"},
                              runs.ASSETS / "tokenizer.json")
        tokens = torch.randint(0, TINY["vocab_size"], (4000,), generator=torch.Generator().manual_seed(0))
        for norm in ("deepnorm", "sandwich"):
            model = runs.build_model(norm, 1.0, seed=3, dtype="float64", **TINY)
            other = train(model, tokens, tokens, TrainConfig(**TINY_TRAIN, dtype="float64"))
            assert other.status == "finished" and len(other.grad_norms) == 2
    assert hist["status"] == "finished" and len(hist["train"]) == 2 and hist["eval"]
    assert not probe.low, probe.low.most_common(10)
    # what was watched: the initial draws, the forward, loss and backward, the gradient norms and Adam
    seen = set(probe.ops)
    for op in ("aten.randint.low_generator", "aten.log.default", "aten.mm.default", "aten.nll_loss_forward.default",
               "aten.nll_loss_backward.default", "aten.linalg_vector_norm.default", "aten.addcdiv_.default"):
        assert op in seen, (op, sorted(seen)[:40])


def test_float64_draws_are_torchs_float32_draws():
    """On an AVX2 / AVX-512 CPU torch draws a float32 normal with its vectorised kernel; the float64 draws are those
    values to float32 rounding (equal bits in most positions, 3e-7 at most elsewhere), float32 numbers themselves,
    and take the same words of the generator (whatever the size, a tail of fewer than 16 values included)."""
    for shape, std in (((4096, 64), (2 / 5) ** 0.5), ((176, 64), 0.02), ((37,), 0.5), ((5,), 1.0)):
        g32, g64 = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
        a = torch.empty(shape).normal_(0.0, std, generator=g32).double()
        b = normal_float64(shape, std, g64)
        assert b.dtype == torch.float64 and b.shape == a.shape
        assert torch.equal(b, b.float().double())  # float32 numbers
        after = [torch.randint(0, 2 ** 30, (8,), generator=g) for g in (g32, g64)]
        assert torch.equal(*after)
        if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):  # torch's vectorised float32 kernel
            assert ((a - b).abs() <= 4e-7 * a.abs()).all(), shape
            assert (a == b).double().mean() > 0.8, shape
        if b.numel() > 1000:
            assert b.std().item() == pytest.approx(std, rel=0.02)


def test_round_to_float32_is_ieee_rounding():
    x = torch.randn(100_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5
    assert torch.equal(round_to_float32(x), x.float().double())


DRAWS = """
import hashlib, torch
from core.mixln.rng import normal_float64
from core.mixln.launch import build_model
print(torch.backends.cpu.get_cpu_capability())
for shape, std in (((4096, 64), 0.6), ((176, 64), 0.02), ((37,), 0.5)):
    print(hashlib.sha256(normal_float64(shape, std, torch.Generator().manual_seed(5)).numpy().tobytes()).hexdigest())
model = build_model("deepnorm", 1.0, seed=2, dtype="float64", vocab_size=512, hidden_size=16, num_layers=2,
                    num_heads=2, intermediate_size=32)
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_float64_initial_weights_are_the_same_on_every_cpu_path():
    """torch's kernels for an AVX-only CPU (``ATEN_CPU_CAPABILITY=default``: libm, no vectorised float32 draw, in a
    fresh process) give the float64 initial weights bit for bit as this CPU's kernels do."""
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        exec(DRAWS, {})
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    there = subprocess.run([sys.executable, "-c", DRAWS], cwd=runs.ASSETS.parents[1], env=env, capture_output=True,
                           text=True, timeout=300, check=True).stdout
    (ours, *got), (theirs, *expected) = here.getvalue().split(), there.split()
    assert theirs == "DEFAULT" and len(got) == 4
    assert got == expected, (ours, theirs)


def test_a_float64_model_is_built_without_a_float32_weight():
    model = runs.build_model("mix", 0.25, seed=0, dtype="float64", **TINY)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    ref = runs.build_model("mix", 0.25, seed=0, **TINY)  # the float32 model of the same seed: the same draws, to the
    for (name, p64), p32 in zip(model.named_parameters(), ref.parameters()):  # rounding of torch's float32 kernels
        assert (p64 - p32.double()).abs().max() <= 1e-5 * p32.abs().max(), name


@pytest.mark.slow
def test_recording_the_prefix_rewrites_only_it(tmp_path):
    """``mixln reproduce --prefix-only`` (``record_prefixes``): the run's float64 prefix recorded again, the rest of
    its run.json unchanged; runs not trained under the root are left out."""
    job = runs.Job("main", "mix-ln-0.25", 0)
    folder = tmp_path / job.relative_folder
    folder.mkdir(parents=True)
    meta = json.loads((runs.ASSETS / job.relative_folder / "run.json").read_text())
    stale = {**meta["float64_prefix"], "loss": [x * (1 + 1e-6) for x in meta["float64_prefix"]["loss"]]}
    (folder / "run.json").write_text(json.dumps({**meta, "float64_prefix": stale}))
    (tmp_path / "tokenizer.json").write_bytes((runs.ASSETS / "tokenizer.json").read_bytes())
    changes = runs.record_prefixes(tmp_path, [job, runs.Job("main", "pre-ln", 1)], steps=3)
    assert list(changes) == [job.key] and changes[job.key] == pytest.approx(1e-6, rel=1e-3)
    after = json.loads((folder / "run.json").read_text())
    assert {k: v for k, v in after.items() if k != "float64_prefix"} == \
        {k: v for k, v in meta.items() if k != "float64_prefix"}
    got = after["float64_prefix"]
    assert got["steps"] == 3 and len(got["loss"]) == len(got["grad_norm"]) == 3
    changes = runs.prefix_changes(got, meta["float64_prefix"])  # the recorded prefix, its first 3 steps
    assert max(changes.values()) <= float64_tolerance(job), changes
