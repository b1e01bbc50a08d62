"""The weight formats of the memory / perplexity trade-off (NeuZip paper, Fig. 3 and Tables 3-4): the registry
:data:`METHODS` maps each name to its quantizer ``(W bf16) -> (W_hat float32, stored bytes)`` and everything a view
needs: its label, legend family and marker style, and the settings :func:`core.neuzip.tradeoff.default_settings`
adds for it. A new baseline is one entry (plus its quantizer): it then appears in the trade-off, its tables, its
chart and the CLI.

- ``bf16``: the reference, every weight as bf16;
- ``neuzip``: NeuZip with ``k = 7`` (lossless: the bf16 perplexity exactly), ``3``, ``1``, ``0``, each with or
  without the per-block normaliser (``block_size``);
- ``bnb-int8``, ``bnb-nf4``, ``bnb-fp4``: bitsandbytes quantization (row-wise absmax INT8, i.e. LLM.int8 without its
  outlier path; NF4 / FP4 with block size 64 and double-quantized scales, the ``Linear4bit`` defaults), when
  ``bitsandbytes`` imports;
- ``nf4-rans``: the NF4 codes entropy-coded with the NeuZip rANS coder (lossless on the codes, so the NF4 perplexity
  at a smaller size): the fairer baseline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from core.errors import BadInputError
from core.neuzip import rans
from core.neuzip.codec import compress

__all__ = ["METHODS", "Method", "Style", "method_of", "setting_label", "setting_family", "setting_style", "nibbles",
           "BNB_BLOCK"]

BNB_BLOCK = 64


def _bf16(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    return w.float(), 2 * w.numel()


def _neuzip(w: torch.Tensor, k: int = 7, block_size: int | None = None, **_) -> tuple[torch.Tensor, int]:
    ct = compress(w, k, block_size)
    return ct.decompress().float(), ct.nbytes


def _state_bytes(state) -> int:
    """Every stored byte of a bitsandbytes ``QuantState`` (scales, nested scales, code table, header)."""
    return sum(v.numel() * v.element_size() for v in state.as_dict(packed=True).values()
               if isinstance(v, torch.Tensor))


def _bnb_int8(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    import bitsandbytes.functional as bnb

    codes, row_scale, _ = bnb.int8_vectorwise_quant(w)
    return bnb.int8_vectorwise_dequant(codes, row_scale).float(), codes.numel() + 4 * row_scale.numel()


def _bnb_4bit(w: torch.Tensor, quant_type: str):
    import bitsandbytes.functional as bnb

    packed, state = bnb.quantize_4bit(w, blocksize=BNB_BLOCK, quant_type=quant_type, compress_statistics=True)
    return packed, state, bnb.dequantize_4bit(packed, state).float().reshape(w.shape)


def _bnb_nf4(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "nf4")
    return w_hat, packed.numel() + _state_bytes(state)


def _bnb_fp4(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "fp4")
    return w_hat, packed.numel() + _state_bytes(state)


def nibbles(packed: torch.Tensor) -> np.ndarray:
    """The 4-bit codes of a packed ``uint8`` tensor, high nibble first: ``(2 * numel,) uint8``."""
    b = packed.reshape(-1).cpu().numpy()
    return np.stack([b >> 4, b & 0x0F], axis=1).reshape(-1)


def _nf4_rans(w: torch.Tensor, **_) -> tuple[torch.Tensor, int]:
    packed, state, w_hat = _bnb_4bit(w, "nf4")
    stream = rans.encode(nibbles(packed))
    return w_hat, stream.nbytes + _state_bytes(state)


@dataclass(frozen=True)
class Style:
    """How a family of points is drawn: colour, marker and where the point labels go."""

    colour: str
    marker: str = "circle"
    text_position: str = "top center"


@dataclass(frozen=True)
class Method:
    """A weight format: ``quantize(W bf16 (out, in), **setting) -> (W_hat float32, stored bytes)``.

    Attributes
    ----------
    label : the setting's name in tables and on the chart (parameterised methods: ``describe``).
    family : the legend entry its points join; ``style``: how they are drawn.
    settings : what :func:`default_settings` adds for a baseline (``baseline=True``), each merged with its name.
    describe : ``setting -> (label, family, style)`` for a method whose settings carry parameters (NeuZip's k, B).
    """

    name: str
    family: str  # the legend entry
    quantize: Callable[..., tuple[torch.Tensor, int]]
    label: str = ""
    style: Style = Style("#475569")
    needs_bnb: bool = False
    same_weights_as: str | None = None  # evaluates exactly like this method (a lossless re-coding)
    baseline: bool = True
    settings: tuple[dict, ...] = ({},)
    describe: Callable[[dict], tuple[str, str, Style]] | None = None

    def view(self, setting: dict) -> tuple[str, str, Style]:
        """``(label, family, style)`` of one of its settings."""
        if self.describe is not None:
            return self.describe(setting)
        return self.label or self.name, self.family, self.style


def _describe_neuzip(s: dict) -> tuple[str, str, Style]:
    text = f"NeuZip k={s['k']}" + (" (lossless)" if s["k"] == 7 else "")
    if s.get("block_size"):
        return text + f", B={s['block_size']}", "NeuZip + normaliser", Style("#56B4E9", "diamond", "bottom center")
    return text, "NeuZip", Style("#0072B2", "circle", "top center")


_BNB = Style("#D55E00", "triangle-up", "middle right")
METHODS: dict[str, Method] = {
    "bf16": Method("bf16", "bf16", _bf16, "bf16", Style("#000000", "square"), baseline=False),
    "neuzip": Method("neuzip", "NeuZip", _neuzip, baseline=False, describe=_describe_neuzip),
    "bnb-int8": Method("bnb-int8", "bitsandbytes", _bnb_int8, "INT8 (bnb)", _BNB, needs_bnb=True),
    "bnb-nf4": Method("bnb-nf4", "bitsandbytes", _bnb_nf4, "NF4 (bnb)", _BNB, needs_bnb=True),
    "bnb-fp4": Method("bnb-fp4", "bitsandbytes", _bnb_fp4, "FP4 (bnb)", _BNB, needs_bnb=True),
    "nf4-rans": Method("nf4-rans", "NF4 + rANS", _nf4_rans, "NF4 + rANS", Style("#CC79A7", "star", "middle left"),
                       needs_bnb=True, same_weights_as="bnb-nf4"),
}


def method_of(s: dict) -> Method:
    name = s.get("method")
    if name not in METHODS:
        raise BadInputError(f"unknown method {name!r}.", fix=f"use one of {', '.join(METHODS)}")
    return METHODS[name]


def setting_label(s: dict) -> str:
    """A short name for a setting, e.g. ``NeuZip k=3, B=128`` (from the registry)."""
    return method_of(s).view(s)[0]


def setting_family(s: dict) -> str:
    """The legend entry of a setting (from the registry)."""
    return method_of(s).view(s)[1]


def setting_style(s: dict) -> Style:
    """How a setting's family is drawn (from the registry)."""
    return method_of(s).view(s)[2]
