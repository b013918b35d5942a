"""The node functions of the per-view template pipeline: prepare -> verify -> infer -> score -> track.

Each is a thin step over the shared modules; the family-specific parts (source mapping, official
scorer, pins) are found through the registry entry of the view's family.
"""

from __future__ import annotations

import logging
from typing import Any

from jevkedro.family import pinned_snapshot_sha256
from jevkedro.nodes import infer as _infer
from jevkedro.nodes import tracking
from jevkedro.nodes.infer import PredictionLog
from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table, question_records
from jevkedro.registry import ViewNotBuiltError, family_of

log = logging.getLogger(__name__)


def prepare_snapshot(options: dict[str, Any], view: str) -> PreparedView:
    """Map the view's upstream release (``options.source``) to a prepared view (saved by the catalog)."""
    module = family_of(view).module()
    if getattr(module.prepare, "not_built", False):
        module.prepare()  # raises ViewNotBuiltError with the reason
    if not hasattr(module, "build"):
        raise ViewNotBuiltError(f"{view}: the family has no build()")
    return module.build(view=view, **dict(options))


def verify_snapshot(snapshot: Snapshot) -> Snapshot:
    """Refuse a snapshot whose bytes differ from its manifest or from the family's pinned hash."""
    family = family_of(snapshot.view).name
    pinned = pinned_snapshot_sha256(family, snapshot.view, snapshot.data)
    verified = verify_snapshot_bytes(snapshot, pinned)
    log.info("%s: snapshot %s verified (%s data, %d requests)", snapshot.view, snapshot.sha256[:12],
             snapshot.data, len(snapshot.rows))
    return verified


def infer(snapshot: Snapshot, prediction_log: PredictionLog, model: dict[str, Any]) -> PredictionLog:
    return _infer.infer(snapshot, prediction_log, model)


def score(snapshot: Snapshot, predictions: PredictionLog, model: dict[str, Any]) -> tuple[dict, dict | None, list]:
    """Validate every answer, compute the generic metrics and the family's ``official`` report;
    also returns the per-question judgements (status, reason, normalised probabilities)."""
    records = predictions.records
    table = build_question_table(snapshot, records)
    module = family_of(snapshot.view).module()
    official = module.evaluate(snapshot, table, records, None) if hasattr(module, "evaluate") else None
    report = build_report(snapshot, table, records, model, predictions.meta(), official)
    o = report["metrics"]["overall"]
    log.info("%s / %s: accuracy %s over %d questions", report["model"], snapshot.view, o["accuracy"], o["accuracy_n"])
    return report, official, question_records(table)


def track(report: dict[str, Any], official: dict[str, Any] | None, snapshot: Snapshot) -> str:
    return tracking.track(report, official, snapshot.manifest)
