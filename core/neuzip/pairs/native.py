"""The C codec of format 3 (``native.c``): built once with the system's C compiler into a small shared library, loaded
with ctypes (each call releases the GIL), and wrapped with the signatures :mod:`core.neuzip.pairs.backend` gives.

Why a C library: importing numba costs a process about 140 MiB of RSS and its first compiled call about 70 MiB more
(LLVM), more than NeuZip saves on a 135 M-parameter model; this library costs a few hundred KB, and its first call is
as fast as the others. The build takes about a second, on the first use after an install or an edit of
``native.c``: the library is named after a hash of the source, the flags, the compiler and the CPU's instruction
sets (``-march=native``), kept in this package's ``__pycache__`` (or, where that cannot be written, in
``$LAYERWISE_HOME/native``), written under a temporary name and renamed into place (two processes building at once
both succeed). ``python -m core neuzip build`` builds it ahead of time (for an install whose package folder becomes
read-only).

:func:`library` returns the loaded library, or raises :class:`NativeUnavailable` with the reason (no C compiler, a
failed build); :mod:`core.neuzip.pairs.backend` then falls back to the numba twin.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

__all__ = ["SOURCE", "FLAGS", "NativeUnavailable", "library", "library_path", "build", "build_report", "compiler"]

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ("-O3", "-march=native", "-fno-tree-slp-vectorize", "-fPIC", "-shared", "-ffp-contract=off", "-fno-strict-aliasing")
_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None


class NativeUnavailable(RuntimeError):
    """The C codec cannot be built or loaded here (the message says why)."""


def compiler() -> str | None:
    """The C compiler used: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH (None: none found)."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc) or cc
    return next((p for p in map(shutil.which, ("cc", "gcc", "clang")) if p), None)


def _cpu_flags() -> str:
    """This CPU's instruction-set flags (``-march=native`` compiles for them), so a library built on one CPU is never
    loaded on another that lacks an instruction it uses."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def library_path(cc: str | None = None) -> Path:
    """Where the library for the current source, flags, compiler and CPU is (or will be) kept."""
    cc = cc or compiler() or "cc"
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + cc.encode()
                         + _cpu_flags().encode() + platform.machine().encode()).hexdigest()[:16]
    name = f"neuzip-native-{key}.so"
    local = SOURCE.parent / "__pycache__"
    for folder in (local, _home_folder()):
        if (folder / name).is_file():
            return folder / name
    return (local if _writable(local) else _home_folder()) / name


def _home_folder() -> Path:
    from core.paths import home_path

    return home_path() / "native"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return os.access(folder, os.W_OK)
    except OSError:
        return False


def build(force: bool = False) -> Path:
    """Compile ``native.c`` into the library (unless it is there already and ``force`` is False); returns its path.

    Raises
    ------
    NativeUnavailable
        No C compiler, or the compiler failed (its message is kept).
    """
    cc = compiler()
    if cc is None:
        raise NativeUnavailable("no C compiler found (set CC, or install gcc or clang)")
    path = library_path(cc)
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        run = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise NativeUnavailable(f"{cc} failed to build {SOURCE.name}: {(run.stderr or run.stdout).strip()[-2000:]}")
        os.replace(tmp, path)
    except OSError as exc:
        raise NativeUnavailable(f"cannot build {SOURCE.name} with {cc}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise NativeUnavailable(f"{cc} took over 300 s to build {SOURCE.name}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def build_report(force: bool = False) -> dict:
    """Build (or find) the library and load it once: ``{"built": True, "library", "bytes", "compiler", "flags",
    "seconds"}``, or ``{"built": False, "reason"}`` where it cannot be built (the numba twin then runs)."""
    import time

    t0 = time.perf_counter()
    try:
        path = build(force=force)
        library()
    except NativeUnavailable as exc:
        return {"built": False, "reason": str(exc)}
    return {"built": True, "library": str(path), "bytes": path.stat().st_size, "compiler": compiler(),
            "flags": list(FLAGS), "seconds": round(time.perf_counter() - t0, 3)}


_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "nz_decode_range": (_I, [_P, _I, _P, _P, _P, _P, _I, _I, _I, _I, _P, _P, _I, _P, _P, _P, _I, _I, _I, _P, _P]),
    "nz_segment_index": (_I, [_P, _I, _P, _P, _P, _I, _I, _I, _P, _P, _I, _P, _P, _P, _I]),
    "nz_split": (None, [_P, _I, _I, _P, _P, _P]),
    "nz_encode": (_I, [_P, _I, _P, _I, _I, _P, _P, _I, _P, _P, _P, _I, _P, _I, _P]),
    "nz_words_bound": (_I, [_I, _I]),
    "nz_tables": (_I, [_P, _P, _I, _I, _P, _P]),
    "nz_format2_pairs": (_I, [_P, _P, _P, _I, _P, _P, _P, _I, _I, _P]),
}


def library() -> ctypes.CDLL:
    """The loaded C codec (built first when needed), the same object for the whole process."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                path = build()
                try:
                    lib = ctypes.CDLL(str(path))
                except OSError as exc:
                    raise NativeUnavailable(f"cannot load {path}: {exc}") from None
                for name, (restype, argtypes) in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                _loaded = lib
    return _loaded


def _ptr(a: np.ndarray | None):
    """The address of a C-contiguous array's data (None: a NULL pointer)."""
    if a is None or a.size == 0:
        return None
    if not a.flags.c_contiguous:
        raise ValueError("the C codec takes C-contiguous arrays")
    return a.ctypes.data


class NativeCodec:
    """The C codec behind the signatures of :mod:`core.neuzip.pairs.backend` (numpy arrays in and out; an empty array
    or None where a part is absent)."""

    name = "native"

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib

    def decode_range(self, words, states, offsets, escapes, escape_offsets, n, chunk_size, first, last, slot_pair,
                     info, marker, fields, scales, out, out_offset, k, block, field_bits, exponents_out) -> int:
        _check(states, np.uint64, offsets, np.uint32, escape_offsets, np.uint32, words, np.uint32)
        return self.lib.nz_decode_range(
            _ptr(words), words.size, _ptr(states), _ptr(offsets), _ptr(escapes), _ptr(escape_offsets), int(n),
            int(chunk_size), int(first), int(last), _ptr(slot_pair), _ptr(info), int(marker), _ptr(fields),
            _ptr(scales), _ptr(out), int(out_offset), int(k), int(block), _ptr(field_bits), _ptr(exponents_out))

    def segment_index(self, words, states, offsets, escape_offsets, n, chunk_size, segment, slot_pair, info, marker,
                      seg_states, seg_p, seg_q) -> int:
        _check(states, np.uint64, offsets, np.uint32, escape_offsets, np.uint32, seg_states, np.uint64)
        return self.lib.nz_segment_index(
            _ptr(words), words.size, _ptr(states), _ptr(offsets), _ptr(escape_offsets), int(n), int(chunk_size),
            int(segment), _ptr(slot_pair), _ptr(info), int(marker), _ptr(seg_states), _ptr(seg_p), _ptr(seg_q),
            seg_states.shape[0])

    def split(self, bits, k, exponents, fields, hist=None) -> None:
        _check(bits, np.uint16, exponents, np.uint8, fields, np.uint8)
        if hist is not None and (hist.dtype != np.int64 or hist.size != 256):
            raise ValueError("hist must be int64 with 256 entries")
        self.lib.nz_split(_ptr(bits), bits.size, int(k), _ptr(exponents), _ptr(fields), _ptr(hist))

    def encode(self, e, lookup, alpha, chunk_size, freq, cdf, pad, states, offsets, words, escapes,
               escape_offsets) -> int:
        _check(e, np.uint8, lookup, np.int64, freq, np.int64, cdf, np.int64, states, np.uint64, offsets, np.uint32,
               words, np.uint32, escapes, np.uint8, escape_offsets, np.uint32)
        return self.lib.nz_encode(_ptr(e), e.size, _ptr(lookup), int(alpha), int(chunk_size), _ptr(freq), _ptr(cdf),
                                  int(pad), _ptr(states), _ptr(offsets), _ptr(words), words.size, _ptr(escapes),
                                  escapes.size, _ptr(escape_offsets))

    def words_bound(self, n: int, chunk_size: int) -> int:
        return self.lib.nz_words_bound(int(n), int(chunk_size))

    def tables(self, freq, decoded, alpha, precision, slot_pair, info) -> None:
        _check(freq, np.int64, decoded, np.int64, slot_pair, np.uint8, info, np.uint64)
        if slot_pair.size != 1 << precision or info.size != freq.size:
            raise ValueError("slot_pair must have 2**precision entries and info one per pair")
        if self.lib.nz_tables(_ptr(freq), _ptr(decoded), int(alpha), int(precision), _ptr(slot_pair),
                              _ptr(info)) != 0:
            raise ValueError("corrupt table: the pair frequencies do not fill the slots")

    def format2_pairs(self, words, states, offsets, slot_pair, freq, cdf, n, chunk_size, out) -> int:
        _check(words, np.uint16, states, np.int64, offsets, np.int64, slot_pair, np.uint8, freq, np.int64, cdf,
               np.int64, out, np.int64)
        return self.lib.nz_format2_pairs(_ptr(words), _ptr(states), _ptr(offsets), states.shape[0], _ptr(slot_pair),
                                         _ptr(freq), _ptr(cdf), int(n), int(chunk_size), _ptr(out))


def _check(*pairs) -> None:
    for a, dtype in zip(pairs[::2], pairs[1::2]):
        if a is not None and a.dtype != dtype:
            raise TypeError(f"expected {np.dtype(dtype).name}, got {a.dtype}")
