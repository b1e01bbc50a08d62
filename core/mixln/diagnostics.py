"""Layer diagnostics for the Mix-LN model and for any transformers causal LM with hidden-state outputs.

- :func:`layer_gradient_norms`   per layer: the norm of its parameter gradients and of the gradient
                                 reaching its input
- :func:`angular_distance`       d(h_i, h_j) = arccos(cos(h_i, h_j)) / pi between hidden states
- :func:`angular_distance_heatmap` the (first layer l, block size n) grid of d(h_l, h_{l+n}), raw and scaled
- :func:`layer_removal`          eval loss / perplexity increase when each single layer is skipped

Hidden states follow transformers: ``hidden_states[i]`` (i < L) is the input of layer i, and
``hidden_states[L]`` the final normalised output.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import torch
import torch.nn as nn

from core.errors import BadInputError
from core.mixln.model import causal_lm_loss, upcast
from core.progress import Progress, report
from core.zoo.views import private_view

_LAYER_PATHS = ("model.layers", "model.model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers",
                "backbone.layers", "layers")


# ---- plumbing shared by all diagnostics ------------------------------------------------------------

def find_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder layers of a Mix-LN or transformers causal LM (Llama, Qwen, Mistral, GPT-2, ...)."""
    for path in _LAYER_PATHS:
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        raise BadInputError(f"cannot find the decoder layers of {type(model).__name__}.",
                            fix="use a Mix-LN model or a transformers causal LM (e.g. Llama, Qwen, GPT-2).")
    return max(lists, key=len)


def as_batches(tokens: torch.Tensor | Iterable[torch.Tensor], batch_size: int = 8) -> list[torch.Tensor]:
    """(N, T) token ids, or an iterable of (B, T) tensors -> a list of (B, T) LongTensors."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2:
            raise BadInputError(f"token ids must be (N, T), got shape {tuple(tokens.shape)}.",
                                fix="pass a 2-D tensor of token ids, one sequence per row.")
        batches = list(tokens.split(batch_size))
    else:
        batches = [torch.as_tensor(b) for b in tokens]
    if not batches or sum(b.numel() for b in batches) == 0:
        raise BadInputError("no tokens to evaluate on (the corpus is empty).",
                            fix="provide at least one non-empty sequence of token ids.")
    return [b.long() for b in batches]


def _device(model: nn.Module) -> torch.device:
    """Where inputs go (the first GPU of a model spread by ``--device-map``, see :mod:`core.zoo.placement`)."""
    from core.zoo.placement import input_device
    return input_device(model)


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def hidden_states_of(model: nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Run ``model(input_ids, output_hidden_states=True)``; the L+1 hidden states (B, T, D) it returns."""
    try:
        out = model(input_ids, output_hidden_states=True, use_cache=False)
    except TypeError as exc:
        raise BadInputError(f"{type(model).__name__} does not accept output_hidden_states ({exc}).",
                            fix="use a Mix-LN model or a transformers causal LM that returns hidden states.") from exc
    states = getattr(out, "hidden_states", None)
    if not states:
        raise BadInputError(f"{type(model).__name__} returned no hidden states.",
                            fix="use a model that returns hidden_states when output_hidden_states=True.")
    return tuple(states)


# ---- gradient norms --------------------------------------------------------------------------------

@dataclass
class LayerGradNorms:
    """param[i]: norm of layer i's parameter gradients; input[i]: norm of dLoss/d(input of layer i)."""

    param: list[float]
    input: list[float]
    loss: float = math.nan


def grad_norms_from_backward(layers: Sequence[nn.Module], layer_inputs: Sequence[torch.Tensor]) -> LayerGradNorms:
    """Read the norms after ``loss.backward()`` (the inputs must have had ``retain_grad()``)."""
    params, inputs = [], []
    for layer, h in zip(layers, layer_inputs):
        sq = sum(float(upcast(p.grad.detach()).pow(2).sum()) for p in layer.parameters() if p.grad is not None)
        params.append(math.sqrt(sq))
        inputs.append(float(upcast(h.grad.detach()).norm()) if h.grad is not None else math.nan)
    return LayerGradNorms(params, inputs)


def layer_gradient_norms(model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor | None = None
                         ) -> LayerGradNorms:
    """Per-layer gradient norms of the next-token loss on ``input_ids`` (B, T); model ``.grad`` untouched."""
    from core.zoo.placement import offloaded_names
    offloaded = offloaded_names(model)
    if offloaded:  # their parameters are placeholders, re-created for each forward: no gradient can reach them
        raise BadInputError(f"per-layer gradient norms need every weight in memory, but {len(offloaded)} parameters "
                            "of this model are offloaded by --device-map (read from disk or CPU for each forward).",
                            fix="give --max-memory room for the whole model on the GPUs, or leave out --device-map; "
                                "angular distance and layer removal work on an offloaded model.")
    layers = find_decoder_layers(model)
    input_ids = input_ids.to(_device(model))
    labels = input_ids if labels is None else labels.to(input_ids.device)
    with _eval_mode(model), torch.enable_grad():
        out = model(input_ids, output_hidden_states=True, use_cache=False)
        states = getattr(out, "hidden_states", None)
        if not states:
            raise BadInputError(f"{type(model).__name__} returned no hidden states.",
                                fix="use a model that returns hidden_states when output_hidden_states=True.")
        loss = causal_lm_loss(out.logits, labels)
        inputs = list(states[:len(layers)])
        per_layer = [[p for p in layer.parameters() if p.requires_grad] for layer in layers]
        flat = [p for ps in per_layer for p in ps]
        grads = torch.autograd.grad(loss, flat + inputs, allow_unused=True)
    pg, ig = grads[:len(flat)], grads[len(flat):]
    params, k = [], 0
    for ps in per_layer:
        params.append(math.sqrt(sum(float(upcast(g).pow(2).sum()) for g in pg[k:k + len(ps)] if g is not None)))
        k += len(ps)
    return LayerGradNorms(params, [float(upcast(g).norm()) if g is not None else math.nan for g in ig], float(loss.detach()))


# ---- angular distance ------------------------------------------------------------------------------

def angular_distance(hidden_states: Sequence[torch.Tensor], position: int | None = -1) -> torch.Tensor:
    """(S, S) matrix over the S given states (B, T, D): entry [i, j] is the batch mean of
    arccos(cos(h_i[:, position], h_j[:, position])) / pi, in [0, 1]. ``position=None`` averages over all
    tokens instead of taking one. Computed in float64."""
    if len(hidden_states) == 0:
        raise BadInputError("no hidden states given.", fix="pass the hidden_states of a forward pass.")
    h = torch.stack([s.detach().double() for s in hidden_states])      # (S, B, T, D)
    if position is not None:
        h = h[:, :, position].unsqueeze(2)                            # (S, B, 1, D)
    h = h / h.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    cos = torch.einsum("ibtd,jbtd->ijbt", h, h).clamp(-1.0, 1.0)       # (S, S, B, T')
    d = (torch.arccos(cos) / math.pi).mean(dim=(2, 3))
    d.fill_diagonal_(0.0)                                                 # exact: a state against itself
    return d.float()


def mean_angular_distance(model: nn.Module, tokens, position: int | None = -1, batch_size: int = 8) -> torch.Tensor:
    """:func:`angular_distance` of a model's L+1 hidden states, averaged over all samples in ``tokens``."""
    total, count = None, 0
    with _eval_mode(model), torch.no_grad():
        for batch in as_batches(tokens, batch_size):
            b = batch.shape[0]
            d = angular_distance(hidden_states_of(model, batch.to(_device(model))), position) * b
            total = d if total is None else total + d
            count += b
    return total / count


def adjacent_angular_per_sample(hidden_states: Sequence[torch.Tensor], position: int | None = -1) -> torch.Tensor:
    """(B, S-1): per sequence, d(h_l, h_l+1) = arccos(cos) / pi between consecutive states at ``position`` (None:
    the mean over all tokens), float64; its mean over the batch is the first row of :func:`angular_distance`'s
    heatmap, and its spread over sequences is what a standard error is taken from."""
    h = torch.stack([s.detach().double() for s in hidden_states])      # (S, B, T, D)
    if position is not None:
        h = h[:, :, position].unsqueeze(2)
    h = h / h.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    cos = (h[:-1] * h[1:]).sum(-1).clamp(-1.0, 1.0)                  # (S-1, B, T')
    return (torch.arccos(cos) / math.pi).mean(dim=2).T


def angular_profile(model: nn.Module, tokens, position: int | None = -1, batch_size: int = 8
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the (S, S) :func:`angular_distance` matrix averaged over all sequences, the (N, S-1) per-sequence
    distances between consecutive states): one forward pass per batch."""
    total, count, per_sample = None, 0, []
    with _eval_mode(model), torch.no_grad():
        for batch in as_batches(tokens, batch_size):
            b = batch.shape[0]
            states = hidden_states_of(model, batch.to(_device(model)))
            d = angular_distance(states, position) * b
            total = d if total is None else total + d
            count += b
            per_sample.append(adjacent_angular_per_sample(states, position))
    return total / count, torch.cat(per_sample)


def standard_error(values: torch.Tensor) -> torch.Tensor:
    """Standard error of the mean over dim 0 (std with ddof 1 / sqrt(N)); NaN for fewer than two rows."""
    n = values.shape[0]
    if n < 2:
        return torch.full(values.shape[1:], float("nan"), dtype=torch.float64)
    return values.double().std(dim=0, unbiased=True) / math.sqrt(n)


@dataclass
class AngularHeatmap:
    """Rows: block size n = 1..S-1; columns: first layer l = 0..S-2; cell d(h_l, h_{l+n}), NaN where
    l + n > S - 1. ``scaled`` maps each row (or the whole grid, ``scale="global"``) to [0, 1]."""

    block_sizes: list[int]
    first_layers: list[int]
    raw: torch.Tensor
    scaled: torch.Tensor


def angular_distance_heatmap(distances: torch.Tensor, scale: str = "row") -> AngularHeatmap:
    """Rearrange an (S, S) :func:`angular_distance` matrix into the paper's (n, l) grid."""
    s = distances.shape[0]
    if s < 2:
        raise BadInputError("a heatmap needs at least two hidden states.", fix="use a model with layers.")
    raw = torch.full((s - 1, s - 1), float("nan"))
    for n in range(1, s):
        for l in range(0, s - n):
            raw[n - 1, l] = distances[l, l + n]
    if scale == "row":
        lo = torch.nan_to_num(raw, nan=math.inf).min(dim=1, keepdim=True).values
        hi = torch.nan_to_num(raw, nan=-math.inf).max(dim=1, keepdim=True).values
    elif scale == "global":
        lo, hi = raw.nan_to_num(nan=math.inf).min(), raw.nan_to_num(nan=-math.inf).max()
    else:
        raise BadInputError(f"unknown scale {scale!r}.", fix="use 'row' or 'global'.")
    span = (hi - lo)
    scaled = torch.where(span > 0, (raw - lo) / torch.where(span > 0, span, torch.ones_like(span)),
                         torch.zeros_like(raw))
    scaled = torch.where(raw.isnan(), raw, scaled)
    return AngularHeatmap(list(range(1, s)), list(range(0, s - 1)), raw, scaled)


# ---- layer removal ---------------------------------------------------------------------------------

class _SkippedLayer(nn.Module):
    """Stands in for a decoder layer: returns its hidden-state input, in the layer's output format."""

    def __init__(self, tuple_len: int = 0):
        super().__init__()
        self.tuple_len = tuple_len

    def forward(self, *args, **kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        return (h,) + (None,) * (self.tuple_len - 1) if self.tuple_len else h


@contextlib.contextmanager
def skip_layer(model: nn.Module, index: int, tuple_len: int = 0) -> Iterator[None]:
    """Temporarily replace decoder layer ``index`` of ``model`` by an identity; the original is restored after.
    This changes ``model`` itself: give it a private view (:func:`core.zoo.private_view`) of a model others use."""
    layers = find_decoder_layers(model)
    if not 0 <= index < len(layers):
        raise BadInputError(f"layer {index} does not exist (the model has {len(layers)}).",
                            fix=f"choose a layer between 0 and {len(layers) - 1}.")
    original = layers[index]
    layers[index] = _SkippedLayer(tuple_len)
    try:
        yield
    finally:
        layers[index] = original


def evaluate_loss(model: nn.Module, tokens, batch_size: int = 8) -> float:
    """Token-weighted mean next-token loss over ``tokens`` ((N, T) or (B, T) batches)."""
    total, count = 0.0, 0
    with _eval_mode(model), torch.no_grad():
        for batch in as_batches(tokens, batch_size):
            batch = batch.to(_device(model))
            logits = model(batch, use_cache=False).logits
            total += float(causal_lm_loss(logits, batch, reduction="sum"))
            count += int((batch[:, 1:] != -100).sum())
    if count == 0:
        raise BadInputError("sequences are too short to evaluate (need at least two tokens).",
                            fix="use sequences of two or more tokens.")
    return total / count


def window_losses(model: nn.Module, tokens, batch_size: int = 8) -> torch.Tensor:
    """(N,) float64: each sequence's mean next-token loss (sequences of equal length: their mean is
    :func:`evaluate_loss`)."""
    out = []
    with _eval_mode(model), torch.no_grad():
        for batch in as_batches(tokens, batch_size):
            batch = batch.to(_device(model))
            if batch.shape[1] < 2:
                raise BadInputError("sequences are too short to evaluate (need at least two tokens).",
                                    fix="use sequences of two or more tokens.")
            logits = model(batch, use_cache=False).logits
            per_token = causal_lm_loss(logits, batch, reduction="none").view(batch.shape[0], -1)[:, :-1]
            out.append(per_token.double().mean(dim=1).cpu())
    return torch.cat(out)


@dataclass
class LayerRemovalResult:
    baseline_loss: float
    losses: list[float]                       # eval loss with layer i skipped
    loss_increase: list[float] = field(default_factory=list)
    baseline_perplexity: float = math.nan
    perplexities: list[float] = field(default_factory=list)
    perplexity_increase: list[float] = field(default_factory=list)
    loss_increase_se: list[float] = field(default_factory=list)  # standard error over the sequences (per_sample)
    increase_per_window: torch.Tensor | None = None  # (sequences, layers) loss increase per sequence (per_sample)


def _output_tuple_len(model: nn.Module, layers: nn.ModuleList, batch: torch.Tensor) -> int:
    seen = []
    hook = layers[0].register_forward_hook(lambda m, a, out: seen.append(len(out) if isinstance(out, tuple) else 0))
    try:
        with torch.no_grad():
            model(batch[:1, :2].to(_device(model)), use_cache=False)
    finally:
        hook.remove()
    return seen[0] if seen else 0


def layer_removal(model: nn.Module, tokens, layers: Sequence[int] | None = None, batch_size: int = 8,
                  progress: Progress | None = None, per_sample: bool = False) -> LayerRemovalResult:
    """Eval loss and perplexity when each single layer is skipped, and their increase over the full model.
    ``per_sample`` (sequences of equal length): losses are the mean of the per-sequence losses, and
    ``loss_increase_se`` the standard error over the sequences of each layer's increase (paired per sequence).
    ``progress(fraction, message)`` (:mod:`core.progress`) hears each skipped layer; it may raise ``Cancelled``.

    ``model`` is never changed: the layers are skipped in a private view of it (:func:`core.zoo.private_view`), so
    other requests may use the model meanwhile."""
    model = private_view(model)
    batches = as_batches(tokens, batch_size)
    decoder = find_decoder_layers(model)
    indices = list(range(len(decoder))) if layers is None else list(layers)
    tuple_len = _output_tuple_len(model, decoder, batches[0])
    score = window_losses if per_sample else evaluate_loss
    base_w = score(model, batches)
    base = float(base_w.mean()) if per_sample else base_w
    losses, se, per_window = [], [], []
    for k, i in enumerate(indices):
        with skip_layer(model, i, tuple_len):
            w = score(model, batches)
        losses.append(float(w.mean()) if per_sample else w)
        if per_sample:
            per_window.append(w - base_w)
            se.append(float(standard_error(per_window[-1][:, None])[0]))
        report(progress, (k + 1) / len(indices), f"skipped layer {k + 1}/{len(indices)}")
    ppl = [math.exp(min(x, 700.0)) for x in losses]
    base_ppl = math.exp(min(base, 700.0))
    return LayerRemovalResult(base, losses, [x - base for x in losses], base_ppl, ppl, [p - base_ppl for p in ppl],
                              se, torch.stack(per_window, dim=1) if per_window else None)
