"""``bench/gpu.py`` rows measured before and kept for the record: the MathNeuro top-K mask against ``torch.topk``, the
fused add + RMSNorm against the unfused ops; and the row that tests the budget's kill (it hangs)."""
from __future__ import annotations

import time

from gpu_common import TOPK_PROPORTION, RowContext, Timer, agrees, check_kernels, max_abs, self_check_of


def topk(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from kernels.topk_mask import topk_mask_ref, topk_mask_triton

    checks = check_kernels(device, ["topk_mask"])
    rows = {}
    for name, shape in sizes["topk"].items():
        scores = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device)
        k = int(scores.numel() * TOPK_PROPORTION)

        def torch_topk(scores=scores, k=k):
            mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
            mask[torch.topk(scores.reshape(-1), k, sorted=False).indices] = True
            return mask.view(scores.shape)

        kernel = lambda scores=scores, k=k: topk_mask_triton(scores, k)  # noqa: E731
        got, want, base = kernel(), topk_mask_ref(scores, k), torch_topk()
        medians = timer.medians({"triton": kernel, "torch_topk": torch_topk})
        rows[name] = {"shape": list(shape), "k": k, "median_s": medians,
                      "ratio_triton_over_torch_topk": medians["triton"] / medians["torch_topk"],
                      "max_abs_err_vs_twin": float((got != want).sum().item()), "agrees_with_twin": agrees(got, want),
                      "entries_differing_from_torch_topk": int((got != base).sum().item()),
                      "peak_bytes": {"triton": timer.peak_bytes(kernel), "torch_topk": timer.peak_bytes(torch_topk)}}
    ctx.save("topk_mask", {"what": f"MathNeuro top-K mask (proportion {TOPK_PROPORTION}) per matrix vs torch.topk "
                                   "+ scatter", "self_check": self_check_of(checks, "topk_mask"), "matrices": rows,
                           "max_abs_err_vs_twin": max(r["max_abs_err_vs_twin"] for r in rows.values()),
                           "agrees_with_twin": all(r["agrees_with_twin"] for r in rows.values()),
                           "notes": ["max_abs_err_vs_twin counts mask entries that differ from topk_mask_ref "
                                     "(bit-identical: 0)"]})


def rmsnorm(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    import torch

    from kernels.rmsnorm import add_rmsnorm_ref, add_rmsnorm_triton

    checks = check_kernels(device, ["add_rmsnorm"])
    rows, width = sizes["norm"]
    g = torch.Generator().manual_seed(0)
    x, residual = torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)
    weight = 1 + 0.1 * torch.randn(width, generator=g)
    x, residual, weight = (t.to(device=device, dtype=torch.bfloat16) for t in (x, residual, weight))
    fused = lambda: add_rmsnorm_triton(x, residual, weight, 1e-5)  # noqa: E731
    unfused = lambda: add_rmsnorm_ref(x, residual, weight, 1e-5)  # noqa: E731
    (y_k, s_k), (y_r, s_r) = fused(), unfused()
    medians = timer.medians({"triton": fused, "unfused_torch": unfused})
    ctx.save("add_rmsnorm", {
        "what": "fused residual add + RMSNorm forward vs the unfused torch ops (its twin), bfloat16",
        "shape": {"rows": rows, "width": width}, "self_check": self_check_of(checks, "add_rmsnorm"),
        "median_s": medians, "ratio_triton_over_unfused": medians["triton"] / medians["unfused_torch"],
        "max_abs_err_vs_twin": max(max_abs(y_k, y_r), max_abs(s_k, s_r)),
        "agrees_with_twin": agrees((y_k, s_k), (y_r, s_r)),
        "peak_bytes": {"triton": timer.peak_bytes(fused), "unfused_torch": timer.peak_bytes(unfused)}})


def selftest_hang(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Not a measurement: saves one part, then never returns (tests/bench/test_gpu.py kills it by its limit)."""
    if ctx.path is None:
        raise RuntimeError("_selftest_hang runs only in its own process (--isolate)")
    ctx.save("_selftest_hang", {"what": "a row that hangs after its first part", "first_part": 1.0})
    while True:
        time.sleep(1)
