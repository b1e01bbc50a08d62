"""Which compiled CPU codec runs: the C library (:mod:`core.neuzip.pairs.native`, built with the system's C compiler
on first use), or its numba twin (:mod:`core.neuzip.pairs.numba_codec`) where no C compiler is found. Both write and
read the same streams bit for bit (tested); the C one costs a process a few hundred KB of RSS, the numba one about
200 MiB (numba, LLVM and their first compile).

``LAYERWISE_NEUZIP_CODEC=native`` or ``numba`` forces one (``native`` then fails loudly where it cannot be built).

Every codec has the same methods, on numpy arrays (C-contiguous, the dtypes of the format; None or an empty array for
an absent part):

- ``decode_range(words, states, offsets, escapes, escape_offsets, n, chunk_size, first, last, slot_pair, info,
  marker, fields, scales, out, out_offset, k, block, field_bits, exponents_out) -> -1 or the first bad chunk``;
- ``segment_index(words, states, offsets, escape_offsets, n, chunk_size, segment, slot_pair, info, marker,
  seg_states, seg_p, seg_q) -> -1 or the first bad chunk``;
- ``split(bits, k, exponents, fields, hist=None)``: bf16 bits to exponent bytes and packed fields (and the exponent
  histogram, added to ``hist``);
- ``encode(e, lookup, alpha, chunk_size, freq, cdf, pad, states, offsets, words, escapes, escape_offsets) -> words
  written``, or -1 (``words`` too small), -2 (``escapes`` too small), -3 (a pair of frequency 0);
- ``words_bound(n, chunk_size)``: the most words ``encode`` may write;
- ``tables(freq, decoded, alpha, precision, slot_pair, info)``: the decoders' two tables, in place;
- ``format2_pairs(words, states, offsets, slot_pair, freq, cdf, n, chunk_size, out) -> -1 or the first bad chunk``.
"""
from __future__ import annotations

import os
import threading
import warnings

__all__ = ["ENV", "CHOICES", "codec", "use"]

ENV = "LAYERWISE_NEUZIP_CODEC"
CHOICES = ("native", "numba")
_lock = threading.Lock()
_current = None
_why_not_native: str | None = None


def codec():
    """The codec this process uses (chosen once: ``$LAYERWISE_NEUZIP_CODEC``, else the C one where it builds)."""
    global _current, _why_not_native
    if _current is None:
        with _lock:
            if _current is None:
                want = os.environ.get(ENV, "").strip().lower()
                if want and want not in CHOICES:
                    raise ValueError(f"{ENV}={want!r}: use one of {', '.join(CHOICES)} (or leave it unset)")
                if want != "numba":
                    from core.neuzip.pairs.native import NativeCodec, NativeUnavailable, library

                    try:
                        _current = NativeCodec(library())
                    except NativeUnavailable as exc:
                        if want == "native":
                            raise
                        _why_not_native = str(exc)
                        warnings.warn(f"NeuZip: the C codec is not available ({exc}); using its numba twin, which "
                                      "costs the process about 200 MiB more memory.", RuntimeWarning, stacklevel=2)
                if _current is None:
                    from core.neuzip.pairs.numba_codec import NumbaCodec

                    _current = NumbaCodec()
    return _current


def use(name: str):
    """Switch this process to codec ``name`` (``native`` or ``numba``) and return it (tests, the bench)."""
    global _current
    if name not in CHOICES:
        raise ValueError(f"unknown codec {name!r}; one of {', '.join(CHOICES)}")
    with _lock:
        if name == "native":
            from core.neuzip.pairs.native import NativeCodec, library

            _current = NativeCodec(library())
        else:
            from core.neuzip.pairs.numba_codec import NumbaCodec

            _current = NumbaCodec()
    return _current
