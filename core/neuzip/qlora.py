"""QLoRA-style baselines (Dettmers et al., 2023) for the training comparison: every linear layer but the embeddings and
the LM head becomes a frozen bitsandbytes layer (INT8 row-wise, ``Linear8bitLt``; NF4 or FP4 with block 64, ``Linear4bit``,
their block scales float32 or themselves quantized to 8 bits: QLoRA's double quantization, the paper's NF4² and
FP4²) plus a trainable low-rank adapter ``B A`` (rank ``r``, scale ``alpha / r``,
``A`` Kaiming-uniform, ``B`` zero: the LoRA initialisation), kept in float32. Everything else is frozen; only the
adapters train (AdamW). This is fine-tuning, not the full training of the other modes: its loss is not comparable
with theirs, its memory is.

:func:`bnb_status` probes bitsandbytes once (a 4-bit and an 8-bit layer, forward and backward, on this machine's
CPU or the GPU) and says why the modes cannot run where they cannot.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.modules import SKIP, linear_layers

__all__ = ["QUANT_TYPES", "LoRALinear", "quantize_linears", "lora_hook", "bnb_status", "quantized_tensors"]

QUANT_TYPES = ("int8", "nf4", "fp4")


def _quantized(linear: nn.Linear, quant: str, device: torch.device, weight: torch.Tensor | None = None,
               double_quant: bool = True) -> nn.Module:
    """``linear`` as a frozen bitsandbytes layer on ``device``, quantized from ``weight`` (default: its own); 4-bit:
    ``double_quant`` quantizes the block scales again (QLoRA's double quantization)."""
    import bitsandbytes as bnb

    w = (linear.weight if weight is None else weight).detach().to(torch.bfloat16).cpu()
    bias = linear.bias is not None
    if quant == "int8":
        layer = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias, has_fp16_weights=False,
                                    threshold=6.0)
        layer.weight = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
    else:
        layer = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias, compute_dtype=torch.bfloat16,
                                  quant_type=quant, compress_statistics=double_quant)
        layer.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type=quant, compress_statistics=double_quant)
    if bias:
        layer.bias = nn.Parameter(linear.bias.detach().to(torch.bfloat16).cpu(), requires_grad=False)
    return layer.to(device)  # quantizes


class LoRALinear(nn.Module):
    """``y = base(x) + (x A^T B^T) * alpha / r`` with ``base`` frozen (quantized) and ``A`` (r, in), ``B`` (out, r)
    trainable, float32."""

    def __init__(self, base: nn.Module, in_features: int, out_features: int, rank: int, alpha: float,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.base, self.rank, self.scale = base, int(rank), float(alpha) / int(rank)
        device = next(base.parameters()).device
        a = torch.empty(rank, in_features)
        bound = 1.0 / math.sqrt(in_features)  # kaiming_uniform_(a=sqrt(5)) as nn.Linear and LoRA initialise A
        a.uniform_(-bound, bound, generator=generator)
        self.lora_A = nn.Parameter(a.to(device))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        low = (x.float() @ self.lora_A.t()) @ self.lora_B.t()
        return y + (low * self.scale).to(y.dtype)


def quantize_linears(model: nn.Module, quant: str, rank: int = 8, alpha: float = 16.0, seed: int = 0,
                     skip: tuple[str, ...] = SKIP, double_quant: bool = True) -> list[nn.Parameter]:
    """Freeze the model and swap its linear layers (but ``skip``) for quantized :class:`LoRALinear` ones, in place;
    returns the adapters' parameters (the only trainable ones). ``double_quant`` (4-bit only): the block scales
    quantized to 8 bits with their own float32 scale per 256 blocks (QLoRA's double quantization), else float32."""
    if quant not in QUANT_TYPES:
        raise BadInputError(f"unknown quantization {quant!r}.", fix=f"use one of {', '.join(QUANT_TYPES)}")
    problem = bnb_status()
    if problem:
        raise BadInputError(f"QLoRA-style training needs bitsandbytes: {problem}.",
                            fix="pip install bitsandbytes==0.50.2, or leave the qlora modes out")
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    for name, linear in linear_layers(model, skip):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = _quantized(linear, quant, linear.weight.device, double_quant=double_quant)
        setattr(parent, child, LoRALinear(base, linear.in_features, linear.out_features, rank, alpha, gen))
    return [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]


def lora_hook(quant: str, rank: int = 8, alpha: float = 16.0, seed: int = 0, double_quant: bool = True):
    """The hook of :mod:`core.neuzip.streaming` that builds each linear layer as :func:`quantize_linears` would, from
    its weight as it is read (a copy of it is quantized: the hook's weight is a scratch), so the bf16 model is never
    whole in memory. The adapters' generator is drawn in the order the layers come, the model's order."""
    if quant not in QUANT_TYPES:
        raise BadInputError(f"unknown quantization {quant!r}.", fix=f"use one of {', '.join(QUANT_TYPES)}")
    problem = bnb_status()
    if problem:
        raise BadInputError(f"QLoRA-style training needs bitsandbytes: {problem}.",
                            fix="pip install bitsandbytes==0.50.2, or leave the qlora modes out")
    gen = torch.Generator().manual_seed(seed)

    def hook(name: str, linear: nn.Linear, weight: torch.Tensor) -> nn.Module:
        base = _quantized(linear, quant, torch.device("cpu"), weight.clone(), double_quant)
        return LoRALinear(base, linear.in_features, linear.out_features, rank, alpha, gen)
    return hook


def quantized_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors a quantized weight keeps besides its parameter: INT8 row scales, 4-bit block scales (nested
    scales, code tables)."""
    out = []
    for m in model.modules():
        if isinstance(m, LoRALinear):
            w = m.base.weight
            for attr in ("SCB", "CB"):
                if isinstance(getattr(w, attr, None), torch.Tensor):
                    out.append(getattr(w, attr))
            qs = getattr(w, "quant_state", None)
            for s in (qs, getattr(qs, "state2", None)):
                for attr in ("absmax", "code", "offset"):
                    if isinstance(getattr(s, attr, None), torch.Tensor):
                        out.append(getattr(s, attr))
    return out


@functools.lru_cache(maxsize=4)
def bnb_status(device: str = "cpu") -> str:
    """"" when bitsandbytes' INT8 and 4-bit layers train here (forward and backward of a small layer on ``device``),
    else why not."""
    try:
        import bitsandbytes  # noqa: F401  (about 20 s the first time)
    except Exception as err:  # an import failure of any kind (missing, a broken native library)
        return f"bitsandbytes does not import ({type(err).__name__}: {err})"
    try:
        lin = nn.Linear(64, 64, bias=False).to(torch.bfloat16)
        for quant in QUANT_TYPES:
            layer = LoRALinear(_quantized(lin, quant, torch.device(device)), 64, 64, 4, 8.0)
            x = torch.randn(2, 64, dtype=torch.bfloat16, device=device, requires_grad=True)
            layer(x).float().sum().backward()
            if layer.lora_A.grad is None or x.grad is None or not bool(torch.isfinite(x.grad).all()):
                return f"bitsandbytes' {quant} layer gives no usable gradient on {device}"
    except Exception as err:  # bitsandbytes raises many kinds (RuntimeError, NotImplementedError, its own)
        return f"bitsandbytes does not run on {device} ({type(err).__name__}: {str(err).splitlines()[0][:160]})"
    return ""
