"""MambaLRP over a file of texts (:mod:`core.batch`): ``python -m core lrp batch --model M --in texts.csv --out
results.parquet``. Each row is what :func:`core.lrp.text_result` computes (looked up in the committed examples and the
results cache under the same key as a single request, cached when computed): the model's prediction, and per method the full relevance vector, its
sum, the explained logit and the ``top_k`` most relevant tokens."""
from __future__ import annotations

from core.batch import BatchKind, Column
from core.errors import BadInputError
from core.lrp.requests import TextRequest, whole

DEFAULT_METHODS = ("mambalrp",)
TOP_K, MAX_TOP_K = 5, 100


def settings(model="mamba-sentiment", methods=DEFAULT_METHODS, target=None, top_k=TOP_K, rules=None) -> dict:
    """The checked settings (the same checks as one text's request)."""
    req = TextRequest.parse(model, "settings check", methods, target, rules)
    top_k = whole(top_k, "top-k", f"use e.g. --top-k {TOP_K}.", high=MAX_TOP_K)
    return {"model": req.model, "methods": req.methods, "target": req.target, "rules": req.rules, "top_k": top_k}


def columns(s: dict) -> list[Column]:
    out = [Column("model", "string", "the model explained (as named)"),
           Column("model_kind", "string", "classifier or lm (next-token prediction)"),
           Column("target", "int64", "the class index / token id explained"),
           Column("target_name", "string", "its name (class label or token text)"),
           Column("predicted", "string", "the model's top prediction"),
           Column("predicted_probability", "float64", "its softmax probability"),
           Column("target_probability", "float64", "the explained target's softmax probability (null for a "
                  "next token outside the ten likeliest)"),
           Column("note", "string", "what cutting a long text did, or empty"),
           Column("n_tokens", "int32", "tokens explained"),
           Column("tokens", "list<string>", "the tokens as typed in the text")]
    for m in s["methods"]:
        out += [Column(f"{m}_relevance", "list<float64>", f"{m}: relevance of every token (same order as tokens)"),
                Column(f"{m}_sum", "float64", f"{m}: sum of the relevances"),
                Column(f"{m}_logit", "float64", f"{m}: the explained logit"),
                Column(f"{m}_top_tokens", "list<string>", f"{m}: the {s['top_k']} most relevant tokens, most first"),
                Column(f"{m}_top_relevance", "list<float64>", f"{m}: their relevances"),
                Column(f"{m}_top_positions", "list<int32>", f"{m}: their positions in tokens")]
    return out


def open_model(s: dict, progress=None):
    from core.lrp import inputs

    loaded = inputs.load(s["model"])
    kind = inputs.kind(loaded)
    if kind == "vision":
        raise BadInputError(f"{s['model']} takes images, not text.", fix="pick mamba-sentiment or mamba-lm.")
    return None, {"fingerprint": loaded.fingerprint, "model_kind": kind}


FIELDS = ("model", "tokens", "target", "target_name", "predictions", "note", "methods")  # what a row reads
# the lookup a row goes through (core.lrp.service.analysis_found), handed over by the service when it is imported:
# the service imports this module (the bias audit runs as a batch), so this module does not import it back
_LOOKUP: list = []


def answer_rows_with(analysis_found) -> None:
    """Set the lookup the rows use (:func:`core.lrp.service.analysis_found`; the service calls this)."""
    _LOOKUP[:] = [analysis_found]


def row(_context, text, s: dict, progress=None) -> tuple[dict, str]:
    """One text, looked up like :func:`core.lrp.text_result` (same key: the examples and the results cache answer
    it, and it is cached for a later single request), without building the page's view of it (the heatmap, its
    figure): the row reads the data."""
    from core.runner import has_fields

    if not _LOOKUP:
        raise RuntimeError("core.lrp.batch's rows need core.lrp.service (import core.lrp)")
    analysis_found = _LOOKUP[0]
    if text is None:
        raise BadInputError("The text is empty.", fix="Give a text in every row.")
    found = analysis_found("lrp/text", None, check=has_fields(*FIELDS), model=s["model"], text=text,
                           methods=s["methods"], target=s["target"], rules=s["rules"])
    d = found.data
    top = d["predictions"][0]
    values = {"model": d["model"], "model_kind": d.get("model_kind"), "target": d["target"],
              "target_name": d["target_name"], "predicted": top["name"], "predicted_probability": top["probability"],
              "target_probability": next((p["probability"] for p in d["predictions"] if p["id"] == d["target"]), None),
              "note": d["note"], "n_tokens": len(d["tokens"]), "tokens": d["tokens"]}
    for m in s["methods"]:
        e = d["methods"][m]
        order = sorted(range(len(e["relevance"])), key=lambda i: -e["relevance"][i])[:s["top_k"]]
        values.update({f"{m}_relevance": e["relevance"], f"{m}_sum": e["total"], f"{m}_logit": e["logit"],
                       f"{m}_top_tokens": [d["tokens"][i] for i in order],
                       f"{m}_top_relevance": [e["relevance"][i] for i in order], f"{m}_top_positions": order})
    return values, found.source


def arguments(p) -> None:
    p.add_argument("--model", default="mamba-sentiment", help="a text model: mamba-sentiment, mamba-lm or a folder")
    p.add_argument("--method", default=",".join(DEFAULT_METHODS), help="one or more (comma-separated) methods")
    p.add_argument("--target", type=int, default=None, help="class index / next-token id (default: the prediction)")
    p.add_argument("--top-k", type=int, default=TOP_K, help=f"most relevant tokens listed per method (default {TOP_K})")


def from_args(args) -> dict:
    return {"model": args.model, "methods": args.method, "target": args.target, "top_k": args.top_k}


KIND = BatchKind("lrp", "lrp", "MambaLRP relevance", "text", settings, columns, open_model, row, arguments, from_args,
                 example="--model mamba-sentiment --in texts.csv --out results.parquet")
