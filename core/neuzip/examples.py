"""The NeuZip views a speaker shows (:mod:`core.examples`): the precomputed example of SmolLM2-135M
(``assets/neuzip/examples.json``): bit fields, bits per weight, the memory / perplexity trade-off and the codec
throughput; and the committed training runs (``assets/neuzip/training.json``): memory by training mode and the loss
curves. Another model, ``k`` or ``B`` is measured by the service (minutes for the trade-off on 2 cores)."""
from __future__ import annotations

from core.analyses import Example, Param
from core.neuzip.codec import BLOCK_SIZES
from core.neuzip.perplexity import DEFAULT_WORDS
from core.neuzip.requests import DEFAULT_BLOCK, K_CHOICES, NO_BLOCK
from core.neuzip.service import (EXAMPLE_MODEL, TRAINING_EXAMPLES, example_parts, histograms_result, table_result,
                                 throughput_result, tradeoff_result, training_example_result)

MODEL = Param("model", "model", "choice", (EXAMPLE_MODEL,), open=True)
K = Param("k", "k", "choice", K_CHOICES)
B = Param("B", "B", "choice", (None, *BLOCK_SIZES), none=NO_BLOCK)


def _histograms(progress=None, model=EXAMPLE_MODEL):
    return histograms_result(model, progress=progress)


def _bits(progress=None, model=EXAMPLE_MODEL, k=7, B=None):
    return table_result(model, k, B, progress=progress)


def _tradeoff(progress=None, model=EXAMPLE_MODEL, B=DEFAULT_BLOCK, log=False):
    return tradeoff_result(model, block_size=B, words=DEFAULT_WORDS, progress=progress, log_x=bool(log))


def _throughput(progress=None, model=EXAMPLE_MODEL, k=3, B=DEFAULT_BLOCK):
    """The precomputed throughput for the example's own settings (timed when the example was made; throughput is
    never cached), else timed now."""
    stored = example_parts(model)[1].get("throughput") if (model, k, B) == (EXAMPLE_MODEL, 3, DEFAULT_BLOCK) else None
    return stored or throughput_result(model, k, B, progress=progress)


TRAINED = Param("model", "model", "choice", tuple(m for m, _, _ in TRAINING_EXAMPLES))


def _training(progress=None, model=TRAINING_EXAMPLES[0][0]):
    """The committed training runs (``assets/neuzip/training.json``): memory by mode, loss curves, speed."""
    return training_example_result(model)


EXAMPLE_VIEWS = (
    Example("bits", "Bits per weight", "table", _bits, (MODEL, K, B), {"model": EXAMPLE_MODEL, "k": 7, "B": None}),
    Example("tradeoff", "Memory vs perplexity", "tradeoff", _tradeoff,
            (MODEL, B, Param("log", "log memory axis", "flag")),
            {"model": EXAMPLE_MODEL, "B": DEFAULT_BLOCK, "log": False}),
    Example("histograms", "Bit fields", "histograms", _histograms, (MODEL,), {"model": EXAMPLE_MODEL}),
    Example("throughput", "Throughput", "throughput", _throughput, (MODEL, K, B),
            {"model": EXAMPLE_MODEL, "k": 3, "B": DEFAULT_BLOCK}),
    Example("training", "Training memory", "memory", _training, (TRAINED,), {"model": TRAINING_EXAMPLES[0][0]}),
    Example("training-loss", "Training loss", "loss", _training, (TRAINED,), {"model": TRAINING_EXAMPLES[0][0]}),
)
