"""A user's mistake prints its message, not a traceback (issue: the first hour), and a replay file
that cannot be read is refused before any node runs, leaving no MLflow run, no output folder and no
"resume with --from-nodes" hint. Real `kedro run` subprocesses in a throw-away project copy."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, copy_project

pytestmark = pytest.mark.e2e

VIEW = "zh_decision_bench"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("user_errors"), [VIEW])


def kedro(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    return subprocess.run([sys.executable, "-m", "kedro", "run", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)


def _short_message(done: subprocess.CompletedProcess, *expected: str, max_lines: int = 6) -> str:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "╭" not in out, out[-3000:]
    assert "--from-nodes" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) <= max_lines, out
    for text in expected:
        assert text in out, out
    return out


def _no_run_left(project: Path, name: str) -> None:
    assert not (project / "data" / "07_model_output" / name).exists()
    assert not (project / "data" / "08_reporting" / name).exists()
    db = project / "mlflow.db"
    if db.exists():
        with sqlite3.connect(db) as con:
            names = [r[0] for r in con.execute("select value from tags where key = 'mlflow.runName'")] \
                if con.execute("select name from sqlite_master where name = 'tags'").fetchone() else []
        assert not any(name in n for n in names), names


@pytest.mark.parametrize("params, expected", [
    ("model.adaptor=replay", ["model.adaptor: unknown setting; did you mean model.adapter?"]),
    ("model.concurrency=abc", ["model.concurrency: 'abc' is not allowed"]),
])
def test_a_wrong_setting_prints_only_its_message(project, params, expected):
    _short_message(kedro(project, f"--pipelines={VIEW}", f"--params={params}"), "invalid settings", *expected)


def test_an_unknown_pipeline_names_the_closest_one(project):
    _short_message(kedro(project, "--pipelines=decison_index"), "unknown pipeline 'decison_index'",
                   "did you mean 'decision_index'?")


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo", "device", "malformed"])
def test_a_replay_file_that_cannot_be_read_is_refused_before_any_node(project, tmp_path, kind):
    name = f"bad-replay-{kind}"
    path = {"missing": lambda: tmp_path / "nothere.jsonl",
            "folder": lambda: tmp_path,
            "fifo": lambda: _fifo(tmp_path / "answers.fifo"),
            "device": lambda: (tmp_path / "zero.jsonl").symlink_to("/dev/zero") or tmp_path / "zero.jsonl",
            "malformed": lambda: (tmp_path / "a.jsonl").write_text('{"request_id": "x"\n') and tmp_path / "a.jsonl"}[kind]()
    expected = {"missing": "replay file not found", "folder": "is a folder, not a replay file",
                "fifo": "is a FIFO, not a replay file", "device": "is a character device, not a replay file",
                "malformed": "a.jsonl:1: not valid JSON"}[kind]
    done = kedro(project, f"--pipelines={VIEW}", f"--params=model.adapter=replay,model.path={path},model.name={name}")
    _short_message(done, expected)
    _no_run_left(project, name)


@pytest.mark.parametrize("start", ["score", "plot"])
def test_a_run_starting_after_a_node_whose_output_is_in_memory_names_the_node_to_start_from(project, start):
    """``--from-nodes`` past ``verify_snapshot``: the verified snapshot (and what infer hands to
    score) lives in memory only, so the run is refused before anything starts, naming where to start."""
    name = f"mid-start-{start}"
    done = kedro(project, f"--pipelines={VIEW}", f"--from-nodes={VIEW}.{start}", f"--params=model.name={name}")
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "╭" not in out, out[-3000:]
    needs = f"{VIEW}.inference_run and {VIEW}.verified_snapshot" if start == "score" else f"{VIEW}.verified_snapshot"
    assert f"this run needs {needs}, which an earlier node hands on in memory only" in out, out
    assert f"start at {VIEW}.verify_snapshot (--from-nodes={VIEW}.verify_snapshot)" in out, out  # the earliest maker
    _no_run_left(project, name)
