"""The Mix-LN runs' text pipeline: a byte-level BPE tokenizer trained by the project on the offline
paragraph corpora, and sequence packing.

- :func:`corpus_texts`     the paragraphs of ``CORPORA`` (Wikipedia, OpenWebText, Python docs) for one split
- :func:`train_tokenizer`  a byte-level BPE (``tokenizers``) of ``vocab_size`` ids, trained on the train split
- :func:`encode_stream`    paragraphs -> one 1-D id stream, each paragraph followed by ``<|endoftext|>``
- :func:`pack`             a 1-D stream -> (N, T) contiguous, non-overlapping blocks covering the stream
- :func:`prepare_corpus`   tokenizer + train / held-out streams in one call (cached in memory)

Byte-level BPE is lossless: ``decode(encode(text)) == text`` for any text.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from core.data.tokenizers import train_bpe
from core.errors import BadInputError

CORPORA = ("wikipedia-paragraphs", "openwebtext-paragraphs", "pydoc-topics")
EOS = "<|endoftext|>"
DEFAULT_VOCAB = 4096


def corpus_texts(split: str = "train", corpora: tuple[str, ...] = CORPORA) -> list[str]:
    """The non-empty paragraph texts of ``corpora`` for ``split`` (train, validation or test), in order."""
    from core.data import load
    texts = [r.text for name in corpora for r in load(name, split) if getattr(r, "text", "").strip()]
    if not texts:
        raise BadInputError(f"the {split} split of {', '.join(corpora)} holds no text (empty corpus).",
                            fix="run `python -m core data prepare`, or choose corpora that have text.")
    return texts


def train_tokenizer(texts: list[str], vocab_size: int = DEFAULT_VOCAB):
    """A byte-level BPE ``tokenizers.Tokenizer`` with ``vocab_size`` ids (id 0 is ``<|endoftext|>``)."""
    if not texts or not any(t.strip() for t in texts):
        raise BadInputError("cannot train a tokenizer on an empty corpus.", fix="provide some text.")
    if not 300 <= vocab_size <= 65536:
        raise BadInputError(f"vocabulary size {vocab_size} is out of range.", fix="use 300 to 65536 (e.g. 4096).")
    return train_bpe(texts, vocab_size, [EOS])


def load_tokenizer(path: str | os.PathLike):
    from tokenizers import Tokenizer
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise BadInputError(f"no tokenizer at {path}.", fix="train a run first (it writes tokenizer.json).")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises a bare Exception for a file it cannot parse
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BadInputError(f"{path.name} is not a tokenizers tokenizer.json ({cause}).",
                            fix="pass --tokenizer with a run's tokenizer.json, or leave it out to train one.") from err


def encode_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """One 1-D LongTensor: the ids of each text followed by the ``<|endoftext|>`` id."""
    eos = tokenizer.token_to_id(EOS)
    ids: list[int] = []
    for enc in tokenizer.encode_batch(list(texts)):
        ids.extend(enc.ids)
        if eos is not None:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def pack(stream: torch.Tensor, seq_len: int, drop_last: bool = True) -> torch.Tensor:
    """(N, seq_len) blocks: row i is ``stream[i * seq_len:(i + 1) * seq_len]``; the short tail is dropped
    (``drop_last``) or padded with -100 (ignored by the loss)."""
    stream = torch.as_tensor(stream).reshape(-1).long()
    if seq_len < 1:
        raise BadInputError(f"sequence length {seq_len} must be at least 1.", fix="use seq_len >= 1.")
    n, rest = divmod(stream.numel(), seq_len)
    if rest and not drop_last:
        stream = torch.cat([stream, torch.full((seq_len - rest,), -100, dtype=torch.long)])
        n += 1
    if n == 0:
        raise BadInputError(f"{stream.numel()} tokens do not fill one block of {seq_len}.",
                            fix="provide more text or a shorter sequence length.")
    return stream[:n * seq_len].view(n, seq_len)


@dataclass
class Corpus:
    tokenizer: object
    train: torch.Tensor        # (N_train,) ids
    eval: torch.Tensor         # (N_eval,) ids of the held-out split
    eval_split: str


def prepare_corpus(vocab_size: int = DEFAULT_VOCAB, tokenizer_path: str | os.PathLike | None = None,
                   eval_split: str = "validation") -> Corpus:
    """Train (or load from ``tokenizer_path``) the tokenizer and encode the train and held-out splits."""
    key = (vocab_size, str(tokenizer_path) if tokenizer_path else None, eval_split)
    return _prepare_cached(*key)


@functools.lru_cache(maxsize=4)
def _prepare_cached(vocab_size: int, tokenizer_path: str | None, eval_split: str) -> Corpus:
    train_texts = corpus_texts("train")
    if tokenizer_path and Path(tokenizer_path).exists():
        tok = load_tokenizer(tokenizer_path)
    else:
        tok = train_tokenizer(train_texts, vocab_size)
    return Corpus(tok, encode_stream(tok, train_texts), encode_stream(tok, corpus_texts(eval_split)), eval_split)
