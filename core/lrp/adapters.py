"""One interface over the Mamba models MambaLRP explains: input embeddings in, explained logits out.

========================  ==========  ============================================================
model                     kind        explained output
========================  ==========  ============================================================
``MambaForCausalLM``      ``lm``      logit of the target token at the last position
(and every causal LM of :data:`FAMILIES`: Mamba-2, Falcon-Mamba, the hybrids, the transformer decoders)
``MambaModel``            ``lm``      same, with the tied head ``h_last . embeddings[target]``
``MambaSequenceClassifier`` ``classifier``  class logit (head on the last token)
``SequenceClassifier``    ``classifier``  the same on a Mamba-2 or hybrid backbone
``VisionMamba``           ``vision``  class logit (head on the class token)
========================  ==========  ============================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from core.errors import BadInputError
from core.lrp import rules as R
from core.lrp.models import MambaSequenceClassifier, SequenceClassifier, VisionMamba
from core.zoo.views import private_view


@dataclass(frozen=True)
class Family:
    """A transformers model family MambaLRP explains: its ``label``, how its layers are built (``ssm``: SSM layers
    only; ``attention``: attention layers only (AttnLRP alone); ``interleaved``: SSM and attention layers;
    ``parallel``: both in every layer, summed), and what its model does outside the blocks of
    :data:`core.lrp.blocks.BLOCKS`:

    - ``embedding_multiplier``: the attribute path of a factor the model applies to token embeddings but not to
      ``inputs_embeds`` (Falcon-H1), or "";
    - ``position_embedding``: the base model's module whose output (learned positions, a constant of the input) is
      added to the embeddings (GPT-2's ``wpe``): the ledger counts what it absorbs with the biases, or "";
    - ``logit_softcap``: the config attribute of a final logit soft-capping (Gemma 2's ``final_logit_softcapping``),
      explained with the identity rule, or "";
    - ``base``: the class name of its base model when it is not the causal LM's name with ``ForCausalLM`` ->
      ``Model`` (a :class:`SequenceClassifier` on it is found by that name)."""

    label: str
    structure: str
    embedding_multiplier: str = ""  # an attribute of the base model (FalconH1Model.embedding_multiplier), or ""
    position_embedding: str = ""
    logit_softcap: str = ""
    base: str = ""


FAMILIES: dict[str, Family] = {  # the causal-LM class names (transformers) MambaLRP explains
    "MambaForCausalLM": Family("Mamba", "ssm"),
    "FalconMambaForCausalLM": Family("Falcon-Mamba", "ssm"),
    "Mamba2ForCausalLM": Family("Mamba-2", "ssm"),
    "BambaForCausalLM": Family("Bamba", "interleaved"),
    "GraniteMoeHybridForCausalLM": Family("Granite 4.0-H", "interleaved"),
    "NemotronHForCausalLM": Family("Nemotron-H", "interleaved"),
    "FalconH1ForCausalLM": Family("Falcon-H1", "parallel", "embedding_multiplier"),
    "Zamba2ForCausalLM": Family("Zamba2", "interleaved"),
    "JambaForCausalLM": Family("Jamba", "interleaved"),
    "LlamaForCausalLM": Family("Llama", "attention"),  # SmolLM2 and Llama 3.x are Llamas
    "MistralForCausalLM": Family("Mistral", "attention"),
    "Qwen2ForCausalLM": Family("Qwen2", "attention"),
    "Qwen3ForCausalLM": Family("Qwen3", "attention"),
    "Qwen3MoeForCausalLM": Family("Qwen3-MoE", "attention"),
    "Gemma2ForCausalLM": Family("Gemma 2", "attention", logit_softcap="final_logit_softcapping"),
    "Gemma3ForCausalLM": Family("Gemma 3", "attention", logit_softcap="final_logit_softcapping",
                                base="Gemma3TextModel"),
    "Phi3ForCausalLM": Family("Phi-3", "attention"),
    "SmolLM3ForCausalLM": Family("SmolLM3", "attention"),
    "Olmo2ForCausalLM": Family("OLMo 2", "attention"),
    "GPT2LMHeadModel": Family("GPT-2", "attention", position_embedding="wpe", base="GPT2Model"),
}
_BY_BASE = {f.base or name.replace("ForCausalLM", "Model"): name for name, f in FAMILIES.items()}


def family_of(model) -> Family | None:
    """The :class:`Family` of a causal LM (or of a :class:`SequenceClassifier`'s backbone), else None."""
    if isinstance(model, SequenceClassifier):
        return FAMILIES.get(_BY_BASE.get(type(model.backbone).__name__, ""))
    if type(model).__module__.startswith("transformers."):
        return FAMILIES.get(type(model).__name__)
    return None


def _base(model) -> nn.Module:
    return model.backbone if isinstance(model, SequenceClassifier) else model.base_model


def position_embeddings(model) -> list[nn.Module]:
    """The modules whose outputs the model adds to the embeddings as constants (GPT-2's learned positions)."""
    family = family_of(model)
    if family is None or not family.position_embedding:
        return []
    return [getattr(_base(model), family.position_embedding)]


def logit_softcap(model) -> float | None:
    """The final logit soft-capping of a causal LM (Gemma 2), or None."""
    family = family_of(model)
    if family is None or not family.logit_softcap or isinstance(model, SequenceClassifier):
        return None
    return getattr(model.config, family.logit_softcap, None)


@dataclass
class ModelAdapter:
    """How to embed inputs and read the explained logits of one supported model.

    Attributes
    ----------
    model : a private view of the wrapped model (:func:`adapter_for`); the model itself is never modified.
    kind : ``"lm"``, ``"classifier"`` or ``"vision"``.
    progress : optional ``progress(fraction, message)`` the methods pass to :func:`core.lrp.lrp_rules`.
    """

    model: nn.Module
    kind: str
    progress: Callable[[float, str], None] | None = None

    # ---- inputs ------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None
              ) -> torch.Tensor:
        """Validated inputs -> input embeddings ``(1, L, H)`` (detached)."""
        with torch.no_grad():
            if self.kind == "vision":
                return self.model.embed(self._pixels(input_ids, pixel_values)).detach()
            ids = self._ids(input_ids, pixel_values)
            return (self.embeddings()(ids) * self._embedding_multiplier()).detach()

    def _embedding_multiplier(self) -> float:
        family = family_of(self.model) if self.kind in ("lm", "classifier") else None
        if family is None or not family.embedding_multiplier:
            return 1.0
        return float(getattr(_base(self.model), family.embedding_multiplier))

    def embeddings(self) -> nn.Embedding:
        if isinstance(self.model, _hf_mamba()[1]):
            return self.model.embeddings
        return self.model.get_input_embeddings()

    def _ids(self, input_ids, pixel_values) -> torch.Tensor:
        if pixel_values is not None:
            raise BadInputError("This is a text model; it takes input_ids, not pixel_values.")
        if input_ids is None:
            raise BadInputError("No input: pass input_ids, a (1, L) tensor of token ids.")
        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise BadInputError(f"input_ids must have shape (1, L), got {tuple(ids.shape)}.",
                                fix="Explain one sequence at a time.")
        if ids.shape[1] == 0:
            raise BadInputError("The input is empty.", fix="Enter at least one token.")
        if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise BadInputError(f"input_ids must be integer token ids, got {ids.dtype}.")
        vocab = self.embeddings().num_embeddings
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise BadInputError(f"Token ids must lie in [0, {vocab}), got {int(ids.min())}..{int(ids.max())}.",
                                fix="Tokenize with this model's tokenizer.")
        return ids.long().to(self.embeddings().weight.device)

    def _pixels(self, input_ids, pixel_values) -> torch.Tensor:
        if input_ids is not None:
            raise BadInputError("This is an image model; it takes pixel_values, not input_ids.")
        if pixel_values is None:
            raise BadInputError("No input: pass pixel_values, a (1, C, S, S) image tensor.")
        px = torch.as_tensor(pixel_values)
        if px.dim() == 3:
            px = px[None]
        cfg = self.model.config
        want = (1, cfg.in_channels, cfg.image_size, cfg.image_size)
        if tuple(px.shape) != want:
            raise BadInputError(f"The image has shape {tuple(px.shape)}, the model expects {want}.",
                                fix=f"Resize to {cfg.image_size}x{cfg.image_size} with {cfg.in_channels} channels.")
        if px.numel() == 0:
            raise BadInputError("The image is empty.")
        w = self.model.patch_embed.weight
        return px.to(device=w.device, dtype=w.dtype)

    # ---- outputs -----------------------------------------------------------------------------
    def logits(self, embeds: torch.Tensor) -> torch.Tensor:
        """Input embeddings ``(B, L, H)`` -> explained logits ``(B, num_outputs)`` (float32, float64 for float64)."""
        m = self.model
        if isinstance(m, _hf_mamba()[1]):
            h = m(inputs_embeds=embeds, use_cache=False).last_hidden_state[:, -1]
            return (h @ m.embeddings.weight.T).to(_widened(embeds))
        if self.kind == "lm":
            cap = logit_softcap(m)
            if cap is not None:  # the capping with the rules in force (lrp_rules notes them on the model)
                h = m.base_model(inputs_embeds=embeds, use_cache=False).last_hidden_state[:, -1]
                z = m.get_output_embeddings()(h)
                return R.softcap(z, cap, m.__dict__.get("_layerwise_rules")).to(_widened(embeds))
            return m(inputs_embeds=embeds, use_cache=False, logits_to_keep=1).logits[:, -1].to(_widened(embeds))
        if self.kind == "classifier":
            return m(inputs_embeds=embeds).to(_widened(embeds))
        return m.forward_embeddings(embeds).to(_widened(embeds))

    @property
    def num_outputs(self) -> int:
        m = self.model
        if isinstance(m, _hf_mamba()[1]):
            return m.embeddings.num_embeddings
        if self.kind == "lm":
            return m.get_output_embeddings().out_features
        if self.kind == "classifier":
            return m.num_labels
        return m.config.num_classes

    def explained_position(self, length: int) -> int:
        """Sequence position whose state produces the explained logit."""
        return self.model.config.cls_position if self.kind == "vision" else length - 1

    def unit_positions(self, length: int) -> torch.Tensor:
        """Sequence positions of the units a relevance map is shown over (tokens, or patches)."""
        if self.kind != "vision":
            return torch.arange(length)
        c = self.model.config.cls_position
        return torch.tensor([i for i in range(length) if i != c])

    def to_map(self, sequence_relevance: torch.Tensor) -> torch.Tensor:
        """``(L,)`` per-sequence-position values -> ``(L,)`` per token or ``(h, w)`` per patch."""
        if self.kind != "vision":
            return sequence_relevance
        per_patch = sequence_relevance[self.unit_positions(sequence_relevance.shape[0])]
        return per_patch.reshape(self.model.config.grid)


def _widened(t: torch.Tensor) -> torch.dtype:
    return torch.promote_types(t.dtype, torch.float32)


def _hf_mamba() -> tuple[type, type]:
    """transformers' ``(MambaForCausalLM, MambaModel)``, imported when first needed (the app starts without it)."""
    from transformers import MambaForCausalLM, MambaModel

    return MambaForCausalLM, MambaModel


def adapter_for(model) -> ModelAdapter:
    """The adapter of a supported model, else :class:`BadInputError`.

    The adapter holds a private view of ``model`` (:func:`core.zoo.private_view`, with its own parameter objects):
    the rules rewire the view's forwards and freeze the view's parameters, so the model itself, which other requests
    may be using at the same time, is never changed.
    """
    kind = None
    if isinstance(model, _hf_mamba()) or family_of(model) is not None and not isinstance(model, SequenceClassifier):
        kind = "lm"
    elif isinstance(model, (MambaSequenceClassifier, SequenceClassifier)):
        kind = "classifier"
    elif isinstance(model, VisionMamba):
        kind = "vision"
    if kind == "classifier" and isinstance(model, SequenceClassifier) and family_of(model) is None:
        kind = None
    if kind is not None:
        return ModelAdapter(private_view(model, own_parameters=True), kind)
    raise BadInputError(
        f"MambaLRP explains Mamba models, the hybrids and the transformer decoders of "
        f"{', '.join(f.label for f in FAMILIES.values() if f.label != 'Mamba')}; got {type(model).__name__}.",
        fix="Use a transformers causal LM of one of those families (e.g. MambaForCausalLM, LlamaForCausalLM, "
            "Qwen2ForCausalLM, GraniteMoeHybridForCausalLM), core.lrp.MambaSequenceClassifier / SequenceClassifier "
            "or core.lrp.VisionMamba.")
