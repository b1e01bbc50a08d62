"""What each Mix-LN action takes: one frozen dataclass per kind of request, parsed once from the raw inputs (the tab's
widget values, the CLI's arguments, a notebook's call) by its ``parse``, which raises one
:class:`core.errors.BadInputError` per bad input. The choices and defaults here are what the tab and the CLI offer.

- :class:`RunsRequest`        committed runs by name (loss curves)
- :class:`GradnormsRequest`   committed runs, which gradient norm, the step shown
- :class:`CompareRequest`     placements and run sets of the comparison
- :class:`CurvesRequest`      placements, run set and metric of the seed curves
- :class:`DepthRequest`       placements of the depth profiles
- :class:`NoInput`            actions without inputs (alpha sweep, learning-rate sweep)
- :class:`AngularRequest`, :class:`RemovalRequest`, :class:`ModelGradnormsRequest`  diagnostics of a run or a model
- :class:`LiveRequest`        the tab's live run
- :class:`ReferenceRequest`, :class:`TrainRequest`, :class:`ReproduceRequest`  the reference levels, training
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.checks import check_number
from core.errors import BadInputError
from core.mixln.folders import fingerprint_of, resolve_run, run_name
from core.mixln.placements import PLACEMENTS
from core.mixln.recipe import ASSETS, LIVE_MODEL, LIVE_TRAIN, RUN_SETS, Job, recipe_jobs

DEFAULT_RUNS = ("pre-ln", "post-ln", "mix-ln-0.25")
GRADIENT_KINDS = {"param": "parameter gradients", "input": "gradient at the layer input"}
CURVE_SETS = tuple(name for name, s in RUN_SETS.items() if len(s.seeds) > 1)  # run sets with seeds to spread over
METRICS = ("loss", "perplexity")
POSITIONS = {"last": "the last token's states (the paper)", "mean": "the mean over all tokens"}
TEXT_CORPUS = "wikipedia-paragraphs"  # the held-out text a model from the zoo is diagnosed on
# what a committed run is diagnosed on: its own held-out windows (the validation paragraphs of Wikipedia, OpenWebText
# and the Python docs, in that order), RUN_SAMPLES of them spread evenly (core.mixln.folders.sample_windows)
RUN_WINDOWS = "held-out stream of wikipedia, openwebtext and pydoc, windows spread evenly"
RUN_SAMPLES = 64    # windows of 64 tokens per diagnostic of a run (4,032 targets): small models, seconds
MODEL_SAMPLES = 8   # ... of a model from the picker (a 135 M model skips each of its 30 layers in turn)


def set_choices() -> list[tuple[str, str]]:
    """``(label, name)`` of the run sets that have seed curves: ``("12 layers", "main")``, ... (a set's ``choice``,
    else its layer count: no two labels are the same)."""
    return [(RUN_SETS[s].choice or f"{RUN_SETS[s].model['num_layers']} layers", s) for s in CURVE_SETS]


def _names(names) -> tuple[str, ...]:
    names = [names] if isinstance(names, str) else list(names or [])
    if not names:
        raise BadInputError("no run chosen.", fix="tick at least one committed run.")
    return tuple(names)


def _some(names) -> tuple[str, ...] | None:
    """Placements to keep, or None for all of them."""
    return tuple(names) if names else None


def _alpha(alpha) -> float:
    try:
        return check_number(alpha, "alpha", 0.0, 1.0)
    except BadInputError:
        raise BadInputError(f"alpha = {alpha!r} is outside [0, 1].", fix="choose alpha between 0 (all Pre-LN) and 1 "
                            "(all Post-LN); the paper uses 0.25.") from None


def _sizes(samples, seq_len, run: Path | None = None) -> tuple[int, int]:
    """(samples, seq_len) as whole numbers in the diagnostics' ranges, or one clear message; ``samples=None`` is
    :data:`RUN_SAMPLES` for a run, :data:`MODEL_SAMPLES` for a model."""
    if samples is None:
        samples = RUN_SAMPLES if run is not None else MODEL_SAMPLES
    return (check_number(samples, "samples", 1, 256, whole=True), check_number(seq_len, "seq_len", 4, 2048, whole=True))


def _corpus(run: Path | None) -> str:
    """Where a diagnostic's windows come from (part of its cache key)."""
    return RUN_WINDOWS if run is not None else TEXT_CORPUS


def _subject(ref) -> tuple[str, Path | None]:
    """A committed run (by name), a run folder or a model reference: (the reference, its run folder or None)."""
    if not ref:
        raise BadInputError("no model or run chosen.", fix="pick a committed run or a model.")
    try:
        return str(ref), resolve_run(ref)
    except BadInputError:
        return str(ref), None


def _size(ref: str, run: Path | None) -> tuple[int, int]:
    """(parameters, decoder layers) of a diagnostic's subject, from its files (nothing loaded): a run folder, or a
    model of the zoo (a hub id is counted once loaded)."""
    import json

    from core.budget import model_parameters
    from core.zoo import resolve

    folder = run if run is not None else resolve(ref)[1]
    try:
        config = json.loads((Path(folder) / "config.json").read_text()) if folder is not None else {}
    except (OSError, ValueError):
        config = {}
    layers = int(config.get("num_hidden_layers") or config.get("num_layers") or 32)
    if run is not None:
        from core.zoo.safetensors_check import summarize

        return int(summarize(sorted(run.glob("*.safetensors")))["parameters"]), layers
    return model_parameters(ref), layers


def _diagnostic_price(subjects, samples: int, seq_len: int, passes, backward: bool = False):
    """The price (:mod:`core.budget`) of a diagnostic over ``subjects`` ((ref, run) pairs): ``passes(layers)``
    passes over ``samples`` windows of ``seq_len`` tokens each."""
    from core.budget import Price, model_flops

    flops, shown = 0.0, []
    for ref, run in subjects:
        params, layers = _size(ref, run)
        flops += passes(layers) * model_flops(params, samples * seq_len, backward=backward)
        shown.append(f"{ref} ({params / 1e6:.1f} M parameters)")
    return Price(flops, f"{samples} windows x {seq_len:,} tokens of {', '.join(shown)}",
                 fix="fewer samples or shorter windows (seq_len).")


@dataclass(frozen=True)
class NoInput:
    """An action without inputs."""

    @classmethod
    def parse(cls) -> "NoInput":
        return cls()


@dataclass(frozen=True)
class RunsRequest:
    """Committed runs by name (or run folders)."""

    runs: tuple[str, ...] = DEFAULT_RUNS

    @classmethod
    def parse(cls, names=DEFAULT_RUNS) -> "RunsRequest":
        return cls(_names(names))


@dataclass(frozen=True)
class GradnormsRequest:
    """Committed runs; ``kind`` a key of :data:`GRADIENT_KINDS`; ``step`` the logged step shown (None: the last)."""

    runs: tuple[str, ...] = DEFAULT_RUNS
    kind: str = "param"
    step: float | None = None

    @classmethod
    def parse(cls, names=DEFAULT_RUNS, kind: str = "param", step=None) -> "GradnormsRequest":
        runs = _names(names)
        if kind not in GRADIENT_KINDS:
            raise BadInputError(f"unknown gradient norm {kind!r}.", fix="use 'param' or 'input'.")
        return cls(runs, kind, None if step is None else check_number(step, "step"))


@dataclass(frozen=True)
class CompareRequest:
    """Placements (None: every run found) of the run sets ``sets``."""

    runs: tuple[str, ...] | None = None
    sets: tuple[str, ...] = ("main", "depth-24")

    @classmethod
    def parse(cls, names=None, sets=("main", "depth-24")) -> "CompareRequest":
        for s in sets:
            if s not in RUN_SETS:
                raise BadInputError(f"unknown run set {s!r}.", fix=f"use one of: {', '.join(RUN_SETS)}.")
        return cls(_some(names), tuple(sets))


@dataclass(frozen=True)
class CurvesRequest:
    """Placements (None: all) of one run set with seeds (:data:`CURVE_SETS`), ``metric`` one of :data:`METRICS`."""

    runs: tuple[str, ...] | None = None
    set_name: str = "main"
    metric: str = "loss"

    @classmethod
    def parse(cls, names=None, set_name: str = "main", metric: str = "loss") -> "CurvesRequest":
        if set_name not in CURVE_SETS:
            raise BadInputError(f"no seed curves for run set {set_name!r}.", fix="use main (12 layers) or depth-24.")
        if metric not in METRICS:
            raise BadInputError(f"unknown metric {metric!r}.", fix="use loss or perplexity.")
        return cls(_some(names), set_name, metric)


@dataclass(frozen=True)
class DepthRequest:
    """Placements (None: all) of the depth profiles."""

    runs: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, names=None) -> "DepthRequest":
        return cls(_some(names))


@dataclass(frozen=True)
class AngularRequest:
    """The angular-distance heatmap of ``ref`` (``run``: its run folder, None for a model) on ``samples`` held-out
    windows of ``seq_len`` tokens, comparing the states at ``position`` (a key of :data:`POSITIONS`)."""

    ref: str
    run: Path | None
    samples: int = RUN_SAMPLES
    seq_len: int = 64
    position: str = "last"

    @classmethod
    def parse(cls, ref, samples=None, seq_len=64, position: str = "last") -> "AngularRequest":
        ref, run = _subject(ref)
        samples, seq_len = _sizes(samples, seq_len, run)
        if position not in POSITIONS:
            raise BadInputError(f"unknown position {position!r}.",
                                fix="use 'last' (last token) or 'mean' (all tokens).")
        return cls(ref, run, samples, seq_len, position)

    @property
    def params(self) -> dict:
        return {"samples": self.samples, "seq_len": self.seq_len, "position": self.position,
                "corpus": _corpus(self.run)}

    def key(self) -> tuple[str, str, dict]:
        """(the run's or model's name, its weights' fingerprint, :attr:`params`): how the result is stored."""
        return run_name(self.run) if self.run is not None else self.ref, fingerprint_of(self.ref, self.run), self.params

    def price(self):
        return _diagnostic_price([(self.ref, self.run)], self.samples, self.seq_len, lambda layers: 1)


@dataclass(frozen=True)
class RemovalRequest:
    """Layer removal on each of ``refs`` (``runs``: their run folders, None for a model)."""

    refs: tuple[str, ...]
    runs: tuple[Path | None, ...]
    samples: int = RUN_SAMPLES
    seq_len: int = 64

    @classmethod
    def parse(cls, refs, samples=None, seq_len=64) -> "RemovalRequest":
        refs = _names(refs)
        subjects = [_subject(r) for r in refs]
        samples, seq_len = _sizes(samples, seq_len, subjects[0][1])
        return cls(tuple(r for r, _ in subjects), tuple(f for _, f in subjects), samples, seq_len)

    def params_of(self, run: Path | None) -> dict:
        """The parameters of one subject's result (its windows depend on whether it is a run)."""
        return {"samples": self.samples, "seq_len": self.seq_len, "corpus": _corpus(run)}

    @property
    def params(self) -> dict:
        return self.params_of(self.runs[0])

    def price(self):
        """Each subject's windows passed through the whole model, then once without each of its layers."""
        return _diagnostic_price(list(zip(self.refs, self.runs)), self.samples, self.seq_len, lambda layers: layers + 1)


@dataclass(frozen=True)
class ModelGradnormsRequest:
    """Per-layer gradient norms of one batch of ``samples`` held-out windows for ``ref`` at its current weights."""

    ref: str
    run: Path | None
    samples: int = 4
    seq_len: int = 64

    @classmethod
    def parse(cls, ref, samples=4, seq_len=64) -> "ModelGradnormsRequest":
        ref, run = _subject(ref)
        samples, seq_len = _sizes(samples, seq_len, run)
        return cls(ref, run, samples, seq_len)

    @property
    def params(self) -> dict:
        return {"samples": self.samples, "seq_len": self.seq_len, "corpus": _corpus(self.run)}

    def price(self):
        return _diagnostic_price([(self.ref, self.run)], self.samples, self.seq_len, lambda layers: 1, backward=True)


@dataclass(frozen=True)
class LiveRequest:
    """A small run trained now: norm ``placement`` (a key of the placement registry), Mix-LN ``alpha``, ``layers``
    and ``steps``; the defaults are what the tab starts with."""

    placement: str = "mix"
    alpha: float = PLACEMENTS["mix"].default_alpha
    layers: int = LIVE_MODEL["num_layers"]
    steps: int = LIVE_TRAIN["steps"]

    @classmethod
    def parse(cls, placement, alpha, layers, steps) -> "LiveRequest":
        alpha = _alpha(alpha)
        if placement not in PLACEMENTS:
            raise BadInputError(f"unknown norm placement {placement!r}.", fix=f"use one of: {', '.join(PLACEMENTS)}.")
        return cls(placement, alpha, check_number(layers, "layers", 1, 64, whole=True),
                   check_number(steps, "steps", 1, 100_000, whole=True))

    def price(self):
        """The run's training steps of :data:`LIVE_TRAIN`'s batch of windows, forward and backward, through
        :data:`LIVE_MODEL` cut to ``layers`` layers (:mod:`core.budget`; its evaluations are a few percent more)."""
        from core.budget import Price, model_flops

        m, t = LIVE_MODEL, LIVE_TRAIN
        h = m["hidden_size"]
        params = 2 * m["vocab_size"] * h + self.layers * (4 * h * h + 3 * h * m["intermediate_size"])
        tokens = self.steps * t["batch_size"] * t["seq_len"]
        return Price(1.1 * model_flops(params, tokens, backward=True),
                     f"{self.steps:,} steps x {t['batch_size']} x {t['seq_len']} tokens of a {self.layers}-layer model "
                     f"({params / 1e6:.1f} M parameters)", fix="fewer steps or layers.")


@dataclass(frozen=True)
class ReproducesRequest:
    """The "what reproduces" tables (no inputs: they read the committed runs; ``python tools/docs.py`` writes them into
    docs/mixln-reproduces.md and the README)."""

    @classmethod
    def parse(cls) -> "ReproducesRequest":
        return cls()


@dataclass(frozen=True)
class ReferenceRequest:
    """The unigram / bigram levels; ``write`` stores them in ``assets/mixln/reference.json``."""

    write: bool = False

    @classmethod
    def parse(cls, write: bool = False) -> "ReferenceRequest":
        return cls(bool(write))


@dataclass(frozen=True)
class TrainRequest:
    """One run trained into the folder ``out`` (or continued from ``resume``): see :func:`core.mixln.train_run`."""

    out: str | None
    placement: str = "mix"
    alpha: float = 0.25
    model_sizes: dict | None = None
    train_config: dict | None = None
    tokenizer: str | None = None
    resume: str | None = None
    checkpoint_every: int = 0

    @classmethod
    def parse(cls, out, placement: str = "mix", alpha: float = 0.25, model_sizes: dict | None = None,
              train_config: dict | None = None, tokenizer=None, resume=None, checkpoint_every: int = 0
              ) -> "TrainRequest":
        alpha = _alpha(alpha)
        if out is None and resume is None:
            raise BadInputError("no output folder given.", fix="pass --out DIR (or --resume DIR).")
        return cls(out, placement, alpha, model_sizes, train_config, tokenizer, resume, checkpoint_every)

    @property
    def folder(self) -> Path:
        return Path(self.out or self.resume)


@dataclass(frozen=True)
class ReproduceRequest:
    """The recipe runs to retrain into ``root`` (``jobs``: the chosen sets / placements / seeds)."""

    root: Path = ASSETS
    jobs: tuple[Job, ...] = field(default_factory=tuple)
    skip_done: bool = False

    @classmethod
    def parse(cls, root=None, names=None, sets=None, seeds=None, skip_done: bool = False) -> "ReproduceRequest":
        jobs = recipe_jobs(sets, names, seeds)  # unknown sets / placements -> BadInputError
        if not jobs:
            raise BadInputError("no run matches the chosen sets, placements and seeds.",
                                fix="see `python -m core mixln runs` for the run sets and their seeds.")
        return cls(Path(root) if root else ASSETS, tuple(jobs), bool(skip_done))
