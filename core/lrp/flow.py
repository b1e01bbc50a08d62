"""Where one prediction's relevance goes: through which layers (SSM, attention, MLP) and where it leaves.

    relevance_flow(model, input_ids=None, pixel_values=None, target=None, rules=None) -> Flow

One forward and backward pass with the MambaLRP rules (AttnLRP for attention and MLPs) and a
:class:`core.lrp.trace.Trace`: the relevance of every input token, and per block (in order) the relevance at its
input and at its output, per position: what the block hands back to each token position and what passes through it
there. And the ledger: what the biases and the softmaxes (attention, routers) absorbed, so that

    sum(token relevance) + absorbed["bias"] + absorbed["softmax"] == logit

is checked to rounding (:attr:`Flow.residual`): the rules' conservation, measured, not assumed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.lrp.adapters import adapter_for
from core.lrp.context import lrp_rules
from core.lrp.rules import LRPRules
from core.lrp.trace import Trace


@dataclass
class Flow:
    """What :func:`relevance_flow` returns.

    Attributes
    ----------
    relevance : (L,) per input position (float64).
    logit, target : the explained logit and its class / token id.
    blocks : per block ``{"layer", "kind", "label", "name", "in": [L], "out": [L]}`` in forward order.
    absorbed : ``{"bias": ..., "softmax": ...}``.
    """

    relevance: torch.Tensor
    logit: float
    target: int
    blocks: list = field(default_factory=list)
    absorbed: dict = field(default_factory=dict)

    @property
    def total(self) -> float:
        return float(self.relevance.sum())

    @property
    def residual(self) -> float:
        """``logit - (sum of relevances + everything absorbed)``: 0 up to rounding when the rules hold."""
        return self.logit - self.total - sum(self.absorbed.values())

    def by_kind(self) -> dict[str, list[float]]:
        """Per block kind, the relevance its blocks hand back to each position (summed over layers of that kind)."""
        out: dict[str, list[float]] = {}
        for b in self.blocks:
            row = out.setdefault(b["kind"], [0.0] * len(b["in"]))
            for i, v in enumerate(b["in"]):
                row[i] += v
        return out


def relevance_flow(model, input_ids=None, pixel_values=None, target=None, rules: LRPRules | None = None) -> Flow:
    """One explanation with its trace (see the module docstring). ``rules`` default to MambaLRP as published
    (:meth:`LRPRules.mambalrp`); the model is left unchanged."""
    from core.lrp.methods import _check_target

    adapter = adapter_for(model)
    embeds = adapter.embed(input_ids, pixel_values)
    x = embeds.detach().clone().requires_grad_(True)
    trace = Trace()
    with lrp_rules(adapter.model, rules or LRPRules.mambalrp(), trace=trace):
        logits = adapter.logits(x)[0]
        t = _check_target(adapter, logits, target)
        logit = logits[t]
        tensors = trace.tensors()
        grads = torch.autograd.grad(logit, [x] + tensors, allow_unused=True)
    relevance = (x.detach().double() * grads[0].double()).sum(-1)[0]
    blocks, absorbed = trace.read(grads[1:])
    return Flow(relevance=relevance, logit=float(logit.detach().double()), target=t, blocks=blocks,
                absorbed=absorbed)
