"""Training runs as folders, the committed runs in ``assets/mixln/`` and the recipe that reproduces them.

A run folder holds ``config.json`` + ``model.safetensors`` (the model), ``history.json`` (loss, eval and
per-layer gradient-norm curves, :class:`~core.mixln.train.TrainHistory`), ``run.json`` (how it was trained,
wall time, final eval perplexity, status) and ``tokenizer.json`` (or shares the one in its parent folder).
Checkpoints for ``--resume`` go to ``<run>/checkpoints/step-*``.

- :func:`train_run`        train one run into a folder (the CLI ``mixln train`` and the tab's live run)
- :func:`train_run_iter`   the same as a generator of :class:`~core.mixln.train.TrainEvent`
- :data:`RECIPE`           the norm placements: name -> norm placement and alpha
- :data:`RUN_SETS`         the committed run sets (12 layers x 3 seeds, 24 layers x 3 seeds, a learning-rate sweep)
- :func:`reproduce`        retrain the committed runs (``mixln reproduce``); :func:`recipe_jobs`, :func:`train_job`.
  ``core.mixln.reproduce_result`` passes ``diagnostics=core.mixln.write_run_diagnostics`` so each run's diagnostics
  are precomputed while its weights are there; this module does not import the analyses
- :func:`list_runs`, :func:`load_run`, :func:`run_model`, :func:`eval_tokens_of`  read committed runs
- :func:`sweep_table`, :func:`compare_table`  final eval perplexity vs alpha / per norm placement, over seeds
  (:mod:`core.mixln.summary` holds the other summaries over seeds: curves, LR sweep, depth profiles)

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from core.errors import BadInputError
from core.mixln.config import MixLNConfig, check_fits
from core.mixln.data import DEFAULT_VOCAB, load_tokenizer, pack, prepare_corpus
from core.mixln.model import MixLNForCausalLM
from core.mixln.placements import placement_label, sweep_alpha
from core.files import atomic_write
from core.zoo.construction import constructing
from core.mixln.train import TrainConfig, TrainEvent, TrainHistory, check_world, evaluate, eval_batches, \
    latest_checkpoint, train_iter

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "mixln"

# The committed runs: deep and narrow (12 layers, width 64), equal steps, data and tokenizer, trained at the
# Mix-LN authors' settings (pixeli99/MixLN torchrun_main.py + scripts/run_71m.sh, LLaMA-71M: 12 layers):
# lr 1e-3, Adam betas (0.9, 0.999), weight decay 0, no gradient clipping, linear warmup over 10% of the steps
# then cosine to 10% of the peak (their min_lr_ratio), embedding init N(0, sqrt(2/5)) and Linear N(0, 0.02).
RECIPE_MODEL = dict(vocab_size=DEFAULT_VOCAB, hidden_size=64, num_layers=12, num_heads=4, intermediate_size=176,
                    embedding_init_std=(2 / 5) ** 0.5, deepnorm_formula="mixln")
RECIPE_TRAIN = dict(steps=3000, batch_size=16, seq_len=64, lr=1e-3, warmup_steps=300, min_lr_ratio=0.1,
                    betas=[0.9, 0.999], weight_decay=0.0, grad_clip=None, eval_every=50, eval_batches=16,
                    grad_log_every=50, seed=0)
# Where the recipe departs from the authors' runs, and why (recorded in every run.json, shown beside the charts).
RECIPE_DEVIATIONS = (
    "scale: 12 or 24 layers of width 64 and 3,000 steps of 16 x 64 tokens on a CPU (the authors: LLaMA-71M to 7B, "
    "width 512+, 10k-150k steps of 512 x 256 tokens on GPUs)",
    "data: the project's offline Wikipedia / OpenWebText / Python-docs paragraphs with its 4096-id BPE "
    "(the authors: C4 with the T5 tokenizer)",
    "precision: float32 (the authors: bfloat16)",
)
# The recipe's runs: run name -> norm placement (a key of core.mixln.placements.PLACEMENTS, which holds its label,
# colour and formula) and Mix-LN alpha; every run set draws from this list.
RECIPE = {
    "pre-ln": dict(norm="pre", alpha=0.0),
    "post-ln": dict(norm="post", alpha=1.0),
    "mix-ln-0.25": dict(norm="mix", alpha=0.25),
    "mix-ln-0.125": dict(norm="mix", alpha=0.125),
    "mix-ln-0.5": dict(norm="mix", alpha=0.5),
    "deepnorm": dict(norm="deepnorm", alpha=1.0),
    "sandwich-ln": dict(norm="sandwich", alpha=0.0),
}
# Alpha sweep: Mix-LN with alpha = 0 is Pre-LN and alpha = 1 is Post-LN, layer for layer (the registry's
# sweep_alpha): alpha -> run name.
SWEEP = {sweep_alpha(spec["norm"], spec["alpha"]): name for name, spec in RECIPE.items()
         if sweep_alpha(spec["norm"], spec["alpha"]) is not None}
SEEDS = (0, 1, 2)


def recipe_label(name: str) -> str:
    """How legends and tables name a recipe run (from the placement registry): ``Pre-LN``, ``Mix-LN (alpha 0.5)``."""
    spec = RECIPE[name]
    return placement_label(spec["norm"], spec["alpha"])


@dataclass(frozen=True)
class RunSet:
    """A group of committed runs: ``placements`` x ``seeds`` x ``lrs`` with one model size, under ``folder``.

    Layout under the root (assets/mixln): ``<folder>/<placement>/`` is seed 0 at the recipe's rate,
    ``<folder>/<placement>/seed-<k>/`` seed k, ``<folder>/<placement>/lr-<rate>/`` another rate (seed 0).
    Only ``weights_for_seed`` keeps its model.safetensors (float16); every run keeps config, history, run.json
    and, when ``diagnostics``, diagnostics.json (angular distance and layer removal)."""

    folder: str
    model: dict
    placements: tuple[str, ...]
    seeds: tuple[int, ...] = SEEDS
    lrs: tuple[float, ...] = (RECIPE_TRAIN["lr"],)
    diagnostics: bool = True
    weights_for_seed: int | None = 0
    title: str = ""


RUN_SETS = {
    "main": RunSet("", RECIPE_MODEL, tuple(RECIPE), title="12 layers, width 64"),
    "depth-24": RunSet("depth-24", {**RECIPE_MODEL, "num_layers": 24}, ("pre-ln", "post-ln", "mix-ln-0.25", "deepnorm"),
                       title="24 layers, width 64"),
    "lr-sweep": RunSet("lr-sweep", RECIPE_MODEL, ("pre-ln", "post-ln", "mix-ln-0.25", "deepnorm"), seeds=(0,),
                       lrs=(3e-4, 3e-3), diagnostics=False, weights_for_seed=None,
                       title="12 layers, width 64, one seed per rate"),
}
LR_SWEEP = (3e-4, RECIPE_TRAIN["lr"], 3e-3)  # the rates of the sweep chart (1e-3 is the main set's seed 0)


@dataclass(frozen=True)
class Job:
    """One run of the recipe: run set, placement name (a key of RECIPE), seed and peak learning rate."""

    set: str
    name: str
    seed: int = 0
    lr: float = RECIPE_TRAIN["lr"]

    @property
    def key(self) -> str:
        return f"{self.set}/{self.name}/seed-{self.seed}/lr-{self.lr:g}"

    @property
    def relative_folder(self) -> Path:
        spec = RUN_SETS[self.set]
        folder = Path(spec.folder) / self.name
        if self.lr != RECIPE_TRAIN["lr"]:
            folder = folder / f"lr-{self.lr:g}"
        if self.seed != 0:
            folder = folder / f"seed-{self.seed}"
        return folder

    @property
    def model(self) -> dict:
        return dict(RUN_SETS[self.set].model)

    @property
    def train(self) -> dict:
        return {**RECIPE_TRAIN, "seed": self.seed, "lr": self.lr}

    @property
    def keep_weights(self) -> bool:
        return RUN_SETS[self.set].weights_for_seed == self.seed


def recipe_jobs(sets: list[str] | None = None, names: list[str] | None = None,
                seeds: list[int] | None = None) -> list[Job]:
    """Every run of the recipe (or of the chosen sets / placements / seeds): set by set, seed by seed."""
    for s in sets or []:
        if s not in RUN_SETS:
            raise BadInputError(f"unknown run set {s!r}.", fix=f"use one of: {', '.join(RUN_SETS)}.")
    for n in names or []:
        if n not in RECIPE:
            raise BadInputError(f"unknown run {n!r}.", fix=f"use one of: {', '.join(RECIPE)}.")
    return [Job(s, n, seed, lr) for s in (sets or list(RUN_SETS)) for lr in RUN_SETS[s].lrs
            for seed in RUN_SETS[s].seeds for n in RUN_SETS[s].placements
            if (names is None or n in names) and (seeds is None or seed in seeds)]


def recipe_command(name: str, job: Job | None = None) -> str:
    """The ``mixln train`` command line of one recipe run (``name``: seed 0 of the main set)."""
    job = job or Job("main", name)
    spec, m, t = RECIPE[job.name], job.model, job.train
    return (f"python -m core mixln train --norm {spec['norm']} --alpha {spec['alpha']} --layers {m['num_layers']} "
            f"--hidden {m['hidden_size']} --heads {m['num_heads']} --intermediate {m['intermediate_size']} "
            f"--vocab {m['vocab_size']} --embedding-std {m['embedding_init_std']!r} "
            f"--deepnorm-formula {m['deepnorm_formula']} --steps {t['steps']} --batch {t['batch_size']} "
            f"--seq {t['seq_len']} --lr {t['lr']:g} --warmup {t['warmup_steps']} --min-lr-ratio {t['min_lr_ratio']} "
            f"--betas {t['betas'][0]} {t['betas'][1]} --weight-decay {t['weight_decay']} "
            f"--grad-clip {t['grad_clip'] or 0} --eval-every {t['eval_every']} "
            f"--eval-batches {t['eval_batches']} --grad-every {t['grad_log_every']} --seed {t['seed']} "
            f"--tokenizer assets/mixln/tokenizer.json --out assets/mixln/{job.relative_folder.as_posix()}")


# A live run in the tab: small enough to finish in a minute or two on a laptop CPU.
LIVE_MODEL = dict(vocab_size=DEFAULT_VOCAB, hidden_size=64, num_layers=8, num_heads=4, intermediate_size=176,
                  embedding_init_std=(2 / 5) ** 0.5)
LIVE_TRAIN = dict(steps=120, batch_size=8, seq_len=64, lr=1e-3, warmup_steps=12, eval_every=20, eval_batches=4,
                  grad_log_every=10, seed=0)


# ---- training a run ----------------------------------------------------------------------------------

def build_model(norm: str, alpha: float = 0.25, seed: int = 0, **sizes) -> MixLNForCausalLM:
    """A fresh model; Linear weights depend only on ``seed`` and the sizes, not on the norm placement."""
    if not isinstance(alpha, (int, float)) or math.isnan(alpha) or not 0.0 <= alpha <= 1.0:
        raise BadInputError(f"alpha = {alpha} is outside [0, 1].",
                            fix="choose alpha between 0 (all Pre-LN) and 1 (all Post-LN); the paper uses 0.25.")
    config = MixLNConfig(norm=norm, post_ln_ratio=float(alpha), **sizes)
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


def _dist_info() -> tuple[int, int, int]:
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
                   stop: Callable[[], bool] | None = None) -> Iterator[TrainEvent]:
    """Train one run into ``out`` (None: nothing is written) and yield its events; the folder gets the model,
    ``history.json`` and ``run.json`` at the end, also when the run diverged or was stopped. The generator returns
    the run's ``run.json`` (None with ``out=None``).

    ``run.json`` says ``"status": "running"`` from the start, so a run killed midway never looks finished.
    Data-parallel (``WORLD_SIZE > 1``, under ``torchrun`` or ``accelerate launch``): every rank reads the inputs
    (tokenizer, ``--resume`` folder) before any file is written, joins the process group (NCCL on GPUs, gloo on
    CPUs), trains its share of each global batch (:func:`core.mixln.train.train_iter`); only rank 0 writes the folder
    and its checkpoints, and the other ranks get the final ``run.json`` from rank 0, not from the disk. An error on
    a rank (a collective that fails because another rank died) ends the run as ``"failed"`` in run.json."""
    world, rank, local_rank = _dist_info()
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
    check_world(int(tcfg.get("batch_size", 8)), world)
    if tokenizer is not None and not Path(tokenizer).is_file():
        raise BadInputError(f"no tokenizer file {tokenizer}.", fix="omit --tokenizer to train one, or fix the path.")
    corpus = prepare_corpus(sizes.get("vocab_size", DEFAULT_VOCAB), tokenizer)
    sizes["vocab_size"] = corpus.tokenizer.get_vocab_size()
    model = build_model(norm, alpha, seed=tcfg.get("seed", 0), **sizes)
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
                               stop=stop):
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
              keep_checkpoints=True, checkpoint_every=0, callback=None, stop=None) -> dict:
    """Drain :func:`train_run_iter`; return the run's ``run.json`` (or, with ``out=None``, the history dict)."""
    out = out if out is not None or resume is None else resume
    last = None
    events = train_run_iter(out, norm, alpha, model_sizes, train_config, tokenizer, resume, keep_checkpoints,
                            checkpoint_every, stop)
    while True:
        try:
            last = next(events)
        except StopIteration as end:  # the generator returns run.json (every rank gets rank 0's)
            meta = end.value
            break
        if callback is not None:
            callback(last)
    if out is None:
        return last.history.to_dict() if last else {}
    return meta


def reproduce(root: str | os.PathLike = ASSETS, names: list[str] | None = None, callback=None,
              sets: list[str] | None = None, seeds: list[int] | None = None, skip_done: bool = False,
              jobs: list[Job] | None = None, keep_all_weights: bool = False,
              diagnostics: Callable[[str], object] | None = None) -> dict[str, dict]:
    """Retrain the committed runs into ``root`` with the recipe (one shared tokenizer, same data): every
    :data:`RUN_SETS` entry by default, or the chosen sets / placements (``names``) / seeds, or ``jobs``.
    ``skip_done`` keeps runs whose run.json says finished or diverged; ``keep_all_weights`` keeps every run's
    weights (a scratch folder), not only those the repository holds; ``diagnostics(folder)`` precomputes a run's
    diagnostics (see :func:`train_job`). Returns run.json per job key."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / "tokenizer.json"
    if not tok_path.is_file():
        corpus = prepare_corpus(RECIPE_MODEL["vocab_size"])
        atomic_write(tok_path, lambda tmp: corpus.tokenizer.save(str(tmp)))
    results = {}
    for job in jobs if jobs is not None else recipe_jobs(sets, names, seeds):
        done = root / job.relative_folder / "run.json"
        if skip_done and done.is_file() and json.loads(done.read_text()).get("status") in ("finished", "diverged"):
            results[job.key] = json.loads(done.read_text())
            continue
        results[job.key] = train_job(job, root, callback, keep_all_weights, diagnostics)
    return results


def train_job(job: Job, root: str | os.PathLike = ASSETS, callback=None, keep_all_weights: bool = False,
              diagnostics: Callable[[str], object] | None = None) -> dict:
    """Train one recipe run into ``root / job.relative_folder`` and store it as committed: float16 weights
    (re-evaluated, their fingerprint in run.json), ``diagnostics(folder)`` called while the weights are there when
    the run's set asks for diagnostics, then the weights dropped unless kept for its seed."""
    root = Path(root)
    folder = root / job.relative_folder
    for sub in ("model.safetensors", "diagnostics.json", "run.json", "history.json"):
        (folder / sub).unlink(missing_ok=True)
    spec = RECIPE[job.name]
    train_run(folder, spec["norm"], spec["alpha"], job.model, job.train, root / "tokenizer.json",
              keep_checkpoints=False, callback=callback)
    meta = compact_run(folder)
    meta["history_kept"] = thin_history(folder)
    meta["float64_prefix"] = float64_prefix(job, root)
    if RUN_SETS[job.set].diagnostics and diagnostics is not None:
        diagnostics(str(folder))
    if not job.keep_weights:
        if not keep_all_weights:
            (folder / "model.safetensors").unlink(missing_ok=True)
        kept = RUN_SETS[job.set].weights_for_seed
        meta["weights"] = f"not kept (only seed {kept} of this set is committed with weights)"
    meta["job"] = {"set": job.set, "name": job.name, "seed": job.seed, "lr": job.lr}
    atomic_write(folder / "run.json", json.dumps(meta, indent=1))
    return meta


def compact_run(folder: str | os.PathLike, dtype: str = "float16") -> dict:
    """Store a run's weights in ``dtype`` (half the bytes, for committing) and record the final held-out
    perplexity of the stored weights; the float32 value measured during training is kept beside it."""
    from safetensors.torch import load_file, save_file
    folder = Path(folder)
    meta = json.loads((folder / "run.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    target = getattr(torch, dtype)
    if any(v.dtype != target for v in state.values()):
        half = {k: v.to(target).contiguous() for k, v in state.items()}
        atomic_write(folder / "model.safetensors",
                     lambda tmp: save_file(half, str(tmp), metadata={"format": "pt", "model_type": "mixln"}))
    if meta.get("final_eval_perplexity") is not None:
        meta.setdefault("final_eval_loss_float32", meta["final_eval_loss"])
        meta.setdefault("final_eval_perplexity_float32", meta["final_eval_perplexity"])
        atomic_write(folder / "run.json", json.dumps(meta, indent=1))
        got = evaluate_run(str(folder))
        meta.update(final_eval_loss=got["loss"], final_eval_perplexity=got["perplexity"])
    meta["weights_dtype"] = dtype
    meta["weights_fingerprint"] = weights_fingerprint(folder)  # keys the run's diagnostics once the weights are gone
    atomic_write(folder / "run.json", json.dumps(meta, indent=1))
    return meta


CHECK_STEPS = 50  # the prefix every committed run records in float64 (inside the 300-step warmup: same schedule)


def float64_prefix(job: Job, root: str | os.PathLike = ASSETS, steps: int = CHECK_STEPS) -> dict:
    """The first ``steps`` steps of ``job`` trained again in float64 (same data, initialisation and schedule): the
    training losses, global gradient norms, per-layer weight-gradient norms at step 1 and the held-out loss at the
    last step. Float64 rounding differs between CPUs (summation order, vector width) by ~1e-16 per operation, so
    these numbers are the same to ~1e-12 on any x86-64 CPU, where float32 runs drift apart by up to ~1e-3 within
    50 steps (measured: README, Mix-LN). What the reproducibility test retrains and compares, tightly."""
    spec = RECIPE[job.name]
    hist = train_run(None, spec["norm"], spec["alpha"], job.model,
                     {**job.train, "steps": steps, "eval_every": steps, "dtype": "float64"},
                     Path(root) / "tokenizer.json")
    return {"steps": steps, "dtype": "float64", "loss": [r["loss"] for r in hist["train"]],
            "grad_norm": [r["grad_norm"] for r in hist["train"]], "grad_norms_step1": hist["grad_norms"][0]["param"],
            "eval_loss": hist["eval"][-1]["loss"]}


HISTORY_EVERY_STEP = 100   # a committed history keeps every training step up to here (the prefix checks) ...
HISTORY_STRIDE = 10        # ... then every 10th step (and the last), so 3,000-step curves stay small in the repository


def thin_history(folder: str | os.PathLike, every_step: int = HISTORY_EVERY_STEP, stride: int = HISTORY_STRIDE) -> str:
    """Keep the training records of steps <= ``every_step`` and of every ``stride``-th step after it (and the last)
    in ``folder/history.json``; evaluations and gradient norms are kept whole. Returns what was kept, in words."""
    path = Path(folder) / "history.json"
    hist = json.loads(path.read_text())
    last = hist["train"][-1]["step"] if hist["train"] else 0
    hist["train"] = [r for r in hist["train"]
                     if r["step"] <= every_step or r["step"] % stride == 0 or r["step"] == last]
    atomic_write(path, json.dumps(hist))
    return f"training records: every step up to {every_step}, then every {stride}th step and the last"


def weights_fingerprint(folder: str | os.PathLike) -> str:
    """The fingerprint of a run's weights as the zoo computes one (sha256 over the ``*.safetensors`` bytes); for a
    run stored without weights, the one recorded in its run.json, else a digest of its history.json (what identifies
    a run whose weights were never kept)."""
    from core.zoo.loading import file_fingerprint

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return file_fingerprint(files)
    try:
        recorded = json.loads((folder / "run.json").read_text()).get("weights_fingerprint")
    except (OSError, ValueError):
        recorded = None
    if recorded:
        return recorded
    import hashlib
    history = folder / "history.json"
    if not history.is_file():
        raise BadInputError(f"{folder} holds no weights and no history.json.", fix="pick a run folder.")
    return "history-" + hashlib.sha256(history.read_bytes()).hexdigest()[:24]


# ---- reading runs --------------------------------------------------------------------------------------

@dataclass
class Run:
    name: str
    folder: Path
    meta: dict                               # run.json
    history: dict                            # history.json
    config: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return placement_label(self.meta.get("norm", "?"), self.meta.get("alpha"))

    @property
    def final_perplexity(self) -> float | None:
        return self.meta.get("final_eval_perplexity")


def _is_run(folder: Path) -> bool:
    return (folder / "history.json").is_file() and (folder / "run.json").is_file()


def list_runs(root: str | os.PathLike = ASSETS) -> list[str]:
    """Names of the run folders under ``root`` (committed runs by default), recipe order first."""
    root = Path(root)
    found = [p.name for p in sorted(root.iterdir()) if p.is_dir() and _is_run(p)] if root.is_dir() else []
    return [n for n in RECIPE if n in found] + [n for n in found if n not in RECIPE]


def resolve_run(ref: str | os.PathLike, root: str | os.PathLike = ASSETS) -> Path:
    folder = Path(root) / str(ref)
    if not _is_run(folder):
        folder = Path(ref)
    if not _is_run(folder):
        raise BadInputError(f"unknown run {str(ref)!r}.",
                            fix=f"use a committed run ({', '.join(list_runs(root)) or 'none found'}) or a run folder "
                                "written by `mixln train`.")
    return folder


def load_run(ref: str | os.PathLike, root: str | os.PathLike = ASSETS) -> Run:
    folder = resolve_run(ref, root)
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    return Run(folder.name, folder, json.loads((folder / "run.json").read_text()),
               json.loads((folder / "history.json").read_text()), config)


def run_model(ref, root=ASSETS) -> MixLNForCausalLM:
    return MixLNForCausalLM.from_pretrained(resolve_run(ref, root))


def tokenizer_file(folder: str | os.PathLike) -> Path:
    """The run's own tokenizer.json, else the nearest one in the folders above it (the shared one of a root)."""
    folder = Path(folder)
    for f in (folder, *folder.resolve().parents[:3]):
        if (f / "tokenizer.json").is_file():
            return f / "tokenizer.json"
    raise BadInputError(f"no tokenizer.json in {folder} or the folders above it.",
                        fix="train the run again, or copy its tokenizer.json beside it.")


def run_tokenizer(ref, root=ASSETS):
    return load_tokenizer(tokenizer_file(resolve_run(ref, root)))


def eval_tokens_of(ref, root=ASSETS, split: str | None = None) -> torch.Tensor:
    """The run's held-out evaluation windows (N, T), exactly those its recorded eval perplexity used."""
    run = load_run(ref, root)
    tok = tokenizer_file(run.folder)
    corpus = prepare_corpus(run.meta["model"]["vocab_size"], tok, split or run.meta.get("eval_split", "validation"))
    cfg = TrainConfig(**{k: v for k, v in run.meta["train"].items() if k in TrainConfig.__dataclass_fields__})
    return torch.cat(eval_batches(corpus.eval, cfg))


def evaluate_run(ref, root=ASSETS) -> dict:
    """Re-evaluate a run's saved weights on its held-out windows: {loss, perplexity}."""
    run = load_run(ref, root)
    cfg = TrainConfig(**{k: v for k, v in run.meta["train"].items() if k in TrainConfig.__dataclass_fields__})
    windows = eval_tokens_of(ref, root)
    loss = evaluate(run_model(ref, root), list(windows.split(cfg.batch_size)), cfg)
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}


def sample_windows(ref, root=ASSETS, n: int = 16, seq_len: int | None = None) -> torch.Tensor:
    """(n, T) held-out windows of a run for diagnostics."""
    windows = eval_tokens_of(ref, root)
    if seq_len is not None and seq_len != windows.shape[1]:
        windows = pack(windows.reshape(-1), seq_len)
    return windows[:n]


# ---- tables over runs ------------------------------------------------------------------------------------

def compare_table(runs: list[str] | None = None, root=ASSETS) -> list[dict]:
    """One row per run folder of ``root`` (committed runs by default): norm placement, alpha, size, steps, the
    final held-out loss and perplexity over its seeds (mean, std with ddof 1, min, max; ``n_seeds`` finished
    seeds, ``diverged`` seeds that diverged; a run without seed folders is its own single seed), wall time."""
    from core.mixln.summary import seed_runs, spread
    rows = []
    for name in runs or list_runs(root):
        r = load_run(name, root)
        m = r.meta
        group = seed_runs(name, "main", root) if name in RECIPE and r.folder.parent == Path(root) else [r]
        loss = spread([g.meta.get("final_eval_loss") for g in group])
        ppl = spread([g.meta.get("final_eval_perplexity") for g in group])
        rows.append({"run": name, "norm": placement_label(m["norm"]), "alpha": m["alpha"],
                     "layers": m["model"]["num_layers"], "width": m["model"]["hidden_size"],
                     "steps": m.get("steps_done"), "lr": m["train"]["lr"], "status": m.get("status"),
                     "n_seeds": loss["n"], "diverged": sum(g.meta.get("status") == "diverged" for g in group),
                     "eval_loss_mean": _round(loss["mean"], 4), "eval_loss_std": _round(loss["std"], 4),
                     "eval_loss_min": _round(loss["min"], 4), "eval_loss_max": _round(loss["max"], 4),
                     "eval_perplexity_mean": _round(ppl["mean"], 2), "eval_perplexity_std": _round(ppl["std"], 2),
                     "eval_perplexity_min": _round(ppl["min"], 2), "eval_perplexity_max": _round(ppl["max"], 2),
                     "wall_s": m.get("wall_seconds"), "label": r.label})
    return rows


def sweep_table(root=ASSETS, runs: list[str] | None = None, sets: tuple[str, ...] = ("main", "depth-24")) -> list[dict]:
    """Final held-out perplexity vs alpha over seeds (:func:`core.mixln.summary.sweep_rows`), 12 layers then 24,
    each sorted by alpha; ``runs`` keeps only those placements."""
    from core.mixln.summary import sweep_rows
    rows = [r for s in sets for r in sweep_rows(root, s)]
    return [r for r in rows if runs is None or r["run"] in runs]


def _round(x, nd):
    return None if x is None or not math.isfinite(x) else round(x, nd)
