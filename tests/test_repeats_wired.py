"""Repeated sampling end to end (issue 22 item 4, ``model.repeats=K``): a loopback System One
server answering seeded random probabilities on every call is asked each request K times, a run
killed mid-way resumes asking no (request, attempt) again, the report's across-repeat figures
match a direct computation from the log, deterministic adapters refuse repeats > 1 (a real
``kedro run``: exit 2 naming model.repeats) and a replay file with attempts is scored."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from jevkedro.config import SettingsError
from jevkedro.errors import UserError
from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings, ModelSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError
from jevkedro.nodes.report import build_report
from jevkedro.nodes.tracking import run_params
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot

pytest.importorskip("httpx")

N, K = 10, 3


class RandomAnswers:
    """A System One responder: every call (counted) answers seeded random probabilities."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, body, auth, fault):
        with self.lock:
            self.calls += 1
            rng = random.Random(self.calls)
        answers = {}
        for qid, q in body["questions"].items():
            if q["type"] == "noul":
                answers[qid] = {"type": "noul", "noul": rng.random()}
                continue
            keys = list(q["criteria"]) if q["type"] == "choice" else [str(i) for i in range(len(q["criteria"]))]
            w = [rng.random() + 0.05 for _ in keys]
            probs = {k: x / sum(w) for k, x in zip(keys, w)}
            best = max(probs, key=probs.get)
            answers[qid] = ({"type": "choice", "choice": best, "probabilities": probs} if q["type"] == "choice"
                            else {"type": "score", "probabilities": probs})
        payload = json.dumps({"model": "jev-1.13.0", "answers": answers}).encode()
        return 200, [("x-typesafe-request-id", f"srv-{rng.random():.12f}")], payload


def _settings(endpoint: str, repeats: int, **extra) -> dict:
    return {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "", "progress": 0,
            "repeats": repeats, **extra}


def _lines(path: Path) -> list[dict]:
    raw = path.read_bytes() if path.exists() else b""
    return [json.loads(x) for x in raw[: raw.rfind(b"\n") + 1].decode().splitlines() if x.strip()]


def _direct(snapshot, lines: list[dict]) -> dict:
    """The across-repeat figures computed plainly from the log's lines and the snapshot's targets."""
    rows = {r.request_id: r for r in snapshot.rows}
    per_q: dict[tuple, list[tuple[float, float, float, int]]] = {}
    for rec in lines:
        row = rows[rec["request_id"]]
        for qid, q in row.request["questions"].items():
            cands, label = row.candidates[qid], row.targets[qid].label
            a = rec["response"]["answers"][qid]
            p = [a["noul"], 1 - a["noul"]] if q["type"] == "noul" else [a["probabilities"][c] for c in cands]
            if q["type"] == "noul" and cands != ["true", "false"]:
                p = p[::-1]
            top = int(np.argmax(p))
            y = [1.0 if i == label else 0.0 for i in range(len(cands))]
            per_q.setdefault((rec["request_id"], qid), []).append(
                (float(top == label), -math.log(max(p[label], 1e-12)), sum((pi - yi) ** 2 for pi, yi in zip(p, y)), top))
    out = {}
    for m, name in enumerate(("accuracy", "nll", "brier")):
        out[name] = sum(sum(v[m] for v in vals) / len(vals) for vals in per_q.values()) / len(per_q)
        out[f"{name}_within_question_variance"] = float(np.mean([np.var([v[m] for v in vals]) for vals in per_q.values()]))
        per_attempt = [np.mean([vals[k][m] for vals in per_q.values()]) for k in range(K)]
        out[f"{name}_std_across_repeats"] = float(np.std(per_attempt, ddof=1))
    out["same_top_answer_share"] = sum(len({v[3] for v in vals}) == 1 for vals in per_q.values()) / len(per_q)
    return out


def test_every_request_is_asked_k_times_and_the_report_matches_a_direct_computation(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N))
    log_path = tmp_path / "out" / "predictions.jsonl"
    answers = RandomAnswers()
    with LoopbackServer(responder=answers) as srv:
        settings = _settings(srv.endpoint, K, concurrency=3)
        summary = run_inference(snapshot, make_adapter(settings), PredictionLog(log_path),
                                EngineSettings.from_model(settings), settings)
    assert answers.calls == N * K and set(srv.counts.values()) == {K}  # K x requests reached the server
    assert (summary["asked"], summary["reused"], summary["statuses"]) == (N * K, 0, {"ok": N * K})
    lines = _lines(log_path)
    assert [(r["request_id"], r["attempt"]) for r in lines] == [(f"r{i:05d}", k) for i in range(N) for k in range(K)]
    plog = PredictionLog(log_path)
    report = build_report(snapshot, build_question_table(snapshot, plog.records), plog.records,
                          ModelSettings.parse(settings).flat(), plog.meta(), None)
    got, want = report["repeats"], _direct(snapshot, lines)
    assert got["repeats"] == K
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    # metrics pool every repeat; accuracy there is the mean hit rate; the bootstrap's units are the requests
    assert report["metrics"]["overall"]["accuracy"] == pytest.approx(want["accuracy"])
    assert report["coverage"]["questions"] == 3 * N * K and report["intervals"]["units"] == N
    assert report["run"]["complete"] and report["model_settings"]["repeats"] == K
    assert run_params(report)["model.repeats"] == str(K)  # the MLflow param


def test_with_one_repeat_records_and_report_are_as_before(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        settings = _settings(srv.endpoint, 1)
        run_inference(snapshot, make_adapter(settings), PredictionLog(log_path), EngineSettings.from_model(settings),
                      settings)
        plog = PredictionLog(log_path)
        report = build_report(snapshot, build_question_table(snapshot, plog.records), plog.records,
                              ModelSettings.parse(settings).flat(), plog.meta(), None)
        assert not any("attempt" in r for r in _lines(log_path))
        assert "repeats" not in report and "repeats" not in report["model_settings"]
        assert "model.repeats" not in run_params(report)  # K=1 runs keep their MLflow params and result digest
        # raising K reuses attempt 0 (repeats is no part of the identity) and asks only the new attempts
        more = _settings(srv.endpoint, 2)
        summary = run_inference(snapshot, make_adapter(more), PredictionLog(log_path), EngineSettings.from_model(more),
                                more)
    assert (summary["asked"], summary["reused"]) == (3, 3)
    assert set(srv.counts.values()) == {2}
    assert [r.get("attempt") for r in _lines(log_path)] == [None, 1] * 3


DRIVER = textwrap.dedent("""
    import sys
    from jevkedro.models import make_adapter
    from jevkedro.models.settings import EngineSettings
    from jevkedro.nodes.predictions_log import PredictionLog
    from jevkedro.nodes.infer import run_inference
    from jevkedro.nodes.snapshot import load_snapshot, verify_snapshot_bytes

    root, log_path, endpoint = sys.argv[1:4]
    settings = {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "",
                "concurrency": 2, "progress": 0, "fsync": "always", "repeats": 3}
    snapshot = verify_snapshot_bytes(load_snapshot(root, "synthetic_view"))
    summary = run_inference(snapshot, make_adapter(settings), PredictionLog(log_path),
                            EngineSettings.from_model(settings), settings)
    print(summary["asked"], summary["reused"])
""")


def test_a_killed_run_resumes_asking_no_request_attempt_again(tmp_path):
    n = 12
    synthetic_snapshot(tmp_path / "snap", synthetic_rows(n))
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    log_path = tmp_path / "out" / "predictions.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    answers = RandomAnswers()
    with LoopbackServer(delay_s=0.1, responder=None) as srv:
        srv.httpd.responder = lambda body, auth, fault: (time.sleep(0.1), answers(body, auth, fault))[1]
        args = [sys.executable, str(script), str(tmp_path / "snap"), str(log_path), srv.endpoint]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while len(_lines(log_path)) < n + 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
        before = {(r["request_id"], r["attempt"]): r["server_request_id"] for r in _lines(log_path) if r["status"] == "ok"}
        assert n < len(before) < n * 3 and {k for _, k in before} == {0, 1}  # killed within attempt 1
        calls_before = srv.total  # counted as each request arrives (those in flight at the kill included)
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
    asked, reused = map(int, out.stdout.splitlines()[-1].split())  # after the one "resumed" line
    assert (asked, reused) == (n * 3 - len(before), len(before))
    assert srv.total - calls_before == asked  # the rerun asked only what had no answer
    assert calls_before - len(before) <= 3  # at most the requests in flight at the kill were lost
    final = _lines(log_path)
    assert [(r["request_id"], r["attempt"]) for r in final] == [(f"r{i:05d}", k) for i in range(n) for k in range(3)]
    assert {key: r["server_request_id"] for r in final if (key := (r["request_id"], r["attempt"])) in before} == before


def _replay_line(row, attempt, p_first: float) -> dict:
    answers = {}
    for qid, cands in row.candidates.items():
        rest = (1 - p_first) / (len(cands) - 1)
        probs = {c: (p_first if i == 0 else rest) for i, c in enumerate(cands)}
        answers[qid] = {"type": row.request["questions"][qid]["type"], "probabilities": probs}
    return {"request_id": row.request_id, "attempt": attempt, "response": {"model": "m", "answers": answers}}


def test_a_replay_file_with_attempts_is_scored(tmp_path):
    rows = synthetic_rows(4)
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    path = tmp_path / "answers.jsonl"
    # attempt 0 puts 0.9 on the first candidate, attempt 1 0.2: the top answer changes for every question
    path.write_text("".join(json.dumps(_replay_line(r, k, (0.9, 0.2)[k])) + "\n" for k in (1, 0) for r in rows))
    settings = {"adapter": "replay", "path": str(path), "progress": 0, "repeats": 2}
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    assert summary["statuses"] == {"ok": 8}
    plog = PredictionLog(plog.path)
    report = build_report(snapshot, build_question_table(snapshot, plog.records), plog.records,
                          ModelSettings.parse(settings).flat(), plog.meta(), None)
    rep = report["repeats"]
    assert rep["repeats"] == 2 and rep["same_top_answer_share"] == 0.0
    # labels 0 (noul, choice) and 1 (score): attempt 0's top is candidate 0, attempt 1's candidate 1, so
    # every question is hit in exactly one of its two repeats
    assert rep["accuracy"] == 0.5 and rep["accuracy_within_question_variance"] == 0.25 and rep["accuracy_n"] == 12
    assert report["replay"]["attempts"] == 2
    assert report["coverage"]["by_status"]["ok"] == 24
    # a file answering attempt 1 with model.repeats=1 is refused, naming the setting
    one = {**settings, "repeats": 1}
    with pytest.raises(UserError, match=r"model\.repeats=1.*model\.repeats=2"):
        run_inference(snapshot, make_adapter(one), PredictionLog(tmp_path / "o2" / "p.jsonl"), EngineSettings(), one)


@pytest.mark.parametrize("attempt", ['"1"', "-1", "true", "1.0"])
def test_a_replay_attempt_that_is_not_a_whole_number_is_refused(tmp_path, attempt):
    path = tmp_path / "answers.jsonl"
    path.write_text(f'{{"request_id": "r00000", "attempt": {attempt}, "response": {{}}}}\n')
    problems = ModelSettings.parse({"adapter": "replay", "path": str(path)})
    adapter = make_adapter(problems)
    with pytest.raises(Exception, match=r"answers.jsonl:1: attempt .* is not a whole number"):
        adapter.setup()


def test_a_replay_line_repeating_a_request_and_attempt_is_refused(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text('{"request_id": "a", "attempt": 0, "response": {}}\n{"request_id": "a", "attempt": 1, "response": {}}\n'
                    '{"request_id": "a", "attempt": 1, "response": {}}\n')
    with pytest.raises(Exception, match=r"answers.jsonl:3: request_id 'a' attempt 1 repeats line 2"):
        make_adapter({"adapter": "replay", "path": str(path)}).setup()


def test_a_log_line_with_a_bad_attempt_is_refused_naming_file_and_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"request_id": "a", "status": "ok", "attempt": 0}\n{"request_id": "a", "status": "ok", "attempt": -2}\n')
    with pytest.raises(PredictionLogError, match=r"predictions.jsonl:2: .*attempt -2 is not a whole number"):
        PredictionLog(path)


S1 = {"adapter": "systemone", "endpoint": "http://127.0.0.1:9/v1"}
ALLOWED = "is not allowed; allowed: an integer ≥ 1"


@pytest.mark.parametrize("settings, expected", [
    ({"adapter": "sparrow", "repeats": 2}, "model.repeats=2: the sparrow adapter is deterministic"),
    ({"adapter": "minilm", "repeats": 3}, "model.repeats=3: the minilm adapter is deterministic"),
    ({"adapter": "systemone", "endpoint": "http://127.0.0.1:9/v1", "repeats": 2, "executor": "dask"},
     "model.repeats=2: the dask executor asks each request once"),
    ({**S1, "repeats": 0}, f"model.repeats: 0 {ALLOWED}"),
    ({**S1, "repeats": "2"}, f"model.repeats: '2' {ALLOWED}"),
    ({**S1, "repeats": True}, f"model.repeats: True {ALLOWED}"),
    ({**S1, "repeats": 2.0}, f"model.repeats: 2.0 {ALLOWED}"),
])
def test_repeats_that_cannot_be_asked_are_refused_by_the_settings_check(settings, expected):
    with pytest.raises(SettingsError) as err:
        ModelSettings.parse(settings)
    assert any(expected in p for p in err.value.problems), err.value.problems


@pytest.mark.e2e
def test_kedro_run_with_the_embedded_model_and_two_repeats_exits_2_naming_the_setting(tmp_path):
    from support import copy_project

    project = copy_project(tmp_path, ["zh_decision_bench"])
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench",
                           "--params=model.repeats=2"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "model.repeats=2: the sparrow adapter is deterministic" in out and "Traceback" not in out, out[-3000:]
    assert not (project / "data" / "07_model_output").exists() or not any((project / "data" / "07_model_output").iterdir())
