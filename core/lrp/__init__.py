"""MambaLRP (Jafari et al., 2024): relevance heatmaps for Mamba models, its baselines and metrics.

Public API (tabs and the CLI use only this)::

    explain(model, input_ids=None, pixel_values=None, target=None, method="mambalrp", **options)
        -> Explanation(.relevance (L,) or (h, w), .logit, .target, .sequence_relevance, .absorbed)
    METHODS                    the one registry: name -> Method(label, fn, description, conservative)
    LRPRules                   which rules are on (ablation); lrp_rules(model, rules) context manager
    conservation, faithfulness, flip_curves, long_range, top_k_distances, key_token_hit_rate
    evaluate, samples_for, long_range_evaluation, key_token_evaluation   dataset-level runners (JSON dicts)
    hidden_attention           alpha[t, s] of one selective scan
    MambaSequenceClassifier, VisionMamba, VisionMambaConfig
"""
from core.lrp.attention import hidden_attention
from core.lrp.context import lrp_rules
from core.lrp.evaluation import evaluate, key_token_evaluation, long_range_evaluation, samples_for
from core.lrp.methods import METHODS, Explanation, Method, explain
from core.lrp.metrics import (FlipCurves, conservation, faithfulness, flip_curves, key_token_hit_rate, long_range,
                              top_k_distances)
from core.lrp.models import MambaSequenceClassifier, VisionMamba, VisionMambaConfig
from core.lrp.rules import LRPRules

__all__ = [
    "METHODS", "Explanation", "FlipCurves", "LRPRules", "MambaSequenceClassifier", "Method", "VisionMamba",
    "VisionMambaConfig", "conservation", "evaluate", "explain", "faithfulness", "flip_curves", "hidden_attention",
    "key_token_evaluation", "key_token_hit_rate", "long_range", "long_range_evaluation", "lrp_rules",
    "samples_for", "top_k_distances",
]
