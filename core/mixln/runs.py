"""The committed Mix-LN runs in one namespace (``from core.mixln import runs``: notebooks, tests, bench scripts).

Each name lives in the module that does its one job; this module only gathers them:

- :mod:`core.mixln.recipe`   the recipe: settings, placements (:data:`RECIPE`), run sets, :class:`Job`
- :mod:`core.mixln.launch`   :func:`train_run` / :func:`train_run_iter`: train one run into a folder (DDP included)
- :mod:`core.mixln.retrain`  :func:`reproduce` / :func:`train_job`: retrain the committed runs and store them compact
- :mod:`core.mixln.folders`  :func:`list_runs`, :func:`load_run`, :func:`evaluate_run`, ...: read run folders
- :mod:`core.mixln.summary`  :func:`compare_table`, :func:`sweep_table` and the other summaries over seeds
"""
from core.mixln.folders import (Run, eval_tokens_of, evaluate_run, list_runs, load_run, resolve_run, run_model,
                                run_tokenizer, sample_windows, tokenizer_file, weights_fingerprint)
from core.mixln.launch import build_model, dist_info, run_settings, train_run, train_run_iter
from core.mixln.recipe import (ASSETS, LIVE_MODEL, LIVE_TRAIN, LR_SWEEP, PENDING, RECIPE, RECIPE_DEVIATIONS,
                               RECIPE_MODEL, RECIPE_TRAIN, RUN_SETS, SEEDS, SWEEP, Job, RunSet, recipe_command,
                               recipe_jobs, recipe_label)
from core.mixln.retrain import (CHECK_STEPS, HISTORY_EVERY_STEP, HISTORY_STRIDE, compact_run, float64_prefix,
                                prefix_change, prefix_changes, record_prefixes, reproduce, thin_history, train_job)
from core.mixln.summary import compare_table, sweep_table

__all__ = ["Run", "eval_tokens_of", "evaluate_run", "list_runs", "load_run", "resolve_run", "run_model",
           "run_tokenizer", "sample_windows", "tokenizer_file", "weights_fingerprint", "build_model", "dist_info",
           "run_settings", "train_run", "train_run_iter", "ASSETS", "LIVE_MODEL", "LIVE_TRAIN", "LR_SWEEP", "PENDING", "RECIPE",
           "RECIPE_DEVIATIONS", "RECIPE_MODEL", "RECIPE_TRAIN", "RUN_SETS", "SEEDS", "SWEEP", "Job", "RunSet",
           "recipe_command", "recipe_jobs", "recipe_label", "CHECK_STEPS", "HISTORY_EVERY_STEP", "HISTORY_STRIDE",
           "compact_run", "float64_prefix", "prefix_change", "prefix_changes", "record_prefixes", "reproduce", "thin_history", "train_job", "compare_table", "sweep_table"]
