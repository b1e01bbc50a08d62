"""The one registry of norm placements: name -> what every view needs (label, colour, formula, alpha).

The placement's computation is :class:`core.mixln.model.DecoderLayer` (and ``MixLNConfig.layer_norms``); a new
placement is one entry here plus its branch there. Views (the tab's radio, the CLI's ``--norm``, chart colours and
legends, the comparison and alpha-sweep tables) list placements from :data:`PLACEMENTS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.figures import PALETTE


@dataclass(frozen=True)
class Placement:
    """One norm placement.

    Attributes
    ----------
    label : how tables and legends name it.
    colour : its line / bar colour (Okabe-Ito).
    formula : one decoder layer, N an RMSNorm and F the attention or the MLP.
    origin : where it comes from.
    default_alpha : the alpha a run of it records (Mix-LN: the paper's 0.25).
    has_alpha : alpha picks how many early layers are Post-LN (Mix-LN only).
    sweep_alpha : the Mix-LN alpha it equals layer for layer (Pre-LN 0, Post-LN 1); None: not on the alpha sweep
        unless ``has_alpha``.
    """

    label: str
    colour: str
    formula: str
    origin: str = ""
    default_alpha: float = 0.0
    has_alpha: bool = False
    sweep_alpha: float | None = None


PLACEMENTS: dict[str, Placement] = {
    "pre": Placement("Pre-LN", "#0072B2", "x + F(N(x))", "LLaMA, GPT-2", 0.0, sweep_alpha=0.0),
    "post": Placement("Post-LN", "#D55E00", "N(x + F(x))", "the original Transformer, BERT", 1.0, sweep_alpha=1.0),
    "mix": Placement("Mix-LN", "#009E73", "Post-LN in the first floor(alpha * L) layers, Pre-LN in the rest",
                     "Li, Yin and Liu (2024)", 0.25, has_alpha=True),
    "deepnorm": Placement("DeepNorm", "#CC79A7", "N(a * x + F(x)), a = (2L)^(1/4)", "DeepNet (Wang et al., 2022)", 1.0),
    "sandwich": Placement("Sandwich-LN", "#E69F00", "x + N(F(N(x)))", "CogView, Gemma 2", 0.0),
}
# Mix-LN runs with another alpha than the paper's get their own colour (the paper's 0.25 keeps Mix-LN's).
MIX_ALPHA_COLOURS = {0.0: "#0072B2", 0.125: "#56B4E9", 0.25: "#009E73", 0.5: "#E69F00", 1.0: "#D55E00"}


def placement_choices() -> list[tuple[str, str]]:
    """``(label, name)`` of every placement, for radios and help texts."""
    return [(p.label, name) for name, p in PLACEMENTS.items()]


def placement_label(norm: str, alpha: float | None = None) -> str:
    """``Pre-LN``, or ``Mix-LN (alpha 0.25)`` for a placement with an alpha."""
    p = PLACEMENTS.get(norm)
    if p is None:
        return norm
    return f"{p.label} (alpha {alpha:g})" if p.has_alpha and alpha is not None else p.label


def placement_colour(norm: str, alpha: float | None = None, index: int = 0) -> str:
    """The colour of a run of ``norm`` (with ``alpha``); a Mix-LN alpha other than 0.25 gets its own."""
    p = PLACEMENTS.get(norm)
    if p is not None and p.has_alpha and alpha in MIX_ALPHA_COLOURS and alpha != p.default_alpha:
        return MIX_ALPHA_COLOURS[alpha]
    return p.colour if p is not None else PALETTE[index % len(PALETTE)]


def sweep_alpha(norm: str, alpha: float) -> float | None:
    """Where a run sits on the Mix-LN alpha sweep, or None when its placement is not on it."""
    p = PLACEMENTS.get(norm)
    if p is None:
        return None
    return float(alpha) if p.has_alpha else p.sweep_alpha
