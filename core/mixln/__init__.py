"""Mix-LN (Li, Yin, Liu, 2024): a LLaMA-style decoder with Pre-LN, Post-LN, Mix-LN, DeepNorm or
Sandwich-LN norm placement, its training loop, and layer diagnostics that also work on transformers
causal LMs.

Public API (tabs and the CLI use only this):

- the model: :class:`MixLNConfig`, :class:`MixLNForCausalLM` (``save_pretrained`` / ``from_pretrained``), ``NORMS``,
  ``DEEPNORM_FORMULAS``, :func:`estimate_memory_bytes`
- training: :class:`TrainConfig`, :func:`train_iter` (a generator of events), :func:`train`, :func:`lr_at`,
  :func:`latest_checkpoint`; :func:`train_run` trains a run folder (data-parallel under torchrun:
  :func:`dist_info`, :func:`check_world`); progress through ``progress(fraction, message)``, stopped by
  :class:`core.errors.Cancelled`
- diagnostics: :func:`layer_gradient_norms`, :func:`angular_distance`, :func:`mean_angular_distance`,
  :func:`angular_distance_heatmap`, :func:`layer_removal`, :func:`evaluate_loss`, :func:`skip_layer`,
  :func:`hidden_states_of`, :func:`find_decoder_layers`
- the norm placements: :data:`PLACEMENTS` (label, colour, formula, alpha), :class:`Placement`,
  :func:`placement_choices`, :func:`placement_label`, :func:`placement_colour`
- the committed runs: :data:`RECIPE`, :data:`RECIPE_MODEL`, :data:`RECIPE_TRAIN`, :data:`RUN_SETS`, :data:`RUNS_DIR`,
  :func:`recipe_jobs`, :func:`recipe_command`, :func:`list_runs`, :func:`resolve_run`, :func:`compare_table`
  (everything about them: :mod:`core.mixln.runs`)
- what the actions take (:mod:`core.mixln.requests`): :data:`DEFAULT_RUNS`, :data:`GRADIENT_KINDS`,
  :data:`CURVE_SETS`, :func:`set_choices`, :data:`METRICS`, :data:`POSITIONS`, :class:`LiveRequest` (its defaults)
- the service (what the tab and ``python -m core mixln`` call; each returns a ``core.results.Result``):
  :func:`loss_result`, :func:`gradnorms_result`, :func:`compare_result`, :func:`sweep_result`,
  :func:`curves_result`, :func:`lr_sweep_result`, :func:`depth_result`, :func:`settings_text`,
  :func:`angular_distance_result`, :func:`layer_removal_result`, :func:`model_gradnorms_result`, :func:`live_run`,
  :func:`train_result`, :func:`reproduce_result`, :func:`reproduces_result` (what reproduces), :func:`reference_result`,
  :func:`write_run_diagnostics`
- :data:`EXAMPLE_VIEWS`: the views a speaker shows (:mod:`core.examples`)
"""
from core.mixln.config import DEEPNORM_FORMULAS, NORMS, MixLNConfig, estimate_memory_bytes
from core.mixln.diagnostics import (angular_distance, angular_distance_heatmap, evaluate_loss, find_decoder_layers,
                                    hidden_states_of, layer_gradient_norms, layer_removal, mean_angular_distance,
                                    skip_layer)
from core.mixln.model import MixLNForCausalLM
from core.mixln.train import TrainConfig, check_world, latest_checkpoint, lr_at, train, train_iter
from core.mixln.placements import PLACEMENTS, Placement, placement_choices, placement_colour, placement_label
from core.mixln.recipe import (ASSETS as RUNS_DIR, RECIPE, RECIPE_MODEL, RECIPE_TRAIN, RUN_SETS, recipe_command,
                               recipe_jobs)
from core.mixln.folders import list_runs, resolve_run
from core.mixln.launch import dist_info, train_run
from core.mixln.summary import compare_table
from core.mixln.requests import (CURVE_SETS, DEFAULT_RUNS, GRADIENT_KINDS, METRICS, POSITIONS, LiveRequest,
                                 set_choices)
from core.mixln.views import settings_text
from core.mixln.service import (angular_distance_result, compare_result, curves_result, depth_result,
                                gradnorms_result, layer_removal_result, live_run, loss_result, lr_sweep_result,
                                model_gradnorms_result, reference_result, reproduce_result, reproduces_result,
                                sweep_result, train_result, write_run_diagnostics)
from core.mixln.examples import EXAMPLE_VIEWS

__all__ = [
    # the model
    "MixLNConfig", "MixLNForCausalLM", "NORMS", "DEEPNORM_FORMULAS", "estimate_memory_bytes",
    # training
    "TrainConfig", "train_iter", "train", "lr_at", "latest_checkpoint", "train_run", "dist_info", "check_world",
    # diagnostics
    "layer_gradient_norms", "angular_distance", "mean_angular_distance", "angular_distance_heatmap", "layer_removal",
    "evaluate_loss", "skip_layer", "hidden_states_of", "find_decoder_layers",
    # norm placements
    "PLACEMENTS", "Placement", "placement_choices", "placement_label", "placement_colour",
    # committed runs
    "RECIPE", "RECIPE_MODEL", "RECIPE_TRAIN", "RUN_SETS", "RUNS_DIR", "recipe_jobs", "recipe_command", "list_runs",
    "resolve_run", "compare_table",
    # what the actions take
    "DEFAULT_RUNS", "GRADIENT_KINDS", "CURVE_SETS", "set_choices", "METRICS", "POSITIONS", "LiveRequest",
    # the service
    "loss_result", "gradnorms_result", "compare_result", "sweep_result", "curves_result", "lr_sweep_result",
    "depth_result", "settings_text", "angular_distance_result", "layer_removal_result", "model_gradnorms_result",
    "live_run", "train_result", "reproduce_result", "reproduces_result", "reference_result", "write_run_diagnostics",
    "EXAMPLE_VIEWS",
]
