"""What each MambaLRP action is asked, parsed once: the raw inputs of the tab, the CLI or a notebook become one frozen
request with every value checked (or one :class:`BadInputError` naming the fix), and the choices and defaults the
tab offers live here too.

    TextRequest, ImageRequest              an explanation of one text / one image, per method
    FlowRequest                            where one text's MambaLRP relevance passes: layer by layer, by kind
    CompareRequest                         one text on two models side by side (a transformer beside an SSM)
    (the requests over a dataset split, evaluations and ground truths: :mod:`core.lrp.eval_requests`)
    TrainRequest                           training an embedded model with its recipe

Each has ``parse(**raw) -> request``, ``key() -> (model name, fingerprint, params)`` (what the result is looked up and
cached under; None when it is not cached) and ``notice`` (said through the progress before any work, or "").
``rules`` are the switches of MambaLRP's rules (the paper's ablation, :data:`TOGGLES`) as keyword arguments of
:meth:`core.lrp.LRPRules.from_toggles`; the target is a class index or token id, None or :data:`TOP` for the top
prediction (whether it is in range is checked where the model's outputs are known, in :func:`core.lrp.explain`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import BadInputError
from core.lrp import inputs
from core.lrp.methods import METHODS, method_names
from core.lrp.rules import GAMMA_LAYERS, LRPRules

# ---- the choices and defaults of the tab and the CLI ------------------------------------------------------------
TEXT_MODELS = ("mamba-sentiment", "mamba-lm", "mamba2-sentiment", "hybrid-sentiment", "smollm2-135m",
               "mathneuro-tiny")  # every text model of the zoo with a rule (the last two: Llamas, AttnLRP)
IMAGE_MODELS = ("vision-mamba-mnist",)
EVAL_MODELS = ("mamba-sentiment", "vision-mamba-mnist", "mamba2-sentiment", "hybrid-sentiment")
FLOW_MODELS = ("hybrid-sentiment", "smollm2-135m", "mamba2-sentiment", "mamba-sentiment")  # the layer-type view
COMPARE_MODELS = ("smollm2-135m", "mamba-lm")  # the side-by-side view's pair: a transformer beside an SSM
DEFAULT_METHODS = ("mambalrp", "gradient_x_input", "integrated_gradients", "mamba_attr")
MAX_TOKENS, MAX_TEXT_CHARS = inputs.MAX_TOKENS, inputs.MAX_TEXT_CHARS
TOP = -1  # the target choice "top prediction" (as None)
RULE_SWITCHES = {"silu": "SiLU: identity rule", "ssm": "SSM: A, B, C, Δ as constants", "gate": "Gate: half rule",
                 "norm": "RMSNorm: LN-rule"}  # MambaLRP's rules a user switches off (the paper's ablation)
TOGGLES = (*RULE_SWITCHES, "gamma", "gamma_layers")  # LRPRules.from_toggles' switches
TEXT_EXAMPLES = {
    "mamba-sentiment": ["A gorgeous, witty and seductive movie.",
                        "The plot is predictable and the acting is painfully flat.",
                        "It is not a bad film, but the ending is a complete mess."],
    "mamba-lm": ["He was born in the city of", "The function returns a list of",
                 "the acting is good but the story is"],
    "mamba2-sentiment": ["A gorgeous, witty and seductive movie.",
                         "It is not a bad film, but the ending is a complete mess."],
    "hybrid-sentiment": ["A gorgeous, witty and seductive movie.",
                         "It is not a bad film, but the ending is a complete mess."],
    "smollm2-135m": ["The capital of France is", "She opened the door and saw that the room was"],
}
FLOW_EXAMPLES = {"hybrid-sentiment": ["It is not a bad film, but the ending is a complete mess.",
                                      "A gorgeous, witty and seductive movie."],
                 "smollm2-135m": ["The capital of France is"]}
COMPARE_EXAMPLES = {COMPARE_MODELS: ["He was born in the city of", "The function returns a list of"]}
COMPARE_VERSION = 1  # of a side-by-side result's key
FLOW_VERSION = 3  # of a layer-flow result's key (2: each block its own input alias; 3: its short name)
IMAGE_SAMPLES = (0, 1, 2, 3)  # indices into the mnist-5k test split
EVAL_N, EVAL_STEPS = 100, 10  # an evaluation's samples and flip steps unless asked otherwise
AGREEMENT_N = 300  # generated sentences of the agreement ground truth unless asked otherwise
MAX_EVAL_SAMPLES, MAX_FLIP_STEPS = 1000, 100  # the app's evaluation bounds (the test splits hold <= 1,057 samples)


def recipe_names() -> list[str]:
    """The recipes ``lrp train`` offers (:data:`core.lrp.recipes.RECIPES`, imported when asked)."""
    from core.lrp.recipes import RECIPES

    return list(RECIPES)


def method_choices() -> list[tuple[str, str]]:
    """``(label, name)`` of every registered method, for checkboxes and the CLI help."""
    return [(m.label, name) for name, m in METHODS.items()]


# ---- single values ----------------------------------------------------------------------------------------------
def whole(value, what: str, fix: str, low: int = 1, high: int | None = None) -> int:
    """``value`` as a whole number from ``low`` (to ``high``); an integral float counts, a bool or blank does not."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or \
            (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        raise BadInputError(f"{what} must be a whole number {span}, got {value!r}.", fix=fix)
    return int(value)


def model_name(ref) -> str:
    if not ref or not str(ref).strip():
        raise BadInputError("No model chosen.", fix="Pick mamba-sentiment, mamba-lm or vision-mamba-mnist.")
    return str(ref).strip()


def _target(raw) -> int | None:
    """The explained class index / token id; None (the top prediction) for None, "" and :data:`TOP`."""
    if raw is None or raw == "" or raw == TOP or raw == str(TOP):
        return None
    try:
        target = int(raw)
        if isinstance(raw, bool) or (isinstance(raw, float) and raw != target):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise BadInputError(f"The target must be a class index or token id, got {raw!r}.") from None
    return target


def _toggles(rules) -> dict:
    """The rule switches that differ from the defaults, checked (the cache key); ``{}`` is MambaLRP as published."""
    rules = dict(rules or {})
    unknown = sorted(set(rules) - set(TOGGLES))
    if unknown:
        raise BadInputError(f"Unknown rule(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(TOGGLES)}.")
    LRPRules.from_toggles(**rules)  # validates gamma and the layers
    out = {k: False for k in RULE_SWITCHES if k in rules and not rules[k]}
    if rules.get("gamma") not in (None, ""):
        out["gamma"] = float(rules["gamma"])
        out["gamma_layers"] = sorted(set(rules.get("gamma_layers", GAMMA_LAYERS) or []))
    return out


def method_options(methods: list[str], options: dict | None) -> dict:
    """Each method's fast options (the registry's, chosen for CPU speed) updated with ``options``."""
    out = {m: dict(METHODS[m].fast_options) for m in methods}
    for m, o in (options or {}).items():
        if m not in METHODS:
            raise BadInputError(f"Options given for unknown method {m!r}.", fix=f"Use: {', '.join(METHODS)}.")
        if m in out:
            out[m].update(o)
    return out


def _fingerprint(model: str) -> str:
    from core.zoo import fingerprint
    return fingerprint(model)


# ---- one explanation ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TextRequest:
    """Relevance of every token of ``text`` for the model's prediction (or ``target``), per method."""

    model: str
    text: str  # cut to MAX_TEXT_CHARS characters (which end depends on the model), as stored and hashed
    methods: list[str]
    target: int | None
    rules: dict
    cut: str = ""  # what cutting the text did, or ""
    notice = ""

    @classmethod
    def parse(cls, model, text, methods, target, rules) -> "TextRequest":
        model, methods = model_name(model), method_names(methods, empty_means_all=False)
        rules, target = _toggles(rules), _target(target)
        if not isinstance(text, str) or not text.strip():
            raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
        cut = ""
        if len(text) > MAX_TEXT_CHARS:  # cut before it is hashed, stored or tokenized
            text, cut = inputs.cut_text(inputs.load(model), text)
        return cls(model, text, methods, target, rules, cut)

    def key(self):
        return self.model, _fingerprint(self.model), {
            "text": self.text, "methods": self.methods, "target": self.target, "rules": self.rules,
            "max_tokens": MAX_TOKENS, "options": {m: METHODS[m].options for m in self.methods if m != "mambalrp"}}


@dataclass(frozen=True)
class ImageRequest:
    """Relevance of every patch for the model's prediction (or ``target``), per method: an uploaded ``image`` (made an
    MNIST-like digit) wins over ``sample`` (an mnist-5k test index)."""

    model: str
    source: dict  # {"image": digest of the pixels} or {"sample": index}
    methods: list[str]
    target: int | None
    rules: dict
    pixels: Any = field(default=None, compare=False, repr=False)  # (28, 28) float32 of an upload
    note: str = ""  # what preparing the upload did
    notice = ""

    @classmethod
    def parse(cls, model, image, sample, methods, target, rules) -> "ImageRequest":
        from core.runner import digest

        model, methods = model_name(model), method_names(methods, empty_means_all=False)
        rules, target = _toggles(rules), _target(target)
        pixels, note = None, ""
        if image is not None:
            loaded = inputs.load_vision(model)
            pixels, note = inputs.prepare_image(image, loaded.model.config.image_size)
            source = {"image": digest(pixels.round(6).tolist())}
        elif sample is not None:
            try:
                source = {"sample": int(sample)}
            except (TypeError, ValueError):
                raise BadInputError(f"Sample must be a number, got {sample!r}.") from None
        else:
            raise BadInputError("No image.", fix="Upload an image or pick a test sample.")
        return cls(model, source, methods, target, rules, pixels, note)

    def key(self):
        return self.model, _fingerprint(self.model), {
            **self.source, "methods": self.methods, "target": self.target, "rules": self.rules,
            "options": {m: METHODS[m].options for m in self.methods if m != "mambalrp"}}


@dataclass(frozen=True)
class FlowRequest:
    """Where the MambaLRP relevance of one text passes: each block's (SSM mixer, attention layer, MLP) relevance at its
    input and output per token, and what biases and softmaxes absorb (:func:`core.lrp.flow.relevance_flow`)."""

    model: str
    text: str
    target: int | None
    cut: str = ""
    notice = ""

    @classmethod
    def parse(cls, model, text, target=None) -> "FlowRequest":
        model, target = model_name(model), _target(target)
        if not isinstance(text, str) or not text.strip():
            raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
        cut = ""
        if len(text) > MAX_TEXT_CHARS:
            text, cut = inputs.cut_text(inputs.load(model), text)
        return cls(model, text, target, cut)

    def key(self):
        return self.model, _fingerprint(self.model), {"text": self.text, "target": self.target,
                                                      "max_tokens": MAX_TOKENS, "version": FLOW_VERSION}


@dataclass(frozen=True)
class CompareRequest:
    """One text explained on two models (each its own top prediction) with one method, side by side
    (:func:`core.lrp.compare.compare`)."""

    models: tuple[str, str]
    text: str
    method: str
    notice = ""

    @classmethod
    def parse(cls, models, text, method="mambalrp") -> "CompareRequest":
        if isinstance(models, str):
            models = [m for m in models.split(",") if m.strip()]
        names = tuple(model_name(m) for m in (models or ()))
        if len(names) != 2 or names[0] == names[1]:
            raise BadInputError(f"The side-by-side view takes two different models, got {len(names)}: "
                                f"{', '.join(names) or 'none'}.", fix="E.g. smollm2-135m and mamba-lm.")
        methods = method_names([method] if isinstance(method, str) else method, empty_means_all=False)
        if len(methods) != 1:
            raise BadInputError(f"The side-by-side view shows one method, got {', '.join(methods)}.",
                                fix="Pick one, e.g. mambalrp.")
        if not isinstance(text, str) or not text.strip():
            raise BadInputError("The text is empty.", fix="Type a sentence or pick an example.")
        if len(text) > MAX_TEXT_CHARS:  # (a model that is not a text model is refused when it tokenizes)
            raise BadInputError(f"The text has {len(text):,} characters; the side-by-side view takes at most "
                                f"{MAX_TEXT_CHARS:,}.", fix="Shorten it: both models read all of it.")
        return cls(names, text, methods[0])

    def key(self):
        return "+".join(self.models), "+".join(_fingerprint(m) for m in self.models), {
            "text": self.text, "method": self.method, "max_tokens": MAX_TOKENS, "version": COMPARE_VERSION,
            "options": METHODS[self.method].options}


# ---- training ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainRequest:
    """One embedded model trained with its recipe (``lm``, ``sentiment``, ``vision``) into ``out``."""

    recipe: str
    seed: int
    quick: bool
    out: str | None
    init_from: str | None
    epochs: int | None
    threads: int
    notice = ""

    @classmethod
    def parse(cls, recipe, seed, quick, out, init_from, epochs, threads) -> "TrainRequest":
        from core.checks import check_threads
        from core.lrp import recipes

        if recipe not in recipes.RECIPES:
            raise BadInputError(f"unknown recipe {recipe!r}.", fix=f"use one of {', '.join(recipes.RECIPES)}.")
        check_threads(threads)
        if init_from is not None and recipe != "sentiment":
            raise BadInputError("--init-from applies to the sentiment recipe only.")
        if epochs is not None and (recipe == "lm" or epochs < 1):
            raise BadInputError("--epochs must be >= 1 and applies to the sentiment and vision recipes.")
        return cls(recipe, seed, bool(quick), out, init_from, epochs, threads)

    @property
    def command(self) -> str:
        """The command that reproduces the run (the card records it)."""
        command = f"python -m core lrp train {self.recipe} --seed {self.seed}" + (" --quick" if self.quick else "")
        if self.init_from is not None:
            command += f" --init-from {self.init_from}"
        if self.epochs is not None:
            command += f" --epochs {self.epochs}"
        if self.threads != 2:  # float sums, hence the weights, depend on the thread count
            command += f" --threads {self.threads}"
        return command

    def key(self):
        return None  # a training run writes a model folder; it is never looked up
