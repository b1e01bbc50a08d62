"""NeuZip (Hao et al., 2024): lossless and lossy compression of bf16 weights.

The 8 exponent bits of trained bf16 weights carry under 3 bits of information: NeuZip entropy-codes
the exponent (pairs of exponents, chunked rANS with 8 interleaved states, :mod:`core.neuzip.pairs`)
and keeps sign and mantissa raw (lossless, about 10.6 bits per weight), or keeps only the top ``k`` mantissa bits
(``k in {0, 1, 3}``), with an optional per-block normaliser, for inference.

The public API: what the tab, the CLI and a notebook import, each name once, grouped by what it is for (the rest
lives in the submodules). :func:`compress` returns a :class:`CompressedTensor` (``.nbytes``, ``.shape``,
``.decompress()``); every action of the service returns a ``core.results.Result``.
"""
# the codec, and its checksummed safetensors checkpoints
from core.neuzip.codec import BLOCK_SIZES, CompressedTensor, compress
from core.neuzip.pairs.native import build_report as build_codec  # python -m core neuzip build
from core.neuzip.checkpoint import load_compressed, save_compressed, stream_compressed
# compressed models: linear layers decoded per forward (decode ahead in a background thread), their memory, the
# compressed weights put into a freshly built model, and back to plain layers
from core.neuzip.modules import (CompressedLinear, apply_compressed, compress_model, compressed_tensors,
                                 decompress_model, load_compressed_model, set_decode_ahead)
from core.neuzip.memory import cuda_present, device_memory, inference_memory, memory_report
# memory as the machine sees it: a job in a fresh process (its peak RSS), the machine a run ran on
from core.neuzip.process import machine, run_fresh
# the registries: the codecs set side by side, the weight formats of the memory / perplexity trade-off
from core.neuzip.compare import CODECS, codec_comparison
from core.neuzip.formats import METHODS as TRADEOFF_METHODS
from core.neuzip.formats import Method, Style
# the analyses (core.analyses.Analysis entries) and the service: one function per user action
from core.neuzip.views import ANALYSES
from core.neuzip.service import (EXAMPLE_MODEL, EXAMPLE_PARTS, analysis_result, compress_result, decompress_result,
                                 device_memory_result, example_parts, histograms_result, linear_weights,
                                 precompute_examples, process_memory_result, shown_result, table_result,
                                 throughput_result, tradeoff_result, training_example_result, training_result,
                                 weights_result)
# training with compressed weights: the mode registry (vanilla, vanilla-adamw, lomo, lomo+neuzip, qlora-int8/nf4/fp4),
# one model trained in each mode and measured, the memory tracker (peak live tensor bytes by part), the paper's
# Table 1, the Llama configurations trained from random weights, and the committed runs (assets/neuzip/training.json)
from core.neuzip.training import MODES as TRAINING_MODES
from core.neuzip.training import PAPER_TABLE1, RANDOM_MODELS, TrainSettings, train_modes
from core.neuzip.memtrack import MemoryTracker
from core.neuzip.recipe_effects import EFFECTS_MODES, effects_markdown
from core.neuzip.training import check_modes
from core.neuzip.training_views import paper_rows, paper_table2_rows
from core.neuzip.service import TRAINING_EXAMPLES, precompute_training_example
# the choices and defaults of the inputs
from core.neuzip.requests import (DEFAULT_BLOCK, DEFAULT_WINDOW, DEFAULT_WORDS, K_CHOICES, MAX_WORDS, MIN_WORDS,
                                  NO_BLOCK, THROUGHPUT_NUMEL)
# the views a speaker shows (core.examples)
from core.neuzip.examples import EXAMPLE_VIEWS
from core.neuzip.batch import KIND as BATCH  # its batch kind (core.batch; python -m core neuzip batch)
