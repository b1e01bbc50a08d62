"""NeuZip (Hao et al., 2024): lossless and lossy compression of bf16 weights.

The 8 exponent bits of trained bf16 weights carry under 3 bits of information: NeuZip entropy-codes
the exponent (pairs of exponents, chunked rANS with 8 interleaved states, :mod:`core.neuzip.pairs`)
and keeps sign and mantissa raw (lossless, about 10.6 bits per weight), or keeps only the top ``k`` mantissa bits
(``k in {0, 1, 3}``), with an optional per-block normaliser, for inference.

Public API (what the tab, the CLI and a notebook use)
-----------------------------------------------------
- the codec: :func:`compress` -> :class:`CompressedTensor` (``.nbytes``, ``.shape``, ``.decompress()``);
  :func:`save_compressed` / :func:`load_compressed`: a checksummed safetensors checkpoint
- compressed models: :func:`compress_model`, :class:`CompressedLinear`, :func:`memory_report`, :func:`device_memory`
  (on a GPU), :func:`compressed_tensors`, :func:`apply_compressed` (put loaded compressed weights into a freshly built
  model), :func:`set_decode_ahead` (decode the next layers in a background thread while one computes),
  :func:`decompress_model` (back to plain layers, for evaluations with many forwards)
- the registries: :data:`CODECS` (the codecs :func:`codec_comparison` sets side by side) and
  :data:`TRADEOFF_METHODS` (the weight formats of the memory / perplexity trade-off: :class:`Method`, :class:`Style`)
- training with compressed weights (:mod:`core.neuzip.training`): :data:`TRAINING_MODES` (the registry: vanilla,
  vanilla-adamw, lomo, lomo+neuzip, qlora-int8/nf4/fp4), :func:`train_modes` (one model in each mode, measured),
  :class:`TrainSettings`, :class:`MemoryTracker` (peak live tensor bytes by category), :data:`PAPER_TABLE1`,
  :data:`RANDOM_MODELS` (Llama configurations trained from random weights), :data:`TRAINING_EXAMPLES` and
  :func:`precompute_training_example` (the committed runs, ``assets/neuzip/training.json``)
- the service (each returns a ``core.results.Result``; the views are registered in :mod:`core.neuzip.views`):
  :func:`weights_result`, :func:`histograms_result`, :func:`table_result`, :func:`tradeoff_result`,
  :func:`throughput_result`, :func:`device_memory_result`, :func:`compress_result`, :func:`decompress_result`,
  :func:`shown_result`, :func:`example_parts`, :func:`precompute_examples`, :func:`linear_weights`,
  :func:`training_result`, :func:`training_example_result`
- the choices and defaults of the inputs (:mod:`core.neuzip.requests`): ``K_CHOICES``, ``BLOCK_SIZES``,
  ``NO_BLOCK``, ``DEFAULT_BLOCK``, ``MIN_WORDS``, ``MAX_WORDS``, ``DEFAULT_WORDS``, ``DEFAULT_WINDOW``,
  ``THROUGHPUT_NUMEL``; the committed example: ``EXAMPLE_MODEL``, ``EXAMPLE_PARTS``, ``EXAMPLE_VIEWS``
"""
from core.neuzip.checkpoint import load_compressed, save_compressed
from core.neuzip.codec import BLOCK_SIZES, CompressedTensor, compress
from core.neuzip.compare import CODECS, codec_comparison
from core.neuzip.formats import METHODS as TRADEOFF_METHODS
from core.neuzip.formats import Method, Style
from core.neuzip.memory import cuda_present, device_memory, memory_report
from core.neuzip.modules import (CompressedLinear, apply_compressed, compress_model, compressed_tensors,
                                 decompress_model, set_decode_ahead)
from core.neuzip.requests import (DEFAULT_BLOCK, DEFAULT_WINDOW, DEFAULT_WORDS, K_CHOICES, MAX_WORDS, MIN_WORDS,
                                  NO_BLOCK, THROUGHPUT_NUMEL)
from core.neuzip.service import (EXAMPLE_MODEL, EXAMPLE_PARTS, compress_result, decompress_result,
                                 device_memory_result, example_parts, histograms_result, linear_weights,
                                 precompute_examples, shown_result, table_result, throughput_result, tradeoff_result,
                                 training_example_result, training_result, weights_result)
from core.neuzip.service import TRAINING_EXAMPLES, precompute_training_example
from core.neuzip.memtrack import MemoryTracker
from core.neuzip.training import MODES as TRAINING_MODES
from core.neuzip.training import PAPER_TABLE1, RANDOM_MODELS, TrainSettings, train_modes
from core.neuzip.examples import EXAMPLE_VIEWS  # the views a speaker shows (core.examples)

__all__ = [
    "compress", "CompressedTensor", "save_compressed", "load_compressed",
    "compress_model", "CompressedLinear", "memory_report", "device_memory", "cuda_present", "compressed_tensors", "apply_compressed",
    "set_decode_ahead", "decompress_model",
    "CODECS", "codec_comparison", "TRADEOFF_METHODS", "Method", "Style",
    "weights_result", "histograms_result", "table_result", "tradeoff_result", "throughput_result",
    "device_memory_result", "compress_result", "decompress_result", "shown_result", "example_parts",
    "precompute_examples", "linear_weights", "training_result", "training_example_result",
    "TRAINING_MODES", "train_modes", "TrainSettings", "MemoryTracker", "PAPER_TABLE1", "RANDOM_MODELS",
    "TRAINING_EXAMPLES", "precompute_training_example",
    "K_CHOICES", "BLOCK_SIZES", "NO_BLOCK", "DEFAULT_BLOCK", "MIN_WORDS", "MAX_WORDS", "DEFAULT_WORDS",
    "DEFAULT_WINDOW", "THROUGHPUT_NUMEL", "EXAMPLE_MODEL", "EXAMPLE_PARTS", "EXAMPLE_VIEWS",
]
