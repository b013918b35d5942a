"""Kedro project settings."""

from kedro.config import OmegaConfigLoader

from jevkedro.hooks import CheckSettings, ModelKeysFromCredentials, ReleaseOutputFolders, TrackViewRuns

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
}

# Settings are checked (and the releases located) before anything runs; API keys named in
# conf/local/credentials.yml (model_api_keys) become environment variables; each scored view is
# logged to MLflow once its outputs are saved; the output folders' locks (one writer per folder) are
# let go when the pipeline ends (registered last: pluggy calls it first).
HOOKS = (CheckSettings(), ModelKeysFromCredentials(), TrackViewRuns(), ReleaseOutputFolders())

# kedro-mlflow (conf/base/mlflow.yml) records each `kedro run` in the experiment `jevkedro` (run named
# after the pipeline, the flattened parameters as params); TrackViewRuns records one run per
# (model, view) in the experiment `jevkedro/<view>`, with its own client, never nested, so a view's
# runs list is its leaderboard. See src/jevkedro/nodes/tracking.py for the layout.
