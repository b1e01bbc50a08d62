"""MathNeuro (Christ et al., 2024): which parameters carry math, and what happens when they change.

Every weight of every scored linear layer gets the score ``|W_ij| * sum_samples ||X_j||_2``; each
matrix keeps its ``int(numel * K)`` best scores for math inputs and for non-math inputs; the
math-specific parameters are in the math set and not in the non-math set. Pruning them removes
math ability; scaling them slightly (e.g. by 1.1) can improve it.

Public API (what the tab, the CLI, the benchmarks and the tests use; the rest lives in the submodules)
----------
identify(model, math_inputs, nonmath_inputs, proportion, method="mathneuro", seed=0)
    -> {parameter name: bool mask of the parameter's shape}
METHODS, collect, select                      the method registry; two-step use for sweeps
intervened, private_view                      interventions on a private view (the shared model is never written)
apply_intervention, intervened_copy, save_checkpoint, save_intervened_checkpoint, save_masks, load_masks,
mask_metadata                                 in-place / copied interventions and files
math_accuracy, multiple_choice_accuracy, teacher_forced_loss, token_inputs   evaluation, inputs
layer_distribution, intervention_effects, proportion_sweep, scale_factor_sweep, consistency, drill_down
                                              analyses as plain data
scored_linears, collect_column_norms, importance_scores   the scoring pieces

The service (what the tab and ``python -m core mathneuro`` call; each returns a ``core.results.Result``; inputs
are parsed once by ``core.mathneuro.requests``, views registered in ``core.mathneuro.views``):
identify_result, layer_distribution_result, effect_result, proportion_sweep_result, scale_sweep_result,
consistency_result, drill_result, matrix_choices, example_results, precompute_examples, train_demo_result;
DEFAULTS, MAX_NONMATH, SHOW, METRICS, dataset_names, DEMO_NAME; EXAMPLE_VIEWS (the views a speaker shows: core.examples)
"""
from core.mathneuro.analysis import (consistency, drill_down, intervention_effects, layer_distribution,
                                     proportion_sweep, scale_factor_sweep)
from core.mathneuro.evaluation import math_accuracy, multiple_choice_accuracy, teacher_forced_loss, token_inputs
from core.mathneuro.examples import EXAMPLE_VIEWS
from core.mathneuro.interventions import (apply_intervention, intervened, intervened_copy, load_masks, mask_metadata,
                                          save_checkpoint, save_intervened_checkpoint, save_masks)
from core.mathneuro.methods import METHODS, collect, identify, select
from core.mathneuro.recipe import DEMO_NAME
from core.mathneuro.requests import DEFAULTS, MAX_NONMATH, SHOW
from core.mathneuro.scoring import collect_column_norms, importance_scores, scored_linears
from core.mathneuro.service import (consistency_result, drill_result, effect_result, example_results,
                                    identify_result, layer_distribution_result, matrix_choices, precompute_examples,
                                    proportion_sweep_result, scale_sweep_result, train_demo_result)
from core.mathneuro.tasks import METRICS, dataset_names
from core.zoo.views import private_view

__all__ = [
    "identify", "METHODS", "collect", "select",
    "intervened", "private_view", "apply_intervention", "intervened_copy", "save_checkpoint",
    "save_intervened_checkpoint", "save_masks", "load_masks", "mask_metadata",
    "math_accuracy", "multiple_choice_accuracy", "teacher_forced_loss", "token_inputs",
    "layer_distribution", "intervention_effects", "proportion_sweep", "scale_factor_sweep", "consistency",
    "drill_down", "scored_linears", "collect_column_norms", "importance_scores",
    "identify_result", "layer_distribution_result", "effect_result", "proportion_sweep_result", "scale_sweep_result",
    "consistency_result", "drill_result", "matrix_choices", "example_results", "precompute_examples",
    "train_demo_result", "DEFAULTS", "MAX_NONMATH", "SHOW", "METRICS", "dataset_names", "DEMO_NAME", "EXAMPLE_VIEWS",
]
