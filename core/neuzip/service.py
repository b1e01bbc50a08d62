"""What the NeuZip tab and ``python -m core neuzip`` do, one function per user action, each returning a
:class:`core.runner.Result` (status text, data, tables, figures, files):

    weights_result(ref, k, block_size)        bit-field histograms + the per-layer compression table
    histograms_result(ref), table_result(...) each of the two alone (the CLI's commands)
    tradeoff_result(ref, ...)                 memory / word-level perplexity points, Pareto front marked
    throughput_result(ref, k, block_size)     bits/weight and 1-thread MB/s of NeuZip, ZipNN, zstd, a memory copy
    compress_result(...), decompress_result(...)   a model's linear weights as a NeuZip checkpoint and back
    shown_result(parts)                       the files of what a page shows
    example_parts(), precompute_examples()    the committed example (``assets/neuzip/examples.json``)

Measurements of a model's weights go through :func:`core.runner.lookup` (keyed by the weights' fingerprint, which is
read without loading the model): the committed example or the results cache answers a repeated request at once.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip import figures as F
from core.neuzip.codec import check_params, compress
from core.neuzip.compare import codec_comparison
from core.neuzip.measure import bitfield_histograms, compression_table
from core.neuzip.tradeoff import (CACHE_VERSION, DEFAULT_WINDOW, DEFAULT_WORDS, SKIP, METHODS, default_settings,
                                  tradeoff)
from core.paths import ASSETS_DIR
from core.checks import check_number
from core.progress import item_progress, report, scaled
from core.results import Result, source_text
from core.runner import ExampleStore, has_fields, lookup, result_key
from core.zoo.placement import ParameterValues, offloaded_names

EXAMPLES = ExampleStore(ASSETS_DIR / "neuzip" / "examples.json")
EXAMPLE_MODEL = "smollm2-135m"
THROUGHPUT_NUMEL = 4 * 1024 * 1024  # weights timed by default, at least (whole tensors: 5.3 M on SmolLM2)
KS = (7, 3, 1, 0)


# ---- inputs -------------------------------------------------------------------------------------------------------
def _whole(value, what: str) -> int:
    """A whole-number parameter, or one clear message (NaN, infinity, a fraction, a word)."""
    return check_number(value, what, whole=True)


def _ref(value) -> str:
    if not value or not str(value).strip():
        raise BadInputError("no model chosen.", fix="pick a model in the header")
    return str(value).strip()


def linear_weights(model: nn.Module, skip: tuple[str, ...] = SKIP) -> dict[str, torch.Tensor]:
    """``{qualified name + '.weight': weight}`` of the ``nn.Linear`` layers not matching ``skip``; for a model part of
    which ``--device-map`` offloaded, a mapping that reads each weight when it is looked up (one at a time)."""
    if not isinstance(model, nn.Module):
        raise BadInputError(f"expected a torch.nn.Module, got {type(model).__name__}.")
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise BadInputError("this model has no linear layers to measure.",
                            fix="NeuZip compresses nn.Linear weights; pick a transformer-style model")
    chosen = {f"{n}.weight": m.weight.detach() for n, m in linears if not any(s in n for s in skip)}
    if not chosen:
        raise BadInputError(f"all {len(linears)} linear layers match skip={tuple(skip)}.")
    if offloaded_names(model):  # spread by --device-map: read each weight when it is used, one at a time
        return ParameterValues(model, list(chosen))
    return chosen


def _weights(ref: str, progress=None) -> dict[str, torch.Tensor]:
    from core.zoo import load_model

    report(progress, 0.0, f"loading {ref}")
    return linear_weights(load_model(ref).model)


VIEW_FIELDS = {"neuzip/histograms": has_fields("sign", "exponent", "mantissa", "entropy", "numel", "tensors"),
               "neuzip/table": has_fields("total", "rows", "mantissa_bits"),
               "neuzip/tradeoff-result": lambda data: tradeoff_view(data)}


def _measure(ref: str, analysis: str, params: dict, compute, use_cache: bool = True):
    from core.zoo import fingerprint

    return lookup(fingerprint(ref), analysis, {**params, "version": CACHE_VERSION}, compute, examples=EXAMPLES,
                  cache=use_cache, check=VIEW_FIELDS.get(analysis))


# ---- the measurements ---------------------------------------------------------------------------------------------
def histograms_result(ref: str, use_cache: bool = True, progress=None) -> Result:
    """Sign / exponent / mantissa histograms and entropies of a model's linear weights."""
    ref = _ref(ref)
    found = _measure(ref, "neuzip/histograms", {"skip": list(SKIP)}, lambda: bitfield_histograms(
        _weights(ref, progress), progress=progress), use_cache)
    h = {"model": ref, **found.data}
    rows = [{"field": f, "value": v, "count": c} for f in ("sign", "exponent", "mantissa")
            for v, c in enumerate(h[f]) if c]
    e = h["entropy"]
    status = (f"{ref}: {h['numel']:,} linear weights in {len(h['tensors'])} tensors\nentropy (bits): sign "
              f"{e['sign']:.4f}, exponent {e['exponent']:.4f} of 8, mantissa {e['mantissa']:.4f} of 7"
              + (f"\nnote: {h['note']}" if h.get("note") else ""))
    return Result(status, h, tables={"histograms": rows}, figures={"histograms": F.histogram_figure(h)},
                  source=found.source, key=found.key, stem="neuzip-histograms")


def table_rows(table: dict) -> list[dict]:
    """The compression table as flat rows (total first), bits rounded for display."""
    def row(r):
        return {"layer": r["name"], "weights": r["numel"],
                **{k: None if r.get(k) is None else round(r[k], 4)
                   for k in ("bits_per_weight", "entropy_bound", "exponent_entropy", "zstd_bits_per_weight",
                             "zlib_bits_per_weight")}}
    return [row(table["total"])] + [row(r) for r in table["rows"]]


def table_result(ref: str, k: int = 7, block_size: int | None = None, use_cache: bool = True,
                 progress=None) -> Result:
    """Bits per weight per linear layer for one ``k`` / block size, against the entropy bound, zstd and zlib."""
    ref = _ref(ref)
    check_params(k, block_size)
    k, b = _whole(k, "k"), None if block_size is None else _whole(block_size, "block_size")
    found = _measure(ref, "neuzip/table", {"k": k, "block_size": b, "skip": list(SKIP)}, lambda: compression_table(
        _weights(ref, progress), k, b, progress=progress), use_cache)
    t = {"model": ref, **found.data}
    tot = t["total"]
    status = (f"NeuZip {'lossless (k=7)' if k == 7 else f'k={k}' + (f', B={b}' if b else '')}: "
              f"**{tot['bits_per_weight']:.3f} bits/weight** against an entropy bound of {tot['entropy_bound']:.3f}")
    return Result(status, t, tables={"table": table_rows(t)}, figures={"table": F.table_figure(t)},
                  source=found.source, key=found.key, stem="neuzip-table")


def weights_result(ref: str, k: int = 7, block_size: int | None = None, progress=None) -> Result:
    """The bit fields and the compression of a model's linear weights (the tab's *Analyse weights*)."""
    ref = _ref(ref)
    block_size = None if _whole(k, "k") == 7 else block_size
    check_params(k, block_size)
    h = histograms_result(ref, progress=scaled(progress, 0.0, 0.5))
    t = table_result(ref, k, block_size, progress=scaled(progress, 0.5, 1.0))
    sources = {h.source, t.source}
    source = next(s for s in ("computed", "cache", "precomputed") if s in sources)
    return Result(_weights_text(h.data, t.data, source), {"histograms": h.data, "table": t.data},
                  tables=t.tables, figures={**h.figures, **t.figures}, source=source, stem="neuzip-weights",
                  key=f"{h.key}-{t.key}")


def _weights_text(h: dict, table: dict, source: str = "computed") -> str:
    e, t = h["entropy"], table["total"]
    k, b = table["mantissa_bits"], table.get("block_size")
    what = "lossless (k=7)" if k == 7 else f"k={k}" + (f", B={b}" if b else "")
    zstd = "" if t.get("zstd_bits_per_weight") is None else f"; zstd on the raw bytes: **{t['zstd_bits_per_weight']:.2f}**"
    return (f"**{h['numel']:,}** linear weights of `{h.get('model', '')}` ({source_text(source)}). Entropy: sign "
            f"{e['sign']:.3f}, exponent **{e['exponent']:.3f}** of 8, mantissa {e['mantissa']:.3f} of 7 bits. NeuZip "
            f"{what}: **{t['bits_per_weight']:.3f} bits/weight** against an entropy bound of {t['entropy_bound']:.3f}"
            f" (bf16: 16){zstd}.")


def tradeoff_rows(result: dict) -> list[dict]:
    return [{"setting": p["label"], "family": p["family"], "memory_MB": round(p["memory_bytes"] / 1e6, 2),
             "linear_bits_per_weight": round(p["bits_per_weight"], 3), "word_perplexity": round(p["perplexity"], 3),
             "token_perplexity": round(p["token_perplexity"], 3), "pareto": p["pareto"]} for p in result["points"]]


def _tradeoff_params(ks, block_size, words, window, baselines, dataset) -> dict:
    from core.settings import is_online

    return {"ks": [_whole(k, "k") for k in ks], "block_size": block_size, "words": _whole(words, "words"),
            "window": _whole(window, "window"),
            "baselines": bool(baselines), "dataset": dataset or ("online" if is_online() else "wikipedia-paragraphs")}


def tradeoff_result(ref: str, ks=KS, block_size: int | None = 128, words: int = DEFAULT_WORDS,
                    window: int = DEFAULT_WINDOW, baselines: bool = True, dataset: str | None = None,
                    use_cache: bool = True, progress=None, log_x: bool = False) -> Result:
    """Memory / word-level perplexity of bf16, NeuZip k = 7, 3, 1, 0 (with and without a normaliser) and the
    registry's baselines, with the Pareto front (:func:`core.neuzip.tradeoff.tradeoff`; each point is cached)."""
    ref = _ref(ref)
    default_settings(ks, block_size, baselines)  # checks k and B before anything loads
    params = _tradeoff_params(ks, block_size, words, window, baselines, dataset)
    found = _measure(ref, "neuzip/tradeoff-result", params, lambda: tradeoff(
        ref, ks, block_size, _whole(words, "words"), _whole(window, "window"), baselines, dataset, use_cache=use_cache, progress=progress),
        use_cache)
    return tradeoff_view(found.data, found.source, found.key, log_x)


def tradeoff_view(r: dict, source: str = "computed", key: str | None = None, log_x: bool = False) -> Result:
    status = (f"{source_text(source)}: word-level perplexity of `{r['model']}` on **{r['words']:,} words** "
              f"({r['tokens']:,} tokens) of {r['dataset']}, windows of {r['window']} tokens. Pareto front: "
              f"{' → '.join(r['pareto'])}. " + " ".join(r.get("notes", [])))
    return Result(status, r, tables={"tradeoff": tradeoff_rows(r)}, figures={"tradeoff": F.tradeoff_figure(r, log_x)},
                  source=source, key=key, stem="neuzip-tradeoff")


def throughput_rows(result: dict) -> list[dict]:
    """One row per codec (and lossy NeuZip setting): bits per weight and one-thread MB/s, rounded for display."""
    copy = next((r["decompress_MBps"] for r in result["rows"] if r["codec"] == "memcpy"), None)

    def rnd(v, d):
        return None if v is None else round(v, d)
    return [{"codec": r["label"], "bits_per_weight": rnd(r["bits_per_weight"], 3),
             "gap_to_bound_percent": rnd(r["gap_percent"], 3), "compress_MBps": rnd(r["compress_MBps"], 1),
             "decompress_MBps": rnd(r["decompress_MBps"], 1),
             "decompress_time_vs_copy": None if copy is None or r["codec"] == "memcpy"
             else round(copy / r["decompress_MBps"], 1)} for r in result["rows"]]


def first_weights(ref: str, numel: int = THROUGHPUT_NUMEL, progress=None) -> dict[str, torch.Tensor]:
    """The model's linear weights in order, whole tensors, until they hold at least ``numel`` weights."""
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1024:
        raise BadInputError(f"numel must be an integer >= 1024, got {numel!r}.")
    chosen, total = {}, 0
    for name, w in _weights(ref, progress).items():
        chosen[name] = w
        total += w.numel()
        if total >= numel:
            break
    return chosen


def model_throughput(ref: str, lossy=(), numel: int = THROUGHPUT_NUMEL, repeats: int = 5, progress=None) -> dict:
    """:func:`core.neuzip.codec_comparison` of every installed codec (NeuZip, ZipNN, zstd, a memory copy) and the
    NeuZip ``lossy`` settings ``[(k, block_size)]`` on the first linear weights of the model (whole tensors, at least
    ``numel`` weights), one thread each, side by side: its dict plus ``model``, ``numel`` and ``names``."""
    weights = first_weights(ref, numel, progress)
    report(progress, 0.1, f"timing the codecs on {len(weights)} tensors")
    r = codec_comparison(weights, repeats=repeats, lossy=tuple(lossy),
                         progress=scaled(progress, 0.1, 1.0))
    return {"model": ref, "numel": r["weights"], "names": list(weights), "device": "cpu", **r}


def throughput_result(ref: str, k: int = 7, block_size: int | None = None, numel: int = THROUGHPUT_NUMEL,
                      repeats: int = 5, progress=None) -> Result:
    """Bits per weight and one-thread compress / decompress MB/s of NeuZip (lossless, and ``k`` / ``block_size``
    when ``k < 7``), ZipNN (when installed), zstd and a memory copy, side by side, timed now (never cached)."""
    ref = _ref(ref)
    block_size = None if _whole(k, "k") == 7 else block_size
    check_params(k, block_size)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise BadInputError(f"repeats must be an integer >= 1, got {repeats!r}.")
    lossy = [] if _whole(k, "k") == 7 else [(_whole(k, "k"), block_size)]
    return throughput_view(model_throughput(ref, lossy, numel, repeats, progress=progress))


def throughput_view(r: dict, source: str = "computed") -> Result:
    def speed(v):
        return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    parts = [f"{x['label']}: {x['bits_per_weight']:.3f} bits/weight, compress {speed(x['compress_MBps'])} / "
             f"decompress **{speed(x['decompress_MBps'])}** MB/s" for x in r["rows"] if x["codec"] != "memcpy"]
    copy = [x for x in r["rows"] if x["codec"] == "memcpy"]
    src = "Precomputed example" if source == "precomputed" else "Measured now"
    status = (f"{src}, one thread each, the codecs taking turns (median of {r['repeats']}; every round trip checked "
              f"bit for bit), on the first {r['tensors']} linear weight tensors of `{r['model']}` "
              f"({2 * r['numel'] / 1e6:.3g} MB of bf16; entropy bound {r['entropy_bound']:.3f} bits/weight): "
              + "; ".join(parts) + (f"; a memory copy {speed(copy[0]['decompress_MBps'])} MB/s." if copy else "."))
    if "zipnn" in r.get("skipped", {}):
        status += (" ZipNN is not installed here, so it is left out: `pip install zipnn==0.5.4` (pinned in "
                   "requirements-dev.txt) adds it.")
    return Result(status, r, tables={"throughput": throughput_rows(r)}, figures={"throughput": F.throughput_figure(r)},
                  source=source, stem="neuzip-throughput")


# ---- files --------------------------------------------------------------------------------------------------------
def device_memory_result(ref: str, k: int = 7, block_size: int | None = None, tokens: int = 512,
                         device: str = "cuda") -> Result:
    """On a GPU host: what the model holds on the device in bf16 and NeuZip-compressed, and a forward's peak
    (:func:`core.neuzip.modules.device_memory`, measured now, never cached)."""
    from core.neuzip.memory import device_memory, require_cuda
    from core.zoo import load_model, require_kind

    device = require_cuda(device)  # before loading anything
    ref = _ref(ref)
    block_size = None if int(k) == 7 else block_size
    check_params(k, block_size)
    loaded = load_model(ref)
    require_kind(loaded, ("causal-lm",), "The NeuZip device memory")
    r = {"model": ref, **device_memory(loaded.model, device, int(k), block_size, _whole(tokens, "tokens"))}
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    status = (f"On {r['device']}: `{ref}` holds **{mib(r['compressed']['loaded'])}** NeuZip-compressed "
              f"(k = {r['mantissa_bits']}) against **{mib(r['bf16']['loaded'])}** in bf16 "
              f"({r['loaded_ratio']:.3f}x); its linear weights {mib(r['linear_resident_bytes'])} against "
              f"{mib(r['linear_bf16_bytes'])} ({r['linear_ratio']:.3f}x). A forward of {r['tokens']} tokens peaks "
              f"{mib(r['compressed']['forward_peak'])} above the loaded model (bf16: {mib(r['bf16']['forward_peak'])}); "
              f"logits differ by at most {r['max_abs_logit_difference']:.3g}.")
    rows = [{"format": name, "loaded_MiB": round(r[name]["loaded"] / 2**20, 2),
             "forward_peak_MiB": round(r[name]["forward_peak"] / 2**20, 2)} for name in ("bf16", "compressed")]
    return Result(status, r, tables={"device-memory": rows}, stem="neuzip-device-memory")


def compress_result(ref: str, k: int = 7, block_size: int | None = None, out=None, progress=None) -> Result:
    """Write a model's linear weights as a NeuZip checkpoint (``*.safetensors``, checksummed)."""
    from core.neuzip.checkpoint import save_compressed

    ref = _ref(ref)
    check_params(k, block_size)
    weights = _weights(ref, progress)
    tensors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, (name, w) in enumerate(weights.items()):
            report(progress, i / len(weights), name)
            tensors[name.removesuffix(".weight")] = compress(w, k, block_size)
    path = save_compressed(out, tensors)
    numel = sum(c.numel for c in tensors.values())
    stored = sum(c.nbytes for c in tensors.values())
    data = {"model": ref, "file": str(path), "tensors": len(tensors), "weights": numel, "mantissa_bits": k,
            "block_size": block_size, "stored_bytes": stored, "file_bytes": os.path.getsize(path),
            "bits_per_weight": 8.0 * stored / numel, "bf16_bytes": 2 * numel}
    status = (f"compressed {len(tensors)} linear weights ({numel:,}) of {ref} with k={k}"
              + (f", B={block_size}" if block_size else "") + f": {data['bits_per_weight']:.3f} bits/weight, "
              f"{stored / 1e6:.1f} MB (bf16: {2 * numel / 1e6:.1f} MB) -> {path}")
    return Result(status, data, stem="neuzip-compress")


def decompress_result(file, model: str | None = None, out=None) -> Result:
    """Read a NeuZip checkpoint back (bit-exact check against ``model``), optionally as plain safetensors."""
    from safetensors.torch import save_file

    from core.neuzip.checkpoint import load_compressed
    from core.files import atomic_write
    from core.zoo import load_model

    src = Path(file)
    if not src.is_file():
        raise BadInputError(f"{file} does not exist.", fix="give a file written by `neuzip compress`")
    tensors = load_compressed(src)  # raises BadInputError for a truncated or tampered file
    decoded = {f"{name}.weight": ct.decompress() for name, ct in tensors.items()}
    numel = max(1, sum(c.numel for c in tensors.values()))
    data = {"file": str(src), "tensors": len(tensors), "weights": sum(c.numel for c in tensors.values()),
            "mantissa_bits": sorted({c.mantissa_bits for c in tensors.values()}),
            "bits_per_weight": 8.0 * sum(c.nbytes for c in tensors.values()) / numel}
    if model:
        ref = linear_weights(load_model(model).model)
        missing = [n for n in decoded if n not in ref]
        if missing:
            raise BadInputError(f"{len(missing)} tensors of the file are not linear weights of {model} "
                                f"(e.g. {missing[0]}).", fix="compare with the model the file was made from")
        exact = all(torch.equal(decoded[n].view(torch.int16), ref[n].to(torch.bfloat16).view(torch.int16))
                    for n in decoded)
        err = max(float((decoded[n].float() - ref[n].to(torch.bfloat16).float()).abs().max()) for n in decoded)
        data.update({"model": model, "bit_exact": exact, "max_abs_error": err})
    if out:
        plain = {k: v.contiguous() for k, v in decoded.items()}
        atomic_write(out, lambda tmp: save_file(plain, str(tmp), metadata={"source": src.name}))
        data["out"] = str(out)
    status = (f"{src}: {data['tensors']} tensors, {data['weights']:,} weights, {data['bits_per_weight']:.3f} "
              f"bits/weight, k={data['mantissa_bits']}")
    if model:
        status += f"\nagainst {model}: bit-exact {data['bit_exact']}, max |error| {data['max_abs_error']:.3g}"
    return Result(status + (f"\nwrote {out}" if out else ""), data, stem="neuzip-decompress")


def shown_result(parts: dict, log_x: bool = False) -> Result:
    """The files of what a page shows: any of ``histograms``, ``table``, ``tradeoff``, ``throughput`` (data dicts)."""
    parts = {k: v for k, v in (parts or {}).items() if v}
    if not parts:
        raise BadInputError("nothing to download yet.", fix="run one of the measurements first")
    tables, figures = {}, {}
    if "histograms" in parts:
        figures["histograms"] = F.histogram_figure(parts["histograms"])
    if "table" in parts:
        tables["table"], figures["table"] = table_rows(parts["table"]), F.table_figure(parts["table"])
    if "tradeoff" in parts:
        tables["tradeoff"] = tradeoff_rows(parts["tradeoff"])
        figures["tradeoff"] = F.tradeoff_figure(parts["tradeoff"], log_x)
    if "throughput" in parts:
        tables["throughput"] = throughput_rows(parts["throughput"])
        figures["throughput"] = F.throughput_figure(parts["throughput"])
    from core.runner import digest
    return Result(f"{', '.join(parts)} of {next(iter(parts.values())).get('model', '')}", parts, tables=tables,
                  figures=figures, key="neuzip-" + digest(parts, log_x), stem="neuzip", main_first=False)


# ---- the committed example ----------------------------------------------------------------------------------------
def example_entries(example: dict, fingerprint: str, baselines: bool | None = None) -> list[dict]:
    """Store entries of one precomputed example ``{"model", "histograms", "table", "throughput", "tradeoff"}`` (a part
    may be absent), keyed as :func:`histograms_result`, :func:`table_result` and :func:`tradeoff_result` look them up
    (``baselines``: whether the trade-off was asked with the baselines; default: whether it has any)."""
    model, entries = example["model"], []

    def add(analysis, params, data):
        entries.append({"model": model, "fingerprint": fingerprint, "analysis": analysis,
                        "params": {**params, "version": CACHE_VERSION}, "data": data})
    if example.get("histograms"):
        add("neuzip/histograms", {"skip": list(SKIP)}, {k: v for k, v in example["histograms"].items() if k != "model"})
    if example.get("table"):
        t = example["table"]
        add("neuzip/table", {"k": t["mantissa_bits"], "block_size": t.get("block_size"), "skip": list(SKIP)},
            {k: v for k, v in t.items() if k != "model"})
    if example.get("tradeoff"):
        r = example["tradeoff"]
        if baselines is None:
            baselines = any(METHODS[p["method"]].baseline for p in r["points"])
        add("neuzip/tradeoff-result", _tradeoff_params(r["ks"], r["block_size"], r["words"], r["window"], baselines,
                                                       r["dataset"]), r)
    if example.get("throughput"):
        add("neuzip/throughput", {"numel": example["throughput"]["numel"]}, example["throughput"])
    return entries


def write_example(path, example: dict) -> Path:
    """Write one precomputed example (``bench/neuzip.py --example``) as the example store."""
    from core.zoo import fingerprint

    return ExampleStore.write(path, example_entries(example, fingerprint(example["model"])))


def example_parts(ref: str = EXAMPLE_MODEL) -> tuple[dict, dict[str, Result]]:
    """The committed example of ``ref`` for the first view: its data parts and their Results (empty when none, when
    it was computed with other weights or an older codec, or when the model is not prepared yet)."""
    from core.errors import LayerwiseError
    from core.zoo import fingerprint

    try:
        fp = fingerprint(ref)
    except LayerwiseError:  # e.g. SmolLM2 before `models prepare`: the tab says what to press, the app still starts
        return {}, {}
    by = {e["analysis"]: e for e in EXAMPLES.entries()
          if e["fingerprint"] == fp and e["params"].get("version") == CACHE_VERSION}  # not a stale codec's figures
    if "neuzip/histograms" not in by or "neuzip/table" not in by:
        return {}, {}

    def key(e):
        return result_key(e["fingerprint"], e["analysis"], e["params"])
    h, t = ({"model": ref, **by[a]["data"]} for a in ("neuzip/histograms", "neuzip/table"))
    parts = {"histograms": h, "table": t}
    results = {"weights": Result(_weights_text(h, t, "precomputed"), parts.copy(), tables={"table": table_rows(t)},
                                 figures={"histograms": F.histogram_figure(h), "table": F.table_figure(t)},
                                 source="precomputed", key=key(by["neuzip/table"]), stem="neuzip-weights")}
    if "neuzip/tradeoff-result" in by:
        e = by["neuzip/tradeoff-result"]
        parts["tradeoff"] = e["data"]
        results["tradeoff"] = tradeoff_view(e["data"], "precomputed", key(e))
    if "neuzip/throughput" in by:
        parts["throughput"] = by["neuzip/throughput"]["data"]
        results["throughput"] = throughput_view(parts["throughput"], "precomputed")
    return parts, results


EXAMPLE_PARTS = {"histograms": "neuzip/histograms", "table": "neuzip/table", "throughput": "neuzip/throughput",
         "tradeoff": "neuzip/tradeoff-result"}  # the parts of the example -> their store analysis


def precompute_examples(ref: str = EXAMPLE_MODEL, words: int = DEFAULT_WORDS, block_size: int = 128, path=None,
                        progress=None, only=None) -> Path:
    """Measure the first view of the tab afresh and write it as the example store (minutes per setting on 2 cores).

    ``only``: measure just these parts (names in :data:`EXAMPLE_PARTS`) and keep the other parts of ``ref`` from the store
    already at ``path`` (e.g. ``only=("throughput",)`` re-times the codecs without redoing the trade-off)."""
    from core.runner import recomputing
    from core.zoo import fingerprint

    only = tuple(EXAMPLE_PARTS) if only is None else tuple(only)
    unknown = [p for p in only if p not in EXAMPLE_PARTS]
    if unknown or not only:
        raise BadInputError(f"unknown example part(s) {unknown or only}.", fix="pick from " + ", ".join(EXAMPLE_PARTS))
    path = Path(path or EXAMPLES.path)
    fp = fingerprint(ref)
    keep = {EXAMPLE_PARTS[p] for p in EXAMPLE_PARTS if p not in only}
    kept = [e for e in ExampleStore(path).entries() if e["fingerprint"] == fp and e["analysis"] in keep
            and e["params"].get("version") == CACHE_VERSION] if keep else []
    missing = [p for p in EXAMPLE_PARTS if p not in only and EXAMPLE_PARTS[p] not in {e["analysis"] for e in kept}]
    if missing:
        raise BadInputError(f"{path} holds no current {', '.join(missing)} of {ref} to keep.",
                            fix="precompute every part (leave out --only)")
    example = {"model": ref}
    with recomputing():
        if "histograms" in only:
            example["histograms"] = histograms_result(ref, progress=scaled(progress, 0.0, 0.05)).data
        if "table" in only:
            example["table"] = table_result(ref, 7, None, progress=scaled(progress, 0.05, 0.1)).data
        if "throughput" in only:
            example["throughput"] = model_throughput(ref, [(3, block_size)], progress=scaled(progress, 0.1, 0.15))
        if "tradeoff" in only:
            example["tradeoff"] = tradeoff_result(ref, KS, block_size, words, progress=scaled(progress, 0.15, 1.0)).data
    return ExampleStore.write(path, kept + example_entries(example, fp))
