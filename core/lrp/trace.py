"""What one explanation passes through, noted during its forward pass so its backward can be read layer by layer.

* :class:`Ledger` -- every place relevance leaves the network instead of reaching the inputs: a bias (it absorbs
  ``b . dlogit/dz`` of the output ``z = W x + b``) and a softmax taken as published in AttnLRP (its rule is the
  gradient, which conserves only up to ``sum s . g_s - sum x . g_x``). With the rules, everything else in the
  supported blocks is linear in its input (the rules' point), so

      sum of the input relevances + sum of what the ledger absorbed = the explained logit

  holds to rounding; :func:`core.lrp.flow.relevance_flow` checks it.
* :class:`Trace` -- the input and output of every block the rules rewrite (an SSM mixer, an attention layer, an MLP
  or mixture of experts), in order, with its layer index and kind, and the ledger.

Relevance at a node is ``(node * dlogit/dnode).sum(-1)``: per sequence position, what passes through the node there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Ledger:
    """The bias outputs ``(z, b)`` and softmaxes ``(x, s)`` of one forward pass (tensors in its autograd graph)."""

    biases: list = field(default_factory=list)
    softmaxes: list = field(default_factory=list)

    def bias(self, z: torch.Tensor, b: torch.Tensor) -> None:
        """``z`` includes the constant ``b`` (broadcast against ``z``)."""
        if z.requires_grad:
            self.biases.append((z, b.detach()))

    def softmax(self, x: torch.Tensor, s: torch.Tensor) -> None:
        """``s = softmax(x)`` along the last axis (masked entries of ``x`` may be ``-inf``)."""
        if x.requires_grad:
            self.softmaxes.append((x, s))

    def tensors(self) -> list[torch.Tensor]:
        return [z for z, _ in self.biases] + [t for x, s in self.softmaxes for t in (x, s)]

    def absorbed(self, grads: list) -> dict[str, float]:
        """``{"bias": ..., "softmax": ...}``: what each kind absorbed, from the gradients of :meth:`tensors` (None
        for an unused tensor counts 0)."""
        grads = list(grads)
        bias = sum(_dot(b.to(z.dtype), g) for (z, b), g in zip(self.biases, grads[:len(self.biases)]))
        rest = grads[len(self.biases):]
        soft = 0.0
        for i, (x, s) in enumerate(self.softmaxes):
            gx, gs = rest[2 * i], rest[2 * i + 1]
            finite = torch.isfinite(x.detach())
            x0 = torch.where(finite, x.detach(), torch.zeros_like(x))
            soft += _dot(s.detach(), gs) - _dot(x0, gx)
        return {"bias": float(bias), "softmax": float(soft)}


def _dot(a: torch.Tensor, g: torch.Tensor | None) -> float:
    if g is None:
        return 0.0
    return float((a.double() * g.double()).sum())


@dataclass
class TracedBlock:
    """One block's pass: ``layer`` (decoder layer index, or the block's order when unknown), ``kind`` (``ssm``,
    ``attention``, ``mlp``), ``label`` (the registry entry's), ``name`` (the module's path in the model), its
    input and output (batch-first ``(B, L, H)`` tensors in the graph), ``short`` (a chart's row name)."""

    layer: int
    kind: str
    label: str
    name: str
    input: torch.Tensor
    output: torch.Tensor
    short: str = ""


@dataclass
class Trace:
    """The blocks of one forward pass, in order, and its :class:`Ledger`."""

    blocks: list = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)

    def add(self, layer: int, kind: str, label: str, name: str, inp, out, short: str = "") -> None:
        if isinstance(inp, torch.Tensor) and isinstance(out, torch.Tensor):
            self.blocks.append(TracedBlock(layer, kind, label, name, inp, out, short or label))

    def tensors(self) -> list[torch.Tensor]:
        """The tensors whose gradients :meth:`read` needs, in its order."""
        return [t for b in self.blocks for t in (b.input, b.output)] + self.ledger.tensors()

    def read(self, grads: list) -> tuple[list[dict], dict[str, float]]:
        """Per block ``{"layer", "kind", "label", "short", "name", "in": (L,), "out": (L,)}`` (relevance per position
        at its input and output, batch element 0) and what the ledger absorbed."""
        grads = list(grads)
        rows = []
        for i, b in enumerate(self.blocks):
            g_in, g_out = grads[2 * i], grads[2 * i + 1]
            rows.append({"layer": b.layer, "kind": b.kind, "label": b.label, "short": b.short, "name": b.name,
                         "in": _per_position(b.input, g_in), "out": _per_position(b.output, g_out)})
        return rows, self.ledger.absorbed(grads[2 * len(self.blocks):])


def _per_position(t: torch.Tensor, g: torch.Tensor | None) -> list[float]:
    if g is None:
        return [0.0] * t.shape[1]
    return (t.detach().double() * g.double()).sum(-1)[0].tolist()
