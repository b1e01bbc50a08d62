"""The training modes (the registry :data:`MODES`), the recipe every mode of a run shares (:class:`TrainSettings`) and
their learning rates: what :mod:`core.neuzip.training` (a run) and :mod:`core.neuzip.train_step` (one mode, in a
fresh process) both read, below both (see :mod:`core.neuzip.training` for what each mode does)."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import BadInputError

__all__ = ["TrainingMode", "MODES", "SGD_LR", "TrainSettings", "mode_lr", "check_modes"]


@dataclass(frozen=True)
class TrainingMode:
    """One way to train. ``weights``: how the weights are stored (``bf16``, ``neuzip``, or a bitsandbytes format
    ``int8`` / ``nf4`` / ``fp4``); ``update``: ``sgd``, ``adamw``, ``lomo`` (fused into the backward) or ``lora``
    (AdamW on LoRA adapters over frozen weights); ``defaults``: the learning rate and the mode's own options."""

    name: str
    label: str
    colour: str
    weights: str
    update: str
    defaults: dict = field(default_factory=dict)
    description: str = ""

    @property
    def needs_bnb(self) -> bool:
        return self.weights in ("int8", "nf4", "fp4")

    @property
    def same_training_as(self) -> str | None:
        """The mode whose training this one must reproduce bit for bit (lossless compression changes nothing)."""
        return "lomo" if self.name == "lomo+neuzip" else None


SGD_LR = 0.01  # vanilla / LOMO / LOMO + NeuZip: one SGD rate, so their curves can be compared step for step
_LORA = {"lr": 1e-3, "rank": 8, "alpha": 16.0}
MODES: dict[str, TrainingMode] = {m.name: m for m in (
    TrainingMode("vanilla", "Vanilla (SGD)", "#000000", "bf16", "sgd", {"lr": SGD_LR},
                 "bf16 weights and gradients, torch.optim.SGD after the backward"),
    TrainingMode("vanilla-adamw", "Vanilla AdamW", "#999999", "bf16", "adamw", {"lr": 3e-4},
                 "bf16 weights and gradients, AdamW (two bf16 states per weight); reference"),
    TrainingMode("lomo", "LOMO", "#E69F00", "bf16", "lomo", {"lr": SGD_LR},
                 "bf16 weights; each gradient applied (fp32 update) in the backward and freed"),
    TrainingMode("lomo+neuzip", "LOMO + NeuZip", "#0072B2", "neuzip", "lomo", {"lr": SGD_LR},
                 "linear weights entropy-coded at rest (lossless), decompressed per layer, updated, recompressed"),
    TrainingMode("qlora-int8", "QLoRA INT8", "#D55E00", "int8", "lora", dict(_LORA),
                 "frozen INT8 weights (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    # 4-bit: the block scales float32 ("-single") or quantized again to 8 bits (QLoRA's double quantization, the
    # NeuZip paper's NF4² / FP4² rows); qlora-nf4 and qlora-fp4 have always been the double-quantized ones
    TrainingMode("qlora-fp4-single", "QLoRA FP4", "#56B4E9", "fp4", "lora", dict(_LORA, double_quant=False),
                 "frozen FP4 weights, float32 block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-fp4", "QLoRA FP4²", "#009E73", "fp4", "lora", dict(_LORA, double_quant=True),
                 "frozen FP4 weights, double-quantized block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-nf4-single", "QLoRA NF4", "#A6761D", "nf4", "lora", dict(_LORA, double_quant=False),
                 "frozen NF4 weights, float32 block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
    TrainingMode("qlora-nf4", "QLoRA NF4²", "#CC79A7", "nf4", "lora", dict(_LORA, double_quant=True),
                 "frozen NF4 weights, double-quantized block scales (bitsandbytes) + float32 LoRA adapters (AdamW)"),
)}


@dataclass(frozen=True)
class TrainSettings:
    """The recipe every mode of one run shares."""

    steps: int = 8
    batch: int = 1
    seq: int = 64
    seed: int = 0
    lr: dict = field(default_factory=dict)  # mode -> learning rate (default: the mode's)
    checkpointing: bool = True
    loss_chunk: int = 128  # tokens whose logits exist at once (0: all)
    track_steps: int = 2
    device: str = "cpu"
    layers: int | None = None  # cut the model to this many decoder layers
    budget_s: float | None = None  # stop each mode after budget_s / modes seconds (its steps so far count)
    compress_threads: int = 0  # lomo+neuzip: 1 compresses each updated weight in a background thread
    fresh: bool = True  # each mode in fresh processes (one for the process's memory, one for the tensor ledger)


def mode_lr(mode: str, settings: TrainSettings) -> float:
    return float(settings.lr.get(mode, MODES[mode].defaults["lr"]))


def check_modes(modes) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(str(m).strip() for m in ([modes] if isinstance(modes, str) else modes)))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise BadInputError(f"unknown training mode(s): {', '.join(unknown) or 'none given'}.",
                            fix="use " + ", ".join(MODES))
    return modes
