"""Evaluation of a causal language model on math and non-math records.

- :func:`math_accuracy`: exact match of the final number, greedy generation from a few-shot
  prompt, stopped at a stop sequence (records with ``.question``, ``.answer``, ``.solution``).
- :func:`multiple_choice_accuracy`: the option with the highest log-likelihood after the prompt
  (records with ``.question``, ``.choices``, ``.answer`` index and optional ``.passage``).
- :func:`teacher_forced_loss`: mean token loss of the worked solution (math), of the correct
  option (multiple choice) or of a plain text.

The tokenizer needs only ``encode(text, add_special_tokens=...) -> list[int]``, ``decode(ids) -> str``
and optional ``bos_token_id`` / ``eos_token_id`` (any Hugging Face tokenizer). Texts start with BOS
exactly when the tokenizer itself adds one (Llama-style); no other special tokens are added.
Every function returns plain data (dicts and lists) and puts every module's train/eval flag back.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import BadInputError
from core.mathneuro.scoring import context_length, eval_mode, model_device
from core.progress import Progress, item_progress

DEFAULT_STOP = ("\n\n", "\nQuestion:")
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


# ----------------------------------------------------------------------------------------------
# Prompts and answers
# ----------------------------------------------------------------------------------------------
def math_prompt(question: str, shots: Sequence = ()) -> str:
    """Few-shot prompt: ``Question: ...\\nAnswer: <worked solution>`` blocks, blank-line separated."""
    blocks = [f"Question: {s.question}\nAnswer: {s.solution}" for s in shots]
    blocks.append(f"Question: {question}\nAnswer:")
    return "\n\n".join(blocks)


def choice_prompt(record) -> str:
    """``[passage\\n]Question: ...\\nAnswer:``; each option is scored as the continuation ``" " + option``."""
    passage = getattr(record, "passage", None)
    head = f"{passage}\n" if passage else ""
    return f"{head}Question: {record.question}\nAnswer:"


def extract_answer(text: str) -> str | None:
    """The final number of a generated solution: the one after ``####`` if present, else the last one.

    Commas and ``$`` are dropped; None when there is no number.
    """
    tail = text.split("####", 1)[1] if "####" in text else text
    found = _NUMBER.findall(tail)
    if not found:
        return None
    number = found[0] if "####" in text else found[-1]
    return number.replace(",", "").replace("$", "")


def same_number(predicted: str | None, answer: str) -> bool:
    """Exact numeric match (``"18" == "18.0"``, ``"1,000" == "1000"``)."""
    if predicted is None:
        return False
    try:
        return Decimal(predicted.replace(",", "")) == Decimal(str(answer).replace(",", "").replace("$", ""))
    except InvalidOperation:
        return False


# ----------------------------------------------------------------------------------------------
# Model plumbing
# ----------------------------------------------------------------------------------------------
def adds_bos(tokenizer) -> bool:
    """True when the tokenizer itself starts an encoded text with its BOS token (Llama-style)."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return False
    try:
        probe = list(tokenizer.encode("a", add_special_tokens=True))
    except TypeError:
        return False
    return bool(probe) and probe[0] == bos_id


def _encode(tokenizer, text: str, bos: bool) -> list[int]:
    """Token ids of ``text``, after BOS when ``bos`` and the tokenizer uses one (no other special tokens)."""
    ids = list(tokenizer.encode(text, add_special_tokens=False)) if text else []
    return ([tokenizer.bos_token_id] if bos and adds_bos(tokenizer) else []) + ids


def _encode_pair(tokenizer, context: str, target: str) -> tuple[list[int], list[int]]:
    """Context ids (with BOS) and target ids, split from the joint encoding when the context's ids are a
    prefix of it (so word-boundary merges match what the model sees), else encoded apart."""
    ctx = _encode(tokenizer, context, bos=True)
    whole = _encode(tokenizer, context + target, bos=True)
    if whole[:len(ctx)] == ctx and len(whole) > len(ctx):
        return ctx, whole[len(ctx):]
    return ctx, list(tokenizer.encode(target, add_special_tokens=False))


def _is_hf(model: nn.Module) -> bool:
    return getattr(model, "config", None) is not None and hasattr(model, "generate")


def _logits(model: nn.Module, ids: torch.Tensor, past=None):
    """(B, T, V) logits and the new cache (None for plain modules)."""
    if _is_hf(model):
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        return out.logits, getattr(out, "past_key_values", None)  # None (Mamba keeps its state elsewhere): no cache
    out = model(ids)
    return (out.logits if hasattr(out, "logits") else out), None


def _check_length(model: nn.Module, n_tokens: int, what: str) -> None:
    limit = context_length(model)
    if limit is not None and n_tokens > limit:
        raise BadInputError(f"{what} has {n_tokens} tokens, more than the model's context of {limit}.",
                            fix="Use fewer few-shot examples or shorter texts.")


def _check_records(records, what: str) -> list:
    records = list(records) if records is not None else []
    if not records:
        raise BadInputError(f"The {what} dataset is empty.", fix=f"Give at least one {what} record.")
    return records


def greedy_generate(model: nn.Module, tokenizer, prompt: str, max_new_tokens: int = 256,
                    stop: Sequence[str] = DEFAULT_STOP) -> str:
    """Greedy continuation of ``prompt``, cut before the first stop sequence or at EOS.

    Generation also ends at the model's context length.
    """
    device = model_device(model)
    ids = _encode(tokenizer, prompt, bos=True)
    if not ids:
        raise BadInputError("The prompt is empty.")
    limit = context_length(model)
    if limit is not None and len(ids) >= limit:
        raise BadInputError(f"The prompt has {len(ids)} tokens, which leaves no room in the model's context of "
                            f"{limit}.", fix="Use fewer few-shot examples or a shorter question.")
    budget = max_new_tokens if limit is None else min(max_new_tokens, limit - len(ids))
    eos = getattr(tokenizer, "eos_token_id", None)
    generated: list[int] = []
    text = ""
    with torch.no_grad(), eval_mode(model):
        seq = torch.tensor([ids], dtype=torch.long, device=device)
        past = None
        step_input = seq
        for _ in range(budget):
            logits, past = _logits(model, step_input, past)
            token = int(logits[0, -1].argmax())
            if eos is not None and token == eos:
                break
            generated.append(token)
            text = tokenizer.decode(generated)
            if any(s in text for s in stop):
                break
            nxt = torch.tensor([[token]], dtype=torch.long, device=device)
            seq = torch.cat([seq, nxt], 1)
            step_input = nxt if past is not None else seq
    cut = min((text.find(s) for s in stop if s in text), default=len(text))
    return text[:cut]


def _continuation_logprobs(model: nn.Module, context: list[int], continuations: list[list[int]]) -> list[torch.Tensor]:
    """Per continuation, the (len,) log-probabilities of its tokens after ``context`` (one batched pass).

    Right padding needs no attention mask in a causal model: real tokens never see the padding.
    """
    device = model_device(model)
    seqs = [context + c for c in continuations]
    width = max(len(s) for s in seqs)
    batch = torch.zeros(len(seqs), width, dtype=torch.long, device=device)
    for i, s in enumerate(seqs):
        batch[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    out = model(input_ids=batch, use_cache=False) if _is_hf(model) else model(batch)
    logits = out.logits if hasattr(out, "logits") else out
    logp = F.log_softmax(logits.float(), dim=-1)
    out = []
    for i, cont in enumerate(continuations):
        pos = torch.arange(len(context) - 1, len(context) - 1 + len(cont), device=device)
        out.append(logp[i, pos, torch.tensor(cont, dtype=torch.long, device=device)])
    return out


# ----------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------
def math_accuracy(model: nn.Module, tokenizer, problems, *, shots: Sequence = (), max_new_tokens: int = 256,
                  stop: Sequence[str] = DEFAULT_STOP, progress: Progress | None = None) -> dict:
    """Exact match of the final number after greedy generation.

    Parameters
    ----------
    problems : records with ``.question`` and ``.answer`` (a number as a string)
    shots : records with ``.question`` and ``.solution`` for the few-shot prompt
    stop : stop sequences; generation ends before the first one

    Returns
    -------
    {"accuracy": float, "correct": int, "n": int,
     "items": [{"question", "answer", "predicted", "generated", "correct"}, ...]}
    """
    problems = _check_records(problems, "math")
    if isinstance(stop, str):
        stop = (stop,)
    items, step = [], item_progress(progress, "math problems")
    for i, p in enumerate(problems):
        generated = greedy_generate(model, tokenizer, math_prompt(p.question, shots), max_new_tokens, stop)
        predicted = extract_answer(generated)
        items.append({"question": p.question, "answer": str(p.answer), "predicted": predicted,
                      "generated": generated, "correct": same_number(predicted, p.answer)})
        if step is not None:
            step(i + 1, len(problems))
    correct = sum(it["correct"] for it in items)
    return {"accuracy": correct / len(items), "correct": correct, "n": len(items), "items": items}


def multiple_choice_accuracy(model: nn.Module, tokenizer, records, *, progress: Progress | None = None) -> dict:
    """Pick the option with the highest log-likelihood as the continuation of the prompt.

    ``accuracy`` uses the summed log-likelihood; ``accuracy_norm`` divides it by the option's
    length in characters (lm-evaluation-harness ``acc_norm``).

    Returns
    -------
    {"accuracy", "accuracy_norm", "correct", "correct_norm", "n",
     "items": [{"question", "answer", "chosen", "chosen_norm", "loglik": [per option]}, ...]}
    """
    records = _check_records(records, "multiple-choice")
    items, step = [], item_progress(progress, "multiple-choice questions")
    with torch.no_grad(), eval_mode(model):
        for i, r in enumerate(records):
            if not r.choices:
                raise BadInputError(f"Multiple-choice record {i} has no options.")
            prompt = choice_prompt(r)
            pairs = [_encode_pair(tokenizer, prompt, " " + str(c)) for c in r.choices]
            context, options = pairs[0][0], [p[1] for p in pairs]
            if any(len(o) == 0 for o in options) or not context:
                raise BadInputError(f"Multiple-choice record {i} has an empty prompt or option.")
            _check_length(model, len(context) + max(len(o) for o in options), f"Multiple-choice record {i}")
            loglik = [float(lp.sum()) for lp in _continuation_logprobs(model, context, options)]
            norm = [ll / max(len(str(c)), 1) for ll, c in zip(loglik, r.choices)]
            chosen = max(range(len(loglik)), key=lambda j: (loglik[j], -j))
            chosen_norm = max(range(len(norm)), key=lambda j: (norm[j], -j))
            items.append({"question": r.question, "answer": int(r.answer), "chosen": chosen,
                          "chosen_norm": chosen_norm, "loglik": loglik})
            if step is not None:
                step(i + 1, len(records))
    correct = sum(it["chosen"] == it["answer"] for it in items)
    correct_norm = sum(it["chosen_norm"] == it["answer"] for it in items)
    n = len(items)
    return {"accuracy": correct / n, "accuracy_norm": correct_norm / n, "correct": correct,
            "correct_norm": correct_norm, "n": n, "items": items}


def _context_and_target(record) -> tuple[str, str]:
    if isinstance(record, str):
        return "", record
    if hasattr(record, "solution"):
        return f"Question: {record.question}\nAnswer:", " " + record.solution
    if hasattr(record, "choices"):
        return choice_prompt(record), " " + str(record.choices[record.answer])
    if hasattr(record, "text"):
        return "", record.text
    raise BadInputError(f"Cannot compute a loss on a {type(record).__name__}.",
                        fix="Give math problems, multiple-choice records or texts.")


def sample_text(record) -> str:
    """The text a record contributes to identification: question and worked solution (math), passage,
    question and correct option (multiple choice), or the text itself."""
    context, target = _context_and_target(record)
    return context + target


def token_inputs(tokenizer, records, max_length: int | None = None) -> list[torch.Tensor]:
    """Records as identification inputs: one (1, T) LongTensor of token ids per record (BOS first when
    the tokenizer adds one; cut to ``max_length`` tokens when given)."""
    records = _check_records(records, "input")
    out = []
    for r in records:
        ids = _encode(tokenizer, sample_text(r), bos=True)
        out.append(torch.tensor([ids[:max_length] if max_length else ids], dtype=torch.long))
    return out


def teacher_forced_loss(model: nn.Module, tokenizer, records, *, progress: Progress | None = None) -> dict:
    """Mean cross-entropy (nats per token) of each record's target given its context.

    Targets: the worked ``solution`` after the question (math), the correct option after the
    prompt (multiple choice), or every token of a plain text / ``.text`` record (after BOS, when the
    tokenizer has one).

    Returns
    -------
    {"loss": token-weighted mean, "perplexity": exp(loss), "tokens": int, "n": int,
     "items": [{"loss", "tokens"}, ...]}
    """
    records = _check_records(records, "text")
    items, step = [], item_progress(progress, "texts")
    total_nll, total_tokens = 0.0, 0
    with torch.no_grad(), eval_mode(model):
        for i, r in enumerate(records):
            context_text, target_text = _context_and_target(r)
            context, target = _encode_pair(tokenizer, context_text, target_text)
            if not context:  # no BOS and no context: the first token cannot be predicted
                context, target = target[:1], target[1:]
            if not target:
                raise BadInputError(f"Record {i} has no target tokens to score.")
            _check_length(model, len(context) + len(target), f"Record {i}")
            nll = -float(_continuation_logprobs(model, context, [target])[0].sum())
            items.append({"loss": nll / len(target), "tokens": len(target)})
            total_nll += nll
            total_tokens += len(target)
            if step is not None:
                step(i + 1, len(records))
    loss = total_nll / total_tokens
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": total_tokens, "n": len(items),
            "items": items}


def evaluator(tokenizer, *, math_problems=None, choice_records=None, loss_records=None, shots: Sequence = (),
              max_new_tokens: int = 256) -> Callable[[nn.Module], dict[str, float]]:
    """A ``model -> {metric: value}`` function for the sweeps in :mod:`core.mathneuro.analysis`.

    Metrics: ``math_accuracy``, ``choice_accuracy``, ``loss`` for the record sets given.
    """
    def evaluate(model: nn.Module) -> dict[str, float]:
        out = {}
        if math_problems is not None:
            out["math_accuracy"] = math_accuracy(model, tokenizer, math_problems, shots=shots,
                                                 max_new_tokens=max_new_tokens)["accuracy"]
        if choice_records is not None:
            out["choice_accuracy"] = multiple_choice_accuracy(model, tokenizer, choice_records)["accuracy"]
        if loss_records is not None:
            out["loss"] = teacher_forced_loss(model, tokenizer, loss_records)["loss"]
        return out
    return evaluate
