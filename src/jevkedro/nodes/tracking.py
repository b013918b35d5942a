"""MLflow tracking: one MLflow run per (model, view), nested under kedro-mlflow's run.

kedro-mlflow (``conf/base/mlflow.yml``) sets the tracking store and opens a run per
``kedro run``; each view the pipeline scores becomes a child run (logged by the
:class:`jevkedro.hooks.TrackViewRuns` hook once the view's outputs are saved) tagged ``model``,
``benchmark``, ``view``, ``snapshot_sha256``, ``data``, ``probability_source`` and ``complete``, with the
metrics and the manifest, report and official summary as artifacts. Nothing secret is logged:
reports and manifests carry no credentials (keys are read from the environment at call time).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass
class ViewRun:
    """What one (model, view) MLflow run records: a pure function of the report (:func:`view_run`)."""

    name: str
    tags: dict[str, str]
    metrics: dict[str, float]
    artifacts: dict[str, Any] = field(default_factory=dict)  # file name -> JSON document


def view_run(report: Mapping[str, Any], official: Any, manifest: Mapping[str, Any]) -> ViewRun:
    """The tags, metrics and artifacts of one (model, view) run, from its report and manifest."""
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
    artifacts = {"manifest.json": dict(manifest), "report.json": dict(report)}
    if official is not None:
        artifacts["official.json"] = official if isinstance(official, dict) else {"official": official}
    return ViewRun(f"{report['model']}/{report['view']}", tags, metrics, artifacts)


def log_view_run(run: ViewRun) -> str:
    """Record one :class:`ViewRun` in MLflow (nested under kedro-mlflow's run when one is open)."""
    import mlflow

    nested = mlflow.active_run() is not None
    with mlflow.start_run(run_name=run.name, nested=nested, tags=run.tags) as active:
        items = list(run.metrics.items())
        for start in range(0, len(items), 500):  # MLflow's batch limit is 1000 metrics
            mlflow.log_metrics(dict(items[start:start + 500]))
        for name, document in run.artifacts.items():
            mlflow.log_dict(document, name)
        log.info("MLflow run %s: %s", active.info.run_id, run.name)
        return active.info.run_id


def track(report: Mapping[str, Any], official: Any, manifest: Mapping[str, Any]) -> str:
    """Record one (model, view) run in MLflow; returns its run id."""
    return log_view_run(view_run(report, official, manifest))
