"""Recipes that train the embedded models the MambaLRP tab explains (committed under ``assets/models``).

==========================  ==============================================  ===================================
model                       class                                           data
==========================  ==============================================  ===================================
``mamba-lm``                transformers ``MambaForCausalLM``                paragraph corpora (train) + the
                                                                            movie-sentiment train sentences
``mamba-sentiment``         :class:`core.lrp.MambaSequenceClassifier`        movie-sentiment train + the other
                                                                            VADER ground-truth sentences (word
                                                                            level, VADER lexicon prior)
``vision-mamba-mnist``      :class:`core.lrp.VisionMamba`                    mnist-5k
``mamba2-sentiment``        :class:`core.lrp.SequenceClassifier` on a        as ``mamba-sentiment``
                            transformers ``Mamba2Model``
``hybrid-sentiment``        :class:`core.lrp.SequenceClassifier` on a        as ``mamba-sentiment``
                            ``GraniteMoeHybridModel`` (Mamba-2 + attention)
==========================  ==============================================  ===================================

One module per recipe (:mod:`.lm`, :mod:`.sentiment`, :mod:`.vision`); :mod:`.fast` has the training-speed mixers
(``ssm_branch`` on ``selective_scan_train``), :mod:`.baseline` the TF-IDF baseline; tokenizers and the VADER data
live in :mod:`core.data`, the seeding / AdamW / atomic-save plumbing in :mod:`core.zoo.training`.

Every recipe is a function ``train_*(config, out, progress=None, recipe_command="") -> metrics``: seeded (same
config and seed, same weights on the same machine and thread count), it writes ``config.json``,
``model.safetensors``, tokenizer files and ``card.json`` into ``out`` in one step and returns the held-out figures it
measured (on the *saved* model reloaded from disk, with the ordinary forward). ``progress(fraction, message)`` is
called along the way; raising from it cancels the run and leaves ``out`` untouched.

All three models are bias-free where a bias would absorb relevance (no conv bias, no classifier-head bias; the
Vision Mamba head bias is held at zero), so MambaLRP's relevances sum to the explained logit.
"""
from __future__ import annotations

from dataclasses import replace

from core.data.tokenizers import EOS, UNK, fast_tokenizer, train_tokenizer, train_word_tokenizer, word_form
from core.data.vader import VADER_GROUND_TRUTH, extra_sentiment_records, vader_lexicon
from core.errors import BadInputError
from core.lrp.recipes.baseline import tfidf_baseline
from core.lrp.recipes.fast import fast_mixers
from core.lrp.recipes.lm import (FAMILIES, PARAGRAPH_CORPORA, LMRecipe, backbone_config, mamba_config, paragraph_texts,
                                 train_lm)
from core.lrp.recipes.sentiment import (HybridSentimentRecipe, Mamba2SentimentRecipe, SentimentRecipe,
                                        classifier_accuracy, train_sentiment)
from core.lrp.recipes.vision import VisionRecipe, image_accuracy, mnist_tensors, train_vision
from core.zoo.training import seed_everything

RECIPES = {
    "lm": (LMRecipe, train_lm, "mamba-lm"),
    "sentiment": (SentimentRecipe, train_sentiment, "mamba-sentiment"),
    "vision": (VisionRecipe, train_vision, "vision-mamba-mnist"),
    "sentiment-mamba2": (Mamba2SentimentRecipe, train_sentiment, "mamba2-sentiment"),
    "sentiment-hybrid": (HybridSentimentRecipe, train_sentiment, "hybrid-sentiment"),
}


def recipe_for(name: str, seed: int = 0, quick: bool = False, **overrides):
    """The recipe config of ``name`` (a key of :data:`RECIPES`), its quick variant with ``quick``."""
    if name not in RECIPES:
        raise BadInputError(f"unknown recipe {name!r}.", fix=f"use one of {', '.join(RECIPES)}.")
    cls = RECIPES[name][0]
    cfg = cls.quick(seed) if quick else cls(seed=seed)
    return replace(cfg, **overrides) if overrides else cfg


def train(request, progress=None) -> dict:
    """Train the recipe of a :class:`core.lrp.requests.TrainRequest` into its ``out`` folder (default
    ``assets/models/<name>``); the card records the command that reproduces it. Returns the model's name, the
    folder, that command and the held-out figures the recipe measured."""
    import torch

    from core.paths import ASSETS_DIR

    overrides = {"init_from": request.init_from} if request.init_from is not None else {}
    if request.epochs is not None:
        overrides["epochs"] = request.epochs
    torch.set_num_threads(request.threads)
    cfg = recipe_for(request.recipe, seed=request.seed, quick=request.quick, **overrides)
    _, train_fn, name = RECIPES[request.recipe]
    out = request.out or str(ASSETS_DIR / "models" / name)
    metrics = train_fn(cfg, out, progress=progress, recipe_command=request.command)
    return {"model": name, "out": str(out), "recipe": request.command, **metrics}


__all__ = ["RECIPES", "recipe_for", "train", "LMRecipe", "SentimentRecipe", "Mamba2SentimentRecipe",
           "HybridSentimentRecipe", "FAMILIES", "backbone_config", "VisionRecipe", "train_lm", "train_sentiment",
           "train_vision", "fast_mixers", "paragraph_texts", "mamba_config", "classifier_accuracy", "image_accuracy",
           "mnist_tensors", "tfidf_baseline", "seed_everything", "EOS", "UNK", "PARAGRAPH_CORPORA", "fast_tokenizer",
           "train_tokenizer", "train_word_tokenizer", "word_form", "VADER_GROUND_TRUTH", "extra_sentiment_records",
           "vader_lexicon"]
