"""How a training comparison (:func:`core.neuzip.training.train_modes`) is shown: its table (one row per mode, against
vanilla and LOMO: the tensor figure and the process figure), the paper's Tables 1 and 2 beside it (whole,
:mod:`core.neuzip.published`), its status text, and two figures: each mode's peak memory, its tensor peak as stacked
bars (weights / gradients / optimizer state / activations, the paper's analogue) beside the process's peak RSS (what
the machine gives the process), iterations per second above; and the loss curves of the modes overlaid. Labels and
colours come from the mode registry (:data:`core.neuzip.training.MODES`).

The committed example (``assets/neuzip/training.json``, remade by ``python -m core neuzip train-example``) holds
the runs at real size: :func:`example_runs`.
"""
from __future__ import annotations

import json
from pathlib import Path

from core.figures import go, style
from core.neuzip.memtrack import CATEGORIES
from core.neuzip import published
from core.neuzip.training import MODES, PAPER_SOURCE
from core.paths import ASSETS_DIR

__all__ = ["EXAMPLE_FILE", "EXAMPLE_FORMAT", "example_runs", "training_rows", "paper_rows", "paper_table2_rows",
           "training_status",
           "memory_figure", "loss_figure", "CATEGORY_COLOURS", "ratios"]

EXAMPLE_FILE = ASSETS_DIR / "neuzip" / "training.json"
EXAMPLE_FORMAT = "layerwise-neuzip-training/1"
CATEGORY_COLOURS = {"weights": "#0072B2", "gradients": "#D55E00", "optimizer": "#CC79A7", "activations": "#009E73"}
PROCESS_COLOUR = "#7F7F7F"  # the process's peak RSS, beside the stacked tensor bars
MIB = 2 ** 20


def example_runs(path: str | Path | None = None) -> dict[str, dict]:
    """``{model: run}`` of the committed example (empty when the file is missing or of another format)."""
    try:
        doc = json.loads(Path(path or EXAMPLE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if doc.get("format") != EXAMPLE_FORMAT:
        return {}
    return {run["model"]: {**run, "command": doc.get("command", "")} for run in doc.get("runs", [])}


def ratios(run: dict) -> dict[str, dict]:
    """Per mode: its peak memory over vanilla's and over LOMO's (the paper's two comparisons), by the tensor ledger
    and by the process's peak RSS, and its speed over vanilla's, by the wall clock and by CPU time (None without
    that row in the run, or without it measured)."""
    by = {m["mode"]: m for m in run["modes"]}

    def over(m, key, base="vanilla"):
        b = by.get(base)
        return m[key] / b[key] if b and b.get(key) and m.get(key) else None
    return {name: {"memory_vs_vanilla": over(m, "peak_bytes"), "memory_vs_lomo": over(m, "peak_bytes", "lomo"),
                   "rss_vs_vanilla": over(m, "peak_rss_bytes"), "rss_vs_lomo": over(m, "peak_rss_bytes", "lomo"),
                   "speed_vs_vanilla": over(m, "it_per_s"), "cpu_speed_vs_vanilla": over(m, "it_per_cpu_s")}
            for name, m in by.items()}


def fresh(run: dict) -> bool:
    """Whether the run measured each mode in fresh processes (the process figure is then each mode's own)."""
    return bool(run.get("modes")) and all(m.get("fresh_process") for m in run["modes"])


def _r(v, d=3):
    return None if v is None else round(v, d)


def training_rows(run: dict) -> list[dict]:
    """One row per mode (memory in MiB), then one per mode that was skipped, with the reason."""
    rel = ratios(run)
    rows = []
    for m in run["modes"]:
        split = m.get("peak_split") or {}
        r = rel[m["mode"]]
        row = {"mode": MODES[m["mode"]].label, "steps": m["steps"], "final_loss": _r(m["final_loss"], 4),
               "peak_MiB": _r(m["peak_bytes"] / MIB, 1) if m.get("peak_bytes") else None,
               **{f"{c}_MiB": _r(split[c] / MIB, 1) if c in split else None for c in CATEGORIES},
               "memory_vs_vanilla": _r(r["memory_vs_vanilla"]), "memory_vs_lomo": _r(r["memory_vs_lomo"]),
               "it_per_s": _r(m["it_per_s"], 4), "speed_vs_vanilla": _r(r["speed_vs_vanilla"]),
               "it_per_cpu_s": _r(m.get("it_per_cpu_s"), 4), "cpu_speed_vs_vanilla": _r(r["cpu_speed_vs_vanilla"]),
               "peak_RSS_MiB": _r((m.get("peak_rss_bytes") or 0) / MIB, 0),
               "rss_vs_vanilla": _r(r["rss_vs_vanilla"]), "rss_vs_lomo": _r(r["rss_vs_lomo"]),
               "note": "" if m.get("fresh_process") else "RSS: one process for every mode"}
        if m.get("reserved_bytes") is not None:
            row["reserved_MiB"] = _r(m["reserved_bytes"] / MIB, 1)
            row["cuda_allocated_MiB"] = _r(m["cuda_max_allocated_bytes"] / MIB, 1)
        rows.append(row)
    for name, why in run.get("skipped", {}).items():
        rows.append({"mode": MODES[name].label, "steps": 0, "note": f"skipped: {why}"})
    return rows


def _paper(rows: list[dict], score: str) -> list[dict]:
    return [{"model": r["model"], "mode": MODES[r["project_mode"]].label, "paper_row": r["mode"],
             score: r[score], "peak_GiB": None if r["memory_GiB"] == "OOM" else r["memory_GiB"],
             "memory_vs_vanilla": r["memory_vs_vanilla"], "memory_vs_lomo": r["memory_vs_lomo"], "it_per_s": r["it_per_s"],
             "speed_vs_vanilla": r["speed_vs_vanilla"], "note": "out of memory (OOM)" if r["memory_GiB"] == "OOM" else ""}
            for r in rows]


def paper_rows() -> list[dict]:
    """The paper's Table 1, whole (pre-training on one GPU: loss, memory in GiB, iterations per second; ``note`` says
    which run ran out of memory, its memory None: one type per column),
    with the same ratios as the measured table: peak over vanilla's and over LOMO's, speed over vanilla's, within
    each model (:mod:`core.neuzip.published`)."""
    return _paper(published.table1_rows(), "loss")


def paper_table2_rows() -> list[dict]:
    """The paper's Table 2, whole (fine-tuning T5 1B / 3B / 11B on SQL generation beside QLoRA: BLEU, memory, speed),
    with the same ratios."""
    return _paper(published.table2_rows(), "BLEU")


def _paper_headline() -> str:
    """The paper's LOMO + NeuZip ratios on Llama-3 8B (its Table 1), for the status line."""
    r = next((r for r in paper_rows() if r["model"] == "Llama-3 8B" and r["mode"] == MODES["lomo+neuzip"].label),
             None)
    return "" if r is None else (f" The paper, Llama-3 8B on a GPU: {r['memory_vs_vanilla']:.2f}x vanilla's peak, "
                                 f"{r['memory_vs_lomo']:.2f}x LOMO's, {r['speed_vs_vanilla']:.2f}x vanilla's speed.")


def _mib(b) -> str:
    return f"{b / MIB:,.1f} MiB"


def training_status(run: dict, shown) -> str:
    """What was trained, how, and the headline: LOMO + NeuZip's memory and speed against vanilla, and whether its
    training was bit for bit LOMO's."""
    s = run["settings"]
    src = "Precomputed example" if shown.source == "precomputed" else "Measured now"
    head = (f"{src}: `{run['model']}` ({run['parameters'] / 1e6:,.1f} M parameters, {run['decoder_layers']} decoder "
            f"layers) trained {s['steps']} steps of {s['batch']} x {s['seq']} tokens in each mode, same weights and "
            f"batches, on {run['device']} with {run['threads']} torch thread(s); every decoder layer checkpointed, the "
            f"loss {s['loss_chunk']} tokens at a time, constant learning rates, no clipping. Memory: peak of live "
            f"tensor bytes (allocator-level, the first {s['track_steps']} steps); speed: median step time of the "
            "steps after those, by CPU time (what a step costs on a free core) and by the wall clock (which on a "
            "shared machine also measures the load).")
    rel, by = ratios(run), {m["mode"]: m for m in run["modes"]}
    parts = []
    if "lomo+neuzip" in by and by["lomo+neuzip"].get("peak_bytes"):
        nz, r = by["lomo+neuzip"], rel["lomo+neuzip"]
        against = [f"**{r[key]:.2f}x** {word}'s {_mib(by[base]['peak_bytes'])}"
                   for key, base, word in (("memory_vs_vanilla", "vanilla", "vanilla"),
                                           ("memory_vs_lomo", "lomo", "LOMO"))
                   if r[key] is not None]
        speed = "" if r["cpu_speed_vs_vanilla"] is None else \
            f", **{r['cpu_speed_vs_vanilla']:.2f}x** vanilla's speed by CPU time"
        wall = "" if r["speed_vs_vanilla"] is None else f" ({r['speed_vs_vanilla']:.2f}x by the wall clock)" if speed \
            else f", {r['speed_vs_vanilla']:.2f}x vanilla's speed by the wall clock"
        parts.append(f"LOMO + NeuZip's tensors peak at **{_mib(nz['peak_bytes'])}**" + (", " if against else "")
                     + " and ".join(against) + f"{speed}{wall}." + _paper_headline())
        if nz.get("peak_rss_bytes"):
            rss_against = [f"**{r[key]:.2f}x** {word}'s {_mib(by[base]['peak_rss_bytes'])}"
                           for key, base, word in (("rss_vs_vanilla", "vanilla", "vanilla"),
                                                   ("rss_vs_lomo", "lomo", "LOMO")) if r[key] is not None]
            where = "in its own fresh process" if fresh(run) else "in one process shared by the modes (not each mode's own)"
            parts.append(f"As the machine sees it ({where}), its process peaks at **{_mib(nz['peak_rss_bytes'])}** "
                         "of RSS" + (", " + " and ".join(rss_against) if rss_against else "") + ".")
    for pair, same in run.get("identical", {}).items():
        a, b = pair.split(" vs ")
        word = "bit for bit the same" if same["losses"] and same["weights"] else "not the same"
        parts.append(f"{MODES[a].label} against {MODES[b].label}: losses and final weights {word}.")
    short = [f"{MODES[m['mode']].label} after {m['steps']}" for m in run["modes"] if m["steps"] < s["steps"]]
    if short:
        parts.append("Stopped early (time budget or Stop): " + ", ".join(short) + " steps.")
    if run.get("skipped"):
        parts.append("Skipped: " + "; ".join(f"{MODES[k].label} ({v})" for k, v in run["skipped"].items()) + ".")
    load = run.get("load_average_start")
    tail = f" Load average at the start {load[0]:.1f}." if load else ""
    return head + " " + " ".join(parts) + tail


def memory_figure(run: dict):
    """Per mode, its tensor peak as stacked bars (weights, gradients, optimizer state, activations; MiB) and beside
    it, in grey, the process's peak RSS (MiB: the whole process as the machine sees it), its iterations per second
    (by CPU time) above."""
    fig = go.Figure()
    modes = run["modes"]
    labels = [MODES[m["mode"]].label for m in modes]
    rss = [(m.get("peak_rss_bytes") or 0) / MIB for m in modes]
    with_rss = any(rss)
    width, left = (0.38, -0.4) if with_rss else (0.6, -0.3)
    base = [0.0] * len(modes)
    tops = [(m.get("peak_bytes") or 0) / MIB for m in modes]
    for c in CATEGORIES:
        ys = [((m.get("peak_split") or {}).get(c) or 0) / MIB for m in modes]
        last = c == CATEGORIES[-1]  # the top of the stack carries the peak and the speed
        fig.add_trace(go.Bar(x=labels, y=ys, base=list(base), name=c, marker_color=CATEGORY_COLOURS[c],
                             legendgroup="tensors", legendgrouptitle_text="tensor peak (stacked)",
                             offset=left, width=width, hovertemplate="%{x}: " + c + " %{y:,.1f} MiB<extra></extra>",
                             text=[f"{_short(t)} MiB<br>{_speed(m)}" for t, m in zip(tops, modes)] if last else None,
                             textposition="outside" if last else None, cliponaxis=False))
        base = [b + y for b, y in zip(base, ys)]
    if with_rss:
        where = "fresh process" if fresh(run) else "one process, all modes"
        fig.add_trace(go.Bar(x=labels, y=rss, name=f"peak RSS ({where})", marker_color=PROCESS_COLOUR,
                             legendgroup="process", legendgrouptitle_text="the process",
                             marker_pattern_shape="/", offset=0.02, width=width, text=[f"{_short(v)}" for v in rss],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{x}: the process's peak RSS %{y:,.0f} MiB<extra></extra>"))
    fig.update_layout(barmode="overlay", bargap=0.2)
    fig.update_yaxes(range=[0, 1.22 * max(tops + rss or [1])])
    title = f"Peak memory while training {run['model']} ({run['device']}): tensors" + \
        (" (stacked) and the process (grey)" if with_rss else "")
    return style(fig, title, "training mode", "peak memory (MiB)")


def _short(mib: float) -> str:
    """MiB to a whole number from 100 up, else to three significant figures (a tiny model's 5.74, not 6)."""
    return f"{mib:,.0f}" if mib >= 100 else f"{mib:.3g}"


def _speed(m: dict) -> str:
    v = m.get("it_per_cpu_s") or m.get("it_per_s")
    return "" if not v else f"{v:.3g} it/s" + (" (CPU)" if m.get("it_per_cpu_s") else "")


LOSS_WINDOW = 8  # the loss curves show the mean of the last 8 steps: every mode sees the same batch at a step, and
# the batch-to-batch spread (about 0.5 nats on SmolLM2) would hide the modes' differences


def trailing_mean(values: list[float], window: int = LOSS_WINDOW) -> list[float]:
    """The mean of the last ``window`` values at each step (of fewer at the first steps)."""
    return [sum(values[max(0, i + 1 - window):i + 1]) / min(i + 1, window) for i in range(len(values))]


def loss_figure(run: dict):
    """The training loss of every mode by step, the mean of the last :data:`LOSS_WINDOW` steps (LOMO + NeuZip dashed
    over LOMO: the curves coincide); each step's own loss is in the hover text and the data."""
    fig = go.Figure()
    for m in run["modes"]:
        mode = MODES[m["mode"]]
        fig.add_trace(go.Scatter(x=list(range(1, len(m["losses"]) + 1)), y=trailing_mean(m["losses"]),
                                 customdata=m["losses"], name=mode.label, mode="lines",
                                 hovertemplate="step %{x}: mean %{y:.4f}, this step %{customdata:.4f}",
                                 line={"color": mode.colour, "width": 2,
                                       "dash": "dash" if mode.same_training_as else "solid"}))
    s = run["settings"]
    return style(fig, f"Training loss of {run['model']}, mean of the last {LOSS_WINDOW} steps ({s['batch']} x "
                      f"{s['seq']} tokens a step)", "step", f"training loss, {LOSS_WINDOW}-step mean (nats per token)")


PAPER_NOTE = PAPER_SOURCE
