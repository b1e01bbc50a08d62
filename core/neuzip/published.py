"""What the NeuZip paper published about training, as data (never computed here): its Tables 1 and 2, whole, each
row with the paper's mode name, the project's training mode it corresponds to, and every cell as printed.

- :data:`TABLE1`  pre-training decoder-only models on one GPU: GPT-Neo-XL 2.7B, Llama-3 8B, Llama-2 13B; validation
  cross-entropy loss, peak memory (GiB), iterations per second; vanilla, LOMO and LOMO + NeuZip (lossless)
- :data:`TABLE2`  fine-tuning T5 1B, 3B and 11B (encoder-decoder) on SQL generation: SacreBLEU, memory (GiB),
  iterations per second; vanilla, LOMO, LOMO + NeuZip and QLoRA with INT8, FP4, FP4², NF4 and NF4² weights (²: the
  4-bit block scales quantized again, QLoRA's double quantization)
- :func:`table1_rows` / :func:`table2_rows`  one row per model and mode, with the ratios the project's tables show
  (memory over vanilla's and over LOMO's, speed over vanilla's, within each model)

``None`` is a cell the paper leaves empty ("-"); ``oom`` marks a run that ran out of memory (the paper's "OOM").
"""
from __future__ import annotations

# Hao, Cao and Mou, "NeuZip: Memory-Efficient Training and Inference with Dynamic Compression of Neural Networks"
# (arXiv 2410.20650), Tables 1 and 2, read from the paper's text (the rendering the project keeps with the papers).
SOURCE = "Hao, Cao & Mou (2024), NeuZip (arXiv 2410.20650)"
TABLE1_SOURCE = (f"{SOURCE}, Table 1: pre-training decoder-only models on the language modelling task; loss: "
                 "cross-entropy on the validation set; memory: GiB (1024^3 bytes); speed: iterations per second")
TABLE2_SOURCE = (f"{SOURCE}, Table 2: fine-tuning encoder-decoder models on the SQL generation task; BLEU: "
                 "SacreBLEU; memory: GiB (1024^3 bytes); speed: iterations per second")

TABLE1_MODELS = ("GPT-Neo-XL 2.7B", "Llama-3 8B", "Llama-2 13B")
TABLE2_MODELS = ("T5 1B", "T5 3B", "T5 11B")


def _rows(models, table: dict) -> tuple[dict, ...]:
    """``{(paper name, project mode): (cells per model: (score, memory, speed) or "oom")}`` as one row per cell."""
    out = []
    for i, model in enumerate(models):
        for (name, mode), cells in table.items():
            cell = cells[i]
            oom = cell == "oom"
            score, memory, speed = (None, None, None) if oom else cell
            out.append({"model": model, "paper_name": name, "mode": mode, "score": score, "memory_GiB": memory,
                        "it_per_s": speed, "oom": oom})
    return tuple(out)


# Table 1 (score: validation loss). The paper's "+NeuZip Lossless" row is LOMO with NeuZip-compressed weights.
TABLE1 = _rows(TABLE1_MODELS, {
    ("Vanilla", "vanilla"): ((8.81, 11.22, 0.96), (8.61, 30.97, 0.77), "oom"),
    ("LOMO", "lomo"): ((8.81, 6.97, 0.94), (8.61, 19.47, 0.78), (9.10, 26.26, 0.49)),
    ("+NeuZip Lossless", "lomo+neuzip"): ((8.81, 5.54, 0.70), (8.61, 15.25, 0.45), (9.10, 18.58, 0.28)),
})
# Table 2 (score: BLEU). QLoRA is fine-tuning with low-rank adapters over frozen quantized weights; the project's
# qlora-* modes are the same kind (its 4-bit modes without "-single" double-quantize the scales, as FP4² / NF4²).
TABLE2 = _rows(TABLE2_MODELS, {
    ("Vanilla", "vanilla"): ((79.9, 3.82, 3.69), (85.1, 11.32, 2.43), "oom"),
    ("LOMO", "lomo"): ((79.9, 2.75, 3.68), (85.1, 7.07, 2.47), (82.3, 25.95, 0.69)),
    ("+ NeuZip Lossless", "lomo+neuzip"): ((79.9, 2.39, 2.02), (85.1, 5.21, 1.33), (82.3, 20.68, 0.46)),
    ("QLoRA INT8", "qlora-int8"): ((70.4, 5.84, 1.11), (72.1, 11.54, 1.12), (63.5, 33.36, 0.37)),
    ("QLoRA FP4", "qlora-fp4-single"): ((70.1, 3.63, 1.70), (72.1, 7.35, 1.74), (63.3, 22.73, 0.58)),
    ("QLoRA FP4²", "qlora-fp4"): ((70.6, 3.61, 1.63), (72.0, 7.27, 1.61), (60.6, 22.38, 0.57)),
    ("QLoRA NF4", "qlora-nf4-single"): ((70.4, 3.63, 1.83), (71.2, 7.35, 1.65), (59.4, 22.73, 0.57)),
    ("QLoRA NF4²", "qlora-nf4"): ((70.5, 3.61, 1.64), (71.2, 7.07, 1.57), (57.9, 22.38, 0.57)),
})


def _ratio(a, b):
    return None if a is None or not b else round(a / b, 3)


def _with_ratios(rows: tuple[dict, ...], score: str) -> list[dict]:
    by = {(r["model"], r["mode"]): r for r in rows}
    out = []
    for r in rows:
        van, lomo = by.get((r["model"], "vanilla"), {}), by.get((r["model"], "lomo"), {})
        out.append({"model": r["model"], "mode": r["paper_name"], "project_mode": r["mode"],
                    score: r["score"], "memory_GiB": "OOM" if r["oom"] else r["memory_GiB"],
                    "memory_vs_vanilla": _ratio(r["memory_GiB"], van.get("memory_GiB")),
                    "memory_vs_lomo": _ratio(r["memory_GiB"], lomo.get("memory_GiB")),
                    "it_per_s": r["it_per_s"], "speed_vs_vanilla": _ratio(r["it_per_s"], van.get("it_per_s"))})
    return out


def table1_rows() -> list[dict]:
    """Table 1 whole: per model and mode the loss, memory ("OOM" for the run that did not fit), speed and the ratios
    against vanilla's and LOMO's (None where the paper has no number to divide by)."""
    return _with_ratios(TABLE1, "loss")


def table2_rows() -> list[dict]:
    """Table 2 whole, as :func:`table1_rows` (its score is BLEU)."""
    return _with_ratios(TABLE2, "BLEU")


def _cell(v, nd: int = 2) -> str:
    return "-" if v is None else v if isinstance(v, str) else f"{v:.{nd}f}"


SCORE_DIGITS = {"loss": 2, "BLEU": 1}  # as the paper prints them


def markdown(rows: list[dict], score: str) -> str:
    """A table as the paper prints it: one row per mode, score / memory / speed per model."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    by = {(r["model"], r["mode"]): r for r in rows}
    head = "| mode | " + " | ".join(f"{m} {score} | {m} GiB | {m} it/s" for m in models) + " |"
    sep = "|---|" + "---|" * (3 * len(models))
    body = []
    for mode in modes:
        cells = []
        for m in models:
            r = by[(m, mode)]
            cells += [_cell(r[score], SCORE_DIGITS.get(score, 2)), _cell(r["memory_GiB"]), _cell(r["it_per_s"])]
        body.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *body])
