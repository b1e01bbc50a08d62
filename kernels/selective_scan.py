"""Selective scan with the MambaLRP treatment: linear in ``u``, everything else a constant.

The Mamba-1 selective scan (``u: (B, D, L)``, state size ``N``) computes, per channel ``d``,

    h_t = exp(delta_t * A) * h_{t-1} + (delta_t * B_t) * u_t        h: (N,)
    y_t = C_t . h_t + D * u_t

MambaLRP treats the discretised ``A_bar = exp(delta * A)``, ``B_bar = delta * B`` and ``C`` as
constants, so ``y`` is a linear function of ``u`` and the backward pass needs only

    lambda_s = C_s * g_s + A_bar_{s+1} * lambda_{s+1}                (reverse scan)
    du_s     = B_bar_s . lambda_s + D * g_s

Four callables with one signature (``u, delta, A, B, C, D=None, delta_bias=None,
delta_softplus=False``), following state-spaces/mamba's ``selective_scan_fn`` / ``selective_scan_ref``:

* :func:`selective_scan_lrp_triton` -- Triton forward and backward; keeps the ``(BLOCK_D, N)`` state in
  registers and never materialises the ``(B, D, L, N)`` discretised tensors.
* :func:`selective_scan_lrp_ref` -- plain PyTorch twin (autograd through ``u`` only); it performs the
  same operations in the same order as transformers' ``MambaMixer`` so the values are bit-identical. It
  materialises ``(B, D, L, N)`` tensors and autograd records L steps, so it is the tests' oracle only.
* :func:`selective_scan_lrp_chunked` -- the kernel's algorithm in PyTorch for the CPU: blocks of the sequence
  with the state carried between them, the backward the same hand-written reverse scan; memory
  ``O(B D L + chunk B D N)``, values equal to the reference's.
* :func:`selective_scan_lrp` -- the public op: the kernel on CUDA, the chunked path elsewhere.

:func:`selective_scan_ref` is the ordinary (fully differentiable) scan, used when the MambaLRP rule is
switched off; :func:`selective_scan_chunked` computes the same in blocks with a hand-written backward, behind
:func:`selective_scan` (blocks bounded in memory) and :func:`selective_scan_train` (one block, its states kept
for the backward: training on CPU).

This module is the public op: the dispatchers and the kernel's self-check. The twins live in
:mod:`kernels._scan_ref`, the Triton kernels and their launch in :mod:`kernels._scan_triton`, the chunked paths
in :mod:`kernels._scan_chunked`. Triton is imported lazily, so importing this module never needs it.
"""
from __future__ import annotations

import torch

from kernels._scan_chunked import selective_scan_chunked, selective_scan_lrp_chunked
from kernels._scan_ref import selective_scan_lrp_ref, selective_scan_ref
from kernels._scan_triton import (AUTOTUNE, STAGES, TILE_ENV, TILES, WARPS, scan_config, scan_kernel,
                                  selective_scan_lrp_triton, tuned_tile, tuning_results)
from kernels.dispatch import KernelCheck, register_check, use_triton

__all__ = [
    "AUTOTUNE",
    "STAGES",
    "TILE_ENV",
    "TILES",
    "WARPS",
    "scan_config",
    "scan_kernel",
    "tuned_tile",
    "tuning_results",
    "selective_scan",
    "selective_scan_chunked",
    "selective_scan_lrp",
    "selective_scan_lrp_chunked",
    "selective_scan_lrp_ref",
    "selective_scan_lrp_triton",
    "selective_scan_ref",
    "selective_scan_train",
]


def selective_scan_lrp(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The MambaLRP selective scan: the Triton kernel on CUDA tensors, the chunked PyTorch path elsewhere.

    Shapes as in :func:`selective_scan_lrp_ref`; returns ``y: (B, D, L)``. The reference itself (which
    materialises ``(B, D, L, N)`` tensors and records L autograd steps) is kept as the tests' oracle.
    """
    tensors = [t for t in (u, delta, A, B, C, D, delta_bias) if t is not None]
    if use_triton(*tensors, kernel="selective_scan_lrp"):
        return selective_scan_lrp_triton(u, delta, A, B, C, D, delta_bias, delta_softplus)
    return selective_scan_lrp_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus)


def selective_scan(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The ordinary selective scan (every input differentiable), for the baselines and the rule ablations: the
    chunked PyTorch path on every device (there is no Triton kernel for it). Shapes as :func:`selective_scan_ref`."""
    return selective_scan_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus)


def selective_scan_train(u, delta, A, B, C, D=None, delta_bias=None, delta_softplus=False):
    """The ordinary selective scan for training (the recipes' :func:`core.lrp.recipes.fast_mixers`): the chunked
    scan in one block, whose backward reuses the forward's ``(L, B, D, N)`` states instead of recomputing them.
    Same signature and values as :func:`selective_scan_ref`."""
    return selective_scan_chunked(u, delta, A, B, C, D, delta_bias, delta_softplus, chunk=u.shape[-1])


def _check_inputs(device, dtype):
    g = torch.Generator().manual_seed(0)
    batch, channels, length, state = 2, 6, 37, 16  # two chunks (the carry), masked channel lanes; N as in Mamba
    u = torch.randn(batch, channels, length, generator=g)
    delta = 0.5 * torch.randn(batch, channels, length, generator=g)
    A = -torch.rand(channels, state, generator=g) - 0.1
    B, C = torch.randn(batch, state, length, generator=g), torch.randn(batch, state, length, generator=g)
    D, bias, grad = torch.randn(channels, generator=g), 0.1 * torch.randn(channels, generator=g), torch.randn_like(u)
    return tuple(t.to(device) for t in (u, delta, A, B, C, D, bias, grad))


def _check_run(fn, args):
    """The output and the relevance backward (gradient w.r.t. ``u``) for a fixed output gradient."""
    u, delta, A, B, C, D, bias, grad = args
    u = u.detach().clone().requires_grad_(True)
    y = fn(u, delta, A, B, C, D, bias, True)
    (du,) = torch.autograd.grad(y, u, grad)
    return y.detach(), du


register_check("selective_scan_lrp", KernelCheck(triton=selective_scan_lrp_triton, ref=selective_scan_lrp_ref,
                                                 inputs=_check_inputs, run=_check_run))
