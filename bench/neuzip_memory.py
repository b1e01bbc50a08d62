"""NeuZip's memory as the machine sees it, printed as JSON: every figure from fresh processes, beside the tensor figure.

    python bench/neuzip_memory.py                                   # every part (about 20 minutes on 2 cores)
    python bench/neuzip_memory.py --parts fixed-cost,inference      # some of them
    python bench/neuzip_memory.py --smoke                           # tiny-llama, every part but the cap (CI)

Parts (each measured in fresh Python processes, :func:`core.neuzip.process.run_fresh`; MiB = 2**20 bytes):

- ``fixed-cost``: what the codec costs a process that has imported torch and numpy: RSS after importing
  ``core.neuzip.codec`` and after its first call (compress and decompress a 1536x576 bf16 weight, then a garbage
  collection and ``malloc_trim``), for the C codec and, beside it, its numba twin (the codec before issue 41); target
  <= 30 MiB;
- ``inference``: ``--model`` (SmolLM2-135M) loaded in bf16 and lossless NeuZip (k = 7), one tensor at a time, one
  forward of ``--tokens`` tokens: the process's RSS idle after the forward, loaded, and its peak, beside the tensor
  bytes the model holds; target: NeuZip idles >= 100 MiB below bf16 (issue 41);
- ``training``: ``--model`` trained ``--steps`` steps of ``--batch`` x ``--seq`` tokens in ``--train-modes``
  (``python -m core neuzip train``: each mode in fresh processes): the whole process's peak RSS beside the tensor
  peak; target: LOMO + NeuZip's peak RSS >= 30 MiB below LOMO's;
- ``steps``: the same model trained ``--long-steps`` steps in LOMO + NeuZip (and LOMO) without the profiler: the
  process's RSS after step 2 and after the last step (each compressed layer re-encoded into storage reserved once);
  target: within 4 MiB;
- ``cap``: ``--cap-model`` (the llama-1b configuration, random weights) in bf16 and NeuZip, one forward: first
  uncapped (their peak RSS and peak address space), then both under a memory cap set between the two peaks: the
  bf16 process must fail to allocate and the compressed one finish. The cap is ``RLIMIT_AS`` (the address space:
  every mapping counts, reserved or touched), not a cgroup's ``memory.max``: no cgroup v2 memory controller can be
  delegated on the machine the figures were measured on (its cgroups are v1 and belong to the host), so the nearest
  limit a process can set on itself is used, and the cap lies between the two processes' peak address spaces.

``--smoke`` runs fixed-cost (the C codec), inference and steps (LOMO + NeuZip, 3 steps) on tiny-llama, 16 tokens;
its figures are meaningless (it checks the script end to end).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PARTS = ("fixed-cost", "inference", "training", "steps", "cap")
MIB = 2 ** 20

_FIXED_COST = r"""
import ctypes, gc, json, sys
def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out
def settle():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
import numpy, torch
torch.manual_seed(0)
x = torch.randn(1536, 576).to(torch.bfloat16)
settle(); base = status()
from core.neuzip.codec import compress
settle(); imported = status()
ct = compress(x)
y = ct.decompress()
same = bool(torch.equal(x.view(torch.int16), y.view(torch.int16)))
del ct, y
settle(); called = status()
print(json.dumps({"base": base, "imported": imported, "called": called, "lossless": same,
                  "modules": sorted(m for m in ("numba", "llvmlite", "triton", "scipy", "transformers")
                                    if m in sys.modules)}))
"""


def _mib(b) -> float | None:
    return None if b is None else round(b / MIB, 1)


def _log(msg: str) -> None:
    print(f"... {msg}", file=sys.stderr, flush=True)


def fixed_cost(codecs=("native", "numba")) -> dict:
    """The codec's import and first call in a process that has imported torch and numpy, for each CPU codec."""
    out = {}
    for codec in codecs:
        _log(f"fixed cost: the {codec} codec")
        env = {**os.environ, "LAYERWISE_NEUZIP_CODEC": codec,
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("TRITON_INTERPRET", None)  # what a user's process does (the tests set it for the kernels' twins)
        done = subprocess.run([sys.executable, "-c", _FIXED_COST], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0:
            out[codec] = {"error": done.stderr[-1500:]}
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        base = r["base"]["VmRSS"]
        out[codec] = {"import_MiB": _mib(r["imported"]["VmRSS"] - base),
                      "import_and_first_call_MiB": _mib(r["called"]["VmRSS"] - base),
                      "peak_above_base_MiB": _mib(r["called"]["VmHWM"] - base),
                      "base_rss_MiB (python, torch, numpy)": _mib(base), "lossless": r["lossless"],
                      "heavy_modules_imported": r["modules"]}
    return out


def inference(model: str, tokens: int) -> dict:
    """bf16 against lossless NeuZip, each in a fresh process: the process's RSS beside the tensor bytes."""
    from core.neuzip.process import run_fresh

    rows = {}
    for form in ("bf16", "neuzip"):
        _log(f"inference: {model} in {form}, {tokens} tokens")
        r = run_fresh("inference-memory", {"ref": model, "form": form, "tokens": tokens}, threads=1)
        rows[form] = {"idle_rss_after_forward_MiB": _mib(r["idle_rss_bytes"]), "loaded_rss_MiB": _mib(r["loaded_rss_bytes"]),
                      "peak_rss_MiB": _mib(r["process"]["peak_rss_bytes"]), "tensor_MiB": _mib(r["tensor_bytes"]),
                      "logits_digest": r["logits_digest"]}
    b, n = rows["bf16"], rows["neuzip"]
    return {"model": model, "tokens": tokens, "rows": rows,
            "neuzip_below_bf16_idle_MiB": round(b["idle_rss_after_forward_MiB"] - n["idle_rss_after_forward_MiB"], 1),
            "neuzip_below_bf16_tensor_MiB": round(b["tensor_MiB"] - n["tensor_MiB"], 1),
            "same_logits": b["logits_digest"] == n["logits_digest"]}


def training(model: str, modes: list[str], steps: int, batch: int, seq: int) -> dict:
    """``python -m core neuzip train``'s run: each mode in fresh processes."""
    import torch

    from core.neuzip import TrainSettings, train_modes

    torch.set_num_threads(1)
    _log(f"training: {model} in {', '.join(modes)}, {steps} steps of {batch} x {seq}")
    run = train_modes(model, modes, TrainSettings(steps=steps, batch=batch, seq=seq, fresh=True))
    rows = {m["mode"]: {"peak_rss_MiB": _mib(m["peak_rss_bytes"]), "tensor_peak_MiB": _mib(m["peak_bytes"]),
                        "load_peak_rss_MiB": _mib(m["load_peak_rss_bytes"]),
                        "rss_after_each_step_MiB": [_mib(x) for x in m["rss_after_step_bytes"]]}
            for m in run["modes"]}
    out = {"model": model, "steps": steps, "batch": batch, "seq": seq, "rows": rows, "identical": run["identical"]}
    if "lomo" in rows and "lomo+neuzip" in rows:
        out["lomo_minus_lomo+neuzip_peak_rss_MiB"] = round(rows["lomo"]["peak_rss_MiB"]
                                                            - rows["lomo+neuzip"]["peak_rss_MiB"], 1)
        out["lomo_minus_lomo+neuzip_tensor_peak_MiB"] = round(rows["lomo"]["tensor_peak_MiB"]
                                                               - rows["lomo+neuzip"]["tensor_peak_MiB"], 1)
    return out


def steps_part(model: str, steps: int, batch: int, seq: int, modes=("lomo+neuzip", "lomo")) -> dict:
    """The process's RSS after each step of a long run (no profiler), per mode."""
    import torch

    from core.neuzip.process import run_fresh
    from core.neuzip.train_models import ModelSource
    from core.neuzip.training import TrainSettings, training_batches

    source = ModelSource(model)
    vocab = source.vocab(source.build(meta=True))
    batches = training_batches(source.tokenizer(), vocab, steps, batch, seq, 0)
    settings = {"steps": steps, "batch": batch, "seq": seq, "track_steps": 2}
    out = {"model": model, "steps": steps, "batch": batch, "seq": seq, "rows": {}}
    for mode in modes:
        _log(f"steps: {model} in {mode}, {steps} steps")
        r = run_fresh("train-mode", {"ref": model, "mode": mode, "settings": {**TrainSettings(**settings).__dict__},
                                     "batches": batches.tolist(), "measure": "process"}, threads=1)
        after = r["rss_after_step_bytes"]
        out["rows"][mode] = {"rss_after_step_2_MiB": _mib(after[1]), "rss_after_last_step_MiB": _mib(after[-1]),
                             "growth_MiB": round((after[-1] - after[1]) / MIB, 1),
                             "rss_after_each_step_MiB": [_mib(x) for x in after],
                             "peak_rss_MiB": _mib(r["process"]["peak_rss_bytes"]),
                             "storage": r.get("zip_storage")}
    del torch
    return out


def cap(model: str, tokens: int) -> dict:
    """bf16 and NeuZip uncapped, then both under an RLIMIT_AS between their peak address spaces."""
    from core.neuzip.process import ChildFailed, cap_note, run_fresh

    free, peaks = {}, {}
    for form in ("bf16", "neuzip"):
        _log(f"cap: {model} in {form}, uncapped")
        r = run_fresh("inference-memory", {"ref": model, "form": form, "tokens": tokens}, threads=1,
                      env={"MALLOC_ARENA_MAX": "2"})
        free[form] = {"peak_rss_MiB": _mib(r["process"]["peak_rss_bytes"]),
                      "peak_address_space_MiB": _mib(r["process"]["peak_virtual_bytes"]),
                      "tensor_MiB": _mib(r["tensor_bytes"]), "idle_rss_after_forward_MiB": _mib(r["idle_rss_bytes"])}
        peaks[form] = r["process"]["peak_virtual_bytes"]
    out = {"model": model, "tokens": tokens, "uncapped": free}
    if peaks["neuzip"] >= peaks["bf16"]:
        out["note"] = "NeuZip's peak address space is not below bf16's: no cap separates them"
        return out
    limit = ("as", (peaks["neuzip"] + peaks["bf16"]) // 2)
    out["cap"] = cap_note(limit)
    out["cap_MiB"] = _mib(limit[1])
    capped = {}
    for form in ("bf16", "neuzip"):
        _log(f"cap: {model} in {form} under {cap_note(limit)}")
        try:
            r = run_fresh("inference-memory", {"ref": model, "form": form, "tokens": tokens}, threads=1, limit=limit,
                          env={"MALLOC_ARENA_MAX": "2"})
            capped[form] = {"finished": True, "peak_rss_MiB": _mib(r["process"]["peak_rss_bytes"]),
                            "peak_address_space_MiB": _mib(r["process"]["peak_virtual_bytes"]),
                            "logits_digest": r["logits_digest"]}
        except ChildFailed as err:
            capped[form] = {"finished": False, "out_of_memory": err.memory_error, "exit_code": err.exit_code,
                            "why": str(err).splitlines()[0][:300]}
    out["capped"] = capped
    out["bf16_fails_and_neuzip_finishes"] = (not capped["bf16"]["finished"]) and capped["neuzip"]["finished"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--train-modes", default="lomo,lomo+neuzip")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--long-steps", type=int, default=20)
    ap.add_argument("--cap-model", default="llama-1b")
    ap.add_argument("--cap-tokens", type=int, default=128)
    ap.add_argument("--smoke", action="store_true", help="tiny-llama, every part but the cap (CI)")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    if args.smoke:  # the training part's fresh processes are tests/core/neuzip/test_training.py's
        parts = [p for p in parts if p not in ("cap", "training")]
        args.model, args.tokens, args.steps, args.seq, args.long_steps = "tiny-llama", 16, 2, 16, 3
    import torch

    from core.neuzip.process import machine

    out = {"machine": machine(), "load_average_start": [round(x, 2) for x in os.getloadavg()],
           "note": "every figure from fresh Python processes; MiB = 2**20 bytes; RSS after a garbage collection and "
                   "malloc_trim where it says idle or loaded; torch on one thread"}
    if args.smoke:
        out.update(mode="smoke", timings_meaningful=False,
                   timing_note="smoke run on tiny-llama: the figures and timings are meaningless")
    seconds = {}
    for part in parts:
        t0 = time.perf_counter()
        if part == "fixed-cost":
            out[part] = fixed_cost(("native",) if args.smoke else ("native", "numba"))
        elif part == "inference":
            out[part] = inference(args.model, args.tokens)
        elif part == "training":
            out[part] = training(args.model, args.train_modes.split(","), args.steps, args.batch, args.seq)
        elif part == "steps":
            out[part] = steps_part(args.model, args.long_steps, args.batch, args.seq,
                                   ("lomo+neuzip",) if args.smoke else ("lomo+neuzip", "lomo"))
        elif part == "cap":
            out[part] = cap(args.cap_model, args.cap_tokens)
        seconds[part] = round(time.perf_counter() - t0, 1)
    out["seconds"] = seconds
    out["targets"] = targets(out)
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    del torch
    print(json.dumps(out, indent=1))
    return out


def targets(out: dict) -> dict:
    """Each measured target beside its value."""
    rows = {}
    if "fixed-cost" in out and "import_and_first_call_MiB" in out["fixed-cost"].get("native", {}):
        v = out["fixed-cost"]["native"]["import_and_first_call_MiB"]
        rows["codec fixed cost (MiB) <="] = {"target": 30, "value": v, "met": v <= 30}
    if "inference" in out:
        v = out["inference"]["neuzip_below_bf16_idle_MiB"]
        rows["inference: NeuZip idles below bf16 by (MiB) >="] = {"target": 100, "value": v, "met": v >= 100}
    if "training" in out and "lomo_minus_lomo+neuzip_peak_rss_MiB" in out["training"]:
        v = out["training"]["lomo_minus_lomo+neuzip_peak_rss_MiB"]
        rows["training: LOMO + NeuZip's peak RSS below LOMO's by (MiB) >="] = {"target": 30, "value": v,
                                                                              "met": v >= 30}
    if "steps" in out and "lomo+neuzip" in out["steps"]["rows"]:
        v = out["steps"]["rows"]["lomo+neuzip"]["growth_MiB"]
        rows["steps: RSS after the last step minus after step 2 (MiB) within +-"] = {"target": 4, "value": v,
                                                                                    "met": abs(v) <= 4}
    if "cap" in out and "bf16_fails_and_neuzip_finishes" in out["cap"]:
        rows["cap: bf16 fails, NeuZip finishes"] = {"value": out["cap"]["bf16_fails_and_neuzip_finishes"],
                                                   "met": out["cap"]["bf16_fails_and_neuzip_finishes"]}
    return rows


if __name__ == "__main__":
    main()
