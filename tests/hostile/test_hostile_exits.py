"""Round 3, classes 5, 17 and 18 — exit codes and the tracking store tell the truth. Real `kedro run`
subprocesses in a throw-away project copy, against real loopback servers and a real sqlite store.

Class 18: a run stopped early (a 401 on the first request, "connection refused", 503s until the
engine gives up) exits 4, after writing its reports, with one line saying why and how many
requests were answered; kedro-mlflow's record of the run ends FAILED.
Class 17: with ``mlflow.db`` locked by another process (before the run or while it asks), corrupt,
or a directory, the reports are still written, the run exits 5 with one line naming the store, and
the next run (the store back) tracks the view.
Class 5: a current run's MLflow tags describe its current result: ``gates=failed`` does not outlive
the gate, and the same answers under another resolved model version take the new ``model_id``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jevkedro.testing import LoopbackServer
from support import ROOT, copy_project

pytestmark = pytest.mark.e2e
pytest.importorskip("httpx")

VIEW = "zh_decision_bench"
DEFAULT = "sparrow-nano-general-v1.1"
LOCKER = r"""
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("exits"), [VIEW])


def kedro(project: Path, params: str = "", key: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    if key is not None:
        env["TYPESAFE_API_KEY"] = key
    cmd = [sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}"] + ([f"--params={params}"] if params else [])
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def error_line(done: subprocess.CompletedProcess) -> str:
    """The run's one ``Error:`` line (click's), checked to be alone and without a traceback."""
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "╭" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out[-3000:]
    after = done.stderr.split(errors[0], 1)[1]
    assert not after.strip(), f"more after the error line: {after!r}"
    return errors[0]


def report_of(project: Path, model: str) -> dict:
    return json.loads((project / f"data/08_reporting/{model}/{VIEW}/report.json").read_text(encoding="utf-8"))


def client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")


def view_runs(project: Path, model: str) -> list:
    c = client(project)
    exp = c.get_experiment_by_name(f"jevkedro/{VIEW}")
    return c.search_runs([exp.experiment_id], filter_string=f"tags.model = '{model}'") if exp else []


def last_kedro_run(project: Path):
    c = client(project)
    (run,) = c.search_runs([c.get_experiment_by_name("jevkedro").experiment_id],
                           order_by=["attributes.start_time DESC"], max_results=1)
    return run


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- class 18: a run that stopped early exits 4 -------------------------------------------------------

def _unavailable(body, auth, fault):
    return 503, [("Content-Type", "application/json")], b'{"error": {"message": "overloaded"}}'


@pytest.mark.parametrize("case", ["401-first-request", "connection-refused", "503-until-the-engine-gives-up"])
def test_a_run_stopped_early_exits_4_after_writing_its_reports_saying_why_in_one_line(project, case):
    name = f"stopped-{case.split('-')[0]}"
    server = LoopbackServer(required_key="the-right-key-0001") if case.startswith("401") else \
        LoopbackServer(responder=_unavailable) if case.startswith("503") else None
    with server or _nothing():
        endpoint = server.endpoint if server else f"http://127.0.0.1:{closed_port()}/v1"
        done = kedro(project, f"model.adapter=systemone,model.endpoint={endpoint},model.model=jev-1.13.0,model.name={name}",
                     key="a-wrong-key-0002")
    assert done.returncode == 4, (done.returncode, done.stderr[-3000:])
    line = error_line(done)
    assert line.startswith(f"Error: {VIEW} ({name}): stopped early, 0 of 378 requests answered: "), line
    why = line.split("answered: ", 1)[1].lower()
    assert {"401": "401", "connection": "connection", "503": "503"}[case.split("-")[0]] in why, line
    assert "a-wrong-key-0002" not in done.stdout + done.stderr
    report = report_of(project, name)  # written before the exit
    assert report["run"]["complete"] is False and report["run"]["stopped"]
    assert "INCOMPLETE" in done.stdout  # the summary line still came
    (run,) = view_runs(project, name)
    assert run.info.status == "FINISHED" and run.data.tags["complete"] == "false"
    assert last_kedro_run(project).info.status == "FAILED"  # kedro-mlflow's record of this kedro run


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# -- class 17: a store that is down never costs a result ---------------------------------------------

def _lock(db: Path) -> subprocess.Popen:
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


def _release(locker: subprocess.Popen) -> None:
    os.kill(locker.pid, signal.SIGTERM)
    locker.wait(timeout=30)


@pytest.mark.parametrize("fault", ["locked-before-the-run", "locked-while-it-asks", "corrupt", "a-directory"])
def test_a_store_that_is_down_costs_no_result_names_the_store_and_the_next_run_tracks(project, tmp_path, fault):
    db = project / "mlflow.db"
    name = f"store-{fault.split('-')[0]}-{fault.split('-')[-1]}"
    if not db.is_file():  # a store with its tables, as after any earlier run
        assert kedro(project).returncode == 0
    shutil.rmtree(project / "data/08_reporting" / name, ignore_errors=True)
    locker = None
    server = None
    params = f"model.name={name}"
    if fault == "locked-before-the-run":
        locker = _lock(db)
    elif fault == "locked-while-it-asks":  # the first request takes the store's lock, then answers
        taken: list[subprocess.Popen] = []
        guard = threading.Lock()

        def responder(body, auth, f):
            with guard:
                if not taken:
                    taken.append(_lock(db))
            return None

        server = LoopbackServer(responder=responder).start()
        params += f",model.adapter=systemone,model.endpoint={server.endpoint},model.model=jev-1.13.0"
    elif fault == "corrupt":
        db.rename(tmp_path / "mlflow.db.good")
        db.write_bytes(b"this is not a database " * 400)
    else:
        db.rename(tmp_path / "mlflow.db.good")
        db.mkdir()
    started = time.monotonic()
    try:
        done = kedro(project, params, key="open-endpoint-key-003")
    finally:
        if server is not None:
            server.stop()
            locker = taken[0] if taken else None
        if locker is not None:
            _release(locker)
    took = time.monotonic() - started
    assert done.returncode == 5, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    line = error_line(done)
    assert line.startswith(f"Error: MLflow store {db} could not be written ("), line
    assert f"not recorded: {name} / {VIEW}" in line and "the next kedro run records them" in line, line
    assert report_of(project, name)["view"] == VIEW  # the result was written
    assert (project / f"data/08_reporting/{name}/{VIEW}/report.html").is_file()
    assert took < 150, took  # no minutes of MLflow's own retries against a path it cannot open
    # the store back: the next run tracks the view
    if fault in ("corrupt", "a-directory"):
        shutil.rmtree(db) if db.is_dir() else db.unlink()
        (tmp_path / "mlflow.db.good").rename(db)
    params = f"model.name={name}" if fault != "locked-while-it-asks" else params
    with LoopbackServer() as again:
        params = params.replace(server.endpoint, again.endpoint) if server is not None else params
        nxt = kedro(project, params, key="open-endpoint-key-003")
    assert nxt.returncode == 0, nxt.stderr[-3000:]
    (run,) = view_runs(project, name)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["accuracy"] == pytest.approx(report_of(project, name)["metrics"]["overall"]["accuracy"])
    with sqlite3.connect(db) as con:  # the store itself is sound
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# -- class 5: a current run's tags describe its current result --------------------------------------

def _replay(project: Path, out: Path, model: str) -> Path:
    source = project / f"data/07_model_output/{DEFAULT}/{VIEW}/predictions.jsonl"
    lines = [json.loads(x) for x in source.read_text(encoding="utf-8").splitlines() if x.strip()]
    out.write_text("".join(json.dumps({"request_id": r["request_id"], "response": {**r["response"], "model": model}}) + "\n"
                           for r in lines), encoding="utf-8")
    return out


def test_tags_follow_the_current_result_gates_and_resolved_model_version(project, tmp_path):
    if not (project / f"data/07_model_output/{DEFAULT}/{VIEW}/predictions.jsonl").is_file():
        assert kedro(project).returncode == 0
    name = "replayed-versions"
    first = _replay(project, tmp_path / "v1.jsonl", "jev-x@1")
    failing = kedro(project, f"model.adapter=replay,model.path={first},model.name={name},gates.all.min_accuracy=0.99")
    assert failing.returncode == 3, failing.stderr[-3000:]
    assert last_kedro_run(project).info.status == "FAILED"  # a failed gate is no FINISHED kedro run
    (run,) = view_runs(project, name)
    assert run.data.tags["gates"] == "failed" and run.data.tags["model_id"] == "jev-x@1"
    second = _replay(project, tmp_path / "v2.jsonl", "jev-x@2")  # the same answers, another model version
    done = kedro(project, f"model.adapter=replay,model.path={second},model.name={name}")
    assert done.returncode == 0, done.stderr[-3000:]
    current = [r for r in view_runs(project, name) if r.data.tags.get("superseded") == "false"]
    assert len(current) == 1, [r.data.tags for r in current]
    tags = current[0].data.tags
    assert "gates" not in tags and tags["model_id"] == "jev-x@2", tags
    assert last_kedro_run(project).info.status == "FINISHED"
