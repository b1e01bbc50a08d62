"""The recipe of the embedded model ``mathneuro-tiny``: a small LLaMA-style causal LM trained here on a mix of
seeded arithmetic word problems (math) and seeded synthetic review sentiment (non-math).

``python -m core mathneuro train-demo [--quick] [--out DIR]`` runs :func:`train_demo`.

Data
----
- math: the ``arithmetic-words`` train split plus more problems from the same generator with other seeds
  (``core.data.synthetic.arithmetic_word_problems(n, seed=1..)``); any question of the validation or test
  split is dropped, so held-out questions are never seen verbatim (the arithmetic facts themselves recur:
  there are only ~8,500 distinct (a, op, b) facts).
- non-math: :func:`review_sentiment` multiple-choice records (``"Is this review positive or negative?"``,
  options negative / positive). Its test split is generated with a different seed and de-duplicated.

Training text is ``<bos>Question: ...\\nAnswer: <target><eos>``; the loss is on the answer tokens only.
The tokenizer is a byte-level BPE (``tokenizers``) trained on the training text with numbers split into single
digits, so the model learns column arithmetic rather than a table of facts, and decoding is exact.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from core.data.tokenizers import train_bpe
from core.schedules import warmup_cosine
from core.data.records import MultipleChoice
from core.paths import ASSETS_DIR
from core.zoo.training import adamw, save_trained

DEMO_NAME = "mathneuro-tiny"
DEMO_DIR = ASSETS_DIR / "models" / DEMO_NAME
SENTIMENT = "review-sentiment"
BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"

# ---- synthetic non-math task -------------------------------------------------------------------------------
_POS = ("wonderful", "superb", "moving", "delightful", "brilliant", "charming", "gripping", "beautiful", "witty",
        "fresh", "clever", "touching", "great", "excellent", "lovely", "stunning")
_NEG = ("boring", "dull", "clumsy", "tedious", "awful", "bland", "messy", "lifeless", "silly", "weak", "flat",
        "painful", "stale", "poor", "terrible", "forgettable")
_ASPECTS = ("plot", "acting", "music", "script", "camera work", "dialogue", "ending", "cast", "pacing", "soundtrack")
_FILMS = ("film", "movie", "story", "drama", "comedy", "thriller", "picture", "show")
_VERDICT = ("Overall the {f} is {a}.", "In the end the {f} feels {a}.", "All in all a {a} {f}.",
            "I found the {f} {a}.", "Simply put, the {f} is {a}.")


def review_sentiment(n: int, seed: int = 0) -> list[MultipleChoice]:
    """Seeded synthetic reviews: one or two aspect clauses of random polarity, then a verdict whose adjective
    alone decides the label (so the task needs the right word, not a bag of words). Balanced labels."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = i % 2 if seed % 2 == 0 else 1 - i % 2
        parts = []
        for _ in range(rng.randint(1, 2)):
            adj = rng.choice(_POS if rng.random() < 0.5 else _NEG)
            parts.append(f"the {rng.choice(_ASPECTS)} was {adj}")
        clause = " and ".join(parts) if rng.random() < 0.5 else " but ".join(parts)
        verdict = rng.choice(_VERDICT).format(f=rng.choice(_FILMS), a=rng.choice(_POS if label else _NEG))
        text = f"{clause[0].upper()}{clause[1:]}. {verdict}"
        out.append(MultipleChoice(question=f"Is this review positive or negative? {text}",
                                  choices=("negative", "positive"), answer=label, subject="sentiment", passage=None))
    return out


def sentiment_split(split: str, limit: int | None = None) -> list[MultipleChoice]:
    """Fixed splits of :func:`review_sentiment`: train (seed 0, 20,000), validation (seed 1), test (seed 2), 1,000
    each, with held-out reviews that also occur in train removed."""
    if split == "train":
        recs = review_sentiment(20000, seed=0)
    elif split in ("validation", "test"):
        train = {r.question for r in review_sentiment(20000, seed=0)}
        recs = [r for r in review_sentiment(1200, seed=1 if split == "validation" else 2) if r.question not in train]
        recs = recs[:1000]
    else:
        from core.errors import BadInputError
        raise BadInputError(f"Unknown split {split!r}.", fix="Use train, validation or test.")
    return recs[:limit] if limit else recs


def math_training_problems(n: int) -> list:
    """``arithmetic-words`` train split plus generated problems (seeds 1, 2, ...) up to ``n``, without any
    validation/test question."""
    from core.data import load
    from core.data.synthetic import arithmetic_word_problems
    held = {p.question for s in ("validation", "test") for p in load("arithmetic-words", s)}
    out = list(load("arithmetic-words", "train"))
    seed = 1
    while len(out) < n:
        out += [p for p in arithmetic_word_problems(3000, seed=seed) if p.question not in held]
        seed += 1
    return out[:n]


# ---- text, tokenizer -----------------------------------------------------------------------------------------
def example_text(record) -> tuple[str, str]:
    """(context, target) as the evaluation sees them: ``Question: q\\nAnswer:`` and ``" " + answer``."""
    if hasattr(record, "solution"):
        return f"Question: {record.question}\nAnswer:", " " + record.solution
    return f"Question: {record.question}\nAnswer:", " " + record.choices[record.answer]


def train_tokenizer(texts: list[str], vocab_size: int, digits: bool = False):
    """A byte-level BPE with ``<bos>``/``<eos>``/``<pad>``; encode adds ``<bos>`` (Llama-style).

    ``digits``: split numbers into single digits (else frequent numbers become single tokens)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    tok = train_bpe(texts, vocab_size, [PAD, BOS, EOS], split_digits=digits)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   model_max_length=256)


# ---- configuration --------------------------------------------------------------------------------------------
@dataclass
class DemoConfig:
    vocab_size: int = 1024       # BPE vocabulary
    hidden_size: int = 128       # model width
    layers: int = 4              # decoder layers
    heads: int = 4               # attention heads (head dim = hidden / heads)
    intermediate: int = 384      # SwiGLU MLP width
    math_train: int = 40000      # math training problems
    steps: int = 2200            # optimizer steps with warmup + cosine decay to 10% of lr
    polish_steps: int = 0        # then this many more at the final 10% lr (optional; 0 for the committed model)
    batch: int = 64              # sequences per step
    math_share: float = 0.75     # of each batch; the rest is sentiment (the easier task)
    lr: float = 3e-3             # peak learning rate (AdamW, warmup then cosine to 10%)
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    eval_n: int = 300            # held-out items per task for the card
    digits: bool = True          # numbers as single digits (True: the model learns to add digit by digit, 97% held
                                 # out) or as BPE tokens (False: it must memorise ~8,500 facts; 60% after 1,700 steps)
    threads: int = 1             # torch CPU threads (1 is faster than 2 on a shared, busy 2-core machine)


QUICK = dict(vocab_size=400, hidden_size=32, layers=2, heads=2, intermediate=64, math_train=600, steps=25,
             batch=16, eval_n=10, warmup=5, polish_steps=5)


def build_model(cfg: DemoConfig, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate,
                         num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                         max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    from core.zoo.construction import constructing

    with constructing(seed=cfg.seed):
        return LlamaForCausalLM(config)


def _encode_examples(tokenizer, records) -> list[tuple[list[int], int]]:
    """(ids with BOS ... EOS, index where the answer starts)."""
    out = []
    for r in records:
        ctx, tgt = example_text(r)
        c = tokenizer.encode(ctx, add_special_tokens=True)
        whole = tokenizer.encode(ctx + tgt, add_special_tokens=True)
        out.append((whole + [tokenizer.eos_token_id], len(c)))
    return out


def _batch(examples, idx, pad_id):
    width = max(len(examples[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    labels = torch.full((len(idx), width), -100, dtype=torch.long)
    for row, i in enumerate(idx):
        seq, start = examples[i]
        ids[row, :len(seq)] = torch.tensor(seq)
        labels[row, start:len(seq)] = torch.tensor(seq[start:])
    return ids, labels


def evaluate_demo(model, tokenizer, n: int = 300, split: str = "test") -> dict:
    """Math accuracy (greedy, exact final number) on ``arithmetic-words`` and sentiment accuracy on
    ``review-sentiment`` (``n`` items each of ``split``)."""
    from core.data import load
    from core.mathneuro.evaluation import math_accuracy, multiple_choice_accuracy
    math = math_accuracy(model, tokenizer, load("arithmetic-words", split)[:n], max_new_tokens=24)["accuracy"]
    senti = multiple_choice_accuracy(model, tokenizer, sentiment_split(split, n))["accuracy"]
    return {"math_accuracy": math, "sentiment_accuracy": senti}


def train_demo(out: Path | str | None = None, quick: bool = False, log: Callable[[str], None] = print,
               resume_from: Path | str | None = None, **overrides) -> dict:
    """Train the demo model and save it (config, safetensors, tokenizer, card.json) into ``out``.

    ``resume_from``: a folder saved after the first ``steps`` (its model and tokenizer); only the polish steps
    run (with a fresh AdamW state). Returns the card dict (with ``quality``) plus ``seconds`` of training.
    """
    cfg = DemoConfig(**{**(QUICK if quick else {}), **overrides})
    out = Path(out) if out is not None else DEMO_DIR
    rng = random.Random(cfg.seed)
    t0 = time.perf_counter()
    math_recs = math_training_problems(cfg.math_train)
    senti_recs = sentiment_split("train")[: max(cfg.math_train // 2, 300)]
    texts = ["".join(example_text(r)) for r in math_recs + senti_recs]
    previous = 0.0
    if resume_from is not None:
        from transformers import AutoTokenizer, LlamaForCausalLM
        tokenizer = AutoTokenizer.from_pretrained(resume_from)
        from core.zoo.construction import constructing

        with constructing():
            model = LlamaForCausalLM.from_pretrained(resume_from, dtype=torch.float32)
        previous = json.loads((Path(resume_from) / "card.json").read_text())["training"]["seconds"]
        rng = random.Random(cfg.seed + 1)
    else:
        tokenizer = train_tokenizer(texts, cfg.vocab_size, cfg.digits)
        model = build_model(cfg, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"tokenizer {len(tokenizer)} tokens; model {n_params / 1e6:.2f}M parameters; "
        f"{len(math_recs)} math + {len(senti_recs)} sentiment examples")
    math_ex, senti_ex = _encode_examples(tokenizer, math_recs), _encode_examples(tokenizer, senti_recs)
    opt = adamw(model, cfg.lr, cfg.weight_decay)

    def lr_at(step):
        return warmup_cosine(step, cfg.steps, cfg.lr, cfg.warmup)

    model.train()
    torch.set_num_threads(cfg.threads)
    losses = []
    half = cfg.batch - max(1, round(cfg.batch * cfg.math_share))
    total = cfg.steps + cfg.polish_steps
    for step in range(cfg.steps if resume_from is not None else 0, total):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        mi = [rng.randrange(len(math_ex)) for _ in range(cfg.batch - half)]
        si = [rng.randrange(len(senti_ex)) for _ in range(half)]
        ids_m, lab_m = _batch(math_ex, mi, tokenizer.pad_token_id)
        ids_s, lab_s = _batch(senti_ex, si, tokenizer.pad_token_id)
        width = max(ids_m.shape[1], ids_s.shape[1])
        ids = torch.cat([F.pad(ids_m, (0, width - ids_m.shape[1]), value=tokenizer.pad_token_id),
                         F.pad(ids_s, (0, width - ids_s.shape[1]), value=tokenizer.pad_token_id)])
        labels = torch.cat([F.pad(lab_m, (0, width - lab_m.shape[1]), value=-100),
                            F.pad(lab_s, (0, width - lab_s.shape[1]), value=-100)])
        out_ = model(input_ids=ids, labels=labels)
        loss = out_.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 100 == 0 or step == total - 1:
            with torch.no_grad():
                pred, gold = out_.logits[:, :-1].argmax(-1), labels[:, 1:]
                keep = gold != -100
                m_keep = keep[: len(mi)]
                tok_acc = float((pred[: len(mi)] == gold[: len(mi)])[m_keep].float().mean())
            log(f"step {step + 1}/{total} loss {loss.item():.4f} math answer-token acc {tok_acc:.3f} "
                f"lr {lr_at(step):.2e} {time.perf_counter() - t0:.0f}s")
    seconds = time.perf_counter() - t0 + previous
    model.eval()
    quality = evaluate_demo(model, tokenizer, cfg.eval_n, "test")
    log(f"held-out test: math {quality['math_accuracy']:.3f}, sentiment {quality['sentiment_accuracy']:.3f}")
    recipe = "python -m core mathneuro train-demo" + (" --quick" if quick else "")
    card = {"title": "MathNeuro tiny (arithmetic + review sentiment)", "kind": "causal-lm",
            "origin": "trained by the project (core/mathneuro/recipe.py)", "license": "project",
            "quality": {"metric": "math accuracy", "value": round(quality["math_accuracy"], 4),
                        "dataset": "arithmetic-words", "split": "test", "n": cfg.eval_n,
                        "math_accuracy": round(quality["math_accuracy"], 4),
                        "sentiment_accuracy": round(quality["sentiment_accuracy"], 4),
                        "sentiment_dataset": SENTIMENT},
            "recipe": recipe, "model_class": "hf",
            "training": {**asdict(cfg), "seconds": round(seconds, 1), "threads": torch.get_num_threads(),
                         "parameters": n_params}}
    if resume_from is not None:
        card["training"]["resumed_after_steps"] = cfg.steps  # polish phase run from a saved folder

    def write(tmp: Path):
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "card.json").write_text(json.dumps(card, indent=1))
    save_trained(out, write)
    log(f"saved to {out} ({seconds:.0f}s training)")
    return {**card, "folder": str(out), "seconds": round(seconds, 1), "loss_first": losses[0],
            "loss_last": sum(losses[-5:]) / len(losses[-5:])}
