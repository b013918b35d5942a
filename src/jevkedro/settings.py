"""Kedro project settings."""

from kedro.config import OmegaConfigLoader

from jevkedro.hooks import CheckSettings, ModelKeysFromCredentials, TrackViewRuns

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
}

# Settings are checked (and the releases located) before anything runs; API keys named in
# conf/local/credentials.yml (model_api_keys) become environment variables; each scored view is
# logged to MLflow once its outputs are saved.
HOOKS = (CheckSettings(), ModelKeysFromCredentials(), TrackViewRuns())

# kedro-mlflow's hooks are off: they would open a parent run per `kedro run` (named after the
# pipeline, holding the model settings as one long string) that hides the per-(model, view) runs
# users compare. TrackViewRuns sets the store from conf/base/mlflow.yml itself; `kedro mlflow ui`
# still works. See src/jevkedro/nodes/tracking.py for the layout.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-mlflow", "kedro_mlflow")
