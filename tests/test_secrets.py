"""A full `kedro run` with a secret API key against a server that sends the key back (in the stored
header, inside answers in several encodings, in error bodies): every file the run wrote — data,
logs, the MLflow store and its artifacts — is searched for the key in every spelling."""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from jevkedro.testing import LoopbackServer, system_one_answers
from support import copy_project, leaks

pytest.importorskip("aiohttp")

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-jevtest-4f1c9e0b7d2a-DO-NOT-LEAK"


def _project_copy(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "proj", ["zh_decision_bench"])  # with conf/logging.yml: logs/info.log is written


def _echoing_server() -> LoopbackServer:
    """Answers every request validly but sends the key back: every reply in its request-id header
    (base64 of "Bearer <key>"), inside the body in turn as is, \\u-escaped and percent-encoded,
    and every 25th request is a 500 whose body quotes the key."""
    calls, lock = itertools.count(), threading.Lock()
    spellings = [json.dumps(SECRET), '"' + "".join(f"\\u{ord(c):04x}" for c in SECRET) + '"', json.dumps(quote(SECRET, safe=""))]

    def respond(body, auth, fault):
        with lock:
            n = next(calls)
        header = [("x-typesafe-request-id", base64.b64encode(f"Bearer {SECRET}".encode()).decode())]
        if n % 25 == 24:
            return 500, header, json.dumps({"detail": f"bad token {SECRET}"}).encode()
        doc = {"model": "jev-1.13.0", "answers": system_one_answers(body["questions"]), "echo": "@@"}
        return 200, header, json.dumps(doc).replace('"@@"', spellings[n % 3]).encode()

    return LoopbackServer(required_key=SECRET, responder=respond)


def _outputs(proj: Path) -> set[Path]:
    return {p for p in proj.rglob("*") if p.is_file() and not p.relative_to(proj).parts[0] == "src"}


def _files_with(root: Path, needle: bytes, skip: set[Path]) -> list[str]:
    hits = []
    for path in _outputs(root):
        if path not in skip and needle in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


@pytest.mark.e2e
def test_kedro_run_with_a_secret_key_writes_it_nowhere(tmp_path):
    proj = _project_copy(tmp_path)
    credentials = proj / "conf" / "local" / "credentials.yml"
    # the key reaches the run only through credentials.yml (exported by the project hook)
    credentials.write_text(f"model_api_keys:\n  JEV_SECRET_TEST_KEY: {SECRET}\n")
    before = _outputs(proj)
    env = {k: v for k, v in os.environ.items() if k != "JEV_SECRET_TEST_KEY"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *sys.path]), KEDRO_DISABLE_TELEMETRY="true")
    with _echoing_server() as srv:
        params = (f"model.adapter=systemone,model.endpoint={srv.endpoint},model.model=jev-latest,"
                  "model.api_key_env=JEV_SECRET_TEST_KEY,model.concurrency=8,model.name=loopback-jev")
        out = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench",
                              f"--params={params}"], cwd=proj, env=env, capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        assert srv.auth_headers and set(srv.auth_headers) == {f"Bearer {SECRET}"}
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    (proj / "run_stdout.log").write_bytes(out.stdout + out.stderr)

    report = json.loads((proj / "data/08_reporting/loopback-jev/zh_decision_bench/report.json").read_text())
    statuses = report["coverage"]["requests_by_status"]
    assert report["adapter"] == "systemone" and statuses["ok"] + statuses["error"] == 378 and statuses["error"] >= 10
    written = _outputs(proj) - before
    assert any("mlflow.db" in str(p) for p in written)
    assert any(p.name == "predictions.jsonl" for p in written)
    assert any("artifacts" in str(p) or "mlruns" in str(p) for p in written)  # MLflow artifacts
    # the search does see what was logged: the variable's NAME is an MLflow param
    assert b"JEV_SECRET_TEST_KEY" in (proj / "mlflow.db").read_bytes()
    assert any(p.name == "info.log" for p in written)
    assert _files_with(proj, SECRET.encode(), skip={credentials}) == []
    assert _files_with(proj, SECRET[:16].encode(), skip={credentials}) == []  # no truncated copy either
    # nor any other spelling (case, percent, hex, \\u-escapes, base64 at every alignment, pieces)
    spelled = {str(p.relative_to(proj)): hit for p in written if p != credentials and (hit := leaks(p.read_bytes(), SECRET))}
    assert spelled == {}
