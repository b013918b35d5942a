"""Kedro project settings."""

from kedro.config import OmegaConfigLoader

from jevkedro.hooks import ModelKeysFromCredentials

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
}

# API keys named in conf/local/credentials.yml (model_api_keys) become environment variables.
HOOKS = (ModelKeysFromCredentials(),)
