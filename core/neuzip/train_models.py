"""The models and the text a training comparison (:mod:`core.neuzip.training`) uses.

:class:`ModelSource` builds fresh bf16 copies of one model, the same weights each time, each straight into the form
its mode trains it in: a Hugging Face causal LM (a registered one, e.g. ``smollm2-135m``, or a local folder) and a
Llama configuration with random weights (:data:`RANDOM_MODELS`) are built one tensor at a time
(:mod:`core.neuzip.streaming`), each linear layer handed to the mode's ``linear`` hook as it is read (LOMO + NeuZip
compresses it there, QLoRA quantizes it), so the bf16 model is never whole in memory in a compressed mode, and no
float32 copy of it ever exists. A Mix-LN run (``mixln:pre-ln``) or another model class of the project's loads whole
(they are small) and is converted after.

Random weights are drawn tensor by tensor (``normal(0, initializer_range)``, norms at one) from generators seeded by
the run's seed and each tensor's name (:func:`core.neuzip.streaming.random_specs`): the same in every mode, whatever
form the model is built in.

Text (:func:`training_batches`): the train paragraphs of the Mix-LN corpora (Wikipedia, OpenWebText, Python docs),
tokenized with the model's tokenizer (else the Mix-LN BPE, 4,096 ids), packed into blocks of ``seq`` tokens and drawn
in a seeded order.
"""
from __future__ import annotations

import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.streaming import LinearHook, empty_model, folder_specs, random_specs, stream_into

__all__ = ["RANDOM_MODELS", "ModelSource", "build_model", "decoder_layers", "training_batches"]

# Llama configurations trained from random weights (transformers' LlamaConfig keywords)
_LLAMA3 = dict(vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192, rms_norm_eps=1e-5)
RANDOM_MODELS: dict[str, dict] = {
    "tiny-llama": dict(vocab_size=4096, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                       max_position_embeddings=1024),
    "llama-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=True),  # Llama-3.2-1B's shapes: 1.24 B parameters
    "llama3-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),  # 8.03 B
}


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers: the ``nn.ModuleList`` holding the most parameters."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise BadInputError("this model has no stack of layers (nn.ModuleList) to train layer by layer.",
                            fix="pick a transformer causal LM")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _cut(model: nn.Module, layers: int | None) -> nn.Module:
    if layers is None:
        return model
    stack = decoder_layers(model)
    if not 1 <= layers <= len(stack):
        raise BadInputError(f"layers={layers}: the model has {len(stack)} decoder layers.",
                            fix=f"use 1 to {len(stack)}")
    del stack[layers:]
    config = getattr(model, "config", None)
    for attr in ("num_hidden_layers", "num_layers"):
        if config is not None and hasattr(config, attr):
            setattr(config, attr, layers)
    return model


def _random_configs() -> dict:
    return dict.fromkeys(RANDOM_MODELS)


def source_reference(ref: str):
    """The checked reference of a training source (:func:`core.references.check_reference`): a random-weight
    configuration of :data:`RANDOM_MODELS`, a committed Mix-LN run ``mixln:<name>`` (looked up by name, never joined to
    a path; locally also ``mixln:<run folder>``), or a model of the zoo. Public mode refuses anything else with its one
    message, before anything is opened."""
    from core.mixln import RUN_REFERENCES
    from core.references import Registry, check_reference

    return check_reference(ref, (RUN_REFERENCES, Registry("random", _random_configs, what="random configuration")))


def source_parameters(ref: str, layers: int | None = None) -> int:
    """How many parameters the training source ``ref`` has (cut to ``layers`` for a random configuration), counted
    without building its weights: a configuration on the meta device, a run or a model from its headers."""
    found = source_reference(ref)
    if found.kind == "random":
        return sum(p.numel() for p in ModelSource(found.text, 0).build(layers, meta=True).parameters())
    if found.kind == "mixln-run":
        from core.zoo.safetensors_check import summarize

        return int(summarize(sorted(found.folder.glob("*.safetensors")))["parameters"])
    from core.budget import model_parameters

    return model_parameters(found.text)


class ModelSource:
    """Builds fresh bf16 copies of one model (the same weights each time), says what it is, and gives its tokenizer
    (None: the Mix-LN BPE) and its shapes (:meth:`build` with ``meta=True``) without loading any weight.

    ``streams``: whether :meth:`build` reads it tensor by tensor (a Hugging Face folder, a random configuration);
    otherwise it loads whole and the ``linear`` hook is applied to the built model's layers."""

    def __init__(self, ref: str, seed: int = 0):
        from core.neuzip.modules import hf_folder

        found = source_reference(ref)  # public mode: listed references only, before anything is opened
        ref = self.ref = found.text
        self.seed = int(seed)
        self.folder = self.project = None
        if found.kind == "random":
            self.label = f"{ref} (Llama configuration, random weights)"
        elif found.kind == "mixln-run":
            self.project, self.label = found.folder, f"{ref} (this project's Mix-LN run)"
        else:
            self.folder = hf_folder(ref)
            if self.folder is None:  # a model class of the project's own: loaded whole (it is small)
                from core.zoo import load_model, require_kind

                require_kind(load_model(ref), ("causal-lm",), "Training")
            self.label = ref

    @property
    def streams(self) -> bool:
        return self.ref in RANDOM_MODELS or self.folder is not None

    def tokenizer(self):
        """The model's tokenizer, or None (a random configuration, a Mix-LN run: the Mix-LN BPE)."""
        if self.ref in RANDOM_MODELS or self.project is not None:
            return None
        if self.folder is not None:
            import transformers

            return transformers.AutoTokenizer.from_pretrained(self.folder)
        from core.zoo import load_model

        return load_model(self.ref).tokenizer

    def _empty(self, layers: int | None) -> nn.Module:
        """The model on the meta device (cut to ``layers``)."""
        import transformers

        if self.ref in RANDOM_MODELS:
            cfg = dict(RANDOM_MODELS[self.ref])
            if layers is not None:
                cfg["num_hidden_layers"] = layers
            config = transformers.LlamaConfig(**cfg, attention_bias=False, mlp_bias=False)
            config._attn_implementation = "sdpa"
            return empty_model(lambda: transformers.LlamaForCausalLM(config))
        from core.neuzip.modules import empty_causal_lm

        return _cut(empty_causal_lm(self.folder), layers)

    def build(self, layers: int | None = None, meta: bool = False, linear: LinearHook | None = None,
              linears=None, progress=None) -> nn.Module:
        """A fresh copy in bf16, every parameter trainable; ``meta``: on the meta device (its shapes only).
        ``linear(name, layer, weight)`` replaces each of ``linears(model)`` (a function of the meta model giving the
        ``(name, layer)`` to replace) as its weight is read (the weight is a scratch: copy or compress it)."""
        if self.streams:
            model = self._empty(layers)
            if not meta:
                specs = random_specs(model, self.seed, float(getattr(model.config, "initializer_range", 0.02))) \
                    if self.ref in RANDOM_MODELS else folder_specs(self.folder)
                chosen = linears(model) if linear is not None else ()
                stream_into(model, specs, linear, chosen, progress=progress)
        else:
            model = self._load_whole(layers)
            if meta:
                return model
            if linear is not None:
                for name, layer in linears(model):
                    parent_name, _, child = name.rpartition(".")
                    parent = model.get_submodule(parent_name) if parent_name else model
                    setattr(parent, child, linear(name, layer, layer.weight.detach()))
                    layer.weight = None
        for p in model.parameters():
            if p.is_floating_point() and not p.is_meta:
                p.requires_grad_(True)
        return model

    def _load_whole(self, layers: int | None) -> nn.Module:
        torch.manual_seed(self.seed)
        if self.project is not None:
            from core.mixln import MixLNForCausalLM

            model = MixLNForCausalLM.from_pretrained(self.project)
        else:
            import copy

            from core.zoo import load_model

            model = copy.deepcopy(load_model(self.ref).model)
        return _cut(model, layers).to(torch.bfloat16)

    def vocab(self, model: nn.Module) -> int:
        cfg = getattr(model, "config", None)
        return int(getattr(cfg, "vocab_size", 0) or model.get_output_embeddings().weight.shape[0])


def build_model(ref: str, seed: int = 0, layers: int | None = None) -> nn.Module:
    """A fresh bf16 copy of ``ref`` (see the module doc), every parameter trainable."""
    return ModelSource(ref, seed).build(layers)


def _encode(tokenizer, texts: list[str]) -> list[int]:
    if hasattr(tokenizer, "encode_batch"):  # a tokenizers.Tokenizer (the Mix-LN BPE)
        eos = tokenizer.token_to_id("<|endoftext|>")
        ids = []
        for enc in tokenizer.encode_batch(texts):
            ids.extend(enc.ids + ([eos] if eos is not None else []))
        return ids
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = []
    for row in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(list(row) + ([eos] if eos is not None else []))
    return ids


def training_batches(tokenizer, vocab: int, steps: int, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """``(steps, batch, seq)`` token ids: the train paragraphs of the Mix-LN corpora, tokenized, packed into blocks of
    ``seq`` and drawn in a seeded order (the same for every mode). ``tokenizer`` None: the Mix-LN BPE (4,096 ids)."""
    from core.mixln.data import corpus_texts

    if tokenizer is None:
        from core.mixln.data import load_tokenizer
        from core.paths import ASSETS_DIR

        tokenizer = load_tokenizer(ASSETS_DIR / "mixln" / "tokenizer.json")
        if vocab < tokenizer.get_vocab_size():
            raise BadInputError(f"the model has {vocab} token ids and no tokenizer; the Mix-LN BPE needs 4,096.",
                                fix="pick a model with a tokenizer or a vocabulary of at least 4,096")
    need = steps * batch * seq
    texts, ids, at = corpus_texts("train"), [], 0
    while len(ids) < 2 * need and at < len(texts):  # twice what is needed, so the seeded draw has a choice
        ids.extend(_encode(tokenizer, texts[at:at + 64]))
        at += 64
    blocks = torch.tensor(ids[:len(ids) // seq * seq], dtype=torch.long).view(-1, seq)
    if len(blocks) < steps * batch:
        raise BadInputError(f"the corpus gives {len(blocks)} blocks of {seq} tokens; {steps * batch} are needed.",
                            fix="fewer steps, a smaller batch or shorter sequences")
    if int(blocks.max()) >= vocab:
        raise BadInputError(f"the tokenizer's ids reach {int(blocks.max())}, the model has {vocab}.")
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed))[:steps * batch]
    return blocks[order].view(steps, batch, seq)
