"""Recipes that train the three embedded models the MambaLRP tab explains (committed under ``assets/models``).

==========================  ==============================================  ===================================
model                       class                                           data
==========================  ==============================================  ===================================
``mamba-lm``                transformers ``MambaForCausalLM``                paragraph corpora (train) + the
                                                                            movie-sentiment train sentences
``mamba-sentiment``         :class:`core.lrp.MambaSequenceClassifier`        movie-sentiment train + the other
                                                                            VADER ground-truth sentences (word
                                                                            level, VADER lexicon prior)
``vision-mamba-mnist``      :class:`core.lrp.VisionMamba`                    mnist-5k
==========================  ==============================================  ===================================

Every recipe is a function ``train_*(config, out, progress=None) -> metrics``: seeded (same config and
seed, same weights on the same machine and thread count), it writes ``config.json``, ``model.safetensors``,
tokenizer files and ``card.json`` into ``out`` and returns the held-out figures it measured (on the
*saved* model reloaded from disk, with the ordinary forward). ``progress(fraction, message)`` is called
along the way; raising from it cancels the run and leaves ``out`` untouched (it is written at the end).

All three models are bias-free where a bias would absorb relevance (no conv bias, no classifier-head
bias; the Vision Mamba head bias is held at zero), so MambaLRP's relevances sum to the explained logit.

Training uses :func:`fast_mixers`: the same mixer computations with a selective scan whose backward is
written by hand (``kernels.selective_scan.selective_scan_train``), which keeps only ``(B, D, N)`` tensors per step instead of
materialising ``(B, D, L, N)`` ones through autograd (several times faster on a small CPU). Its values
agree with the reference forward to float rounding; all reported figures use the reference forward.
"""
from __future__ import annotations

import contextlib
import math
import random
import shutil
import tempfile
import time
import types
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from core.data.bpe import train_bpe
from core.schedules import warmup_cosine
from core.errors import BadInputError
from kernels.selective_scan import selective_scan_train

Progress = Callable[[float, str], None] | None
EOS = "<|endoftext|>"
PARAGRAPH_CORPORA = ("wikipedia-paragraphs", "openwebtext-paragraphs", "pydoc-topics")


def _branch(x, z, conv, x_proj, dt_proj, A_log, D):
    """``core.lrp.mixer.ssm_branch`` without rules, on ``kernels.selective_scan.selective_scan_train``."""
    from core.lrp.mixer import causal_conv

    u = F.silu(causal_conv(x, conv)).to(x.dtype)
    n, rank = A_log.shape[-1], dt_proj.weight.shape[1]
    time_step, B, C = torch.split(x_proj(u.transpose(1, 2)), [rank, n, n], dim=-1)
    time_step = dt_proj.weight @ time_step.transpose(1, 2)
    y = selective_scan_train(u, time_step, -torch.exp(A_log.float()), B.transpose(1, 2), C.transpose(1, 2), D,
                             dt_proj.bias.float(), delta_softplus=True)
    return y * F.silu(z)


def _fast_mamba_mixer(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
    if attention_mask is not None:
        hidden_states = hidden_states * attention_mask[..., None].to(hidden_states.dtype)
    x, z = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)
    s = _branch(x, z, self.conv1d, self.x_proj, self.dt_proj, self.A_log, self.D)
    return self.out_proj(s.transpose(1, 2).to(hidden_states.dtype))


def _fast_bimamba_mixer(self, hidden_states):
    x, z = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)
    fwd = _branch(x, z, self.conv1d, self.x_proj, self.dt_proj, self.A_log, self.D)
    bwd = _branch(x.flip(-1), z.flip(-1), self.conv1d_b, self.x_proj_b, self.dt_proj_b, self.A_b_log,
                  self.D_b).flip(-1)
    return self.out_proj(((fwd + bwd) / 2).transpose(1, 2).to(hidden_states.dtype))


@contextlib.contextmanager
def fast_mixers(model: nn.Module):
    """Within the block, every Mamba mixer of ``model`` runs on ``selective_scan_train`` (instance-level patch)."""
    from transformers.models.mamba.modeling_mamba import MambaMixer

    from core.lrp.models import BiMambaMixer

    patched = []
    for module in model.modules():
        if isinstance(module, MambaMixer):
            module.forward = types.MethodType(_fast_mamba_mixer, module)
        elif isinstance(module, BiMambaMixer):
            module.forward = types.MethodType(_fast_bimamba_mixer, module)
        else:
            continue
        patched.append(module)
    try:
        yield model
    finally:
        for module in patched:
            del module.forward


# =================================================================================================
# shared helpers
# =================================================================================================
def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _report(progress: Progress, fraction: float, message: str) -> None:
    if progress is not None:
        progress(min(max(fraction, 0.0), 1.0), message)


def _optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = p.dim() < 2 or name.endswith(("A_log", "A_b_log", ".D", ".D_b")) or "norm" in name
        (plain if no_decay else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98))


def _param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@contextlib.contextmanager
def _staging(out: Path):
    """Write into a temporary sibling folder, then swap it in (an interrupted run leaves ``out`` as it was)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_card(folder: Path, card: dict) -> None:
    from core.zoo.card import write_card_file

    write_card_file(folder, {"license": "project", **card})


# =================================================================================================
# tokenizer
# =================================================================================================
def paragraph_texts(split: str) -> list[str]:
    """Texts of the three paragraph corpora (``wikipedia``, ``openwebtext``, ``pydoc``) of one split."""
    import core.data as data

    return [r.text for name in PARAGRAPH_CORPORA for r in data.load(name, split)]


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE (``tokenizers``) with one special token ``<|endoftext|>`` (id 0)."""
    return train_bpe(texts, vocab_size, [EOS], add_prefix_space=True, min_frequency=2)


def fast_tokenizer(tok, append_eos: bool = False, unk_token: str = EOS):
    """``PreTrainedTokenizerFast`` around a ``tokenizers.Tokenizer``; ``append_eos`` ends every input with EOS."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(tok.to_str())
    if append_eos:
        eos_id = tok.token_to_id(EOS)
        tok.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}",
                                                           special_tokens=[(EOS, eos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=unk_token,
                                   pad_token=EOS, model_max_length=4096)


# =================================================================================================
# mamba-lm: a small MambaForCausalLM
# =================================================================================================
@dataclass(frozen=True)
class LMRecipe:
    """The language model (and the tokenizer and backbone the sentiment classifier starts from)."""

    vocab_size: int = 4096          # BPE vocabulary (byte-level)
    hidden_size: int = 128
    num_layers: int = 4
    state_size: int = 8
    expand: int = 2
    seq_len: int = 64               # training window, tokens
    batch_size: int = 16
    steps: int = 400                # optimizer steps (~410k tokens seen)
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    with_sentiment_text: bool = True  # add the movie-sentiment *train* sentences to the LM text
    eval_tokens: int = 8192         # held-out tokens for the perplexity on the card
    seed: int = 0

    @classmethod
    def quick(cls, seed: int = 0) -> "LMRecipe":
        return cls(vocab_size=400, hidden_size=16, num_layers=1, state_size=4, seq_len=16, batch_size=4,
                   steps=3, warmup=1, eval_tokens=256, seed=seed)


def _lm_training_texts(recipe: LMRecipe) -> list[str]:
    import core.data as data

    texts = paragraph_texts("train")
    if recipe.with_sentiment_text:
        texts += [r.text for r in data.load("movie-sentiment", "train")]
    return texts


def _mamba_config(recipe, vocab_size: int):
    """``MambaConfig`` from a recipe's ``hidden_size, num_layers, state_size, expand`` (bias-free)."""
    from transformers import MambaConfig

    return MambaConfig(vocab_size=vocab_size, hidden_size=recipe.hidden_size, num_hidden_layers=recipe.num_layers,
                       state_size=recipe.state_size, expand=recipe.expand, use_conv_bias=False, use_bias=False,
                       tie_word_embeddings=True, pad_token_id=0, eos_token_id=0, bos_token_id=0)


def train_lm(recipe: LMRecipe, out, progress: Progress = None, recipe_command: str = "") -> dict:
    """Train the tokenizer and ``MambaForCausalLM`` on the paragraph corpora; save to ``out``."""
    from transformers import MambaForCausalLM

    from core.zoo.quality import token_perplexity

    t0 = time.perf_counter()
    gen = seed_everything(recipe.seed)
    texts = _lm_training_texts(recipe)
    _report(progress, 0.0, f"training a {recipe.vocab_size}-token BPE on {len(texts)} texts")
    tok = train_tokenizer(texts, recipe.vocab_size)
    eos = tok.token_to_id(EOS)
    stream = []
    for enc in tok.encode_batch(texts):
        stream.extend(enc.ids + [eos])
    stream = torch.tensor(stream, dtype=torch.long)
    model = MambaForCausalLM(_mamba_config(recipe, tok.get_vocab_size()))
    opt = _optimizer(model, recipe.lr, recipe.weight_decay)
    model.train()
    losses = []
    with fast_mixers(model):
        for step in range(recipe.steps):
            starts = torch.randint(0, len(stream) - recipe.seq_len - 1, (recipe.batch_size,), generator=gen)
            batch = torch.stack([stream[s:s + recipe.seq_len + 1] for s in starts.tolist()])
            for g in opt.param_groups:
                g["lr"] = warmup_cosine(step, recipe.steps, recipe.lr, recipe.warmup)
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            if step % 20 == 0 or step == recipe.steps - 1:
                recent = sum(losses[-20:]) / len(losses[-20:])
                _report(progress, 0.05 + 0.85 * (step + 1) / recipe.steps,
                        f"lm step {step + 1}/{recipe.steps} loss {recent:.3f}")
    train_s = time.perf_counter() - t0
    model.eval()
    with _staging(out) as folder:
        model.save_pretrained(folder, safe_serialization=True)
        fast_tokenizer(tok).save_pretrained(folder)
        reloaded = MambaForCausalLM.from_pretrained(folder).eval()
        _report(progress, 0.92, "measuring held-out perplexity")
        ppl = token_perplexity(reloaded, fast_tokenizer(tok), paragraph_texts("test"), window=256,
                               max_tokens=recipe.eval_tokens)
        metrics = {"perplexity": round(ppl["perplexity"], 3), "eval_tokens": ppl["tokens"],
                   "train_loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 4),
                   "parameters": _param_count(reloaded), "stream_tokens": len(stream),
                   "train_seconds": round(train_s, 1)}
        data_note = "wikipedia/openwebtext/pydoc paragraphs (train)" + (
            " + movie-sentiment train sentences" if recipe.with_sentiment_text else "")
        _write_card(folder, {
            "title": "Mamba LM (small, trained by the project)", "kind": "causal-lm",
            "origin": f"trained by the project on {data_note}: {recipe_command or 'core.lrp.recipes.train_lm'}",
            "quality": {"metric": "perplexity", "value": metrics["perplexity"], "dataset":
                        "+".join(PARAGRAPH_CORPORA), "split": "test", "tokens": ppl["tokens"], "window": 256},
            "recipe": recipe_command, "model_class": "hf", "training": {**asdict(recipe), **metrics}})
    _report(progress, 1.0, f"perplexity {metrics['perplexity']}")
    return metrics


# =================================================================================================
# mamba-sentiment: MambaSequenceClassifier on movie-sentiment
# =================================================================================================
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

    @classmethod
    def quick(cls, seed: int = 0) -> "SentimentRecipe":
        return cls(vocab_size=400, hidden_size=16, num_layers=1, state_size=4, epochs=1, batch_size=64, warmup=1,
                   extra_data="", train_limit=256, eval_limit=100, seed=seed)


UNK = "<unk>"
VADER_GROUND_TRUTH = {"amazon": "amazonReviewSnippets_GroundTruth.txt", "nyt": "nytEditorialSnippets_GroundTruth.txt",
                      "tweets": "tweets_GroundTruth.txt"}


def _vader_text(member: str) -> str:
    """One file of the VADER paper's archive (``hutto_ICWSM_2014/<member>``) as text."""
    from core.data.artifacts import ARTIFACTS, read_member
    from core.data.sources import _VADER_ARCHIVE

    return read_member(ARTIFACTS["vader"], f"{_VADER_ARCHIVE}!hutto_ICWSM_2014/{member}").decode("utf-8", "replace")


def extra_sentiment_records(names: str) -> list:
    """The other VADER ground-truth sentences (``"amazon,nyt,tweets"``) as ``TextLabel``; neutral (0) dropped."""
    from core.data.records import TextLabel

    records = []
    for name in [n.strip() for n in names.split(",") if n.strip()]:
        if name not in VADER_GROUND_TRUTH:
            raise BadInputError(f"unknown extra sentiment data {name!r}.", fix=f"use {', '.join(VADER_GROUND_TRUTH)}.")
        for line in _vader_text(VADER_GROUND_TRUTH[name]).splitlines():
            parts = line.strip("\r\n").split("\t")
            if len(parts) < 3 or float(parts[1]) == 0:
                continue
            records.append(TextLabel(text=parts[2].strip(), label=int(float(parts[1]) > 0), score=float(parts[1])))
    return records


def vader_lexicon() -> dict[str, float]:
    """``word -> mean valence`` in [-4, 4] from ``vader_sentiment_lexicon.txt``."""
    lexicon = {}
    for line in _vader_text("vader_sentiment_lexicon.txt").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2:
            with contextlib.suppress(ValueError):
                lexicon[parts[0].strip()] = float(parts[1])
    return lexicon


def train_word_tokenizer(texts: list[str], min_count: int = 2, extra_words=(), lowercase: bool = False,
                         split: bool = False):
    """A word-level ``tokenizers.Tokenizer``: ``<|endoftext|>`` (id 0), ``<unk>`` (id 1), the words of ``texts``
    seen ``min_count`` times or more (most frequent first), then the ``extra_words`` not in yet (sorted).

    By default words keep their surface (GPT-2 style byte-level pieces: ``"Ġgood"`` is `` good``, case kept), so
    the decoded pieces of a known sentence join back into it; ``lowercase`` lowercases first (the pieces then
    join back into the lowercased sentence). ``split``: NFKC + lowercase, split into runs of letters/digits and of
    punctuation, spaces dropped (one token per word whatever its position; show the text through the offsets).
    """
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    def make(vocab):
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
        if split:
            tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
            tok.pre_tokenizer = pre_tokenizers.Whitespace()
            return tok
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        return tok

    probe = make({EOS: 0, UNK: 1})

    def words(text):
        text = probe.normalizer.normalize_str(text) if probe.normalizer is not None else text
        return [w for w, _ in probe.pre_tokenizer.pre_tokenize_str(text)]

    counts = Counter(w for t in texts for w in words(t))
    vocab = {EOS: 0, UNK: 1}
    for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if c >= min_count and w not in vocab:
            vocab[w] = len(vocab)
    for w in sorted(extra_words):
        pieces = words(w)
        if len(pieces) == 1 and pieces[0] not in vocab:
            vocab[pieces[0]] = len(vocab)
    tok = make(vocab)
    tok.add_special_tokens([EOS])
    return tok


def word_form(token: str) -> str:
    """The lowercased word of a word-level token (``"ĠGood"`` -> ``"good"``)."""
    return token.lstrip("Ġ").lower()


def _encode_records(tokenizer, records, max_tokens: int) -> list[tuple[list[int], int, float]]:
    out = []
    for r in records:
        ids = tokenizer(r.text)["input_ids"]
        if len(ids) > max_tokens:
            ids = ids[:max_tokens - 1] + ids[-1:]
        out.append((ids, int(r.label), float(getattr(r, "score", 0.0) or 0.0)))
    return out


def _length_batches(items: list, batch_size: int, gen: torch.Generator | None) -> list[list]:
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
    items = _encode_records(tokenizer, records, max_tokens)
    correct = 0
    for batch in _length_batches(items, batch_size, None):
        ids = torch.tensor([b[0] for b in batch])
        pred = model(input_ids=ids).argmax(-1)
        correct += int((pred == torch.tensor([b[1] for b in batch])).sum())
    return correct / max(1, len(items))


def tfidf_baseline(train, test, validation=None) -> dict:
    """TF-IDF (unigrams, sublinear tf) + logistic regression: default C=1, and C picked on validation."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(sublinear_tf=True)
    X = vec.fit_transform([r.text for r in train])
    y = [r.label for r in train]

    def acc(clf, recs):
        return float((clf.predict(vec.transform([r.text for r in recs])) == [r.label for r in recs]).mean())

    result = {"C=1": acc(LogisticRegression(C=1.0, max_iter=2000).fit(X, y), test)}
    if validation is not None:
        fits = {c: LogisticRegression(C=c, max_iter=2000).fit(X, y) for c in (0.3, 1.0, 3.0, 10.0)}
        best = max(fits, key=lambda c: acc(fits[c], validation))
        result.update({"tuned_C": best, "tuned": acc(fits[best], test)})
    return result


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


def train_sentiment(recipe: SentimentRecipe, out, progress: Progress = None, recipe_command: str = "") -> dict:
    """Train :class:`MambaSequenceClassifier` on movie-sentiment (+ extra data); keep the best validation epoch."""
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
        lm = MambaForCausalLM.from_pretrained(init)
        model = MambaSequenceClassifier(lm.config, num_labels=2, head_bias=False)
        model.backbone.load_state_dict(lm.backbone.state_dict())
        del lm
    elif word_level:
        _report(progress, 0.0, "building the word-level vocabulary")
        tok = train_word_tokenizer([r.text for r in fit], recipe.min_count,
                                   lexicon if recipe.lexicon_vocab else (), recipe.tokenizer == "word-lower",
                                   recipe.tokenizer == "word-split")
        model = MambaSequenceClassifier(_mamba_config(recipe, tok.get_vocab_size()), 2, head_bias=False)
    else:
        _report(progress, 0.0, "training the tokenizer")
        tok = train_tokenizer(_lm_training_texts(LMRecipe()), recipe.vocab_size)
        model = MambaSequenceClassifier(_mamba_config(recipe, tok.get_vocab_size()), 2, head_bias=False)
    with torch.no_grad():
        model.head.weight.normal_(0, 0.02)
    tokenizer = fast_tokenizer(tok, append_eos=True, unk_token=UNK if word_level else EOS)
    embeddings = model.get_input_embeddings()
    if word_level:
        _share_variants(embeddings, tokenizer)
    lexicon_hits = _lexicon_init(embeddings, tokenizer, lexicon, recipe.lexicon_channels,
                                 recipe.lexicon_scale) if word_level and recipe.lexicon_channels else 0
    items = _encode_records(tokenizer, fit, recipe.max_tokens)
    unk_id = tokenizer.convert_tokens_to_ids(UNK) if word_level else None
    opt = _optimizer(model, recipe.lr, recipe.weight_decay)
    steps_per_epoch = len(_length_batches(items, recipe.batch_size, torch.Generator().manual_seed(0)))
    total = steps_per_epoch * recipe.epochs
    best = (-1.0, None, -1)
    history, step = [], 0
    for epoch in range(recipe.epochs):
        model.train()
        with fast_mixers(model):
            for batch in _length_batches(items, recipe.batch_size, gen):
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
                    _report(progress, 0.9 * step / total, f"epoch {epoch + 1} step {step}/{total} loss {float(loss.detach()):.3f}")
            model.eval()
            val_acc = classifier_accuracy(model, tokenizer, val, recipe.max_tokens)
        history.append(round(val_acc, 4))
        _report(progress, 0.9 * step / total, f"epoch {epoch + 1}: validation accuracy {val_acc:.4f} "
                                              f"({time.perf_counter() - t0:.0f} s)")
        if val_acc > best[0]:
            best = (val_acc, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch + 1)
        elif epoch + 1 - best[2] >= recipe.patience:
            break
    train_s = time.perf_counter() - t0
    model.load_state_dict(best[1])
    model.eval()
    with _staging(out) as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        reloaded = MambaSequenceClassifier.from_pretrained(folder)
        _report(progress, 0.93, "measuring held-out accuracy and the TF-IDF baseline")
        test_acc = classifier_accuracy(reloaded, tokenizer, test, recipe.max_tokens)
        base = tfidf_baseline(train, test, val)
        metrics = {"accuracy": round(test_acc, 4), "validation_accuracy": round(best[0], 4),
                   "best_epoch": best[2], "validation_history": history, "test_size": len(test),
                   "baseline_tfidf_logreg": round(base["C=1"], 4),
                   "baseline_tfidf_logreg_tuned": round(base["tuned"], 4), "baseline_tuned_C": base["tuned_C"],
                   "train_sentences": len(fit), "extra_sentences": len(extra), "vocab_size_used": len(tokenizer),
                   "lexicon_words_initialised": lexicon_hits,
                   "parameters": _param_count(reloaded), "train_seconds": round(train_s, 1)}
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
        _write_card(folder, {
            "title": "Mamba sentiment classifier (small, trained by the project)", "kind": "sequence-classifier",
            "origin": f"trained by the project on {data_note}: {recipe_command or 'core.lrp.recipes.train_sentiment'}",
            "quality": quality,
            "labels": {"0": "negative", "1": "positive"},
            "input": "tokenizer(text) (" + ({"word": "words and punctuation as written, ",
                                              "word-lower": "lowercased words and punctuation, ",
                                              "word-split": "lowercased words and punctuation runs, "}.get(
                                                  recipe.tokenizer, "") if word_level else "")
                     + "appends <|endoftext|>; the head reads that last position)",
            "recipe": recipe_command, "model_class": "core.lrp:MambaSequenceClassifier",
            "training": {**asdict(recipe), **metrics}})
    _report(progress, 1.0, f"test accuracy {metrics['accuracy']}")
    return metrics


# =================================================================================================
# vision-mamba-mnist
# =================================================================================================
@dataclass(frozen=True)
class VisionRecipe:
    """A :class:`VisionMamba` on mnist-5k, inputs ``image / 255`` as ``(1, 1, 28, 28)``."""

    patch_size: int = 7             # a 4 x 4 grid of patches (the relevance map's resolution)
    hidden_size: int = 64
    num_layers: int = 4
    state_size: int = 8
    epochs: int = 12
    batch_size: int = 50
    lr: float = 3e-3
    warmup: int = 40
    weight_decay: float = 0.05
    max_shift: int = 2              # random translation, pixels (augmentation)
    train_limit: int = 0            # use only the first N training images (0 = all; the quick run)
    eval_limit: int = 0             # evaluate on the first N validation / test images (0 = all)
    seed: int = 0

    @classmethod
    def quick(cls, seed: int = 0) -> "VisionRecipe":
        return cls(patch_size=7, hidden_size=16, num_layers=1, state_size=4, epochs=1, batch_size=100, warmup=1,
                   train_limit=500, eval_limit=100, seed=seed)


def mnist_tensors(split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, 1, 28, 28)`` float pixels in [0, 1] and ``(N,)`` labels of a mnist-5k split."""
    import numpy as np

    import core.data as data

    recs = data.load("mnist-5k", split, limit=limit)
    x = torch.from_numpy(np.stack([np.asarray(r.image, dtype=np.float32) for r in recs]) / 255.0)
    return x[:, None], torch.tensor([int(r.label) for r in recs])


def _shift(x: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Random integer translations (zero fill) of a batch ``(B, 1, S, S)``."""
    if max_shift <= 0:
        return x
    b, _, s, _ = x.shape
    padded = F.pad(x, (max_shift,) * 4)
    dx = torch.randint(0, 2 * max_shift + 1, (b,), generator=gen).tolist()
    dy = torch.randint(0, 2 * max_shift + 1, (b,), generator=gen).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + s, dx[i]:dx[i] + s] for i in range(b)])


@torch.no_grad()
def image_accuracy(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 100) -> float:
    correct = sum(int((model(x[i:i + batch_size]).argmax(-1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    return correct / max(1, len(x))


def train_vision(recipe: VisionRecipe, out, progress: Progress = None, recipe_command: str = "") -> dict:
    """Train :class:`VisionMamba` on mnist-5k (train split), keep the best validation epoch, save to ``out``."""
    from core.lrp.models import VisionMamba, VisionMambaConfig

    t0 = time.perf_counter()
    gen = seed_everything(recipe.seed)
    x_train, y_train = mnist_tensors("train", recipe.train_limit or None)
    x_val, y_val = mnist_tensors("validation", recipe.eval_limit or None)
    cfg = VisionMambaConfig(image_size=28, patch_size=recipe.patch_size, in_channels=1,
                            hidden_size=recipe.hidden_size, num_layers=recipe.num_layers,
                            state_size=recipe.state_size, num_classes=10, use_conv_bias=False)
    model = VisionMamba(cfg)
    with torch.no_grad():
        model.head.bias.zero_()
    model.head.bias.requires_grad_(False)  # held at zero: a bias would absorb relevance
    opt = _optimizer(model, recipe.lr, recipe.weight_decay)
    steps_per_epoch = math.ceil(len(x_train) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    best, history, step = (-1.0, None, 0), [], 0
    for epoch in range(recipe.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=gen)
        with fast_mixers(model):
            for i in range(0, len(order), recipe.batch_size):
                idx = order[i:i + recipe.batch_size]
                xb = _shift(x_train[idx], recipe.max_shift, gen)
                for g in opt.param_groups:
                    g["lr"] = warmup_cosine(step, total, recipe.lr, recipe.warmup)
                loss = F.cross_entropy(model(xb), y_train[idx], label_smoothing=0.05)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                step += 1
                if step % 20 == 0:
                    _report(progress, 0.9 * step / total, f"epoch {epoch + 1} step {step}/{total} loss {float(loss.detach()):.3f}")
            model.eval()
            val_acc = image_accuracy(model, x_val, y_val)
        history.append(round(val_acc, 4))
        _report(progress, 0.9 * step / total, f"epoch {epoch + 1}: validation accuracy {val_acc:.4f}")
        if val_acc >= best[0]:
            best = (val_acc, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch + 1)
    train_s = time.perf_counter() - t0
    model.load_state_dict(best[1])
    with _staging(out) as folder:
        model.save_pretrained(folder)
        reloaded = VisionMamba.from_pretrained(folder)
        x_test, y_test = mnist_tensors("test", recipe.eval_limit or None)
        test_acc = image_accuracy(reloaded, x_test, y_test)
        metrics = {"accuracy": round(test_acc, 4), "validation_accuracy": round(best[0], 4), "best_epoch": best[2],
                   "validation_history": history, "test_size": len(x_test), "parameters": _param_count(reloaded),
                   "train_seconds": round(train_s, 1)}
        _write_card(folder, {
            "title": "Vision Mamba on MNIST-5k (small, trained by the project)", "kind": "image-classifier",
            "origin": f"trained by the project: {recipe_command or 'core.lrp.recipes.train_vision'}",
            "quality": {"metric": "accuracy", "value": metrics["accuracy"], "dataset": "mnist-5k", "split": "test",
                        "n": len(x_test)},
            "input": "pixel_values = image / 255.0 as float32, shape (1, 1, 28, 28)",
            "recipe": recipe_command, "model_class": "core.lrp:VisionMamba",
            "training": {**asdict(recipe), **metrics}})
    _report(progress, 1.0, f"test accuracy {metrics['accuracy']}")
    return metrics


RECIPES = {
    "lm": (LMRecipe, train_lm, "mamba-lm"),
    "sentiment": (SentimentRecipe, train_sentiment, "mamba-sentiment"),
    "vision": (VisionRecipe, train_vision, "vision-mamba-mnist"),
}


def recipe_for(name: str, seed: int = 0, quick: bool = False, **overrides):
    """The recipe config of ``name`` (``lm``, ``sentiment``, ``vision``), its quick variant with ``quick``."""
    if name not in RECIPES:
        raise BadInputError(f"unknown recipe {name!r}.", fix=f"use one of {', '.join(RECIPES)}.")
    cls = RECIPES[name][0]
    cfg = cls.quick(seed) if quick else cls(seed=seed)
    return replace(cfg, **overrides) if overrides else cfg
