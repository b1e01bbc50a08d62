"""Why QLoRA's memory comes out below LOMO + NeuZip's here and above it in the paper's Table 2: what the training
recipe's two memory savers do to each mode's peak, measured.

Every mode of :mod:`core.neuzip.training` trains with every decoder layer checkpointed and the loss computed 128 tokens
at a time (the logits of 128 tokens exist at once). Both shrink what a mode keeps for its backward: a LoRA adapter
saves its input (and the low-rank product) at every linear layer of every decoder layer, and a full-vocabulary
logits tensor is float32 ``tokens x vocab``. :func:`measure` trains one model in the chosen modes under each of
:data:`RECIPES` (the project's, without checkpointing, with the whole logits at once, with neither) and records each
mode's peak of live tensor bytes split into weights / gradients / optimizer / activations (the memory tracker of
:func:`core.neuzip.training.train_modes`, first ``track_steps`` steps). :func:`order_rows` puts QLoRA's peaks beside
LOMO + NeuZip's under every pairing of the two modes' recipes.

The committed measurement: ``assets/neuzip/recipe_effects.json`` (``python -m core neuzip recipe-effects``).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from core.paths import ASSETS_DIR
from core.progress import report, scaled

__all__ = ["RECIPES", "EFFECTS_FILE", "EFFECTS_MODES", "measure", "load", "peak_rows", "order_rows", "markdown"]

EFFECTS_FILE = ASSETS_DIR / "neuzip" / "recipe_effects.json"
FORMAT = "layerwise-neuzip-recipe-effects/1"
MIB = 2 ** 20
# name -> (checkpointing, loss_chunk): the project's recipe and the three ways to drop its savers
RECIPES = {
    "project": (True, 128),
    "no checkpointing": (False, 128),
    "whole logits": (True, 0),
    "neither": (False, 0),
}
# LOMO + NeuZip (LOMO's activations are the same: only the weights at rest differ) and QLoRA INT8 and NF4² (FP4 and
# the float32 scales change the weights' bytes, not the activations); each measured run costs minutes of profiling
EFFECTS_MODES = ("lomo+neuzip", "qlora-int8", "qlora-nf4")


def measure(ref: str = "smollm2-135m", modes=EFFECTS_MODES, steps: int = 2, batch: int = 2, seq: int = 128,
            seed: int = 0, progress=None) -> dict:
    """Train ``ref`` in ``modes`` under each recipe of :data:`RECIPES` (same weights, same batches) and keep each
    mode's peak and its split: ``{model, settings, runs: {recipe: {mode: {peak_bytes, peak_split, final_loss}}},
    skipped, machine, load_average}``."""
    from core.neuzip.training import TrainSettings, train_modes

    base = TrainSettings(steps=steps, batch=batch, seq=seq, seed=seed, track_steps=min(2, steps))
    runs, skipped, first = {}, {}, None
    for i, (name, (ckpt, chunk)) in enumerate(RECIPES.items()):
        report(progress, i / len(RECIPES), f"recipe {name}")
        run = train_modes(ref, modes, replace(base, checkpointing=ckpt, loss_chunk=chunk),
                          progress=scaled(progress, i / len(RECIPES), (i + 1) / len(RECIPES)))
        first = first or run
        skipped.update(run.get("skipped", {}))
        runs[name] = {m["mode"]: {"peak_bytes": m["peak_bytes"], "peak_split": m["peak_split"],
                                  "final_loss": m["final_loss"], "peak_rss_bytes": m.get("peak_rss_bytes")}
                      for m in run["modes"]}
    report(progress, 1.0, "done")
    return {"format": FORMAT, "model": ref, "parameters": first["parameters"], "vocab": first["vocab"],
            "decoder_layers": first["decoder_layers"],
            "settings": {"steps": steps, "batch": batch, "seq": seq, "seed": seed, "track_steps": base.track_steps},
            "recipes": {k: {"checkpointing": c, "loss_chunk": n} for k, (c, n) in RECIPES.items()},
            "runs": runs, "skipped": skipped, "machine": first["machine"],
            "load_average": first.get("load_average_start"), "threads": first["threads"],
            "command": "python -m core neuzip recipe-effects --threads 1"}


def load(path: str | Path | None = None) -> dict | None:
    """The committed measurement (None when missing or of another format)."""
    try:
        doc = json.loads(Path(path or EFFECTS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("format") == FORMAT else None


def _mib(b) -> float | None:
    return None if b is None else round(b / MIB, 1)


def peak_rows(doc: dict) -> list[dict]:
    """One row per mode: its peak (MiB) and activations at the peak under each recipe."""
    from core.neuzip.training import MODES
    modes = list(dict.fromkeys(m for run in doc["runs"].values() for m in run))
    rows = []
    for m in modes:
        row = {"mode": MODES[m].label}
        for recipe, run in doc["runs"].items():
            r = run.get(m)
            row[f"{recipe}: peak"] = _mib(r["peak_bytes"]) if r else None
            row[f"{recipe}: activations"] = _mib(r["peak_split"]["activations"]) if r else None
        rows.append(row)
    return rows


def order_rows(doc: dict, neuzip_recipe: str = "project") -> list[dict]:
    """LOMO + NeuZip under ``neuzip_recipe`` against each QLoRA mode under each recipe: the two peaks (MiB), QLoRA's
    over LOMO + NeuZip's, and which is lower (the paper's Table 2: QLoRA 1.51-2.44x LOMO + NeuZip's at T5 1B)."""
    from core.neuzip.training import MODES
    nz = doc["runs"].get(neuzip_recipe, {}).get("lomo+neuzip")
    if nz is None:
        return []
    rows = []
    for recipe, run in doc["runs"].items():
        for m, r in run.items():
            if not MODES[m].needs_bnb:
                continue
            ratio = r["peak_bytes"] / nz["peak_bytes"]
            rows.append({"QLoRA mode": MODES[m].label, "QLoRA recipe": recipe, "QLoRA peak MiB": _mib(r["peak_bytes"]),
                         f"LOMO + NeuZip ({neuzip_recipe}) MiB": _mib(nz["peak_bytes"]),
                         "QLoRA / LOMO + NeuZip": round(ratio, 3),
                         "lower": "QLoRA" if ratio < 1 else "LOMO + NeuZip"})
    return rows


def markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("-" if r[c] is None else f"{r[c]:,}" if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    return "\n".join(lines)


def _range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


def paper_ratio() -> str:
    """QLoRA's memory over LOMO + NeuZip's in the paper's Table 2 at T5 1B (its smallest model), as a range."""
    from core.neuzip.published import table2_rows
    rows = [r for r in table2_rows() if r["model"] == "T5 1B"]
    nz = next(r["memory_GiB"] for r in rows if r["project_mode"] == "lomo+neuzip")
    return _range([r["memory_GiB"] / nz for r in rows if r["project_mode"].startswith("qlora")])


def ratios(doc: dict) -> dict[str, dict[str, str]]:
    """Per recipe: QLoRA's peaks over LOMO + NeuZip's under the same recipe (``same``) and under the project's
    (``vs_project``), as ranges over the QLoRA modes."""
    from core.neuzip.training import MODES
    nz_project = doc["runs"]["project"]["lomo+neuzip"]["peak_bytes"]
    out = {}
    for recipe, run in doc["runs"].items():
        q = [r["peak_bytes"] for m, r in run.items() if MODES[m].needs_bnb]
        if q and "lomo+neuzip" in run:
            out[recipe] = {"same": _range([x / run["lomo+neuzip"]["peak_bytes"] for x in q]),
                           "vs_project": _range([x / nz_project for x in q])}
    return out


def effects_markdown(doc: dict | None = None) -> str:
    """The measurement as the tab and the docs show it: what each saver does to each mode's peak, and QLoRA over
    LOMO + NeuZip under each pairing beside the paper's ratio ("" without the committed file)."""
    doc = doc or load()
    if not doc or "project" not in doc["runs"] or "lomo+neuzip" not in doc["runs"]["project"]:
        return ""
    s, r = doc["settings"], ratios(doc)
    head = (f"**Why QLoRA peaks below LOMO + NeuZip here and above it in the paper's Table 2.** `{doc['model']}` "
            f"({doc['parameters'] / 1e6:,.1f} M parameters, {doc['decoder_layers']} decoder layers, vocabulary "
            f"{doc['vocab']:,}), {s['steps']} steps of {s['batch']} x {s['seq']} tokens per mode under four recipes "
            "(the project's: every decoder layer checkpointed and the loss 128 tokens at a time; without "
            "checkpointing; with the whole logits at once; with neither); peak of live tensor bytes in MiB and the "
            "activations in it (first 2 steps). QLoRA's peak over LOMO + NeuZip's, both under the same recipe: "
            + "; ".join(f"{k} {v['same']}" for k, v in r.items())
            + ". QLoRA under each recipe against LOMO + NeuZip under the project's: "
            + "; ".join(f"{k} {v['vs_project']}" for k, v in r.items())
            + f". The paper's Table 2 at T5 1B: QLoRA {paper_ratio()} of LOMO + NeuZip's 2.39 GiB.")
    return head + "\n\n" + markdown(peak_rows(doc))
