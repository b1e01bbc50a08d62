"""The recipes of ``mamba-sentiment``, ``mamba2-sentiment`` and ``hybrid-sentiment``: a classifier (head on the final
EOS token) on movie-sentiment, word level with a VADER lexicon prior, plus the other VADER ground-truth sentences;
the backbone is Mamba-1 (:class:`core.lrp.MambaSequenceClassifier`), Mamba-2 or a Mamba-2 + attention hybrid
(:class:`core.lrp.SequenceClassifier`, :func:`core.lrp.recipes.lm.backbone_config`)."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from core.data.tokenizers import EOS, UNK, fast_tokenizer, train_tokenizer, train_word_tokenizer, word_form
from core.data.vader import extra_sentiment_records, vader_lexicon
from core.errors import BadInputError
from core.lrp.recipes.baseline import tfidf_baseline
from core.lrp.recipes.fast import fast_mixers
from core.lrp.recipes.lm import FAMILIES, LMRecipe, backbone_config, lm_training_texts, no_decay
from core.schedules import warmup_cosine
from core.zoo.construction import constructing
from core.progress import Progress, report, scaled
from core.zoo.training import adamw, param_count, save_trained, seed_everything, write_card


@dataclass(frozen=True)
class SentimentRecipe:
    """A Mamba classifier (head on the final EOS token) on movie-sentiment.

    From scratch it reads lowercased words and punctuation runs (``tokenizer="word-split"``, a word-level
    vocabulary of the training sentences plus the VADER lexicon's words; ``"word"`` keeps case and spaces,
    ``"word-lower"`` lowercases but keeps spaces); ``lexicon_channels`` embedding channels start
    at each word's VADER valence (a fixed, pretrained-word-vector style prior; 0 for other words);
    ``extra_data`` adds the other VADER ground-truth sentences (amazon, nyt, tweets) to the *training*
    data only; ``score_weight`` adds a regression of the logit margin on the human score.
    """

    init_from: str = ""             # a mamba-lm folder (its tokenizer + backbone); "" = from scratch
    tokenizer: str = "word-split"   # from scratch: "word-split" (lowercased words and punctuation runs, spaces
                                    # dropped), "word" (surface words), "word-lower" or "bpe" (the LM's BPE)
    vocab_size: int = 4096          # bpe only: vocabulary size
    min_count: int = 2              # word only: keep training words seen at least this often
    lexicon_vocab: bool = True      # word only: add the VADER lexicon's words to the vocabulary
    lexicon_channels: int = 4       # embedding channels initialised with the VADER valence (0 = none)
    lexicon_scale: float = 1.0      # those channels start at scale * valence / 4
    extra_data: str = "amazon,nyt,tweets"  # extra VADER ground-truth sentences for training ("" = none)
    hidden_size: int = 64
    num_layers: int = 2
    state_size: int = 8
    expand: int = 2
    epochs: int = 5
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    embed_dropout: float = 0.1      # dropout on the input embeddings while training
    word_dropout: float = 0.1       # each training token (not the EOS) becomes <unk> with this probability
    score_weight: float = 0.1       # auxiliary MSE of (logit_pos - logit_neg) against the human score
    lm_weight: float = 0.0          # auxiliary next-token loss on the same sentences (tied embeddings)
    max_tokens: int = 96            # longer sentences are cut (keeping the final EOS)
    patience: int = 2               # epochs without a better validation accuracy before stopping
    train_limit: int = 0            # use only the first N training sentences (0 = all; the quick run)
    eval_limit: int = 0             # evaluate on the first N validation / test sentences (0 = all)
    seed: int = 0
    family: str = "mamba"           # the backbone: "mamba" (Mamba-1), "mamba2" or "hybrid" (lm.backbone_config)
    head_dim: int = 16              # mamba2 / hybrid: channels per Mamba-2 head
    chunk_size: int = 32            # mamba2 / hybrid: SSD chunk (the sentences are short; 256 pads them 10x)
    attention_layers: str = "1"     # hybrid: indices of the attention layers (the others are Mamba-2)
    attention_heads: int = 4        # hybrid: query heads
    kv_heads: int = 2               # hybrid: key/value heads (grouped-query attention)
    experts: int = 4                # hybrid: experts per mixture (0: the shared MLP only)
    experts_per_token: int = 2      # hybrid: experts a token is routed to
    expert_size: int = 64           # hybrid: each expert's intermediate size
    mlp_size: int = 128             # hybrid: the shared MLP's intermediate size

    @classmethod
    def quick(cls, seed: int = 0) -> "SentimentRecipe":
        return cls(vocab_size=400, hidden_size=16, num_layers=1, state_size=4, epochs=1, batch_size=64, warmup=1,
                   extra_data="", train_limit=256, eval_limit=100, seed=seed)



@dataclass(frozen=True)
class Mamba2SentimentRecipe(SentimentRecipe):
    """:class:`SentimentRecipe` on a Mamba-2 backbone (``mamba2-sentiment``)."""

    family: str = "mamba2"
    state_size: int = 16


@dataclass(frozen=True)
class HybridSentimentRecipe(SentimentRecipe):
    """:class:`SentimentRecipe` on a Granite-4.0-H-style hybrid (``hybrid-sentiment``): Mamba-2, attention, Mamba-2,
    each layer followed by a mixture of 4 experts (2 per token) beside a shared MLP."""

    family: str = "hybrid"
    num_layers: int = 3
    state_size: int = 16

    @classmethod
    def quick(cls, seed: int = 0) -> "HybridSentimentRecipe":
        return replace(super().quick(seed), num_layers=2)


TITLES = {"mamba": "Mamba sentiment classifier", "mamba2": "Mamba-2 sentiment classifier",
          "hybrid": "Mamba-2 + attention hybrid sentiment classifier"}


def _classifier(recipe: SentimentRecipe, vocab_size: int):
    from core.lrp.models import MambaSequenceClassifier, SequenceClassifier

    cls = MambaSequenceClassifier if recipe.family == "mamba" else SequenceClassifier
    with constructing():
        return cls(backbone_config(recipe, vocab_size), 2, head_bias=False)


def encode_records(tokenizer, records, max_tokens: int) -> list[tuple[list[int], int, float]]:
    out = []
    for r in records:
        ids = tokenizer(r.text)["input_ids"]
        if len(ids) > max_tokens:
            ids = ids[:max_tokens - 1] + ids[-1:]
        out.append((ids, int(r.label), float(getattr(r, "score", 0.0) or 0.0)))
    return out


def length_batches(items: list, batch_size: int, gen: torch.Generator | None) -> list[list]:
    """Batches of equal-length sequences (no padding: the classifier reads the last position)."""
    by_len: dict[int, list] = {}
    for item in items:
        by_len.setdefault(len(item[0]), []).append(item)
    batches = []
    for length in sorted(by_len):
        group = by_len[length]
        if gen is not None:
            group = [group[i] for i in torch.randperm(len(group), generator=gen).tolist()]
        batches += [group[i:i + batch_size] for i in range(0, len(group), batch_size)]
    if gen is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


@torch.no_grad()
def classifier_accuracy(model, tokenizer, records, max_tokens: int = 96, batch_size: int = 64) -> float:
    """Accuracy of a :class:`MambaSequenceClassifier` on ``records`` (``.text``, ``.label``)."""
    items = encode_records(tokenizer, records, max_tokens)
    correct = 0
    for batch in length_batches(items, batch_size, None):
        ids = torch.tensor([b[0] for b in batch])
        pred = model(input_ids=ids).argmax(-1)
        correct += int((pred == torch.tensor([b[1] for b in batch])).sum())
    return correct / max(1, len(items))


def _share_variants(embeddings: nn.Embedding, tokenizer) -> None:
    """Surface variants of one word (``"Ġgood"``, ``"ĠGood"``, ``"good"``) start from the same vector (the most
    frequent variant's, the lowest id): they then learn apart, rare variants staying near the common one."""
    first: dict[str, int] = {}
    with torch.no_grad():
        for word, idx in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
            key = word_form(word)
            if key in first:
                embeddings.weight[idx] = embeddings.weight[first[key]]
            else:
                first[key] = idx


def _lexicon_init(embeddings: nn.Embedding, tokenizer, lexicon: dict[str, float], channels: int, scale: float) -> int:
    """Channels ``[0, channels)`` of every word's embedding := ``scale * valence / 4`` (0 off the lexicon)."""
    hits = 0
    with torch.no_grad():
        embeddings.weight[:, :channels] = 0.0
        for word, idx in tokenizer.get_vocab().items():
            if word_form(word) in lexicon:
                embeddings.weight[idx, :channels] = scale * lexicon[word_form(word)] / 4.0
                hits += 1
    return hits


def train_sentiment(recipe: SentimentRecipe, out, progress: Progress | None = None, recipe_command: str = "") -> dict:
    """Train the recipe's classifier on movie-sentiment (+ extra data); keep the best validation epoch."""
    import core.data as data
    from core.lrp.models import MambaSequenceClassifier

    t0 = time.perf_counter()
    gen = seed_everything(recipe.seed)
    train, val, test = (data.load("movie-sentiment", s, limit=lim or None) for s, lim in
                        (("train", recipe.train_limit), ("validation", recipe.eval_limit), ("test", recipe.eval_limit)))
    extra = extra_sentiment_records(recipe.extra_data) if recipe.extra_data else []
    if recipe.train_limit and extra:
        extra = extra[:recipe.train_limit]
    fit = train + extra  # the sentences the classifier is trained on (never validation or test)
    init = Path(recipe.init_from) if recipe.init_from else None
    if recipe.family not in FAMILIES:
        raise BadInputError(f"unknown family {recipe.family!r}.", fix=f"use one of {', '.join(FAMILIES)}.")
    if init is not None and recipe.family != "mamba":
        raise BadInputError("init_from (a mamba-lm backbone) applies to the Mamba-1 family only.")
    word_level = init is None and recipe.tokenizer in ("word", "word-lower", "word-split")
    if init is None and recipe.tokenizer not in ("word", "word-lower", "word-split", "bpe"):
        raise BadInputError(f"unknown tokenizer {recipe.tokenizer!r}.", fix="use word-split, word, word-lower or bpe.")
    use_lexicon = word_level and (recipe.lexicon_channels > 0 or recipe.lexicon_vocab)  # word-level only
    lexicon = vader_lexicon() if use_lexicon else {}
    if init is not None:
        from tokenizers import Tokenizer
        from transformers import MambaForCausalLM

        if not (init / "tokenizer.json").is_file() or not (init / "config.json").is_file():
            raise BadInputError(f"{init} is not a mamba-lm folder (config.json + tokenizer.json).",
                                fix="train it first: python -m core lrp train lm, or pass --init-from ''.")
        tok = Tokenizer.from_file(str(init / "tokenizer.json"))
        with constructing():
            lm = MambaForCausalLM.from_pretrained(init)
            model = MambaSequenceClassifier(lm.config, num_labels=2, head_bias=False)
        model.backbone.load_state_dict(lm.backbone.state_dict())
        del lm
    elif word_level:
        report(progress, 0.0, "building the word-level vocabulary")
        tok = train_word_tokenizer([r.text for r in fit], recipe.min_count,
                                   lexicon if recipe.lexicon_vocab else (), recipe.tokenizer == "word-lower",
                                   recipe.tokenizer == "word-split")
        model = _classifier(recipe, tok.get_vocab_size())
    else:
        report(progress, 0.0, "training the tokenizer")
        tok = train_tokenizer(lm_training_texts(LMRecipe()), recipe.vocab_size)
        model = _classifier(recipe, tok.get_vocab_size())
    with torch.no_grad():
        model.head.weight.normal_(0, 0.02)
    tokenizer = fast_tokenizer(tok, append_eos=True, unk_token=UNK if word_level else EOS)
    embeddings = model.get_input_embeddings()
    if word_level:
        _share_variants(embeddings, tokenizer)
    lexicon_hits = _lexicon_init(embeddings, tokenizer, lexicon, recipe.lexicon_channels,
                                 recipe.lexicon_scale) if word_level and recipe.lexicon_channels else 0
    items = encode_records(tokenizer, fit, recipe.max_tokens)
    unk_id = tokenizer.convert_tokens_to_ids(UNK) if word_level else None
    opt = adamw(model, recipe.lr, recipe.weight_decay, no_decay=no_decay)
    steps_per_epoch = len(length_batches(items, recipe.batch_size, torch.Generator().manual_seed(0)))
    total = steps_per_epoch * recipe.epochs
    training = scaled(progress, 0.0, 0.9)  # the epochs' share of the bar
    best = (-1.0, None, -1)
    history, step = [], 0
    for epoch in range(recipe.epochs):
        model.train()
        with fast_mixers(model):
            for batch in length_batches(items, recipe.batch_size, gen):
                ids = torch.tensor([b[0] for b in batch])
                labels = torch.tensor([b[1] for b in batch])
                for g in opt.param_groups:
                    g["lr"] = warmup_cosine(step, total, recipe.lr, recipe.warmup)
                inputs = ids
                if recipe.word_dropout and unk_id is not None and ids.shape[1] > 1:
                    drop = torch.rand(ids.shape, generator=gen) < recipe.word_dropout
                    drop[:, -1] = False  # the EOS the head reads stays
                    inputs = ids.masked_fill(drop, unk_id)
                emb = F.dropout(embeddings(inputs), recipe.embed_dropout, training=True)
                hidden = model.backbone(inputs_embeds=emb, use_cache=False).last_hidden_state
                logits = model.head(hidden[:, -1])
                loss = F.cross_entropy(logits, labels)
                if recipe.score_weight:
                    scores = torch.tensor([b[2] for b in batch])
                    loss = loss + recipe.score_weight * F.mse_loss(logits[:, 1] - logits[:, 0], scores)
                if recipe.lm_weight and ids.shape[1] > 1:
                    lm_logits = hidden[:, :-1] @ embeddings.weight.T
                    loss = loss + recipe.lm_weight * F.cross_entropy(
                        lm_logits.reshape(-1, lm_logits.shape[-1]), ids[:, 1:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                step += 1
                if step % 25 == 0:
                    report(training, step / total, f"epoch {epoch + 1} step {step}/{total} loss {float(loss.detach()):.3f}")
            model.eval()
            val_acc = classifier_accuracy(model, tokenizer, val, recipe.max_tokens)
        history.append(round(val_acc, 4))
        report(training, step / total, f"epoch {epoch + 1}: validation accuracy {val_acc:.4f} "
                                       f"({time.perf_counter() - t0:.0f} s)")
        if val_acc > best[0]:
            best = (val_acc, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch + 1)
        elif epoch + 1 - best[2] >= recipe.patience:
            break
    train_s = time.perf_counter() - t0
    model.load_state_dict(best[1])
    model.eval()
    def write(folder: Path) -> dict:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        reloaded = type(model).from_pretrained(folder)
        report(progress, 0.93, "measuring held-out accuracy and the TF-IDF baseline")
        test_acc = classifier_accuracy(reloaded, tokenizer, test, recipe.max_tokens)
        base = tfidf_baseline(train, test, val)
        metrics = {"accuracy": round(test_acc, 4), "validation_accuracy": round(best[0], 4),
                   "best_epoch": best[2], "validation_history": history, "test_size": len(test),
                   "baseline_tfidf_logreg": round(base["C=1"], 4),
                   "baseline_tfidf_logreg_tuned": round(base["tuned"], 4), "baseline_tuned_C": base["tuned_C"],
                   "train_sentences": len(fit), "extra_sentences": len(extra), "vocab_size_used": len(tokenizer),
                   "lexicon_words_initialised": lexicon_hits,
                   "parameters": param_count(reloaded), "train_seconds": round(train_s, 1)}
        quality = {"metric": "accuracy", "value": metrics["accuracy"], "dataset": "movie-sentiment",
                   "split": "test", "n": len(test), "baseline_tfidf_logreg": metrics["baseline_tfidf_logreg"],
                   "baseline_tfidf_logreg_tuned_C": metrics["baseline_tfidf_logreg_tuned"]}
        if extra:  # the same baseline trained on the same (augmented) sentences as the classifier
            same = tfidf_baseline(fit, test, val)
            metrics.update({"baseline_tfidf_logreg_same_data": round(same["C=1"], 4),
                            "baseline_tfidf_logreg_same_data_tuned": round(same["tuned"], 4),
                            "baseline_same_data_tuned_C": same["tuned_C"]})
            quality.update({"baseline_tfidf_logreg_same_data": metrics["baseline_tfidf_logreg_same_data"],
                            "baseline_tfidf_logreg_same_data_tuned_C": metrics["baseline_tfidf_logreg_same_data_tuned"]})
        data_note = "movie-sentiment (train)" + (f" + VADER ground truth {recipe.extra_data} (training only)"
                                                 if extra else "")
        write_card(folder, {
            "title": f"{TITLES[recipe.family]} (small, trained by the project)", "kind": "sequence-classifier",
            "origin": f"trained by the project on {data_note}: {recipe_command or 'core.lrp.recipes.train_sentiment'}",
            "quality": quality,
            "labels": {"0": "negative", "1": "positive"},
            "input": "tokenizer(text) (" + ({"word": "words and punctuation as written, ",
                                              "word-lower": "lowercased words and punctuation, ",
                                              "word-split": "lowercased words and punctuation runs, "}.get(
                                                  recipe.tokenizer, "") if word_level else "")
                     + "appends <|endoftext|>; the head reads that last position)",
            "recipe": recipe_command, "model_class": f"core.lrp:{type(model).__name__}",
            "training": {**asdict(recipe), **metrics}})
        return metrics
    metrics = save_trained(out, write)
    report(progress, 1.0, f"test accuracy {metrics['accuracy']}")
    return metrics
