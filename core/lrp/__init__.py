"""MambaLRP (Jafari et al., 2024): relevance heatmaps for Mamba models, its baselines and metrics.

The public API: what the tab, the CLI and a notebook import, each name once, grouped by what it is for (the rest
lives in the submodules). ``explain(model, input_ids=None, pixel_values=None, target=None, method="mambalrp",
**options)`` returns an ``Explanation`` (``.relevance`` (L,) or (h, w), ``.logit``, ``.target``,
``.sequence_relevance``, ``.absorbed``); every action of the service returns a ``core.results.Result``.
"""
# (MambaLRP for Mamba, Mamba-2 and the hybrids' SSM layers; AttnLRP for attention layers and MLPs: the hybrids and the
# transformer decoders, core.lrp.adapters.FAMILIES)
# the method, its registry (name -> Method: label, fn, description, conservative, colour, options, fast_options;
# every view lists methods from it) and the rules it switches (the ablation)
from core.lrp.methods import METHODS, Method, explain
from core.lrp.context import lrp_rules
from core.lrp.rules import GAMMA_LAYERS, MAX_GAMMA, LRPRules
# one explanation traced block by block (SSM, attention, MLP), with what biases and softmaxes absorb
# (core.lrp.blocks.BLOCKS: the one registry of block rules): relevance_flow(model, ...) -> Flow
from core.lrp.flow import Flow, relevance_flow
# the embedded models' classes (SequenceClassifier: any other backbone, Mamba-2 and the hybrids)
from core.lrp.models import MambaSequenceClassifier, SequenceClassifier, VisionMamba, VisionMambaConfig
# the analyses (core.analyses.Analysis entries) and the service: one function per user action (any of it over a file
# of texts: python -m core lrp batch, core.lrp.batch; the bias audit swaps identity terms, core.lrp.bias)
from core.lrp.views import ANALYSES, MEASURED_COST, cost_note
from core.lrp.service import (agreement_result, analysis_result, bias_audit_result, committed_result, compare_result,
                              default_requests,
                              evaluation_result, example_result, flow_result, image_result, key_token_result,
                              long_range_result, precompute_bias, precompute_evaluation, precompute_examples,
                              target_choices, text_result, train_result)
# the choices and defaults the tab and the CLI offer (and a batch row's number of most relevant tokens: default, most;
# the training recipes' names and the committed evaluations' items)
from core.lrp.batch import MAX_TOP_K as BATCH_MAX_TOP_K, TOP_K as BATCH_TOP_K
from core.lrp.committed import EVALUATION_ITEMS
from core.lrp.requests import (AGREEMENT_N, COMPARE_EXAMPLES, COMPARE_MODELS, DEFAULT_METHODS, EVAL_MODELS, EVAL_N,
                               EVAL_STEPS, FLOW_EXAMPLES, FLOW_MODELS, IMAGE_MODELS, MAX_EVAL_SAMPLES, MAX_FLIP_STEPS,
                               MAX_TEXT_CHARS, MAX_TOKENS,
                               RULE_SWITCHES, TEXT_EXAMPLES, TEXT_MODELS, TOGGLES, TOP, method_choices, recipe_names)
# the views a speaker shows (core.examples; after the service they show)
from core.lrp.examples import EXAMPLE_VIEWS  # noqa: E402
from core.lrp.batch import KIND as BATCH  # its batch kind (core.batch; python -m core lrp batch)
