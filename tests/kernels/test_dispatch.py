"""The kernel self-check: every Triton kernel proves itself against its twin before dispatch trusts it.

A GPU is simulated on the CPU by letting dispatch treat CPU tensors as eligible, so the real kernels run
under TRITON_INTERPRET=1 (set in tests/conftest.py), and failing kernels are simulated by registering
broken ones.
"""
import ast
import logging
from pathlib import Path

import pytest
import torch

from kernels import checks, dispatch

KERNELS_DIR = Path(dispatch.__file__).parent
needs_interpreter = pytest.mark.skipif(not dispatch.triton_available() or not dispatch.interpreting(),
                                       reason="needs triton and TRITON_INTERPRET=1")


@pytest.fixture
def fake_gpu(monkeypatch):
    """Dispatch treats CPU tensors as a device Triton can run on; verdicts start empty and are cleared after."""
    monkeypatch.setattr(dispatch, "device_eligible", lambda tensors: bool(tensors))
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    monkeypatch.delenv("LAYERWISE_KERNELS", raising=False)
    dispatch.reset_self_checks()
    yield
    dispatch.reset_self_checks()


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the check registry, so fake kernels do not leak into other tests."""
    monkeypatch.setattr(dispatch, "CHECKS", dict(dispatch.CHECKS))
    return dispatch.CHECKS


def _twice(x):
    return x * 2


def _all_modules():
    import kernels.checks  # noqa: F401 (imports every kernel: each registers its check)


def test_every_dispatcher_names_a_registered_check():
    """Each kernel module's dispatch passes ``kernel=`` with a name that has a self-check, and every check
    belongs to a dispatcher."""
    _all_modules()
    named = set()
    for path in KERNELS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "use_triton":
                kw = {k.arg: k.value for k in node.keywords}
                assert "kernel" in kw, f"{path.name}: use_triton without kernel="
                named.add(ast.literal_eval(kw["kernel"]))
    assert named == set(dispatch.CHECKS)
    assert {m.split(".")[1] for m in checks.KERNEL_MODULES} == \
        {p.stem for p in KERNELS_DIR.glob("*.py") if not p.stem.startswith("_")} - {"dispatch", "checks"}


def test_private_helper_modules_serve_a_registered_kernel_module():
    """A ``kernels/_name.py`` is a private helper: imported by a registered kernel module, by no one outside
    ``kernels/``, and it registers no check of its own (its kernel module does)."""
    helpers = {p.stem for p in KERNELS_DIR.glob("_*.py")} - {"__init__"}
    registered = {m.split(".")[1] for m in checks.KERNEL_MODULES}
    imported_by = {name: set() for name in helpers}
    for path in KERNELS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernels._"):
                imported_by[node.module.split(".")[1]].add(path.stem)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_check":
                assert path.stem not in helpers, f"{path.name}: a private helper registers a check"
    for name, users in imported_by.items():
        assert users & registered, f"kernels/{name}.py is imported by no registered kernel module"
    outside = [p for folder in ("core", "ui", "bench") for p in (KERNELS_DIR.parent / folder).rglob("*.py")
               if "kernels._" in p.read_text()]
    assert outside == [], f"private kernel helpers imported outside kernels/: {outside}"


@needs_interpreter
@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_every_real_kernel_passes_its_self_check_on_the_interpreter():
    rows = checks.check_all("cpu")
    assert {r["kernel"] for r in rows} == set(dispatch.CHECKS)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    dispatch.reset_self_checks()


def test_every_check_compares_every_output_tightly():
    """A perturbation of any one output of any kernel's reference run is caught by the comparison."""
    _all_modules()
    for name, check in dispatch.CHECKS.items():
        for dtype in check.dtypes:
            args = check.inputs(torch.device("cpu"), dtype)
            run = check.run or (lambda fn, a: fn(*a))
            want = run(check.ref, args)
            outputs = want if isinstance(want, tuple) else (want,)
            assert dispatch.compare(want, want) is None
            for i, out in enumerate(outputs):
                bad = out.detach().clone()
                flat = bad.view(-1)
                if bad.dtype == torch.bool:
                    flat[0] = ~flat[0]
                elif bad.is_floating_point():
                    flat[len(flat) // 2] += 0.1 * flat[len(flat) // 2].abs() + 0.1
                else:
                    flat[0] += 1
                got = tuple(bad if j == i else o for j, o in enumerate(outputs))
                assert dispatch.compare(got, want) is not None, f"{name} {dtype}: output {i} not checked"


@needs_interpreter
def test_a_passing_kernel_is_used_and_checked_once_per_device_and_dtype(fake_gpu):
    from kernels.neuzip_bits import split_bf16, split_bf16_ref

    x = torch.randn(3000).to(torch.bfloat16)
    assert dispatch.use_triton(x, kernel="split_bf16")
    assert all(torch.equal(a, b) for a, b in zip(split_bf16(x, 3), split_bf16_ref(x, 3)))
    assert list(dispatch.self_check_results()) == [("split_bf16", "cpu", "torch.bfloat16")]
    assert dispatch.use_triton(x.float(), kernel="add_rmsnorm")
    assert dispatch.use_triton(x, kernel="add_rmsnorm")
    assert dispatch.use_triton(x, kernel="add_rmsnorm")
    assert len(dispatch.self_check_results()) == 3


@needs_interpreter
@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_a_kernel_slower_than_its_library_call_is_checked_but_not_chosen(fake_gpu, monkeypatch):
    """The top-K mask lost to torch.topk + scatter on an H100 (5.6-7.3x): auto mode keeps the twin on every device,
    the check still runs it (``kernels check``), and LAYERWISE_KERNELS=triton still forces it."""
    from kernels.topk_mask import topk_mask, topk_mask_ref

    assert not dispatch.CHECKS["topk_mask"].auto and "H100" in dispatch.CHECKS["topk_mask"].why
    x = torch.randn(3000)
    assert not dispatch.use_triton(x, kernel="topk_mask")
    assert dispatch.self_check_results() == {}  # not even checked: it would not be used
    assert torch.equal(topk_mask(x, 77), topk_mask_ref(x, 77))
    rows = [r for r in dispatch.check_all("cpu") if r["kernel"] == "topk_mask"]
    assert rows and all(r["ok"] and not r["used"] for r in rows)
    assert not dispatch.use_triton(x, kernel="topk_mask")
    monkeypatch.setenv("LAYERWISE_KERNELS", "triton")
    assert dispatch.use_triton(x, kernel="topk_mask")


def test_a_kernel_that_does_not_compile_falls_back_to_its_twin_with_one_warning(fake_gpu, registry, caplog):
    calls = []

    def broken(x):
        calls.append(1)
        raise RuntimeError("CompilationError: at 12:4: unsupported op\nmore lines")

    dispatch.register_check("fake", dispatch.KernelCheck(triton=broken, ref=_twice,
                                                         inputs=lambda device, dtype: (torch.ones(4, device=device),)))
    x = torch.ones(8)
    with caplog.at_level(logging.WARNING, logger="layerwise.kernels"):
        for _ in range(5):
            assert not dispatch.use_triton(x, kernel="fake")
    assert len(calls) == 1  # checked once, then remembered
    warnings = [r for r in caplog.records if r.name == "layerwise.kernels"]
    assert len(warnings) == 1
    assert "'fake'" in warnings[0].getMessage() and "CompilationError: at 12:4" in warnings[0].getMessage()
    assert "more lines" not in warnings[0].getMessage()
    verdict = dispatch.self_check_results()[("fake", "cpu", "torch.float32")]
    assert not verdict["ok"] and "RuntimeError" in verdict["reason"]


def test_a_kernel_with_wrong_results_falls_back_and_the_public_op_stays_right(fake_gpu, registry, monkeypatch, caplog):
    import kernels.topk_mask as module

    def wrong(scores, k):  # off by one: takes k + 1 entries
        return module.topk_mask_ref(scores, min(k + 1, scores.numel()))

    monkeypatch.setattr(module, "topk_mask_triton", wrong)
    dispatch.register_check("topk_mask", dispatch.KernelCheck(triton=wrong, ref=module.topk_mask_ref,
                                                              inputs=registry["topk_mask"].inputs))
    x = torch.randn(500)
    with caplog.at_level(logging.WARNING, logger="layerwise.kernels"):
        mask = module.topk_mask(x, 10)
    assert int(mask.sum()) == 10 and torch.equal(mask, module.topk_mask_ref(x, 10))
    assert "entries differ" in caplog.text


def test_a_kernel_off_by_more_than_the_tolerance_is_refused(fake_gpu, registry):
    inputs = lambda device, dtype: (torch.linspace(-1, 1, 64, device=device, dtype=dtype),)  # noqa: E731
    dispatch.register_check("close", dispatch.KernelCheck(triton=lambda x: x * 2 * (1 + 1e-6), ref=_twice,
                                                          inputs=inputs, dtypes=(torch.float32, torch.bfloat16)))
    dispatch.register_check("far", dispatch.KernelCheck(triton=lambda x: x * 2 + 1e-3, ref=_twice, inputs=inputs))
    assert dispatch.use_triton(torch.ones(3), kernel="close")
    assert not dispatch.use_triton(torch.ones(3), kernel="far")
    # a dtype the kernel does not list is checked with its first dtype
    assert dispatch.use_triton(torch.ones(3, dtype=torch.float16), kernel="close")


def test_the_environment_forces_either_path(fake_gpu, registry, monkeypatch):
    calls = []

    def broken(x):
        calls.append(1)
        raise RuntimeError("no")

    dispatch.register_check("fake", dispatch.KernelCheck(triton=broken, ref=_twice,
                                                         inputs=lambda device, dtype: (torch.ones(2),)))
    x = torch.ones(2)
    monkeypatch.setenv("LAYERWISE_KERNELS", "ref")
    assert not dispatch.use_triton(x, kernel="fake")
    monkeypatch.setenv("LAYERWISE_KERNELS", "triton")
    assert dispatch.use_triton(x, kernel="fake")
    assert calls == []  # neither forced path runs the self-check
    monkeypatch.setenv("LAYERWISE_KERNELS", "fast")
    with pytest.raises(ValueError, match="LAYERWISE_KERNELS"):
        dispatch.use_triton(x, kernel="fake")
    monkeypatch.setenv("LAYERWISE_KERNELS", "auto")
    assert not dispatch.use_triton(x, kernel="fake") and calls == [1]


def test_cpu_tensors_never_reach_triton_and_unknown_kernels_are_a_bug(monkeypatch):
    monkeypatch.delenv("LAYERWISE_KERNELS", raising=False)
    assert not dispatch.use_triton(torch.ones(3), kernel="topk_mask")
    monkeypatch.setattr(dispatch, "device_eligible", lambda tensors: True)
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    with pytest.raises(KeyError, match="no registered self-check"):
        dispatch.use_triton(torch.ones(3), kernel="no-such-kernel")


def _counting(calls, inputs=lambda device, dtype: (torch.ones(4),)):
    def kernel(x):
        calls.append(1)
        return x * 2
    return dispatch.KernelCheck(triton=kernel, ref=_twice, inputs=inputs)


def test_every_spelling_of_a_cuda_device_shares_one_verdict(fake_gpu, registry, monkeypatch):
    """``python -m core kernels check`` / the app's start (``check_all("cuda")``, ``warm("cuda")``) decide the
    verdicts that a model's tensors ask for under ``cuda:0``: the check runs once, not again inside the model."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert dispatch.device_key("cuda") == dispatch.device_key("cuda:0") == dispatch.device_key(torch.device("cuda", 0)) \
        == "cuda:0"
    assert dispatch.device_key("cuda:1") == "cuda:1" and dispatch.device_key("cpu") == "cpu"
    calls = []
    registry.clear()
    registry["fake"] = _counting(calls)
    assert [r["device"] for r in dispatch.check_all("cuda")] == ["cuda:0"] and calls == [1]
    for spelling in ("cuda", "cuda:0", torch.device("cuda", 0), torch.device("cuda")):
        assert dispatch.kernel_trusted("fake", spelling, torch.float32)
    assert calls == [1]
    dispatch.reset_self_checks()
    assert dispatch.warm("cuda") == [{"kernel": "fake", "device": "cuda:0", "dtype": "float32", "ok": True}]
    assert dispatch.kernel_trusted("fake", torch.device("cuda", 0), torch.float32) and calls == [1, 1]
    assert dispatch.warm("cpu") == []  # the twins run off CUDA: nothing to decide


def test_a_check_in_progress_is_never_waited_for(fake_gpu, registry):
    """While a kernel's check runs, another call for the same kernel (another thread, e.g. autograd's device thread
    running a backward for it, or the check's own thread re-entering) uses the twin at once instead of waiting."""
    import threading

    answers = {}

    def kernel(x):
        other = threading.Thread(target=lambda: answers.setdefault("thread", dispatch.use_triton(x, kernel="slow")))
        other.start()
        other.join(10)
        answers["alive"] = other.is_alive()
        answers["same thread"] = dispatch.use_triton(x, kernel="slow")
        return x * 2

    registry["slow"] = dispatch.KernelCheck(triton=kernel, ref=_twice, inputs=lambda device, dtype: (torch.ones(3),))
    assert dispatch.use_triton(torch.ones(2), kernel="slow")
    assert answers == {"thread": False, "alive": False, "same thread": False}
    assert dispatch.use_triton(torch.ones(2), kernel="slow")  # decided: the kernel from now on


def test_a_check_runs_apart_from_the_callers_autograd_state(fake_gpu, registry):
    """A check asked for inside no_grad, inference mode or a caller's saved-tensor hooks (activation checkpointing)
    still gets gradients and never stores its tensors through the caller's hooks."""
    packed = []

    def run(fn, args):
        (x,) = args
        x = x.detach().clone().requires_grad_(True)
        y = fn(x)
        (g,) = torch.autograd.grad((y * y).sum(), x)
        return y.detach(), g

    inputs = lambda device, dtype: (torch.linspace(-1, 1, 8),)  # noqa: E731
    for i, context in enumerate((torch.no_grad, torch.inference_mode,
                                 lambda: torch.autograd.graph.saved_tensors_hooks(
                                     lambda t: packed.append(t) or t, lambda t: t))):
        registry[f"grad-{i}"] = dispatch.KernelCheck(triton=lambda x: x * 2, ref=_twice, inputs=inputs, run=run)
        with context():
            assert dispatch.use_triton(torch.ones(2), kernel=f"grad-{i}")
        assert dispatch.self_check_results()[(f"grad-{i}", "cpu", "torch.float32")] == {"ok": True, "reason": ""}
    assert packed == []
