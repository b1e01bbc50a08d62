"""NeuZip (Hao et al., 2024): lossless and lossy compression of bf16 weights.

The 8 exponent bits of trained bf16 weights carry under 3 bits of information: NeuZip entropy-codes
the exponent (pairs of exponents, chunked rANS with 8 interleaved states, :mod:`core.neuzip.pairs`)
and keeps sign and mantissa raw (lossless, about 10.6 bits per weight), or keeps only the top ``k`` mantissa bits (``k in {0, 1, 3}``), with an
optional per-block normaliser, for inference.

Public API
----------
- :func:`compress` -> :class:`CompressedTensor` (``.nbytes``, ``.shape``, ``.decompress()``)
- :func:`save_compressed` / :func:`load_compressed`: a checksummed safetensors checkpoint
- :func:`compress_model`, :class:`CompressedLinear`, :func:`memory_report`, :func:`compressed_tensors`,
  :func:`apply_compressed` (put loaded compressed weights into a freshly built model),
  :func:`set_decode_ahead` (decode the next layers in a background thread while one computes),
  :func:`decompress_model` (back to plain layers, for evaluations with many forwards)
- :func:`bitfield_histograms`, :func:`compression_table`, :func:`throughput`: data for the views
- :func:`codec_comparison` (NeuZip beside ZipNN, zstd and a memory copy: bits per weight and
  1-thread MB/s, the rows of a throughput chart, registry :data:`CODECS`), :func:`forward_ratio`
  (compressed forward / bf16 forward), :func:`synthetic_weights` (Gaussian / Student-t weights)
- :func:`tradeoff` (a model reference) / :func:`tradeoff_for_model`: memory / word-level perplexity
  points of bf16, NeuZip k = 7, 3, 1, 0 (with and without a block normaliser) and the quantization
  baselines registered in :data:`TRADEOFF_METHODS`, with :func:`pareto_front`; :func:`word_perplexity`
- :data:`TRADEOFF_METHODS`: the registry of weight formats (label, legend family, style, default settings)
- the service (what the tab and ``python -m core neuzip`` call; each returns a ``core.runner.Result``):
  :func:`weights_result`, :func:`histograms_result`, :func:`table_result`, :func:`tradeoff_result`,
  :func:`throughput_result` (NeuZip beside ZipNN, zstd and a memory copy), :func:`compress_result`,
  :func:`decompress_result`, :func:`shown_result`, :func:`example_parts`, :func:`precompute_examples`, :func:`write_example`, :func:`linear_weights`
"""
from core.neuzip.checkpoint import load_compressed, save_compressed
from core.neuzip.codec import BLOCK_SIZES, FORMAT_VERSION, CompressedTensor, check_params, compress
from core.neuzip.compare import CODECS, codec_comparison, forward_ratio, synthetic_weights, zipnn_available
from core.neuzip.measure import bitfield_histograms, compression_table, entropy_bits, throughput, zstd_available
from core.neuzip.memory import device_memory, memory_report
from core.neuzip.modules import (CompressedLinear, apply_compressed, compress_model, compressed_tensors,
                                 decompress_model, set_decode_ahead)
from core.neuzip.tradeoff import METHODS as TRADEOFF_METHODS
from core.neuzip.tradeoff import (DEFAULT_WINDOW, DEFAULT_WORDS, Cancelled, Method, Style, default_settings,
                                  pareto_front, setting_label, tradeoff, tradeoff_for_model, word_perplexity)
from core.neuzip.service import (EXAMPLE_MODEL, EXAMPLE_PARTS, THROUGHPUT_NUMEL, compress_result, decompress_result,
                                 device_memory_result, example_parts, histograms_result, linear_weights, precompute_examples, shown_result,
                                 table_result, throughput_result, tradeoff_result, weights_result, write_example)
from kernels.neuzip_bits import MANTISSA_BITS

__all__ = [
    "MANTISSA_BITS", "BLOCK_SIZES", "FORMAT_VERSION", "CompressedTensor", "compress", "check_params", "save_compressed",
    "load_compressed",
    "CompressedLinear", "compress_model", "apply_compressed", "decompress_model", "compressed_tensors",
    "memory_report", "set_decode_ahead", "device_memory", "device_memory_result",
    "bitfield_histograms", "compression_table", "entropy_bits", "throughput", "zstd_available",
    "tradeoff", "tradeoff_for_model", "default_settings", "pareto_front", "word_perplexity", "TRADEOFF_METHODS",
    "Cancelled", "Method", "Style", "setting_label", "DEFAULT_WORDS", "DEFAULT_WINDOW",
    "EXAMPLE_MODEL", "EXAMPLE_PARTS", "THROUGHPUT_NUMEL", "weights_result", "histograms_result", "table_result",
    "tradeoff_result", "throughput_result", "compress_result", "decompress_result", "shown_result", "example_parts",
    "precompute_examples", "write_example", "linear_weights",
    "CODECS", "codec_comparison", "forward_ratio", "synthetic_weights", "zipnn_available",
]

from core.neuzip.examples import EXAMPLE_VIEWS  # noqa: E402  (the views a speaker shows: core.examples)

__all__ += ["EXAMPLE_VIEWS"]
