"""LAPE (Tang et al., 2024), neuron level: per MLP neuron, how often it fires on each dataset.

For every MLP block (a module with a ``down_proj`` ``nn.Linear``) the neuron activation is
``act_fn(gate_proj(x))`` when the block has ``gate_proj`` and ``act_fn`` (Llama, Mistral, Qwen), else
the input of ``down_proj``. The statistic kept is, per neuron, the number of tokens where the
activation is positive: one ``(d_ff,)`` int64 vector per block and dataset.

Selection (:func:`lape_masks`): with ``p_d`` the firing rate on dataset ``d`` (math / non-math), the
neuron's entropy is that of ``p / sum(p)``; the ``int(n_neurons * K)`` neurons of lowest entropy
(over all blocks; lowest index first among ties; never a neuron that does not fire at all) are
specific, and they belong to math when ``p_math > p_nonmath``. A math neuron ``j`` selects row
``j`` of ``gate_proj`` and ``up_proj`` and column ``j`` of ``down_proj``; nothing else is selected.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from core.errors import BadInputError
from core.mathneuro.scoring import Progress, prepare_inputs, run_samples, scored_linears
from core.mathneuro.views import private_view
from kernels.topk_mask import topk_mask


def mlp_blocks(model: nn.Module) -> dict[str, nn.Module]:
    """MLP blocks by module name: every module with a ``down_proj`` ``nn.Linear``.

    Raises
    ------
    BadInputError
        When there is none.
    """
    blocks = {name: m for name, m in model.named_modules() if isinstance(getattr(m, "down_proj", None), nn.Linear)}
    if not blocks:
        raise BadInputError(f"LAPE needs MLP blocks with a down_proj layer; {type(model).__name__} has none.",
                            fix="Use a Llama-style model, or another method (mathneuro, wanda, random).")
    return blocks


@dataclass
class FiringCounts:
    """Per MLP block, how many tokens made each neuron's activation positive.

    Attributes
    ----------
    positive : dict block name -> (d_ff,) int64
    tokens : number of tokens seen
    """

    positive: dict[str, torch.Tensor]
    tokens: int


def collect_firing_counts(model: nn.Module, inputs: Iterable[torch.Tensor], *, what: str = "input",
                          max_length: int | None = None, progress: Progress | None = None) -> FiringCounts:
    """Count positive activations per MLP neuron over all tokens of ``inputs`` ((1, T) LongTensors)."""
    model = private_view(model)  # hooks on a private view: other requests' passes on the model are not counted
    blocks = mlp_blocks(model)
    samples = prepare_inputs(model, inputs, what, max_length)
    counts = {n: torch.zeros(b.down_proj.in_features, dtype=torch.int64, device=b.down_proj.weight.device)
              for n, b in blocks.items()}
    handles = []
    for name, block in blocks.items():
        gate, act = getattr(block, "gate_proj", None), getattr(block, "act_fn", None)
        if isinstance(gate, nn.Linear) and callable(act):
            def hook(module, args, output, name=name, act=act):
                counts[name] += (act(output.detach()) > 0).reshape(-1, output.shape[-1]).sum(0)
            handles.append(gate.register_forward_hook(hook))
        else:
            def pre_hook(module, args, name=name):
                x = args[0].detach()
                counts[name] += (x > 0).reshape(-1, x.shape[-1]).sum(0)
            handles.append(block.down_proj.register_forward_pre_hook(pre_hook))
    try:
        run_samples(model, samples, progress, f"{what} samples")
    finally:
        for h in handles:
            h.remove()
    return FiringCounts(positive=counts, tokens=sum(int(s.shape[1]) for s in samples))


def neuron_entropy(rate_math: torch.Tensor, rate_nonmath: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the firing rates normalised over the two datasets; ``inf`` where both are 0.

    Parameters
    ----------
    rate_math, rate_nonmath : (n,) float

    Returns
    -------
    (n,) float32 in [0, log 2], or inf.
    """
    rates = torch.stack([rate_math, rate_nonmath]).to(torch.float64)
    total = rates.sum(0)
    p = rates / total.clamp_min(1e-300)
    ent = -(torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p))).sum(0)
    return torch.where(total > 0, ent, torch.full_like(ent, float("inf"))).to(torch.float32)


def math_neurons(math: FiringCounts, nonmath: FiringCounts, proportion: float) -> dict[str, torch.Tensor]:
    """Per MLP block, a (d_ff,) bool vector of the neurons LAPE assigns to math."""
    names = list(math.positive)
    rate_m = torch.cat([math.positive[n].cpu() for n in names]).double() / max(math.tokens, 1)
    rate_n = torch.cat([nonmath.positive[n].cpu() for n in names]).double() / max(nonmath.tokens, 1)
    entropy = neuron_entropy(rate_m, rate_n)
    specific = topk_mask(-entropy, int(entropy.numel() * proportion)) & torch.isfinite(entropy)
    is_math = specific & (rate_m > rate_n)
    out, start = {}, 0
    for n in names:
        size = math.positive[n].numel()
        out[n] = is_math[start:start + size]
        start += size
    return out


def lape_masks(model: nn.Module, math: FiringCounts, nonmath: FiringCounts, proportion: float,
               seed: int = 0) -> dict[str, torch.Tensor]:
    """Parameter masks of LAPE's math neurons (see the module docstring); every scored weight is a key."""
    blocks = mlp_blocks(model)
    neurons = math_neurons(math, nonmath, proportion)
    masks = {n: torch.zeros_like(m.weight, dtype=torch.bool) for n, m in scored_linears(model).items()}
    ids = {id(m): n for n, m in scored_linears(model).items()}
    for block_name, block in blocks.items():
        sel = neurons[block_name]
        for attr, axis in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
            layer = getattr(block, attr, None)
            pname = ids.get(id(layer))
            if pname is None:
                continue
            rows = sel.to(layer.weight.device)
            if axis == 0 and layer.out_features == rows.numel():
                masks[pname][rows, :] = True
            elif axis == 1 and layer.in_features == rows.numel():
                masks[pname][:, rows] = True
    return masks
