"""Reports: one ``report.json`` per model and view, and the printed summary.

Report shape: ``view``, ``family``, ``model`` (the run's name), ``model_id`` (resolved id),
``adapter``, ``probability_source``, ``data`` (official/sample/synthetic), ``snapshot_sha256``,
``coverage``, ``metrics`` (``overall``, ``by_type``, ``by_<slice>``), ``official``,
``latency``, ``cost`` (USD from measured usage x the configured tariff; null when unknown),
``run`` (whether every request was attempted; see :func:`run_status`) and, for replayed
answers, ``replay`` (the replay file's lines and the request ids it has that the snapshot does
not, counted and named).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.fast_validate import RequestColumns
from jevkedro.nodes.snapshot import Snapshot
from jevkedro.nodes.validate import QUESTION_STATUSES, QuestionTable, reason_kind

log = logging.getLogger(__name__)

# Slice columns that are not reported as by_<slice> groups (type has its own by_type).
_NOT_SLICES = {"type"}


def _columns(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns, request_ids: list[str] | None = None) -> RequestColumns:
    if isinstance(predictions, RequestColumns):
        return predictions
    return RequestColumns.of(predictions, request_ids or [])


def latency_summary(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns) -> dict[str, Any]:
    """p50/p95/mean over timed requests (one sample per request), the first request apart."""
    cols = _columns(predictions)
    timed = [(lat, first) for lat, first in zip(cols.latency_s, cols.first) if lat is not None]
    first = [lat for lat, is_first in timed if is_first]
    rest = np.array([lat for lat, is_first in timed if not is_first], dtype=float)
    out: dict[str, Any] = {"unit": "s", "n": int(len(rest)), "first": first[0] if first else None}
    if len(rest):
        out.update(p50=float(np.percentile(rest, 50)), p95=float(np.percentile(rest, 95)), mean=float(rest.mean()))
    else:
        out.update(p50=None, p95=None, mean=None)
    return out


def cost_summary(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns) -> dict[str, Any]:
    """Total USD over answered requests from their measured usage x tariff; null if any is unknown."""
    cols = _columns(predictions)
    costs = [c for st, c in zip(cols.status, cols.cost_usd) if st == "ok"]
    known = [c for c in costs if c is not None]
    return {"usd": float(sum(known)) if costs and len(known) == len(costs) else None,
            "requests_priced": len(known), "requests_answered": len(costs)}


def run_status(table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]] | RequestColumns,
               request_ids: list[str], run_meta: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the run asked every request (``complete``), how many it did not
    (``unattempted_requests``: stopped before them, or no record) and why it stopped.

    The generic ``accuracy`` counts an unattempted question as not correct (coverage policy), so
    the accuracy of an incomplete run is not the model's: ``attempted_overall`` gives the generic
    metrics over the questions that were asked (null for a complete run, where it equals
    ``metrics.overall``).
    """
    unattempted = _columns(predictions, request_ids).unattempted
    complete = unattempted == 0
    return {
        "complete": complete,
        "unattempted_requests": unattempted,
        "stopped": (run_meta.get("last_run") or {}).get("stopped"),
        "attempted_overall": None if complete else M.summarize_table(table, table.status != "unattempted"),
    }


def coverage(table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]] | RequestColumns, n_requests: int) -> dict[str, Any]:
    """Questions by status (overall and by type), requests by status, and why answers were
    invalid (``invalid_by_reason``: count per kind of reason, most frequent first)."""
    cols = _columns(predictions)
    is_status = {s: table.status == s for s in QUESTION_STATUSES}
    out: dict[str, Any] = {
        "requests": n_requests,
        "questions": len(table),
        "by_status": {s: int(m.sum()) for s, m in is_status.items()},
        "answered_valid_fraction": float(is_status["ok"].mean()) if len(table) else None,
        "requests_by_status": dict(Counter(cols.status)),
    }
    types = sorted(set(table.qtype.tolist()))
    out["by_type"] = {t: {s: int((m & is_t).sum()) for s, m in is_status.items()}
                      for t in types for is_t in [table.qtype == t]}
    kinds = Counter(reason_kind(table.reason[i]) for i in np.flatnonzero(is_status["invalid"]).tolist())
    out["invalid_by_reason"] = dict(kinds.most_common())
    return out


def invalid_examples(table: QuestionTable, limit: int = 10) -> list[dict[str, Any]]:
    idx = np.flatnonzero(table.status == "invalid")[:limit]
    return [{"request_id": table.request_id[i], "question": table.question_id[i], "reason": table.reason[i]} for i in idx]


def generic_metrics(table: QuestionTable) -> dict[str, Any]:
    out: dict[str, Any] = {"overall": M.summarize_table(table), "by_type": M.by_slice(table, "type")}
    for name in sorted(table.slices):
        if name not in _NOT_SLICES:
            out[f"by_{name}"] = M.by_slice(table, name)
    return out


def replay_summary(run_meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The replay file's own account (lines, request ids the snapshot does not have), when the
    run replayed recorded answers; logged as a warning when ids were ignored."""
    replay = run_meta.get("replay")
    if not isinstance(replay, Mapping):
        return None
    unknown = replay.get("unknown_request_ids") or {}
    if unknown.get("count"):
        log.warning("%s: %d request ids of the replay file are not in the snapshot and were not scored (first: %s)",
                    replay.get("file"), unknown["count"], ", ".join(map(str, unknown.get("first", []))))
    return dict(replay)


def build_report(
    snapshot: Snapshot,
    table: QuestionTable,
    predictions: Mapping[str, Mapping[str, Any]],
    model: Mapping[str, Any],
    run_meta: Mapping[str, Any] | None,
    official: Any,
) -> dict[str, Any]:
    """``report.json``. The request-level parts (coverage, latency, cost, run) come from the
    columns the question table was judged with when it has them (``table.requests``), else
    from ``predictions``."""
    request_ids = snapshot.request_ids
    cols = table.requests if getattr(table, "requests", None) is not None else RequestColumns.of(predictions, request_ids)
    resolved = sorted({m for m in cols.model if m})
    run_meta = run_meta or {}
    report = {
        "view": snapshot.view,
        "family": snapshot.manifest.get("family"),
        "model": model.get("name"),
        "model_id": resolved[0] if len(resolved) == 1 else resolved,
        "adapter": run_meta.get("identity", {}).get("adapter", model.get("adapter")),
        "probability_source": run_meta.get("probability_source", "native"),
        "data": snapshot.data,
        "snapshot_sha256": snapshot.sha256,
        "coverage": coverage(table, cols, len(snapshot.rows)),
        "metrics": generic_metrics(table),
        "official": official,
        "latency": latency_summary(cols),
        "cost": cost_summary(cols),
        "invalid_examples": invalid_examples(table),
        "run": run_status(table, cols, request_ids, run_meta),
    }
    replay = replay_summary(run_meta)
    if replay is not None:
        report["replay"] = replay
    return report


def _fmt(x: Any, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def main_metric(official: Any) -> dict[str, Any] | None:
    """The family's headline number, where its official report names one as
    ``main_metric: {"name", "value"}`` (Decision Index: the weighted public index)."""
    main = official.get("main_metric") if isinstance(official, dict) else None
    return main if isinstance(main, dict) and "name" in main and "value" in main else None


def summary_lines(reporting_root: str | Path = "data/08_reporting") -> list[str]:
    """One line per report found: model, view, data kind, the official headline where there is
    one, accuracy, NLL, ECE, coverage, latency, and whether the run was complete."""
    lines = []
    for path in sorted(Path(reporting_root).glob("*/*/report.json")):
        rep = json.loads(path.read_text(encoding="utf-8"))
        o = rep["metrics"]["overall"]
        cov = rep["coverage"]["by_status"]
        lat = rep["latency"]
        main = main_metric(rep.get("official"))
        lines.append(
            f"{rep['model']:<28} {rep['view']:<28} {rep['data']:<9} "
            + (f"{main['name']} {_fmt(main['value'], 2)}  " if main else "")
            + f"acc {_fmt(o['accuracy'])} (n={o['accuracy_n']}) nll {_fmt(o['nll'])} ece {_fmt(o['ece'])}  "
            f"valid {cov['ok']}/{rep['coverage']['questions']}"
            + (f" (unsupported {cov['unsupported']})" if cov.get("unsupported") else "")
            + f"  p50 {_fmt(None if lat['p50'] is None else lat['p50'] * 1000, 1)} ms  -> {path}"
            + (f"  INCOMPLETE: {rep['run']['unattempted_requests']} requests unattempted"
               if rep.get("run", {}).get("complete") is False else "")
        )
    return lines
