"""Project hooks: settings checked before anything runs, API keys from credentials, MLflow runs.

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
from typing import Any

from kedro.config import MissingConfigException
from kedro.framework.hooks import hook_impl

from jevkedro.config import check_parameters
from jevkedro.nodes.tracking import track

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


class CheckSettings:
    """Check every parameter group before anything runs, and point each view's release dataset at
    the folder its typed ``<view>.prepare`` settings name.

    ``after_context_created`` runs before the catalog is built and before kedro-mlflow logs
    parameters, so a mistyped key (``model.adaptor``), a wrong type (``model.concurrency=abc``) or a
    value out of range (``model.timeout_s=0``) stops ``kedro run`` with every problem listed and
    nothing started. ``--params`` are merged into ``context.config_loader["parameters"]`` already.
    """

    @hook_impl
    def after_context_created(self, context) -> None:
        check_parameters(context.config_loader["parameters"])

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        # ``parameters`` maps catalog names ("parameters", "params:model", ...) to values
        _, prepare = check_parameters(parameters["parameters"])
        for view, options in prepare.items():
            dataset = catalog.get(f"{view}.release")
            if dataset is not None and hasattr(dataset, "bind"):
                dataset.bind(options)


class TrackViewRuns:
    """Log one MLflow run per (model, view) once the view's ``score`` outputs are all saved.

    Tracking reads the graph's data but adds nothing to it: what is logged is the pure
    :func:`jevkedro.nodes.tracking.view_run` of the report, the official report and the snapshot
    manifest. Waiting for every output to be saved means a run in MLflow always has its files on disk.
    """

    def __init__(self) -> None:
        self._pending: dict[str, tuple[set[str], Any]] = {}

    @hook_impl
    def after_node_run(self, node, inputs, outputs) -> None:
        if "score" not in node.tags:
            return
        snapshot = next(v for v in inputs.values() if hasattr(v, "manifest") and hasattr(v, "rows"))
        report, official, _ = (outputs[name] for name in node.outputs)
        self._pending[node.name] = (set(node.outputs), (report, official, snapshot.manifest))

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, node) -> None:
        pending = self._pending.get(node.name)
        if pending is None:
            return
        pending[0].discard(dataset_name)
        if not pending[0]:
            del self._pending[node.name]
            track(*pending[1])
