"""What the papers published, as data (never computed here): the numbers the tab and ``docs/mixln-*.md`` put beside
the project's runs, each with where it was read.

- :data:`FOLLOWUP_TABLE`  the LayerNorm Scaling paper's Table 1: perplexity of Post-LN, DeepNorm, Mix-LN, Pre-LN and
  LNS at 130 M to 1 B parameters (its 130 M and 250 M rows for the first four are the Mix-LN paper's)
- :data:`LNS_RERUN`       a third party's rerun of the LNS authors' 130 M script (quoted beside the paper's figure)
- :data:`MIXLN_71M`       the Mix-LN paper's 71 M column (the scale the project's 12-layer recipe copies)
- :data:`SIZES`           the model sizes: parameters, layers, width, training tokens
- :func:`published_rows`  one row per placement and size, for tables
"""
from __future__ import annotations

# Sun, Song, Li, Yin, Zheng, Liu, "The Curse of Depth in Large Language Models", arXiv 2502.05795 (NeurIPS 2025),
# Table 1 (LLaMA models trained on C4; perplexity, lower is better); read from the table image the authors'
# repository shows (lmsdss/LayerNorm-Scaling, images/results.png, commit 3ac54dd).
FOLLOWUP_SOURCE = ("Sun et al. 2025, The Curse of Depth in LLMs (arXiv 2502.05795), Table 1; the same table is "
                   "images/results.png in github.com/lmsdss/LayerNorm-Scaling")
SIZES = {  # name -> layers, width (the authors' configs/llama_*.json), training tokens (the LNS Table 1; 71 M: the
    # Mix-LN authors' scripts/run_71m.sh, 10,000 steps of 512 x 256 tokens)
    "71M": {"layers": 12, "width": 512, "tokens": "1.3B"},
    "130M": {"layers": 12, "width": 768, "tokens": "2.2B"},
    "250M": {"layers": 24, "width": 768, "tokens": "3.9B"},
    "350M": {"layers": 24, "width": 1024, "tokens": "6.0B"},
    "1B": {"layers": 24, "width": 2048, "tokens": "8.9B"},
}
FOLLOWUP_TABLE = {  # placement (registry name) -> size -> perplexity
    "post": {"130M": 26.95, "250M": 1409.79, "350M": 1368.33, "1B": 1390.75},
    "deepnorm": {"130M": 27.17, "250M": 22.77, "350M": 1362.59, "1B": 1409.08},
    "mix": {"130M": 26.07, "250M": 21.39, "350M": 1363.21, "1B": 1414.78},
    "pre": {"130M": 26.73, "250M": 21.92, "350M": 19.58, "1B": 17.02},
    "lns": {"130M": 25.76, "250M": 20.35, "350M": 18.20, "1B": 15.71},
}
# A third party's rerun of the LNS authors' 130M script (`bash run_130m.sh LNS 3`, 20,000 steps: 2.08 B tokens, which
# the authors say is what they trained): final validation loss 3.26633, perplexity 26.215, against the paper's 25.76
# (github.com/lmsdss/LayerNorm-Scaling, issue 5, comment of 2025-07-08)
LNS_RERUN = {"130M": 26.215, "where": "lmsdss/LayerNorm-Scaling issue 5"}
# Li, Yin, Liu, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN" (ICLR 2025,
# arXiv 2412.13795), Table 1, LLaMA-71M (12 layers, width 512): the recipe the committed runs copy. DeepNorm is the
# authors' NORM_TYPE=deeppost (their constants, the project's "deepnorm").
MIXLN_SOURCE = "Li, Yin and Liu 2025, Mix-LN (arXiv 2412.13795), Table 1, LLaMA-71M"
MIXLN_71M = {"post": 35.18, "deepnorm": 34.87, "mix": 33.12, "pre": 34.77}
# a published perplexity above this is a run that diverged (the authors print the perplexity it ended at)
DIVERGED_PPL = 1000.0


def published_rows() -> list[dict]:
    """One row per placement: its label and its published perplexity per size (71 M from the Mix-LN paper, 130 M to
    1 B from the LNS paper; None where the paper has no number), and which sizes diverged."""
    from core.mixln.placements import placement_label
    rows = []
    for name in dict.fromkeys([*MIXLN_71M, *FOLLOWUP_TABLE]):
        ppl = {"71M": MIXLN_71M.get(name), **FOLLOWUP_TABLE.get(name, {})}
        rows.append({"placement": name, "label": placement_label(name), **{size: ppl.get(size) for size in SIZES},
                     "diverged": [s for s, v in ppl.items() if v is not None and v > DIVERGED_PPL]})
    return rows
