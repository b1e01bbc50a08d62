"""``bench/gpu.py``'s training row: a few steps of a random-weight Llama-3.2-1B-config model (llama-1b) on the device in
vanilla SGD, LOMO and LOMO + NeuZip (the weights compressed on the device and re-encoded there after each fused
update: core.neuzip.resident), the same batches for each, with each mode's peak allocated and reserved device memory
(``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` over its steps, the model at rest included) and its
speed, beside the ratios of the NeuZip paper's Table 1 (Llama-3 8B): LOMO + NeuZip at 0.49x vanilla's memory and
0.78x LOMO's, 0.58x vanilla's speed. The target: LOMO + NeuZip's allocated peak <= 0.55x vanilla's."""
from __future__ import annotations

from gpu_common import RowContext, Timer, log

MODES = ("vanilla", "lomo", "lomo+neuzip")


def paper_ratios() -> dict:
    """The NeuZip paper's Table 1 ratios for Llama-3 8B (core.neuzip.training.PAPER_TABLE1)."""
    from core.neuzip.training import PAPER_SOURCE, PAPER_TABLE1

    rows = {r["mode"]: r for r in PAPER_TABLE1 if r["model"] == "Llama-3 8B"}
    nz, lomo, van = rows["lomo+neuzip"], rows["lomo"], rows["vanilla"]
    return {"memory_lomo_neuzip_over_vanilla": nz["memory_GiB"] / van["memory_GiB"],
            "memory_lomo_neuzip_over_lomo": nz["memory_GiB"] / lomo["memory_GiB"],
            "memory_lomo_over_vanilla": lomo["memory_GiB"] / van["memory_GiB"],
            "speed_lomo_neuzip_over_vanilla": nz["it_per_s"] / van["it_per_s"],
            "speed_lomo_over_vanilla": lomo["it_per_s"] / van["it_per_s"], "source": PAPER_SOURCE}


def neuzip_train(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Train ``sizes["train_model"]`` in the three modes (core.neuzip.training.train_modes), a mode stopped at the row's
    deadline keeping its steps so far (``stopped``)."""
    import torch

    from core.errors import Cancelled
    from core.neuzip.training import RANDOM_MODELS, TrainSettings, train_modes

    ref, steps, seq = sizes["train_model"], sizes["train_steps"], sizes["train_seq"]
    vocab = RANDOM_MODELS[ref]["vocab_size"]
    batches = torch.randint(0, vocab, (steps, 1, seq), generator=torch.Generator().manual_seed(0))
    settings = TrainSettings(steps=steps, batch=1, seq=seq, track_steps=0, device=str(device))
    stopped = None

    def progress(fraction, message):
        log(f"neuzip_train: {message}")
        if ctx.past():
            raise Cancelled("the row's deadline passed")

    try:
        run = train_modes(ref, MODES, settings, progress=progress, batches=batches)
    except Cancelled as stop:
        run, stopped = stop.partial or {"modes": []}, stop.message
    by = {m["mode"]: m for m in run.get("modes", [])}
    alloc = {k: v.get("cuda_max_allocated_bytes") for k, v in by.items()}
    reserved = {k: v.get("reserved_bytes") for k, v in by.items()}
    speed = {k: v.get("it_per_s") for k, v in by.items()}

    def ratio(table, a, b):
        return table[a] / table[b] if table.get(a) and table.get(b) else None

    nz_over_vanilla = ratio(alloc, "lomo+neuzip", "vanilla")
    result = {
        "what": f"{ref} ({run.get('parameters', 0) / 1e9:.2f} B parameters, random weights): {steps} steps of "
                f"{seq} tokens, batch 1, in {', '.join(MODES)} on {device}",
        "model": ref, "modes": {k: {key: v.get(key) for key in ("steps", "losses", "it_per_s", "step_seconds",
                                                                  "cuda_max_allocated_bytes", "reserved_bytes",
                                                                  "weights_digest")} for k, v in by.items()},
        "allocated_bytes": alloc, "reserved_bytes": reserved, "it_per_s": speed,
        "ratios": {"memory_lomo_neuzip_over_vanilla": nz_over_vanilla,
                   "memory_lomo_neuzip_over_lomo": ratio(alloc, "lomo+neuzip", "lomo"),
                   "memory_lomo_over_vanilla": ratio(alloc, "lomo", "vanilla"),
                   "reserved_lomo_neuzip_over_vanilla": ratio(reserved, "lomo+neuzip", "vanilla"),
                   "speed_lomo_neuzip_over_vanilla": ratio(speed, "lomo+neuzip", "vanilla"),
                   "speed_lomo_over_vanilla": ratio(speed, "lomo", "vanilla")},
        "paper_table1_llama3_8b": paper_ratios(), "identical": run.get("identical"), "stopped": stopped,
        "target_at_most_0_55": None if not timer.cuda or nz_over_vanilla is None else bool(nz_over_vanilla <= 0.55),
        "weights_on_device": bool(timer.cuda),
        "notes": ["memory: torch.cuda.max_memory_allocated / max_memory_reserved over the mode's steps, reset after "
                  "its model was built and set up (the model at rest is in the peak)",
                  "it_per_s: the median step time (every step timed; the first includes compiles)",
                  "identical: LOMO + NeuZip trains as LOMO, losses and weights bit for bit (lossless)",
                  "the paper's Table 1 is Llama-3 8B on one GPU; this row is the 1B configuration"]}
    ctx.save("neuzip_train", result)
