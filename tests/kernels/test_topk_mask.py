"""Top-k mask: the reference against a slow sort, and the Triton kernel against the reference bit for bit
(on CPU under TRITON_INTERPRET=1, set in tests/conftest.py)."""
import numpy as np
import pytest
import torch

from kernels import dispatch
from kernels.topk_mask import order_keys, topk_mask, topk_mask_ref, topk_mask_triton

pytestmark = pytest.mark.usefixtures("single_thread")

needs_triton = pytest.mark.skipif(not dispatch.triton_available() or not dispatch.interpreting(),
                                  reason="needs triton and TRITON_INTERPRET=1")


def slow_topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Sort by (value descending, flat index ascending), with -0.0 below +0.0 and NaN by sign, in numpy."""
    bits = scores.contiguous().numpy().reshape(-1).view(np.uint32).astype(np.int64)
    neg = bits >= 2**31
    keys = np.where(neg, (2**32 - 1) - bits, bits + 2**31)
    order = sorted(range(len(keys)), key=lambda i: (-keys[i], i))
    mask = np.zeros(len(keys), dtype=bool)
    mask[order[:k]] = True
    return torch.from_numpy(mask).reshape(scores.shape)


def cases():
    g = torch.Generator().manual_seed(0)
    yield "random", torch.randn(37, 53, generator=g)
    yield "nonneg-ties", torch.randint(0, 5, (64, 33), generator=g).float()
    yield "all-equal", torch.full((1000,), 0.25)
    yield "zeros-and-signed-zeros", torch.tensor([0.0, -0.0, 0.0, 1.0, -0.0, -1.0, 0.0, 2.0, -0.0])
    yield "negative", -torch.rand(3, 2049, generator=g)
    x = torch.randn(2500, generator=g).abs()
    x[::7] = 0.0
    x[3::11] = float("inf")
    x[5::13] = x[1]
    yield "inf-zero-repeats", x
    # values that agree in the top 3 bytes and differ only in the lowest one
    base = torch.tensor(1.5).view(torch.int32)
    yield "low-byte-only", (base + torch.randint(0, 256, (777,), generator=g, dtype=torch.int32)).view(torch.float32)


CASES = list(cases())


@pytest.mark.parametrize("name,scores", CASES, ids=[c[0] for c in CASES])
def test_reference_matches_slow_sort(name, scores):
    n = scores.numel()
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        mask = topk_mask_ref(scores, k)
        assert mask.dtype == torch.bool and mask.shape == scores.shape
        assert int(mask.sum()) == k
        assert torch.equal(mask, slow_topk_mask(scores, k)), (name, k)


@needs_triton
@pytest.mark.parametrize("name,scores", CASES, ids=[c[0] for c in CASES])
def test_kernel_equals_reference_bit_for_bit(name, scores):
    n = scores.numel()
    for k in sorted({0, 1, 2, n // 3, n // 2, n - 1, n}):
        got = topk_mask_triton(scores, k)
        assert got.dtype == torch.bool and got.shape == scores.shape
        assert torch.equal(got, topk_mask_ref(scores, k)), (name, k)


@needs_triton
def test_kernel_nan_and_multiblock_ties():
    # more than one block (1024) of ties, so the tie rank crosses block boundaries
    x = torch.zeros(5000)
    x[4000:] = 1.0
    x[17] = float("nan")
    for k in (1, 10, 1001, 1500, 3000, 4999):
        got = topk_mask_triton(x, k)
        assert torch.equal(got, topk_mask_ref(x, k)), k
        assert torch.equal(got, slow_topk_mask(x, k)), k


def test_selected_are_the_largest_for_nonnegative_scores():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 50, (300,), generator=g).float() / 7
    k = int(x.numel() * 0.3)
    mask = topk_mask(x, k)
    assert int(mask.sum()) == k
    assert x[mask].min() >= x[~mask].max()
    # among the tied threshold values, the lowest indices were taken
    t = x[mask].min()
    tied = torch.nonzero(x == t).flatten()
    taken = tied[mask[tied]]
    assert torch.equal(taken, tied[: len(taken)])


def test_order_keys_sort_like_floats():
    x = torch.tensor([-float("inf"), -3.0, -1e-30, -0.0, 0.0, 1e-30, 2.0, float("inf")])
    keys = order_keys(x)
    assert torch.all(keys[1:] > keys[:-1])
    assert keys.min() >= 0 and keys.max() < 2**32


def test_dispatch_uses_reference_on_cpu():
    x = torch.rand(10, 10)
    assert not dispatch.use_triton(x, kernel="topk_mask")
    assert torch.equal(topk_mask(x, 17), topk_mask_ref(x, 17))


def test_bad_arguments():
    with pytest.raises(TypeError):
        topk_mask(torch.rand(4, dtype=torch.float64), 1)
    with pytest.raises(ValueError):
        topk_mask(torch.rand(4), 5)
    with pytest.raises(ValueError):
        topk_mask(torch.rand(4), -1)
