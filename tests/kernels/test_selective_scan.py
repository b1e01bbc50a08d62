"""The Triton selective scan (MambaLRP treatment) against its PyTorch reference twin, under TRITON_INTERPRET=1."""
import os

import pytest
import torch

from kernels.dispatch import triton_available
import kernels._scan_chunked as chunked_module
from kernels.selective_scan import (selective_scan, selective_scan_chunked, selective_scan_lrp,
                                    selective_scan_lrp_chunked, selective_scan_lrp_ref, selective_scan_lrp_triton,
                                    selective_scan_ref, selective_scan_train)

pytestmark = pytest.mark.usefixtures("single_thread")

needs_interpreter = pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="Triton kernels run on CPU only under TRITON_INTERPRET=1")


def _inputs(batch=2, channels=6, length=9, state=3, seed=0, with_d=True, with_bias=True):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, channels, length, generator=g)
    delta = torch.randn(batch, channels, length, generator=g) * 0.5
    A = -(torch.rand(channels, state, generator=g) + 0.5)
    B = torch.randn(batch, state, length, generator=g)
    C = torch.randn(batch, state, length, generator=g)
    D = torch.randn(channels, generator=g) if with_d else None
    bias = torch.randn(channels, generator=g) * 0.1 if with_bias else None
    return u, delta, A, B, C, D, bias


@needs_interpreter
@pytest.mark.parametrize("with_d,with_bias,softplus", [(True, True, True), (False, False, False), (True, False, True)])
@pytest.mark.parametrize("shape", [(2, 6, 9, 3), (1, 5, 4, 16)])  # non-power-of-2 channels/state: masking
def test_kernel_matches_reference_forward_and_gradient(with_d, with_bias, softplus, shape):
    batch, channels, length, state = shape
    u, delta, A, B, C, D, bias = _inputs(batch, channels, length, state, with_d=with_d, with_bias=with_bias)
    u1 = u.clone().requires_grad_(True)
    u2 = u.clone().requires_grad_(True)
    y1 = selective_scan_lrp_triton(u1, delta, A, B, C, D, bias, softplus)
    y2 = selective_scan_lrp_ref(u2, delta, A, B, C, D, bias, softplus)
    torch.testing.assert_close(y1, y2, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y1)
    (g1,) = torch.autograd.grad(y1, u1, g)
    (g2,) = torch.autograd.grad(y2, u2, g)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5)


@needs_interpreter
@pytest.mark.slow  # each case over 5 s on the 2-core machine (docs/testing.md); the quick tier keeps the one above
@pytest.mark.parametrize("block_d,chunk", [(2, 4), (4, 8), (8, 2), (2, 64), (None, None)])
def test_kernel_carries_the_state_across_chunks_and_channel_blocks(block_d, chunk):
    # 37 steps: several chunks and a ragged last one (from the start in the forward, from the end in the
    # backward); 11 channels: several channel blocks and a masked last one; state 5: masked state lanes
    u, delta, A, B, C, D, bias = _inputs(batch=2, channels=11, length=37, state=5, seed=3)
    u1 = u.clone().requires_grad_(True)
    u2 = u.clone().requires_grad_(True)
    y1 = selective_scan_lrp_triton(u1, delta, A, B, C, D, bias, True, block_d=block_d, chunk=chunk)
    y2 = selective_scan_lrp_ref(u2, delta, A, B, C, D, bias, True)
    torch.testing.assert_close(y1, y2, rtol=1e-5, atol=1e-5)
    g = torch.randn(y1.shape, generator=torch.Generator().manual_seed(4))
    (g1,) = torch.autograd.grad(y1, u1, g)
    (g2,) = torch.autograd.grad(y2, u2, g)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5)
    # the relevance backward of a linear map conserves: sum(du * u) == sum(g * y)
    torch.testing.assert_close((g1 * u).sum(), (g * y1.detach()).sum(), rtol=1e-5, atol=1e-4)


@needs_interpreter
def test_kernel_tile_must_be_powers_of_two():
    u, delta, A, B, C, D, bias = _inputs()
    with pytest.raises(ValueError, match="chunk must be a power of two"):
        selective_scan_lrp_triton(u, delta, A, B, C, D, bias, True, chunk=12)


@needs_interpreter
def test_kernel_accepts_non_contiguous_inputs():
    u, delta, A, B, C, D, bias = _inputs()
    u_t = u.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    B_t = B.transpose(1, 2).contiguous().transpose(1, 2)
    y1 = selective_scan_lrp_triton(u_t, delta, A, B_t, C, D, bias, True)
    y2 = selective_scan_lrp_ref(u, delta, A, B, C, D, bias, True)
    torch.testing.assert_close(y1, y2, rtol=1e-5, atol=1e-5)


def test_lrp_reference_has_the_values_of_the_full_scan_and_gradient_only_for_u():
    u, delta, A, B, C, D, bias = _inputs()
    u = u.requires_grad_(True)
    delta, B, C = delta.requires_grad_(True), B.requires_grad_(True), C.requires_grad_(True)
    y_lrp = selective_scan_lrp_ref(u, delta, A, B, C, D, bias, True)
    y_full = selective_scan_ref(u, delta, A, B, C, D, bias, True)
    assert torch.equal(y_lrp, y_full)
    grads = torch.autograd.grad(y_lrp.sum(), [u, delta, B, C], allow_unused=True)
    assert grads[0] is not None and grads[1] is None and grads[2] is None and grads[3] is None
    full = torch.autograd.grad(y_full.sum(), [delta, B, C])
    assert all(g.abs().sum() > 0 for g in full)


def test_scan_is_linear_in_u_so_gradient_times_input_conserves():
    u, delta, A, B, C, D, bias = _inputs(batch=1)
    u = u.requires_grad_(True)
    y = selective_scan_lrp_ref(u, delta, A, B, C, D, bias, True)
    w = torch.randn_like(y)
    (g,) = torch.autograd.grad((y * w).sum(), u)
    torch.testing.assert_close((g * u).sum(), (y * w).sum(), rtol=1e-5, atol=1e-5)


def test_dispatch_uses_the_chunked_path_on_cpu():
    u, delta, A, B, C, D, bias = _inputs()
    u = u.requires_grad_(True)
    y = selective_scan_lrp(u, delta, A, B, C, D, bias, True)
    assert type(y.grad_fn).__name__ == "_SelectiveScanLRPChunkedBackward"  # one node, not L recorded steps
    assert torch.equal(y, selective_scan_lrp_ref(u, delta, A, B, C, D, bias, True))


# ---- the chunked CPU path against the reference (its oracle) ----
@pytest.mark.parametrize("with_d,with_bias,softplus", [(True, True, True), (False, False, False), (True, False, True),
                                                       (False, True, True)])
@pytest.mark.parametrize("shape,chunk", [((2, 6, 9, 3), 4), ((1, 5, 16, 16), 1), ((3, 7, 33, 5), 8),
                                         ((2, 4, 10, 2), None), ((1, 3, 5, 4), 64)])
def test_chunked_matches_reference_values_and_gradients(with_d, with_bias, softplus, shape, chunk):
    batch, channels, length, state = shape  # lengths 9, 33 with blocks of 4, 8: the last block is partial
    u, delta, A, B, C, D, bias = _inputs(batch, channels, length, state, with_d=with_d, with_bias=with_bias)
    if not softplus:
        delta = delta.abs()  # time steps must be positive without the softplus
    u1, u2 = u.clone().requires_grad_(True), u.clone().requires_grad_(True)
    y1 = selective_scan_lrp_chunked(u1, delta, A, B, C, D, bias, softplus, chunk=chunk)
    y2 = selective_scan_lrp_ref(u2, delta, A, B, C, D, bias, softplus)
    assert torch.equal(y1, y2)  # the forward repeats the reference's operations: bit-identical values
    g = torch.randn(y1.shape, generator=torch.Generator().manual_seed(3))
    (g1,) = torch.autograd.grad(y1, u1, g)  # the hand-written reverse scan
    (g2,) = torch.autograd.grad(y2, u2, g)  # autograd through the reference's L steps
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5 * float(g2.abs().max()))


def test_chunked_gradient_is_the_exact_jacobian_transpose():
    """In float64 (the reference casts B and u to float32, so it cannot be the oracle at this precision)."""
    u, delta, A, B, C, D, bias = (None if t is None else t.double() for t in _inputs(2, 3, 7, 2))

    def fn(x):
        return selective_scan_lrp_chunked(x, delta, A, B, C, D, bias, True, chunk=3)

    assert fn(u).dtype == torch.float64
    assert torch.autograd.gradcheck(fn, (u.requires_grad_(True),))


def test_chunked_gradient_flows_to_u_only_and_conserves():
    u, delta, A, B, C, D, bias = _inputs(batch=1, length=12)
    u, delta, B, C = (t.clone().requires_grad_(True) for t in (u, delta, B, C))
    y = selective_scan_lrp_chunked(u, delta, A, B, C, D, bias, True, chunk=5)
    w = torch.randn_like(y)
    grads = torch.autograd.grad((y * w).sum(), [u, delta, B, C], allow_unused=True)
    assert grads[0] is not None and all(g is None for g in grads[1:])
    torch.testing.assert_close((grads[0] * u).sum(), (y * w).sum(), rtol=1e-5, atol=1e-5)  # linear in u


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
def test_chunked_in_half_precision_matches_the_float32_reference(dtype, tol):
    u, delta, A, B, C, D, bias = _inputs()
    u, delta, B, C = (t.to(dtype) for t in (u, delta, B, C))  # state and arithmetic stay in float32
    u_half, u_ref = u.clone().requires_grad_(True), u.float().requires_grad_(True)
    y = selective_scan_lrp_chunked(u_half, delta, A, B, C, D, bias, True, chunk=4)
    y_ref = selective_scan_lrp_ref(u_ref, delta.float(), A, B.float(), C.float(), D, bias, True)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), y_ref.detach(), rtol=tol, atol=tol * float(y_ref.detach().abs().max()))
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (gu,) = torch.autograd.grad(y, u_half, g)
    (gu_ref,) = torch.autograd.grad(y_ref, u_ref, g.float())
    assert gu.dtype == dtype
    torch.testing.assert_close(gu.float(), gu_ref, rtol=tol, atol=tol * float(gu_ref.abs().max()))


def _largest_allocation(fn) -> int:
    """Bytes of the largest net allocation one operator made while ``fn()`` ran (torch's CPU profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(e.self_cpu_memory_usage for e in prof.events())


def test_chunked_never_allocates_a_BDLN_tensor_the_reference_does():
    batch, channels, length, state = 1, 32, 256, 16
    u, delta, A, B, C, D, bias = _inputs(batch, channels, length, state)
    one_bdln = batch * channels * length * state * 4  # bytes of one (B, D, L, N) float32 tensor

    def run(scan):
        x = u.clone().requires_grad_(True)
        scan(x, delta, A, B, C, D, bias, True).sum().backward()

    assert _largest_allocation(lambda: run(selective_scan_lrp_ref)) >= one_bdln  # the check sees it
    chunked = _largest_allocation(lambda: run(lambda *a: selective_scan_lrp_chunked(*a, chunk=16)))
    assert chunked <= one_bdln * 16 / length  # one block of 16 steps
    assert chunked_module._chunk_length(1, 1536, 16, 100_000, None) * 1536 * 16 <= chunked_module.CHUNK_ELEMENTS


@needs_interpreter
@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
def test_kernel_in_half_precision_matches_the_float32_reference(dtype, tol):
    u, delta, A, B, C, D, bias = _inputs()
    u, delta, B, C = (t.to(dtype) for t in (u, delta, B, C))  # the kernel keeps its state in float32
    u_half = u.clone().requires_grad_(True)
    u_ref = u.float().requires_grad_(True)
    y = selective_scan_lrp_triton(u_half, delta, A, B, C, D, bias, True)
    y_ref = selective_scan_lrp_ref(u_ref, delta.float(), A, B.float(), C.float(), D, bias, True)
    assert y.dtype == dtype
    scale = float(y_ref.detach().abs().max())
    torch.testing.assert_close(y.float(), y_ref.detach(), rtol=tol, atol=tol * scale)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    (gu,) = torch.autograd.grad(y, u_half, g.to(dtype))
    (gu_ref,) = torch.autograd.grad(y_ref, u_ref, g.to(dtype).float())
    torch.testing.assert_close(gu.float(), gu_ref, rtol=tol, atol=tol * float(gu_ref.abs().max()))


# ---- the ordinary scan in blocks (every gradient) against the reference ----
@pytest.mark.parametrize("with_d,with_bias,softplus", [(True, True, True), (False, False, False), (True, False, True)])
@pytest.mark.parametrize("shape,chunk", [((2, 6, 9, 3), 4), ((1, 5, 16, 16), 1), ((3, 7, 33, 5), 8),
                                         ((2, 4, 10, 2), None)])
def test_chunked_full_scan_matches_reference_values_and_every_gradient(with_d, with_bias, softplus, shape, chunk):
    batch, channels, length, state = shape
    inputs = list(_inputs(batch, channels, length, state, with_d=with_d, with_bias=with_bias))
    if not softplus:
        inputs[1] = inputs[1].abs()
    mine = [None if t is None else t.clone().requires_grad_(True) for t in inputs]
    theirs = [None if t is None else t.clone().requires_grad_(True) for t in inputs]
    y1 = selective_scan_chunked(*mine, softplus, chunk=chunk)
    y2 = selective_scan_ref(*theirs, softplus)
    assert torch.equal(y1, y2)  # the forward repeats the reference's operations
    w = torch.randn(y1.shape, generator=torch.Generator().manual_seed(5))
    grads = torch.autograd.grad((y1 * w).sum(), [t for t in mine if t is not None])
    grads_ref = torch.autograd.grad((y2 * w).sum(), [t for t in theirs if t is not None])
    for g1, g2 in zip(grads, grads_ref):  # u, delta, A, B, C, then D and delta_bias when given
        torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5 * float(g2.abs().max()))


def test_chunked_full_scan_gradients_are_exact():
    inputs = [t.double().requires_grad_(True) for t in _inputs(2, 3, 7, 2)]
    assert torch.autograd.gradcheck(lambda *a: selective_scan_chunked(*a, True, chunk=3), tuple(inputs))


def test_ordinary_scan_dispatches_to_the_chunked_path():
    u, delta, A, B, C, D, bias = _inputs()
    u = u.requires_grad_(True)
    y = selective_scan(u, delta, A, B, C, D, bias, True)
    assert torch.equal(y, selective_scan_ref(u, delta, A, B, C, D, bias, True))
    assert "_SelectiveScanChunkedBackward" in str(y.grad_fn.next_functions)


def test_chunked_full_scan_never_allocates_a_BDLN_tensor():
    batch, channels, length, state = 1, 32, 256, 16
    u, delta, A, B, C, D, bias = _inputs(batch, channels, length, state)
    one_bdln = batch * channels * length * state * 4

    def run():
        x, dt, b, c = (t.clone().requires_grad_(True) for t in (u, delta, B, C))
        selective_scan_chunked(x, dt, A, b, c, D, bias, True, chunk=16).sum().backward()

    assert _largest_allocation(run) <= one_bdln * 16 / length


# ---- the training scan (hand-written backward) ----
def _train_scan_inputs(dtype=torch.float64, b=2, d=3, length=7, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, d, length, generator=g, dtype=dtype)
    delta = torch.rand(b, d, length, generator=g, dtype=dtype) * 0.5
    A = -torch.rand(d, n, generator=g, dtype=dtype) * 2
    B = torch.randn(b, n, length, generator=g, dtype=dtype)
    C = torch.randn(b, n, length, generator=g, dtype=dtype)
    D = torch.randn(d, generator=g, dtype=dtype)
    return [t.requires_grad_(True) for t in (u, delta, A, B, C, D)]


def test_training_scan_backward_is_the_exact_gradient():
    """One block (the forward's states kept for the backward), every input's gradient, in float64."""
    assert torch.autograd.gradcheck(selective_scan_train, tuple(_train_scan_inputs()))


def test_training_scan_keeps_its_states_and_agrees_with_the_recomputing_blocks():
    """The training scan saves its one block's ``(L, B, D, N)`` states; blocks that recompute theirs give the
    same gradients."""
    inputs = _train_scan_inputs(torch.float32, b=2, d=4, length=10, n=3, seed=3)
    others = [t.detach().clone().requires_grad_(True) for t in inputs]
    y = selective_scan_train(*inputs)
    (node,) = [f for f, _ in y.grad_fn.next_functions if type(f).__name__ == "_SelectiveScanChunkedBackward"]
    saved = [t for t in node.saved_tensors if t is not None and t.dim() == 4]
    assert [tuple(t.shape) for t in saved[-2:]] == [(10, 2, 4, 3)] * 2  # A_bar and the states, kept
    y_blocks = selective_scan_chunked(*others, chunk=3)
    assert torch.equal(y, y_blocks)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(4))
    for g, g_blocks in zip(torch.autograd.grad((y * w).sum(), inputs),
                           torch.autograd.grad((y_blocks * w).sum(), others)):
        torch.testing.assert_close(g, g_blocks, rtol=1e-5, atol=1e-5 * float(g_blocks.abs().max()))


def test_training_scan_matches_the_reference_values_and_gradients():
    inputs = _train_scan_inputs(torch.float32, b=3, d=5, length=11, n=6, seed=1)
    ref_inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    y = selective_scan_train(*inputs)
    y_ref = selective_scan_ref(*ref_inputs)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(y)
    grads = torch.autograd.grad((y * w).sum(), inputs)
    grads_ref = torch.autograd.grad((y_ref * w).sum(), ref_inputs)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-4)


def test_training_scan_takes_the_reference_signature():
    u, delta, A, B, C, D = (t.detach() for t in _train_scan_inputs(torch.float32, seed=2))
    bias = torch.randn(u.shape[1])
    torch.testing.assert_close(selective_scan_train(u, delta, A, B, C, D, bias, delta_softplus=True),
                               selective_scan_ref(u, delta, A, B, C, D, bias, delta_softplus=True),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(selective_scan_train(u, delta, A, B, C), selective_scan_ref(u, delta, A, B, C),
                               rtol=1e-5, atol=1e-5)


def test_the_tile_is_tuned_once_per_device_and_shape_class(monkeypatch):
    """On CUDA the launch asks for the fastest tile of TILES, timed once per device, batch, channels, N and length
    class (the next power of two, up to 4096); shorter than a chunk, on the CPU or under the interpreter it keeps
    scan_config's default; LAYERWISE_SCAN_TILE forces one (a bad value is one clear error)."""
    from types import SimpleNamespace

    import kernels._scan_triton as S

    timed = []
    monkeypatch.setattr(S, "_tuned", {})
    monkeypatch.setattr(S, "_time_tiles", lambda device, *key: timed.append(key) or (4, 32))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(S.TILE_ENV, raising=False)
    on_gpu = lambda length: SimpleNamespace(shape=(1, 1536, length), is_cuda=True, device="cuda:0")  # noqa: E731
    assert S.tuned_tile(on_gpu(3000), 16) == (4, 32)
    assert S.tuned_tile(on_gpu(4096), 16) == S.tuned_tile(on_gpu(8192), 16) == (4, 32)
    assert S.tuned_tile(on_gpu(512), 16) == (4, 32)
    assert timed == [(1, 1536, 16, 4096), (1, 1536, 16, 512)]
    assert S.tuned_tile(on_gpu(16), 16) is None and S.tuned_tile(torch.zeros(1, 8, 64), 16) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert S.tuned_tile(SimpleNamespace(shape=(1, 64, 64), is_cuda=True, device="cuda:0"), 16) is None
    monkeypatch.setenv(S.TILE_ENV, "16x16")
    assert S.tuned_tile(torch.zeros(1, 8, 64), 16) == (16, 16)
    monkeypatch.setenv(S.TILE_ENV, "big")
    with pytest.raises(ValueError, match="4x32"):
        S.tuned_tile(torch.zeros(1, 8, 64), 16)
    assert all(d & (d - 1) == 0 and c & (c - 1) == 0 for d, c in S.TILES)


@needs_interpreter
@pytest.mark.parametrize("stages", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_every_pipelining_depth_computes_the_same(stages):
    """The software pipelining changes when a chunk's loads are issued, not what is computed."""
    u, delta, A, B, C, D, bias = _inputs(1, 6, 37, 16)
    x = u.clone().requires_grad_(True)
    y = selective_scan_lrp_triton(x, delta, A, B, C, D, bias, True, block_d=4, chunk=8, stages=stages)
    (du,) = torch.autograd.grad(y.sum(), x)
    x2 = u.clone().requires_grad_(True)
    y2 = selective_scan_lrp_triton(x2, delta, A, B, C, D, bias, True, block_d=4, chunk=8)
    (du2,) = torch.autograd.grad(y2.sum(), x2)
    assert torch.equal(y, y2) and torch.equal(du, du2)
