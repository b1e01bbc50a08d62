"""Mix-LN (Li, Yin, Liu, 2024): a LLaMA-style decoder with Pre-LN, Post-LN, Mix-LN, DeepNorm or
Sandwich-LN norm placement, its training loop, and layer diagnostics that also work on transformers
causal LMs.

Public API (tabs and the CLI use only this):

- :class:`MixLNConfig`, :class:`MixLNForCausalLM` (``save_pretrained`` / ``from_pretrained``), ``NORMS``
- :class:`TrainConfig`, :func:`train_iter` (a generator of :class:`TrainEvent`), :func:`train`,
  :class:`TrainHistory`, :func:`lr_at`, :func:`latest_checkpoint`
- :func:`layer_gradient_norms`, :func:`angular_distance`, :func:`mean_angular_distance`,
  :func:`angular_distance_heatmap`, :func:`layer_removal`, :func:`evaluate_loss`, :func:`skip_layer`,
  :func:`hidden_states_of`, :func:`find_decoder_layers`
- :data:`DIAGNOSTICS`: the registry of diagnostics by name
- :func:`estimate_memory_bytes`, :func:`check_fits`
- data pipeline (:mod:`core.mixln.data`): :func:`train_tokenizer`, :func:`load_tokenizer`, :func:`encode_stream`,
  :func:`pack`, :func:`prepare_corpus`
- runs (:mod:`core.mixln.runs`): :func:`train_run`, :func:`train_run_iter`, :func:`reproduce`, :data:`RECIPE`,
  :data:`RUN_SETS`, :func:`list_runs`, :func:`load_run`, :func:`evaluate_run`, :func:`compare_table`,
  :func:`sweep_table`
- summaries over seeds (:mod:`core.mixln.summary`): :func:`seed_table`, :func:`loss_bands`, :func:`lr_sweep_table`,
  :func:`depth_profiles`
- results as JSON dicts (:mod:`core.mixln.analysis`): :func:`angular_result`, :func:`removal_result`,
  :func:`gradnorm_result`, :func:`run_gradnorms`, :func:`write_run_diagnostics`
- :data:`PLACEMENTS`: the registry of norm placements (label, colour, formula, alpha), :func:`placement_choices`,
  :func:`placement_label`, :func:`placement_colour`
- the service (what the tab and ``python -m core mixln`` call; each returns a ``core.runner.Result``):
  :func:`loss_result`, :func:`gradnorms_result`, :func:`compare_result`, :func:`sweep_result`,
  :func:`curves_result`, :func:`lr_sweep_result`, :func:`depth_result`, :func:`settings_text`,
  :func:`angular_distance_result`, :func:`layer_removal_result`, :func:`model_gradnorms_result`, :func:`live_run`,
  :func:`train_result`, :func:`reproduce_result`, :data:`DEFAULT_RUNS`
"""
from core.mixln.config import (DEEPNORM_FORMULAS, NORMS, MixLNConfig, available_memory_bytes, check_fits,
                               estimate_memory_bytes)
from core.mixln.diagnostics import (AngularHeatmap, LayerGradNorms, LayerRemovalResult, angular_distance,
                                    angular_distance_heatmap, evaluate_loss, find_decoder_layers, hidden_states_of,
                                    layer_gradient_norms, layer_removal, mean_angular_distance, skip_layer)
from core.mixln.model import CausalLMOutput, MixLNForCausalLM, causal_lm_loss
from core.mixln.train import (TrainConfig, TrainEvent, TrainHistory, latest_checkpoint, lr_at, save_checkpoint,
                              train, train_iter)
from core.mixln.data import encode_stream, load_tokenizer, pack, prepare_corpus, train_tokenizer
from core.mixln.runs import (ASSETS as RUNS_DIR, LIVE_MODEL, LIVE_TRAIN, RECIPE, RECIPE_MODEL, RECIPE_TRAIN,
                             RUN_SETS, compare_table, evaluate_run, list_runs, load_run, recipe_command, recipe_jobs,
                             reproduce, resolve_run, sweep_table, train_run, train_run_iter)
from core.mixln.summary import depth_profiles, loss_bands, lr_sweep_table, seed_table  # noqa: E402
from core.mixln.analysis import (angular_result, gradnorm_result, removal_result, run_gradnorms,  # noqa: E402
                                 write_run_diagnostics)
from core.mixln.placements import (PLACEMENTS, Placement, placement_choices, placement_colour,  # noqa: E402
                                   placement_label)
from core.mixln.service import (DEFAULT_RUNS, angular_distance_result, compare_result, curves_result,  # noqa: E402
                                depth_result, gradnorms_result, layer_removal_result, live_run, loss_result,
                                lr_sweep_result, model_gradnorms_result, reference_result, reproduce_result,
                                settings_text, sweep_result, train_result)

# The diagnostics a view can list: name -> callable(model, tokens, ...).
DIAGNOSTICS = {
    "gradient-norms": layer_gradient_norms,
    "angular-distance": mean_angular_distance,
    "layer-removal": layer_removal,
}

__all__ = ["NORMS", "DEEPNORM_FORMULAS", "MixLNConfig", "MixLNForCausalLM", "CausalLMOutput", "causal_lm_loss", "TrainConfig",
           "TrainEvent", "TrainHistory", "train", "train_iter", "lr_at", "save_checkpoint", "latest_checkpoint",
           "layer_gradient_norms", "LayerGradNorms", "angular_distance", "mean_angular_distance",
           "angular_distance_heatmap", "AngularHeatmap", "layer_removal", "LayerRemovalResult", "evaluate_loss",
           "skip_layer", "hidden_states_of", "find_decoder_layers", "DIAGNOSTICS", "estimate_memory_bytes",
           "check_fits", "available_memory_bytes", "train_tokenizer", "load_tokenizer", "encode_stream", "pack",
           "prepare_corpus", "RECIPE", "RUN_SETS", "seed_table", "loss_bands", "lr_sweep_table", "depth_profiles",
           "train_run", "train_run_iter", "reproduce", "list_runs", "load_run",
           "evaluate_run", "compare_table", "sweep_table", "angular_result", "removal_result", "gradnorm_result",
           "run_gradnorms", "write_run_diagnostics", "RUNS_DIR", "LIVE_MODEL", "LIVE_TRAIN", "RECIPE_MODEL",
           "RECIPE_TRAIN", "recipe_command", "resolve_run", "PLACEMENTS", "Placement", "placement_choices",
           "placement_colour", "placement_label", "DEFAULT_RUNS", "loss_result", "gradnorms_result", "compare_result",
           "sweep_result", "angular_distance_result", "layer_removal_result", "model_gradnorms_result", "live_run",
           "train_result", "reproduce_result", "reference_result", "recipe_jobs", "curves_result", "lr_sweep_result",
           "depth_result", "settings_text"]

# Data-parallel launches: (world size, global rank, local rank) from torchrun / accelerate launch.
from core.mixln.runs import _dist_info as dist_info  # noqa: E402
from core.mixln.train import check_world  # noqa: E402

__all__ += ["dist_info", "check_world"]

from core.mixln.examples import EXAMPLE_VIEWS  # noqa: E402  (the views a speaker shows: core.examples)

__all__ += ["EXAMPLE_VIEWS"]
