"""The papers, listed once: the registry above the four paper packages that the command line, the links and
examples, batch runs, the static site and the app's tabs iterate.

A paper is a package ``core/<name>/`` with the same face (its ``__init__``): ``ANALYSES`` (its analyses),
``analysis_result`` (the one function that answers them), ``EXAMPLE_VIEWS`` (the views a speaker shows),
optionally ``BATCH`` (its :class:`core.batch.BatchKind`), and a ``cli.py`` with ``register(groups)`` (its command
group). An entry here names it, titles it, gives its command group's one-line help (so ``python -m core --help``
imports no paper) and loads its package and its CLI by explicit imports, only when asked: the packages pull in torch
and transformers.

This module sits above the papers: the shared modules below them (:mod:`core.analyses`, :mod:`core.batch`,
:mod:`core.runner`, ...) never import it, and the papers never import it either; only the modules that list the
papers do (:mod:`core.cli`, :mod:`core.examples`, :mod:`core.site`, ``ui``). A fifth paper is one entry here, its
package and its tab (docs/architecture.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from core.errors import BadInputError


@dataclass(frozen=True)
class Paper:
    """One paper: ``name`` is its package, tab id, ``?tab=`` value and command group; ``title`` how the app and the
    command line name it; ``help`` its command group's one line; ``load`` / ``load_cli`` import its package / its
    ``cli`` module."""

    name: str
    title: str
    help: str
    load: Callable[[], ModuleType]
    load_cli: Callable[[], ModuleType]
    model_classes: tuple[tuple[str, Callable[[], type]], ...] = ()  # the card names of its own model classes

    def package(self) -> ModuleType:
        return self.load()


def _lrp():
    import core.lrp
    return core.lrp


def _lrp_cli():
    from core.lrp import cli
    return cli


def _mathneuro():
    import core.mathneuro
    return core.mathneuro


def _mathneuro_cli():
    from core.mathneuro import cli
    return cli


def _mixln():
    import core.mixln
    return core.mixln


def _mixln_cli():
    from core.mixln import cli
    return cli


def _neuzip():
    import core.neuzip
    return core.neuzip


def _neuzip_cli():
    from core.neuzip import cli
    return cli


def _mamba_classifier() -> type:
    from core.lrp.models import MambaSequenceClassifier
    return MambaSequenceClassifier


def _sequence_classifier() -> type:
    from core.lrp.models import SequenceClassifier
    return SequenceClassifier


def _vision_mamba() -> type:
    from core.lrp.models import VisionMamba
    return VisionMamba


def _mixln_model() -> type:
    from core.mixln.model import MixLNForCausalLM
    return MixLNForCausalLM


# the one list of the papers, in the order the app shows them (read at call time: a test may add one)
PAPERS: list[Paper] = [
    Paper("lrp", "MambaLRP", "MambaLRP: relevance heatmaps for Mamba models", _lrp, _lrp_cli,
          (("core.lrp:MambaSequenceClassifier", _mamba_classifier), ("core.lrp:SequenceClassifier", _sequence_classifier),
           ("core.lrp:VisionMamba", _vision_mamba))),
    Paper("mathneuro", "MathNeuro", "MathNeuro: math-specific parameters", _mathneuro, _mathneuro_cli),
    Paper("mixln", "Mix-LN", "Mix-LN: norm placement, training and layer diagnostics", _mixln, _mixln_cli,
          (("core.mixln:MixLNForCausalLM", _mixln_model),)),
    Paper("neuzip", "NeuZip", "NeuZip: lossless and lossy bf16 weight compression", _neuzip, _neuzip_cli),
]


def register_model_classes() -> None:
    """Let model cards name the papers' own classes (:mod:`core.model_classes`, read by the zoo); ``core`` calls it
    when it is imported (nothing is imported from a paper until a card names its class)."""
    from core import model_classes

    for p in PAPERS:
        for name, load in p.model_classes:
            model_classes.register(name, load)


def names() -> tuple[str, ...]:
    """The papers' names (their tab ids), in order."""
    return tuple(p.name for p in PAPERS)


def paper(name: str) -> Paper:
    """The entry ``name``; one message naming the others for anything else."""
    for p in PAPERS:
        if p.name == name:
            return p
    raise BadInputError(f"no paper {name!r}.", fix=f"use one of {', '.join(names())}.")


def titles() -> dict[str, str]:
    """``{name: title}`` of every paper."""
    return {p.name: p.title for p in PAPERS}


def analyses() -> dict[str, tuple[dict, Callable]]:
    """Every paper's analyses and the function that answers them, ``name -> (ANALYSES, analysis_result)`` (imports
    every package)."""
    out = {}
    for p in PAPERS:
        package = p.package()
        out[p.name] = (package.ANALYSES, package.analysis_result)
    return out


def stored_schemas() -> dict:
    """``{stored name: schema}`` of every paper's stored analyses (their :attr:`core.analyses.Analysis.schema`): what
    ``python -m core cache seal`` checks each committed entry against (imports every package)."""
    out = {}
    for p in PAPERS:
        for a in p.package().ANALYSES.values():
            if a.stored_as and a.schema is not None:
                if out.get(a.stored_as, a.schema) is not a.schema:
                    raise ValueError(f"two schemas for the stored analysis {a.stored_as!r}")
                out[a.stored_as] = a.schema
    return out


def batch_kinds() -> dict:
    """Every paper's batch kind (its package's ``BATCH``), by the paper's name; papers without one are left out."""
    out = {}
    for p in PAPERS:
        kind = getattr(p.package(), "BATCH", None)
        if kind is not None:
            out[p.name] = kind
    return out


def batch_kind(name: str):
    """The batch kind of paper ``name``; one message naming the papers that have one."""
    kind = getattr(paper(name).package(), "BATCH", None) if name in names() else None
    if kind is None:
        raise BadInputError(f"no batch kind {name!r}.", fix=f"use one of {', '.join(batch_kinds())}.")
    return kind


__all__ = ["Paper", "PAPERS", "names", "paper", "titles", "analyses", "stored_schemas", "batch_kinds", "batch_kind"]
