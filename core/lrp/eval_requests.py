"""What MambaLRP's evaluations are asked, parsed once (the requests over a dataset split or a generated ground truth;
one explanation's requests and the tab's choices are in :mod:`core.lrp.requests`, whose conventions these follow).

    EvaluationRequest, LongRangeRequest    faithfulness + conservation / long range over a dataset split
    KeyTokenRequest                        the key-token ground truth over seeds
    AgreementRequest                       the subject-verb agreement ground truth on a language model
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import BadInputError
from core.lrp import inputs
from core.lrp.key_token import KEY_TOKEN_FAMILIES, KEY_TOKEN_MODEL, KEY_TOKEN_SEEDS, KEY_TOKEN_VERSION
from core.lrp.methods import method_names
from core.lrp.requests import AGREEMENT_N, MAX_EVAL_SAMPLES, method_options, model_name, whole
from core.lrp.retention import VERSION as RETENTION_VERSION
from core.lrp.samples import DEFAULT_DATASETS, LONG_RANGE_TOKENS, TARGETS, capped_note, samples_and_gold, task_kind

# ---- over a dataset split -------------------------------------------------------------------------------------------
N_FIX = "Enter e.g. N = 50 (-n 100)."


@dataclass(frozen=True, kw_only=True)
class DatasetRequest:
    """``n`` samples of a model's split (a seeded random subset), explained by each method with its options."""

    model: str
    dataset: str
    split: str
    n: int  # at most the usable samples of the split (``notice`` says when fewer than asked)
    seed: int
    target: str  # "predicted" or "gold"
    methods: list[str]
    options: dict  # per method, the fast options updated with the asked ones
    cache: bool  # read / write the results cache (complete results only)
    loaded: Any = field(compare=False, repr=False)
    samples: list = field(compare=False, repr=False)
    gold: list = field(compare=False, repr=False)
    notice: str = ""

    @staticmethod
    def _common(model, n, methods, dataset, split, seed, target, options, cache, max_tokens=None,
                kinds=None) -> dict:
        n = whole(n, "N (samples)", N_FIX)
        names = method_names(methods, empty_means_all=methods is None)
        opts = method_options(names, options)
        if target not in TARGETS:
            raise BadInputError(f"target must be one of {', '.join(TARGETS)}, got {target!r}.")
        name = model_name(model)
        loaded = inputs.load(name)
        kind = task_kind(loaded)
        if kinds is not None and kind not in kinds:
            raise BadInputError(f"long-range explains next-token prediction; {name} is not a language model.",
                                fix="Use --model mamba-lm.")
        dataset = dataset or DEFAULT_DATASETS[kind]
        samples, gold = samples_and_gold(loaded, dataset, split, n, seed, target, max_tokens)
        return {"model": name, "dataset": dataset, "split": split, "n": min(n, len(samples)), "seed": seed,
                "target": target, "methods": names, "options": opts, "cache": bool(cache), "loaded": loaded,
                "samples": samples, "gold": gold, "notice": capped_note(n, len(samples), dataset, split)}

    def _params(self) -> dict:
        return {"dataset": self.dataset, "split": self.split, "n": self.n, "seed": self.seed, "target": self.target,
                "methods": self.methods, "options": self.options}

    def _passes(self) -> int:
        """Passes (a forward pass each; an explanation is a forward and a backward: 3) per sample and method."""
        return 3

    def price(self):
        """What the evaluation costs (:mod:`core.budget`): ``n`` samples of at most ``max_tokens`` tokens (or
        :data:`core.budget.SAMPLE_TOKENS`), each explained by each method and perturbed as :meth:`_passes` says."""
        from core.budget import SAMPLE_TOKENS, Price, model_flops

        params = sum(p.numel() for p in self.loaded.model.parameters())
        tokens = self.n * getattr(self, "max_tokens", SAMPLE_TOKENS) * len(self.methods) * self._passes()
        return Price(model_flops(params, tokens), f"{self.n:,} samples x {len(self.methods)} methods x "
                     f"{self._passes()} passes of {self.model} ({params / 1e6:.1f} M parameters)",
                     fix="fewer samples (N), flip steps or methods.")


@dataclass(frozen=True, kw_only=True)
class EvaluationRequest(DatasetRequest):
    """Faithfulness (MoRF / LeRF flip curves in ``steps`` steps, ``baseline`` embedding) and conservation."""

    steps: int
    baseline: str  # "zero" or "mean"
    faithfulness: bool  # False: conservation only (faster)
    retention: bool = True  # with faithfulness: also pi-Soft-NC / NS at equal retention (core.lrp.retention)

    @classmethod
    def parse(cls, model, n, steps, methods, *, faithfulness: bool = True, dataset=None, split="test", seed=0,
              target="predicted", baseline="zero", options=None, cache=True, retention: bool = True
              ) -> "EvaluationRequest":
        steps = whole(steps, "K (flip steps)", "Enter e.g. K = 10 (--steps 10).")
        if baseline not in ("zero", "mean"):
            raise BadInputError(f"Unknown baseline {baseline!r}.", fix="Use zero or mean.")
        common = cls._common(model, n, methods, dataset, split, seed, target, options, cache)
        return cls(**common, steps=steps, baseline=baseline, faithfulness=bool(faithfulness),
                   retention=bool(faithfulness) and bool(retention))

    def key(self):
        params = {**self._params(), "steps": self.steps, "baseline": self.baseline, "faithfulness": self.faithfulness}
        if self.retention:  # the protocol's version: a result without it (or of another version) is not reused
            params["retention"] = RETENTION_VERSION
        return self.model, self.loaded.fingerprint, params

    def _passes(self) -> int:
        return 3 + (2 * (self.steps + 1) if self.faithfulness else 0)  # MoRF and LeRF: a forward per flip step


@dataclass(frozen=True, kw_only=True)
class LongRangeRequest(DatasetRequest):
    """Where a language model's next-token relevance lies: each method's top-``k`` tokens in contexts of exactly
    ``max_tokens`` tokens."""

    k: int
    max_tokens: int

    @classmethod
    def parse(cls, model, n, methods, k, *, max_tokens=LONG_RANGE_TOKENS, dataset=None, split="test", seed=0,
              target="predicted", options=None, cache=True) -> "LongRangeRequest":
        k = whole(k, "k", "Use e.g. --k 10.")
        max_tokens = whole(max_tokens, "max_tokens", "Use e.g. --max-tokens 128.", low=2)
        common = cls._common(model, n, methods, dataset, split, seed, target, options, cache, max_tokens,
                             kinds=("causal-lm",))
        return cls(**common, k=k, max_tokens=max_tokens)

    def key(self):
        return self.model, self.loaded.fingerprint, {**self._params(), "k": self.k, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class KeyTokenRequest:
    """The ground truth over ``seeds`` seeds (``seed``, ``seed + 1``, ...): per seed a classifier trained on the
    key-token task and ``n`` fresh sequences; a hit: the planted key among a method's top-``k`` tokens. ``family``:
    the classifier's backbone (``mamba``, the paper's; ``mamba2``; ``hybrid``)."""

    n: int
    methods: list[str]
    k: int
    seed: int
    seeds: int
    options: dict
    cache: bool = True
    family: str = "mamba"
    notice = ""

    @classmethod
    def parse(cls, n, methods, k, *, seed=0, seeds=KEY_TOKEN_SEEDS, options=None, cache=True,
              family="mamba") -> "KeyTokenRequest":
        n = whole(n, "n", "Use e.g. -n 100.")
        k = whole(k, "k", "Use e.g. --k 1.")
        seeds = whole(seeds, "seeds", "use e.g. 5 seeds (the committed result).", high=50)
        if family not in KEY_TOKEN_FAMILIES:
            raise BadInputError(f"Unknown family {family!r}.", fix=f"Use one of: {', '.join(KEY_TOKEN_FAMILIES)}.")
        names = method_names(methods, empty_means_all=methods is None)
        return cls(n, names, k, seed, seeds, method_options(names, options), bool(cache), family)

    @property
    def model_name(self) -> str:
        """What the result is filed under: ``key-token`` (Mamba-1), ``key-token-mamba2``, ``key-token-hybrid``."""
        return "key-token" if self.family == "mamba" else f"key-token-{self.family}"

    def price(self):
        """What it costs (:mod:`core.budget`): per seed, the classifier's training and ``n`` sequences explained by
        each method, on the small backbone of :data:`core.lrp.key_token.KEY_TOKEN_MODEL`."""
        from core.budget import Price, model_flops
        from core.lrp.key_token import KEY_TOKEN_MODEL as m

        h, layers, e = m["hidden_size"], m["num_hidden_layers"], m["expand"]
        params = m["vocab_size"] * h + layers * 4 * e * h * h
        train = m["steps"] * m["batch_size"] * m["length"]
        explained = self.n * len(self.methods) * 3 * m["length"]
        return Price(self.seeds * (model_flops(params, train, backward=True) + model_flops(params, explained)),
                     f"{self.seeds} seeds x ({m['steps']} training steps + {self.n:,} sequences x "
                     f"{len(self.methods)} methods)", fix="fewer sequences (n), seeds or methods.")

    def key(self):
        params = {"n": self.n, "k": self.k, "seed": self.seed, "methods": self.methods, "options": self.options,
                  "model": KEY_TOKEN_MODEL, "version": KEY_TOKEN_VERSION, "seeds": self.seeds}
        if self.family != "mamba":
            params["family"] = self.family
        return self.model_name, f"{self.model_name}-{self.seed}", params


@dataclass(frozen=True)
class AgreementRequest:
    """The subject-verb agreement ground truth on a language model (:mod:`core.lrp.agreement`): ``n`` generated
    sentences (seeded), the ones the model gets right explained by each method for the agreeing verb."""

    model: str
    n: int
    seed: int
    methods: list[str]
    options: dict
    cache: bool = True
    loaded: Any = field(default=None, compare=False, repr=False)
    notice = ""

    @classmethod
    def parse(cls, model, n=AGREEMENT_N, methods=None, *, seed=0, options=None, cache=True) -> "AgreementRequest":
        n = whole(n, "n (sentences)", "Use e.g. -n 300.", high=MAX_EVAL_SAMPLES * 10)
        seed = whole(seed, "seed", "Use e.g. --seed 0.", low=0)
        names = method_names(methods, empty_means_all=methods is None)
        name = model_name(model)
        loaded = inputs.load(name)
        if task_kind(loaded) != "causal-lm":
            raise BadInputError(f"The agreement ground truth explains a language model's next token; {name} is not "
                                "a language model.", fix="Use --model mamba-lm (or another causal LM).")
        return cls(name, n, seed, names, method_options(names, options), bool(cache), loaded)

    def price(self):
        """What it costs (:mod:`core.budget`): each of ``n`` short sentences (about 24 tokens) read once, and each
        explained by every method, a method costing up to 16 forward and backward passes (SmoothGrad, IG)."""
        from core.budget import Price, model_flops

        params = sum(p.numel() for p in self.loaded.model.parameters())
        tokens = self.n * 24 * (1 + 16 * len(self.methods))
        return Price(model_flops(params, tokens, backward=True), f"{self.n:,} sentences x {len(self.methods)} methods "
                     f"of {self.model} ({params / 1e6:.1f} M parameters)", fix="fewer sentences (n) or methods.")

    def key(self):
        from core.lrp.agreement import AGREEMENT_VERSION

        return self.model, self.loaded.fingerprint, {"n": self.n, "seed": self.seed, "methods": self.methods,
                                                     "options": self.options, "version": AGREEMENT_VERSION}
