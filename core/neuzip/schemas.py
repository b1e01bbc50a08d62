"""What each stored NeuZip result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view copes with a missing value. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused. The model's name is not stored in the bit-field
and table results (the service adds it), so it may be absent there."""
from __future__ import annotations

from core.schema import Anything, Bool, DictOf, Int, ListOf, Num, Opt, Rec, Str

_BITS = {"numel": Int, "bits_per_weight": Opt(Num), "entropy_bound": Opt(Num), "exponent_entropy": Opt(Num),
         "zlib_bits_per_weight": Opt(Num), "zstd_bits_per_weight": Opt(Num)}

HISTOGRAMS = Rec({"sign": ListOf(Int, 1), "exponent": ListOf(Int, 1), "mantissa": ListOf(Int, 1),
                  "entropy": Rec({"sign": Num, "exponent": Num, "mantissa": Num}), "numel": Int,
                  "tensors": ListOf(Str), "note": Opt(Str)}, optional={"model": Opt(Str)})

TABLE = Rec({"mantissa_bits": Opt(Int), "block_size": Opt(Int),
             "total": Rec({**_BITS, "name": Opt(Str), "numel": Opt(Int), "bits_per_weight": Num,
                           "entropy_bound": Num}),
             "rows": ListOf(Rec({**_BITS, "name": Str}))}, optional={"model": Opt(Str)})

TRADEOFF_RESULT = Rec(
    {"model": Opt(Str), "dataset": Opt(Str), "words": Int, "tokens": Int, "window": Opt(Int),
     "notes": ListOf(Str), "pareto": ListOf(Str),
     "points": ListOf(Rec({"label": Str, "method": Str, "family": Opt(Str), "k": Opt(Int), "block_size": Opt(Int),
                           "memory_bytes": Int, "bits_per_weight": Num, "perplexity": Num,
                           "token_perplexity": Num, "pareto": Opt(Bool)}), 1)})

THROUGHPUT = Rec(
    {"model": Opt(Str), "device": Opt(Str), "numel": Int, "tensors": Opt(Int), "repeats": Opt(Int),
     "entropy_bound": Num, "skipped": DictOf(Anything),
     "rows": ListOf(Rec({"codec": Opt(Str), "label": Opt(Str), "colour": Opt(Str), "lossless": Opt(Bool),
                         "bits_per_weight": Num, "compress_MBps": Opt(Num), "decompress_MBps": Num,
                         "gap_percent": Opt(Num)}), 1)})

PROCESS_MEMORY = Rec(
    {"model": Opt(Str), "tokens": Int, "ks": ListOf(Int), "block_size": Opt(Int), "machine": Opt(DictOf(Anything)),
     "rows": ListOf(Rec({"label": Str, "setting": DictOf(Anything), "idle_rss_bytes": Int, "loaded_rss_bytes": Int,
                         "peak_rss_bytes": Int, "tensor_bytes": Int, "logits_digest": Opt(Str)}), 1)})
