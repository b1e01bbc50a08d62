"""The recipe of ``mamba-lm``: a small transformers ``MambaForCausalLM`` (and the BPE the sentiment classifier can
start from) trained on the paragraph corpora plus the movie-sentiment train sentences."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from core.data.tokenizers import EOS, fast_tokenizer, train_tokenizer
from core.lrp.recipes.fast import fast_mixers
from core.schedules import warmup_cosine
from core.zoo.construction import constructing
from core.progress import Progress, report, scaled
from core.zoo.training import adamw, param_count, save_trained, seed_everything, write_card

PARAGRAPH_CORPORA = ("wikipedia-paragraphs", "openwebtext-paragraphs", "pydoc-topics")


def paragraph_texts(split: str) -> list[str]:
    """Texts of the three paragraph corpora (``wikipedia``, ``openwebtext``, ``pydoc``) of one split."""
    import core.data as data

    return [r.text for name in PARAGRAPH_CORPORA for r in data.load(name, split)]


def no_decay(name: str, p) -> bool:
    """Mamba's state matrices and skip weights get no weight decay (nor does any norm)."""
    return name.endswith(("A_log", "A_b_log", ".D", ".D_b")) or "norm" in name


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


def lm_training_texts(recipe: LMRecipe) -> list[str]:
    import core.data as data

    texts = paragraph_texts("train")
    if recipe.with_sentiment_text:
        texts += [r.text for r in data.load("movie-sentiment", "train")]
    return texts


def mamba_config(recipe, vocab_size: int):
    """``MambaConfig`` from a recipe's ``hidden_size, num_layers, state_size, expand`` (bias-free)."""
    from transformers import MambaConfig

    return MambaConfig(vocab_size=vocab_size, hidden_size=recipe.hidden_size, num_hidden_layers=recipe.num_layers,
                       state_size=recipe.state_size, expand=recipe.expand, use_conv_bias=False, use_bias=False,
                       tie_word_embeddings=True, pad_token_id=0, eos_token_id=0, bos_token_id=0)


FAMILIES = ("mamba", "mamba2", "hybrid")  # the backbones a sentiment recipe can train (see backbone_config)


def backbone_config(recipe, vocab_size: int):
    """The backbone config of a recipe's ``family``: ``mamba`` (:func:`mamba_config`), ``mamba2`` (a ``Mamba2Config``)
    or ``hybrid`` (a ``GraniteMoeHybridConfig``: Mamba-2 layers and the attention layers at ``attention_layers``, each
    followed by a mixture of experts beside a shared MLP, no position embedding, as Granite 4.0-H). Bias-free (no conv,
    projection, attention or MLP bias), tied embeddings; Mamba-2 heads of ``head_dim`` channels, one group."""
    family = getattr(recipe, "family", "mamba")
    if family == "mamba":
        return mamba_config(recipe, vocab_size)
    heads = recipe.expand * recipe.hidden_size // recipe.head_dim
    ids = {"pad_token_id": 0, "eos_token_id": 0, "bos_token_id": 0, "tie_word_embeddings": True}
    if family == "mamba2":
        from transformers import Mamba2Config

        return Mamba2Config(vocab_size=vocab_size, hidden_size=recipe.hidden_size, num_hidden_layers=recipe.num_layers,
                            state_size=recipe.state_size, expand=recipe.expand, head_dim=recipe.head_dim,
                            num_heads=heads, n_groups=1, conv_kernel=4, use_conv_bias=False, use_bias=False,
                            chunk_size=recipe.chunk_size, **ids)
    if family == "hybrid":
        from transformers import GraniteMoeHybridConfig

        attention = {int(i) for i in str(recipe.attention_layers).split(",") if i.strip()}
        types = ["attention" if i in attention else "mamba" for i in range(recipe.num_layers)]
        head = recipe.hidden_size // recipe.attention_heads
        return GraniteMoeHybridConfig(
            vocab_size=vocab_size, hidden_size=recipe.hidden_size, num_hidden_layers=recipe.num_layers,
            layer_types=types,
            num_attention_heads=recipe.attention_heads, num_key_value_heads=recipe.kv_heads,
            attention_multiplier=head ** -0.5, intermediate_size=recipe.expert_size,
            shared_intermediate_size=recipe.mlp_size, num_local_experts=recipe.experts,
            num_experts_per_tok=recipe.experts_per_token, mamba_n_heads=heads, mamba_d_head=recipe.head_dim,
            mamba_d_state=recipe.state_size, mamba_n_groups=1, mamba_expand=recipe.expand, mamba_conv_bias=False,
            mamba_proj_bias=False, mamba_chunk_size=recipe.chunk_size, position_embedding_type="nope", **ids)
    raise ValueError(f"unknown family {family!r}; use one of {FAMILIES}")


def train_lm(recipe: LMRecipe, out, progress: Progress | None = None, recipe_command: str = "") -> dict:
    """Train the tokenizer and ``MambaForCausalLM`` on the paragraph corpora; save to ``out``."""
    from transformers import MambaForCausalLM

    from core.zoo.quality import token_perplexity

    t0 = time.perf_counter()
    gen = seed_everything(recipe.seed)
    texts = lm_training_texts(recipe)
    report(progress, 0.0, f"training a {recipe.vocab_size}-token BPE on {len(texts)} texts")
    tok = train_tokenizer(texts, recipe.vocab_size)
    eos = tok.token_to_id(EOS)
    stream = []
    for enc in tok.encode_batch(texts):
        stream.extend(enc.ids + [eos])
    stream = torch.tensor(stream, dtype=torch.long)
    with constructing():
        model = MambaForCausalLM(mamba_config(recipe, tok.get_vocab_size()))
    opt = adamw(model, recipe.lr, recipe.weight_decay, no_decay=no_decay)
    model.train()
    losses = []
    training = scaled(progress, 0.05, 0.9)  # the steps' share of the bar
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
                report(training, (step + 1) / recipe.steps, f"lm step {step + 1}/{recipe.steps} loss {recent:.3f}")
    train_s = time.perf_counter() - t0
    model.eval()
    def write(folder: Path) -> dict:
        model.save_pretrained(folder, safe_serialization=True)
        fast_tokenizer(tok).save_pretrained(folder)
        with constructing():
            reloaded = MambaForCausalLM.from_pretrained(folder).eval()
        report(progress, 0.92, "measuring held-out perplexity")
        ppl = token_perplexity(reloaded, fast_tokenizer(tok), paragraph_texts("test"), window=256,
                               max_tokens=recipe.eval_tokens)
        metrics = {"perplexity": round(ppl["perplexity"], 3), "eval_tokens": ppl["tokens"],
                   "train_loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 4),
                   "parameters": param_count(reloaded), "stream_tokens": len(stream),
                   "train_seconds": round(train_s, 1)}
        data_note = "wikipedia/openwebtext/pydoc paragraphs (train)" + (
            " + movie-sentiment train sentences" if recipe.with_sentiment_text else "")
        write_card(folder, {
            "title": "Mamba LM (small, trained by the project)", "kind": "causal-lm",
            "origin": f"trained by the project on {data_note}: {recipe_command or 'core.lrp.recipes.train_lm'}",
            "quality": {"metric": "perplexity", "value": metrics["perplexity"], "dataset":
                        "+".join(PARAGRAPH_CORPORA), "split": "test", "tokens": ppl["tokens"], "window": 256},
            "recipe": recipe_command, "model_class": "hf", "training": {**asdict(recipe), **metrics}})
        return metrics
    metrics = save_trained(out, write)
    report(progress, 1.0, f"perplexity {metrics['perplexity']}")
    return metrics


