"""Corpus, class 10 and the kill points already handled — failures in the middle of a run.

Class 10: interleaved server errors leave a complete run that is not clean: the errors are counted
in the report (``errors``, ``run.clean``), the summary line (``ERRORS: n requests failed``) and
MLflow (the ``errors`` metric, ``clean`` tag), and a rerun asks exactly the failed requests again;
a log line that is valid JSON without a status is refused naming the line before anything is asked.
Kill points: a run is killed with SIGKILL at each place it writes (while appending answers, before
each atomic rename of ``run.json`` and of the compacted log); the rerun loses no answer and asks
again at most the one request whose answer was in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_support import lines, settings_for

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError
from jevkedro.nodes.report import build_report, summary_line
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot

pytest.importorskip("aiohttp")

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


def run(snapshot, settings, path):
    return run_inference(snapshot, make_adapter(settings), PredictionLog(path), EngineSettings.from_model(settings), settings)


def report_of(snapshot, path, settings):
    plog = PredictionLog(path)
    table = build_question_table(snapshot, plog.records)
    return build_report(snapshot, table, plog.records, settings | {"name": "flaky-model"}, plog.checked_meta(), None)


# -- class 10: interleaved 5xx are counted everywhere and asked again ------------------------------------

def test_interleaved_5xx_are_counted_in_report_summary_line_and_mlflow_then_cleared_by_a_rerun(tmp_path, server):
    from mlflow import MlflowClient

    from jevkedro.nodes.tracking import log_view_run, view_run

    rows = synthetic_rows(6, {1: "flaky:1", 4: "flaky:1"}, prefix="count")  # a 500 the first time only
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    settings = settings_for(server)
    path = tmp_path / "out" / "predictions.jsonl"
    first = run(snapshot, settings, path)
    assert first["statuses"] == {"ok": 4, "error": 2} and first["stopped"] is None

    report = report_of(snapshot, path, settings)
    assert report["errors"] == {"requests": 2, "by_failure": {"server": 2}}
    assert (report["run"]["complete"], report["run"]["clean"], report["run"]["error_requests"]) == (True, False, 2)
    assert "ERRORS: 2 requests failed" in summary_line(report)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_view_run(view_run(report, None, snapshot.manifest), uri)
    logged = MlflowClient(tracking_uri=uri).get_run(run_id).data
    assert logged.metrics["errors"] == 2 and logged.tags["clean"] == "false" and logged.tags["complete"] == "true"

    second = run(snapshot, settings, path)
    assert (second["asked"], second["reused"], second["statuses"]) == (2, 4, {"ok": 6})
    assert {t: server.counts[t] for t in (r.request_id for r in rows)} == {
        f"count{i:05d}": 2 if i in (1, 4) else 1 for i in range(6)}
    again = report_of(snapshot, path, settings)
    assert again["errors"]["requests"] == 0 and again["run"]["clean"] is True
    assert "ERRORS" not in summary_line(again)


@pytest.mark.parametrize("bad", [
    '{"request_id": "nostat00001"}',
    '{"request_id": "nostat00001", "status": null}',
    '{"request_id": "nostat00001", "status": "OK"}',
])
def test_a_log_line_without_a_status_is_refused_on_resume_and_nothing_is_asked(tmp_path, server, bad):
    rows = synthetic_rows(3, prefix="nostat")
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    settings = settings_for(server)
    path = tmp_path / "out" / "predictions.jsonl"
    run(snapshot, settings, path)
    before = dict(server.counts)
    text = path.read_text().splitlines()
    text[1] = bad
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(PredictionLogError, match=r"predictions.jsonl:2: not a prediction record"):
        run(snapshot, settings, path)
    assert dict(server.counts) == before  # nothing asked again, nothing silently dropped
    assert path.read_text().splitlines()[1] == bad  # the log is left as it was for the user to look at


def test_a_torn_last_line_is_asked_again_once_and_nothing_else_is(tmp_path, server):
    rows = synthetic_rows(4, prefix="torn")
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    settings = settings_for(server)
    path = tmp_path / "out" / "predictions.jsonl"
    run(snapshot, settings, path)
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1 + 25])  # the last record cut mid-line
    second = run(snapshot, settings, path)
    assert (second["asked"], second["reused"], second["statuses"]) == (1, 3, {"ok": 4})
    assert [server.counts[f"torn{i:05d}"] for i in range(4)] == [1, 1, 1, 2]
    assert [r["request_id"] for r in lines(PredictionLog(path))] == [f"torn{i:05d}" for i in range(4)]


# -- kill points: SIGKILL where the run writes ----------------------------------------------------------

KILLED_RUN = r"""
import os, signal, sys
from jevkedro.models import make_adapter
from jevkedro.nodes import infer
from jevkedro.nodes.snapshot import load_snapshot, verify_snapshot_bytes

point, root, view, endpoint, out = sys.argv[1:]
what, _, nth = point.partition(":")
nth, seen = int(nth), [0]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if what == "append":  # killed after `nth` answers were written, the next one received
    append = infer.PredictionLog.append
    def killing_append(self, record):
        seen[0] += 1
        if seen[0] > nth:
            die()
        append(self, record)
    infer.PredictionLog.append = killing_append
else:  # killed before the `nth` rename onto `what` (the temp file written, the old file in place)
    replace = os.replace
    def killing_replace(src, dst, *a, **k):
        if os.path.basename(os.fspath(dst)) == what:
            seen[0] += 1
            if seen[0] == nth:
                die()
        return replace(src, dst, *a, **k)
    os.replace = killing_replace

settings = {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "", "progress": 0}
snapshot = verify_snapshot_bytes(load_snapshot(root, view))
infer.run_inference(snapshot, make_adapter(settings), infer.PredictionLog(out), infer.EngineSettings.from_model(settings), settings)
"""


@pytest.mark.parametrize("point, written, in_flight", [
    ("append:0", 0, 1),  # the first answer received, not written
    ("append:3", 3, 1),  # three answers written, the fourth received
    ("run.json:1", 0, 0),  # before anything is asked: run.json being written
    ("predictions.jsonl:1", 6, 0),  # every answer appended, the compacted copy not yet in place
    ("run.json:2", 6, 0),  # the log compacted, the final run.json not yet in place
])
def test_a_kill_at_each_write_loses_no_answer_and_the_rerun_asks_only_what_is_missing(tmp_path, server, point, written, in_flight):
    prefix = "k" + point.replace(".", "").replace(":", "")[:8]
    rows = synthetic_rows(6, prefix=prefix)
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    path = tmp_path / "out" / "predictions.jsonl"
    proc = subprocess.run([sys.executable, "-c", KILLED_RUN, point, str(tmp_path / "snap"), snapshot.view,
                           server.endpoint, str(path)], env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    survived = PredictionLog(path).done(snapshot.sha256) if path.exists() else set()
    assert len(survived) == written  # every answer written before the kill is still there

    settings = settings_for(server)
    second = run(snapshot, settings, path)
    assert (second["reused"], second["asked"], second["statuses"]) == (written, 6 - written, {"ok": 6})
    asks = [server.counts[f"{prefix}{i:05d}"] for i in range(6)]
    assert sum(asks) == 6 + in_flight and max(asks) <= 2  # only an answer in flight at the kill is asked twice
    assert PredictionLog(path).checked_meta()["last_run"]["statuses"] == {"ok": 6}
