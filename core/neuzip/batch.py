"""The NeuZip memory / perplexity trade-off over a list of models (:mod:`core.batch`): ``python -m core neuzip batch
--in models.csv --out tradeoff.parquet`` (a ``model`` column: registered names, folders, or hub ids when online).
Each row is :func:`core.neuzip.tradeoff_result` (every point looked up and cached on its own, as in the tab)."""
from __future__ import annotations

from core.batch import BatchKind, Column


def settings(ks=None, block_size=None, words=None, window=None, baselines=True, dataset=None) -> dict:
    from core.neuzip.requests import DEFAULT_BLOCK, DEFAULT_WINDOW, DEFAULT_WORDS, K_CHOICES, TradeoffRequest

    req = TradeoffRequest.parse("settings-check", K_CHOICES if ks is None else ks,
                                DEFAULT_BLOCK if block_size is None else block_size,
                                DEFAULT_WORDS if words is None else words, DEFAULT_WINDOW if window is None else window,
                                baselines, dataset)
    return {"ks": list(req.ks), "block_size": req.block_size, "words": req.words, "window": req.window,
            "baselines": req.baselines, "dataset": req.dataset}


def columns(s: dict) -> list[Column]:
    return [Column("dataset", "string", "the evaluation text"),
            Column("eval_tokens", "int64", "tokens evaluated"),
            Column("settings", "list<string>", "every setting measured (bf16, NeuZip k = ..., baselines)"),
            Column("families", "list<string>", "each setting's family"),
            Column("memory_MB", "list<float64>", "each setting's model memory (MB)"),
            Column("bits_per_weight", "list<float64>", "each setting's bits per linear weight"),
            Column("word_perplexity", "list<float64>", "each setting's word-level perplexity"),
            Column("token_perplexity", "list<float64>", "each setting's token-level perplexity"),
            Column("pareto", "list<string>", "the settings on the memory / perplexity Pareto front, smallest first")]


def open_models(s: dict, progress=None):
    return None, {}  # every row loads its own model


def row(_context, model, s: dict, progress=None) -> tuple[dict, str]:
    from core.neuzip.service import tradeoff_result

    res = tradeoff_result(model, s["ks"], s["block_size"], s["words"], s["window"], s["baselines"], s["dataset"],
                          progress=progress)
    d, points = res.data, res.data["points"]
    return {"dataset": d["dataset"], "eval_tokens": d.get("tokens"), "settings": [p["label"] for p in points],
            "families": [p["family"] for p in points], "memory_MB": [p["memory_bytes"] / 1e6 for p in points],
            "bits_per_weight": [p["bits_per_weight"] for p in points],
            "word_perplexity": [p["perplexity"] for p in points],
            "token_perplexity": [p["token_perplexity"] for p in points], "pareto": list(d["pareto"])}, res.source


def arguments(p) -> None:
    from core.neuzip.requests import DEFAULT_BLOCK, DEFAULT_WINDOW, DEFAULT_WORDS, K_CHOICES, MAX_WORDS, MIN_WORDS

    p.add_argument("--k", type=int, nargs="+", default=list(K_CHOICES), metavar="K", help="mantissa bits to try")
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK, metavar="B",
                   help="normaliser block size, also tried for every k < 7 (0: none)")
    p.add_argument("--words", type=int, default=DEFAULT_WORDS, help=f"evaluation words, {MIN_WORDS} to {MAX_WORDS:,}")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="tokens per perplexity window")
    p.add_argument("--dataset", default=None, help="evaluation text (default: wikipedia-paragraphs offline)")
    p.add_argument("--no-baselines", action="store_true", help="leave out the bitsandbytes / NF4 + rANS points")


def from_args(args) -> dict:
    return {"ks": args.k, "block_size": args.block_size, "words": args.words, "window": args.window,
            "baselines": not args.no_baselines, "dataset": args.dataset}


KIND = BatchKind("neuzip", "neuzip", "NeuZip trade-off", "model", settings, columns, open_models, row, arguments,
                 from_args, example="--in models.csv --out tradeoff.parquet")
