"""Project hooks.

:class:`ModelKeysFromCredentials` lets API keys live in ``conf/local/credentials.yml`` (git-ignored)
instead of the shell environment::

    model_api_keys:
      TYPESAFE_API_KEY: <key>

Each entry is exported as an environment variable of that name **unless the environment already
has it** (the environment wins). The remote adapters then read the variable named by
``model.api_key_env``, so only that *name* is ever a parameter (and an MLflow param); Dask
LocalCluster workers inherit the variable. Nothing is logged but the names.
"""

from __future__ import annotations

import logging
import os

from kedro.config import MissingConfigException
from kedro.framework.hooks import hook_impl

log = logging.getLogger(__name__)

CREDENTIALS_KEY = "model_api_keys"


class ModelKeysFromCredentials:
    @hook_impl
    def after_context_created(self, context) -> None:
        try:
            credentials = context.config_loader["credentials"]
        except (MissingConfigException, KeyError):
            return
        keys = (credentials or {}).get(CREDENTIALS_KEY) or {}
        if not isinstance(keys, dict):
            raise ValueError(f"credentials.yml: {CREDENTIALS_KEY} must map environment variable names to keys")
        exported = []
        for name, value in keys.items():
            if value and not os.environ.get(name):
                os.environ[str(name)] = str(value)
                exported.append(str(name))
        if exported:
            log.info("API keys from credentials.yml exported as %s", ", ".join(sorted(exported)))
