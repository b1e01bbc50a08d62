"""Mix-LN (Li, Yin, Liu, 2024): a LLaMA-style decoder with Pre-LN, Post-LN, Mix-LN, DeepNorm or
Sandwich-LN norm placement, its training loop, and layer diagnostics that also work on transformers
causal LMs.

The public API: what the tab, the CLI and a notebook import, each name once, grouped by what it is for (the rest
lives in the submodules; everything about the committed runs: :mod:`core.mixln.runs`). Training reports through
``progress(fraction, message)`` and stops on :class:`core.errors.Cancelled`; every action of the service returns a
``core.results.Result``.
"""
# the model (save_pretrained / from_pretrained)
from core.mixln.config import DEEPNORM_FORMULAS, NORMS, MixLNConfig, estimate_memory_bytes
from core.mixln.model import MixLNForCausalLM
# training: a generator of events, a whole run, a run folder (data-parallel under torchrun)
from core.mixln.train import TrainConfig, check_world, latest_checkpoint, lr_at, train, train_iter
from core.mixln.launch import dist_info, train_run
# diagnostics (also for transformers causal LMs)
from core.mixln.diagnostics import (angular_distance, angular_distance_heatmap, evaluate_loss, find_decoder_layers,
                                    hidden_states_of, layer_gradient_norms, layer_removal, mean_angular_distance,
                                    skip_layer)
# the norm placements: the registry (label, colour, formula, alpha) and its views
from core.mixln.placements import PLACEMENTS, Placement, placement_choices, placement_colour, placement_label
# the committed runs
from core.mixln.recipe import (ASSETS as RUNS_DIR, RECIPE, RECIPE_MODEL, RECIPE_TRAIN, RUN_SETS, recipe_command,
                               recipe_jobs)
from core.mixln.folders import RUN_REFERENCES, committed_runs, list_runs, resolve_run
from core.mixln.summary import compare_table
from core.mixln.retrain import record_prefixes  # the committed runs' float64 prefixes recorded again
# what the actions take
from core.mixln.requests import (CURVE_SETS, DEFAULT_RUNS, GRADIENT_KINDS, METRICS, POSITIONS, LiveRequest,
                                 set_choices)
# the analyses (core.analyses.Analysis entries) and the service: one function per user action
from core.mixln.views import ANALYSES, settings_text
from core.mixln.service import (analysis_result, angular_distance_result, compare_result, curves_result,
                                depth_result, gradnorms_result, layer_removal_result, live_run, loss_result,
                                lr_sweep_result, model_gradnorms_result, reference_result, reproduce_result,
                                reproduces_result, sweep_result, train_result, write_run_diagnostics)
# the views a speaker shows (core.examples)
from core.mixln.examples import EXAMPLE_VIEWS
