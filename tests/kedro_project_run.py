"""Run ``kedro run --pipelines=<view>`` (the CLI, in a subprocess) on a throw-away copy of the project.

Used by family tests to check that a view runs out of the box on its shipped sample, with the
embedded model and with the replay adapter. The copy holds ``pyproject.toml``, ``conf/base``, an
empty ``conf/local`` and the shipped raw data asked for; every output (snapshots, predictions,
reports, ``mlflow.db``) lands in the copy, never in the checkout. A subprocess per run keeps MLflow
and Kedro state from leaking between tests (in-process runs: ``conftest.run_kedro``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import ROOT
from jevkedro.nodes.snapshot import load_snapshot


def make_project(tmp: Path, raw_folders: list[str]) -> Path:
    """A minimal project copy: pyproject, conf/base, an empty src and the given ``data/01_raw`` folders."""
    project = tmp / "project"
    project.mkdir()
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copytree(ROOT / "conf" / "base", project / "conf" / "base")
    (project / "conf" / "local").mkdir()
    (project / "src").mkdir()  # kedro wants its source_dir; the package comes from PYTHONPATH
    for folder in raw_folders:
        shutil.copytree(ROOT / "data" / "01_raw" / folder, project / "data" / "01_raw" / folder)
    return project


def kedro_run(project: Path, view: str, params: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    cmd = [sys.executable, "-m", "kedro", "run", f"--pipelines={view}"] + ([f"--params={params}"] if params else [])
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"kedro run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def report(project: Path, model: str, view: str, name: str = "report") -> dict[str, Any]:
    """``data/08_reporting/<model>/<view>/<name>.json`` of the copy (``report`` or ``official``)."""
    return json.loads((project / "data" / "08_reporting" / model / view / f"{name}.json").read_text(encoding="utf-8"))


def reports(project: Path, model: str, view: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(report.json, official.json)`` of one model x view."""
    return report(project, model, view), report(project, model, view, "official")


def write_replay(project: Path, view: str, answer: Callable[[dict, list[str]], dict], path: Path) -> Path:
    """A replay file answering every question of the prepared snapshot with ``answer(question, candidates)``."""
    snap = load_snapshot(project / "data" / "02_snapshots", view)
    with open(path, "w", encoding="utf-8") as fh:
        for row in snap.rows:
            answers = {q: answer(spec, row.candidates[q]) for q, spec in row.request["questions"].items()}
            fh.write(json.dumps({"request_id": row.request_id, "response": {"answers": answers}}) + "\n")
    return path


def replay_file(project: Path, model: str, view: str, out: Path) -> Path:
    """A replay file of the answers an earlier run recorded (its ``ok`` predictions)."""
    lines = []
    for line in (project / "data" / "07_model_output" / model / view / "predictions.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["status"] == "ok":
            lines.append(json.dumps({"request_id": rec["request_id"], "response": rec["response"]}, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def mlflow_tags(project: Path) -> list[dict[str, str]]:
    """Tags of the per-view child runs recorded in the copy's ``mlflow.db``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = []
    for exp in client.search_experiments():
        runs += client.search_runs([exp.experiment_id])
    return [r.data.tags for r in runs if "view" in r.data.tags]
