"""Reports: one ``report.json`` per model and view, and the printed summary.

Report shape: ``view``, ``family``, ``model`` (the run's name), ``model_id`` (resolved id),
``adapter``, ``probability_source``, ``data`` (official/sample/synthetic), ``snapshot_sha256``,
``coverage``, ``metrics`` (``overall``, ``by_type``, ``by_<slice>``), ``official``,
``latency``, ``cost`` (USD from measured usage x the configured tariff; null when unknown) and
``run`` (whether every request was attempted; see :func:`run_status`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.snapshot import Snapshot
from jevkedro.nodes.validate import QUESTION_STATUSES, QuestionTable

# Slice columns that are not reported as by_<slice> groups (type has its own by_type).
_NOT_SLICES = {"type"}


def latency_summary(predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """p50/p95/mean over timed requests (one sample per request), the first request apart."""
    timed = [r for r in predictions.values() if r.get("latency_s") is not None]
    first = [r["latency_s"] for r in timed if r.get("first")]
    rest = np.array([r["latency_s"] for r in timed if not r.get("first")], dtype=float)
    out: dict[str, Any] = {"unit": "s", "n": int(len(rest)), "first": first[0] if first else None}
    if len(rest):
        out.update(p50=float(np.percentile(rest, 50)), p95=float(np.percentile(rest, 95)), mean=float(rest.mean()))
    else:
        out.update(p50=None, p95=None, mean=None)
    return out


def cost_summary(predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Total USD over answered requests from their measured usage x tariff; null if any is unknown."""
    answered = [r for r in predictions.values() if r.get("status") == "ok"]
    costs = [r.get("cost_usd") for r in answered]
    known = [c for c in costs if c is not None]
    return {"usd": float(sum(known)) if answered and len(known) == len(costs) else None,
            "requests_priced": len(known), "requests_answered": len(answered)}


def run_status(table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]], request_ids: list[str],
               run_meta: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the run asked every request (``complete``), how many it did not
    (``unattempted_requests``: stopped before them, or no record) and why it stopped.

    The generic ``accuracy`` counts an unattempted question as not correct (coverage policy), so
    the accuracy of an incomplete run is not the model's: ``attempted_overall`` gives the generic
    metrics over the questions that were asked (null for a complete run, where it equals
    ``metrics.overall``).
    """
    unattempted = sum(1 for rid in request_ids
                      if (predictions.get(rid) or {}).get("status", "unattempted") == "unattempted")
    complete = unattempted == 0
    return {
        "complete": complete,
        "unattempted_requests": unattempted,
        "stopped": (run_meta.get("last_run") or {}).get("stopped"),
        "attempted_overall": None if complete else M.summarize_table(table, table.status != "unattempted"),
    }


def coverage(table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]], n_requests: int) -> dict[str, Any]:
    by_status = Counter(table.status.tolist())
    out: dict[str, Any] = {
        "requests": n_requests,
        "questions": len(table),
        "by_status": {s: int(by_status.get(s, 0)) for s in QUESTION_STATUSES},
        "answered_valid_fraction": float(table.valid.mean()) if len(table) else None,
        "requests_by_status": dict(Counter(r.get("status") for r in predictions.values())),
    }
    out["by_type"] = {
        t: {s: int(((table.qtype == t) & (table.status == s)).sum()) for s in QUESTION_STATUSES}
        for t in sorted(set(table.qtype.tolist()))
    }
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


def build_report(
    snapshot: Snapshot,
    table: QuestionTable,
    predictions: Mapping[str, Mapping[str, Any]],
    model: Mapping[str, Any],
    run_meta: Mapping[str, Any] | None,
    official: Any,
) -> dict[str, Any]:
    resolved = sorted({r["model"] for r in predictions.values() if r.get("model")})
    run_meta = run_meta or {}
    return {
        "view": snapshot.view,
        "family": snapshot.manifest.get("family"),
        "model": model.get("name"),
        "model_id": resolved[0] if len(resolved) == 1 else resolved,
        "adapter": run_meta.get("identity", {}).get("adapter", model.get("adapter")),
        "probability_source": run_meta.get("probability_source", "native"),
        "data": snapshot.data,
        "snapshot_sha256": snapshot.sha256,
        "coverage": coverage(table, predictions, len(snapshot.rows)),
        "metrics": generic_metrics(table),
        "official": official,
        "latency": latency_summary(predictions),
        "cost": cost_summary(predictions),
        "invalid_examples": invalid_examples(table),
        "run": run_status(table, predictions, [r.request_id for r in snapshot.rows], run_meta),
    }


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
