"""The project's own Mamba models that MambaLRP explains besides transformers' causal LMs.

* :class:`MambaSequenceClassifier` -- a transformers ``MambaModel`` backbone with a linear head on the
  last token (the pooled representation of a causal model); :class:`SequenceClassifier` the same on any other
  backbone MambaLRP explains (Mamba-2, the hybrids).
* :class:`VisionMamba` -- patch embedding, a class token in the middle of the sequence and
  bidirectional Mamba blocks (:class:`BiMambaMixer`: a forward and a flipped branch sharing in_proj
  and out_proj), like Vim (Zhu et al. 2024).

Both return the class logits as a plain tensor ``(B, num_classes)`` and are saved/loaded as a folder
with ``config.json`` and ``model.safetensors`` (safetensors only, never pickle).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from core.errors import ModelLoadError
from core.lrp.mixer import bimamba_mixer_forward
from core.files import atomic_write

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"


def _save(folder, config: dict, model: nn.Module) -> Path:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(folder / WEIGHTS_NAME, lambda tmp: save_file(state, str(tmp)))
    atomic_write(folder / CONFIG_NAME, json.dumps(config, indent=2))
    return folder


def _read(folder, kind: str) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg_path, w_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    if not cfg_path.is_file() or not w_path.is_file():
        raise ModelLoadError(f"{folder} has no {CONFIG_NAME} + {WEIGHTS_NAME}.",
                             fix="Point to a folder written by save_pretrained().")
    config = json.loads(cfg_path.read_text())
    if config.get("kind") != kind:
        raise ModelLoadError(f"{folder} holds a {config.get('kind')!r} model, not {kind!r}.",
                             fix="Load it with the matching class.")
    return config, load_file(str(w_path))


# -------------------------------------------------------------------------------------------------
# Sequence classifiers: a backbone + a linear head on the last token
# -------------------------------------------------------------------------------------------------
class SequenceClassifier(nn.Module):
    """A transformers backbone of any family MambaLRP explains (Mamba-2, Falcon-Mamba, the hybrids:
    ``AutoModel.from_config``) + a linear head on the last token's final hidden state (the pooled representation of a
    causal model).

    Parameters
    ----------
    config : the backbone's config (``Mamba2Config``, ``GraniteMoeHybridConfig``, ...).
    num_labels : number of classes.
    head_bias : whether the head has a bias (a bias absorbs part of the relevance).
    """

    kind = "ssm-classifier"
    config_key = "backbone"  # where config.json keeps the backbone's config

    def __init__(self, config, num_labels: int = 2, head_bias: bool = True):
        super().__init__()
        self.config = config
        self.num_labels = num_labels
        self.backbone = self._backbone(config)
        self.head = nn.Linear(config.hidden_size, num_labels, bias=head_bias)

    @staticmethod
    def _backbone(config) -> nn.Module:
        from transformers import AutoModel

        return AutoModel.from_config(config)

    @staticmethod
    def _config(values: dict):
        from transformers import AutoConfig

        values = dict(values)
        return AutoConfig.for_model(values.pop("model_type"), **values)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.backbone.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None
                ) -> torch.Tensor:
        """``input_ids: (B, L)`` or ``inputs_embeds: (B, L, H)`` -> logits ``(B, num_labels)``."""
        out = self.backbone(input_ids=input_ids, inputs_embeds=inputs_embeds, use_cache=False)
        last = out.last_hidden_state[:, -1]
        return self.head(last.to(self.head.weight.dtype))

    def save_pretrained(self, folder) -> Path:
        cfg = {"kind": self.kind, "num_labels": self.num_labels, "head_bias": self.head.bias is not None,
               self.config_key: self.config.to_dict()}
        return _save(folder, cfg, self)

    @classmethod
    def from_pretrained(cls, folder) -> "SequenceClassifier":
        from core.zoo.construction import constructing

        cfg, state = _read(folder, cls.kind)
        with constructing():
            model = cls(cls._config(cfg[cls.config_key]), cfg["num_labels"], cfg["head_bias"])
            model.load_state_dict(state)
        return model.eval()


class MambaSequenceClassifier(SequenceClassifier):
    """:class:`SequenceClassifier` on a transformers ``MambaModel`` (the papers' Mamba-1), ``config: MambaConfig``;
    saved with its own ``kind`` and the backbone's config under ``mamba``."""

    kind = "mamba-classifier"
    config_key = "mamba"

    @staticmethod
    def _backbone(config) -> nn.Module:
        from transformers import MambaModel

        return MambaModel(config)

    @staticmethod
    def _config(values: dict):
        from transformers import MambaConfig

        return MambaConfig.from_dict(values)


# -------------------------------------------------------------------------------------------------
# Vision Mamba
# -------------------------------------------------------------------------------------------------
@dataclass
class VisionMambaConfig:
    image_size: int = 32           # square images, pixels per side
    patch_size: int = 4            # pixels per patch side; the grid is image_size // patch_size
    in_channels: int = 3
    hidden_size: int = 64
    num_layers: int = 4
    state_size: int = 16           # N of the SSM
    expand: int = 2                # intermediate size = expand * hidden_size
    conv_kernel: int = 4
    dt_rank: int = 0               # 0 means ceil(hidden_size / 16)
    num_classes: int = 10
    use_conv_bias: bool = True
    layer_norm_epsilon: float = 1e-5

    @property
    def grid(self) -> tuple[int, int]:
        side = self.image_size // self.patch_size
        return side, side

    @property
    def num_patches(self) -> int:
        h, w = self.grid
        return h * w

    @property
    def cls_position(self) -> int:
        """Index of the class token: the middle of the sequence of ``num_patches + 1`` tokens."""
        return self.num_patches // 2


def _init_ssm(conv: nn.Conv1d, dt_proj: nn.Linear, A_log: nn.Parameter, D: nn.Parameter,
              dt_min: float = 1e-3, dt_max: float = 0.1) -> None:
    """S4D-real A, D = 1 and dt in [dt_min, dt_max] as in transformers' ``init_mamba_weights``."""
    with torch.no_grad():
        channels, state = A_log.shape
        A_log.copy_(torch.log(torch.arange(1, state + 1, dtype=torch.float32)).expand(channels, -1))
        D.fill_(1.0)
        std = dt_proj.weight.shape[1] ** -0.5
        dt_proj.weight.uniform_(-std, std)
        dt = torch.exp(torch.rand(channels) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=1e-4)
        dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        if conv.bias is not None:
            conv.bias.zero_()


class BiMambaMixer(nn.Module):
    """Bidirectional Mamba mixer: ``in_proj`` and ``out_proj`` shared, one SSM branch per direction.

    The forward branch uses ``conv1d, x_proj, dt_proj, A_log, D``; the flipped one the ``*_b`` twins.
    ``(B, L, H) -> (B, L, H)``.
    """

    def __init__(self, config: VisionMambaConfig):
        super().__init__()
        hidden, inner = config.hidden_size, config.expand * config.hidden_size
        rank = config.dt_rank or math.ceil(config.hidden_size / 16)
        n = config.state_size
        self.in_proj = nn.Linear(hidden, 2 * inner, bias=False)
        self.out_proj = nn.Linear(inner, hidden, bias=False)
        for suffix in ("", "_b"):
            conv = nn.Conv1d(inner, inner, config.conv_kernel, groups=inner, padding=config.conv_kernel - 1,
                             bias=config.use_conv_bias)
            x_proj = nn.Linear(inner, rank + 2 * n, bias=False)
            dt_proj = nn.Linear(rank, inner, bias=True)
            A_log = nn.Parameter(torch.empty(inner, n))
            D = nn.Parameter(torch.empty(inner))
            _init_ssm(conv, dt_proj, A_log, D)
            setattr(self, "conv1d" + suffix, conv)
            setattr(self, "x_proj" + suffix, x_proj)
            setattr(self, "dt_proj" + suffix, dt_proj)
            setattr(self, "A_log" if not suffix else "A_b_log", A_log)
            setattr(self, "D" + suffix, D)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return bimamba_mixer_forward(self, hidden_states, rules=None)


def _rms_norm(config: "VisionMambaConfig") -> nn.Module:
    from transformers.models.mamba.modeling_mamba import MambaRMSNorm

    return MambaRMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)


class VisionMambaBlock(nn.Module):
    """Pre-norm residual block: ``x + mixer(norm(x))``."""

    def __init__(self, config: VisionMambaConfig):
        super().__init__()
        self.norm = _rms_norm(config)
        self.mixer = BiMambaMixer(config)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states + self.mixer(self.norm(hidden_states))


class VisionMamba(nn.Module):
    """A small Vision Mamba classifier.

    ``pixel_values: (B, C, S, S)`` -> patches ``(B, P, H)`` + position embeddings, with a class token
    inserted at ``cls_position`` (the middle) -> bidirectional blocks -> RMSNorm -> linear head on the
    class token -> logits ``(B, num_classes)``.
    """

    kind = "vision-mamba"

    def __init__(self, config: VisionMambaConfig | None = None):
        super().__init__()
        self.config = config = config or VisionMambaConfig()
        if config.image_size % config.patch_size:
            raise ValueError("image_size must be a multiple of patch_size")
        self.patch_embed = nn.Conv2d(config.in_channels, config.hidden_size, config.patch_size,
                                     stride=config.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_patches + 1, config.hidden_size))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.layers = nn.ModuleList([VisionMambaBlock(config) for _ in range(config.num_layers)])
        self.norm_f = _rms_norm(config)
        self.head = nn.Linear(config.hidden_size, config.num_classes)

    def embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(B, C, S, S)`` -> input embeddings ``(B, P + 1, H)`` (patches, class token in the middle, positions)."""
        patches = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)  # (B, P, H)
        c = self.config.cls_position
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        seq = torch.cat([patches[:, :c], cls, patches[:, c:]], dim=1)
        return seq + self.pos_embed

    def forward_embeddings(self, embeddings: torch.Tensor) -> torch.Tensor:
        """``(B, P + 1, H)`` input embeddings -> logits ``(B, num_classes)``."""
        h = embeddings
        for layer in self.layers:
            h = layer(h)
        h = self.norm_f(h)
        return self.head(h[:, self.config.cls_position])

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``pixel_values: (B, C, S, S)`` -> logits ``(B, num_classes)``."""
        return self.forward_embeddings(self.embed(pixel_values))

    def save_pretrained(self, folder) -> Path:
        return _save(folder, {"kind": self.kind, **asdict(self.config)}, self)

    @classmethod
    def from_pretrained(cls, folder) -> "VisionMamba":
        cfg, state = _read(folder, cls.kind)
        names = {f.name for f in fields(VisionMambaConfig)}
        from core.zoo.construction import constructing

        with constructing():
            model = cls(VisionMambaConfig(**{k: v for k, v in cfg.items() if k in names}))
            model.load_state_dict(state)
        return model.eval()
