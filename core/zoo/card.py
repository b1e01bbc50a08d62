"""Model cards: what a model is, where it came from, how good it is on held-out data."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class ModelCard:
    """Everything the "Models & data" tab and ``models list`` show about one model.

    ``quality`` is a measured figure on a held-out split, e.g.
    ``{"metric": "perplexity", "value": 25.8, "dataset": "wikipedia-paragraphs", "split": "test"}``.
    """

    name: str
    title: str
    kind: str  # causal-lm | sequence-classifier | image-classifier | ...
    source: str  # packaged | assets | local | hub
    origin: str  # where the weights came from (a package, a recipe, a folder, a hub id)
    license: str = ""
    parameters: int | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    quality: dict = field(default_factory=dict)
    recipe: str = ""  # the command that (re)produces the weights
    ready: bool = True
    fix: str = ""  # the command that makes a missing model ready
    model_class: str = "hf"  # "hf" (transformers Auto classes) or "core.<pkg>:<Class>" with from_pretrained(folder)
    tokenizer: str = ""  # once loaded: its size against the model's vocabulary, or why there is none

    def to_dict(self) -> dict:
        return asdict(self)

    def quality_text(self) -> str:
        q = self.quality
        if not q:
            return "not measured"
        value = q.get("value")
        value = f"{value:.4g}" if isinstance(value, float) else value
        return f"{q.get('metric', '?')} {value} on {q.get('dataset', '?')}/{q.get('split', '?')}"

    def markdown(self) -> str:
        """A human-readable card."""
        size = f"{self.size_bytes / 1e6:.1f} MB" if self.size_bytes else "?"
        params = f"{self.parameters / 1e6:.2f} M" if self.parameters else "?"
        lines = [f"### {self.title} (`{self.name}`)",
                 f"- **status**: {'ready' if self.ready else 'missing: run `' + self.fix + '`'}",
                 f"- **kind**: {self.kind}", f"- **parameters**: {params}", f"- **dtype**: {self.dtype or '?'}",
                 f"- **size on disk**: {size}", f"- **source**: {self.source}: {self.origin}",
                 f"- **quality (held-out)**: {self.quality_text()}"]
        if self.license:
            lines.append(f"- **license**: {self.license}")
        if self.tokenizer:
            lines.append(f"- **tokenizer**: {self.tokenizer}")
        if self.recipe:
            lines.append(f"- **recipe**: `{self.recipe}`")
        return "\n".join(lines)


def read_card_file(folder: Path) -> dict:
    """The ``card.json`` beside a model's weights (empty when absent)."""
    path = Path(folder) / "card.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_card_file(folder: Path, card: dict) -> None:
    from core.files import atomic_write
    atomic_write(Path(folder) / "card.json", json.dumps(card, indent=1, sort_keys=True))
