"""Read and validate safetensors headers without loading weights.

A safetensors file is ``u64 little-endian header length N`` + ``N bytes of JSON`` + the tensor data.
We check that the header parses and that the file is exactly as long as the header says, which catches
truncated downloads and most corruption before ``transformers`` ever sees the file.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

from core.errors import ModelLoadError

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def read_header(path: Path) -> dict:
    """The parsed header ``{name: {"dtype", "shape", "data_offsets"}}`` (``__metadata__`` removed)."""
    path = Path(path)
    fix = f"delete {path} and download or convert it again."
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise ModelLoadError(f"{path.name} is not a safetensors file (too short).", fix=fix)
            (n,) = struct.unpack("<Q", raw)
            if n > min(size - 8, 100 * 1024**2):
                raise ModelLoadError(f"{path.name} is corrupt: its header length {n} exceeds the file.", fix=fix)
            header = json.loads(fh.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path.name} is corrupt: its header is not valid JSON.", fix=fix) from exc
    if not isinstance(header, dict):
        raise ModelLoadError(f"{path.name} is corrupt: unexpected header.", fix=fix)
    header.pop("__metadata__", None)
    end = 0
    for name, info in header.items():
        try:
            start, stop = info["data_offsets"]
            numel = 1
            for d in info["shape"]:
                numel *= int(d)
            expected = numel * _DTYPE_BYTES.get(info["dtype"], 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"{path.name} is corrupt: bad entry for {name!r}.", fix=fix) from exc
        if expected and stop - start != expected:
            raise ModelLoadError(f"{path.name} is corrupt: {name!r} has the wrong byte count.", fix=fix)
        end = max(end, stop)
    if 8 + n + end != size:
        raise ModelLoadError(f"{path.name} is truncated or corrupt ({size} bytes, header says {8 + n + end}).",
                             fix=fix)
    return header


def summarize(paths: list[Path]) -> dict:
    """Parameter count, dtypes and bytes of a set of safetensors files, from headers only."""
    params, dtypes, nbytes = 0, {}, 0
    for p in paths:
        for info in read_header(p).values():
            numel = 1
            for d in info["shape"]:
                numel *= int(d)
            params += numel
            dtypes[info["dtype"]] = dtypes.get(info["dtype"], 0) + numel
        nbytes += Path(p).stat().st_size
    main = max(dtypes, key=dtypes.get) if dtypes else None
    return {"parameters": params, "dtype": main, "size_bytes": nbytes}
