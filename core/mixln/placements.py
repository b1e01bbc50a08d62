"""The one registry of norm placements: name -> what every view needs (label, colour, formula, alpha).

The placement's computation is :class:`core.mixln.model.DecoderLayer` (and ``MixLNConfig.layer_norms``); a new
placement is one entry here plus its branch there. Views (the tab's radio, the CLI's ``--norm``, chart colours and
legends, the comparison and alpha-sweep tables) list placements from :data:`PLACEMENTS`.

An entry may be a variant of another placement's layers with other constants (``norm`` and ``model``): DeepNorm with
DeepNet's own formula is ``norm="deepnorm"`` with ``deepnorm_formula="deepnet"``. A run records the model's
``norm`` and config; :func:`placement_of` finds its entry from both, so the two DeepNorms are told apart everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from core.figures import PALETTE


@dataclass(frozen=True)
class Placement:
    """One norm placement.

    Attributes
    ----------
    label : how tables and legends name it.
    colour : its line / bar colour (Okabe-Ito, then Paul Tol's muted scheme).
    formula : one decoder layer, N an RMSNorm and F the attention or the MLP.
    origin : where it comes from.
    default_alpha : the alpha a run of it records (Mix-LN: the paper's 0.25).
    has_alpha : alpha picks how many early layers are Post-LN (Mix-LN only).
    sweep_alpha : the Mix-LN alpha it equals layer for layer (Pre-LN 0, Post-LN 1); None: not on the alpha sweep
        unless ``has_alpha``.
    norm : the model's ``MixLNConfig.norm`` of this entry; "" means the entry's own name.
    model : the ``MixLNConfig`` fields this entry sets (a variant's constants), as (name, value) pairs.
    """

    label: str
    colour: str
    formula: str
    origin: str = ""
    default_alpha: float = 0.0
    has_alpha: bool = False
    sweep_alpha: float | None = None
    norm: str = ""
    model: tuple[tuple[str, object], ...] = field(default=())


PLACEMENTS: dict[str, Placement] = {
    "pre": Placement("Pre-LN", "#0072B2", "x + F(N(x))", "LLaMA, GPT-2", 0.0, sweep_alpha=0.0),
    "post": Placement("Post-LN", "#D55E00", "N(x + F(x))", "the original Transformer, BERT", 1.0, sweep_alpha=1.0),
    "mix": Placement("Mix-LN", "#009E73", "Post-LN in the first floor(alpha * L) layers, Pre-LN in the rest",
                     "Li, Yin and Liu (2024)", 0.25, has_alpha=True),
    "deepnorm": Placement("DeepNorm (Mix-LN authors' constants)", "#CC79A7",
                          "N(a * x + F(x)), a = 2√2 at every depth, branch init gain (8L)^(+1/4) "
                          "(the Mix-LN authors' NORM_TYPE=deeppost)",
                          "DeepNet (Wang et al., 2022), as the Mix-LN code sets it", 1.0,
                          model=(("deepnorm_formula", "mixln"),)),
    "deepnet": Placement("DeepNorm (DeepNet's formula)", "#882255",
                         "N(a * x + F(x)), a = (2L)^(1/4), branch init gain (8L)^(-1/4)",
                         "DeepNet (Wang et al., 2022), decoder-only formula", 1.0,
                         norm="deepnorm", model=(("deepnorm_formula", "deepnet"),)),
    "sandwich": Placement("Sandwich-LN", "#000000", "x + N(F(N(x)))", "CogView, Gemma 2", 0.0),
    "peri": Placement("Peri-LN", "#999933", "x + N(F(N(x))) in every layer, and N on the embedding output",
                      "Kim et al. (2025), as in Gemma 2/3 and OLMo 2", 0.0),
    "lns": Placement("LayerNorm Scaling", "#332288", "x + F(N(x) / sqrt(l)), l = 1 for the first layer",
                     "Sun et al. (2025), The Curse of Depth in LLMs", 0.0),
}
# Mix-LN runs with another alpha than the paper's get their own colour (the paper's 0.25 keeps Mix-LN's); no two
# committed runs share a colour (Sandwich-LN is black, Mix-LN 0.5 orange).
MIX_ALPHA_COLOURS = {0.0: "#0072B2", 0.125: "#56B4E9", 0.25: "#009E73", 0.5: "#E69F00", 1.0: "#D55E00"}
def model_norms() -> tuple[str, ...]:
    """The norms a model knows (``MixLNConfig.norm``): every entry's own name unless it is a variant of another's
    layers (read from the registry when asked, so an entry added later is known too)."""
    return tuple(dict.fromkeys(p.norm or name for name, p in PLACEMENTS.items()))


MODEL_NORMS = model_norms()


def placement_of(norm: str, model: dict | None = None) -> str:
    """The registry name of a run of model norm ``norm`` with config ``model`` (a dict of MixLNConfig fields):
    the variant whose constants the config has, else ``norm`` itself (also an unknown name, unchanged)."""
    if norm in PLACEMENTS and not PLACEMENTS[norm].norm and model is None:
        return norm
    model = model or {}
    for name, p in PLACEMENTS.items():
        if (p.norm or name) == norm and p.model and all(model.get(k, _default(k)) == v for k, v in p.model):
            return name
    return norm


# the defaults of the MixLNConfig fields a placement variant sets (MixLNConfig declares its defaults from here: one
# source, and no import of the config, which imports this registry)
MODEL_DEFAULTS = {"deepnorm_formula": "mixln"}


def _default(field_name: str):
    return MODEL_DEFAULTS[field_name]


def placement_model(name: str) -> tuple[str, dict]:
    """(the model's norm, the config fields it sets) of registry entry ``name``: a variant sets its constants
    (``deepnet`` -> (``deepnorm``, {deepnorm_formula: deepnet})); a model norm (``deepnorm``) sets none, so the
    config's own fields stand (``--norm deepnorm --deepnorm-formula deepnet`` is the ``deepnet`` entry too); an
    unknown name comes back unchanged with no fields."""
    p = PLACEMENTS.get(name)
    if p is None or not p.norm:
        return name, {}
    return p.norm, dict(p.model)


def placement_choices() -> list[tuple[str, str]]:
    """``(label, name)`` of every placement, for radios and help texts."""
    return [(p.label, name) for name, p in PLACEMENTS.items()]


def placement_label(norm: str, alpha: float | None = None, model: dict | None = None) -> str:
    """``Pre-LN``, or ``Mix-LN (alpha 0.25)`` for a placement with an alpha; ``model`` (a run's config) tells the
    variants of one norm apart (DeepNorm with the authors' constants or DeepNet's formula)."""
    p = PLACEMENTS.get(placement_of(norm, model))
    if p is None:
        return norm
    return f"{p.label} (alpha {alpha:g})" if p.has_alpha and alpha is not None else p.label


def placement_colour(norm: str, alpha: float | None = None, index: int = 0, model: dict | None = None) -> str:
    """The colour of a run of ``norm`` (with ``alpha``); a Mix-LN alpha other than 0.25 gets its own."""
    p = PLACEMENTS.get(placement_of(norm, model))
    if p is not None and p.has_alpha and alpha in MIX_ALPHA_COLOURS and alpha != p.default_alpha:
        return MIX_ALPHA_COLOURS[alpha]
    return p.colour if p is not None else PALETTE[index % len(PALETTE)]


def sweep_alpha(norm: str, alpha: float) -> float | None:
    """Where a run sits on the Mix-LN alpha sweep, or None when its placement is not on it."""
    p = PLACEMENTS.get(norm)
    if p is None:
        return None
    return float(alpha) if p.has_alpha else p.sweep_alpha
