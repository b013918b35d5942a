"""The node functions of the per-view template pipeline: prepare -> verify -> infer -> score.

Each is a thin step over the shared modules; the family-specific parts (source mapping, official
scorer, pins) are found through the registry entry of the view's family. MLflow tracking is not a
node: :class:`jevkedro.hooks.TrackViewRuns` logs each view once its outputs are saved.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from jevkedro.config import ModelSettings, gates_for, parse_gates
from jevkedro.family import Release, pinned_snapshot_sha256
from jevkedro.nodes import infer as _infer
from jevkedro.nodes.infer import PredictionLog
from jevkedro.nodes.report import build_report, check_gates
from jevkedro.nodes.snapshot import PreparedView, Snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table, question_records
from jevkedro.registry import family_of

log = logging.getLogger(__name__)


def prepare_snapshot(release: Release, view: str) -> PreparedView:
    """Map the view's release (read and checked by the ``{view}.release`` dataset) to snapshot rows;
    the snapshot dataset checks them against the family's pins and writes them."""
    return family_of(view).module().build(release, view)


def verify_snapshot(snapshot: Snapshot) -> Snapshot:
    """Refuse a snapshot whose bytes differ from its manifest or from the family's pinned hash."""
    family = family_of(snapshot.view).name
    pinned = pinned_snapshot_sha256(family, snapshot.view, snapshot.data)
    verified = verify_snapshot_bytes(snapshot, pinned)
    log.info("%s: snapshot %s verified (%s data, %d requests)", snapshot.view, snapshot.sha256[:12],
             snapshot.data, len(snapshot.rows))
    return verified


# ``model`` arrives as the flat ``params:model`` mapping (checked before any node by
# hooks.CheckSettings) and is typed here: kedro-mlflow then logs it as flat ``model.*`` params.


def infer(snapshot: Snapshot, prediction_log: PredictionLog, model: Mapping[str, Any]) -> PredictionLog:
    """Ask the configured model every request the predictions log has no final answer for."""
    return _infer.infer(snapshot, prediction_log, model)


def score(snapshot: Snapshot, predictions: PredictionLog,
          model: Mapping[str, Any], gates: dict | None = None) -> tuple[dict, dict | None, list]:
    """Validate every answer, compute the generic metrics and the family's ``official`` report,
    and check the view's regression gates (``report["gates"]``; the run fails at its end when one
    is not met); also returns the per-question judgements (status, reason, normalised probabilities)."""
    model = ModelSettings.parse(model)
    records = predictions.records
    table = build_question_table(snapshot, records)
    module = family_of(snapshot.view).module()
    official = module.evaluate(snapshot, table, records) if hasattr(module, "evaluate") else None
    report = build_report(snapshot, table, records, model.flat(), predictions.meta(), official)
    thresholds = gates_for(parse_gates(gates), snapshot.view).model_dump(exclude_none=True)
    if thresholds:
        report["gates"] = check_gates(report, thresholds)
    o = report["metrics"]["overall"]
    log.info("%s / %s: accuracy %s over %d questions", report["model"], snapshot.view, o["accuracy"], o["accuracy_n"])
    return report, official, question_records(table)
