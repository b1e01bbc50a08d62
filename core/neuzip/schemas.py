"""What each stored NeuZip result must hold before its view reads it (:mod:`core.schema`): every field the view
reads, ``Opt`` where the view shows a missing value as such. ``tests/core/test_schemas.py`` checks that the views read
nothing else and that a ``None`` where a view would fail is refused. The model's name is not stored in the bit-field
and table results (the service adds it), so it may be absent there."""
from __future__ import annotations

from core.schema import Anything, Bool, DictOf, Int, ListOf, Num, Opt, Rec, Str

_BITS = {"numel": Int, "bits_per_weight": Num, "entropy_bound": Num, "exponent_entropy": Num,
         "zlib_bits_per_weight": Opt(Num), "zstd_bits_per_weight": Opt(Num)}

SCHEMAS = {
    "neuzip/histograms": Rec({"sign": ListOf(Int, 1), "exponent": ListOf(Int, 1), "mantissa": ListOf(Int, 1),
                              "entropy": Rec({"sign": Num, "exponent": Num, "mantissa": Num}), "numel": Int,
                              "tensors": ListOf(Str), "note": Str}, optional={"model": Str}),
    "neuzip/table": Rec({"mantissa_bits": Int, "block_size": Opt(Int), "total": Rec({"name": Str, **_BITS}),
                         "rows": ListOf(Rec({"name": Str, **_BITS}))}, optional={"model": Str}),
    "neuzip/tradeoff-result": Rec(
        {"model": Str, "dataset": Str, "words": Int, "tokens": Int, "window": Int, "notes": ListOf(Str),
         "pareto": ListOf(Str),
         "points": ListOf(Rec({"label": Str, "method": Str, "family": Str, "k": Opt(Int), "block_size": Opt(Int),
                               "memory_bytes": Int, "bits_per_weight": Num, "perplexity": Num,
                               "token_perplexity": Num, "pareto": Bool}), 1)}),
    "neuzip/throughput": Rec(
        {"model": Str, "device": Str, "numel": Int, "tensors": Int, "repeats": Int, "entropy_bound": Num,
         "skipped": DictOf(Anything),
         "rows": ListOf(Rec({"codec": Str, "label": Str, "colour": Str, "lossless": Bool, "bits_per_weight": Num,
                             "compress_MBps": Opt(Num), "decompress_MBps": Num, "gap_percent": Opt(Num)}), 1)}),
}
