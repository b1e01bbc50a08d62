"""What the NeuZip tab and ``python -m core neuzip`` do, one function per user action, each returning a
:class:`core.results.Result` (status text, data, tables, figures, files):

    weights_result(ref, k, block_size)        bit-field histograms + the per-layer compression table
    histograms_result(ref), table_result(...) each of the two alone (the CLI's commands)
    tradeoff_result(ref, ...)                 memory / word-level perplexity points, Pareto front marked
    training_result(ref, modes, ...)          train in each mode (vanilla, LOMO, LOMO + NeuZip, QLoRA): memory, speed
    training_example_result(model)            the committed training runs (``assets/neuzip/training.json``)
    throughput_result(ref, k, block_size)     bits/weight and 1-thread MB/s of NeuZip, ZipNN, zstd, a memory copy
    device_memory_result(ref, k, ...)         on a GPU host: the model on the device in bf16 and compressed
    process_memory_result(ref, ks, ...)       the trade-off's settings as the machine sees them (fresh processes)
    compress_result(...), decompress_result(...)   a model's linear weights as a NeuZip checkpoint and back
    shown_result(parts)                       the files of what a page shows
    example_parts(), precompute_examples()    the committed example (``assets/neuzip/examples.json``)

Each parses its inputs once into its request (:mod:`core.neuzip.requests`) and answers it with
:func:`core.analyses.answer`: found with :func:`core.runner.lookup` (keyed by the weights' fingerprint, read without
loading the model: the committed example or the results cache answers a repeated request at once) or computed by
its entry's compute function (:mod:`core.neuzip.compute`), and shown by its entry in
:data:`core.neuzip.views.ANALYSES`.
"""
from __future__ import annotations

from pathlib import Path

from core.analyses import named, result_function, together
from core.errors import BadInputError, LayerwiseError
from core.neuzip.compute import EXAMPLES, first_weights, linear_weights, point_lookup  # noqa: F401  (re-exported)
from core.neuzip.perplexity import DEFAULT_WINDOW, DEFAULT_WORDS
from core.neuzip.requests import CACHE_VERSION, DEFAULT_BLOCK, K_CHOICES, THROUGHPUT_NUMEL
from core.neuzip.views import ANALYSES, PAGE, page, view
from core.progress import scaled
from core.results import Result
from core.runner import ExampleStore, Found, precompute, result_key

EXAMPLE_MODEL = "smollm2-135m"
EXAMPLE_PARTS = ("histograms", "table", "throughput", "tradeoff", "process-memory")  # the committed example's analyses
OPTIONAL_PARTS = ("process-memory",)  # parts a store made before them may lack: --only does not need them kept


# ---- the one way an analysis is answered ----------------------------------------------------------------------------
# analysis_result(name, use_cache=True, progress=None, view_options=None, **inputs): analysis ``name`` of ANALYSES for
# the raw inputs (parsed by its request type, before anything loads), found or computed, then viewed (options: log_x)
analysis_result = result_function(ANALYSES, lambda name, request: EXAMPLES)  # the store read at call time


def _fingerprint(ref: str) -> str:
    from core.zoo import fingerprint

    return fingerprint(ref)


# ---- the actions --------------------------------------------------------------------------------------------------
def histograms_result(ref: str, use_cache: bool = True, progress=None) -> Result:
    """Sign / exponent / mantissa histograms and entropies of a model's linear weights."""
    return analysis_result("histograms", ref=ref, use_cache=use_cache, progress=progress)


def table_result(ref: str, k: int = 7, block_size: int | None = None, use_cache: bool = True,
                 progress=None) -> Result:
    """Bits per weight per linear layer for one ``k`` / block size, against the entropy bound, zstd and zlib."""
    return analysis_result("table", ref=ref, k=k, block_size=block_size, use_cache=use_cache, progress=progress)


def weights_result(ref: str, k: int = 7, block_size: int | None = None, progress=None) -> Result:
    """The bit fields and the compression of a model's linear weights (the tab's *Analyse weights*; ``block_size`` is
    left out for ``k = 7``)."""
    return analysis_result("weights", ref=ref, k=k, block_size=block_size, progress=progress)


def tradeoff_result(ref: str, ks=K_CHOICES, block_size: int | None = DEFAULT_BLOCK, words: int = DEFAULT_WORDS,
                    window: int = DEFAULT_WINDOW, baselines: bool = True, dataset: str | None = None,
                    use_cache: bool = True, progress=None, log_x: bool = False) -> Result:
    """Memory / word-level perplexity of bf16, NeuZip k = 7, 3, 1, 0 (with and without a normaliser) and the
    registry's baselines, with the Pareto front (:func:`core.neuzip.tradeoff.tradeoff_for_model`; each point is looked
    up on its own, so a stopped run keeps the points it finished)."""
    return analysis_result("tradeoff", ref=ref, ks=ks, block_size=block_size, words=words, window=window,
                           baselines=baselines, dataset=dataset, cache=use_cache, progress=progress,
                           view_options={"log_x": bool(log_x)})


def throughput_result(ref: str, k: int = 7, block_size: int | None = None, numel: int = THROUGHPUT_NUMEL,
                      repeats: int = 5, progress=None) -> Result:
    """Bits per weight and one-thread compress / decompress MB/s of NeuZip (lossless, and ``k`` / ``block_size``
    when ``k < 7``), ZipNN (when installed), zstd and a memory copy, side by side, timed now (never cached)."""
    return analysis_result("throughput", ref=ref, k=k, block_size=block_size, numel=numel, repeats=repeats,
                           progress=progress)


def process_memory_result(ref: str, ks=K_CHOICES, block_size: int | None = DEFAULT_BLOCK, tokens: int = 512,
                          use_cache: bool = True, progress=None) -> Result:
    """The trade-off's bf16 and NeuZip settings as the machine sees them: each loaded one tensor at a time in a fresh
    process, one forward of ``tokens`` tokens, the process's idle and peak RSS beside the model's tensor bytes
    (:func:`core.neuzip.memory.process_points`)."""
    return analysis_result("process-memory", ref=ref, ks=ks, block_size=block_size, tokens=tokens,
                           use_cache=use_cache, progress=progress)


def device_memory_result(ref: str, k: int = 7, block_size: int | None = None, tokens: int = 512,
                         device: str = "cuda") -> Result:
    """On a GPU host: what the model holds on the device in bf16 and NeuZip-compressed, and a forward's peak
    (:func:`core.neuzip.memory.device_memory`, measured now, never cached)."""
    return analysis_result("device-memory", ref=ref, k=k, block_size=block_size, tokens=tokens, device=device)


def training_result(ref: str, modes=("vanilla", "lomo", "lomo+neuzip"), steps: int = 8, batch: int = 1, seq: int = 64,
                    seed: int = 0, lr: float | None = None, device: str = "cpu", layers: int | None = None,
                    budget_s: float | None = None, compress_threads: int = 0, progress=None,
                    fresh: bool | None = None) -> Result:
    """Train ``ref`` in each of ``modes`` from the same weights on the same batches and measure each: losses, the
    tensor peak split into weights / gradients / optimizer / activations, the process's peak RSS, iterations per
    second (:func:`core.neuzip.training.train_modes`; measured now, never cached). ``fresh``: each mode in fresh
    processes (None: the default, on unless ``LAYERWISE_NEUZIP_FRESH=0``)."""
    return analysis_result("training", ref=ref, modes=modes, steps=steps, batch=batch, seq=seq, seed=seed, lr=lr,
                           device=device, layers=layers, budget_s=budget_s, compress_threads=compress_threads,
                           fresh=fresh, progress=progress)


def training_example_result(model: str = "smollm2-135m") -> Result:
    """The committed training comparison of ``model`` (``assets/neuzip/training.json``: the runs at real size)."""
    from core.neuzip.training_views import EXAMPLE_FILE, example_runs

    runs = example_runs()
    if not isinstance(model, str) or model not in runs:
        raise BadInputError(f"no precomputed training run of {model!r} in {EXAMPLE_FILE.name}.",
                            fix="pick one of " + (", ".join(runs) or "none: run python -m core neuzip train-example"))
    run = runs[model]
    return view("training", Found(run, "precomputed", result_key(run["model"], "neuzip/training", run["settings"])))


# the committed training runs: (model, modes, settings), as assets/neuzip/training.json holds them (recorded in one
# process, the modes in turn, on the AVX-512 machine before issue 41): SmolLM2-135M trains 80 steps (25 minutes for
# the seven modes on one shared core; a mode still running after 500 s stops there and says so; the -single QLoRA
# modes are listed for the next recording); the 1 B run trains 4 steps of 2 x 128 tokens (memory and speed, not a
# curve) and leaves out AdamW (two more bf16 copies of 1.24 B weights, 5 GB, on a shared 23 GB machine). Not
# recorded again with each mode in fresh processes: on the AVX2-only CPU that followed, torch's bf16 matrix products
# run at 0.2-4 GFLOP/s (one 1 x 32-token step of llama-1b: 8 CPU minutes), so issue 41's fresh-process figures of
# vanilla, LOMO and LOMO + NeuZip at 1 B are 2 steps of 1 x 32, in docs/neuzip-training.md.
TRAINING_EXAMPLES = (
    ("smollm2-135m", ("vanilla", "vanilla-adamw", "lomo", "lomo+neuzip", "qlora-int8", "qlora-fp4-single", "qlora-fp4",
                      "qlora-nf4-single", "qlora-nf4"),
     {"steps": 80, "batch": 2, "seq": 128, "budget_s": 4500}),
    ("llama-1b", ("vanilla", "lomo", "lomo+neuzip", "qlora-int8", "qlora-nf4", "qlora-fp4"),
     {"steps": 4, "batch": 2, "seq": 128}),
)
TRAINING_EXAMPLE_COMMAND = "python -m core neuzip train-example --threads 1"


def precompute_training_example(path=None, only=None, progress=None) -> Path:
    """Train every run of :data:`TRAINING_EXAMPLES` (``only``: these models; the other runs are kept from the file at
    ``path``) and write them as the committed example (``assets/neuzip/training.json``): about 40 minutes on one core."""
    import json

    from core.files import atomic_write
    from core.neuzip.training import train_modes
    from core.neuzip.training_views import EXAMPLE_FILE, EXAMPLE_FORMAT, example_runs
    from core.neuzip.requests import TrainingRequest

    path = Path(path or EXAMPLE_FILE)
    names = [m for m, _, _ in TRAINING_EXAMPLES]
    only = tuple(names if only is None else only)
    unknown = [m for m in only if m not in names]
    if unknown or not only:
        raise BadInputError(f"no training example of {', '.join(unknown) or 'nothing'}.",
                            fix="pick from " + ", ".join(names))
    kept = example_runs(path)
    runs = []
    for i, (model, modes, kw) in enumerate(TRAINING_EXAMPLES):
        if model in only:
            request = TrainingRequest.parse(model, modes, **kw)
            share = scaled(progress, i / len(TRAINING_EXAMPLES), (i + 1) / len(TRAINING_EXAMPLES))
            runs.append(train_modes(model, modes, request.settings(), progress=share))
        elif model in kept:
            runs.append({k: v for k, v in kept[model].items() if k != "command"})
    for run in runs:  # timings to the 0.1 ms (the losses stay exact: they show LOMO + NeuZip is LOMO bit for bit)
        for m in run["modes"]:
            for key in ("step_seconds", "step_cpu_seconds"):
                m[key] = [round(x, 4) for x in m.get(key, [])]
    doc = {"format": EXAMPLE_FORMAT, "command": TRAINING_EXAMPLE_COMMAND, "runs": runs}
    return atomic_write(path, json.dumps(doc, separators=(",", ":"), default=float))


def compress_result(ref: str, k: int = 7, block_size: int | None = None, out=None, progress=None) -> Result:
    """Write a model's linear weights as a NeuZip checkpoint (``*.safetensors``, checksummed)."""
    return analysis_result("compress", ref=ref, k=k, block_size=block_size, out=out, progress=progress)


def decompress_result(file, model: str | None = None, out=None) -> Result:
    """Read a NeuZip checkpoint back (bit-exact check against ``model``), optionally as plain safetensors."""
    return analysis_result("decompress", file=file, model=model, out=out)


def shown_result(parts: dict, log_x: bool = False) -> Result:
    """The files of what a page shows: any of ``histograms``, ``table``, ``tradeoff``, ``throughput`` (data dicts)."""
    parts = {k: v for k, v in (parts or {}).items() if v}
    if not parts:
        raise BadInputError("nothing to download yet.", fix="run one of the measurements first")
    unknown = [k for k in parts if k not in ANALYSES or not ANALYSES[k].stored_as]
    if unknown:
        raise BadInputError(f"no such part of a page: {', '.join(unknown)}.")
    return page(parts, log_x=bool(log_x))


# ---- the committed example ----------------------------------------------------------------------------------------
def example_parts(ref: str = EXAMPLE_MODEL) -> tuple[dict, dict[str, Result]]:
    """The committed example of ``ref`` for the first view: its data parts and the Results of the page's sections
    (empty when none, when it was computed with other weights or an older codec, or when the model is not prepared)."""
    try:
        fp = _fingerprint(ref)
    except LayerwiseError:  # e.g. SmolLM2 before `models prepare`: the tab says what to press, the app still starts
        return {}, {}
    stored = {e["analysis"]: e for e in EXAMPLES.entries()
              if e["fingerprint"] == fp and e["params"].get("version") == CACHE_VERSION}  # not a stale codec's
    found = {name: named(Found(e["data"], "precomputed", result_key(fp, e["analysis"], e["params"])), ref)
             for name, a in ANALYSES.items() if a.stored_as and (e := stored.get(a.stored_as)) is not None}
    for name, a in ANALYSES.items():
        if a.parts and all(p in found for p in a.parts):
            found[name] = together(name, fp, {p: found[p] for p in a.parts})
    if "tradeoff" in found and "process-memory" in found:  # the trade-off drawn with its settings' processes
        t = found["tradeoff"]
        found["tradeoff"] = Found({**t.data, "process": found["process-memory"].data}, t.source, t.key)
    parts = {name: f.data for name, f in found.items() if ANALYSES[name].stored_as}
    return parts, {name: view(name, f) for name, f in found.items() if name in PAGE}


def precompute_examples(ref: str = EXAMPLE_MODEL, words: int = DEFAULT_WORDS, block_size: int = DEFAULT_BLOCK,
                        path=None, progress=None, only=None) -> Path:
    """Measure the first view of the tab afresh and write it as the example store (minutes per setting on 2 cores),
    through :func:`core.runner.precompute` (every result the calls looked up).

    ``only``: measure just these parts (names in :data:`EXAMPLE_PARTS`) and keep the other parts of ``ref`` from the
    store already at ``path`` (e.g. ``only=("throughput",)`` re-times the codecs without redoing the trade-off)."""
    only = tuple(EXAMPLE_PARTS) if only is None else tuple(only)
    unknown = [p for p in only if p not in EXAMPLE_PARTS]
    if unknown or not only:
        raise BadInputError(f"unknown example part(s) {unknown or only}.", fix="pick from " + ", ".join(EXAMPLE_PARTS))
    path = Path(path or EXAMPLES.path)
    fp = _fingerprint(ref)

    def current(e: dict) -> bool:
        return e["fingerprint"] == fp and e["params"].get("version") == CACHE_VERSION

    kept = {e["analysis"] for e in ExampleStore(path).entries() if current(e)}
    missing = [p for p in EXAMPLE_PARTS if p not in only and p not in OPTIONAL_PARTS
               and ANALYSES[p].stored_as not in kept]
    if missing:
        raise BadInputError(f"{path} holds no current {', '.join(missing)} of {ref} to keep.",
                            fix="precompute every part (leave out --only)")
    calls = {"histograms": lambda: histograms_result(ref, progress=scaled(progress, 0.0, 0.05)),
             "table": lambda: table_result(ref, 7, None, progress=scaled(progress, 0.05, 0.1)),
             "throughput": lambda: throughput_result(ref, 3, block_size, progress=scaled(progress, 0.1, 0.15)),
             "tradeoff": lambda: tradeoff_result(ref, K_CHOICES, block_size, words,
                                                 progress=scaled(progress, 0.15, 0.9)),
             "process-memory": lambda: process_memory_result(ref, K_CHOICES, block_size,
                                                             progress=scaled(progress, 0.9, 1.0))}
    measured = {ANALYSES[p].stored_as for p in only}
    keep = None if len(only) == len(EXAMPLE_PARTS) else (lambda e: current(e) and e["analysis"] not in measured)
    return precompute([calls[p] for p in EXAMPLE_PARTS if p in only], path, keep=keep)
