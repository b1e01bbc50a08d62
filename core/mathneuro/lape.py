"""LAPE (Tang et al., 2024), neuron level, as MathNeuro's authors run it (bryanchrist/MathNeuro ``LAPE.py``).

For every MLP block (a module with a ``down_proj`` ``nn.Linear``) the neuron activation is
``act_fn(gate_proj(x))`` when the block has ``gate_proj`` and ``act_fn`` (Llama, Mistral, Qwen), else
the input of ``down_proj``. The statistic kept is, per neuron, the number of tokens where the
activation is positive: one ``(d_ff,)`` int64 vector per block and dataset.

Selection (:func:`math_neurons`), with ``p_d`` a neuron's firing probability on dataset ``d`` (math,
non-math) and all neurons of all blocks pooled:

1. entropy: the entropy of ``p / sum_d p_d`` (a neuron that never fires has none: ``inf``);
2. filter: with ``t_f`` the ``round(filter_rate * N)``-th smallest of all N = 2 x neurons probabilities
   (the 95th percentile for the authors' ``filter_rate = 0.95``), a neuron whose ``p_d <= t_f`` on every
   dataset is dismissed (entropy ``inf``);
3. the ``round(n_neurons * K)`` neurons of lowest entropy are taken (lowest index first among ties);
4. activation bar: with ``t_a`` the ``round(activation_bar_ratio * N)``-th smallest probability (the
   authors: 0.95 as well), a taken neuron belongs to math when ``p_math > t_a``.

Where this differs from the script: the firing probability is per token (LAPE's definition; the
script divides the positive-activation count by the number of sequences), and the math set is
math's (the script intervenes on ``activation_mask[0]``, the first dataset's set, which with math
appended last is a calibration dataset's).

The intervention of the authors multiplies a math neuron's activation ``act_fn(gate_j(x))`` by a
scalar (0 to prune). Since ``down_proj`` is linear, multiplying column ``j`` of ``down_proj`` by the
same scalar gives exactly the same output, so a math neuron ``j`` selects that column and nothing
else: prune and scale through the masks are the authors' pruning and scaling.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from core.errors import BadInputError
from core.mathneuro.scoring import prepare_inputs, run_samples, scored_linears
from core.progress import Progress
from core.zoo.placement import compute_device
from core.zoo.views import private_view
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
    counts = {n: torch.zeros(b.down_proj.in_features, dtype=torch.int64, device=compute_device(b.down_proj))
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


FILTER_RATE = 0.95            # the authors' filter_rate: dismiss neurons below the 95th percentile everywhere
ACTIVATION_BAR_RATIO = 0.95   # the authors' activation_bar_ratio: a neuron belongs to a dataset above it


def kth_smallest(values: torch.Tensor, ratio: float) -> float:
    """The ``round(ratio * n)``-th smallest of ``values`` (1-based, at least the first), as the authors'
    ``flattened_probs.kthvalue(round(len(flattened_probs) * ratio))``."""
    flat = values.flatten().double()
    k = min(max(1, round(flat.numel() * ratio)), flat.numel())
    return float(flat.kthvalue(k).values)


def _check_rate(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not 0.0 < float(value) <= 1.0:
        raise BadInputError(f"LAPE {name} = {value!r} is outside (0, 1].",
                            fix=f"use a fraction such as the authors' 0.95 for {name}.")
    return float(value)


def math_neurons(math: FiringCounts, nonmath: FiringCounts, proportion: float,
                 filter_rate: float = FILTER_RATE,
                 activation_bar_ratio: float = ACTIVATION_BAR_RATIO) -> dict[str, torch.Tensor]:
    """Per MLP block, a (d_ff,) bool vector of the neurons LAPE assigns to math (module docstring)."""
    filter_rate = _check_rate("filter_rate", filter_rate)
    activation_bar_ratio = _check_rate("activation_bar_ratio", activation_bar_ratio)
    names = list(math.positive)
    rate_m = torch.cat([math.positive[n].cpu() for n in names]).double() / max(math.tokens, 1)
    rate_n = torch.cat([nonmath.positive[n].cpu() for n in names]).double() / max(nonmath.tokens, 1)
    probs = torch.stack([rate_m, rate_n], dim=-1)                     # (neurons, datasets)
    entropy = neuron_entropy(rate_m, rate_n)
    kept = (probs > kth_smallest(probs, filter_rate)).any(-1)
    entropy = torch.where(kept, entropy, torch.full_like(entropy, float("inf")))
    taken = topk_mask(-entropy, min(round(entropy.numel() * proportion), entropy.numel()))
    is_math = taken & (rate_m > kth_smallest(probs, activation_bar_ratio))
    out, start = {}, 0
    for n in names:
        size = math.positive[n].numel()
        out[n] = is_math[start:start + size]
        start += size
    return out


def lape_masks(model: nn.Module, math: FiringCounts, nonmath: FiringCounts, proportion: float,
               seed: int = 0, filter_rate: float = FILTER_RATE,
               activation_bar_ratio: float = ACTIVATION_BAR_RATIO) -> dict[str, torch.Tensor]:
    """Parameter masks of LAPE's math neurons: column ``j`` of ``down_proj`` for each math neuron ``j`` (see
    the module docstring); every scored weight is a key."""
    blocks = mlp_blocks(model)
    neurons = math_neurons(math, nonmath, proportion, filter_rate, activation_bar_ratio)
    masks = {n: torch.zeros(m.weight.shape, dtype=torch.bool, device=compute_device(m))  # not meta: offloaded
             for n, m in scored_linears(model).items()}
    ids = {id(m): n for n, m in scored_linears(model).items()}
    for block_name, block in blocks.items():
        pname = ids.get(id(block.down_proj))
        cols = neurons[block_name].to(compute_device(block.down_proj))
        if pname is not None and block.down_proj.in_features == cols.numel():
            masks[pname][:, cols] = True
    return masks
