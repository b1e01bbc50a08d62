"""Training one Mix-LN run into a folder: build the model, join the launcher's process group when there is one
(data-parallel), run :func:`core.mixln.train.train_iter`, write the run folder.

A run folder holds ``config.json`` + ``model.safetensors`` (the model), ``history.json`` (loss, eval and per-layer
gradient-norm curves, :class:`~core.mixln.train.TrainHistory`), ``run.json`` (how it was trained, wall time, final
eval perplexity, status) and ``tokenizer.json`` (or shares the one in its parent folder). Checkpoints for
``--resume`` go to ``<run>/checkpoints/step-*``.

- :func:`train_run`        train one run into a folder (the CLI ``mixln train``); progress through
  ``progress(fraction, message)`` (:mod:`core.progress`), which stops the run (``"stopped"``) by raising
  :class:`core.errors.Cancelled`
- :func:`train_run_iter`   the same as a generator of :class:`~core.mixln.train.TrainEvent` (the tab's live run)
- :func:`build_model`, :func:`run_settings`, :func:`dist_info`

Data-parallel: when ``WORLD_SIZE > 1`` (``torchrun --nproc_per_node N -m core mixln train ...`` or
``accelerate launch -m core mixln train ...``) the model is wrapped in DistributedDataParallel (NCCL on GPUs, gloo
on CPUs), ``--batch`` is the global batch and each rank trains its share of every batch, so the run is the
single-process run (the same losses to float rounding, tested with 2 gloo processes); rank 0 alone writes the folder.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import torch

from core.errors import BadInputError
from core.files import atomic_write
from core.mixln.config import MixLNConfig, check_fits
from core.mixln.data import DEFAULT_VOCAB, prepare_corpus
from core.mixln.model import MixLNForCausalLM
from core.mixln.placements import placement_model
from core.mixln.recipe import RECIPE_DEVIATIONS, RECIPE_MODEL, RECIPE_TRAIN
from core.mixln.train import TrainConfig, TrainEvent, TrainHistory, check_world, latest_checkpoint, train_iter
from core.progress import Progress, report
from core.zoo.construction import constructing


def build_model(norm: str, alpha: float = 0.25, seed: int = 0, dtype: str = "float32", **sizes) -> MixLNForCausalLM:
    """A fresh model; Linear weights depend only on ``seed`` and the sizes, not on the norm placement. ``norm`` is a
    registry name (:data:`core.mixln.placements.PLACEMENTS`): a variant (``deepnet``) sets its constants. ``dtype``
    "float64" builds it in float64 without a float32 step: constructed on the meta device, then its float64 weights
    drawn by :meth:`~core.mixln.model.MixLNForCausalLM.reset_parameters` (the float32 draws, done in float64)."""
    norm, variant = placement_model(norm)
    sizes = {**sizes, **variant}
    if not isinstance(alpha, (int, float)) or math.isnan(alpha) or not 0.0 <= alpha <= 1.0:
        raise BadInputError(f"alpha = {alpha} is outside [0, 1].",
                            fix="choose alpha between 0 (all Pre-LN) and 1 (all Post-LN); the paper uses 0.25.")
    config = MixLNConfig(norm=norm, post_ln_ratio=float(alpha), **sizes)
    if dtype == "float64":
        with constructing(), torch.device("meta"):
            model = MixLNForCausalLM(config)
        model = model.to(torch.float64).to_empty(device="cpu")
    else:
        with constructing(seed=seed):
            model = MixLNForCausalLM(config)
    model.reset_parameters(seed)
    return model


def run_settings(model_config: MixLNConfig, config: TrainConfig) -> dict:
    """Every setting that decides the training, spelled out for run.json (and checked by the tests)."""
    c = model_config
    settings = {
        "optimizer": "Adam" if config.weight_decay == 0 else "AdamW",
        "lr": config.lr, "betas": list(config.betas), "eps": 1e-8, "weight_decay": config.weight_decay,
        "schedule": "linear warmup from 0, then cosine to min_lr_ratio * lr (the Mix-LN authors' "
                    "get_cyclical_cosine_schedule_with_min_lr, one cycle)",
        "warmup_steps": config.warmup_steps, "min_lr_ratio": config.min_lr_ratio, "steps": config.steps,
        "grad_clip": config.grad_clip, "seed": config.seed, "batch_size": config.batch_size,
        "seq_len": config.seq_len, "dtype": "bfloat16 autocast" if config.bf16 else config.dtype,
        "init": {"linear_std": c.initializer_range, "embedding_std": c.embedding_std},
        "deviations": list(RECIPE_DEVIATIONS),
    }
    if "deepnorm" in c.layer_norms():
        settings["deepnorm"] = {"formula": c.deepnorm_formula, "alpha": c.deepnorm_alpha,
                                "gain_value_output_mlp": c.deepnorm_gain, "gain_query_key": 1.0,
                                "init": "Xavier normal"}
    return settings


def dist_info() -> tuple[int, int, int]:
    """(world size, global rank, local rank) as torchrun / ``accelerate launch`` set them (1, 0, 0 otherwise)."""
    env = os.environ
    return int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))


def _start_dist(local_rank: int) -> tuple[str, bool]:
    """Join the launcher's process group: NCCL when CUDA is there, gloo otherwise (``LAYERWISE_DIST_BACKEND=gloo``
    or ``nccl`` overrides). Returns (this rank's device, whether this call created the group)."""
    import torch.distributed as dist
    backend = os.environ.get("LAYERWISE_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend not in ("nccl", "gloo"):
        raise BadInputError(f"LAYERWISE_DIST_BACKEND={backend} is not a backend Layerwise trains with.",
                            fix="set it to nccl (GPUs) or gloo (CPUs, or GPUs that NCCL refuses), or unset it.")
    device = "cpu"
    if torch.cuda.is_available():  # one GPU per process, by local rank (shared round-robin if there are fewer)
        device = f"cuda:{local_rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    created = not dist.is_initialized()
    if created:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            raise BadInputError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} is set, but not the address of rank 0 "
                                "(MASTER_ADDR, MASTER_PORT).", fix="start the processes with torchrun or accelerate "
                                "launch (they set these), or unset WORLD_SIZE for one process.")
        dist.init_process_group(backend)
    return device, created


def _rank0_value(value, world: int):
    """``value`` as rank 0 has it, on every rank (a broadcast; also a barrier: no rank passes before rank 0)."""
    if world == 1:
        return value
    import torch.distributed as dist
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train_run_iter(out: str | os.PathLike | None, norm: str = "mix", alpha: float = 0.25,
                   model_sizes: dict | None = None, train_config: dict | None = None,
                   tokenizer: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
                   keep_checkpoints: bool = True, checkpoint_every: int = 0,
                   progress: Progress | None = None) -> Iterator[TrainEvent]:
    """Train one run into ``out`` (None: nothing is written) and yield its events; the folder gets the model,
    ``history.json`` and ``run.json`` at the end, also when the run diverged or was stopped. The generator returns
    the run's ``run.json`` (None with ``out=None``). ``progress(fraction, message)`` hears every step and
    evaluation; a :class:`core.errors.Cancelled` it raises (on any rank) ends the run as ``"stopped"``.

    ``run.json`` says ``"status": "running"`` from the start, so a run killed midway never looks finished.
    Data-parallel (``WORLD_SIZE > 1``, under ``torchrun`` or ``accelerate launch``): every rank reads the inputs
    (tokenizer, ``--resume`` folder) before any file is written, joins the process group (NCCL on GPUs, gloo on
    CPUs), trains its share of each global batch (:func:`core.mixln.train.train_iter`); only rank 0 writes the folder
    and its checkpoints, and the other ranks get the final ``run.json`` from rank 0, not from the disk. An error on
    a rank (a collective that fails because another rank died) ends the run as ``"failed"`` in run.json."""
    world, rank, local_rank = dist_info()
    sizes = dict(RECIPE_MODEL if model_sizes is None else model_sizes)
    tcfg = dict(RECIPE_TRAIN if train_config is None else train_config)
    out_path = Path(out) if out is not None else None
    if resume is not None:
        resume = Path(resume)
        saved = resume / "run.json"
        ckpt = latest_checkpoint(resume / "checkpoints") or latest_checkpoint(resume)
        if ckpt is None:
            raise BadInputError(f"no checkpoint found in {resume}.", fix="start a new run, or pick its folder.")
        if saved.is_file():  # the run's own settings win, except the number of steps
            meta = json.loads(saved.read_text())
            norm, alpha, sizes = meta["norm"], meta["alpha"], meta["model"]
            tcfg = {**meta["train"], "steps": tcfg.get("steps", meta["train"]["steps"])}
        if tokenizer is None and (resume / "tokenizer.json").is_file():
            tokenizer = resume / "tokenizer.json"
        out_path = out_path or resume
    norm, variant = placement_model(norm)  # a registry variant (deepnet): the model's norm and its constants
    sizes.update(variant)
    check_world(int(tcfg.get("batch_size", 8)), world)
    if tokenizer is not None and not Path(tokenizer).is_file():
        raise BadInputError(f"no tokenizer file {tokenizer}.", fix="omit --tokenizer to train one, or fix the path.")
    report(progress, 0.0, "note: tokenizing the corpora and building the model")
    corpus = prepare_corpus(sizes.get("vocab_size", DEFAULT_VOCAB), tokenizer)
    sizes["vocab_size"] = corpus.tokenizer.get_vocab_size()
    model = build_model(norm, alpha, seed=tcfg.get("seed", 0), dtype=tcfg.get("dtype", "float32"), **sizes)
    check_fits(model.config, tcfg.get("batch_size", 8), tcfg.get("seq_len", 128), training=True)
    ckpt_dir = str(out_path / "checkpoints") if out_path is not None and rank == 0 else None
    config = TrainConfig(**{**tcfg, "checkpoint_dir": ckpt_dir, "checkpoint_every": checkpoint_every})
    net, created = model, False
    if world > 1:  # data-parallel under torchrun / accelerate launch
        config.device, created = _start_dist(local_rank)
        model.to(config.device)
        digest = hashlib.sha256(corpus.train.numpy().tobytes()).hexdigest()
        if _rank0_value(digest, world) != digest:  # also the barrier after every rank has read its inputs
            raise BadInputError(f"rank {rank} tokenized the training text differently from rank 0.",
                                fix="pass the same --tokenizer file to every rank (e.g. assets/mixln/tokenizer.json).")
        net = torch.nn.parallel.DistributedDataParallel(model)
    meta = {"norm": norm, "alpha": float(alpha), "model": sizes,
            "train": {k: v for k, v in asdict(config).items() if k in tcfg or k in RECIPE_TRAIN},
            "settings": run_settings(model.config, config),
            "eval_split": corpus.eval_split, "train_tokens": int(corpus.train.numel()),
            "eval_tokens": int(corpus.eval.numel()), "parameters": model.num_parameters(),
            "torch_threads": torch.get_num_threads(), "world_size": world}
    if out_path is not None and rank == 0:  # until the end says otherwise, the folder is a run in progress
        atomic_write(out_path / "run.json", json.dumps({**meta, "status": "running", "message": ""}, indent=1))
    t0 = time.perf_counter()
    last: TrainEvent | None = None
    failed: BaseException | None = None
    try:
        for last in train_iter(net, corpus.train, corpus.eval, config, resume_from=ckpt if resume else None,
                               progress=progress):
            yield last
    except GeneratorExit:
        raise
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if out_path is not None and rank == 0 and failed is not None and world > 1:
            atomic_write(out_path / "run.json", json.dumps({**meta, "status": "failed", "message": (
                f"rank {rank} of {world}: {type(failed).__name__}: {failed}")[:2000]}, indent=1))
        elif out_path is not None and rank == 0 and last is not None:
            hist = last.history
            if hist.status == "running":
                hist.status = "stopped"
            _write_run(out_path, model, hist, meta, corpus.tokenizer, time.perf_counter() - t0,
                       tokenizer, keep_checkpoints)
    done = json.loads((out_path / "run.json").read_text()) if out_path is not None and rank == 0 else None
    done = _rank0_value(done, world)  # the other ranks wait for rank 0's files, and never read them
    if created:
        import torch.distributed as dist
        dist.destroy_process_group()
    return done


def _write_run(out: Path, model: MixLNForCausalLM, history: TrainHistory, meta: dict, tok, seconds: float,
               tokenizer_path, keep_checkpoints: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    shared = [f / "tokenizer.json" for f in (out.resolve(), *out.resolve().parents[:3])]
    if tokenizer_path is None or Path(tokenizer_path).resolve() not in shared:
        tok.save(str(out / "tokenizer.json"))
    final = history.eval[-1] if history.eval else None
    steps_done = len(history.train)
    meta = {**meta, "status": history.status, "message": history.message, "steps_done": history.step,
            "wall_seconds": round(seconds, 1),
            "train_tokens_per_s": round(steps_done * meta["train"]["batch_size"] * meta["train"]["seq_len"]
                                        / max(seconds, 1e-9), 1),
            "final_eval_loss": final["loss"] if final else None,
            "final_eval_perplexity": final["perplexity"] if final else None,
            "final_eval_step": final["step"] if final else None}
    for name, data in (("history.json", history.to_dict()), ("run.json", meta)):
        atomic_write(out / name, json.dumps(data, indent=None if name == "history.json" else 1))
    if not keep_checkpoints:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)


def train_run(out, norm="mix", alpha=0.25, model_sizes=None, train_config=None, tokenizer=None, resume=None,
              keep_checkpoints=True, checkpoint_every=0, progress: Progress | None = None) -> dict:
    """Drain :func:`train_run_iter`; return the run's ``run.json`` (or, with ``out=None``, the history dict)."""
    out = out if out is not None or resume is None else resume
    last = None
    events = train_run_iter(out, norm, alpha, model_sizes, train_config, tokenizer, resume, keep_checkpoints,
                            checkpoint_every, progress)
    while True:
        try:
            last = next(events)
        except StopIteration as end:  # the generator returns run.json (every rank gets rank 0's)
            meta = end.value
            break
    if out is None:
        return last.history.to_dict() if last else {}
    return meta
