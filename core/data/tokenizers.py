"""Tokenizers the project trains on its own text (``tokenizers``, about a second for 4k ids): byte-level BPE and
word-level vocabularies, and the ``transformers`` wrapper the models are saved with."""
from __future__ import annotations

EOS = "<|endoftext|>"
UNK = "<unk>"


def train_bpe(texts, vocab_size: int, special_tokens: list[str], *, add_prefix_space: bool = False,
              min_frequency: int = 0, split_digits: bool = False):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts``; ``special_tokens`` get the first ids.

    ``split_digits`` makes every digit its own pre-token (numbers are then spelled digit by digit).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE with one special token ``<|endoftext|>`` (id 0), a space before the first word."""
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
