"""Reports: one ``report.json`` per model and view, and the printed summary.

Report shape: ``view``, ``family``, ``model`` (the run's name), ``model_id`` (resolved id),
``adapter``, ``probability_source``, ``data`` (official/sample/synthetic), ``snapshot_sha256``,
``coverage``, ``metrics`` (``overall``, ``by_type``, ``by_<slice>``), ``official``,
``latency`` (p50/p95/p99, histogram), ``cost`` (USD from measured usage x the configured tariff;
null when unknown; also per 1,000 requests), ``errors`` (requests that failed, by failure kind),
``intervals`` (95% bootstrap intervals of the headline metrics, overall and per slice, resampling
whole requests or the family's groups), ``selective`` (risk–coverage: accuracy when abstaining on
the least confident answers), ``analytic`` (clustered standard errors and t intervals of accuracy,
NLL and Brier, :func:`jevkedro.nodes.analytic.report_analytic`), ``calibration`` (the top-label Brier
score's Murphy decomposition and ECE over equal-width and equal-mass bins, overall and per slice:
:mod:`jevkedro.nodes.calibration`), ``model_settings`` (the model's settings as written: names of key
variables, never keys), ``run`` (whether every request was attempted and none failed; see
:func:`run_status`) and, for replayed answers, ``replay`` (the replay file's lines and the request
ids it has that the snapshot does not, counted and named). With ``model.repeats=K`` > 1 every part
is computed over every (question, attempt) with a request's repeats in one cluster, and
``repeats`` gives the across-repeat figures (:mod:`jevkedro.nodes.repeats`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from jevkedro import sample
from jevkedro.config import BASELINE_GATES
from jevkedro.nodes import compare as stats
from jevkedro.nodes import metrics as M
from jevkedro.nodes import repeats as R
from jevkedro.nodes.analytic import report_analytic
from jevkedro.nodes.calibration import calibration_summary
from jevkedro.nodes.plots import latency_histogram
from jevkedro.nodes.snapshot import Snapshot, each_row
from jevkedro.nodes.validate import QUESTION_STATUSES, QuestionTable, RequestColumns, reason_kind
from jevkedro.registry import family_of

log = logging.getLogger(__name__)

# Slice columns that are not reported as by_<slice> groups (type has its own by_type).
_NOT_SLICES = {"type"}


def _columns(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns, request_ids: list[str] | None = None) -> RequestColumns:
    if isinstance(predictions, RequestColumns):
        return predictions
    return RequestColumns.of(predictions, request_ids or [])


def latency_summary(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns) -> dict[str, Any]:
    """p50/p95/p99/mean over timed requests (one sample per request), the first request apart,
    and the latency plot's histogram (``histogram``: :func:`jevkedro.nodes.plots.latency_histogram`)."""
    cols = _columns(predictions)
    timed = [(lat, first) for lat, first in zip(cols.latency_s, cols.first) if lat is not None]
    first = [lat for lat, is_first in timed if is_first]
    rest = np.array([lat for lat, is_first in timed if not is_first], dtype=float)
    out: dict[str, Any] = {"unit": "s", "n": int(len(rest)), "first": first[0] if first else None}
    if len(rest):
        p50, p95, p99 = np.percentile(rest, [50, 95, 99])
        out.update(p50=float(p50), p95=float(p95), p99=float(p99), mean=float(rest.mean()))
        out["histogram"] = latency_histogram(rest * 1000)
    else:
        out.update(p50=None, p95=None, p99=None, mean=None)
    return out


def cost_summary(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns) -> dict[str, Any]:
    """Total USD over answered requests from their measured usage x tariff; null if any is unknown."""
    cols = _columns(predictions)
    costs = [c for st, c in zip(cols.status, cols.cost_usd) if st == "ok"]
    known = [c for c in costs if c is not None]
    usd = float(sum(known)) if costs and len(known) == len(costs) else None
    return {"usd": usd, "requests_priced": len(known), "requests_answered": len(costs),
            # the tariff's price of 1,000 answered requests like these: usd / answered x 1000
            "usd_per_1k_requests": None if usd is None else usd / len(costs) * 1000}


def error_summary(predictions: Mapping[str, Mapping[str, Any]] | RequestColumns) -> dict[str, Any]:
    """Requests whose status is ``error`` (a 5xx, a timeout, a malformed body, a 413/422 ...),
    in all and by ``failure`` kind; a run with any is not clean even when it is complete."""
    cols = _columns(predictions)
    failed = [str(fail or "unknown") for st, fail in zip(cols.status, cols.failure) if st == "error"]
    return {"requests": len(failed), "by_failure": dict(sorted(Counter(failed).items()))}


def resampling_units(snapshot: Snapshot, table: QuestionTable) -> tuple[np.ndarray, str]:
    """The bootstrap's resampling unit of each question: its request, or the family's group when
    the family defines ``resampling_unit(row)`` (JevBench: a task's paraphrase group)."""
    try:
        module = family_of(snapshot.view).module()
    except KeyError:  # a view outside the registry (engine tests, benchmarks): requests
        return np.asarray(table.request_id, dtype=object), "request"
    unit_of = getattr(module, "resampling_unit", None)
    if unit_of is None:
        return np.asarray(table.request_id, dtype=object), "request"
    by_request = {row.request_id: str(unit_of(row)) for row in each_row(snapshot.rows)}
    return np.array([by_request[r] for r in table.request_id], dtype=object), getattr(module, "RESAMPLING_UNIT", "group")


def interval_summary(table: QuestionTable, units: np.ndarray, unit_name: str, terms: stats.Terms | None = None,
                     resamples: int = stats.RESAMPLES, seed: int = stats.SEED) -> dict[str, Any]:
    """95% percentile-bootstrap intervals of accuracy, NLL, Brier and ECE (``overall``) and of
    accuracy per slice value (``by_<slice>``), resampling whole units; the settings are recorded."""
    keep = ~np.asarray(table.unscored, dtype=bool)
    terms = stats.terms_of(table) if terms is None else terms
    kept_units = np.asarray(units, dtype=object)[keep]
    coded = {name: M.slice_codes(table, name, keep) for name in table.slices}  # integer codes: no strings sorted
    overall, per_slice = stats.report_intervals(terms, {name: c for name, c in coded.items() if c is not None},
                                                kept_units, resamples, seed)
    out: dict[str, Any] = {
        "level": stats.LEVEL, "method": "percentile bootstrap", "unit": unit_name,
        "units": int(len(set(kept_units.tolist()))), "resamples": resamples, "seed": seed, "overall": overall,
    }
    for name, groups in per_slice.items():
        out[f"by_{name}"] = groups
    return out


SELECTIVE_COVERAGES = (0.5, 0.8, 0.9)


def selective_summary(table: QuestionTable, points: int = 50, terms: stats.Terms | None = None) -> dict[str, Any]:
    """Risk–coverage over the valid hard-label answers: abstain on the least confident first.
    ``accuracy_at_coverage`` at 50/80/90 %, ``coverage_at_risk_5pct`` (largest share answerable
    with at most 5 % errors), ``aurc`` (area under the risk–coverage curve), ``auroc`` (confidence
    ranking right above wrong answers) and the curve at ``points`` coverages."""
    terms = stats.terms_of(table) if terms is None else terms
    rows = terms.ece_rows
    conf, hit = terms.conf[rows], terms.correct[rows]
    order = stats.confidence_order(conf)  # one sort for the curve and every point on it
    rc = stats.risk_coverage(conf, hit, order)
    n = len(conf)
    idx = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(int)) if n else np.zeros(0, dtype=int)
    return {
        "n": int(n),
        "accuracy_at_coverage": {f"{c:g}": stats.selective_accuracy(conf, hit, c, order) for c in SELECTIVE_COVERAGES},
        "coverage_at_risk_5pct": stats.coverage_at_risk(conf, hit, 0.05, order, rc),
        "aurc": rc["aurc"],
        "auroc": stats.selective_auroc(conf, hit),
        "curve": {"coverage": rc["coverage"][idx].round(6).tolist(), "risk": rc["risk"][idx].round(6).tolist()},
    }


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
    errors = sum(1 for st in _columns(predictions, request_ids).status if st == "error")
    return {
        "complete": complete,
        # complete and no request failed (an interleaved 5xx leaves a complete run that is not clean)
        "clean": complete and errors == 0,
        "error_requests": errors,
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
    columns read from the records with the verdicts (``table.requests``); a table built by hand
    has none, and they are read from ``predictions``."""
    request_ids = snapshot.request_ids
    repeats = int(model.get("repeats") or 1)  # model.repeats=K: every attempt's answers, pooled (nodes/repeats.py)
    tables = R.attempt_tables(snapshot, table, predictions, repeats) if repeats > 1 else [table]
    table = R.pooled_table(tables) if repeats > 1 else table
    cols = table.requests if table.requests is not None else RequestColumns.of(predictions, request_ids)
    resolved = sorted({m for m in cols.model if m})
    run_meta = run_meta or {}
    units, unit_name = resampling_units(snapshot, table)
    terms = stats.terms_of(table)  # per-question terms, shared by the intervals and selective prediction
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
        "errors": error_summary(cols),
        "intervals": interval_summary(table, units, unit_name, terms),
        "selective": selective_summary(table, terms=terms),
        "model_settings": dict(model),
        "invalid_examples": invalid_examples(table),
        "run": run_status(table, cols, request_ids, run_meta),
        # additions (docs/comparing.md): the analytic errors of the headline, calibration decomposed
        "analytic": report_analytic(terms, np.asarray(units, dtype=object)[~np.asarray(table.unscored, dtype=bool)],
                                    unit_name),
        "calibration": calibration_summary(table, terms, frozenset(_NOT_SLICES)),
    }
    if repeats > 1:
        report["repeats"] = R.repeat_summary(tables)
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


LINE_WIDTH = 100


def unsupported_view(report: Mapping[str, Any]) -> bool:
    """True when the model could answer none of the view's questions (every one ``unsupported``)."""
    cov = report.get("coverage") or {}
    questions = cov.get("questions") or 0
    return bool(questions) and (cov.get("by_status") or {}).get("unsupported", 0) == questions


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_line(report: Mapping[str, Any], width: int = LINE_WIDTH, model_width: int | None = None,
                 view_width: int | None = None) -> str:
    """The summary of a (model, view) in lines of at most ``width`` characters: the official
    headline where the family has one, accuracy with its 95% interval, ECE, valid answers (when
    not all are), latency p50 (where it fits), then what makes the result not clean (unattempted requests, request errors, failed
    gates) — on an indented second line when the first is full. A view the model cannot answer
    at all reads ``n/a (unsupported)``, not as a score of 0. ``model_width``/``view_width`` align
    the names of several lines (default: this report's own names)."""
    model_width = min(model_width or len(str(report["model"])), 32)
    view = sample.view_label(report)  # a result that is not the benchmark's own data says so: "decision_index [sample]"
    view_width = min(max(view_width or 0, len(view)), 40)  # never cut the mark
    head = f"{_short(str(report['model']), model_width):<{model_width}} {_short(view, view_width):<{view_width}}"
    if unsupported_view(report):
        return f"{head} n/a (unsupported: {report['coverage']['questions']} questions)"[:width]
    o = report["metrics"]["overall"]
    cov = report["coverage"]
    ok = (cov.get("by_status") or {}).get("ok", 0)
    ci = ((report.get("intervals") or {}).get("overall") or {}).get("accuracy") or [None, None]
    main = main_metric(report.get("official"))
    lat = (report.get("latency") or {}).get("p50")
    run = report.get("run") or {}
    errors = (report.get("errors") or {}).get("requests", run.get("error_requests")) or 0
    gates = (report.get("gates") or {}).get("failed") or []
    unsupported = (cov.get("by_status") or {}).get("unsupported", 0)
    parts = ([f"{main['name']} {_fmt(main['value'], 2)}"] if main else []) + [
        f"acc {_fmt(o['accuracy'])}" + (f" [{_fmt(ci[0])},{_fmt(ci[1])}]".replace("0.", ".") if ci[0] is not None else ""),
        f"ece {_fmt(o['ece'])}",
    ] + ([f"valid {ok}/{cov['questions']}" + (f" ({unsupported} unsupported)" if unsupported else "")]
         if ok < cov["questions"] else []) + ([("optional", f"p50 {_fmt(lat * 1000, 1)} ms")] if lat is not None else []) \
        + ([f"INCOMPLETE: {run['unattempted_requests']} requests unattempted"] if run.get("complete") is False else []) \
        + ([f"ERRORS: {errors} requests failed"] if errors else []) \
        + [f"GATE FAILED: {g['message'].removeprefix('gate ')}" for g in gates]
    lines, current = [], head
    for part in parts:
        if isinstance(part, tuple):  # shown only where it fits on the current line
            part = part[1]
            if len(current) + 2 + len(part) > width:
                continue
        if len(current) + 2 + len(part) > width and current.strip():
            lines.append(current)
            current = " " * 6 + "↳"
        current = current + (" " if current in (head, " " * 6 + "↳") else "  ") + part
    lines.append(current)
    return "\n".join(line[:width] for line in lines)


# -- regression gates -------------------------------------------------------------------------------

# gate -> (what it reads from the report, "min" or "max", how the value is named in messages)
GATE_RULES: dict[str, tuple[tuple[str | int, ...], str, str]] = {
    "min_accuracy": (("metrics", "overall", "accuracy"), "min", "accuracy"),
    "min_accuracy_ci_low": (("intervals", "overall", "accuracy", 0), "min", "accuracy's lower 95% bound"),
    "max_ece": (("metrics", "overall", "ece"), "max", "ECE"),
    "max_ece_ci_high": (("intervals", "overall", "ece", 1), "max", "ECE's upper 95% bound"),
    "max_nll": (("metrics", "overall", "nll"), "max", "NLL"),
    "max_brier": (("metrics", "overall", "brier"), "max", "Brier score"),
    "min_valid_fraction": (("coverage", "answered_valid_fraction"), "min", "valid fraction"),
    "max_errors": (("errors", "requests"), "max", "request errors"),
    "max_latency_p95_ms": (("latency", "p95"), "max", "latency p95 (ms)"),
    "min_official": (("official", "main_metric", "value"), "min", "official headline"),
}


BASELINE_SETTINGS = frozenset({"baseline", *BASELINE_GATES})


def _at(tree: Any, path: tuple) -> Any:
    for key in path:
        if isinstance(tree, Mapping):
            tree = tree.get(key)
        elif isinstance(tree, (list, tuple)) and isinstance(key, int) and len(tree) > key:
            tree = tree[key]
        else:
            return None
    return tree


def check_gates(report: Mapping[str, Any], thresholds: Mapping[str, Any]) -> dict[str, Any]:
    """Each set threshold against the report: ``{"checked": [...], "failed": [...]}``, every entry
    ``{"gate", "threshold", "value", "passed", "message"}``. A value that is missing (no valid
    answer, no official headline) fails its gate: a guard must not pass for want of a number."""
    checked = []
    for gate, threshold in thresholds.items():
        if threshold is None or (gate == "require_complete" and not threshold) or gate in BASELINE_SETTINGS:
            continue  # the baseline gates compare two runs: jevkedro.baseline.view_gates
        if gate == "require_complete":
            run = report.get("run") or {}
            value = bool(run.get("complete", True))
            passed = value
            message = f"gate require_complete: {run.get('unattempted_requests')} requests unattempted"
        else:
            path, side, what = GATE_RULES[gate]
            value = _at(report, path)
            if gate == "max_latency_p95_ms" and value is not None:
                value = value * 1000
            passed = value is not None and (value >= threshold if side == "min" else value <= threshold)
            if value is None:
                message = f"gate {gate}: {what} is missing (threshold {threshold:g})"
            else:
                message = f"gate {gate}: {what} {value:.4g} is {'below' if side == 'min' else 'above'} the threshold {threshold:g}"
        checked.append({"gate": gate, "threshold": threshold, "value": value, "passed": bool(passed),
                        "message": None if passed else message})
    return {"checked": checked, "failed": [c for c in checked if not c["passed"]]}
