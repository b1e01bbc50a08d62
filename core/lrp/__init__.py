"""MambaLRP (Jafari et al., 2024): relevance heatmaps for Mamba models, its baselines and metrics.

Public API (tabs, the CLI and notebooks use only this)::

    explain(model, input_ids=None, pixel_values=None, target=None, method="mambalrp", **options)
        -> Explanation(.relevance (L,) or (h, w), .logit, .target, .sequence_relevance, .absorbed)
    METHODS, Method            the one registry of methods: name -> Method(label, fn, description, conservative,
                               colour, options, fast_options); every view lists methods from it
    LRPRules                   which rules are on (ablation), LRPRules.from_toggles(...); lrp_rules(model, rules)
    relevance_flow(model, input_ids=None, target=None, rules=None) -> Flow(.relevance, .blocks, .absorbed, .residual)
                               one explanation traced block by block (SSM, attention, MLP), with what biases and
                               softmaxes absorb (core.lrp.blocks.BLOCKS: the one registry of block rules)
    MambaSequenceClassifier, SequenceClassifier (any other backbone: Mamba-2, the hybrids), VisionMamba,
    VisionMambaConfig

The service (each action returns a ``core.results.Result``; :mod:`core.lrp.service`)::

    text_result, image_result, flow_result, evaluation_result, long_range_result, key_token_result, analysis_result,
    committed_result, example_result, target_choices, train_result, precompute_examples, precompute_evaluation,
    default_requests, bias_audit_result (identity terms swapped, core.lrp.bias), precompute_bias
    python -m core lrp batch: any of it over a file of texts (core.lrp.batch, core.batch); BATCH_TOP_K, BATCH_MAX_TOP_K
    (the most relevant tokens a batch row lists: default, most)

The choices and defaults the tab and the CLI offer (:mod:`core.lrp.requests`, :mod:`core.lrp.views`)::

    TEXT_MODELS, IMAGE_MODELS, EVAL_MODELS, FLOW_MODELS, FLOW_EXAMPLES, DEFAULT_METHODS, TEXT_EXAMPLES, TOP,
    RULE_SWITCHES, TOGGLES, GAMMA_LAYERS, MAX_GAMMA, MAX_TOKENS, MAX_TEXT_CHARS, EVAL_N, EVAL_STEPS,
    MAX_EVAL_SAMPLES, MAX_FLIP_STEPS, method_choices, recipe_names, EVALUATION_ITEMS, MEASURED_COST, cost_note,
    EXAMPLE_VIEWS (the views a speaker shows: core.examples)
"""
from core.lrp.batch import MAX_TOP_K as BATCH_MAX_TOP_K, TOP_K as BATCH_TOP_K
from core.lrp.context import lrp_rules
from core.lrp.flow import Flow, relevance_flow
from core.lrp.methods import METHODS, Method, explain
from core.lrp.models import MambaSequenceClassifier, SequenceClassifier, VisionMamba, VisionMambaConfig
from core.lrp.requests import (DEFAULT_METHODS, EVAL_MODELS, EVAL_N, EVAL_STEPS, FLOW_EXAMPLES, FLOW_MODELS,
                               IMAGE_MODELS, MAX_EVAL_SAMPLES,
                               MAX_FLIP_STEPS, MAX_TEXT_CHARS, MAX_TOKENS, RULE_SWITCHES, TEXT_EXAMPLES, TEXT_MODELS,
                               TOGGLES, TOP, method_choices, recipe_names)
from core.lrp.rules import GAMMA_LAYERS, MAX_GAMMA, LRPRules
from core.lrp.committed import EVALUATION_ITEMS
from core.lrp.service import (analysis_result, bias_audit_result, committed_result, default_requests,
                              evaluation_result, example_result, flow_result, image_result, key_token_result,
                              long_range_result, precompute_bias, precompute_evaluation, precompute_examples,
                              target_choices, text_result, train_result)
from core.lrp.views import MEASURED_COST, cost_note
from core.lrp.examples import EXAMPLE_VIEWS  # noqa: E402  (after the service it shows)

__all__ = [
    "explain", "METHODS", "Method", "LRPRules", "lrp_rules", "relevance_flow", "Flow", "MambaSequenceClassifier",
    "SequenceClassifier", "VisionMamba", "VisionMambaConfig", "text_result", "image_result", "flow_result",
    "evaluation_result", "long_range_result", "key_token_result", "analysis_result", "committed_result",
    "example_result", "target_choices", "train_result", "precompute_examples", "precompute_evaluation",
    "default_requests", "bias_audit_result", "precompute_bias", "BATCH_TOP_K", "BATCH_MAX_TOP_K", "TEXT_MODELS",
    "IMAGE_MODELS", "EVAL_MODELS", "FLOW_MODELS", "FLOW_EXAMPLES", "DEFAULT_METHODS", "TEXT_EXAMPLES", "TOP",
    "RULE_SWITCHES", "TOGGLES", "GAMMA_LAYERS", "MAX_GAMMA", "MAX_TOKENS", "MAX_TEXT_CHARS", "EVAL_N", "EVAL_STEPS",
    "MAX_EVAL_SAMPLES", "MAX_FLIP_STEPS", "method_choices", "recipe_names", "EVALUATION_ITEMS", "MEASURED_COST",
    "cost_note", "EXAMPLE_VIEWS"
]
