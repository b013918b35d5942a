"""Run ``kedro run --pipelines=<view>`` on a copy of the project in a temporary folder.

Used by family tests to check that a view runs out of the box on its shipped sample, with the
embedded model and with the replay adapter. The copy keeps the worktree clean; the command runs
in a subprocess so MLflow and Kedro state never leak between tests.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    kedro = Path(sys.executable).with_name("kedro")
    cmd = [str(kedro), "run", f"--pipelines={view}"] + ([f"--params={params}"] if params else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"kedro run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def reports(project: Path, model: str, view: str) -> tuple[dict, dict]:
    folder = project / "data" / "08_reporting" / model / view
    return (json.loads((folder / "report.json").read_text(encoding="utf-8")),
            json.loads((folder / "official.json").read_text(encoding="utf-8")))


def replay_file(project: Path, model: str, view: str, out: Path) -> Path:
    """A replay answers file from the predictions of an earlier run."""
    lines = []
    for line in (project / "data" / "07_model_output" / model / view / "predictions.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["status"] == "ok":
            lines.append(json.dumps({"request_id": rec["request_id"], "response": rec["response"]}, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def mlflow_tags(project: Path, key: str) -> list[str]:
    """Values of one run tag over every MLflow run recorded in the project's SQLite store."""
    with sqlite3.connect(project / "mlflow.db") as db:
        return [v for (v,) in db.execute("select value from tags where key = ?", (key,))]
