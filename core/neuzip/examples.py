"""The NeuZip views a speaker shows (:mod:`core.examples`): the precomputed example of SmolLM2-135M
(``assets/neuzip/examples.json``): bit fields, bits per weight, the memory / perplexity trade-off and the codec
throughput. Another model, ``k`` or ``B`` is measured by the service (minutes for the trade-off on 2 cores)."""
from __future__ import annotations

from core.errors import BadInputError
from core.examples import Example, Param
from core.neuzip.codec import BLOCK_SIZES
from core.neuzip.service import (EXAMPLE_MODEL, EXAMPLES, histograms_result, table_result, throughput_result,
                                 throughput_view, tradeoff_result)
from core.neuzip.tradeoff import CACHE_VERSION, DEFAULT_WORDS

MODEL = Param("model", "model", "choice", (EXAMPLE_MODEL,), open=True)
K = Param("k", "k", "choice", (7, 3, 1, 0))
B = Param("B", "B", "choice", (None, *BLOCK_SIZES), none="none")
LOSSLESS_B = "B applies to k < 7 only (lossy); for k = 7 leave B=none."


def _b(k: int, b):
    if k == 7 and b is not None:
        raise BadInputError(f"B={b} with k=7: {LOSSLESS_B}")
    return b


def _histograms(progress=None, model=EXAMPLE_MODEL):
    return histograms_result(model, progress=progress)


def _bits(progress=None, model=EXAMPLE_MODEL, k=7, B=None):
    return table_result(model, k, _b(k, B), progress=progress)


def _tradeoff(progress=None, model=EXAMPLE_MODEL, B=128, log=False):
    return tradeoff_result(model, block_size=B, words=DEFAULT_WORDS, progress=progress, log_x=bool(log))


def _stored_throughput(model: str):
    """The precomputed throughput of ``model`` (timed when the example was made; throughput is never cached)."""
    from core.zoo import fingerprint

    fp = fingerprint(model)
    for e in EXAMPLES.entries("neuzip/throughput"):
        if e["fingerprint"] == fp and e["params"].get("version") == CACHE_VERSION:
            return throughput_view(e["data"], "precomputed")
    return None


def _throughput(progress=None, model=EXAMPLE_MODEL, k=3, B=128):
    if (model, k, B) == (EXAMPLE_MODEL, 3, 128):
        stored = _stored_throughput(model)
        if stored is not None:
            return stored
    return throughput_result(model, k, _b(k, B), progress=progress)


EXAMPLE_VIEWS = (
    Example("bits", "Bits per weight", "table", _bits, (MODEL, K, B), {"model": EXAMPLE_MODEL, "k": 7, "B": None}),
    Example("tradeoff", "Memory vs perplexity", "tradeoff", _tradeoff,
            (MODEL, B, Param("log", "log memory axis", "flag")), {"model": EXAMPLE_MODEL, "B": 128, "log": False}),
    Example("histograms", "Bit fields", "histograms", _histograms, (MODEL,), {"model": EXAMPLE_MODEL}),
    Example("throughput", "Throughput", "throughput", _throughput, (MODEL, K, B),
            {"model": EXAMPLE_MODEL, "k": 3, "B": 128}),
)
