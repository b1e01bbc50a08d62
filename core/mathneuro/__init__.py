"""MathNeuro (Christ et al., 2024): which parameters carry math, and what happens when they change.

Every weight of every scored linear layer gets the score ``|W_ij| * sum_samples ||X_j||_2``; each
matrix keeps its ``int(numel * K)`` best scores for math inputs and for non-math inputs; the
math-specific parameters are in the math set and not in the non-math set. Pruning them removes
math ability; scaling them slightly (e.g. by 1.1) can improve it.

The public API: what the tab, the CLI, the benchmarks and a notebook import, each name once, grouped by what it is
for (the rest lives in the submodules). ``identify(model, math_inputs, nonmath_inputs, proportion,
method="mathneuro", seed=0)`` returns ``{parameter name: bool mask of the parameter's shape}``; every action of the
service returns a ``core.results.Result`` (inputs parsed once by ``core.mathneuro.requests``).
"""
# the method registry, and its two steps (statistics, then masks) for sweeps
from core.mathneuro.methods import METHODS, collect, identify, select
# interventions: on a private view (the shared model is never written), in place, copied, and their files
from core.mathneuro.interventions import (apply_intervention, intervened, intervened_copy, load_masks, mask_metadata,
                                          save_checkpoint, save_intervened_checkpoint, save_masks)
from core.zoo.views import private_view
# evaluation and inputs; the analyses as plain data; the scoring pieces
from core.mathneuro.evaluation import math_accuracy, multiple_choice_accuracy, teacher_forced_loss, token_inputs
from core.mathneuro.analysis import (consistency, drill_down, intervention_effects, layer_distribution,
                                     proportion_sweep, scale_factor_sweep)
from core.mathneuro.scoring import collect_column_norms, importance_scores, scored_linears
# the analyses (core.analyses.Analysis entries) and the service: one function per user action
from core.mathneuro.views import ANALYSES
from core.mathneuro.service import (analysis_result, consistency_result, drill_result, effect_result,
                                    example_results, identify_result, layer_distribution_result, matrix_choices,
                                    precompute_examples, proportion_sweep_result, scale_sweep_result,
                                    train_demo_result)
# the choices and defaults the tab and the CLI offer; the embedded model
from core.mathneuro.requests import DEFAULTS, MAX_NONMATH, SHOW
from core.mathneuro.tasks import METRICS, dataset_names
from core.mathneuro.recipe import DEMO_NAME
# the views a speaker shows (core.examples)
from core.mathneuro.examples import EXAMPLE_VIEWS
from core.mathneuro.batch import KIND as BATCH  # its batch kind (core.batch; python -m core mathneuro batch)
