"""Training runs as folders, the committed runs in ``assets/mixln/`` and the recipe that reproduces them.

A run folder holds ``config.json`` + ``model.safetensors`` (the model), ``history.json`` (loss, eval and
per-layer gradient-norm curves, :class:`~core.mixln.train.TrainHistory`), ``run.json`` (how it was trained,
wall time, final eval perplexity, status) and ``tokenizer.json`` (or shares the one in its parent folder).
Checkpoints for ``--resume`` go to ``<run>/checkpoints/step-*``.

- :func:`train_run`        train one run into a folder (the CLI ``mixln train`` and the tab's live run)
- :func:`train_run_iter`   the same as a generator of :class:`~core.mixln.train.TrainEvent`
- :data:`RECIPE`           the committed runs: name -> norm placement and alpha, all with one config
- :func:`reproduce`        retrain the committed runs (``mixln reproduce``)
- :func:`list_runs`, :func:`load_run`, :func:`run_model`, :func:`eval_tokens_of`  read committed runs
- :func:`sweep_table`, :func:`compare_table`  final eval perplexity vs alpha / per norm placement

Data-parallel: when ``WORLD_SIZE > 1`` (``torchrun --nproc_per_node N -m core mixln train ...`` or
``accelerate launch -m core mixln train ...``) the model is wrapped in DistributedDataParallel, each rank
draws its own batches (seed + rank) and rank 0 writes the folder. Only the single-process path is tested.
"""
from __future__ import annotations

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
from core.runner import atomic_write
from core.mixln.train import TrainConfig, TrainEvent, TrainHistory, evaluate, eval_batches, latest_checkpoint, \
    train_iter

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "mixln"

# The committed runs: deep and narrow (12 layers, width 64), equal steps, the same seed, data and tokenizer.
RECIPE_MODEL = dict(vocab_size=DEFAULT_VOCAB, hidden_size=64, num_layers=12, num_heads=4, intermediate_size=176)
RECIPE_TRAIN = dict(steps=300, batch_size=16, seq_len=64, lr=3e-3, warmup_steps=30, eval_every=25, eval_batches=8,
                    grad_log_every=10, seed=0)
RECIPE = {
    "pre-ln": dict(norm="pre", alpha=0.0),
    "post-ln": dict(norm="post", alpha=1.0),
    "mix-ln-0.25": dict(norm="mix", alpha=0.25),
    "mix-ln-0.125": dict(norm="mix", alpha=0.125),
    "mix-ln-0.5": dict(norm="mix", alpha=0.5),
    "deepnorm": dict(norm="deepnorm", alpha=1.0),
    "sandwich-ln": dict(norm="sandwich", alpha=0.0),
}
# Alpha sweep: Mix-LN with alpha = 0 is Pre-LN and alpha = 1 is Post-LN, layer for layer.
SWEEP = {0.0: "pre-ln", 0.125: "mix-ln-0.125", 0.25: "mix-ln-0.25", 0.5: "mix-ln-0.5", 1.0: "post-ln"}

# A live run in the tab: small enough to finish in a minute or two on a laptop CPU.
LIVE_MODEL = dict(vocab_size=DEFAULT_VOCAB, hidden_size=64, num_layers=8, num_heads=4, intermediate_size=176)
LIVE_TRAIN = dict(steps=120, batch_size=8, seq_len=64, lr=3e-3, warmup_steps=12, eval_every=20, eval_batches=4,
                  grad_log_every=10, seed=0)


def recipe_command(name: str) -> str:
    spec = RECIPE[name]
    m, t = RECIPE_MODEL, RECIPE_TRAIN
    return (f"python -m core mixln train --norm {spec['norm']} --alpha {spec['alpha']} --layers {m['num_layers']} "
            f"--hidden {m['hidden_size']} --heads {m['num_heads']} --intermediate {m['intermediate_size']} "
            f"--vocab {m['vocab_size']} --steps {t['steps']} --batch {t['batch_size']} --seq {t['seq_len']} "
            f"--lr {t['lr']} --warmup {t['warmup_steps']} --eval-every {t['eval_every']} "
            f"--eval-batches {t['eval_batches']} --grad-every {t['grad_log_every']} --seed {t['seed']} "
            f"--tokenizer assets/mixln/tokenizer.json --out assets/mixln/{name}")


# ---- training a run ----------------------------------------------------------------------------------

def build_model(norm: str, alpha: float = 0.25, seed: int = 0, **sizes) -> MixLNForCausalLM:
    """A fresh model; Linear weights depend only on ``seed`` and the sizes, not on the norm placement."""
    if not isinstance(alpha, (int, float)) or math.isnan(alpha) or not 0.0 <= alpha <= 1.0:
        raise BadInputError(f"alpha = {alpha} is outside [0, 1].",
                            fix="choose alpha between 0 (all Pre-LN) and 1 (all Post-LN); the paper uses 0.25.")
    config = MixLNConfig(norm=norm, post_ln_ratio=float(alpha), **sizes)
    torch.manual_seed(seed)
    model = MixLNForCausalLM(config)
    model.reset_parameters(seed)
    return model


def _dist_info() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return world, int(os.environ.get("RANK", "0"))


def train_run_iter(out: str | os.PathLike | None, norm: str = "mix", alpha: float = 0.25,
                   model_sizes: dict | None = None, train_config: dict | None = None,
                   tokenizer: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
                   keep_checkpoints: bool = True, checkpoint_every: int = 0,
                   stop: Callable[[], bool] | None = None) -> Iterator[TrainEvent]:
    """Train one run into ``out`` (None: nothing is written) and yield its events; the folder gets the model,
    ``history.json`` and ``run.json`` at the end, also when the run diverged or was stopped."""
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
    if tokenizer is not None and not Path(tokenizer).is_file():
        raise BadInputError(f"no tokenizer file {tokenizer}.", fix="omit --tokenizer to train one, or fix the path.")
    world, rank = _dist_info()
    corpus = prepare_corpus(sizes.get("vocab_size", DEFAULT_VOCAB), tokenizer)
    sizes["vocab_size"] = corpus.tokenizer.get_vocab_size()
    model = build_model(norm, alpha, seed=tcfg.get("seed", 0), **sizes)
    check_fits(model.config, tcfg.get("batch_size", 8), tcfg.get("seq_len", 128), training=True)
    ckpt_dir = str(out_path / "checkpoints") if out_path is not None and rank == 0 else None
    config = TrainConfig(**{**tcfg, "checkpoint_dir": ckpt_dir, "checkpoint_every": checkpoint_every,
                            "seed": tcfg.get("seed", 0) + rank})
    net = model
    if world > 1:  # data-parallel under torchrun / accelerate launch (untested here: one CPU process)
        import torch.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            config.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
            model.to(config.device)
        net = torch.nn.parallel.DistributedDataParallel(model)
    meta = {"norm": norm, "alpha": float(alpha), "model": sizes,
            "train": {k: v for k, v in asdict(config).items() if k in tcfg or k in RECIPE_TRAIN},
            "eval_split": corpus.eval_split, "train_tokens": int(corpus.train.numel()),
            "eval_tokens": int(corpus.eval.numel()), "parameters": model.num_parameters(),
            "torch_threads": torch.get_num_threads(), "world_size": world}
    meta["train"]["seed"] = tcfg.get("seed", 0)
    t0 = time.perf_counter()
    last: TrainEvent | None = None
    try:
        for last in train_iter(net, corpus.train, corpus.eval, config, resume_from=ckpt if resume else None,
                               stop=stop):
            yield last
    finally:
        if out_path is not None and rank == 0 and last is not None:
            hist = last.history
            if hist.status == "running":
                hist.status = "stopped"
            _write_run(out_path, model, hist, meta, corpus.tokenizer, time.perf_counter() - t0,
                       tokenizer, keep_checkpoints)


def _write_run(out: Path, model: MixLNForCausalLM, history: TrainHistory, meta: dict, tok, seconds: float,
               tokenizer_path, keep_checkpoints: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    shared = (out.resolve() / "tokenizer.json", out.resolve().parent / "tokenizer.json")
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
    for last in train_run_iter(out, norm, alpha, model_sizes, train_config, tokenizer, resume, keep_checkpoints,
                               checkpoint_every, stop):
        if callback is not None:
            callback(last)
    if out is None:
        return last.history.to_dict() if last else {}
    return json.loads((Path(out) / "run.json").read_text())


def reproduce(root: str | os.PathLike = ASSETS, names: list[str] | None = None, callback=None) -> dict[str, dict]:
    """Retrain the committed runs into ``root`` with the recipe (one shared tokenizer, same seed and data).

    ``core.mixln.reproduce_result`` (``python -m core mixln reproduce``) calls this, then precomputes each run's
    diagnostics (``core.mixln.write_run_diagnostics``); this module does not import the analyses."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / "tokenizer.json"
    if not tok_path.is_file():
        corpus = prepare_corpus(RECIPE_MODEL["vocab_size"])
        corpus.tokenizer.save(str(tok_path))
    results = {}
    for name in names or list(RECIPE):
        if name not in RECIPE:
            raise BadInputError(f"unknown run {name!r}.", fix=f"use one of: {', '.join(RECIPE)}.")
        spec = RECIPE[name]
        results[name] = train_run(root / name, spec["norm"], spec["alpha"], RECIPE_MODEL, RECIPE_TRAIN, tok_path,
                                  keep_checkpoints=False, callback=callback)
        results[name] = compact_run(root / name)  # the CLI's reproduce then precomputes each run's diagnostics
    return results


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
        (folder / "run.json").write_text(json.dumps(meta, indent=1))
        got = evaluate_run(str(folder))
        meta.update(final_eval_loss=got["loss"], final_eval_perplexity=got["perplexity"])
    meta["weights_dtype"] = dtype
    atomic_write(folder / "run.json", json.dumps(meta, indent=1))
    return meta


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


def run_tokenizer(ref, root=ASSETS):
    folder = resolve_run(ref, root)
    own = folder / "tokenizer.json"
    return load_tokenizer(own if own.is_file() else folder.parent / "tokenizer.json")


def eval_tokens_of(ref, root=ASSETS, split: str | None = None) -> torch.Tensor:
    """The run's held-out evaluation windows (N, T), exactly those its recorded eval perplexity used."""
    run = load_run(ref, root)
    folder = run.folder
    tok = folder / "tokenizer.json" if (folder / "tokenizer.json").is_file() else folder.parent / "tokenizer.json"
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
    """One row per run: norm placement, alpha, steps, status, final eval loss and perplexity, wall time."""
    rows = []
    for name in runs or list_runs(root):
        r = load_run(name, root)
        m = r.meta
        rows.append({"run": name, "norm": placement_label(m["norm"]), "alpha": m["alpha"],
                     "layers": m["model"]["num_layers"], "width": m["model"]["hidden_size"],
                     "steps": m.get("steps_done"), "status": m.get("status"),
                     "eval_loss": _round(m.get("final_eval_loss"), 4),
                     "eval_perplexity": _round(m.get("final_eval_perplexity"), 2),
                     "wall_s": m.get("wall_seconds")})
    return rows


def sweep_table(root=ASSETS, runs: list[str] | None = None) -> list[dict]:
    """Final eval perplexity vs alpha: the recipe's sweep runs (or ``runs``) that exist, sorted by alpha."""
    names = runs or [n for n in SWEEP.values() if n in list_runs(root)]
    rows = []
    for name in names:
        r = load_run(name, root)
        alpha = sweep_alpha(r.meta["norm"], r.meta["alpha"])
        if alpha is None:
            continue
        rows.append({"alpha": alpha, "run": name, "status": r.meta.get("status"),
                     "eval_perplexity": _round(r.final_perplexity, 2),
                     "post_ln_layers": math.floor(alpha * r.meta["model"]["num_layers"] + 1e-9)})
    return sorted(rows, key=lambda x: x["alpha"])


def _round(x, nd):
    return None if x is None or not math.isfinite(x) else round(x, nd)
