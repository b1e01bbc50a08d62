"""Training-speed Mamba mixers: every mixer of a model runs :func:`core.lrp.mixer.ssm_branch` without rules on
``kernels.selective_scan.selective_scan_train`` (a scan whose backward is written by hand and keeps only
``(B, D, N)`` tensors per step instead of materialising ``(B, D, L, N)`` ones through autograd, several times
faster on a small CPU). Its values agree with the reference forward to float rounding; every reported figure uses
the reference forward.
"""
from __future__ import annotations

import contextlib
import functools

from torch import nn

from core.lrp.mixer import bimamba_mixer_forward, mamba_mixer_forward
from kernels.selective_scan import selective_scan_train


def _fast_mamba_mixer(module, hidden_states, cache_params=None, attention_mask=None, **kwargs):
    if attention_mask is not None:
        hidden_states = hidden_states * attention_mask[..., None].to(hidden_states.dtype)
    return mamba_mixer_forward(module, hidden_states, None, scan=selective_scan_train)


def _fast_bimamba_mixer(module, hidden_states):
    return bimamba_mixer_forward(module, hidden_states, None, scan=selective_scan_train)


@contextlib.contextmanager
def fast_mixers(model: nn.Module):
    """Within the block, every Mamba mixer of ``model`` runs on ``selective_scan_train`` (instance-level patch)."""
    from transformers.models.mamba.modeling_mamba import MambaMixer

    from core.lrp.models import BiMambaMixer

    patched = []
    for module in model.modules():
        if isinstance(module, MambaMixer):
            module.forward = functools.partial(_fast_mamba_mixer, module)
        elif isinstance(module, BiMambaMixer):
            module.forward = functools.partial(_fast_bimamba_mixer, module)
        else:
            continue
        patched.append(module)
    try:
        yield model
    finally:
        for module in patched:
            del module.forward
