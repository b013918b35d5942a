"""Report additions, gates, plots and MLflow bookkeeping without a whole kedro run: latency p99 and
histogram, cost per 1,000 requests, request errors (report, summary line, MLflow), gates, valid
PNGs through the catalog dataset, and runs a killed process left RUNNING."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread

from jevkedro.config import SettingsError, gates_for, parse_gates
from jevkedro.datasets import PlotsDataset
from jevkedro.nodes import plots, tracking
from jevkedro.nodes.report import check_gates, cost_summary, error_summary, latency_summary, summary_line
from jevkedro.parameters import check_parameters
from support import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def minimal_report(**extra):
    rep = {"model": "m", "view": "zh_decision_bench", "family": "zh_decision_bench", "data": "official",
           "snapshot_sha256": "ab" * 32, "adapter": "replay", "probability_source": "native",
           "metrics": {"overall": {"accuracy": 0.5, "accuracy_n": 10, "nll": 0.7, "brier": 0.5, "ece": 0.1}},
           "coverage": {"questions": 10, "requests": 10, "by_status": {"ok": 10}, "answered_valid_fraction": 1.0},
           "latency": {"p50": 0.002, "p95": 0.004, "p99": 0.005}, "official": None,
           "intervals": {"overall": {"accuracy": [0.3, 0.7], "ece": [0.05, 0.2]}},
           "run": {"complete": True, "clean": True}}
    rep.update(extra)
    return rep


def test_latency_p99_histogram_and_cost_per_1k():
    preds = {f"r{i}": {"status": "ok", "latency_s": (i + 1) / 1000, "first": i == 0, "cost_usd": 0.002} for i in range(101)}
    lat = latency_summary(preds)
    rest = np.arange(2, 102) / 1000
    assert lat["p99"] == pytest.approx(np.percentile(rest, 99)) and lat["p50"] == pytest.approx(np.percentile(rest, 50))
    assert sum(lat["histogram"]["counts"]) == 100 and len(lat["histogram"]["edges_ms"]) == len(lat["histogram"]["counts"]) + 1
    cost = cost_summary(preds)
    assert cost["usd"] == pytest.approx(0.202) and cost["usd_per_1k_requests"] == pytest.approx(2.0)
    preds["r5"]["cost_usd"] = None  # an unknown cost makes the total unknown, never 0
    assert cost_summary(preds)["usd_per_1k_requests"] is None


def test_request_errors_are_counted_in_report_summary_line_and_mlflow():
    preds = {"r1": {"status": "ok"}, "r2": {"status": "error", "failure": "server"},
             "r3": {"status": "error", "failure": "server"}, "r4": {"status": "error", "failure": "timeout"}}
    errors = error_summary(preds)
    assert errors == {"requests": 3, "by_failure": {"server": 2, "timeout": 1}}
    rep = minimal_report(errors=errors, run={"complete": True, "clean": False, "error_requests": 3})
    line = summary_line(rep)
    assert "ERRORS: 3 requests failed" in line and all(len(x) <= 100 for x in line.splitlines())
    run = tracking.view_run(rep, None, {"snapshot": {"file": "x.tsv"}})
    assert run.metrics["errors"] == 3 and run.tags["clean"] == "false" and run.tags["complete"] == "true"


def test_unsupported_view_reads_na_not_zero():
    rep = minimal_report(coverage={"questions": 6, "requests": 3, "by_status": {"unsupported": 6, "ok": 0}},
                         metrics={"overall": {"accuracy": 0.0, "accuracy_n": 6, "nll": None, "ece": None}})
    assert "n/a (unsupported" in summary_line(rep) and "0.000" not in summary_line(rep)
    from jevkedro.summary import cell

    assert cell(rep) == "n/a (unsupported)"


def test_gates_parse_merge_and_check():
    gates = parse_gates({"all": {"max_errors": 0, "min_accuracy": 0.4}, "zh_decision_bench": {"min_accuracy": 0.6}})
    merged = gates_for(gates, "zh_decision_bench").model_dump(exclude_none=True)
    assert merged == {"max_errors": 0, "min_accuracy": 0.6}
    res = check_gates(minimal_report(errors={"requests": 2}), {**merged, "min_accuracy_ci_low": 0.25, "max_ece_ci_high": 0.1})
    failed = {f["gate"]: f for f in res["failed"]}
    assert set(failed) == {"max_errors", "min_accuracy", "max_ece_ci_high"}
    assert failed["min_accuracy"]["message"] == "gate min_accuracy: accuracy 0.5 is below the threshold 0.6"
    assert failed["max_ece_ci_high"]["value"] == 0.2
    missing = check_gates(minimal_report(), {"min_official": 10})["failed"][0]
    assert "missing" in missing["message"]  # no number never passes a guard
    with pytest.raises(SettingsError, match="gates.zh_decision_bench.min_acuracy: unknown setting; did you mean"):
        check_parameters({"model": {"adapter": "sparrow", "name": "m"}, "gates": {"zh_decision_bench": {"min_acuracy": 0.5}}})
    with pytest.raises(SettingsError, match="gates.all.max_ece: must be a number"):
        parse_gates({"all": {"max_ece": "0.2"}})


def test_view_plots_are_valid_pngs_through_the_dataset(tmp_path):
    rng = np.random.default_rng(0)
    scores = []
    for i in range(120):
        p = float(rng.uniform(0.4, 0.95))
        scores.append({"request_id": f"r{i // 2}", "status": "ok", "label": 0, "probabilities": [p, 1 - p],
                       "correct": bool(rng.uniform() < p)})
    scores.append({"request_id": "r99", "status": "invalid", "label": 0, "probabilities": None, "correct": False})
    report = minimal_report(intervals={"overall": {"ece": [0.01, 0.1]},
                                       "by_type": {"noul": {"n": 60, "accuracy": 0.6, "accuracy_ci": [0.5, 0.7],
                                                            "mean_confidence": 0.7},
                                                   "choice": {"n": 60, "accuracy": 0.7, "accuracy_ci": [0.6, 0.8],
                                                              "mean_confidence": 0.65}}},
                            latency={"p50": 0.002, "p95": 0.004, "p99": 0.005, "first": 0.1,
                                     "histogram": {"edges_ms": [1.0, 2.0, 4.0], "counts": [5, 7]}})
    figures = plots.view_plots(None, report, scores)
    assert set(figures) == {"reliability.png", "slices.png", "latency.png", "risk_coverage.png"}
    dataset = PlotsDataset(str(tmp_path / "plots"))
    dataset.save(figures)
    loaded = dataset.load()
    assert set(loaded) == set(figures)
    for name, data in loaded.items():
        assert data[:8] == PNG
        assert imread(tmp_path / "plots" / name).shape[0] > 100
    empty = plots.view_plots(None, minimal_report(latency={"p50": None}), [])  # nothing answered: still PNGs
    assert all(plots.figure_png(f)[:8] == PNG for f in empty.values())


KILLED_TRACKER = """
import os, signal, sys
from mlflow import MlflowClient
from jevkedro.nodes import tracking
client = MlflowClient(tracking_uri=sys.argv[1])
exp = tracking.experiment_id(client, "jevkedro/zh_decision_bench")
run = client.create_run(exp, run_name="m", tags={"model": "m", "view": "zh_decision_bench", "superseded": "false",
                                                 **tracking.live_tags()})
client.log_param(run.info.run_id, "model.adapter", "sparrow")
print(run.info.run_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed mid-tracking: the run is never terminated
"""


def test_a_run_left_running_by_a_killed_process_is_marked_failed(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", KILLED_TRACKER, uri], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    killed_id = done.stdout.split()[-1]
    client = MlflowClient(tracking_uri=uri)
    exp = tracking.experiment_id(client, "jevkedro/zh_decision_bench")
    alive = client.create_run(exp, run_name="alive", tags=tracking.live_tags())  # this process: still open, not stale
    assert client.get_run(killed_id).info.status == "RUNNING"
    assert tracking.fail_stale_runs(client, tracking.jevkedro_experiment_ids(client)) == [killed_id]
    killed = client.get_run(killed_id)
    assert killed.info.status == "FAILED" and killed.data.tags["failure"].startswith("killed: process")
    assert client.get_run(alive.info.run_id).info.status == "RUNNING"
    # the next tracked view does the same check before logging
    report = minimal_report(model="n")
    run_id = tracking.log_view_run(tracking.view_run(report, None, {"snapshot": {"file": str(tmp_path / "x.tsv")}}), uri)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert json.loads(json.dumps(client.get_run(run_id).data.params)) == {"model.adapter": "replay"}


def test_mlflow_notices_go_through_the_project_logging_from_the_first_hook():
    """kedro-mlflow's hook creates the tracking store before any project hook runs, and MLflow
    prints "Creating initial MLflow database tables..." through its own stderr handler: loading the
    project's hooks hands MLflow's loggers to conf/logging.yml first (a fresh process, as `kedro run`)."""
    import subprocess
    import sys

    code = ("import logging, jevkedro.hooks, mlflow.store.db.utils\n"
            "for name in ('mlflow', 'alembic'):\n"
            "    lg = logging.getLogger(name)\n"
            "    print(name, len(lg.handlers), lg.propagate)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["mlflow", "0", "True", "alembic", "0", "True"]
