"""The committed evaluations the tab shows, one JSON file per item in ``assets/lrp/evaluation/`` (``index.json``
names them), written by ``python -m core lrp precompute-evaluation``.

:func:`evaluation_store` reads them as a :class:`core.runner.ExampleStore` keyed like the requests of
:mod:`core.lrp.requests` key their results, so an identical request is answered from them at once; the file layout
(and its in-band ``"cached": false``, ``"command"``) is the one the files have always had (:func:`write_item`).
"""
from __future__ import annotations

import json
from pathlib import Path

from core.files import write_output
from core.lrp.key_token import KEY_TOKEN_MODEL
from core.lrp.requests import EVAL_STEPS
from core.paths import ASSETS_DIR
from core.runner import ExampleStore

EVALUATION_DIR = ASSETS_DIR / "lrp" / "evaluation"
EVALUATION_ITEMS = {  # item -> (file stem, analysis, model, the request's raw inputs)
    "mnist": ("faithfulness-vision-mamba-mnist", "lrp-evaluation", "vision-mamba-mnist",
              {"model": "vision-mamba-mnist", "n": 100, "steps": EVAL_STEPS, "methods": None}),
    "sentiment": ("faithfulness-mamba-sentiment", "lrp-evaluation", "mamba-sentiment",
                  {"model": "mamba-sentiment", "n": 150, "steps": EVAL_STEPS, "methods": None}),
    "lm": ("long-range-mamba-lm", "lrp-long-range", "mamba-lm",
           {"model": "mamba-lm", "n": 40, "methods": None, "k": 10, "options": {"integrated_gradients": {"n_steps": 8}}}),
    "key-token": ("key-token", "lrp-key-token", "key-token", {"n": 100, "methods": None, "k": 1}),
    "sentiment-mamba2": ("faithfulness-mamba2-sentiment", "lrp-evaluation", "mamba2-sentiment",
                         {"model": "mamba2-sentiment", "n": 150, "steps": EVAL_STEPS, "methods": None}),
    "sentiment-hybrid": ("faithfulness-hybrid-sentiment", "lrp-evaluation", "hybrid-sentiment",
                         {"model": "hybrid-sentiment", "n": 150, "steps": EVAL_STEPS, "methods": None}),
    "key-token-mamba2": ("key-token-mamba2", "lrp-key-token", "key-token-mamba2",
                         {"n": 100, "methods": None, "k": 1, "family": "mamba2"}),
    "key-token-hybrid": ("key-token-hybrid", "lrp-key-token", "key-token-hybrid",
                         {"n": 100, "methods": None, "k": 1, "family": "hybrid"}),
    "agreement": ("agreement-mamba-lm", "lrp-agreement", "mamba-lm", {"model": "mamba-lm", "n": 300, "methods": None}),
    # SmolLM2-135M (a Llama transformer): explained once transformer families have rules (issue 45)
    "agreement-smollm2": ("agreement-smollm2-135m", "lrp-agreement", "smollm2-135m",
                          {"model": "smollm2-135m", "n": 300, "methods": None}),
}
ANALYSES = frozenset(analysis for _, analysis, _, _ in EVALUATION_ITEMS.values())
IN_BAND = ("cached", "source")  # provenance the files carry; a Found says it instead


def _params(res: dict) -> dict:
    """The lookup parameters of a committed result: what its request's ``key()`` gives."""
    common = {"n": res["n"], "seed": res["seed"], "methods": res["methods"], "options": res["method_options"]}
    if res["analysis"] == "lrp-evaluation":
        params = {"dataset": res["dataset"], "split": res["split"], **common, "target": res["target"],
                  "steps": res["steps"], "baseline": res["baseline"], "faithfulness": "faithfulness" in res}
        if "retention" in res:
            params["retention"] = res["retention"]["version"]
        return params
    if res["analysis"] == "lrp-long-range":
        return {"dataset": res["dataset"], "split": res["split"], **common, "target": res["target"],
                "k": res["k"], "max_tokens": res["length"]}
    if res["analysis"] == "lrp-agreement":
        return {"n": res["n"], "seed": res["seed"], "methods": res["methods"], "options": res["method_options"],
                "version": res["version"]}
    params = {"n": res["n"], "k": res["k"], "seed": res["seed"], "methods": res["methods"],  # over seeds, versions 2-3
              "options": res["method_options"], "model": KEY_TOKEN_MODEL, "version": res.get("version", 2),
              "seeds": res["n_seeds"]}
    if res.get("family", "mamba") != "mamba":
        params["family"] = res["family"]
    return params


def _key_token_name(res: dict) -> str:
    family = res.get("family", "mamba")
    return "key-token" if family == "mamba" else f"key-token-{family}"


def evaluation_store(folder=None) -> ExampleStore:
    """The committed results of ``folder`` (default :data:`EVALUATION_DIR`) as example-store entries, in the
    index's order; missing or unreadable files are skipped."""
    folder = Path(folder) if folder is not None else EVALUATION_DIR
    try:
        index = json.loads((folder / "index.json").read_text())["items"]
    except (OSError, ValueError, KeyError, TypeError):
        return ExampleStore.from_entries([])
    entries = []
    for name in index.values():
        try:
            res = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        name = res.get("model") if isinstance(res.get("model"), str) else _key_token_name(res)
        entries.append({"model": name, "fingerprint": res.get("fingerprint") or f"{name}-{res['seed']}",
                        "analysis": res["analysis"], "params": _params(res),
                        "data": {k: v for k, v in res.items() if k not in IN_BAND}})
    return ExampleStore.from_entries(entries)


def write_item(folder, item: str, data: dict, n: int | None = None) -> Path:
    """Write ``item``'s result into ``folder`` (its file, then the index of the items there), as the files have
    always been written: the data, ``"cached": false`` and the command that made it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n_flag = f" -n {n}" if n is not None else ""
    result = {**data, "cached": False, "command": f"python -m core lrp precompute-evaluation --only {item}{n_flag}"}
    written = write_output(folder / f"{EVALUATION_ITEMS[item][0]}.json", data=result)
    present = [k for k, v in EVALUATION_ITEMS.items() if (folder / f"{v[0]}.json").exists()]
    write_output(folder / "index.json", data={"items": {k: f"{EVALUATION_ITEMS[k][0]}.json" for k in present},
                                              "command": "python -m core lrp precompute-evaluation"})
    return written
