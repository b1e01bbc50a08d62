"""Importance scores of MathNeuro / Wanda: ``|W_ij| * sum_samples ||X_j||_2`` per linear weight.

Forward hooks on every scored ``nn.Linear`` add, for each sample, the L2 norm of each input column
over the sample's tokens into one float32 vector of length ``d_in`` per matrix; scores are formed
once at the end, one matrix at a time (:func:`importance_scores`). Memory during accumulation is
therefore one ``d_in`` vector per matrix, whatever the number of samples.

Also here: which layers are scored (:func:`scored_linears`), the checks every entry point shares
(:func:`check_proportion`, :func:`prepare_inputs`) and :func:`run_samples`, which runs the model
over samples in eval mode and restores every module's train/eval flag afterwards.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from core.errors import BadInputError
from core.progress import Progress, item_progress
from core.zoo.placement import compute_device
from core.zoo.views import private_view
from kernels.topk_mask import topk_mask

# ----------------------------------------------------------------------------------------------
# Which layers
# ----------------------------------------------------------------------------------------------
def scored_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every ``nn.Linear`` whose weight is scored, keyed by the weight's parameter name.

    Attention and MLP projections are scored, and ``lm_head`` when it is not tied to the input
    embeddings (a tied weight appears in ``named_parameters`` under the embedding's name only, and
    embeddings and norms are not scored). Names are as in ``model.named_parameters()``, e.g.
    ``model.layers.0.mlp.down_proj.weight``.

    Raises
    ------
    BadInputError
        When the model has no linear layer.
    """
    first_name = {}
    for name, param in model.named_parameters():
        first_name.setdefault(id(param), name)
    out: dict[str, nn.Linear] = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        pname = f"{module_name}.weight" if module_name else "weight"
        if first_name.get(id(module.weight)) == pname:  # not tied to an earlier (embedding) weight
            out[pname] = module
    if not out:
        raise BadInputError(f"{type(model).__name__} has no linear layers to score.",
                            fix="Pick a transformer language model (attention and MLP projections are nn.Linear).")
    return out


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------
def check_proportion(proportion, what: str = "The proportion K") -> float:
    """``proportion`` as a float in (0, 1], or :class:`BadInputError`."""
    if isinstance(proportion, bool) or not isinstance(proportion, numbers.Real) \
            or not math.isfinite(float(proportion)) or not 0.0 < float(proportion) <= 1.0:
        raise BadInputError(f"{what} must be a number in (0, 1], got {proportion!r}.",
                            fix="Use e.g. 0.05 to keep the top 5% of each weight matrix.")
    return float(proportion)


def check_factor(factor, what: str = "The scale factor") -> float:
    """``factor`` as a finite float, or :class:`BadInputError`."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not math.isfinite(float(factor)):
        raise BadInputError(f"{what} must be a finite number, got {factor!r}.", fix="Use e.g. 1.1 (or 0 to prune).")
    return float(factor)


def context_length(model: nn.Module) -> int | None:
    """The model's maximum sequence length from its config, when it declares one."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_device(model: nn.Module) -> torch.device:
    """Where inputs go: the device of the model's first parameter (CPU for a parameterless module), or for a model
    spread over devices by accelerate (``--device-map``) the first GPU of its map, else the CPU."""
    from core.zoo.placement import input_device
    return input_device(model)


def prepare_inputs(model: nn.Module, inputs: Iterable[torch.Tensor], what: str,
                   max_length: int | None = None) -> list[torch.Tensor]:
    """Check token-id samples and return them as a list of ``(1, T)`` int64 tensors on the model's device.

    Parameters
    ----------
    inputs : iterable of (1, T) or (T,) integer tensors
    what : name of the dataset for messages, e.g. ``"math"``
    max_length : int, optional
        Truncate longer samples to this many tokens (no truncation by default).

    Raises
    ------
    BadInputError
        Empty dataset, a sample that is not one sequence of token ids, an id outside the
        vocabulary, or a sample longer than the model's context (and no ``max_length``).
    """
    if isinstance(inputs, torch.Tensor):
        inputs = [inputs] if inputs.dim() == 1 else list(inputs)
    samples = list(inputs) if inputs is not None else []
    if not samples:
        raise BadInputError(f"The {what} dataset is empty.", fix=f"Give at least one {what} sample.")
    limit = context_length(model)
    if max_length is not None:
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise BadInputError(f"max_length must be a positive integer, got {max_length!r}.")
        if limit is not None and max_length > limit:
            raise BadInputError(f"max_length {max_length} exceeds the model's context of {limit} tokens.",
                                fix=f"Use max_length <= {limit}.")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    device = model_device(model)
    out = []
    for i, ids in enumerate(samples):
        if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype == torch.bool \
                or ids.is_complex():
            raise BadInputError(f"{what} sample {i} is not a tensor of token ids.",
                                fix="Pass (1, T) LongTensors, e.g. tokenizer(text, return_tensors='pt').input_ids.")
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
            raise BadInputError(f"{what} sample {i} has shape {tuple(ids.shape)}; expected (1, T) with T >= 1.",
                                fix="Give one non-empty sequence per sample (batch size 1).")
        if max_length is not None:
            ids = ids[:, :max_length]
        elif limit is not None and ids.shape[1] > limit:
            raise BadInputError(f"{what} sample {i} has {ids.shape[1]} tokens, more than the model's context "
                                f"of {limit}.", fix=f"Shorten the text or pass max_length={limit} to truncate.")
        if vocab is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise BadInputError(f"{what} sample {i} has token ids outside the vocabulary [0, {vocab}).",
                                fix="Tokenize with the model's own tokenizer.")
        out.append(ids.to(device=device, dtype=torch.long))
    return out


# ----------------------------------------------------------------------------------------------
# Running the model
# ----------------------------------------------------------------------------------------------
@contextmanager
def eval_mode(model: nn.Module):
    """Put every module in eval mode; restore each module's own flag on exit."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, flag in flags:
            module.training = flag


def forward(model: nn.Module, ids: torch.Tensor):
    """One forward pass on ``ids`` (1, T); Hugging Face models get ``use_cache=False``."""
    if getattr(model, "config", None) is not None and hasattr(model, "generate"):
        return model(input_ids=ids, use_cache=False)
    return model(ids)


def run_samples(model: nn.Module, samples: list[torch.Tensor], progress: Progress | None = None,
                stage: str = "", on_sample: Callable[[int], None] | None = None) -> None:
    """Run ``model`` on each sample (batch 1) under ``no_grad`` and eval mode.

    ``on_sample(i)`` is called after sample ``i`` (hooks use it to close a per-sample sum); ``progress``
    (:data:`core.progress.Progress`) hears ``stage i/n`` after each and may raise to cancel (hooks are removed and
    the model is restored by the callers' ``finally``).
    """
    step = item_progress(progress, stage)
    with torch.no_grad(), eval_mode(model):
        for i, ids in enumerate(samples):
            forward(model, ids)
            if on_sample is not None:
                on_sample(i)
            if step is not None:
                step(i + 1, len(samples))


# ----------------------------------------------------------------------------------------------
# Column norms
# ----------------------------------------------------------------------------------------------
@dataclass
class ColumnNorms:
    """Per scored matrix, the sum over samples of the L2 norms of its input columns.

    Attributes
    ----------
    sums : dict name -> (d_in,) float32, or (N, d_in) per sample when collected with ``per_sample``
    samples : number of samples N
    tokens : total number of tokens over the samples
    """

    sums: dict[str, torch.Tensor]
    samples: int
    tokens: int

    def subset(self, rows: torch.Tensor | list[int]) -> "ColumnNorms":
        """Sums over a subset of samples (needs per-sample norms)."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        sums = {n: v[rows.to(v.device)].sum(0) for n, v in self.sums.items()}
        return ColumnNorms(sums=sums, samples=len(rows), tokens=-1)


def _version(x: torch.Tensor) -> int | None:
    """The tensor's in-place version counter (None for inference-mode tensors, which have none)."""
    try:
        return x._version
    except RuntimeError:
        return None


def collect_column_norms(model: nn.Module, inputs: Iterable[torch.Tensor], *, what: str = "input",
                         max_length: int | None = None, per_sample: bool = False,
                         progress: Progress | None = None) -> ColumnNorms:
    """Sum over samples of ``||X_j||_2`` (the norm over a sample's tokens) for every scored matrix.

    Parameters
    ----------
    model : nn.Module
        Never written: hooks and flags are set on a private view (:mod:`core.zoo.views`).
    inputs : iterable of (1, T) LongTensor
    per_sample : bool
        Keep each sample's norms, ``(N, d_in)`` per matrix, instead of their sum (for the
        consistency analysis; the default keeps only the ``(d_in,)`` running sum).

    Returns
    -------
    ColumnNorms with ``sums[name]`` of shape (d_in,) float32 ((N, d_in) with ``per_sample``).
    """
    model = private_view(model)  # hooks on a private view: other requests' passes on the model are not counted
    linears = scored_linears(model)
    samples = prepare_inputs(model, inputs, what, max_length)
    current = {n: torch.zeros(m.in_features, dtype=torch.float32, device=compute_device(m))  # not meta: offloaded
               for n, m in linears.items()}
    rows: dict[str, list[torch.Tensor]] = {n: [] for n in linears}

    # the last input seen (tensor, version) and its column norms: q/k/v and gate/up share one input
    last: list = [None, -1, None]

    def hook_for(name: str):
        def hook(module, args, output):
            x = args[0]
            version = _version(x)
            if x is not last[0] or version is None or version != last[1]:
                flat = x.detach().reshape(-1, module.in_features).to(torch.float32)
                last[:] = [x, version, (flat * flat).sum(0).sqrt_()]  # ||X_j||_2 over the sample's tokens
            current[name] += last[2]
        return hook

    def close_sample(i: int) -> None:
        last[:] = [None, -1, None]
        if per_sample:
            for n, v in current.items():
                rows[n].append(v.clone())
                v.zero_()

    handles = [m.register_forward_hook(hook_for(n)) for n, m in linears.items()]
    try:
        run_samples(model, samples, progress, f"{what} samples", close_sample)
    finally:
        last[:] = [None, -1, None]
        for h in handles:
            h.remove()
    sums = {n: torch.stack(rows[n]) for n in linears} if per_sample else current
    return ColumnNorms(sums=sums, samples=len(samples), tokens=sum(int(s.shape[1]) for s in samples))


def importance_scores(weight: torch.Tensor, column_norms: torch.Tensor) -> torch.Tensor:
    """``|W| * column_norms`` broadcast over rows, in float32.

    Parameters
    ----------
    weight : (d_out, d_in)
    column_norms : (d_in,) float32

    Returns
    -------
    scores : (d_out, d_in) float32, non-negative.
    """
    return weight.detach().abs().to(torch.float32) * column_norms.to(weight.device, torch.float32)[None, :]


def top_share_mask(scores: torch.Tensor, proportion: float) -> torch.Tensor:
    """Mask of the ``int(numel * proportion)`` highest scores (lowest flat index first among ties).

    Parameters
    ----------
    scores : (...) float32
    proportion : float in (0, 1]

    Returns
    -------
    mask : (...) bool
    """
    return topk_mask(scores.contiguous(), int(scores.numel() * proportion))
