"""The inputs of each NeuZip action, parsed once.

A tab passes its widgets' values, the CLI its arguments, Python its own: the action's request type turns them, with
:meth:`parse`, into one frozen request (each value in its type and checked: the model, ``k``, ``B``, the words...)
or one :class:`BadInputError` naming the input and the fix, before any model is loaded. A request's ``params()``
identify its result in the example store and the results cache. The choices and defaults a tab offers are here too.
"""
from __future__ import annotations

import os

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from core.checks import check_number
from core.errors import BadInputError
from core.neuzip.codec import BLOCK_SIZES, check_params
from core.neuzip.modules import SKIP
from core.neuzip.perplexity import DEFAULT_WINDOW, DEFAULT_WORDS
from core.neuzip.tradeoff import default_settings

__all__ = ["K_CHOICES", "BLOCK_SIZES", "NO_BLOCK", "DEFAULT_BLOCK", "MIN_WORDS", "MAX_WORDS", "DEFAULT_WORDS",
           "DEFAULT_WINDOW", "THROUGHPUT_NUMEL", "CACHE_VERSION", "HistogramsRequest", "TableRequest",
           "WeightsRequest", "TradeoffRequest", "ThroughputRequest", "DeviceMemoryRequest", "CompressRequest",
           "DecompressRequest", "ProcessMemoryRequest"]

K_CHOICES = (7, 3, 1, 0)  # mantissa bits kept, lossless first (kernels.neuzip_bits.MANTISSA_BITS)
NO_BLOCK = "none"  # how a widget or a link says: no block normaliser (B = None); 0 and "" say it too
DEFAULT_BLOCK = 128  # the normaliser block of the trade-off, the throughput and the example
MIN_WORDS, MAX_WORDS = 100, 10_000  # evaluation words of the trade-off (~1 min per setting per 2,000 words here)
THROUGHPUT_NUMEL = 4 * 1024 * 1024  # weights timed by default, at least (whole tensors: 5.3 M on SmolLM2)
CACHE_VERSION = 3  # of every stored NeuZip result; 2, 3: codec formats 2 and 3 (core.neuzip.pairs) changed the sizes


def parse_model(value) -> str:
    """The model reference (a registered name, a folder, a hub id), or "no model chosen"."""
    if not value or not str(value).strip():
        raise BadInputError("no model chosen.", fix="pick a model in the header")
    return str(value).strip()


def parse_k(value) -> int:
    """``k``, the mantissa bits kept: one of 7, 3, 1, 0 (an ``int`` or its text)."""
    try:
        k = check_number(value, "k", whole=True)
    except BadInputError:  # NaN, a fraction, a word: the codec's message names mantissa_bits and its choices
        k = value
    check_params(k, None)
    return k


def parse_block(value) -> int | None:
    """``B``, the normaliser block: ``None`` for no normaliser (None, ``"none"``, ``""``, 0), else a power of two
    from 32 to 1024 (an ``int`` or its text)."""
    if value is None or str(value).strip().lower() in (NO_BLOCK, "", "0"):
        return None
    b = check_number(value, "block size", whole=True)
    check_params(0, b)
    return b


def _lossy_block(k: int, b: int | None, lossless: str) -> int | None:
    """``B`` for ``k``: a lossless ``k = 7`` has no normaliser, so ``B`` is refused (``lossless="refuse"``) or left
    out (``"ignore"``: actions whose ``B`` input also serves ``k < 7``, as the tab's does)."""
    if k != 7 or b is None:
        return b
    if lossless == "ignore":
        return None
    raise BadInputError(f"B={b} with k=7: B applies to k < 7 only (the block normaliser is for lossy compression).",
                        fix="leave B out (none, --block-size 0) for k = 7, or pick k = 3, 1 or 0")


def _safetensors_path(value, what: str) -> Path:
    path = Path(value)
    if path.suffix.lower() != ".safetensors":
        raise BadInputError(f"{what} {value}: NeuZip writes .safetensors files.", fix="name it *.safetensors")
    if not path.parent.is_dir():
        raise BadInputError(f"{what} {value}: the folder {path.parent} does not exist.", fix="create it first")
    return path


@dataclass(frozen=True)
class HistogramsRequest:
    """The bit fields of a model's linear weights."""

    ref: str

    @classmethod
    def parse(cls, ref) -> "HistogramsRequest":
        return cls(parse_model(ref))

    def params(self) -> dict:
        return {"skip": list(SKIP), "version": CACHE_VERSION}

    def key(self) -> tuple[str, str, dict]:
        """(model name, the weights' fingerprint, :meth:`params`): how the result is stored and looked up."""
        return _key(self)


@dataclass(frozen=True)
class TableRequest:
    """Bits per weight of a model's linear weights at ``k`` (and ``B`` for ``k < 7``)."""

    ref: str
    k: int = 7
    block_size: int | None = None
    LOSSLESS_BLOCK: ClassVar[str] = "refuse"  # B with k = 7: see _lossy_block

    @classmethod
    def parse(cls, ref, k=7, block_size=None, **more):
        ref, k = parse_model(ref), parse_k(k)
        return cls(ref, k, _lossy_block(k, parse_block(block_size), cls.LOSSLESS_BLOCK), **more)

    def params(self) -> dict:
        return {"k": self.k, "block_size": self.block_size, "skip": list(SKIP), "version": CACHE_VERSION}

    def key(self) -> tuple[str, str, dict]:
        return _key(self)


@dataclass(frozen=True)
class WeightsRequest(TableRequest):
    """The tab's *Analyse weights*: the bit fields and the table together (``B`` is left out for ``k = 7``)."""

    LOSSLESS_BLOCK: ClassVar[str] = "ignore"

    def parts(self) -> dict:
        return {"histograms": HistogramsRequest(self.ref), "table": TableRequest(self.ref, self.k, self.block_size)}


@dataclass(frozen=True)
class ThroughputRequest(TableRequest):
    """NeuZip (lossless, and ``k``/``B`` for ``k < 7``) against the other codecs on the first ``numel`` weights."""

    numel: int = THROUGHPUT_NUMEL
    repeats: int = 5
    LOSSLESS_BLOCK: ClassVar[str] = "ignore"

    @classmethod
    def parse(cls, ref, k=7, block_size=None, numel=THROUGHPUT_NUMEL, repeats=5) -> "ThroughputRequest":
        return super().parse(ref, k, block_size, numel=check_number(numel, "numel", 1024, whole=True),
                             repeats=check_number(repeats, "repeats", 1, whole=True))

    @property
    def lossy(self) -> list[tuple[int, int | None]]:
        """The lossy NeuZip settings timed besides the lossless one."""
        return [] if self.k == 7 else [(self.k, self.block_size)]

    def price(self):
        """Each codec compressing and decompressing ``numel`` weights ``repeats`` times (:mod:`core.budget`: about a
        hundred operations a weight and codec)."""
        from core.budget import Price

        codecs = 8 + len(self.lossy)
        return Price(100.0 * codecs * self.numel * self.repeats, f"{codecs} codecs x {self.numel:,} weights x "
                     f"{self.repeats} repeats", fix="fewer weights (numel) or repeats.")

    def params(self) -> dict:
        return {"k": self.k, "block_size": self.block_size, "numel": self.numel, "repeats": self.repeats,
                "version": CACHE_VERSION}


@dataclass(frozen=True)
class DeviceMemoryRequest(TableRequest):
    """On a GPU host: the model on ``device`` in bf16 and compressed, and the peak of a forward of ``tokens``."""

    tokens: int = 512
    device: str = "cuda"
    LOSSLESS_BLOCK: ClassVar[str] = "ignore"

    @classmethod
    def parse(cls, ref, k=7, block_size=None, tokens=512, device="cuda") -> "DeviceMemoryRequest":
        from core.neuzip.memory import require_cuda

        device = str(require_cuda(device))  # before anything loads
        return super().parse(ref, k, block_size, tokens=check_number(tokens, "tokens", 1, whole=True), device=device)

    def params(self) -> dict:
        return {"k": self.k, "block_size": self.block_size, "tokens": self.tokens, "device": self.device,
                "version": CACHE_VERSION}


@dataclass(frozen=True)
class CompressRequest(TableRequest):
    """A model's linear weights written as a NeuZip checkpoint at ``out``."""

    out: Path | None = None

    @classmethod
    def parse(cls, ref, k=7, block_size=None, out=None) -> "CompressRequest":
        if not out:
            raise BadInputError("no output file given.", fix="name the checkpoint FILE.safetensors (--out)")
        return super().parse(ref, k, block_size, out=_safetensors_path(out, "--out"))


@dataclass(frozen=True)
class DecompressRequest:
    """A NeuZip checkpoint read back (checked against ``model``), optionally written as plain safetensors."""

    file: Path
    model: str | None = None
    out: Path | None = None

    @classmethod
    def parse(cls, file, model=None, out=None) -> "DecompressRequest":
        if not file or not Path(file).is_file():
            raise BadInputError(f"{file} does not exist.", fix="give a file written by `neuzip compress`")
        return cls(Path(file), parse_model(model) if model else None, _safetensors_path(out, "--out") if out else None)


@dataclass(frozen=True)
class TradeoffRequest:
    """Memory / word-level perplexity of bf16, NeuZip at each of ``ks`` (``k < 7`` also with ``B``) and the
    registry's baselines, on the first ``words`` words of ``dataset``; ``settings`` are the points measured."""

    ref: str
    ks: tuple[int, ...] = K_CHOICES
    block_size: int | None = DEFAULT_BLOCK
    words: int = DEFAULT_WORDS
    window: int = DEFAULT_WINDOW
    baselines: bool = True
    dataset: str | None = None
    settings: tuple[dict, ...] = field(default=(), compare=False)
    cache: bool = True  # answered from (and stored in) the examples and the results cache, the result and each point

    @classmethod
    def parse(cls, ref, ks=K_CHOICES, block_size=DEFAULT_BLOCK, words=DEFAULT_WORDS, window=DEFAULT_WINDOW,
              baselines=True, dataset=None, cache=True) -> "TradeoffRequest":
        ref = parse_model(ref)
        ks = tuple(parse_k(k) for k in (ks if isinstance(ks, (list, tuple)) else [ks]))
        b = parse_block(block_size)
        words = check_number(words, "words", whole=True)
        if not MIN_WORDS <= words <= MAX_WORDS:
            raise BadInputError(f"evaluate on {MIN_WORDS} to {MAX_WORDS:,} words, not {words:,}.",
                                fix=f"the live default is {DEFAULT_WORDS:,} words (about a minute per setting on 2 "
                                    "cores)")
        window = check_number(window, "window", 8, whole=True)
        dataset = str(dataset).strip() if dataset else None
        return cls(ref, ks, b, words, window, bool(baselines), dataset,
                   tuple(default_settings(ks, b, bool(baselines))), bool(cache))

    def price(self):
        """Each setting's perplexity over ``words`` words (about 1.5 tokens a word, windows overlapping by half: two
        forward passes a token) after compressing every weight (about a hundred operations a weight)."""
        from core.budget import Price, model_flops, model_parameters

        params, points = model_parameters(self.ref), max(1, len(self.settings))
        flops = points * (model_flops(params, 2 * 1.5 * self.words) + 100.0 * params)
        return Price(flops, f"{points} settings x {self.words:,} words of {self.ref} ({params / 1e6:.1f} M "
                     "parameters)", fix="fewer words or settings (k values, baselines).")

    def params(self) -> dict:
        from core.settings import is_online

        return {"ks": list(self.ks), "block_size": self.block_size, "words": self.words, "window": self.window,
                "baselines": self.baselines,
                "dataset": self.dataset or ("online" if is_online() else "wikipedia-paragraphs"),
                "version": CACHE_VERSION}

    def key(self) -> tuple[str, str, dict]:
        return _key(self)


@dataclass(frozen=True)
class ProcessMemoryRequest:
    """The memory / perplexity trade-off's bf16 and NeuZip settings (each ``k`` of ``ks``, ``k < 7`` also with ``B``)
    as the machine sees them: each loaded one tensor at a time in a fresh process, one forward of ``tokens`` random
    ids, the process's RSS measured (:func:`core.neuzip.memory.process_points`)."""

    ref: str
    ks: tuple[int, ...] = K_CHOICES
    block_size: int | None = DEFAULT_BLOCK
    tokens: int = 512
    settings: tuple[dict, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, ref, ks=K_CHOICES, block_size=DEFAULT_BLOCK, tokens=512) -> "ProcessMemoryRequest":
        ref = parse_model(ref)
        ks = tuple(parse_k(k) for k in (ks if isinstance(ks, (list, tuple)) else [ks]))
        b = parse_block(block_size)
        tokens = check_number(tokens, "tokens", 1, 8192, whole=True)
        return cls(ref, ks, b, tokens, tuple(default_settings(ks, b, baselines=False)))

    def price(self):
        """Each setting in its own process: the model read and compressed (about a hundred operations a weight) and
        one forward of ``tokens`` tokens (:mod:`core.budget`)."""
        from core.budget import Price, model_flops, model_parameters

        params, points = model_parameters(self.ref), max(1, len(self.settings))
        flops = points * (model_flops(params, self.tokens) + 100.0 * params)
        return Price(flops, f"{points} settings x one forward of {self.tokens:,} tokens of {self.ref} "
                     f"({params / 1e6:.1f} M parameters), each in a fresh process", fix="fewer tokens or k values.")

    def params(self) -> dict:
        return {"ks": list(self.ks), "block_size": self.block_size, "tokens": self.tokens, "version": CACHE_VERSION}

    def key(self) -> tuple[str, str, dict]:
        return _key(self)


def _key(request) -> tuple[str, str, dict]:
    from core.zoo import fingerprint

    return request.ref, fingerprint(request.ref), request.params()


# ---- training with compressed weights (core.neuzip.training) -------------------------------------------------------
MAX_TRAIN_STEPS = 5000
PUBLIC_RANDOM_MODELS = ("tiny-llama",)  # the random-weight configurations a public server builds (llama-1b: 2.5 GB)


def _public_training(ref: str) -> None:
    """On a public server (``--public``, a Space) a visitor may not have the server build a 1 B or 8 B model of random
    weights (gigabytes each); the registered models go through the loader's own public checks."""
    from core.neuzip.training import RANDOM_MODELS
    from core.settings import is_public

    if is_public() and ref in RANDOM_MODELS and ref not in PUBLIC_RANDOM_MODELS:
        raise BadInputError(f"{ref} (random weights) is not trained on a public server.",
                            fix="pick " + ", ".join(PUBLIC_RANDOM_MODELS) + " or a registered model; "
                                "`python -m core neuzip train` trains it on your own machine")


@dataclass(frozen=True)
class TrainingRequest:
    """Train ``ref`` in each of ``modes`` (:data:`core.neuzip.training.MODES`) for ``steps`` steps of ``batch`` x
    ``seq`` tokens; ``lr`` (None: each mode's default) applies to every mode chosen."""

    ref: str
    modes: tuple[str, ...]
    steps: int = 8
    batch: int = 1
    seq: int = 64
    seed: int = 0
    lr: float | None = None
    device: str = "cpu"
    layers: int | None = None
    budget_s: float | None = None
    compress_threads: int = 0
    fresh: bool = True  # each mode in fresh processes (None at parse: $LAYERWISE_NEUZIP_FRESH, default on)

    @classmethod
    def parse(cls, ref, modes, steps=8, batch=1, seq=64, seed=0, lr=None, device="cpu", layers=None, budget_s=None,
              compress_threads=0, fresh=None) -> "TrainingRequest":
        from core.neuzip.training import check_modes, source_reference

        ref = parse_model(ref)
        modes = check_modes(modes)
        _public_training(ref)
        source_reference(ref)  # the one reference check, before anything loads (a path in any spelling: issue 42)
        steps = check_number(steps, "steps", 1, MAX_TRAIN_STEPS, whole=True)
        batch = check_number(batch, "batch", 1, 256, whole=True)
        seq = check_number(seq, "sequence length", 8, 8192, whole=True)
        seed = check_number(seed, "seed", 0, 2**31 - 1, whole=True)
        lr = None if lr in (None, "") else check_number(lr, "learning rate", 1e-12, 10.0)
        device = str(device or "cpu").strip()
        if device != "cpu":
            from core.neuzip.memory import require_cuda

            device = str(require_cuda(device))
        layers = None if layers in (None, "", 0) else check_number(layers, "layers", 1, 1024, whole=True)
        budget_s = None if budget_s in (None, "", 0) else check_number(budget_s, "budget (s)", 1, 86400)
        compress_threads = check_number(compress_threads, "compress threads", 0, 1, whole=True)
        if fresh is None:  # the default: fresh processes, unless LAYERWISE_NEUZIP_FRESH=0 (the test suite's setting)
            fresh = os.environ.get("LAYERWISE_NEUZIP_FRESH", "1").strip() != "0"
        return cls(ref, modes, steps, batch, seq, seed, lr, device, layers, budget_s, compress_threads, bool(fresh))

    def price(self):
        """What the run costs (:mod:`core.budget`): every mode trains ``steps`` x ``batch`` x ``seq`` tokens forward and
        backward (LOMO + NeuZip twice: each layer is decompressed for the forward and again in the backward)."""
        from core.budget import Price, model_flops
        from core.neuzip.training import source_parameters

        params = source_parameters(self.ref, self.layers)
        tokens = self.steps * self.batch * self.seq
        weight = sum(2 if m == "lomo+neuzip" else 1 for m in self.modes)
        return Price(weight * model_flops(params, tokens, backward=True),
                     f"{len(self.modes)} mode{'s' * (len(self.modes) > 1)} x {self.steps:,} step"
                     f"{'s' * (self.steps > 1)} x {self.batch} x {self.seq:,} tokens of {self.ref} "
                     f"({params / 1e6:.1f} M parameters)",
                     fix="fewer steps, a smaller batch or shorter sequences, fewer modes or a smaller model "
                         "(`python -m core neuzip train` on your own machine has no budget).")

    def settings(self):
        from core.neuzip.training import TrainSettings

        return TrainSettings(steps=self.steps, batch=self.batch, seq=self.seq, seed=self.seed,
                             lr={m: self.lr for m in self.modes} if self.lr is not None else {}, device=self.device,
                             layers=self.layers, budget_s=self.budget_s, compress_threads=self.compress_threads,
                             fresh=self.fresh)

    def params(self) -> dict:
        return {"modes": list(self.modes), "steps": self.steps, "batch": self.batch, "seq": self.seq,
                "seed": self.seed, "lr": self.lr, "device": self.device, "layers": self.layers,
                "compress_threads": self.compress_threads, "fresh": self.fresh, "version": CACHE_VERSION}
