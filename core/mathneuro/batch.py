"""MathNeuro scoring of prompts (:mod:`core.batch`): ``python -m core mathneuro batch --in prompts.csv --out
scores.parquet``. The math-specific parameters are identified once (``method`` at ``proportion``, from ``n`` samples
of the math and non-math datasets; the statistics come from the results cache like the tab's); then each prompt's
teacher-forced loss (nats per token) is measured on the model and on the model with those parameters pruned. A prompt
whose loss rises much depends on them. Each row is looked up and cached on its own (analysis
``mathneuro-batch-prompt``)."""
from __future__ import annotations

from core.batch import BatchKind, Column
from core.errors import BadInputError

VERSION = 1  # of a row's result (the cache key)


def settings(model=None, math=None, nonmath=None, n=None, proportion=None, method=None) -> dict:
    """The identification settings, checked like the tab's (defaults: the tab's)."""
    from core.mathneuro.requests import DEFAULTS, IdentifyRequest

    d = DEFAULTS
    req = IdentifyRequest.parse(model or d["model"], math or d["math"], nonmath or d["nonmath"][0],
                                d["n"] if n is None else n,  # -n 0 is refused, not read as the default (issue 42)
                                d["proportion"] if proportion is None else proportion, method or d["method"])
    return {"model": req.ref, "math": req.math, "nonmath": req.nonmath, "n": req.n, "proportion": req.proportion,
            "method": req.method}


def columns(s: dict) -> list[Column]:
    return [Column("model", "string", "the model scored"),
            Column("tokens", "int32", "tokens scored (every token of the prompt after the first / BOS)"),
            Column("loss", "float64", "teacher-forced loss of the model on the prompt (nats per token)"),
            Column("loss_pruned", "float64", f"the same with the {s['method']} math-specific parameters "
                   f"(K = {s['proportion']:g}) pruned"),
            Column("loss_change", "float64", "loss_pruned - loss: how much the prompt depends on them"),
            Column("selected", "int64", "math-specific parameters pruned")]


def open_model(s: dict, progress=None):
    from core.mathneuro.analysis import selection_summary
    from core.mathneuro.interventions import intervened_view
    from core.mathneuro.service import load, masks_for
    from core.zoo.views import private_view

    lm = load(s["model"])
    masks = masks_for(lm, s["math"], s["nonmath"], s["n"], s["proportion"], s["method"], progress=progress)
    selected = selection_summary(masks)["selected"]
    context = {"lm": lm, "plain": private_view(lm.model), "pruned": intervened_view(lm.model, masks, "prune"),
               "selected": selected}
    return context, {"fingerprint": lm.fingerprint, "selected": selected}


def row(context, prompt, s: dict, progress=None) -> tuple[dict, str]:
    from core.mathneuro.evaluation import teacher_forced_loss
    from core.runner import lookup

    if not prompt or not prompt.strip():
        raise BadInputError("The prompt is empty.", fix="Give a prompt in every row.")
    lm = context["lm"]

    def compute() -> dict:
        before = teacher_forced_loss(context["plain"], lm.tokenizer, [prompt])
        after = teacher_forced_loss(context["pruned"], lm.tokenizer, [prompt])
        return {"tokens": before["tokens"], "loss": before["loss"], "loss_pruned": after["loss"]}

    params = {"prompt": prompt, "version": VERSION, **{k: s[k] for k in ("math", "nonmath", "n", "proportion",
                                                                         "method")}}
    found = lookup(lm.fingerprint, "mathneuro-batch-prompt", params, compute, model=s["model"])
    d = found.data
    return {"model": s["model"], "tokens": d["tokens"], "loss": d["loss"], "loss_pruned": d["loss_pruned"],
            "loss_change": d["loss_pruned"] - d["loss"], "selected": context["selected"]}, found.source


def arguments(p) -> None:
    from core.mathneuro.requests import DEFAULTS

    p.add_argument("--model", default=DEFAULTS["model"], help=f"a causal LM (default {DEFAULTS['model']})")
    p.add_argument("--math", default=DEFAULTS["math"], help="the math dataset the parameters are identified from")
    p.add_argument("--nonmath", default=DEFAULTS["nonmath"][0], help="the non-math dataset")
    p.add_argument("-n", type=int, default=DEFAULTS["n"], help="identification samples per dataset")
    p.add_argument("--proportion", type=float, default=DEFAULTS["proportion"], help="K, the share selected")
    p.add_argument("--method", default=DEFAULTS["method"], help="the identification method")


def from_args(args) -> dict:
    return {"model": args.model, "math": args.math, "nonmath": args.nonmath, "n": args.n,
            "proportion": args.proportion, "method": args.method}


KIND = BatchKind("mathneuro", "mathneuro", "MathNeuro prompt scores", "prompt", settings, columns, open_model, row,
                 arguments, from_args, example="--in prompts.csv --out scores.parquet")
