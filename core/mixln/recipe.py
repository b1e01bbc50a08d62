"""The recipe of the committed Mix-LN runs: model and training settings, the norm placements it trains, the run sets
(depths, seeds, learning rates) and where each run lives under ``assets/mixln``; the live run's small settings.

- :data:`RECIPE_MODEL`, :data:`RECIPE_TRAIN`, :data:`RECIPE_DEVIATIONS`  the settings (the Mix-LN authors', smaller)
- :data:`RECIPE`            the placements: run name -> norm placement and alpha
- :data:`RUN_SETS`          the committed run sets (12 layers x 3 seeds, 24 layers, a learning-rate sweep, the
  embedding-init comparison); :data:`PENDING` the recipe runs not committed yet
- :class:`Job`, :func:`recipe_jobs`, :func:`recipe_command`  one run of the recipe, every run, its ``mixln train`` line
- :data:`LIVE_MODEL`, :data:`LIVE_TRAIN`  the tab's live run

Nothing here trains or reads a run: :mod:`core.mixln.launch` trains one, :mod:`core.mixln.retrain` retrains the
committed ones, :mod:`core.mixln.folders` reads them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInputError
from core.mixln.data import DEFAULT_VOCAB
from core.mixln.placements import placement_label, placement_model, sweep_alpha

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
    # DeepNet's own formula beside the Mix-LN authors' constants (the registry's variant: norm deepnorm, constants)
    "deepnorm-deepnet": dict(norm="deepnet", alpha=1.0),
    # the follow-ups: Peri-LN (Kim et al. 2025) and LayerNorm Scaling (Sun et al. 2025, the Mix-LN authors' lab)
    "peri-ln": dict(norm="peri", alpha=0.0),
    "lns": dict(norm="lns", alpha=0.0),
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
    choice: str = ""  # its name among the run sets a user picks (default: its layer count)
    fewer_seeds: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (placement, its seeds) where it has fewer than seeds

    def seeds_of(self, name: str) -> tuple[int, ...]:
        """The seeds placement ``name`` is trained with in this set."""
        return dict(self.fewer_seeds).get(name, self.seeds)


RUN_SETS = {
    # DeepNorm (the authors' constants) stays at the unigram level in every seed: two seeds
    "main": RunSet("", RECIPE_MODEL, tuple(RECIPE), fewer_seeds=(("deepnorm", (0, 1)),), title="12 layers, width 64"),
    # 24 layers: one seed per placement and a second Pre-LN seed (its seed-to-seed spread beside the gaps between
    # placements); 3,000 steps of 24 layers take about 13 minutes a run on one thread here
    "depth-24": RunSet("depth-24", {**RECIPE_MODEL, "num_layers": 24},
                       ("pre-ln", "post-ln", "mix-ln-0.25", "deepnorm", "deepnorm-deepnet", "peri-ln", "lns"),
                       seeds=(0, 1), fewer_seeds=tuple((n, (0,)) for n in ("post-ln", "mix-ln-0.25", "deepnorm",
                                                                         "deepnorm-deepnet", "peri-ln", "lns")),
                       title="24 layers, width 64"),
    "lr-sweep": RunSet("lr-sweep", RECIPE_MODEL, ("pre-ln", "post-ln", "mix-ln-0.25"), seeds=(0,),
                       lrs=(3e-4, 3e-3), diagnostics=False, weights_for_seed=None,
                       title="12 layers, width 64, one seed per rate"),
    # the init question: the Mix-LN code's embedding init N(0, sqrt(2/5)) (the main set's) against N(0, 0.02), which
    # the LayerNorm-Scaling code uses and its authors say produced their numbers (their repository's issue 6)
    # Pre-LN and Mix-LN 0.25 at 5 seeds each (the verdict between them hinges on this set), LayerNorm Scaling at 3
    "init-0.02": RunSet("init-0.02", {**RECIPE_MODEL, "embedding_init_std": 0.02}, ("pre-ln", "mix-ln-0.25", "lns"),
                        seeds=(0, 1, 2, 3, 4), fewer_seeds=(("lns", (0, 1, 2)),),
                        diagnostics=False, weights_for_seed=None, title="12 layers, width 64, embedding init std 0.02",
                        choice="12 layers, embedding init std 0.02"),
}
# Recipe runs not committed yet (Job.key): none now (the last, the 24-layer DeepNet run, was trained 2026-11-29).
# `python -m core mixln reproduce --skip-done` trains any that a new recipe entry adds (and nothing already
# committed); a test holds this set to what is missing, so a run that is committed leaves it.
PENDING: frozenset[str] = frozenset()
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
        """The set's model sizes with the constants of the run's placement variant (DeepNet's formula)."""
        return {**RUN_SETS[self.set].model, **placement_model(RECIPE[self.name]["norm"])[1]}

    @property
    def train(self) -> dict:
        return {**RECIPE_TRAIN, "seed": self.seed, "lr": self.lr}

    @property
    def pending(self) -> bool:
        """Whether this run is in the recipe but not committed yet (:data:`PENDING`)."""
        return self.key in PENDING

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
            if seed in RUN_SETS[s].seeds_of(n) and (names is None or n in names) and (seeds is None or seed in seeds)]


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
