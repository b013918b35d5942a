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
