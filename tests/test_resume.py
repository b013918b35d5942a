"""Crash safety: a run killed with SIGKILL loses nothing answered, and the rerun asks only what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot

pytest.importorskip("aiohttp")

N = 60
CONCURRENCY = 4

DRIVER = textwrap.dedent("""
    import sys
    from jevkedro.models import make_adapter
    from jevkedro.models.settings import EngineSettings
    from jevkedro.nodes.predictions_log import PredictionLog
    from jevkedro.nodes.infer import run_inference
    from jevkedro.nodes.snapshot import load_snapshot, verify_snapshot_bytes

    root, log_path, endpoint = sys.argv[1:4]
    settings = {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "",
                "concurrency": __CONCURRENCY__, "progress": 0, "fsync": "always"}
    snapshot = verify_snapshot_bytes(load_snapshot(root, "synthetic_view"))
    summary = run_inference(snapshot, make_adapter(settings), PredictionLog(log_path),
                            EngineSettings.from_model(settings), settings)
    print(summary["asked"], summary["reused"], summary["statuses"])
""").replace("__CONCURRENCY__", str(CONCURRENCY))


def _complete_lines(path: Path) -> list[dict]:
    raw = path.read_bytes() if path.exists() else b""
    return [json.loads(x) for x in raw[: raw.rfind(b"\n") + 1].decode().splitlines() if x.strip()]


def test_sigkill_mid_run_loses_nothing_and_the_rerun_asks_only_what_is_missing(tmp_path):
    synthetic_snapshot(tmp_path / "snap", synthetic_rows(N))
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    log_path = tmp_path / "out" / "predictions.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # 0.2 s per answer, four at a time: the 45 answers still missing after the 15th take over 2 s,
    # ample time to kill the run even on a loaded machine
    with LoopbackServer(delay_s=0.2) as srv:
        args = [sys.executable, str(script), str(tmp_path / "snap"), str(log_path), srv.endpoint]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while len(_complete_lines(log_path)) < 15 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
        before = {r["request_id"]: r["server_request_id"] for r in _complete_lines(log_path) if r["status"] == "ok"}
        assert 15 <= len(before) < N
        asked_before = sum(srv.counts.values())

        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        asked, reused, _ = out.stdout.splitlines()[-1].split(" ", 2)  # after the one "resumed" line
        assert int(reused) == len(before) and int(asked) == N - len(before)

    final = _complete_lines(log_path)
    ids = [r["request_id"] for r in final]
    assert ids == [f"r{i:05d}" for i in range(N)]  # compacted: one line per request, snapshot order
    assert all(r["status"] == "ok" for r in final)
    # nothing answered before the kill was asked again
    assert all(srv.counts[rid] == 1 for rid in before)
    # only requests in flight at the kill can have been asked twice (sent, never answered)
    twice = {rid for rid, c in srv.counts.items() if c > 1}
    assert max(srv.counts.values()) <= 2 and not twice & set(before)
    assert asked_before - len(before) <= CONCURRENCY + 1
    assert len(twice) <= CONCURRENCY + 1
    # the answers kept from the first run are the very responses of the first run
    assert {r["request_id"]: r["server_request_id"] for r in final if r["request_id"] in before} == before


def test_a_torn_last_line_is_dropped_and_the_request_asked_again(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        settings = {"adapter": "systemone", "endpoint": srv.endpoint, "api_key_env": "", "progress": 0}
        run_inference(snapshot, make_adapter(settings), PredictionLog(log_path), EngineSettings(), settings)
        lines = log_path.read_bytes().splitlines(keepends=True)
        log_path.write_bytes(b"".join(lines[:2]) + lines[2][:40])  # the last answer half written
        plog = PredictionLog(log_path)
        assert set(plog.records) == {"r00000", "r00001"}
        assert not log_path.read_bytes().endswith(b"\n")  # a reader leaves the file as it is: the writer cuts the tail
        summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings(), settings)
    assert (summary["asked"], summary["reused"]) == (1, 2)
    assert dict(srv.counts) == {"r00000": 1, "r00001": 1, "r00002": 2}
    assert len(log_path.read_text().splitlines()) == 3


def test_errors_and_unattempted_are_asked_again_but_answers_never(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(4, {1: "500"}))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        settings = {"adapter": "systemone", "endpoint": srv.endpoint, "api_key_env": "", "progress": 0}
        first = run_inference(snapshot, make_adapter(settings), PredictionLog(log_path), EngineSettings(), settings)
        second = run_inference(snapshot, make_adapter(settings), PredictionLog(log_path), EngineSettings(), settings)
    assert first["statuses"] == {"ok": 3, "error": 1}
    assert (second["asked"], second["reused"]) == (1, 3)
    assert srv.counts["r00001"] == 2 and srv.counts["r00000"] == 1


def test_a_different_model_or_endpoint_starts_afresh(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(2))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        base = {"adapter": "systemone", "endpoint": srv.endpoint, "api_key_env": "", "progress": 0}
        run_inference(snapshot, make_adapter({**base, "model": "a"}), PredictionLog(log_path), EngineSettings(), base)
        summary = run_inference(snapshot, make_adapter({**base, "model": "b"}), PredictionLog(log_path),
                                EngineSettings(), base)
    assert summary["reused"] == 0 and srv.total == 4


def test_a_corrupt_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"request_id": "a", "status": "ok"}\nnot json\n{"request_id": "b", "status": "ok"}\n')
    with pytest.raises(PredictionLogError, match=r"predictions.jsonl:2"):
        PredictionLog(path)
