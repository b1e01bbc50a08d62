"""MambaLRP (Jafari et al., 2024): relevance heatmaps for Mamba models, its baselines and metrics.

Public API (tabs and the CLI use only this)::

    explain(model, input_ids=None, pixel_values=None, target=None, method="mambalrp", **options)
        -> Explanation(.relevance (L,) or (h, w), .logit, .target, .sequence_relevance, .absorbed)
    METHODS                    the one registry: name -> Method(label, fn, description, conservative, colour,
                               options, fast_options); every view lists methods from it
    LRPRules                   which rules are on (ablation), LRPRules.from_toggles(...); lrp_rules(model, rules)
    conservation, faithfulness, flip_curves, long_range, top_k_distances, key_token_hit_rate
    evaluate, samples_for, long_range_evaluation, key_token_evaluation   dataset-level runners (JSON dicts)
    hidden_attention           alpha[t, s] of one selective scan
    MambaSequenceClassifier, VisionMamba, VisionMambaConfig

The service (what the tab and ``python -m core lrp`` call; each returns a ``core.runner.Result``)::

    text_result, image_result, target_choices, evaluation_result, long_range_result, key_token_result,
    committed_result, example_result, train_result, precompute_examples, precompute_evaluation,
    method_choices, TEXT_MODELS, IMAGE_MODELS, EVAL_MODELS, DEFAULT_METHODS, TEXT_EXAMPLES, MAX_TOKENS, GAMMA_LAYERS,
    MAX_GAMMA, MAX_TEXT_CHARS, MEASURED_COST, cost_note
"""
from core.lrp.attention import hidden_attention
from core.lrp.context import lrp_rules
from core.lrp.evaluation import evaluate, key_token_evaluation, long_range_evaluation, samples_for
from core.lrp.methods import METHODS, Explanation, Method, explain
from core.lrp.metrics import (FlipCurves, conservation, faithfulness, flip_curves, key_token_hit_rate, long_range,
                              top_k_distances)
from core.lrp.models import MambaSequenceClassifier, VisionMamba, VisionMambaConfig
from core.lrp.rules import GAMMA_LAYERS, MAX_GAMMA, LRPRules
from core.lrp.service import (DEFAULT_METHODS, EVAL_MODELS, IMAGE_MODELS, MAX_TEXT_CHARS, MAX_TOKENS, MEASURED_COST,
                              TEXT_EXAMPLES,
                              TEXT_MODELS, committed_result, cost_note, default_requests, evaluation_result, example_result, image_result,
                              key_token_result, long_range_result, method_choices, precompute_evaluation,
                              precompute_examples, target_choices, text_result, train_result)

__all__ = [
    "METHODS", "Explanation", "FlipCurves", "LRPRules", "MambaSequenceClassifier", "Method", "VisionMamba",
    "VisionMambaConfig", "conservation", "evaluate", "explain", "faithfulness", "flip_curves", "hidden_attention",
    "key_token_evaluation", "key_token_hit_rate", "long_range", "long_range_evaluation", "lrp_rules",
    "samples_for", "top_k_distances",
    "text_result", "image_result", "target_choices", "evaluation_result", "long_range_result", "key_token_result",
    "committed_result", "example_result", "train_result", "precompute_examples", "precompute_evaluation",
    "default_requests", "method_choices", "TEXT_MODELS", "IMAGE_MODELS", "EVAL_MODELS", "DEFAULT_METHODS",
    "TEXT_EXAMPLES", "MAX_TOKENS", "GAMMA_LAYERS", "MAX_GAMMA", "MAX_TEXT_CHARS", "MEASURED_COST", "cost_note",
]

from core.lrp.examples import EXAMPLE_VIEWS  # noqa: E402  (the views a speaker shows: core.examples)

__all__ += ["EXAMPLE_VIEWS"]
