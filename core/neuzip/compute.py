"""What each NeuZip analysis computes: ``compute(request, progress) -> data`` for the entries of
:data:`core.neuzip.views.ANALYSES`, the weights they read, and the committed example store (:data:`EXAMPLES`, which
also answers the trade-off's points one by one).
"""
from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.codec import compress
from core.neuzip.compare import codec_comparison
from core.neuzip.measure import bitfield_histograms, compression_table
from core.neuzip.modules import linear_layers
from core.neuzip.perplexity import eval_text
from core.neuzip.requests import CACHE_VERSION, THROUGHPUT_NUMEL
from core.neuzip.tradeoff import tradeoff_for_model
from core.paths import ASSETS_DIR
from core.progress import item_progress, report, scaled
from core.runner import ExampleStore, lookup
from core.zoo.placement import ParameterValues, offloaded_names


# ---- the committed example store ------------------------------------------------------------------------------------
class _Examples(ExampleStore):
    """The committed example store, read without the in-band provenance that its older entries carry (a ``cached``
    flag on each trade-off point): where a result came from is :class:`core.runner.Found`'s to say."""

    def get(self, fingerprint: str, analysis: str, params: dict):
        return _without_provenance(super().get(fingerprint, analysis, params))

    def entries(self, analysis: str | None = None) -> list[dict]:
        return [{**e, "data": _without_provenance(e["data"])} for e in super().entries(analysis)]


def _without_provenance(data):
    if isinstance(data, dict) and isinstance(data.get("points"), list):
        return {**data, "points": [{k: v for k, v in p.items() if k != "cached"} for p in data["points"]]}
    return data



EXAMPLES = _Examples(ASSETS_DIR / "neuzip" / "examples.json")


# ---- the analyses ----------------------------------------------------------------------------------------------------
def linear_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{qualified name + '.weight': weight}`` of the linear layers NeuZip compresses
    (:func:`core.neuzip.modules.linear_layers`); for a model part of which ``--device-map`` offloaded, a mapping that
    reads each weight when it is looked up (one at a time)."""
    chosen = {f"{n}.weight": m.weight.detach() for n, m in linear_layers(model)}
    if offloaded_names(model):  # spread by --device-map: read each weight when it is used, one at a time
        return ParameterValues(model, list(chosen))
    return chosen


def _weights(ref: str, progress=None) -> dict[str, torch.Tensor]:
    from core.zoo import load_model

    report(progress, 0.0, f"loading {ref}")
    return linear_weights(load_model(ref).model)


def histograms(request, progress=None) -> dict:
    return bitfield_histograms(_weights(request.ref, progress), progress=progress)


def table(request, progress=None) -> dict:
    return compression_table(_weights(request.ref, progress), request.k, request.block_size, progress=progress)


def tradeoff(request, progress=None) -> dict:
    """Loads the model (refused when spread by ``--device-map`` or without a tokenizer) and measures every setting,
    each point looked up on its own (analysis ``neuzip/tradeoff``)."""
    from core.zoo import load_model, require_kind
    from core.zoo.placement import is_dispatched

    ref = request.ref
    text, dataset = eval_text(request.words, request.dataset)
    report(progress, 0.0, f"loading {ref}")
    lm = require_kind(load_model(ref), ("causal-lm",), "The memory / perplexity trade-off")
    if is_dispatched(lm.model):
        raise BadInputError(f"the memory / perplexity trade-off evaluates a float32 copy of the whole of {ref}, so it "
                            "needs the model on one device, not spread by --device-map.",
                            fix="leave out --device-map / --max-memory for `neuzip tradeoff`; `neuzip compress` reads "
                                "a spread model layer by layer.")
    if lm.tokenizer is None:
        raise BadInputError(f"{ref} has no tokenizer, so its perplexity cannot be measured.",
                            fix="pick a causal language model with a tokenizer")
    result = tradeoff_for_model(lm.model, lm.tokenizer, text, list(request.settings), request.window,
                                point_lookup(lm.fingerprint, ref, dataset, request.cache), progress)
    return {"model": ref, "fingerprint": lm.fingerprint, "dataset": dataset, "ks": list(request.ks),
            "block_size": request.block_size, **result}


def point_lookup(fingerprint: str, ref: str, dataset: str, use_cache: bool = True):
    """How the trade-off has each of its points: looked up (analysis ``neuzip/tradeoff``, keyed by the model's
    fingerprint, the evaluation text and the setting), so a repeated or a stopped request reuses what was measured."""
    def point(params: dict, compute) -> dict:
        return lookup(fingerprint, "neuzip/tradeoff", {**params, "dataset": dataset, "version": CACHE_VERSION},
                      compute, examples=EXAMPLES, cache=use_cache, model=ref).data
    return point


def first_weights(ref: str, numel: int = THROUGHPUT_NUMEL, progress=None) -> dict[str, torch.Tensor]:
    """The model's linear weights in order, whole tensors, until they hold at least ``numel`` weights."""
    chosen, total = {}, 0
    for name, w in _weights(ref, progress).items():
        chosen[name] = w
        total += w.numel()
        if total >= numel:
            break
    return chosen


def throughput(request, progress=None) -> dict:
    """:func:`core.neuzip.codec_comparison` of every installed codec (NeuZip, ZipNN, zstd, a memory copy) and the
    lossy NeuZip setting asked for, on the first linear weights of the model (whole tensors, at least ``numel``
    weights), one thread each, side by side: its dict plus ``model``, ``numel`` and ``names``."""
    weights = first_weights(request.ref, request.numel, progress)
    report(progress, 0.1, f"timing the codecs on {len(weights)} tensors")
    r = codec_comparison(weights, repeats=request.repeats, lossy=tuple(request.lossy),
                         progress=scaled(progress, 0.1, 1.0))
    return {"model": request.ref, "numel": r["weights"], "names": list(weights), "device": "cpu", **r}


def device_memory(request, progress=None) -> dict:
    from core.neuzip.memory import device_memory
    from core.zoo import load_model, require_kind

    loaded = require_kind(load_model(request.ref), ("causal-lm",), "The NeuZip device memory")
    return {"model": request.ref, **device_memory(loaded.model, request.device, request.k, request.block_size,
                                                  request.tokens)}


def _streamed_linear_weights(ref: str):
    """The model's linear weights read one at a time from its safetensors files, each in its stored dtype (a list of
    ``(name, read())``), or None when the model is not a Hugging Face folder, or was asked to be spread by
    ``--device-map`` / ``--max-memory`` (it is then loaded as asked and read weight by weight from there)."""
    from core.neuzip.modules import empty_causal_lm, hf_folder
    from core.neuzip.streaming import folder_specs
    from core.zoo.placement import current_placement

    folder = None if current_placement() is not None else hf_folder(ref)
    if folder is None:
        return None
    specs = folder_specs(folder)
    names = [f"{name}.weight" for name, _ in linear_layers(empty_causal_lm(folder))]
    missing = [n for n in names if n not in specs]
    if missing:
        raise BadInputError(f"{ref}'s weights hold no {missing[0]}.", fix="check the folder's safetensors files")
    return [(n, lambda s=specs[n]: s.fill(torch.empty(s.shape, dtype=s.dtype))) for n in names]


def compress_checkpoint(request, progress=None) -> dict:
    """The model's linear weights compressed into a NeuZip checkpoint: read one at a time from a Hugging Face folder
    (the model is never whole in memory), else from the loaded model."""
    from core.neuzip.checkpoint import save_compressed

    streamed = _streamed_linear_weights(request.ref)
    if streamed is None:
        streamed = [(n, lambda w=w: w) for n, w in _weights(request.ref, progress).items()]
    tensors, step = {}, item_progress(progress, "compressing")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, (name, read) in enumerate(streamed):
            if step:
                step(i, len(streamed), name)
            tensors[name.removesuffix(".weight")] = compress(read(), request.k, request.block_size)
    path = save_compressed(request.out, tensors)
    numel = sum(c.numel for c in tensors.values())
    stored = sum(c.nbytes for c in tensors.values())
    return {"model": request.ref, "file": str(path), "tensors": len(tensors), "weights": numel,
            "mantissa_bits": request.k, "block_size": request.block_size, "stored_bytes": stored,
            "file_bytes": os.path.getsize(path), "bits_per_weight": 8.0 * stored / numel, "bf16_bytes": 2 * numel}


def training(request, progress=None) -> dict:
    """The model trained in each mode of the request from the same weights on the same batches, each measured
    (:func:`core.neuzip.training.train_modes`)."""
    from core.neuzip.training import train_modes

    return train_modes(request.ref, request.modes, request.settings(), progress=progress)


def process_memory(request, progress=None) -> dict:
    """The trade-off's bf16 and NeuZip settings, each loaded in a fresh process (:func:`core.neuzip.memory.
    process_points`): the process's RSS beside the model's tensor bytes."""
    from core.neuzip.memory import process_points
    from core.neuzip.process import machine

    rows = process_points(request.ref, request.settings, request.tokens, progress)
    return {"model": request.ref, "tokens": request.tokens, "ks": list(request.ks), "block_size": request.block_size,
            "rows": rows, "machine": machine()}


def decompress_checkpoint(request, progress=None) -> dict:
    """A NeuZip checkpoint read back one tensor at a time (:func:`core.neuzip.checkpoint.stream_compressed`): each
    decoded, compared with ``request.model``'s weight (read one at a time too, from its folder) and written to
    ``request.out`` as it comes; never more than one decoded weight in memory."""
    import json

    from core.files import atomic_write
    from core.neuzip.checkpoint import stream_compressed
    from core.neuzip.streaming import SafetensorsFile, write_safetensors
    from core.zoo import load_model

    src = request.file
    reference = None
    if request.model:
        streamed = _streamed_linear_weights(request.model)
        reference = dict(streamed) if streamed is not None else \
            {n: (lambda w=w: w) for n, w in linear_weights(load_model(request.model).model).items()}
    stats = {"tensors": 0, "weights": 0, "k": set(), "stored": 0, "exact": True, "err": 0.0}

    def decoded():
        step = item_progress(progress, "decoding")
        for name, ct in stream_compressed(src):  # raises BadInputError for a truncated or tampered file
            key = f"{name}.weight"
            if step:
                step(stats["tensors"], len(shapes), key)
            w = ct.decompress()
            stats["tensors"] += 1
            stats["weights"] += ct.numel
            stats["stored"] += ct.nbytes
            stats["k"].add(ct.mantissa_bits)
            if reference is not None:
                if key not in reference:
                    raise BadInputError(f"tensors of the file are not linear weights of {request.model} (e.g. {key}).",
                                        fix="compare with the model the file was made from")
                want = reference[key]().to(torch.bfloat16)
                stats["exact"] &= torch.equal(w.view(torch.int16), want.view(torch.int16))
                stats["err"] = max(stats["err"], float((w.float() - want.float()).abs().max()))
            yield key, w

    try:
        codec = json.loads(SafetensorsFile(src).metadata.get("codec", "{}"))
        shapes = [(f"{name}.weight", tuple(codec[name]["shape"])) for name in sorted(codec)]
    except Exception:  # not a checkpoint at all: stream_compressed says why
        shapes = []
    if request.out:
        atomic_write(request.out, lambda tmp: write_safetensors(tmp, shapes, decoded(), {"source": src.name}))
    else:
        for _ in decoded():
            pass
    numel = max(1, stats["weights"])
    data = {"file": str(src), "tensors": stats["tensors"], "weights": stats["weights"],
            "mantissa_bits": sorted(stats["k"]), "bits_per_weight": 8.0 * stats["stored"] / numel}
    if request.model:
        data.update({"model": request.model, "bit_exact": stats["exact"], "max_abs_error": stats["err"]})
    if request.out:
        data["out"] = str(request.out)
    return data
