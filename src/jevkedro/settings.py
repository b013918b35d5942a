"""Kedro project settings."""

from kedro.config import OmegaConfigLoader

from jevkedro.baseline import BaselineGates  # gates against a baseline: refused before inference when unfit
from jevkedro.datasets import CONFIG_LOADER_ARGS  # the same arguments compare and summary read the catalog with
from jevkedro.hooks import CheckSettings, GuardedMlflowHook, ModelKeysFromCredentials, ReleaseOutputFolders, TrackViewRuns

CONFIG_LOADER_CLASS = OmegaConfigLoader
__all__ = ["CONFIG_LOADER_ARGS", "CONFIG_LOADER_CLASS", "DISABLE_HOOKS_FOR_PLUGINS", "HOOKS"]

# Settings are checked (and the releases located) before anything runs; API keys named in
# conf/local/credentials.yml (model_api_keys) become environment variables; the views' tracking
# datasets are bound to the store, failed views marked; the output folders' locks (one writer per
# folder) are let go when the pipeline ends; baseline gates are refused before inference when unfit;
# kedro-mlflow's hook runs wrapped (GuardedMlflowHook: a tracking store that is down costs no result),
# registered last as the plugin was: pluggy calls it first.
HOOKS = (CheckSettings(), ModelKeysFromCredentials(), TrackViewRuns(), ReleaseOutputFolders(), BaselineGates(),
         GuardedMlflowHook())
DISABLE_HOOKS_FOR_PLUGINS = ("kedro_mlflow",)  # its own registration; GuardedMlflowHook calls it

# kedro-mlflow (conf/base/mlflow.yml) records each `kedro run` in the experiment `jevkedro` (run named
# after the pipeline, the flattened parameters as params); each view's `track` node records one run
# per (model, view) in the experiment `jevkedro/<view>` through the `{view}.mlflow_run` dataset, with
# its own client, never nested, so a view's runs list is its leaderboard. See
# src/jevkedro/nodes/tracking.py for the layout.
