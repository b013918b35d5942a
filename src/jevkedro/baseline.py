"""Gates against a baseline (non-inferiority): ``gates.<view>.baseline=<model name>`` with
``max_drop_accuracy``, ``max_rise_nll``, ``max_rise_brier``, ``max_rise_ece``.

This run's answers are paired question by question with the baseline's current run on the same
snapshot, as ``python -m jevkedro.compare`` pairs them (:func:`jevkedro.nodes.compare.paired_resamples`,
:func:`jevkedro.nodes.analytic.paired_analytic`); with ``model.repeats`` (either run, each its own K)
on each question's mean over its repeats (:func:`jevkedro.nodes.repeats.averaged_terms`). For each gate, the *change* ``δ`` is the way the
metric got worse: accuracy ``baseline − this``, NLL/Brier/ECE ``this − baseline``. A gate passes only
when the one-sided upper bound of ``δ`` is below its margin: for accuracy, NLL and Brier the analytic
clustered bound ``δ̂ + t(1 − α', G − 1) · se``; for ECE (not a mean of per-question terms) the
``1 − α'`` percentile of the paired bootstrap's ``δ*``.

Holm's step-down over the baseline gates of the view's run (the ``k`` gates of this model on this
view, the family whose answer is "not worse than the baseline here"): one-sided p-values of
``H0: δ ≥ margin`` (analytic ``1 − T_df((margin − δ̂) / se)``; bootstrap the share of ``δ* ≥ margin``)
ranked ascending; the gate of rank ``j`` (from 0) is tested at ``α' = 0.05 / (k − j)`` and passes
when its bound is below the margin and every gate ranked before it passed.

Refused, as a user error before inference (:class:`BaselineGates`): a baseline with no report on
the view, and a baseline scored on another snapshot (both hashes named). The score step checks
again (a run may start at it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from kedro.framework.hooks import hook_impl
from scipy import special  # t quantile and tail: scipy.stats.t's own functions

from jevkedro.compare import CompareError, load_output, model_catalog, model_records, repeats_of
from jevkedro.config import BASELINE_GATES, gates_for, parse_gates
from jevkedro.datasets import catalog_dataset
from jevkedro.errors import UserError
from jevkedro.nodes import compare as C
from jevkedro.nodes import repeats as R
from jevkedro.nodes.analytic import paired_analytic
from jevkedro.nodes.report import check_gates, resampling_units
from jevkedro.nodes.validate import build_question_table

ALPHA = 0.05
WORSE_WORD = {"accuracy": "drop", "nll": "rise", "brier": "rise", "ece": "rise"}
_project: dict[str, Path] = {}  # the project root of the kedro session (BaselineGates), for the baseline's files


class BaselineError(UserError):
    """A baseline gate cannot be checked: no report of the baseline, or another snapshot."""


def project_root() -> Path:
    return _project.get("root") or Path.cwd()


def baseline_report(root: Path, view: str, baseline: str) -> tuple[dict[str, Any], Path]:
    """The baseline's current report on ``view`` and its file; refused when there is none."""
    try:
        catalog = model_catalog(root, baseline)
        path = Path(catalog_dataset(catalog, f"{view}.report").filepath)
        report = load_output(catalog, f"{view}.report", "no such file")
    except CompareError as exc:
        raise BaselineError(f"gates.{view}.baseline={baseline}: no report of the baseline on {view} ({exc}); run "
                            f"`kedro run --pipelines={view} --params=model.name={baseline}` first") from None
    if not isinstance(report, Mapping) or not isinstance(report.get("snapshot_sha256"), str):
        raise BaselineError(f"gates.{view}.baseline={baseline}: {path} has no snapshot_sha256: not a report to compare with")
    return dict(report), path


def check_same_snapshot(view: str, baseline: str, report: Mapping[str, Any], path: Path, sha256: str) -> None:
    if report["snapshot_sha256"] != sha256:
        raise BaselineError(f"gates.{view}.baseline={baseline}: the baseline's report {path} was scored on snapshot "
                            f"{report['snapshot_sha256']}, this run's snapshot of {view} is {sha256}; rerun the "
                            "baseline on this snapshot")


def baseline_of(gates: Any, view: str) -> tuple[str | None, dict[str, float]]:
    """The view's baseline and the margins set for it (``gates.all`` then ``gates.<view>``)."""
    merged = gates_for(parse_gates(gates), view)
    margins = {g: getattr(merged, g) for g in BASELINE_GATES if getattr(merged, g) is not None}
    return (merged.baseline, margins) if merged.baseline and margins else (None, {})


# -- the statistics -----------------------------------------------------------------------------

def _one_sided(change: float | None, se: float | None, df: int, margin: float, level_alpha: float
               ) -> tuple[float | None, float]:
    """(upper bound at ``1 - level_alpha``, p-value of ``change >= margin``) from a t interval."""
    if change is None or se is None:
        return None, 1.0
    if se == 0:
        return change, 0.0 if change < margin else 1.0
    return change + float(special.stdtrit(df, 1 - level_alpha)) * se, float(special.stdtr(df, -(margin - change) / se))


def _bootstrap_bound(resampled: np.ndarray, level_alpha: float) -> float | None:
    v = resampled[np.isfinite(resampled)]
    return float(np.percentile(v, 100 * (1 - level_alpha))) if len(v) else None


def gate_statistics(this: C.Terms, base: C.Terms, units: np.ndarray, margins: Mapping[str, float],
                    resamples: int = C.RESAMPLES, seed: int = C.SEED) -> list[dict[str, Any]]:
    """Each gate's change, bound, p-values and verdict under Holm's step-down (module docstring)."""
    analytic = paired_analytic(this, base, units)  # of this - baseline
    point_a, point_b, res_a, res_b, counts = C.paired_resamples(this, base, units, resamples, seed)
    rows = []
    for gate, margin in margins.items():
        metric = BASELINE_GATES[gate]
        sign = -1.0 if metric == "accuracy" else 1.0  # the change that makes it worse
        row: dict[str, Any] = {"gate": gate, "metric": metric, "threshold": margin, "n": counts[metric]}
        if metric == "ece":
            a, b = float(point_a[metric][0]), float(point_b[metric][0])
            delta = sign * (res_a[metric] - res_b[metric])
            finite = delta[np.isfinite(delta)]
            change = sign * (a - b) if math.isfinite(a) and math.isfinite(b) else None
            p = float(np.mean(finite >= margin)) if len(finite) and change is not None else 1.0
            row.update(method="paired percentile bootstrap", change=change, p_value=p, resamples=resamples, seed=seed,
                       _resampled=delta if change is not None else np.zeros(0))
        else:
            fig = analytic[metric]
            change = None if fig["mean"] is None else sign * fig["mean"]
            row.update(method="analytic clustered t", change=change, se=fig["se"], df=fig["df"], clusters=fig["clusters"],
                       small_sample=fig["small_sample"], p_value=_one_sided(change, fig["se"], fig["df"], margin, ALPHA)[1])
        rows.append(row)
    k = len(rows)
    order = sorted(range(k), key=lambda i: rows[i]["p_value"])  # stable: ties keep the gates' order
    running, still = 0.0, True
    for j, i in enumerate(order):
        row = rows[i]
        level_alpha = ALPHA / (k - j)
        if row["method"] == "analytic clustered t":
            bound = _one_sided(row["change"], row["se"], row["df"], row["threshold"], level_alpha)[0]
        else:
            bound = _bootstrap_bound(row.pop("_resampled"), level_alpha)
        running = max(running, min(1.0, (k - j) * row["p_value"]))
        within = bound is not None and bound < row["threshold"]
        row.update(value=bound, bound_level=1 - level_alpha, p_holm=running, holm_rank=j + 1, holm_gates=k,
                   passed=bool(still and within), stopped_by_an_earlier_gate=bool(within and not still))
        still = still and within
    return rows


def _message(row: Mapping[str, Any], baseline: str) -> str:
    """The failure as printed: view-free (the caller names it), metric, baseline, bound and margin
    first (the summary line keeps about 80 characters), the bound's level and Holm's family last."""
    head = f"gate {row['gate']}: {row['metric']} {WORSE_WORD[row['metric']]} vs baseline {baseline}"
    if row["value"] is None:
        return (f"{head}: no bound ({row['n']} paired questions, {row.get('clusters', 'no')} clusters), "
                f"margin {row['threshold']:g}")
    holm = f"one-sided {100 * row['bound_level']:.4g}%, Holm over {row['holm_gates']} baseline gates"
    if row["stopped_by_an_earlier_gate"]:
        return (f"{head}: bound {row['value']:.4g} < margin {row['threshold']:g} ({holm}), but Holm's procedure "
                "stops at an earlier failed baseline gate")
    return f"{head}: bound {row['value']:.4g} ≥ margin {row['threshold']:g} ({holm})"


def baseline_gates(snapshot: Any, table: Any, baseline: str, margins: Mapping[str, float],
                   root: Path | None = None, records: Any = None, repeats: int = 1) -> list[dict[str, Any]]:
    """The view's baseline gates, as entries of ``report["gates"]`` (``gate``, ``threshold``: the
    margin, ``value``: the bound, ``passed``, ``message``; with the statistics beside them).
    ``table`` is this run's attempt 0; with ``repeats`` > 1 its ``records`` give the other attempts,
    and both runs (the baseline with its own K) are paired on each question's mean over its repeats."""
    root = project_root() if root is None else root
    view = snapshot.view
    report_b, path = baseline_report(root, view, baseline)
    check_same_snapshot(view, baseline, report_b, path, snapshot.sha256)
    try:
        records_b = model_records(model_catalog(root, baseline), baseline, view)
        repeats_b = repeats_of(report_b, path)
    except CompareError as exc:
        raise BaselineError(f"gates.{view}.baseline={baseline}: {exc}") from None
    table_b = build_question_table(snapshot.rows, records_b)
    units_all, unit_name = resampling_units(snapshot, table)
    keep = ~np.asarray(table.unscored, dtype=bool)
    this = C.terms_of(table) if repeats == 1 else R.averaged_terms(R.attempt_tables(snapshot.rows, table, records, repeats))
    base = C.terms_of(table_b) if repeats_b == 1 else \
        R.averaged_terms(R.attempt_tables(snapshot.rows, table_b, records_b, repeats_b))
    rows = gate_statistics(this, base, np.asarray(units_all, dtype=object)[keep], margins)
    for row in rows:
        if max(repeats, repeats_b) > 1:
            row["repeats"] = {"this": repeats, "baseline": repeats_b}  # each question's mean over its repeats
        row.update(baseline=baseline, baseline_model_id=report_b.get("model_id"), unit=unit_name,
                   message=None if row["passed"] else _message(row, baseline))
    return rows


def view_gates(report: Mapping[str, Any], thresholds: Mapping[str, Any], snapshot: Any, table: Any,
               records: Any = None) -> dict[str, Any]:
    """``report["gates"]``: the thresholds of :func:`jevkedro.nodes.report.check_gates` and the
    baseline gates, ``{"checked": [...], "failed": [...]}`` (``records``: this run's, for its
    repeats when ``model_settings.repeats`` > 1)."""
    out = check_gates(report, thresholds)  # the baseline's settings are left to this function
    baseline = thresholds.get("baseline")
    margins = {g: thresholds[g] for g in BASELINE_GATES if thresholds.get(g) is not None}
    if baseline and margins:
        repeats = int((report.get("model_settings") or {}).get("repeats") or 1)
        if repeats > 1 and records is None:
            raise ValueError("baseline gates of a run with repeats need its records (every attempt)")
        rows = baseline_gates(snapshot, table, baseline, margins, records=records, repeats=repeats)
        out["checked"] += rows
        out["failed"] += [r for r in rows if not r["passed"]]
    return out


# -- before inference -------------------------------------------------------------------------------

class BaselineGates:
    """Refuse a run whose baseline gates cannot be checked before anything is asked: when the
    pipeline starts, a baseline without a report on a view of the run; before a view's inference,
    a baseline scored on another snapshot than the one just verified."""

    def __init__(self) -> None:
        self._gates: Any = None

    @hook_impl
    def after_context_created(self, context) -> None:
        _project["root"] = Path(context.project_path)

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        self._gates = (parameters.get("parameters") or {}).get("gates")

    @hook_impl(tryfirst=True)  # before kedro-mlflow opens a run or anything is written
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        for view in sorted({n.namespace for n in pipeline.nodes if n.namespace}):
            baseline, _ = baseline_of(self._gates, view)
            if baseline and any(n.name in (f"{view}.infer", f"{view}.score") for n in pipeline.nodes):
                baseline_report(project_root(), view, baseline)

    @hook_impl
    def before_node_run(self, node, catalog, inputs) -> None:
        view = node.namespace
        if not view or node.name != f"{view}.infer":
            return
        baseline, _ = baseline_of(self._gates, view)
        snapshot = (inputs or {}).get(f"{view}.verified_snapshot")
        if baseline and snapshot is not None:
            report, path = baseline_report(project_root(), view, baseline)
            check_same_snapshot(view, baseline, report, path, snapshot.sha256)
