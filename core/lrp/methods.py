"""The one registry of explanation methods and :func:`explain`, the entry point every view uses.

Every method maps ``(adapter, embeds, target, **options)`` to per-sequence-position relevance
``(L,)`` and the explained logit. Token / patch relevance = sum over channels of
(input embedding x its gradient) for the gradient-based methods.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

import torch

from core.errors import BadInputError
from core.lrp.adapters import ModelAdapter, adapter_for
from core.lrp.attention import layer_attention, rollout
from core.lrp.context import lrp_rules, mixers
from core.lrp.rules import LRPRules
from core.progress import scaled
from core.settings import lrp_activation_mib
from kernels.checks import warm

VISION_GAMMA = 0.25
RECOMPUTE_ABOVE_BYTES = 64 * 2**20  # on the CPU: kept activations above which every mixer is recomputed in the backward
RECOMPUTE_FREE_SHARE = 0.5  # on a GPU: recompute only when the kept activations exceed this share of its free memory
KEPT_BYTES_PER_CHANNEL = 28  # per token and scan channel, what a mixer keeps for the backward (~7 float32, measured)


@dataclass
class Explanation:
    """What :func:`explain` returns.

    Attributes
    ----------
    relevance : (L,) one value per token, or (h, w) one value per patch.
    logit : the explained output (raw logit of ``target``).
    target : token id (language model) or class index.
    method : registry name of the method.
    sequence_relevance : (L,) every sequence position (for images: patches plus the class token).
    """

    relevance: torch.Tensor
    logit: float
    target: int
    method: str
    sequence_relevance: torch.Tensor

    @property
    def total(self) -> float:
        """Sum of all relevances (every sequence position)."""
        return float(self.sequence_relevance.sum())

    @property
    def absorbed(self) -> float:
        """``logit - total``: what biases (and non-conservative rules) absorbed; ~0 for MambaLRP without biases."""
        return self.logit - self.total


@dataclass(frozen=True)
class Method:
    """A registered method: ``fn(adapter, embeds, target, **options) -> (relevance (L,), logit, target)``.

    Everything a view needs comes from the entry: ``label`` (tables, legends), ``colour`` (charts),
    ``options`` (what the tab and ``lrp explain`` pass) and ``fast_options`` (what the dataset-level
    evaluations pass, chosen for CPU speed and recorded in every result).
    """

    label: str
    fn: Callable
    description: str
    conservative: bool = False  # relevances sum to the logit (bias-free model)
    colour: str = "#475569"
    options: dict = field(default_factory=dict)
    fast_options: dict = field(default_factory=dict)

    def __call__(self, adapter, embeds, target, **options):
        return self.fn(adapter, embeds, target, **options)


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def _wide(t: torch.Tensor) -> torch.dtype:
    """The dtype relevances are returned in for inputs ``t``: float64 for a float64 model, float32 otherwise."""
    return torch.promote_types(t.dtype, torch.float32)


def _check_target(adapter: ModelAdapter, logits: torch.Tensor, target) -> int:
    if target is None:
        return int(logits.argmax())
    n = adapter.num_outputs
    try:
        t = int(target)
    except (TypeError, ValueError):
        raise BadInputError(f"target must be an integer id, got {target!r}.") from None
    if t != target or not 0 <= t < n:
        what = "token id" if adapter.kind == "lm" else "class index"
        raise BadInputError(f"target {target!r} is out of range: the {what} must lie in [0, {n}).",
                            fix="Leave target empty to explain the top prediction.")
    return t


def _rules_from(options: dict, default: LRPRules) -> LRPRules:
    rules = options.pop("rules", None) or default
    if not isinstance(rules, LRPRules):
        raise BadInputError(f"rules must be an LRPRules, got {type(rules).__name__}.")
    if "gamma" in options:
        g = options.pop("gamma")
        rules = rules.with_options(gamma_in_proj=g, gamma_out_proj=g, gamma_conv=g)
    names = {f.name for f in fields(LRPRules)}
    overrides = {k: options.pop(k) for k in list(options) if k in names}
    rules = rules.with_options(**overrides) if overrides else rules
    for name in ("gamma_in_proj", "gamma_out_proj", "gamma_conv"):
        g = getattr(rules, name)
        if not isinstance(g, (int, float)) or isinstance(g, bool) or not 0 <= g < float("inf"):
            raise BadInputError(f"{name} must be a number >= 0 (0 is LRP-0), got {g!r}.", fix="Try gamma=0.25.")
    return rules


def _reject_unknown(method: str, options: dict) -> None:
    if options:
        raise BadInputError(f"Unknown option(s) for {method}: {', '.join(sorted(options))}.")


def kept_activation_bytes(adapter: ModelAdapter, embeds: torch.Tensor) -> int:
    """What keeping every mixer's activations for the backward pass takes for ``embeds: (B, L, H)`` (an estimate:
    :data:`KEPT_BYTES_PER_CHANNEL` per token and scan channel, measured on the CPU; an attention layer: q, k, v, its
    output and the ``(heads, L, L)`` probabilities in float32)."""
    batch, length = embeds.shape[:2]
    kept = 0
    for m in mixers(adapter.model):
        if hasattr(m, "conv1d"):  # an SSM mixer: its scan channels
            branches = 2 if hasattr(m, "conv1d_b") else 1
            kept += batch * length * m.conv1d.out_channels * branches * KEPT_BYTES_PER_CHANNEL
        else:  # an attention layer (its heads from the config: GPT-2 and Phi-3 fuse q, k and v in one projection)
            heads = int(getattr(m.config, "num_attention_heads", None) or m.num_heads)
            width = heads * int(m.head_dim)
            kept += batch * length * (4 * width + 2 * heads * length) * 4
    return kept


def activation_budget(device: torch.device) -> int:
    """The kept activations an explanation may hold on ``device`` before it recomputes its mixers instead: on a
    CUDA device :data:`RECOMPUTE_FREE_SHARE` of its free memory now (``torch.cuda.mem_get_info``: 80 GB cards
    keep everything up to long sequences), elsewhere :data:`RECOMPUTE_ABOVE_BYTES` (sized for the peak resident
    memory of a laptop CPU: mamba-130m at 512 tokens within 1.5 GiB), or what ``LAYERWISE_LRP_ACTIVATION_MB`` asks
    (:func:`core.settings.lrp_activation_mib`: memory traded for time, e.g. SmolLM2-135M at 512 tokens in about 3
    forwards with 1 GiB more at its peak)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * RECOMPUTE_FREE_SHARE)
    chosen = lrp_activation_mib()
    return RECOMPUTE_ABOVE_BYTES if chosen is None else int(chosen * 2**20)


def recompute_mixers(adapter: ModelAdapter, embeds: torch.Tensor) -> bool:
    """Whether to recompute each mixer in the backward pass (activation checkpointing) for ``embeds: (B, L, H)``.

    True when keeping every mixer's activations (:func:`kept_activation_bytes`) would exceed what the device can
    spare (:func:`activation_budget`): on the CPU a mamba-130m-sized model from about 100 tokens on, on a GPU only
    when they would not fit. Memory then stays at one mixer's activations plus each mixer's input, for the time of
    one more forward pass.
    """
    return kept_activation_bytes(adapter, embeds) > activation_budget(embeds.device)


def _gradient_x_input(adapter, embeds, target, rules):
    x = embeds.detach().clone().requires_grad_(True)
    with lrp_rules(adapter.model, rules, recompute=recompute_mixers(adapter, x), progress=adapter.progress):
        logits = adapter.logits(x)[0]
        target = _check_target(adapter, logits, target)
        logit = logits[target]
        (grad,) = torch.autograd.grad(logit, x)
    return (x.detach() * grad).sum(-1)[0], float(logit.detach()), target


def _plain_logits(adapter, embeds, target):
    with torch.no_grad(), lrp_rules(adapter.model, None):
        logits = adapter.logits(embeds)[0]
    target = _check_target(adapter, logits, target)
    return float(logits[target]), target


# ------------------------------------------------------------------------------------------------
# methods
# ------------------------------------------------------------------------------------------------
def mambalrp(adapter, embeds, target, **options):
    """MambaLRP: gradient x input with the SiLU, SSM, gate and LN rules (LRP-gamma 0.25 for images).

    Options: ``rules`` (an :class:`LRPRules`), ``gamma`` (for in_proj, out_proj and conv), or any
    :class:`LRPRules` field (``silu=False`` ... for the ablation).
    """
    default = LRPRules.mambalrp(VISION_GAMMA if adapter.kind == "vision" else 0.0)
    rules = _rules_from(options, default)
    _reject_unknown("mambalrp", options)
    return _gradient_x_input(adapter, embeds, target, rules)


def lrp_ln_only(adapter, embeds, target, **options):
    """LRP with only the LN-rule (no SiLU, SSM or gate rule)."""
    _reject_unknown("lrp_ln", options)
    return _gradient_x_input(adapter, embeds, target, LRPRules.ln_only())


def gradient_x_input(adapter, embeds, target, **options):
    """Gradient x input of the original network."""
    _reject_unknown("gradient_x_input", options)
    return _gradient_x_input(adapter, embeds, target, LRPRules.none())


def smoothgrad(adapter, embeds, target, n_samples: int = 16, noise: float = 0.1, seed: int = 0, **options):
    """SmoothGrad x input: the gradient averaged over ``n_samples`` noisy copies of the embeddings.

    ``noise`` is the noise std as a fraction of the embeddings' value range.
    """
    _reject_unknown("smoothgrad", options)
    logit, target = _plain_logits(adapter, embeds, target)
    gen = torch.Generator().manual_seed(int(seed))
    sigma = float(noise) * float(embeds.max() - embeds.min())
    eps = torch.randn((int(n_samples),) + tuple(embeds.shape[1:]), generator=gen).to(embeds) * sigma
    x = (embeds + eps).requires_grad_(True)
    with lrp_rules(adapter.model, None, recompute=recompute_mixers(adapter, x), progress=adapter.progress):
        out = adapter.logits(x)[:, target].sum()
        (grad,) = torch.autograd.grad(out, x)
    return (embeds[0] * grad.mean(0)).sum(-1), logit, target


def integrated_gradients(adapter, embeds, target, n_steps: int = 32, baseline: str = "zero", **options):
    """Integrated Gradients (captum) from a zero-embedding baseline."""
    from captum.attr import IntegratedGradients

    _reject_unknown("integrated_gradients", options)
    logit, target = _plain_logits(adapter, embeds, target)
    base = _baseline_embedding(adapter, embeds, baseline).expand_as(embeds)
    batch = embeds.expand(int(n_steps), -1, -1)
    with lrp_rules(adapter.model, None, recompute=recompute_mixers(adapter, batch), progress=adapter.progress):
        ig = IntegratedGradients(lambda e: adapter.logits(e)[:, target])
        attr = ig.attribute(embeds, baselines=base, n_steps=int(n_steps), internal_batch_size=int(n_steps))
    return attr.sum(-1)[0].detach(), logit, target


def random_relevance(adapter, embeds, target, seed: int = 0, **options):
    """Uniform random relevance in [0, 1) (the floor every method should beat)."""
    _reject_unknown("random", options)
    logit, target = _plain_logits(adapter, embeds, target)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.rand(embeds.shape[1], generator=gen).to(_wide(embeds)), logit, target


def _attention(adapter, embeds, target, weighted: bool):
    record: list = []
    attention: list = []  # a hybrid's attention layers (their softmax), beside the scans
    x = embeds.detach().clone().requires_grad_(weighted)  # the scans' outputs then carry a graph to the logit
    # the forward (and backward) pass is cheap beside the O(layers D N L^2) hidden attention: a fifth of the bar
    with lrp_rules(adapter.model, None, record, progress=scaled(adapter.progress, 0.0, 0.2), attention=attention):
        logits = adapter.logits(x)[0]
        target = _check_target(adapter, logits, target)
        logit = logits[target]
        grads = list(torch.autograd.grad(logit, [r.y for r in record] + [p for _, p in attention])) \
            if weighted else None
    scan_grads, attention_grads = (grads[:len(record)], grads[len(record):]) if weighted else (None, None)
    roll = rollout(layer_attention(record, scan_grads, progress=scaled(adapter.progress, 0.2, 1.0),
                                   attention=attention, attention_grads=attention_grads))
    row = roll[adapter.explained_position(x.shape[1])]
    return row.detach().float().cpu().to(_wide(embeds)), float(logit.detach()), target


def attention_rollout_method(adapter, embeds, target, **options):
    """Attention Rollout over the channel-averaged hidden attention matrices ``|alpha[t, s]|``."""
    _reject_unknown("attention_rollout", options)
    return _attention(adapter, embeds, target, weighted=False)


def mamba_attr(adapter, embeds, target, **options):
    """Mamba-Attribution (Ali et al.): positive hidden attention weighted by the clamped gradient, rolled out."""
    _reject_unknown("mamba_attr", options)
    return _attention(adapter, embeds, target, weighted=True)


def _baseline_embedding(adapter: ModelAdapter, embeds: torch.Tensor, baseline) -> torch.Tensor:
    """``(1, 1, H)`` replacement embedding: ``"zero"``, ``"mean"`` (of the input), a token id, or a tensor."""
    if isinstance(baseline, torch.Tensor):
        return baseline.to(embeds).reshape(1, 1, -1)
    if baseline == "zero":
        return torch.zeros_like(embeds[:, :1])
    if baseline == "mean":
        return embeds.mean(1, keepdim=True)
    if isinstance(baseline, int) and adapter.kind != "vision":
        with torch.no_grad():
            return adapter.embeddings().weight[baseline].to(embeds).reshape(1, 1, -1)
    raise BadInputError(f"Unknown baseline {baseline!r}.", fix="Use 'zero', 'mean', a token id or a tensor.")


METHODS: dict[str, Method] = {
    "mambalrp": Method("MambaLRP", mambalrp, "LRP rules for SiLU, SSM, gate and norm; conserves relevance", True,
                       colour="#D55E00"),
    "lrp_ln": Method("LRP (LN-rule)", lrp_ln_only, "Only the LN-rule", False, colour="#E69F00"),
    "gradient_x_input": Method("Gradient x Input", gradient_x_input, "Gradient times input embedding",
                               colour="#0072B2"),
    "smoothgrad": Method("SmoothGrad", smoothgrad, "Gradient averaged over noisy inputs, times input",
                         colour="#56B4E9", options={"n_samples": 16}, fast_options={"n_samples": 8}),
    "integrated_gradients": Method("Integrated Gradients", integrated_gradients,
                                   "Path integral of gradients from a zero embedding (captum)", colour="#009E73",
                                   options={"n_steps": 32}, fast_options={"n_steps": 16}),
    "attention_rollout": Method("Attention Rollout", attention_rollout_method,
                                "Rollout of the hidden attention matrices (and a hybrid's softmax attention)",
                                colour="#CC79A7"),
    "mamba_attr": Method("MambaAttr", mamba_attr, "Gradient-weighted hidden attention (and a hybrid's softmax "
                         "attention), rolled out", colour="#000000"),
    "random": Method("Random", random_relevance, "Uniform random relevance", colour="#64748b"),
}


def method_names(methods=None, empty_means_all: bool = True) -> list[str]:
    """Registered method names from a list or a comma-separated string, in order, without repeats.

    Nothing given means every method (``empty_means_all``) or a :class:`BadInputError`; an unknown name raises one
    that lists the choices.
    """
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    names = list(dict.fromkeys(methods or []))
    if not names:
        if empty_means_all:
            return list(METHODS)
        raise BadInputError("No method chosen.", fix="Tick at least one method.")
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise BadInputError(f"Unknown method(s): {', '.join(map(str, unknown))}.", fix=f"Use: {', '.join(METHODS)}.")
    return names


def explain(model, input_ids=None, pixel_values=None, target=None, method: str = "mambalrp", progress=None,
            **options) -> Explanation:
    """Explain one prediction of a Mamba model.

    Parameters
    ----------
    model : ``MambaForCausalLM``, ``MambaModel``, :class:`MambaSequenceClassifier` or :class:`VisionMamba`.
        Left unchanged (parameters, forwards and training flags).
    input_ids : (1, L) token ids, for text models.
    pixel_values : (1, C, S, S) image, for :class:`VisionMamba`.
    target : token id (language model, next token after the last position) or class index; None
        explains the argmax.
    method : a key of :data:`METHODS`.
    progress : optional ``progress(fraction, message)``, called once per mixer layer in the forward pass and
        again in the backward pass (the hidden-attention methods: also per chunk of channels of every scan;
        fractions rise from 0 to 1); an exception it raises (e.g. the app's Stop) stops the explanation and
        propagates.
    **options : method options (e.g. ``gamma=0.25``, ``ssm=False``, ``n_samples=16``).

    Returns
    -------
    Explanation with ``relevance`` (L,) or (h, w), ``logit`` and ``target``; the relevances are float64 for a
    float64 model (the gradient methods and MambaLRP compute in it end to end; the rollouts and Random are float32
    values widened), float32 otherwise.
    """
    if method not in METHODS:
        raise BadInputError(f"Unknown method {method!r}.", fix=f"Use one of: {', '.join(METHODS)}.")
    adapter = adapter_for(model)
    adapter.progress = progress
    embeds = adapter.embed(input_ids, pixel_values)
    warm(embeds.device, ("selective_scan_lrp", "add_rmsnorm"))  # on CUDA: the kernels' checks before the model runs
    relevance, logit, target = METHODS[method](adapter, embeds, target, **dict(options))
    # float32, or float64 where the model computes in float64 (half precisions widen to float32)
    relevance = relevance.detach().to(_wide(relevance)).cpu()
    return Explanation(relevance=adapter.to_map(relevance), logit=float(logit), target=int(target),
                       method=method, sequence_relevance=relevance)
