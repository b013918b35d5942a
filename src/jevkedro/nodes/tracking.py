"""MLflow tracking: one MLflow run per (model, view), nested under kedro-mlflow's run.

kedro-mlflow (``conf/base/mlflow.yml``) sets the tracking store and opens a run per
``kedro run``; each view the pipeline scores becomes a child run tagged ``model``,
``benchmark``, ``view``, ``snapshot_sha256``, ``data``, ``probability_source`` and ``complete``, with the
metrics and the manifest, report and official summary as artifacts. Nothing secret is logged:
reports and manifests carry no credentials (keys are read from the environment at call time).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from jevkedro.nodes.report import main_metric

log = logging.getLogger(__name__)


def flatten_metrics(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as ``a/b/c`` names (None, bools and non-finite dropped)."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def _safe(name: str) -> str:
    # MLflow metric names allow alphanumerics, _ - . / and spaces; slice values may be any text.
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


def track(report: Mapping[str, Any], official: Any, manifest: Mapping[str, Any]) -> str:
    """Record one (model, view) run in MLflow; returns its run id."""
    import mlflow

    tags = {
        "model": str(report["model"]),
        "model_id": str(report.get("model_id")),
        "benchmark": str(report.get("family")),
        "view": str(report["view"]),
        "snapshot_sha256": str(report["snapshot_sha256"]),
        "data": str(report.get("data")),
        "probability_source": str(report.get("probability_source")),
        "adapter": str(report.get("adapter")),
        # false when the run stopped before asking everything: its accuracy is not the model's
        "complete": str((report.get("run") or {}).get("complete", True)).lower(),
    }
    metrics = {_safe(k): v for k, v in flatten_metrics({"metrics": report["metrics"],
                                                         "coverage": report["coverage"],
                                                         "latency": report["latency"],
                                                         "cost": report.get("cost") or {},
                                                         "run": report.get("run") or {}}).items()}
    main = main_metric(official)
    if main is not None and isinstance(main["value"], (int, float)):
        metrics[_safe(f"official/{main['name']}")] = float(main["value"])  # the family's headline
    nested = mlflow.active_run() is not None
    with mlflow.start_run(run_name=f"{report['model']}/{report['view']}", nested=nested, tags=tags) as run:
        for start in range(0, len(metrics), 500):  # MLflow's batch limit is 1000 metrics
            chunk = dict(list(metrics.items())[start:start + 500])
            mlflow.log_metrics(chunk)
        mlflow.log_dict(dict(manifest), "manifest.json")
        mlflow.log_dict(dict(report), "report.json")
        if official is not None:
            mlflow.log_dict(official if isinstance(official, dict) else {"official": official}, "official.json")
        log.info("MLflow run %s: %s on %s", run.info.run_id, report["model"], report["view"])
        return run.info.run_id
