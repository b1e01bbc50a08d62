"""The NeuZip bf16 codec: exponents entropy-coded in pairs with chunked rANS, sign + mantissa kept raw.

``compress(tensor, mantissa_bits=7, block_size=None)`` returns a :class:`CompressedTensor`:

- ``mantissa_bits = 7`` is lossless, bit for bit (NaN payloads, infinities, signed zeros and
  subnormals included);
- ``mantissa_bits in {0, 1, 3}`` keeps the top ``k`` mantissa bits, rounded to nearest (ties to
  even) with the carry going into the exponent: ``|x_hat - x| <= 2**-(k+1) |x|`` for normal ``x``
  (see :mod:`kernels.neuzip_bits`), optionally after a per-block normaliser
  (:mod:`core.neuzip.normaliser`).

Stored parts of a compressed tensor
-----------------------------------
- ``exponents``: a :class:`core.neuzip.pairs.PairStream` (codec format 3: table, chunk states,
  offsets, words); files of formats 1 (:mod:`core.neuzip.rans`) and 2 are converted when loaded;
- ``fields``: ``(ceil(N / P),) uint8``, the packed ``1 + k`` bit sign/mantissa fields;
- ``scales``: ``(ceil(N / B),) uint8`` normaliser codes, or None;
- metadata: shape, ``k``, ``B``, chunk size, source dtype and a note.

Inputs that are not bf16 are converted (float32/float16 -> bf16 rounds the mantissa and is itself
lossy), with a ``UserWarning`` and the reason kept in ``CompressedTensor.note``.
"""
from __future__ import annotations

import json
import mmap
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from core.errors import BadInputError
from core.neuzip import pairs
from core.neuzip.normaliser import denormalise, normalise
from kernels.neuzip_bits import MANTISSA_BITS, merge_bf16, packed_length, split_bf16
from kernels.neuzip_gemv import fused_gemv
from kernels.neuzip_rans import DECODE_ROWS, decode_layout, fused_decode_bf16, multiprocessors, pair_rans_decode

__all__ = ["CompressedTensor", "DeviceArrays", "compress", "compress_reusing", "split_fields", "check_params", "to_bf16", "bf16_exact",
           "decode_workspace_bytes", "FORMAT_VERSION"]

BLOCK_SIZES = tuple(2**i for i in range(5, 11))  # 32 .. 1024
FORMAT_VERSION = 3  # of the exponent stream: 1 = core.neuzip.rans, 2 = 32-bit pair states (both read by
# conversion), 3 = core.neuzip.pairs


def decode_workspace_bytes(numel: int, chunk_size: int = pairs.DEFAULT_CHUNK,
                           precision: int = pairs.PRECISION) -> int:
    """Upper bound on the CPU temporaries of ``decompress()`` for a tensor of ``numel`` values
    (beyond the output): the decode table (8 bytes per slot) and the scratch of one chunk (its
    exponent pairs, 1 byte per value, and 4 bytes per value for the normaliser's float32 pass)."""
    return 8 * (1 << precision) + 5 * min(numel, chunk_size)


HUGE_OUTPUT_BYTES = 32 << 20  # decompress() outputs this large come from a huge-page mapping (see _new_output)
_HUGE_PAGE = 2 << 20


def _new_output(shape: tuple[int, ...], numel: int) -> torch.Tensor:
    """A fresh bf16 CPU tensor for ``decompress()``. From :data:`HUGE_OUTPUT_BYTES` on (glibc maps allocations
    of 32 MiB and more afresh, so every 4 KB page faults on its first write: 0.85 ns per weight, as long as the
    decoding itself) it is an anonymous mapping advised for transparent huge pages (Linux), which cut
    ``decompress()`` of a 4096x4096 tensor from 1.61 to 0.92 ns per weight on the development machine; smaller
    tensors, and systems without ``MADV_HUGEPAGE``, get ``torch.empty``. The tensor keeps its mapping alive."""
    nbytes = 2 * numel
    if nbytes < HUGE_OUTPUT_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=torch.bfloat16)
    try:
        region = mmap.mmap(-1, -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):  # no such mapping here: the ordinary allocation
        return torch.empty(shape, dtype=torch.bfloat16)
    return torch.frombuffer(region, dtype=torch.bfloat16, count=numel).view(shape)


def check_params(mantissa_bits: int, block_size: int | None) -> None:
    """Raise :class:`BadInputError` unless ``mantissa_bits`` and ``block_size`` are usable together."""
    if isinstance(mantissa_bits, bool) or not isinstance(mantissa_bits, numbers.Integral) \
            or int(mantissa_bits) not in MANTISSA_BITS:
        raise BadInputError(f"mantissa_bits must be one of {MANTISSA_BITS}, got {mantissa_bits!r}.",
                            fix="use 7 for lossless, or 3, 1 or 0 to truncate the mantissa")
    if block_size is None:
        return
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) \
            or int(block_size) not in BLOCK_SIZES:
        raise BadInputError(f"block_size must be a power of two from 32 to 1024, got {block_size!r}.",
                            fix="pick one of " + ", ".join(map(str, BLOCK_SIZES)) + ", or None")
    if mantissa_bits == 7:
        raise BadInputError("the block normaliser only applies to lossy compression (mantissa_bits < 7).",
                            fix="leave block_size=None for lossless compression")


def to_bf16(tensor: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """Flatten to ``(N,) bfloat16``; a conversion comes back with a note (and is never silent).

    Raises
    ------
    BadInputError
        For a non-tensor, an empty tensor or a non-floating dtype.
    """
    if not isinstance(tensor, torch.Tensor):
        raise BadInputError(f"expected a torch.Tensor, got {type(tensor).__name__}.")
    if tensor.numel() == 0:
        raise BadInputError(f"cannot compress an empty tensor (shape {tuple(tensor.shape)}).",
                            fix="pass a tensor with at least one element")
    if not tensor.is_floating_point():
        raise BadInputError(f"NeuZip compresses floating-point weights, got {tensor.dtype}.",
                            fix="convert the tensor to bfloat16 first")
    x = tensor.detach().contiguous().reshape(-1)
    if x.dtype == torch.bfloat16:
        return x, None
    y = x.to(torch.bfloat16)
    dtype = str(x.dtype).removeprefix("torch.")
    if bf16_exact(x, y):
        note = (f"converted from {dtype} to bfloat16 before compression; the conversion is lossy in "
                "general, but every value here was already a bfloat16 value, so nothing was lost")
    else:
        note = (f"converted from {dtype} to bfloat16 before compression; this conversion rounds the "
                "mantissa to 7 bits and is itself lossy (it changed some values)")
    return y, note


def bf16_exact(x: torch.Tensor, y: torch.Tensor | None = None) -> bool:
    """True when every value of ``x`` survives conversion to bf16 (NaNs count as surviving)."""
    y = x.to(torch.bfloat16) if y is None else y
    back = y.to(x.dtype)
    return bool(((back == x) | (torch.isnan(back) & torch.isnan(x))).all())


@dataclass
class DeviceArrays:
    """Every stored array of a :class:`CompressedTensor` as the tensors the kernel path decodes from, all on one
    device (:meth:`CompressedTensor.device_arrays`). The exponent stream as :func:`core.neuzip.pairs.stream_arrays`
    gives it: states, word offsets and escape offsets per *segment* of ``segment`` weights (on a CUDA device a
    layout that fills it, :func:`kernels.neuzip_rans.decode_layout`; elsewhere the chunks themselves, sharing
    memory with the stored arrays), the words and escapes, and the two decode tables (``slot_pair``, 32 KB, and
    ``pair_info``, at most 2 KB: built once, kept with the weight); the packed sign/mantissa ``fields`` and the
    normaliser ``scales``. ``rows``: segments per program of the decode kernel.
    :class:`core.neuzip.modules.CompressedLinear` keeps them as buffers, so ``model.to(device)`` moves them."""

    states: torch.Tensor
    offsets: torch.Tensor
    words: torch.Tensor
    escapes: torch.Tensor
    escape_offsets: torch.Tensor
    slot_pair: torch.Tensor
    pair_info: torch.Tensor
    fields: torch.Tensor
    scales: torch.Tensor | None = None
    segment: int | None = None
    rows: int = DECODE_ROWS

    NAMES = ("states", "offsets", "words", "escapes", "escape_offsets", "slot_pair", "pair_info", "fields", "scales")
    LAYOUT = ("states", "offsets", "escape_offsets")  # the arrays that depend on the segment length

    def items(self) -> list[tuple[str, torch.Tensor | None]]:
        return [(name, getattr(self, name)) for name in self.NAMES]

    @property
    def device(self) -> torch.device:
        return self.states.device

    @property
    def nbytes(self) -> int:
        """Bytes these tensors take (more than the stored bytes: offsets widened to int64 and one set per segment,
        the two decode tables)."""
        return sum(t.numel() * t.element_size() for _, t in self.items() if t is not None)

    @property
    def index_bytes(self) -> int:
        """Bytes of the segment layout (states and both offsets per segment)."""
        return sum(getattr(self, name).numel() * getattr(self, name).element_size() for name in self.LAYOUT)


@dataclass
class CompressedTensor:
    """A NeuZip-compressed bf16 tensor. ``decompress()`` gives back ``(*shape,) bfloat16``."""

    shape: tuple[int, ...]
    mantissa_bits: int
    block_size: int | None
    exponents: pairs.PairStream
    fields: torch.Tensor
    scales: torch.Tensor | None = None
    source_dtype: str = "bfloat16"
    note: str | None = None
    _meta_cache: str | None = field(default=None, repr=False, compare=False)

    @property
    def numel(self) -> int:
        """Number of weights."""
        return self.exponents.n

    @property
    def lossless(self) -> bool:
        """True when the bf16 values come back bit for bit."""
        return self.mantissa_bits == 7

    def metadata(self) -> dict:
        """The JSON-able codec metadata (everything but the arrays): ``shape``, and ``mantissa_bits``,
        ``block_size``, ``chunk_size``, ``source_dtype``, ``note`` when they differ from their defaults
        (7, None, 2**17, bfloat16, None); stored with each tensor."""
        t = self.exponents
        m = {"shape": list(self.shape)}
        if self.mantissa_bits != 7:
            m["mantissa_bits"] = self.mantissa_bits
        if self.block_size is not None:
            m["block_size"] = self.block_size
        if t.chunk_size != pairs.DEFAULT_CHUNK:
            m["chunk_size"] = t.chunk_size
        if self.source_dtype != "bfloat16":
            m["source_dtype"] = self.source_dtype
        if self.note:
            m["note"] = self.note
        return m

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored array by part name (exponent stream, fields, scales); of the two chunk offset
        arrays only the inner entries (the first is 0, the last the array's length)."""
        t = self.exponents
        parts = {"symbols": t.table.symbols, "counts": t.table.counts, "states": t.states,
                 "offsets": t.offsets[1:-1], "words": t.words, "escapes": t.escapes,
                 "escape_offsets": t.escape_offsets[1:-1], "fields": self.fields.cpu().numpy()}
        if self.scales is not None:
            parts["scales"] = self.scales.cpu().numpy()
        return parts

    @property
    def nbytes(self) -> int:
        """Every stored byte: all arrays plus the JSON metadata."""
        if self._meta_cache is None:
            self._meta_cache = json.dumps(self.metadata(), separators=(",", ":"))
        arrays = self.exponents.nbytes + self.fields.numel()
        if self.scales is not None:
            arrays += self.scales.numel()
        return arrays + len(self._meta_cache.encode())

    @property
    def bits_per_weight(self) -> float:
        """``8 * nbytes / numel``."""
        return 8.0 * self.nbytes / self.numel

    def decompress(self, out: torch.Tensor | None = None, device: torch.device | str | None = None
                   ) -> torch.Tensor:
        """Decode to bf16.

        Parameters
        ----------
        out : optional bfloat16 tensor with ``numel`` elements (any shape) to write into and return
            (a reused buffer); its device wins over ``device``
        device : where the bit merge runs and the result lives (default: CPU)

        Returns
        -------
        (*shape,) bfloat16, or ``out`` reshaped to ``shape``

        Notes
        -----
        On CPU one numba call (GIL released) decodes chunk after chunk into a scratch of one chunk
        and writes the bf16 bits straight into ``out`` (:func:`core.neuzip.pairs.decode_into`); the
        temporaries stay below :func:`decode_workspace_bytes`. On CUDA the whole tensor is decoded
        by one Triton launch, then merged by the bit-merge kernel.
        """
        if out is not None:
            if out.dtype != torch.bfloat16 or out.numel() != self.numel:
                raise ValueError(f"out must be bfloat16 with {self.numel} elements")
            device = out.device
        device = torch.device("cpu") if device is None else torch.device(device)
        if device.type != "cpu":
            result = self._decode_on_device(device)
            if out is None:
                return result.view(self.shape)
            out.view(-1).copy_(result)
            return out.view(self.shape)
        if out is None:
            out = _new_output(self.shape, self.numel)
        target = out if out.is_contiguous() else torch.empty(self.shape, dtype=torch.bfloat16)
        bits = target.view(-1).view(torch.int16).numpy().view(np.uint16)
        scales = None if self.scales is None else self.scales.numpy()
        pairs.decode_into(self.exponents, self.fields.numpy(), self.mantissa_bits, bits, scales, self.block_size)
        if target is not out:
            out.copy_(target.view(out.shape))
        return out.view(self.shape)

    def device_layout(self, device: torch.device | str) -> int | None:
        """The segment length the kernel path decodes this weight with on ``device``
        (:func:`kernels.neuzip_rans.decode_layout` of its multiprocessor count), None off CUDA (the chunks)."""
        sms = multiprocessors(device)
        return None if sms is None else decode_layout(self.numel, self.exponents.chunk_size, sms)

    def device_arrays(self, device: torch.device | str | None = None, segment: int | None = None) -> DeviceArrays:
        """The stored arrays as :class:`DeviceArrays` on ``device`` (default: the CPU, sharing memory with this
        tensor's arrays where the dtype allows), laid out in segments of ``segment`` weights (None: the chunks;
        a segment length runs one pass over the stream on the CPU, which also checks it)."""
        arrays = {k: torch.from_numpy(v) for k, v in pairs.stream_arrays(self.exponents, segment).items()}
        arrays = DeviceArrays(**arrays, fields=self.fields, scales=self.scales, segment=segment)
        if device is None or torch.device(device) == torch.device("cpu"):
            return arrays
        moved = {k: None if t is None else t.to(device) for k, t in arrays.items()}
        return DeviceArrays(**moved, segment=segment, rows=arrays.rows)

    def decode_arrays(self, arrays: DeviceArrays, errors: torch.Tensor | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
        """Whole-tensor decode from ``arrays`` with the kernel ops, on their device: ``(N,) bfloat16``, written into
        ``out`` when given (contiguous bf16 of N elements, e.g. the shared decompression buffer). On CUDA a lossless
        weight (the app's default) is decoded and merged by one kernel straight into ``out``; otherwise (a lossy or normalised weight, an odd
        size, the fused kernel not chosen there) the Triton exponent decode, then the bit merge (their PyTorch twins
        off CUDA). Reads nothing from the host and waits for nothing when ``errors`` (an int32 device flag) is
        given: a corrupt segment sets it; without it, the check is made at once (a ``ValueError``). Which kernel runs
        is the kernels' choice: :func:`kernels.neuzip_rans.fused_decode_bf16` answers None where it does not apply."""
        t = self.exponents
        stream = (arrays.states, arrays.offsets, arrays.words, arrays.slot_pair, arrays.pair_info, arrays.escapes,
                  arrays.escape_offsets, t.table.marker, t.n, t.chunk_size, t.table.precision)
        weight = fused_decode_bf16(*stream, arrays.fields, mantissa_bits=self.mantissa_bits,
                                   scaled=arrays.scales is not None, segment=arrays.segment, errors=errors, out=out,
                                   block=arrays.rows)
        if weight is not None:  # one launch, straight into ``out``
            return weight
        exponent = pair_rans_decode(*stream, segment=arrays.segment, errors=errors, block=arrays.rows)
        weight = self._finish(exponent, arrays.fields, arrays.scales)
        return weight if out is None else out.copy_(weight)

    def gemv_arrays(self, arrays: DeviceArrays, vec: torch.Tensor, errors: torch.Tensor | None = None
                    ) -> torch.Tensor | None:
        """``W @ vec`` as ``(rows,) float32`` straight from ``arrays`` by the fused exponent decode + matrix-vector
        kernel (the bf16 weight is never written), or None where it does not apply: a lossy or normalised weight,
        rows not a multiple of 32, ``vec`` on another device, or the kernel not chosen there (CPU tensors, a failed
        self-check, ``LAYERWISE_KERNELS=ref``); the caller then decodes the weight and multiplies."""
        t = self.exponents
        if len(self.shape) != 2 or vec.numel() != self.shape[1] or vec.device != arrays.device:
            return None
        return fused_gemv(arrays.states, arrays.offsets, arrays.words, arrays.slot_pair, arrays.pair_info,
                          arrays.escapes, arrays.escape_offsets, t.table.marker, t.n, t.chunk_size, t.table.precision,
                          arrays.fields, vec, mantissa_bits=self.mantissa_bits, scaled=arrays.scales is not None,
                          segment=arrays.segment, errors=errors, block=arrays.rows)

    def _decode_on_device(self, device: torch.device) -> torch.Tensor:
        """Whole-tensor decode on ``device`` from a copy of the arrays made for this call (a weight kept on the
        device decodes from its own :class:`DeviceArrays` instead): ``(N,) bfloat16``."""
        return self.decode_arrays(self.device_arrays(device))

    def _finish(self, exponent: torch.Tensor, fields: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        """Merge decoded exponents with their fields and undo the normaliser: ``(m,) bfloat16``."""
        x = merge_bf16(exponent, fields, self.mantissa_bits)
        return x if scales is None else denormalise(x, scales, self.block_size)


def split_fields(x: torch.Tensor, mantissa_bits: int, block_size: int | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Normalise (when ``block_size``) and split bf16 values: the codec before entropy coding.

    Parameters
    ----------
    x : (N,) bfloat16

    Returns
    -------
    exponent : (N,) uint8, the symbols the rANS coder sees
    fields : (ceil(N / P),) uint8, packed sign/mantissa fields
    scales : (ceil(N / B),) uint8 normaliser codes, or None
    """
    scales = None
    if block_size is not None:
        x, scales = normalise(x, block_size)
    if x.device.type != "cpu":
        exponent, fields = split_bf16(x, mantissa_bits)
        return exponent, fields, scales
    exponent = torch.empty(x.numel(), dtype=torch.uint8)  # numba twin of split_bf16_ref, one pass
    fields = torch.empty(packed_length(x.numel(), mantissa_bits), dtype=torch.uint8)
    pairs.split_into(x.contiguous().view(torch.int16).numpy().view(np.uint16), int(mantissa_bits),
                     exponent.numpy(), fields.numpy())
    return exponent, fields, scales


def compress(tensor: torch.Tensor, mantissa_bits: int = 7, block_size: int | None = None,
             chunk_size: int | None = None) -> CompressedTensor:
    """Compress a weight tensor with NeuZip.

    Parameters
    ----------
    tensor : (...) floating tensor, non-empty; converted to bf16 with a warning when it is not bf16
    mantissa_bits : 7 (lossless) or 3, 1, 0 (mantissa rounded to that many bits)
    block_size : None, or a power of two in [32, 1024] for the per-block normaliser (k < 7 only)
    chunk_size : weights per chunk (8 interleaved rANS states each), rounded up to a multiple of 32;
        None: :data:`core.neuzip.pairs.DEFAULT_CHUNK` (2**17). Smaller chunks give a GPU more
        independent lanes and cost 72 bytes each (64 of states, 8 of offsets).

    Returns
    -------
    CompressedTensor, with ``.nbytes``, ``.shape`` and ``.decompress()``

    Raises
    ------
    BadInputError
        Empty tensor, bad ``mantissa_bits`` / ``block_size``, or NaNs with ``mantissa_bits=0``.
    """
    check_params(mantissa_bits, block_size)
    mantissa_bits, block_size = int(mantissa_bits), None if block_size is None else int(block_size)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise BadInputError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    x, note = to_bf16(tensor)
    if note:
        warnings.warn(f"NeuZip: {note}.", UserWarning, stacklevel=2)
    if mantissa_bits == 0 and bool(torch.isnan(x).any()):
        raise BadInputError("mantissa_bits=0 cannot represent NaN (it would decode as infinity).",
                            fix="use mantissa_bits >= 1 or remove the NaNs")
    exponent, fields, scales = split_fields(x, mantissa_bits, block_size)
    if chunk_size is not None:
        chunk_size = pairs.round_chunk_size(chunk_size)
    stream = pairs.encode(exponent.cpu().numpy(), chunk_size=chunk_size)
    return CompressedTensor(tuple(tensor.shape), mantissa_bits, block_size, stream,
                            fields.cpu(), None if scales is None else scales.cpu(),
                            str(tensor.dtype).removeprefix("torch."), note)


def compress_reusing(tensor: torch.Tensor, mantissa_bits: int = 7, block_size: int | None = None,
                     scratch: pairs.EncodeScratch | None = None) -> CompressedTensor:
    """:func:`compress`, with its temporaries (the exponent bytes, the encoder's words) in ``scratch``, reused from
    tensor to tensor: only the stored arrays are allocated, of their exact sizes. A model compressed layer by layer
    this way (as it is read: :mod:`core.neuzip.streaming`) leaves no freed temporaries between its layers' arrays for
    the heap to keep. Lossless bf16 CPU tensors take this path; anything else is :func:`compress` (the same result)."""
    if scratch is None or mantissa_bits != 7 or block_size is not None or not isinstance(tensor, torch.Tensor) \
            or tensor.dtype != torch.bfloat16 or tensor.device.type != "cpu" or tensor.numel() == 0:
        return compress(tensor, mantissa_bits, block_size)
    n = tensor.numel()
    bits = tensor.detach().contiguous().view(-1).view(torch.int16).numpy().view(np.uint16)
    fields = torch.empty(n, dtype=torch.uint8)
    histogram = scratch.histogram
    histogram[:] = 0
    exponents = scratch.exponents(n)
    pairs.split_into(bits, 7, exponents, fields.numpy(), histogram)
    stream = pairs.encode(exponents, scratch=scratch, histogram=histogram)
    return CompressedTensor(tuple(tensor.shape), 7, None, stream, fields)
