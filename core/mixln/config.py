"""The Mix-LN model's configuration and a memory estimate made before anything is allocated.

Norm placements (``norm``), per decoder layer, with N an RMSNorm and F the attention or the MLP:

- ``pre``:      x + F(N(x))                      (LLaMA, GPT-2)
- ``post``:     N(x + F(x))                      (original Transformer, BERT)
- ``mix``:      Post-LN for the first floor(post_ln_ratio * L) layers, Pre-LN for the rest (Mix-LN)
- ``deepnorm``: N(a * x + F(x)), Post-LN with the residual up-scaled by a and a Xavier-normal branch init
  (constants below)
- ``sandwich``: x + N(F(N(x)))                   (CogView, Gemma 2)
- ``peri``:     x + N(F(N(x))) and a norm on the embedding output (Peri-LN, Kim et al. 2025; its layers are
  Sandwich-LN's, the embedding norm is what the Peri-LN paper adds)
- ``lns``:      x + F(N(x) / sqrt(l)), l = layer index + 1 (LayerNorm Scaling, Sun et al. 2025: both pre-norm
  outputs of layer l scaled, no new parameters; the authors' code scales by 1 / sqrt(layer_index + 1) with a
  0-based layer_index, so the first layer is unscaled)

The final norm before the head is kept in every placement.

DeepNorm constants (``deepnorm_formula``), L = number of layers:

- ``"mixln"`` (default; the Mix-LN authors' code, pixeli99/MixLN ``NORM_TYPE=deeppost``, the comparison they
  published): a = 2 * sqrt(2) for every depth (DeepNet's (2L)^(1/4) at L = 32); value, output and the three MLP
  weights Xavier-normal with gain (8L)^(1/4); query and key Xavier-normal with gain 1.
- ``"deepnet"`` (the DeepNet paper, Wang et al. 2022, decoder-only): a = (2L)^(1/4); value, output and MLP
  weights Xavier-normal with gain b = (8L)^(-1/4); query and key gain 1. The authors' gain is 1 / b.

Initialisation otherwise: every Linear N(0, ``initializer_range``); the embedding N(0, ``embedding_init_std``)
(None: ``initializer_range``; the Mix-LN authors' code uses sqrt(2/5) for every placement); norms 1.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from decimal import Decimal
from pathlib import Path

from core.errors import BadInputError
from core.mixln.placements import MODEL_DEFAULTS, MODEL_NORMS, model_norms

NORMS = MODEL_NORMS  # the norms of the registry (core.mixln.placements; ``deepnet`` is ``deepnorm`` with DeepNet's formula)
DEEPNORM_FORMULAS = ("mixln", "deepnet")


@dataclass
class MixLNConfig:
    vocab_size: int = 32000
    hidden_size: int = 512              # D, the width of the residual stream
    num_layers: int = 8                 # L, decoder layers
    num_heads: int = 8                  # attention heads; head_dim = hidden_size // num_heads
    intermediate_size: int = 1376       # width of the SwiGLU MLP
    norm: str = "pre"                   # one of NORMS
    post_ln_ratio: float = 0.25         # Mix-LN alpha: layers with index < floor(alpha * L) are Post-LN
    num_kv_heads: int | None = None     # grouped-query attention; None = num_heads
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02     # std of the normal init of every Linear (and the embedding if the next is None)
    embedding_init_std: float | None = None  # std of the embedding's normal init; None: initializer_range
    # one of DEEPNORM_FORMULAS: the Mix-LN authors' constants or DeepNet's
    deepnorm_formula: str = MODEL_DEFAULTS["deepnorm_formula"]
    tie_word_embeddings: bool = False   # share the embedding matrix with the LM head

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.norm not in model_norms():
            raise BadInputError(f"unknown norm placement {self.norm!r}.",
                                fix=f"use one of: {', '.join(model_norms())}.")
        if self.deepnorm_formula not in DEEPNORM_FORMULAS:
            raise BadInputError(f"unknown DeepNorm formula {self.deepnorm_formula!r}.",
                                fix=f"use one of: {', '.join(DEEPNORM_FORMULAS)}.")
        if self.embedding_init_std is not None and not (isinstance(self.embedding_init_std, (int, float))
                                                        and 0 < float(self.embedding_init_std) < math.inf):
            raise BadInputError(f"embedding_init_std = {self.embedding_init_std!r} must be a positive number.",
                                fix="use e.g. 0.02, or None to use initializer_range.")
        if not isinstance(self.post_ln_ratio, (int, float)) or not 0.0 <= float(self.post_ln_ratio) <= 1.0 \
                or math.isnan(float(self.post_ln_ratio)):
            raise BadInputError(f"Mix-LN ratio alpha = {self.post_ln_ratio} is outside [0, 1].",
                                fix="choose alpha between 0 (all Pre-LN) and 1 (all Post-LN); the paper uses 0.25.")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "num_kv_heads",
                     "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInputError(f"{name} = {value!r} must be a positive whole number.", fix=f"set {name} >= 1.")
        if self.hidden_size % self.num_heads:
            raise BadInputError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}.",
                                fix="pick a head count that divides the width (e.g. width 512, 8 heads).")
        if self.head_dim % 2:
            raise BadInputError(f"head size {self.head_dim} is odd; rotary embeddings need an even head size.",
                                fix="change hidden_size or num_heads so that hidden_size / num_heads is even.")
        if self.num_heads % self.num_kv_heads:
            raise BadInputError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}.",
                                fix="use a key/value head count that divides the head count.")

    # ---- derived --------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_post_ln_layers(self) -> int:
        """floor(alpha * L) for Mix-LN (exact in decimal: 0.29 * 100 gives 29, not 28)."""
        if self.norm != "mix":
            return self.num_layers if self.norm in ("post", "deepnorm") else 0
        return math.floor(Decimal(repr(float(self.post_ln_ratio))) * self.num_layers)

    def layer_norms(self) -> list[str]:
        """The placement of each layer: ``pre``, ``post``, ``deepnorm``, ``sandwich`` or ``lns`` (Peri-LN's layers
        are ``sandwich``; its embedding norm is the model's, :attr:`embedding_norm`)."""
        if self.norm == "mix":
            k = self.num_post_ln_layers
            return ["post"] * k + ["pre"] * (self.num_layers - k)
        return ["sandwich" if self.norm == "peri" else self.norm] * self.num_layers

    @property
    def embedding_norm(self) -> bool:
        """Whether the embedding output is normalised before the first layer (Peri-LN)."""
        return self.norm == "peri"

    @property
    def deepnorm_alpha(self) -> float:
        """The residual scale a: 2 * sqrt(2) (Mix-LN authors' code) or (2L)^(1/4) (DeepNet, decoder-only)."""
        if self.deepnorm_formula == "mixln":
            return 2.0 * math.sqrt(2.0)
        return (2.0 * self.num_layers) ** 0.25

    @property
    def deepnorm_gain(self) -> float:
        """Xavier-normal gain of the value, output and MLP weights: (8L)^(1/4) (Mix-LN authors' code) or
        b = (8L)^(-1/4) (DeepNet). Query and key weights use gain 1 in both."""
        if self.deepnorm_formula == "mixln":
            return (8.0 * self.num_layers) ** 0.25
        return (8.0 * self.num_layers) ** -0.25

    @property
    def embedding_std(self) -> float:
        return self.initializer_range if self.embedding_init_std is None else float(self.embedding_init_std)

    def num_parameters(self) -> int:
        d, i, v, L = self.hidden_size, self.intermediate_size, self.vocab_size, self.num_layers
        kv = self.num_kv_heads * self.head_dim
        norms_per_layer = 4 if self.norm in ("sandwich", "peri") else 2
        per_layer = d * d * 2 + d * kv * 2 + 3 * d * i + norms_per_layer * d
        head = 0 if self.tie_word_embeddings else v * d
        return v * d + L * per_layer + d * (2 if self.embedding_norm else 1) + head

    # ---- serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"model_type": "mixln", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "MixLNConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, folder: str | os.PathLike) -> Path:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "MixLNConfig":
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise BadInputError(f"no config.json in {folder}.", fix="point to a folder written by save_pretrained().")
        return cls.from_dict(json.loads(path.read_text()))


# ---- memory ---------------------------------------------------------------------------------------

def available_memory_bytes(device: str = "cpu") -> int:
    """Free memory on ``device``: MemAvailable on CPU (Linux), free device memory on CUDA."""
    if str(device).startswith("cuda"):
        import torch
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def estimate_memory_bytes(config: MixLNConfig, batch_size: int = 1, seq_len: int = 1, training: bool = False,
                          bytes_per_value: int = 4) -> int:
    """Rough upper estimate of parameter + optimizer + activation bytes for one step.

    Parameters (x1), and when training their gradients (x1) and Adam moments (x2); activations kept for
    backward, per layer about ``(10 D + 3 I) * B * T`` values plus ``heads * T^2 * B`` for attention
    scores, and ``3 * V * B * T`` for logits and their softmax/gradient.
    """
    p = config.num_parameters()
    params = p * bytes_per_value * (4 if training else 1)
    bt = batch_size * seq_len
    d, i, L = config.hidden_size, config.intermediate_size, config.num_layers
    per_layer = (10 * d + 3 * i) * bt + config.num_heads * seq_len * seq_len * batch_size
    if not training:
        per_layer = per_layer // L + 1  # inference keeps only about one layer alive
    acts = (L * per_layer + 3 * config.vocab_size * bt) * bytes_per_value
    return int(params + acts)


def check_fits(config: MixLNConfig, batch_size: int = 1, seq_len: int = 1, training: bool = False,
               device: str = "cpu", headroom: float = 0.9) -> int:
    """Raise :class:`BadInputError` when the estimate exceeds ``headroom`` of free memory; return the estimate."""
    need = estimate_memory_bytes(config, batch_size, seq_len, training)
    have = available_memory_bytes(device)
    if need > headroom * have:
        gib = 1024 ** 3
        raise BadInputError(
            f"a {config.num_layers}-layer, width-{config.hidden_size} model "
            f"({config.num_parameters() / 1e6:.1f}M parameters) with batch {batch_size} x {seq_len} tokens needs "
            f"about {need / gib:.1f} GiB but only {have / gib:.1f} GiB is free on {device}.",
            fix="use fewer layers, a smaller width or vocabulary, or a smaller batch / sequence length.")
    return need
