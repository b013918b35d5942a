"""Helpers of the bad-input and fault corpus (``tests/hostile``): one-call inference against the
loopback server and judging what was written (the key spellings searched for: ``support.leaks``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import synthetic_rows, synthetic_snapshot
from support import key_forms, leaks  # noqa: F401 -- the corpus imports them from here too


def files_leaking(paths: Iterable[Path], key: str) -> dict[str, list[str]]:
    return {str(p): hit for p in paths if p.is_file() and (hit := leaks(p.read_bytes(), key))}


def settings_for(srv, **extra: Any) -> dict[str, Any]:
    return {"adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-1.13.0", "api_key_env": "",
            "timeout_s": 30, "progress": 0, **extra}


def ask(tmp_path: Path, settings: dict[str, Any], faults: dict[int, str] | None = None, n: int = 1,
        name: str = "out", rows=None):
    """Run ``n`` synthetic requests (``faults`` by position) through the engine; returns
    ``(summary, log, snapshot)``."""
    snapshot = synthetic_snapshot(tmp_path / f"snap-{name}", rows if rows is not None else synthetic_rows(n, faults))
    plog = PredictionLog(tmp_path / name / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    return summary, plog, snapshot


def lines(plog: PredictionLog) -> list[dict[str, Any]]:
    return [json.loads(x) for x in plog.path.read_text(encoding="utf-8").splitlines() if x.strip()]


def judged(snapshot, plog: PredictionLog):
    """The question table scoring builds from the log (statuses, reasons, probabilities)."""
    return build_question_table(snapshot, PredictionLog(plog.path).records)
