"""Fused residual-add + RMSNorm: the Triton kernels (under TRITON_INTERPRET=1 on CPU) against the
PyTorch reference, forward and backward, and the reference against the formula written out by hand."""
import math

import pytest
import torch

import kernels.rmsnorm as rk
from kernels.rmsnorm import add_rmsnorm, add_rmsnorm_ref, add_rmsnorm_triton, rmsnorm


pytestmark = pytest.mark.usefixtures("single_thread")

pytestmark = pytest.mark.skipif(rk.triton is None, reason="triton not installed")

# outputs are rounded once to the dtype; float32 differences come only from the order of the sum
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _inputs(dtype, shape=(3, 5, 40), residual=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype).requires_grad_()
    r = torch.randn(shape, generator=g).to(dtype).requires_grad_() if residual else None
    w = (1 + 0.3 * torch.randn(shape[-1], generator=g)).requires_grad_()
    dy = torch.randn(shape, generator=g).to(dtype)
    ds = torch.randn(shape, generator=g).to(dtype)
    return x, r, w, dy, ds


def _run(fn, x, r, w, dy, ds, scale, use_sum):
    x_, w_ = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    r_ = r.detach().clone().requires_grad_() if r is not None else None
    y, s = fn(x_, r_, w_, 1e-6, scale)
    loss = (y.float() * dy.float()).sum()
    if use_sum and r is not None:
        loss = loss + (s.float() * ds.float()).sum()
    loss.backward()
    return y.detach(), s.detach(), x_.grad, (r_.grad if r_ is not None else None), w_.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("residual,scale,use_sum", [(False, 1.0, False), (True, 1.0, True), (True, 1.0, False),
                                                    (True, 1.7, True)])
def test_kernel_matches_reference_forward_and_backward(dtype, residual, scale, use_sum):
    x, r, w, dy, ds = _inputs(dtype, residual=residual)
    got = _run(add_rmsnorm_triton, x, r, w, dy, ds, scale, use_sum)
    want = _run(add_rmsnorm_ref, x, r, w, dy, ds, scale, use_sum)
    tol = TOL[dtype]
    names = ["y", "s", "dx", "dresidual", "dweight"]
    for name, a, b in zip(names, got, want):
        if b is None:
            assert a is None, name
            continue
        assert a.dtype == b.dtype, name
        # dweight sums over all rows: scale its tolerance with the gradient's size
        t = dict(atol=tol["atol"] * (b.abs().max().item() + 1), rtol=tol["rtol"]) if name == "dweight" else tol
        torch.testing.assert_close(a.float(), b.float(), **t, msg=name)


def _formula_float64(x, r, w, eps, scale):
    s = x + scale * r
    return s / torch.sqrt((s * s).mean(-1, keepdim=True) + eps) * w, s


def test_kernel_gradients_match_float64_reference():
    # the kernel computes in float32 whatever the input; its gradients must agree with the exact
    # (float64) derivative of the formula, not only with the float32 reference
    x, r, w, dy, ds = _inputs(torch.float32, shape=(6, 24))
    got = _run(add_rmsnorm_triton, x, r, w, dy, ds, 1.3, True)
    x64, r64, w64 = (t.detach().double() for t in (x, r, w))
    want = _run(_formula_float64, x64, r64, w64, dy.double(), ds.double(), 1.3, True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-4)


def test_mixed_dtypes_keep_the_wider_residual_stream():
    # under autocast a bfloat16 branch output meets a float32 residual stream: s stays float32
    x, r, w, dy, ds = _inputs(torch.bfloat16)
    r32 = r.detach().float().requires_grad_()
    got = _run(add_rmsnorm_triton, x, r32, w, dy, ds, 1.0, True)
    want = _run(add_rmsnorm_ref, x, r32, w, dy, ds, 1.0, True)
    assert got[0].dtype == got[1].dtype == torch.float32
    assert got[2].dtype == torch.bfloat16 and got[3].dtype == torch.float32
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), atol=1e-4, rtol=1e-4)


def test_only_the_sum_used_gives_the_identity_gradient():
    x, r, w, _, _ = _inputs(torch.float32, shape=(4, 12))
    x, r = x.detach().requires_grad_(), r.detach().requires_grad_()
    y, s = add_rmsnorm_triton(x, r, w, 1e-6, 2.0)
    s.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x)) and torch.equal(r.grad, torch.full_like(r, 2.0))


def test_kernel_non_contiguous_input_and_power_of_two_width():
    x = torch.randn(16, 6).t()          # (6, 16), last dim strided
    r = torch.randn(6, 16)
    w = torch.randn(16)
    y, s = add_rmsnorm_triton(x, r, w)
    y_ref, s_ref = add_rmsnorm_ref(x, r, w)
    torch.testing.assert_close(y, y_ref, **TOL[torch.float32])
    torch.testing.assert_close(s, s_ref)


def test_reference_matches_formula_by_hand():
    x = torch.tensor([[1.0, 2.0]])
    r = torch.tensor([[2.0, 2.0]])
    w = torch.tensor([2.0, 0.5])
    y, s = add_rmsnorm_ref(x, r, w, eps=0.0, residual_scale=0.5)
    # s = [1 + 1, 2 + 1] = [2, 3]; rms = sqrt((4 + 9) / 2)
    rms = math.sqrt(6.5)
    assert torch.equal(s, torch.tensor([[2.0, 3.0]]))
    torch.testing.assert_close(y, torch.tensor([[2 / rms * 2, 3 / rms * 0.5]]))
    # no residual: s is x itself, and rmsnorm() is the same op
    y2, s2 = add_rmsnorm_ref(x, None, w, eps=0.0)
    assert s2 is x
    torch.testing.assert_close(rmsnorm(x, w, eps=0.0), y2)


def test_dispatch_uses_reference_on_cpu(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("Triton path taken for CPU tensors")

    monkeypatch.setattr(rk, "add_rmsnorm_triton", boom)
    x, r, w, _, _ = _inputs(torch.float32)
    y, s = add_rmsnorm(x, r, w)
    y_ref, s_ref = add_rmsnorm_ref(x, r, w)
    assert torch.equal(y, y_ref) and torch.equal(s, s_ref)


def test_import_without_triton_keeps_reference(monkeypatch):
    monkeypatch.setattr(rk, "triton", None)
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError):
        rk.add_rmsnorm_triton(x, None, torch.ones(8))
    assert torch.equal(rk.add_rmsnorm(x, None, torch.ones(8))[0], add_rmsnorm_ref(x, None, torch.ones(8))[0])
