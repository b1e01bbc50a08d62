"""Format 3 of the NeuZip exponent stream: pairs of exponents rANS-coded in big chunks, 8 interleaved
64-bit states that each decode two pairs per refill.

Why this shape (measured on this 2-core CPU, 1 thread; see the README):
exponents take ~2.6 bits each, so coding a *pair* of exponents as one symbol halves the decode steps;
8 rANS states interleaved over one word stream let the CPU overlap 8 table lookups (1.9 GB/s of bf16
out, against 0.6 GB/s for 4 states decoded one after another); escaped exponents kept out of the
rANS stream (a marker, patched afterwards) save a test per pair (+20 %); chunks of 2**17 weights cost
~72 bytes each (~0.004 bits per weight, against 0.063 for format 1's 1,024-weight chunks). Format 3
widens format 2's 32-bit states (16-bit words, a refill test after every pair) to 64 bits with 32-bit
words: a state takes two pairs (at most 30 bits) between refill tests, which removes half of the
refill work and made the decode loop 1.3x faster (0.73 -> 0.55 ns per weight) for +0.001 bits per weight.

Format ("rans64x32-pairs", codec format 3)
------------------------------------------
- Alphabet. ``symbols (K,) uint8``: the ``K <= 15`` most frequent exponent bytes, ascending. Index
  ``a in [0, K)`` stands for ``symbols[a]``; index ``K`` is the *escape*: any other byte, whose value
  is the next byte of ``escapes``. ``A = K + 1``. The *marker* is the smallest byte not in
  ``symbols`` (what an escape decodes to before it is patched).
- Table. ``counts (A,) uint16``: how often each index occurs (escape last; scaled down so that every
  count is below ``2**16``; a present index keeps a count >= 1). The pair ``(a, b)`` gets the
  weight ``counts[a] * counts[b]`` and an integer frequency ``freq[a * A + b]`` from
  :func:`pair_frequencies` (integers only, so encoder and decoder agree bit for bit), all present
  pairs >= 1, summing to ``M = 2**precision``, ``precision = 15`` (a constant of the format: the
  CPU decoder is compiled for it).
  ``cdf`` is the running sum of ``freq`` in pair-index order.
- Pairs. Exponent ``2 i`` and ``2 i + 1`` form pair ``i`` (an odd count is padded with index 0,
  decoded and dropped). Chunk ``c`` holds weights ``[c * chunk_size, (c + 1) * chunk_size)``
  (``chunk_size`` a multiple of 32; the last chunk may be shorter). A chunk's ``m`` pairs are
  padded to whole *rounds* of 16 with the *pad pair* (the most frequent pair, the lowest index on a
  tie), decoded and dropped.
- States. Each chunk has ``LANES = 8`` rANS states (``2**31 <= x < 2**63``), ``states (C, 8)
  uint64``, and one stream of 32-bit words ``words[offsets[c]:offsets[c + 1]]`` (``offsets (C + 1,)
  uint32``) shared by the 8 states. Round ``r`` of a chunk decodes pairs ``16 r + j`` (``j < 16``)
  with state ``j % 8``, then refills the states in order 0..7::

      for j in 0..15:  slot = x[j % 8] & (M - 1);  (a, b) = the pair with cdf <= slot < cdf + freq
                       x[j % 8] = freq * (x[j % 8] >> precision) + slot - cdf
      for i in 0..7:   if x[i] < 2**31: x[i] = (x[i] << 32) | words[p]; p += 1

  and a well-formed chunk ends with every state at ``2**31`` and ``p == offsets[c + 1]`` (checked).
  The encoder runs each chunk backwards from states ``2**31`` (:func:`encode`); before it encodes a
  state's two pairs of a round (frequencies ``f1``, ``f2``) it moves 32 bits out when ``x >=
  2**33 f1 f2``, so both decode steps and one refill bring the state back into ``[2**31, 2**63)``.
- Escapes. ``escapes (E,) uint8``: the escaped exponents in order, chunk ``c``'s at
  ``escapes[escape_offsets[c]:escape_offsets[c + 1]]`` (``escape_offsets (C + 1,) uint32``).
- Stored: every array, but of ``offsets`` and ``escape_offsets`` only the ``C - 1`` inner entries
  (the first is 0, the last the array's length).

Cost beyond the order-0 exponent entropy: the frequency quantization (~0.003 bits per exponent at
precision 15), ~72 bytes per chunk (64 bytes of states; the states' initial 31 bits are not used),
the pad pairs of the last round (~2 bits each), ``K + 2 A`` bytes of table per tensor, escapes (8 raw
bits for exponents outside the 15 most frequent: about 1 in 10**4 weights).

:func:`decode_into` decodes chunk by chunk, a piece of 256 rounds at a time into an 8 KB scratch, and merges
straight into the bf16 output (the GIL released: a thread can decode while torch computes). :func:`decode_reference` is the
same format written as plainly as possible (Python ints, one pair at a time) and is what the tests
hold the fast decoder and the kernels to. :func:`decode_format2` reads format 2 (32-bit states, 16-bit
words, a refill test after every pair) for converting old files.

The package, one job a module: :mod:`.table` (the constants, the table and the stream), :mod:`.encode` (the
encoder, the bit split and the storage a re-encoded tensor is written into), :mod:`.decode` (the decoders' Python
API, the reference decoder and the kernel path's arrays), :mod:`.format2` (the reader of format 2), and the compiled
CPU codec they call: :mod:`.backend` picks :mod:`.native` (``native.c``, the C codec built with the system's C
compiler, loaded with ctypes) or, where no compiler is found, :mod:`.numba_codec` (its numba twin).
"""
from core.neuzip.pairs.decode import decode, decode_into, decode_reference, kernel_args, segment_index, stream_arrays
from core.neuzip.pairs.encode import EncodeScratch, StreamStore, encode, split_into
from core.neuzip.pairs.format2 import decode_format2
from core.neuzip.pairs.table import (CHUNK_MULTIPLE, DEFAULT_CHUNK, LANES, MAX_DIRECT, PRECISION, ROUND, PairStream,
                                     PairTable, build_table, pair_frequencies, round_chunk_size, table_from_histogram)

__all__ = ["LANES", "ROUND", "CHUNK_MULTIPLE", "PRECISION", "DEFAULT_CHUNK", "MAX_DIRECT", "PairTable",
           "PairStream", "pair_frequencies", "build_table", "table_from_histogram", "encode", "decode",
           "decode_into", "decode_reference", "decode_format2", "kernel_args", "segment_index", "stream_arrays",
           "split_into", "round_chunk_size", "StreamStore", "EncodeScratch"]
