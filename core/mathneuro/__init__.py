"""MathNeuro (Christ et al., 2024): which parameters carry math, and what happens when they change.

Every weight of every scored linear layer gets the score ``|W_ij| * sum_samples ||X_j||_2``; each
matrix keeps its ``int(numel * K)`` best scores for math inputs and for non-math inputs; the
math-specific parameters are in the math set and not in the non-math set. Pruning them removes
math ability; scaling them slightly (e.g. by 1.1) can improve it.

Public API
----------
identify(model, math_inputs, nonmath_inputs, proportion, method="mathneuro", seed=0)
    -> {parameter name: bool mask of the parameter's shape}
METHODS, get_method, collect, select          the method registry; two-step use for sweeps
intervened, intervened_view, private_view     interventions on a private view (the shared model is never written)
apply_intervention, intervened_copy, save_checkpoint, save_intervened_checkpoint,
save_masks, load_masks, mask_metadata, MODES  in-place / copied interventions and files
math_accuracy, multiple_choice_accuracy, teacher_forced_loss, evaluator, token_inputs   evaluation, inputs
layer_distribution, intervention_effects, proportion_sweep, scale_factor_sweep, consistency,
drill_down, selection_summary, overlap        analyses as plain data
scored_linears, collect_column_norms, importance_scores, top_share_mask   the scoring pieces

The service (what the tab and ``python -m core mathneuro`` call; each returns a ``core.runner.Result``):
identify_result, layer_distribution_result, effect_result, proportion_sweep_result, scale_sweep_result,
consistency_result, drill_result, matrix_names, example_results, precompute_examples, train_demo_result, DEFAULTS,
dataset_names, METRICS, DEMO_NAME; ``train_demo`` (the embedded model's recipe)
"""
from core.mathneuro.analysis import (consistency, drill_down, intervention_effects, layer_distribution, module_kind,
                                     overlap, proportion_sweep, scale_factor_sweep, selection_summary)
from core.mathneuro.evaluation import (extract_answer, math_accuracy, math_prompt, multiple_choice_accuracy,
                                       teacher_forced_loss, evaluator, sample_text, token_inputs)
from core.mathneuro.interventions import (MODES, Restore, apply_intervention, intervened, intervened_copy,
                                          intervened_view, load_masks, mask_metadata, save_checkpoint,
                                          save_intervened_checkpoint, save_masks)
from core.mathneuro.methods import METHODS, Masks, Method, Statistics, collect, get_method, identify, select
from core.mathneuro.scoring import (ColumnNorms, collect_column_norms, importance_scores, scored_linears,
                                    top_share_mask)
from core.zoo.views import private_view

__all__ = [
    "identify", "METHODS", "Method", "Masks", "Statistics", "get_method", "collect", "select",
    "MODES", "Restore", "apply_intervention", "intervened", "intervened_view", "private_view", "intervened_copy",
    "save_checkpoint",
    "save_intervened_checkpoint", "save_masks", "load_masks", "mask_metadata",
    "math_accuracy", "multiple_choice_accuracy", "teacher_forced_loss", "evaluator", "extract_answer", "math_prompt",
    "sample_text", "token_inputs",
    "layer_distribution", "intervention_effects", "proportion_sweep", "scale_factor_sweep", "consistency",
    "drill_down", "selection_summary", "overlap", "module_kind",
    "ColumnNorms", "collect_column_norms", "importance_scores", "scored_linears", "top_share_mask",
]

from core.mathneuro.recipe import DEMO_NAME, train_demo  # noqa: E402
from core.mathneuro.service import (DEFAULTS, analysis_view, consistency_result, drill_result,  # noqa: E402
                                    effect_result, example_results, identify_result, layer_distribution_result,
                                    matrix_names, precompute_examples, proportion_sweep_result, scale_sweep_result,
                                    train_demo_result)
from core.mathneuro.tasks import METRICS, dataset_names  # noqa: E402

__all__ += ["DEFAULTS", "consistency_result", "drill_result", "effect_result", "identify_result",
            "layer_distribution_result", "proportion_sweep_result", "scale_sweep_result", "matrix_names",
            "example_results", "analysis_view", "precompute_examples", "train_demo_result", "METRICS",
            "dataset_names", "DEMO_NAME", "train_demo"]

from core.mathneuro.examples import EXAMPLE_VIEWS  # noqa: E402  (the views a speaker shows: core.examples)

__all__ += ["EXAMPLE_VIEWS"]
