"""The training loop as a library function that streams its progress.

``train_iter(model, train_tokens, eval_tokens, config, progress=...)`` is a generator of :class:`TrainEvent`; a UI
iterates it, the CLI and tests call :func:`train`, which drains it. Every step and evaluation is reported to
``progress(fraction, message)`` (:mod:`core.progress`); a :class:`core.errors.Cancelled` it raises ends the run as
``"stopped"`` after the step (closing the generator does too).

The defaults are the Mix-LN authors' (pixeli99/MixLN ``torchrun_main.py`` and ``scripts/run_*.sh``): Adam, betas
(0.9, 0.999), no weight decay, no gradient clipping, and their schedule, a linear warmup from 0 and a cosine decay to
``min_lr_ratio * lr`` (:func:`lr_at`); held-out perplexity every ``eval_every`` steps; per-layer gradient norms every
``grad_log_every`` steps (and at step 1, i.e. at initialisation); checkpoints every ``checkpoint_every`` steps and at
the end, from which ``resume_from=`` continues exactly. A non-finite loss or gradient ends the run as ``"diverged"``
with its curves kept: for Post-LN that is a result, not a crash.

Tokens are a 1-D stream of ids (train and eval); each step draws ``batch_size`` windows of
``seq_len`` tokens at offsets seeded by (seed, step), so a resumed run sees the same batches.

Data-parallel: pass a model wrapped in ``torch.nn.parallel.DistributedDataParallel`` (one process per rank, the
process group already initialised) and the run is the single-process run split over the ranks: ``batch_size`` is the
global batch, every rank draws the same (seed, step) windows and keeps its own ``batch_size / world`` rows; DDP
averages the gradients, so each update equals the single-process one; the logged loss is the mean over ranks (the
single-process batch mean), the gradient norms are those of the averaged gradient (the same on every rank), the
per-layer input-gradient norms are combined over ranks as the single-process batch would give them; each rank
evaluates its share of the held-out batches and the sums are added. Every rank takes the same branch (stop,
divergence) from these shared values: a stop asked on any rank stops all. Only the rank with a ``checkpoint_dir``
writes checkpoints.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import torch
import torch.nn as nn

from core.errors import BadInputError, Cancelled
from core.mixln.config import check_fits
from core.mixln.diagnostics import find_decoder_layers, grad_norms_from_backward
from core.mixln.model import MixLNForCausalLM, causal_lm_loss, upcast
from core.files import atomic_write
from core.progress import Progress, report


@dataclass
class TrainConfig:
    steps: int = 1000
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 1e-3                  # peak learning rate (the Mix-LN authors' 1e-3 for LLaMA-71M..250M)
    warmup_steps: int = 100           # linear warmup from 0 (the authors: 10% of the steps)
    min_lr_ratio: float = 0.1         # cosine decay ends at lr * min_lr_ratio (the authors' default)
    betas: tuple[float, float] = (0.9, 0.999)  # torch.optim.Adam's defaults, as the authors use them
    weight_decay: float = 0.0         # the authors: 0 (so AdamW here is exactly their Adam)
    grad_clip: float | None = None    # max global norm; None: no clipping, as the authors' scripts
                                      # (--grad_clipping 0.0); the norm is still measured
    eval_every: int = 100             # 0: evaluate only at the end
    eval_batches: int = 4             # held-out batches per evaluation (contiguous windows, fixed)
    grad_log_every: int = 50          # k: per-layer gradient norms every k steps (and at step 1)
    checkpoint_every: int = 0         # 0: only at the end (when checkpoint_dir is set)
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 2
    seed: int = 0
    device: str = "cpu"
    bf16: bool = False                # autocast to bfloat16 (CUDA)
    dtype: str = "float32"            # parameter dtype; "float64" for the reproducibility checks (machine-independent)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_batches"):
            if getattr(self, name) < 1:
                raise BadInputError(f"{name} must be at least 1 (got {getattr(self, name)}).", fix=f"set {name} >= 1.")
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            raise BadInputError(f"learning rate {self.lr} / min_lr_ratio {self.min_lr_ratio} out of range.",
                                fix="use lr > 0 and min_lr_ratio in [0, 1].")
        self.betas = tuple(self.betas)
        if self.dtype not in ("float32", "float64"):
            raise BadInputError(f"dtype {self.dtype!r} is not supported.", fix="use float32, or float64 for checks.")


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate of (1-based) ``step``, the Mix-LN authors' one-cycle schedule
    (``_get_cyclical_cosine_schedule_with_min_lr_lambda`` behind ``LambdaLR``): with s = step - 1 updates done
    and W warmup steps, lr * s / W while s < W, then lr * (m + (1 - m) * (1 + cos(pi * (s - W) / (T - W))) / 2)
    with m = ``min_lr_ratio`` and T = ``steps``. The first update has lr 0, as theirs does."""
    s, w = step - 1, config.warmup_steps
    if s < w:
        return config.lr * s / w
    progress = min(1.0, (s - w) / max(1, config.steps - w))
    m = config.min_lr_ratio
    return config.lr * (m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * progress)))


@dataclass
class TrainHistory:
    """Curves so far. status: running | finished | stopped | diverged."""

    status: str = "running"
    step: int = 0
    train: list[dict] = field(default_factory=list)        # {step, loss, lr, grad_norm}
    eval: list[dict] = field(default_factory=list)         # {step, loss, perplexity}
    grad_norms: list[dict] = field(default_factory=list)   # {step, param: [L], input: [L]}
    diverged_at: int | None = None
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainHistory":
        return cls(**data)


@dataclass
class TrainEvent:
    """kind: step | eval | grad_norms | checkpoint | diverged | stopped | done; ``data`` is that record;
    ``step / total_steps`` is the progress; ``history`` the curves so far (the same object throughout)."""

    kind: str
    step: int
    data: dict
    history: TrainHistory
    total_steps: int = 0


# ---- data ------------------------------------------------------------------------------------------

def _token_stream(tokens, name: str, seq_len: int, vocab_size: int | None) -> torch.Tensor:
    t = torch.as_tensor(tokens)
    if t.dim() != 1:
        t = t.reshape(-1)
    if t.numel() < seq_len + 1 or t.is_floating_point():
        raise BadInputError(f"the {name} corpus has {t.numel()} tokens; one window needs {seq_len + 1}"
                            + (" integer ids" if t.is_floating_point() else "") + ".",
                            fix=f"provide more {name} text or a shorter sequence length.")
    t = t.long()
    if vocab_size is not None and (int(t.min()) < 0 or int(t.max()) >= vocab_size):
        raise BadInputError(f"the {name} tokens hold ids outside [0, {vocab_size}).",
                            fix="tokenize with the tokenizer whose vocabulary the model was built for.")
    return t


def train_batch(tokens: torch.Tensor, step: int, config: TrainConfig, rank: int = 0, world: int = 1) -> torch.Tensor:
    """(batch_size, seq_len) windows at offsets seeded by (seed, step); with ``world > 1`` rank ``rank``'s share,
    rows ``[rank * b, (rank + 1) * b)`` with ``b = batch_size / world`` (the same global batch for every world)."""
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    starts = torch.randint(0, tokens.numel() - config.seq_len + 1, (config.batch_size,), generator=gen)
    share = config.batch_size // world
    starts = starts[rank * share:(rank + 1) * share]
    return torch.stack([tokens[s:s + config.seq_len] for s in starts.tolist()])


def eval_batches(tokens: torch.Tensor, config: TrainConfig) -> list[torch.Tensor]:
    """``eval_batches * batch_size`` non-overlapping windows spread evenly over the whole held-out stream (so every
    corpus in it is scored in proportion to its size, not only the first one), the same every time."""
    blocks = tokens.numel() // config.seq_len
    n = min(blocks, config.eval_batches * config.batch_size)
    starts = [(i * blocks // n) * config.seq_len for i in range(n)]
    windows = torch.stack([tokens[s:s + config.seq_len] for s in starts])
    return list(windows.split(config.batch_size))


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[torch.Tensor], config: TrainConfig) -> float:
    total, count = _eval_sums(model, batches, config)
    return total / count


def _eval_sums(model: nn.Module, batches: list[torch.Tensor], config: TrainConfig) -> tuple[float, int]:
    """(summed next-token loss, number of predicted tokens) over ``batches``."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            batch = batch.to(config.device)
            with _autocast(config):
                logits = model(batch, use_cache=False).logits
            total += float(causal_lm_loss(logits, batch, reduction="sum"))
            count += batch.shape[0] * (batch.shape[1] - 1)
    model.train(was_training)
    return total, count


def _autocast(config: TrainConfig):
    device_type = "cuda" if str(config.device).startswith("cuda") else "cpu"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.bf16)


# ---- checkpoints -----------------------------------------------------------------------------------

def save_checkpoint(root: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                    history: TrainHistory, config: TrainConfig, keep: int = 2) -> Path:
    """Write ``root/step-0000123/`` atomically: the model folder (config.json + model.safetensors),
    optimizer.pt and trainer_state.json. Older checkpoints beyond ``keep`` are removed."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{history.step:07d}"

    def write(tmp: Path) -> None:
        if isinstance(model, MixLNForCausalLM) or hasattr(model, "save_pretrained"):
            model.save_pretrained(tmp)
        else:
            from safetensors.torch import save_model
            save_model(model, str(tmp / "model.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        state = {"step": history.step, "history": history.to_dict(), "train_config": asdict(config)}
        (tmp / "trainer_state.json").write_text(json.dumps(state))
    atomic_write(final, write, folder=True)
    _write_json(root / "history.json", history.to_dict())
    for old in sorted(root.glob("step-*"))[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(path: str | os.PathLike) -> Path | None:
    """``path`` itself when it is a checkpoint, else its newest ``step-*`` folder (None if there is none)."""
    path = Path(path)
    if (path / "trainer_state.json").is_file():
        return path
    found = sorted(p for p in path.glob("step-*") if (p / "trainer_state.json").is_file())
    return found[-1] if found else None


def _write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data))


def _load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainHistory:
    from safetensors.torch import load_file, load_model
    config_file = path / "config.json"
    if isinstance(model, MixLNForCausalLM) and config_file.is_file():
        saved = json.loads(config_file.read_text())
        if saved != model.config.to_dict():
            raise BadInputError(f"the checkpoint {path} is of a different model configuration.",
                                fix="resume with the configuration the run was started with.")
        state = load_file(str(path / "model.safetensors"))
        if model.config.tie_word_embeddings:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state)
    else:
        load_model(model, str(path / "model.safetensors"), strict=False)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True))
    state = json.loads((path / "trainer_state.json").read_text())
    history = TrainHistory.from_dict(state["history"])
    history.status = "running"
    return history


# ---- data-parallel -----------------------------------------------------------------------------------

def check_world(batch_size: int, world: int) -> None:
    """A global batch of ``batch_size`` windows splits evenly over ``world`` processes, or :class:`BadInputError`."""
    if world > 1 and batch_size % world:
        raise BadInputError(f"--batch {batch_size} does not split over {world} processes: --batch is the global "
                            f"batch and every process takes an equal share of it.",
                            fix=f"use a --batch that is a multiple of {world} (e.g. {world * max(1, batch_size // world)}"
                                f" or {world * (batch_size // world + 1)}), or another number of processes.")


class _Ranks:
    """The process group a DDP-wrapped model trains in (``world == 1``: no group, every method is the identity)."""

    def __init__(self, model: nn.Module, device: str = "cpu"):
        from torch.nn.parallel import DistributedDataParallel
        self.group, self.world, self.rank, self.device = None, 1, 0, device  # NCCL reduces tensors on the GPU
        if isinstance(model, DistributedDataParallel):
            import torch.distributed as dist
            self.group = model.process_group
            self.world, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)

    def _sum(self, values: list[float]) -> list[float]:
        if self.world == 1:
            return list(values)
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self.group)
        return t.tolist()

    def mean_loss(self, loss: torch.Tensor) -> float:
        """The loss averaged over ranks (each rank's is the mean over its equal share of the batch)."""
        if self.world == 1:
            return float(loss.detach())
        import torch.distributed as dist
        t = upcast(loss.detach()).clone()
        dist.all_reduce(t, group=self.group)
        return float(t) / self.world

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on any rank (a stop asked on one rank stops all)."""
        return self._sum([float(bool(flag))])[0] > 0 if self.world > 1 else bool(flag)

    def input_norms(self, norms: list[float]) -> list[float]:
        """Per-layer input-gradient norms of the global batch: rank r's gradients are those of its own mean loss,
        ``world`` times the global mean's, so the global norm is ``sqrt(sum_r norm_r^2) / world``."""
        if self.world == 1:
            return norms
        squares = self._sum([x * x for x in norms])
        return [math.sqrt(x) / self.world for x in squares]

    def eval_sums(self, total: float, count: int) -> tuple[float, int]:
        total, count = self._sum([total, float(count)])
        return total, int(count)


# ---- the loop --------------------------------------------------------------------------------------

def _float64_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """Create Adam's state before the first step, its step counter in float64: torch makes it a float32 tensor (torch's
    default dtype), so a float64 run would otherwise run one float32 op per parameter and step (exact, as the counts
    are integers, but the float64 run is tested to have no float32 op at all)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p] = {"step": torch.tensor(0.0, dtype=torch.float64),
                                  "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                  "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}


def _stop_asked(progress: Progress | None, fraction: float, message: str) -> bool:
    """Report to ``progress``; True when it raised :class:`Cancelled` (the user asked to stop)."""
    try:
        report(progress, fraction, message)
    except Cancelled:
        return True
    return False


def train_iter(model: nn.Module, train_tokens, eval_tokens, config: TrainConfig, resume_from=None,
               progress: Progress | None = None) -> Iterator[TrainEvent]:
    """Train ``model`` and yield a :class:`TrainEvent` for every step, evaluation, gradient-norm log,
    checkpoint and the end (``done``, ``stopped`` or ``diverged``). Each step and evaluation is reported to
    ``progress``; once it raises :class:`Cancelled` the run ends as ``stopped`` before the next step."""
    from torch.nn.parallel import DistributedDataParallel
    ranks = _Ranks(model, config.device)
    check_world(config.batch_size, ranks.world)
    net = model  # what runs the training step (DDP syncs the gradients); ``model`` is the module itself
    model = model.module if isinstance(model, DistributedDataParallel) else model
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    train_tokens = _token_stream(train_tokens, "training", config.seq_len, vocab)
    eval_tokens = _token_stream(eval_tokens, "evaluation", config.seq_len, vocab)
    if isinstance(model, MixLNForCausalLM):
        check_fits(model.config, config.batch_size, config.seq_len, training=True, device=config.device)
    model.to(device=config.device, dtype=getattr(torch, config.dtype)).train()
    layers = find_decoder_layers(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas,
                                  weight_decay=config.weight_decay)
    if config.dtype == "float64":
        _float64_adam_state(optimizer)
    history = TrainHistory()
    if resume_from is not None:
        ckpt = latest_checkpoint(resume_from)
        if ckpt is None:
            raise BadInputError(f"no checkpoint found in {resume_from}.", fix="start a new run or pick its folder.")
        history = _load_checkpoint(ckpt, model, optimizer)
    held_out = eval_batches(eval_tokens, config)[ranks.rank::ranks.world]  # each rank evaluates its share

    def event(kind: str, data: dict) -> TrainEvent:
        return TrainEvent(kind, history.step, data, history, config.steps)

    def finish(status: str, message: str = "") -> Iterator[TrainEvent]:
        history.status, history.message = status, message
        if status != "finished":
            _stop_asked(progress, history.step / config.steps, f"note: {status}: {message}")
        if config.checkpoint_dir and status != "diverged":
            path = save_checkpoint(config.checkpoint_dir, model, optimizer, history, config, config.keep_checkpoints)
            yield event("checkpoint", {"step": history.step, "path": str(path)})
        elif config.checkpoint_dir:
            Path(config.checkpoint_dir).mkdir(parents=True, exist_ok=True)
            _write_json(Path(config.checkpoint_dir) / "history.json", history.to_dict())
        yield event(status if status != "finished" else "done", {"status": status, "message": message})

    stop = False
    try:
        while history.step < config.steps:
            if ranks.any(stop):  # every rank takes this branch together
                yield from finish("stopped", f"stopped at step {history.step}")
                return
            step = history.step + 1
            lr = lr_at(step, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = train_batch(train_tokens, step, config, ranks.rank, ranks.world).to(config.device)
            log_grads = step == 1 or (config.grad_log_every > 0 and step % config.grad_log_every == 0)
            with _autocast(config):
                out = net(batch, output_hidden_states=log_grads, use_cache=False)
            loss = causal_lm_loss(out.logits, batch)
            loss_value = ranks.mean_loss(loss)  # the same on every rank, so every rank takes the same branch
            if not math.isfinite(loss_value):
                history.diverged_at = step
                yield from finish("diverged", f"loss became {loss_value} at step {step}")
                return
            inputs = list(out.hidden_states[:len(layers)]) if log_grads else []
            for h in inputs:
                h.retain_grad()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # under DDP the gradients are averaged over ranks here
            norms = grad_norms_from_backward(layers, inputs) if log_grads else None
            clip = config.grad_clip if config.grad_clip is not None else math.inf
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
            if not math.isfinite(grad_norm):
                history.diverged_at = step
                yield from finish("diverged", f"gradient norm became {grad_norm} at step {step}")
                return
            optimizer.step()
            history.step = step
            record = {"step": step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm}
            history.train.append(record)
            stop = _stop_asked(progress, step / config.steps,
                               f"step {step}/{config.steps} loss {loss_value:.4f} grad-norm {grad_norm:.3f}") or stop
            yield event("step", record)
            if norms is not None:
                g = {"step": step, "param": norms.param, "input": ranks.input_norms(norms.input)}
                history.grad_norms.append(g)
                yield event("grad_norms", g)
            if (config.eval_every > 0 and step % config.eval_every == 0) or step == config.steps:
                total, count = ranks.eval_sums(*_eval_sums(model, held_out, config))
                ev = total / count
                e = {"step": step, "loss": ev, "perplexity": math.exp(min(ev, 700.0))}
                history.eval.append(e)
                stop = _stop_asked(progress, step / config.steps, f"note: step {step}/{config.steps} held-out loss "
                                   f"{ev:.4f} ppl {e['perplexity']:.2f}") or stop
                yield event("eval", e)
            if config.checkpoint_dir and config.checkpoint_every > 0 and step % config.checkpoint_every == 0 \
                    and step < config.steps:
                path = save_checkpoint(config.checkpoint_dir, model, optimizer, history, config,
                                       config.keep_checkpoints)
                yield event("checkpoint", {"step": step, "path": str(path)})
        yield from finish("finished")
    except GeneratorExit:  # the consumer closed the stream: keep the curves, mark the run stopped
        history.status, history.message = "stopped", f"stopped at step {history.step}"
        raise


def train(model: nn.Module, train_tokens, eval_tokens, config: TrainConfig, resume_from=None,
          progress: Progress | None = None) -> TrainHistory:
    """Run :func:`train_iter` to the end (``progress`` as there). Returns the history."""
    history = TrainHistory()
    for ev in train_iter(model, train_tokens, eval_tokens, config, resume_from=resume_from, progress=progress):
        history = ev.history
    return history
