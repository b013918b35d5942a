"""A full `kedro run` with a secret API key: every file the run wrote is searched for the key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jevkedro.testing import LoopbackServer

pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-jevtest-4f1c9e0b7d2a-DO-NOT-LEAK"


def _project_copy(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "conf" / "base", proj / "conf" / "base")
    (proj / "conf" / "local").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    shutil.copytree(ROOT / "data" / "01_raw" / "zh_decision_bench", proj / "data" / "01_raw" / "zh_decision_bench")
    (proj / "src").mkdir()  # kedro wants <project>/src to exist; the package comes from PYTHONPATH
    return proj


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
    with LoopbackServer(required_key=SECRET) as srv:
        params = (f"model.adapter=systemone,model.endpoint={srv.endpoint},model.model=jev-latest,"
                  "model.api_key_env=JEV_SECRET_TEST_KEY,model.concurrency=8,model.name=loopback-jev")
        out = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench",
                              f"--params={params}"], cwd=proj, env=env, capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        assert srv.auth_headers and set(srv.auth_headers) == {f"Bearer {SECRET}"}
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    (proj / "run_stdout.log").write_bytes(out.stdout + out.stderr)

    report = json.loads((proj / "data/08_reporting/loopback-jev/zh_decision_bench/report.json").read_text())
    assert report["adapter"] == "systemone" and report["coverage"]["requests_by_status"] == {"ok": 378}
    written = _outputs(proj) - before
    assert any("mlflow.db" in str(p) for p in written)
    assert any(p.name == "predictions.jsonl" for p in written)
    assert any("artifacts" in str(p) or "mlruns" in str(p) for p in written)  # MLflow artifacts
    # the search does see what was logged: the variable's NAME is an MLflow param
    assert b"JEV_SECRET_TEST_KEY" in (proj / "mlflow.db").read_bytes()
    assert _files_with(proj, SECRET.encode(), skip={credentials}) == []
    assert _files_with(proj, SECRET[:16].encode(), skip={credentials}) == []  # no truncated copy either
