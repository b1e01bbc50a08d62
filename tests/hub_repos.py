"""Tiny repositories under the papers' real hub ids, for the hub stand-in (tests/hub.py).

Random weights, real architectures and real file layouts: what a user's ``--online`` request downloads, only small.

- ``state-spaces/mamba-130m-hf``: a MambaForCausalLM whose embedding has more rows than its tokenizer has tokens
  (as the real one: vocab_size 50280, tokenizer 50277), so ids past the tokenizer exist;
- ``HuggingFaceTB/SmolLM2-135M``: a LlamaForCausalLM with its tokenizer;
- the families MambaLRP explains beyond Mamba-1, under their checkpoints' ids (:data:`SSM2_IDS`): Mamba-2,
  Falcon-Mamba, Bamba, Granite 4.0-H (with experts), Nemotron-H, Falcon-H1, each a tiny bias-free model with the
  tokenizer;
- ``layerwise-test/no-tokenizer``: a Llama without tokenizer files;
- ``layerwise-test/broken-tokenizer``: a Llama whose tokenizer.json is not JSON;
- ``layerwise-test/pickle-only``: a Llama saved as ``pytorch_model.bin`` only;
- ``layerwise-test/no-weights``: a config and nothing else;
- datasets ``stanfordnlp/sst2``, ``openai/gsm8k`` (config ``main``), ``Salesforce/wikitext``
  (``wikitext-2-raw-v1``), ``cais/mmlu`` (``all``), ``ehovy/race`` (``all``) as parquet files, with the
  README configs the hub uses.
"""
from __future__ import annotations

from pathlib import Path

PADDING = 3  # embedding rows past the tokenizer, as in mamba-130m-hf (50280 - 50277)
MAMBA_ID = "state-spaces/mamba-130m-hf"
SSM2_IDS = {  # hub id -> the family in tests/core/ssm2_models.py (transformers-format checkpoints)
    "AntonV/mamba2-130m-hf": "mamba2", "tiiuae/falcon-mamba-7b": "falcon-mamba",
    "ibm-ai-platform/Bamba-9B-v1": "bamba", "ibm-granite/granite-4.0-h-tiny": "granite-moe",
    "nvidia/Nemotron-H-8B-Base-8K": "nemotron-h", "tiiuae/Falcon-H1-0.5B-Base": "falcon-h1",
}
LLAMA_ID = "HuggingFaceTB/SmolLM2-135M"


def tokenizer(vocab_size: int = 384):
    """A byte-level BPE (GPT-NeoX style) trained on Python's own documentation text."""
    import pydoc_data.topics
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(pydoc_data.topics.topics.values())[:120], trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>", pad_token="<|padding|>")


def _llama(vocab_size: int):
    import torch
    import transformers

    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                                   tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg)


def build_models(root: Path) -> dict[str, Path]:
    """Save the model repositories under ``root``; ``{repo_id: folder}``."""
    import torch
    import transformers

    root = Path(root)
    tok = tokenizer()
    out = {}

    def folder(repo_id):
        path = root / repo_id
        path.mkdir(parents=True, exist_ok=True)
        out[repo_id] = path
        return path

    torch.manual_seed(0)
    mamba = transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=len(tok) + PADDING, hidden_size=32, num_hidden_layers=2, state_size=16, expand=2,
        use_bias=False, use_conv_bias=True, tie_word_embeddings=True))
    mamba.save_pretrained(folder(MAMBA_ID))
    tok.save_pretrained(out[MAMBA_ID])

    llama = _llama(len(tok))
    llama.save_pretrained(folder(LLAMA_ID))
    tok.save_pretrained(out[LLAMA_ID])

    llama.save_pretrained(folder("layerwise-test/no-tokenizer"))

    llama.save_pretrained(folder("layerwise-test/broken-tokenizer"))
    tok.save_pretrained(out["layerwise-test/broken-tokenizer"])
    (out["layerwise-test/broken-tokenizer"] / "tokenizer.json").write_text("{ this is not json")

    pickled = folder("layerwise-test/pickle-only")
    llama.config.save_pretrained(pickled)
    torch.save(llama.state_dict(), pickled / "pytorch_model.bin")

    llama.config.save_pretrained(folder("layerwise-test/no-weights"))

    from tests.core.ssm2_models import build, tiny_config

    for repo_id, family in SSM2_IDS.items():
        model = build(tiny_config(family, vocab=len(tok)), dtype=torch.float32)
        model.config._experts_implementation = None  # the checkpoint's own setting (the tests' eager one is theirs)
        model.save_pretrained(folder(repo_id))
        tok.save_pretrained(out[repo_id])
    return out


def _readme(configs: dict[str, dict[str, str]]) -> bytes:
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, path in splits.items():
            lines += [f"  - split: {split}", f"    path: {path}"]
    return ("\n".join(lines + ["---", "", "A tiny stand-in of the real dataset, for tests.", ""])).encode()


def build_datasets(root: Path) -> dict[str, Path]:
    """Save the dataset repositories (parquet) under ``root``; ``{repo_id: folder}``."""
    import pandas as pd

    root = Path(root)
    out = {}

    def write(repo_id: str, tables: dict[str, pd.DataFrame], configs: dict | None = None):
        base = root / repo_id
        for rel, frame in tables.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            frame.to_parquet(base / rel, index=False)
        if configs:
            (base / "README.md").write_bytes(_readme(configs))
        out[repo_id] = base

    words = ["a gripping, funny film", "dull and far too long", "the cast is wonderful", "a mess from start to end",
             "quietly moving", "I wanted my evening back", "sharp writing", "nothing works here"]
    sst = lambda n, off=0: pd.DataFrame({"idx": range(n), "sentence": [words[(i + off) % 8] for i in range(n)],  # noqa
                                         "label": [int((i + off) % 2 == 0) for i in range(n)]})
    test = sst(6)
    test["label"] = -1
    write("stanfordnlp/sst2", {"data/train-00000-of-00001.parquet": sst(40),
                               "data/validation-00000-of-00001.parquet": sst(10, 1),
                               "data/test-00000-of-00001.parquet": test})

    def gsm(n, off):
        rows = []
        for i in range(n):
            a, b = 3 + i + off, 4 + 2 * i
            rows.append({"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                         "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"})
        return pd.DataFrame(rows)
    write("openai/gsm8k", {"main/train-00000-of-00001.parquet": gsm(30, 0), "main/test-00000-of-00001.parquet": gsm(8, 50)},
          {"main": {"train": "main/train-*", "test": "main/test-*"}})

    text = ["", " = Valkyria Chronicles = ", "", " The game was released in 2011 and sold well in Japan . ",
            " Its battle system mixes turns with real-time movement . ", "", " = = Reception = = ",
            " Critics praised the art and the music , less the story . "]
    wiki = pd.DataFrame({"text": text * 5})
    write("Salesforce/wikitext", {f"wikitext-2-raw-v1/{s}-00000-of-00001.parquet": wiki
                                  for s in ("train", "validation", "test")},
          {"wikitext-2-raw-v1": {s: f"wikitext-2-raw-v1/{s}-*" for s in ("train", "validation", "test")}})

    def mmlu(n):
        return pd.DataFrame({"question": [f"What is {i} + {i}?" for i in range(n)],
                             "subject": ["elementary_mathematics"] * n,
                             "choices": [[str(2 * i), str(2 * i + 1), str(i), str(i + 2)] for i in range(n)],
                             "answer": [0] * n})
    write("cais/mmlu", {f"all/{s}-00000-of-00001.parquet": mmlu(n) for s, n in
                        (("test", 12), ("validation", 6), ("dev", 5))},
          {"all": {s: f"all/{s}-*" for s in ("test", "validation", "dev")}})

    def race(n):
        return pd.DataFrame({"example_id": [f"high{i}.txt" for i in range(n)],
                             "article": ["Mary walked to the market to buy bread and milk."] * n,
                             "answer": ["ABCD"[i % 4] for i in range(n)],
                             "question": ["Where did Mary walk?"] * n,
                             "options": [["market", "school", "park", "home"]] * n})
    write("ehovy/race", {f"all/{s}-00000-of-00001.parquet": race(n) for s, n in
                         (("train", 12), ("validation", 4), ("test", 4))},
          {"all": {s: f"all/{s}-*" for s in ("train", "validation", "test")}})
    return out
