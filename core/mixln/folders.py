"""Reading run folders: the committed runs in ``assets/mixln`` (by name) or any folder ``mixln train`` wrote.

- :class:`Run`, :func:`list_runs`, :func:`resolve_run`, :func:`load_run`, :func:`run_name`  a run's files
- :func:`run_model`, :func:`run_tokenizer`, :func:`tokenizer_file`  its model and tokenizer
- :func:`eval_tokens_of`, :func:`sample_windows`, :func:`evaluate_run`  its held-out windows and their loss
- :func:`weights_fingerprint`  what identifies its weights (also once they are gone)
- :func:`run_examples`  its precomputed diagnostics (``diagnostics.json``) as an example store

Nothing here trains or writes.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.errors import BadInputError
from core.references import Registry
from core.mixln.data import load_tokenizer, pack, prepare_corpus
from core.mixln.model import MixLNForCausalLM
from core.mixln.placements import placement_label, placement_of
from core.mixln.recipe import ASSETS, RECIPE
from core.mixln.train import TrainConfig, eval_batches, evaluate
from core.runner import ExampleStore

DIAGNOSTICS_FILE = "diagnostics.json"  # a run's precomputed diagnostics (written by core.mixln.write_run_diagnostics)


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
    history = folder / "history.json"
    if not history.is_file():
        raise BadInputError(f"{folder} holds no weights and no history.json.", fix="pick a run folder.")
    return "history-" + hashlib.sha256(history.read_bytes()).hexdigest()[:24]


@dataclass
class Run:
    name: str
    folder: Path
    meta: dict                               # run.json
    history: dict                            # history.json
    config: dict = field(default_factory=dict)

    @property
    def placement(self) -> str:
        """Its entry in the placement registry (the model's norm and, for a variant such as DeepNet's DeepNorm, its
        constants)."""
        return placement_of(self.meta.get("norm", "?"), self.meta.get("model"))

    @property
    def label(self) -> str:
        return placement_label(self.placement, self.meta.get("alpha"))

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


@functools.lru_cache(maxsize=4)
def committed_runs(root: str | os.PathLike = ASSETS) -> dict[str, Path]:
    """``{name: folder}`` of every run folder under ``root`` (the committed runs by default: ``pre-ln``,
    ``depth-24/pre-ln/seed-1``, ...), listed once per process: the registry a run name is looked up in, as text."""
    root = Path(root)
    found = sorted(p.parent for p in root.rglob("run.json") if _is_run(p.parent)) if root.is_dir() else []
    return {f.relative_to(root).as_posix(): f for f in found}


def _local_run(ref: str) -> Path:
    return resolve_run(ref)


# ``mixln:<run>``: a committed run by name (a NeuZip training source, ...), through core.references.check_reference;
# locally also a run folder ``mixln train`` wrote
RUN_REFERENCES = Registry("mixln-run", committed_runs, prefix="mixln:", local=_local_run, what="Mix-LN run",
                          example="mixln:pre-ln")


def resolve_run(ref: str | os.PathLike, root: str | os.PathLike = ASSETS) -> Path:
    """The run folder ``ref`` names: a run under ``root`` (the committed runs), else a run folder anywhere. In public
    mode only a committed run's name (looked up as text in :func:`committed_runs`) or a committed run's folder (as the
    app's own code passes them) is taken; any other reference gets :func:`core.zoo.hub.not_offered` (the same
    message whatever it names, before any file outside the committed runs is looked at)."""
    from core.settings import is_public

    if is_public():  # a name (what a visitor sends is text) of the registry, or a registry folder the app passes
        runs = committed_runs()
        if isinstance(ref, str) and ref in runs:
            return runs[ref]
        if isinstance(ref, Path) and ref in runs.values():
            return ref
        from core.zoo.hub import not_offered
        raise not_offered()
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


def run_name(folder: str | os.PathLike) -> str:
    """A run folder's name under the committed runs (``pre-ln/seed-1``), else its own name."""
    try:
        return Path(folder).resolve().relative_to(ASSETS.resolve()).as_posix()
    except ValueError:
        return Path(folder).name


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
    """(n, T) held-out windows of a run for diagnostics: ``n`` of its evaluation windows spread evenly over them
    (window ``i * N // n`` of the N), so the three corpora of the held-out stream (Wikipedia, OpenWebText, the Python
    docs) are in them in proportion to their size, not only the first corpus."""
    windows = eval_tokens_of(ref, root)
    if seq_len is not None and seq_len != windows.shape[1]:
        windows = pack(windows.reshape(-1), seq_len)
    total = windows.shape[0]
    if n >= total:
        return windows
    return windows[[i * total // n for i in range(n)]]


def fingerprint_of(ref: str, run: Path | None) -> str:
    """The fingerprint of the subject's weights (a run's model.safetensors, or the zoo's), read without loading them;
    for a run stored without weights, the one its run.json recorded (:func:`weights_fingerprint`)."""
    if run is not None:
        return weights_fingerprint(run)
    from core.zoo import fingerprint
    return fingerprint(ref)


def run_examples(folder: str | os.PathLike | None) -> ExampleStore | None:
    """A run's precomputed diagnostics (``<run>/diagnostics.json``) as an example store; None for no folder or no file.
    Files written before the store format (a dict of results by ``analysis?params``) are read too."""
    if folder is None:
        return None
    path = Path(folder) / DIAGNOSTICS_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if doc.get("format") == ExampleStore.FORMAT:
        return ExampleStore(path)
    fp = weights_fingerprint(folder)
    return ExampleStore.from_entries([{"model": Path(folder).name, "fingerprint": fp, "analysis": key.split("?")[0],
                                       "params": _params_of(res), "data": res} for key, res in doc.items()])


def _params_of(res: dict) -> dict:
    return {k: res[k] for k in ("samples", "seq_len", "position", "corpus") if k in res}
