"""Save and load NeuZip-compressed tensors as one safetensors file with codec metadata and a checksum.

File layout
-----------
A safetensors file whose tensors are the stored arrays, named ``"{tensor name}::{part}"`` with
``part`` in ``symbols, counts, states, offsets, words, escapes, escape_offsets, fields, scales``
(:meth:`core.neuzip.CompressedTensor.arrays`; unsigned arrays are stored
as the signed integer type of the same width, bit for bit), and whose string metadata holds

- ``format``: ``"layerwise-neuzip"``, ``version``: ``"3"`` (the exponent stream of
  :mod:`core.neuzip.pairs`, format 3: ``states`` uint64, ``words`` uint32);
- ``codec``: JSON ``{tensor name: CompressedTensor.metadata()}``;
- ``sha256``: hex digest over the codec JSON and every array (names sorted, raw bytes).

Older files still load: each tensor's exponents are decoded and re-encoded in format 3, with a
``UserWarning`` saying so (save the result again to keep the new format). Version 1: exponents in
:mod:`core.neuzip.rans` format (parts ``symbols, freqs, states, offsets, words``, 1-D ``states``);
version 2: format 2 of the pair stream (the parts of version 3, ``states`` uint32 and ``words``
uint16; :func:`core.neuzip.pairs.decode_format2`).

Writes go to a temporary file in the target folder and are renamed into place, so a failed save
leaves no half-written file. Any problem reading a file (truncated, tampered, not a NeuZip
checkpoint) raises :class:`core.errors.BadInputError`.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from typing import Iterator

from safetensors.torch import save_file

from core.errors import BadInputError, LayerwiseError
from core.neuzip import pairs, rans
from core.neuzip.codec import CompressedTensor, check_params
from core.files import atomic_write
from core.neuzip.streaming import SafetensorsFile
from kernels.neuzip_bits import packed_length

__all__ = ["save_compressed", "load_compressed", "stream_compressed"]

FORMAT = "layerwise-neuzip"
VERSION = "3"
READABLE_VERSIONS = ("1", "2", "3")
_SIGNED = {np.dtype(np.uint8): np.uint8, np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32,
           np.dtype(np.uint64): np.int64}
_PART_DTYPES = {"symbols": np.uint8, "freqs": np.uint32, "counts": np.uint16, "states": np.uint64,
                "offsets": np.uint32, "words": np.uint32, "escapes": np.uint8, "escape_offsets": np.uint32,
                "fields": np.uint8, "scales": np.uint8}
_OLD_PART_DTYPES = {**_PART_DTYPES, "states": np.uint32, "words": np.uint16}  # versions 1 and 2


def _digest(codec_json: str, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(codec_json.encode())
    for name in sorted(arrays):
        h.update(name.encode() + b"\0")
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def save_compressed(path: str | os.PathLike, tensors: dict[str, CompressedTensor] | CompressedTensor) -> Path:
    """Write compressed tensors to ``path`` atomically.

    Parameters
    ----------
    path : target file (its folder must exist)
    tensors : ``{name: CompressedTensor}``, or one tensor (saved under the name ``"tensor"``)

    Returns
    -------
    The path written.
    """
    if isinstance(tensors, CompressedTensor):
        tensors = {"tensor": tensors}
    if not tensors:
        raise BadInputError("nothing to save: no compressed tensors given.")
    for name in tensors:
        if "::" in name:
            raise BadInputError(f"tensor name {name!r} may not contain '::'.")
    path = Path(path)
    if not path.parent.is_dir():
        raise BadInputError(f"folder {path.parent} does not exist.", fix="create it first")
    arrays = {f"{name}::{part}": a for name, ct in tensors.items() for part, a in ct.arrays().items()}
    codec_json = json.dumps({name: ct.metadata() for name, ct in tensors.items()}, sort_keys=True)
    meta = {"format": FORMAT, "version": VERSION, "codec": codec_json, "sha256": _digest(codec_json, arrays)}
    stored = {k: torch.from_numpy(np.ascontiguousarray(a).view(_SIGNED[a.dtype])) for k, a in arrays.items()}
    return atomic_write(path, lambda tmp: save_file(stored, str(tmp), metadata=meta))


def _corrupt(path: Path, why: str) -> BadInputError:
    return BadInputError(f"{path} is not a valid NeuZip checkpoint: {why}.",
                         fix="re-create it with save_compressed (the file is truncated, modified or of another kind)")


def load_compressed(path: str | os.PathLike) -> dict[str, CompressedTensor]:
    """Read a file written by :func:`save_compressed`, verifying its checksum and every stream.

    Returns
    -------
    ``{name: CompressedTensor}``

    Raises
    ------
    BadInputError
        Missing, truncated or tampered file, or not a NeuZip checkpoint.
    """
    return dict(stream_compressed(path))


def stream_compressed(path: str | os.PathLike) -> Iterator[tuple[str, CompressedTensor]]:
    """The tensors of a file written by :func:`save_compressed`, one at a time (``(name, CompressedTensor)``, in
    name order): the whole file is never in memory at once, only the tensor being read. The file is read twice, one
    array at a time: first to verify its checksum (nothing is yielded from a tampered file), then to rebuild each
    tensor (its streams verified). Plain reads, no memory mapping: no file pages count in the process's RSS.

    Raises
    ------
    BadInputError
        Missing, truncated or tampered file, or not a NeuZip checkpoint (before the first tensor when the checksum
        or the metadata is wrong; at the tensor when its contents are inconsistent).
    """
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"{path} does not exist.", fix="check the path")
    try:
        f = SafetensorsFile(path)
    except Exception as exc:  # a header that does not parse, or bytes past the end of the file
        raise _corrupt(path, f"cannot read it as safetensors ({exc})") from None
    meta = f.metadata
    if meta.get("format") != FORMAT:
        raise _corrupt(path, "no NeuZip metadata")
    version = meta.get("version")
    if version not in READABLE_VERSIONS:
        raise _corrupt(path, f"unsupported version {version!r} (this Layerwise reads versions "
                             f"{', '.join(READABLE_VERSIONS)})")
    codec_json = meta.get("codec", "")
    dtypes = _PART_DTYPES if version == VERSION else _OLD_PART_DTYPES
    try:
        parts = {k: dtypes[k.rsplit("::", 1)[1]] for k in f.entries}
    except (KeyError, IndexError):
        raise _corrupt(path, "unexpected tensors") from None
    h = hashlib.sha256(codec_json.encode())
    for key in sorted(parts):  # the checksum first, one array at a time
        h.update(key.encode() + b"\0")
        h.update(f.array(key, np.uint8))
    if h.hexdigest() != meta.get("sha256"):
        raise _corrupt(path, "checksum mismatch")
    try:
        codec = json.loads(codec_json)
        rebuild = {"1": _rebuild_version_1, "2": _rebuild_version_2, VERSION: _rebuild}[version]
    except (KeyError, TypeError, ValueError) as exc:
        raise _corrupt(path, f"inconsistent contents ({exc})") from None
    if version != VERSION:
        warnings.warn(f"NeuZip: {path} is a version {version} checkpoint; its exponent streams were converted "
                      f"to version {VERSION} in memory (save_compressed writes version {VERSION}).",
                      UserWarning, stacklevel=2)
    by_tensor: dict[str, list[str]] = {}
    for key in parts:
        by_tensor.setdefault(key.rsplit("::", 1)[0], []).append(key)
    for name in sorted(codec):
        try:
            arrays = {key: f.array(key, parts[key]) for key in by_tensor.get(name, ())}
            ct = rebuild(name, codec[name], arrays)
        except (KeyError, TypeError, ValueError, LayerwiseError) as exc:
            raise _corrupt(path, f"inconsistent contents ({exc})") from None
        yield name, ct


def _rebuild(name: str, m: dict, arrays: dict[str, np.ndarray]) -> CompressedTensor:
    m, table, offsets, escape_offsets = _pair_parts(name, m, arrays)
    stream = pairs.PairStream(table, arrays[f"{name}::states"], offsets, arrays[f"{name}::words"],
                              arrays[f"{name}::escapes"], escape_offsets, m["numel"], int(m["chunk_size"]))
    return _finish_rebuild(name, m, stream, arrays)


def _pair_parts(name: str, m: dict, arrays: dict[str, np.ndarray]) -> tuple:
    """Versions 2 and 3: the metadata with its defaults, the table and the full chunk offset arrays."""
    def part(p: str) -> np.ndarray:
        return arrays[f"{name}::{p}"]

    m = {"mantissa_bits": 7, "block_size": None, "chunk_size": pairs.DEFAULT_CHUNK, "precision": pairs.PRECISION,
         "source_dtype": "bfloat16", "note": None, **m}
    m["numel"] = int(np.prod(m["shape"], dtype=np.int64))
    table = pairs.PairTable(part("symbols"), part("counts"), int(m["precision"]))
    offsets = np.concatenate([[0], part("offsets"), [part("words").size]]).astype(np.uint32)
    escape_offsets = np.concatenate([[0], part("escape_offsets"), [part("escapes").size]]).astype(np.uint32)
    return m, table, offsets, escape_offsets


def _rebuild_version_2(name: str, m: dict, arrays: dict[str, np.ndarray]) -> CompressedTensor:
    """A version-2 tensor (format 2 of the pair stream), decoded and re-encoded in format 3 with its chunk size
    rounded up to a multiple of 32."""
    m, table, offsets, escape_offsets = _pair_parts(name, m, arrays)
    exponents = pairs.decode_format2(table, arrays[f"{name}::states"], offsets, arrays[f"{name}::words"],
                                     arrays[f"{name}::escapes"], escape_offsets, m["numel"], int(m["chunk_size"]))
    return _finish_rebuild(name, m, pairs.encode(exponents, chunk_size=pairs.round_chunk_size(m["chunk_size"])), arrays)


def _rebuild_version_1(name: str, m: dict, arrays: dict[str, np.ndarray]) -> CompressedTensor:
    """A version-1 tensor (exponents in :mod:`core.neuzip.rans` format), re-encoded in format 3."""
    def part(p: str) -> np.ndarray:
        return arrays[f"{name}::{p}"]

    table = rans.RansTable(part("symbols"), part("freqs"), int(m["precision"]))
    old = rans.RansStream(table, part("states"), part("offsets"), part("words"), int(m["numel"]),
                          int(m["chunk_size"]))
    old.validate()
    stream = pairs.encode(rans.decode(old, validated=True))
    return _finish_rebuild(name, m, stream, arrays)


def _finish_rebuild(name: str, m: dict, stream: pairs.PairStream, arrays: dict[str, np.ndarray]) -> CompressedTensor:
    def part(p: str) -> np.ndarray:
        return arrays[f"{name}::{p}"]

    scales = arrays.get(f"{name}::scales")
    ct = CompressedTensor(tuple(m["shape"]), int(m["mantissa_bits"]), m["block_size"], stream,
                          torch.from_numpy(part("fields")),
                          None if scales is None else torch.from_numpy(scales),
                          m["source_dtype"], m["note"])
    if any(int(d) < 0 for d in ct.shape) or int(np.prod(ct.shape, dtype=np.int64)) != ct.numel or ct.numel < 1:
        raise ValueError(f"{name}: shape does not match the element count")
    check_params(ct.mantissa_bits, ct.block_size)
    stream.validate()
    if ct.fields.numel() != packed_length(ct.numel, ct.mantissa_bits):
        raise ValueError(f"{name}: wrong number of packed fields")
    if (ct.scales is None) != (ct.block_size is None) or (
            ct.scales is not None and ct.scales.numel() != -(-ct.numel // ct.block_size)):
        raise ValueError(f"{name}: wrong number of block scales")
    return ct
