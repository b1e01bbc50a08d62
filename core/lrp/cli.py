"""``python -m core lrp ...``: train the embedded MambaLRP models and explain a text prediction.

    python -m core lrp train {sentiment,lm,vision} [--out assets/models/NAME] [--seed 0] [--quick]
    python -m core lrp explain --model NAME --text "..." [--method mambalrp] [--target N] [--json]
"""
from __future__ import annotations

import json
import sys

from core.errors import BadInputError


def _progress(fraction: float, message: str) -> None:
    print(f"... [{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)


def _train_args(p) -> None:
    p.add_argument("recipe", choices=["sentiment", "lm", "vision"], help="which model to train")
    p.add_argument("--out", default=None, help="output folder (default: assets/models/<model name>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run with a tiny model")
    p.add_argument("--init-from", default=None,
                   help="sentiment only: a mamba-lm folder whose tokenizer and backbone initialise the classifier")
    p.add_argument("--epochs", type=int, default=None, help="sentiment / vision: override the recipe's epochs")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def run_train(args) -> dict:
    import torch

    from core.lrp import recipes
    from core.paths import ASSETS_DIR

    if args.threads < 1:
        raise BadInputError("--threads must be >= 1.")
    if args.init_from is not None and args.recipe != "sentiment":
        raise BadInputError("--init-from applies to the sentiment recipe only.")
    torch.set_num_threads(args.threads)
    overrides = {"init_from": args.init_from} if args.init_from is not None else {}
    if args.epochs is not None:
        if args.recipe == "lm" or args.epochs < 1:
            raise BadInputError("--epochs must be >= 1 and applies to the sentiment and vision recipes.")
        overrides["epochs"] = args.epochs
    cfg = recipes.recipe_for(args.recipe, seed=args.seed, quick=args.quick, **overrides)
    _, train_fn, name = recipes.RECIPES[args.recipe]
    out = args.out or str(ASSETS_DIR / "models" / name)
    command = f"python -m core lrp train {args.recipe} --seed {args.seed}" + (" --quick" if args.quick else "")
    if args.init_from is not None:
        command += f" --init-from {args.init_from}"
    if args.epochs is not None:
        command += f" --epochs {args.epochs}"
    metrics = train_fn(cfg, out, progress=_progress, recipe_command=command)
    result = {"model": name, "out": str(out), "recipe": command, **metrics}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(f"{k}: {v}" for k, v in result.items()))
    return result


def _explain_args(p) -> None:
    from core.lrp import METHODS

    p.add_argument("--model", required=True, help="a registered text model (mamba-sentiment, mamba-lm) or a folder")
    p.add_argument("--text", required=True, help="the input text")
    p.add_argument("--method", default="mambalrp", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--target", type=int, default=None,
                   help="class index (classifier) or next-token id (LM); default: the top prediction")


def _target_name(ref: str, loaded, target: int) -> str:
    """A class's label from the card (``labels``), or the target token's text for a language model."""
    from pathlib import Path

    from core.zoo.card import read_card_file
    from core.zoo.registry import folder_of

    if loaded.card.kind == "sequence-classifier":
        folder = folder_of(ref) if loaded.card.source == "assets" else Path(ref)
        labels = read_card_file(folder).get("labels", {}) if folder is not None else {}
        return labels.get(str(target), str(target))
    return loaded.tokenizer.convert_ids_to_tokens(target)


def run_explain(args) -> dict:
    from core.lrp import explain
    from core.zoo import load_model

    if not args.text.strip():
        raise BadInputError("--text is empty.", fix="give the sentence to explain.")
    loaded = load_model(args.model)
    if loaded.tokenizer is None:
        raise BadInputError(f"{args.model} has no tokenizer, so it does not take text.",
                            fix="explain a text model such as mamba-sentiment or mamba-lm.")
    ids = loaded.tokenizer(args.text, return_tensors="pt")["input_ids"]
    exp = explain(loaded.model, input_ids=ids, target=args.target, method=args.method)
    tokens = loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    pieces = [loaded.tokenizer.convert_tokens_to_string([t]) for t in tokens]  # 'Ġfilm' -> ' film'
    rel = exp.relevance.tolist()
    result = {"model": args.model, "method": args.method, "target": exp.target,
              "target_name": _target_name(args.model, loaded, exp.target), "logit": exp.logit, "total": exp.total,
              "absorbed": exp.absorbed, "tokens": [{"token": t, "text": p, "relevance": r} for t, p, r in zip(tokens, pieces, rel)]}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        lines = [f"{args.method} on {args.model}: target {exp.target} ({result['target_name']}), "
                 f"logit {exp.logit:.4f}, sum of relevances {exp.total:.4f}"]
        lines += [f"{p!r:>18}  {r:+.4f}" for p, r in zip(pieces, rel)]
        print("\n".join(lines))
    return result


def register(groups) -> None:
    """Add the ``lrp`` commands to the CLI registry (``core.cli.CommandGroups``)."""
    groups.command("lrp", "train", "train an embedded MambaLRP model (sentiment, lm, vision) and write its card",
                   _train_args)(run_train)
    groups.command("lrp", "explain", "per-token relevances of a text model's prediction", _explain_args)(run_explain)
