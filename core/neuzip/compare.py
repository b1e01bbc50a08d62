"""NeuZip against other lossless codecs and against plain bf16, measured side by side in one run.

- :data:`CODECS`: the registry of lossless codecs compared (NeuZip, ZipNN when installed, zstd, and a
  plain memory copy as the speed limit), each with its label and colour;
- :func:`codec_comparison`: bits per weight (every stored byte) and 1-thread compress / decompress
  MB/s of each codec on the same bf16 tensors, with NeuZip's bits broken down (entropy, coding loss,
  tables, chunk headers, metadata), and optionally NeuZip's lossy settings timed in the same turns.
  Its ``rows`` are what a throughput chart needs;
- :func:`forward_ratio`: the forward time of a compressed model over the bf16 model's, on one torch
  thread, for lossless and lossy settings, with and without decoding ahead;
- :func:`synthetic_weights`: Gaussian / Student-t weights of given shapes and scales (weights with
  native bf16 statistics, unlike a checkpoint de-quantized from a 4-bit GGUF).
"""
from __future__ import annotations

import copy
import importlib.util
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.codec import CompressedTensor, check_params, compress, split_fields, to_bf16
from core.neuzip.measure import entropy_bits
from core.neuzip.normaliser import denormalise
from core.progress import Progress, item_progress
from kernels.neuzip_bits import merge_bf16

__all__ = ["Codec", "CODECS", "codec_comparison", "forward_ratio", "lossy_label", "synthetic_weights",
           "truncated_reference", "zipnn_available"]


def zipnn_available() -> bool:
    """True when the optional ``zipnn`` package (a bench dependency) imports."""
    return importlib.util.find_spec("zipnn") is not None


def _zstd_available() -> bool:
    return importlib.util.find_spec("zstandard") is not None


@dataclass(frozen=True)
class Codec:
    """A lossless codec of bf16 bytes: ``make()`` returns ``(compress(x) -> blob, decompress(blob) ->
    bf16 tensor, nbytes(blob) -> int)`` for ``x: (N,) bfloat16``. A codec with lossy settings too
    (NeuZip) has ``make_lossy(k, block_size)`` of the same shape and ``lossy_colour`` for their rows."""

    name: str
    label: str
    colour: str
    available: Callable[[], bool]
    make: Callable[[], tuple[Callable, Callable, Callable]]
    note: str = ""
    make_lossy: Callable[[int, int | None], tuple[Callable, Callable, Callable]] | None = None
    lossy_colour: str = ""


def _neuzip() -> tuple[Callable, Callable, Callable]:
    return _neuzip_lossy(7, None)


def _neuzip_lossy(k: int, block_size: int | None) -> tuple[Callable, Callable, Callable]:
    def decompress(ct: CompressedTensor) -> torch.Tensor:
        return ct.decompress()

    return (lambda x: compress(x, k, block_size), decompress, lambda ct: ct.nbytes)


def truncated_reference(x: torch.Tensor, k: int, block_size: int | None) -> torch.Tensor:
    """What a lossy NeuZip round trip of ``x: (N,) bfloat16`` must give bit for bit: the normaliser and the
    mantissa rounding alone, merged back by the kernels' dispatcher (its PyTorch twin on CPU), with no entropy
    coding: ``(N,) bfloat16``."""
    exponent, fields, scales = split_fields(x, k, block_size)
    y = merge_bf16(exponent, fields, k)
    return y if scales is None else denormalise(y, scales, block_size)


def lossy_label(k: int, block_size: int | None) -> str:
    """``NeuZip k=3, B=128``: the label of a lossy NeuZip row."""
    return f"NeuZip k={k}" + (f", B={block_size}" if block_size else "")


def _zipnn() -> tuple[Callable, Callable, Callable]:
    import zipnn

    z = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16", threads=1)

    def comp(x: torch.Tensor) -> bytes:
        # ZipNN 0.5.4 reorders its input buffer in place: it gets a private copy of the bytes
        return z.compress(x.view(torch.int16).numpy().tobytes())

    def decomp(blob) -> torch.Tensor:
        out = z.decompress(blob)
        return torch.frombuffer(bytearray(out) if isinstance(out, bytes) else out, dtype=torch.int16).view(torch.bfloat16)

    return comp, decomp, len


def _zstd() -> tuple[Callable, Callable, Callable]:
    import zstandard

    c, d = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()

    def decomp(blob) -> torch.Tensor:
        return torch.frombuffer(bytearray(d.decompress(blob)), dtype=torch.int16).view(torch.bfloat16)

    return (lambda x: c.compress(x.view(torch.int16).numpy().tobytes())), decomp, len


def _memcpy() -> tuple[Callable, Callable, Callable]:
    return (lambda x: x), (lambda x: x.clone()), (lambda x: 2 * x.numel())


CODECS: dict[str, Codec] = {
    "neuzip": Codec("neuzip", "NeuZip (lossless)", "#0072B2", lambda: True, _neuzip,
                    "exponent pairs rANS-coded, 8 interleaved states, numba, decoded into a new tensor",
                    make_lossy=_neuzip_lossy, lossy_colour="#56B4E9"),
    "zipnn": Codec("zipnn", "ZipNN 0.5.4", "#E69F00", zipnn_available, _zipnn,
                   "pip install zipnn==0.5.4 (Huffman-coded exponent bytes), threads=1"),
    "zstd": Codec("zstd", "zstd -3 (raw bytes)", "#009E73", _zstd_available, _zstd, "zstandard level 3, one thread"),
    "memcpy": Codec("memcpy", "memory copy", "#000000", lambda: True, _memcpy, "torch clone of the bf16 tensor"),
}


class _OneThread:
    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)


def codec_comparison(tensors: dict[str, torch.Tensor], codecs: tuple[str, ...] = ("neuzip", "zipnn", "zstd", "memcpy"),
                     repeats: int = 5, progress: Progress | None = None,
                     lossy: tuple[tuple[int, int | None], ...] = ()) -> dict:
    """Lossless bits per weight and one-thread MB/s of each codec on the same tensors, side by side.

    Parameters
    ----------
    tensors : ``{name: tensor}`` of floating weights (converted to bf16; the result says so)
    codecs : names in :data:`CODECS`; one not installed is skipped with a note
    repeats : each (tensor, codec) is timed this many times, the codecs taking turns; the median counts
    lossy : NeuZip ``(k, block_size)`` settings with ``k < 7``, each timed as one more row in the same turns

    Returns
    -------
    dict with ``weights``, ``bytes`` (bf16), ``tensors``, ``exponent_entropy`` and ``entropy_bound``
    (bits per weight: the order-0 exponent entropy of each tensor, weighted, + 8 for sign and
    mantissa), ``rows`` (one per codec, each lossy setting right after NeuZip's lossless row: ``codec``,
    ``label``, ``colour``, ``lossless``, ``k`` and ``block_size`` (NeuZip rows; None for the others),
    ``bits_per_weight``, ``gap_percent`` over the bound (lossless codecs), ``compress_MBps``,
    ``decompress_MBps``: MB = 1e6 bytes of bf16, the codec's own API, timings summed over tensors),
    ``neuzip_breakdown`` (bits per weight: the entropy, coding loss, tables, chunk headers, metadata),
    ``skipped`` (codec -> why), ``threads`` (1) and ``note`` (a dtype conversion, or None). Every
    lossless round trip is checked bit for bit, and a lossy one bit for bit against
    :func:`truncated_reference` (the same truncation without entropy coding).
    NeuZip's coding loss counts the rANS words and the escaped bytes against the entropy.
    """
    if not tensors:
        raise BadInputError("no tensors to compare.")
    unknown = [c for c in codecs if c not in CODECS]
    if unknown:
        raise BadInputError(f"unknown codec(s) {unknown}.", fix="pick from " + ", ".join(CODECS))
    lossy = tuple((int(k), None if b is None else int(b)) for k, b in lossy)
    for k, b in lossy:
        check_params(k, b)
        if k == 7:
            raise BadInputError("a lossy setting needs k < 7 (k = 7 is NeuZip's lossless row).")
    chosen = {c: CODECS[c] for c in codecs if CODECS[c].available()}
    skipped = {c: f"not installed ({CODECS[c].note})" for c in codecs if c not in chosen}
    # one entry per row: (codec, label, colour, k, block_size, (compress, decompress, nbytes))
    entries: dict[str, tuple] = {}
    for c, codec in chosen.items():
        entries[c] = (c, codec.label, codec.colour, 7 if c == "neuzip" else None, None, codec.make())
        if c == "neuzip":
            for k, b in lossy:
                entries[lossy_label(k, b)] = (c, lossy_label(k, b), codec.lossy_colour, k, b, codec.make_lossy(k, b))
    stats = {r: {"bytes": 0, "comp": 0.0, "decomp": 0.0} for r in entries}
    parts = {"entropy": 0.0, "words": 0, "tables": 0, "chunk_headers": 0, "metadata": 0, "fields": 0}
    n_total, notes = 0, set()
    step = item_progress(progress, "timing the codecs on tensor")
    with _OneThread(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, (name, t) in enumerate(tensors.items()):
            if step:
                step(i, len(tensors), name)
            x, note = to_bf16(t.detach().cpu())
            if note:
                notes.add(str(t.dtype).removeprefix("torch."))
            n = x.numel()
            n_total += n
            bits = x.view(torch.int16)
            h = entropy_bits(np.bincount(((bits.numpy().view(np.uint16) >> 7) & 0xFF), minlength=256))
            parts["entropy"] += h * n
            blobs = {}
            for r, (c, _, _, k, b, (comp, decomp, size)) in entries.items():
                blobs[r] = blob = comp(x)
                want = bits if k in (None, 7) else truncated_reference(x, k, b).view(torch.int16)
                if not torch.equal(decomp(blob).reshape(-1).view(torch.int16), want):
                    raise RuntimeError(f"{r} did not round-trip {name} bit for bit")
                stats[r]["bytes"] += size(blob)
                if r == "neuzip":
                    s = blob.exponents
                    parts["words"] += s.words.nbytes + s.escapes.nbytes
                    parts["tables"] += s.table.nbytes
                    parts["chunk_headers"] += s.nbytes - s.words.nbytes - s.escapes.nbytes - s.table.nbytes
                    parts["fields"] += blob.fields.numel()
                    parts["metadata"] += blob.nbytes - s.nbytes - blob.fields.numel()
            # the codecs take turns within each repeat, so a change in the machine's load hits them alike
            times = {r: ([], []) for r in entries}
            for _ in range(repeats):
                for r, (*_, (comp, decomp, _)) in entries.items():
                    t0 = time.perf_counter()
                    comp(x)
                    t1 = time.perf_counter()
                    decomp(blobs[r])
                    t2 = time.perf_counter()
                    times[r][0].append(t1 - t0)
                    times[r][1].append(t2 - t1)
            for r, (tc, td) in times.items():
                stats[r]["comp"] += statistics.median(tc)
                stats[r]["decomp"] += statistics.median(td)
    h = parts["entropy"] / n_total
    bound = h + 8.0
    rows = []
    for r, st in stats.items():
        c, label, colour, k, b, _ = entries[r]
        bpw = 8.0 * st["bytes"] / n_total
        lossless = k in (None, 7)
        rows.append({"codec": c, "label": label, "colour": colour, "lossless": lossless, "k": k, "block_size": b,
                     "bits_per_weight": bpw,
                     "gap_percent": 100.0 * (bpw - bound) / bound if lossless and c != "memcpy" else None,
                     "compress_MBps": None if c == "memcpy" else 2 * n_total / st["comp"] / 1e6,
                     "decompress_MBps": 2 * n_total / st["decomp"] / 1e6, "note": chosen[c].note})
    breakdown = None
    if "neuzip" in stats:
        per = 8.0 / n_total
        breakdown = {"exponent_entropy": h, "sign_and_mantissa": per * parts["fields"],
                     "coding_loss": per * parts["words"] - h, "tables": per * parts["tables"],
                     "chunk_headers": per * parts["chunk_headers"], "metadata": per * parts["metadata"]}
    note = None
    if notes:
        note = f"{', '.join(sorted(notes))} weights were converted to bfloat16 (rounded) before measuring"
    return {"weights": n_total, "bytes": 2 * n_total, "tensors": len(tensors), "exponent_entropy": h,
            "entropy_bound": bound, "rows": rows, "neuzip_breakdown": breakdown, "skipped": skipped,
            "threads": 1, "repeats": repeats, "note": note}


def synthetic_weights(shapes: dict[str, tuple[tuple[int, ...], float]], distribution: str = "gaussian",
                      seed: int = 0, dof: float = 4.0) -> dict[str, torch.Tensor]:
    """Random bf16 weights ``{name: (shape, std)} -> {name: tensor}``, Gaussian or Student-t with ``dof``
    degrees of freedom (scaled to the same standard deviation)."""
    if distribution not in ("gaussian", "student-t"):
        raise BadInputError(f"unknown distribution {distribution!r}.", fix="use 'gaussian' or 'student-t'")
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, std) in shapes.items():
        if distribution == "gaussian":
            z = rng.standard_normal(shape, dtype=np.float32)
        else:
            z = (rng.standard_t(dof, size=shape) / np.sqrt(dof / (dof - 2.0))).astype(np.float32)
        out[name] = (torch.from_numpy(z) * std).to(torch.bfloat16)
    return out


def forward_ratio(model: nn.Module, ids: torch.Tensor, settings: list[tuple[int, int | None]] = ((7, None),),
                  decode_ahead: tuple[int, ...] = (0, 2), repeats: int = 3,
                  progress: Progress | None = None) -> dict:
    """Forward time of NeuZip-compressed copies of ``model`` over the bf16 model's, one torch thread.

    Parameters
    ----------
    model : the model (its weights are cast to bf16 for the baseline; a copy is compressed per setting)
    ids : (B, T) token ids
    settings : ``(mantissa_bits, block_size)`` pairs
    decode_ahead : the decode-ahead depths timed for each setting (0: decode when called)
    repeats : forwards per measurement; the bf16 and compressed forwards alternate, and each ratio is
        the median of the per-round ratios

    Returns
    -------
    dict with ``bf16_seconds`` (median), ``tokens``, ``threads`` (torch: 1; the decode thread, when
    decoding ahead, is a second thread) and ``rows``: ``label``, ``k``, ``block_size``,
    ``decode_ahead``, ``seconds`` (median), ``ratio`` (compressed / bf16), ``max_abs_logit_diff``
    against the bf16 model (0 for lossless).
    """
    for k, b in settings:
        check_params(k, b)
    base = copy.deepcopy(model).to(torch.bfloat16).eval()
    rows, bf16_times = [], []
    step = item_progress(progress, "compressing")
    with _OneThread(), torch.no_grad():
        ref = base(ids)
        want = (ref.logits if hasattr(ref, "logits") else ref).float()
        for i, (k, b) in enumerate(settings):
            if step:
                step(i, len(settings), f"k={k}" + (f", B={b}" if b else ""))
            from core.neuzip.modules import compress_model, set_decode_ahead

            comp = compress_model(copy.deepcopy(base), k, b)
            out = comp(ids)
            diff = float(((out.logits if hasattr(out, "logits") else out).float() - want).abs().max())
            for ahead in decode_ahead:
                set_decode_ahead(comp, ahead)
                comp(ids)  # warm: the decodes in flight are then the next forward's first layers
                ratios, times = [], []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    base(ids)
                    t1 = time.perf_counter()
                    comp(ids)
                    t2 = time.perf_counter()
                    bf16_times.append(t1 - t0)
                    times.append(t2 - t1)
                    ratios.append((t2 - t1) / (t1 - t0))
                rows.append({"label": f"k={k}" + (f", B={b}" if b else "") + (" (lossless)" if k == 7 else ""),
                             "k": k, "block_size": b, "decode_ahead": ahead, "seconds": statistics.median(times),
                             "ratio": statistics.median(ratios), "max_abs_logit_diff": diff})
            set_decode_ahead(comp, 0)
            del comp
    return {"bf16_seconds": statistics.median(bf16_times), "tokens": int(ids.numel()), "threads": 1, "rows": rows}
