"""The node functions of the per-view template pipeline: prepare -> verify -> infer -> score ->
(plot: :func:`jevkedro.nodes.plots.plot_view`) -> track.

Each is a thin step over the shared modules; the family-specific parts (source mapping, official
scorer, pins) are found through the registry entry of the view's family. ``track`` turns the
view's saved outputs into its MLflow run, which the ``{view}.mlflow_run`` dataset logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from jevkedro.baseline import view_gates
from jevkedro.config import gates_for, parse_gates, parse_prepare_options
from jevkedro.family import Release, check_snapshot_kind, pinned_snapshot_sha256
from jevkedro.models.settings import ModelSettings
from jevkedro.nodes import infer as _infer
from jevkedro.nodes import tracking
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import QuestionRecords, build_question_table, question_records
from jevkedro.registry import family_of

log = logging.getLogger(__name__)


def prepare_snapshot(release: Release, view: str) -> PreparedView:
    """Map the view's release (read and checked by the ``{view}.release`` dataset) to snapshot rows;
    the snapshot dataset checks them against the family's pins and writes them."""
    return family_of(view).module().build(release, view)


def verify_snapshot(snapshot: Snapshot, prepare: Mapping[str, Any]) -> Snapshot:
    """Refuse a snapshot that is not the one the run asks for: its data kind must be the one of
    the view's typed ``<view>.prepare`` settings (the pins are looked up by that kind, never by the
    manifest's own word), its sources must match the family's pins for that kind, and its bytes
    must match its manifest and the family's pinned hash."""
    family = family_of(snapshot.view).name
    asked = parse_prepare_options(snapshot.view, prepare).data
    check_snapshot_kind(snapshot.manifest, snapshot.path.with_name(f"{snapshot.view}.manifest.json"),
                        family, snapshot.view, asked)
    pinned = pinned_snapshot_sha256(family, snapshot.view, asked)
    verified = verify_snapshot_bytes(snapshot, pinned)
    log.info("%s: snapshot %s verified (%s data, %d requests)", snapshot.view, snapshot.sha256[:12],
             snapshot.data, len(snapshot.rows))
    return verified


# ``model`` arrives as the flat ``params:model`` mapping (checked before any node by
# hooks.CheckSettings) and is typed here: kedro-mlflow then logs it as flat ``model.*`` params.


def infer(snapshot: Snapshot, predictions: PredictionLog, model: Mapping[str, Any]) -> dict[str, Any]:
    """Ask the configured model every request the predictions log has no final answer for (the
    log is appended to as answers arrive); returns the record of the inference run (``run.json``:
    identity, settings, what was asked), checked against the records it describes."""
    try:
        _infer.infer(snapshot, predictions, model)
        return predictions.checked_meta() or {}  # never None: Kedro saves no None
    finally:
        predictions.close()


def score(snapshot: Snapshot, predictions: PredictionLog, inference_run: Mapping[str, Any],
          model: Mapping[str, Any], gates: dict | None = None) -> tuple[dict, dict | None, QuestionRecords]:
    """Validate every answer of the predictions log, compute the generic metrics and the family's
    ``official`` report, and check the view's regression gates (``report["gates"]``; the run fails
    at its end when one is not met); also returns the per-question judgements (status, reason,
    normalised probabilities). The report names the identity of ``inference_run``, the one every
    record is stamped with."""
    settings = ModelSettings.parse(model)
    records = predictions.records
    table = build_question_table(snapshot, records)
    module = family_of(snapshot.view).module()
    official = module.evaluate(snapshot, table, records) if hasattr(module, "evaluate") else None
    report = build_report(snapshot, table, records, settings.flat(), inference_run, official)
    thresholds = gates_for(parse_gates(gates), snapshot.view).model_dump(exclude_none=True)
    if thresholds:
        report["gates"] = view_gates(report, thresholds, snapshot, table, records)  # and the baseline gates
    o = report["metrics"]["overall"]
    log.info("%s / %s: accuracy %s over %d questions", report["model"], snapshot.view, o["accuracy"], o["accuracy_n"])
    return report, official, question_records(table)


def track(snapshot: Snapshot, report: dict, official: dict | None, plots: Mapping[str, bytes],
          report_html: str | None = None) -> tracking.ViewRun:
    """The view's MLflow run (:func:`jevkedro.nodes.tracking.view_run`) from its outputs as saved:
    the report, the official report, the plots and the explorer page read back from their files,
    the snapshot's manifest and TSV as its input."""
    files = {"report.html": report_html.encode("utf-8", "replace")} if report_html is not None else None
    return tracking.view_run(report, official, snapshot.manifest, plots, snapshot.path, files)
