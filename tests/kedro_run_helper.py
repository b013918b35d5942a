"""End-to-end helpers: a throwaway copy of the Kedro project and ``kedro run`` in it (CLI, subprocess).

The copy holds ``pyproject.toml``, ``conf/`` and the shipped raw data of the families asked for;
outputs (snapshots, predictions, reports, ``mlflow.db``) land in the copy, never in the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from jevkedro.nodes.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[1]


def make_project(tmp: Path, families: list[str]) -> Path:
    project = tmp / "project"
    project.mkdir()
    shutil.copy(ROOT / "pyproject.toml", project)
    (project / "src").mkdir()  # kedro wants <project>/src; the package itself comes from PYTHONPATH
    shutil.copytree(ROOT / "conf", project / "conf", ignore=shutil.ignore_patterns("credentials*"))
    for family in families:
        shutil.copytree(ROOT / "data" / "01_raw" / family, project / "data" / "01_raw" / family)
    return project


def kedro_run(project: Path, view: str, params: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    cmd = [sys.executable, "-m", "kedro", "run", f"--pipelines={view}"]
    if params:
        cmd.append(f"--params={params}")
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"kedro run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def report(project: Path, model: str, view: str, name: str = "report") -> dict[str, Any]:
    return json.loads((project / "data" / "08_reporting" / model / view / f"{name}.json").read_text(encoding="utf-8"))


def write_replay(project: Path, view: str, answer: Callable[[dict, list[str]], dict], path: Path) -> Path:
    """A replay file answering every question of the prepared snapshot with ``answer(question, candidates)``."""
    snap = load_snapshot(project / "data" / "02_snapshots", view)
    with open(path, "w", encoding="utf-8") as fh:
        for row in snap.rows:
            answers = {q: answer(spec, row.candidates[q]) for q, spec in row.request["questions"].items()}
            fh.write(json.dumps({"request_id": row.request_id, "response": {"answers": answers}}) + "\n")
    return path


def mlflow_tags(project: Path) -> list[dict[str, str]]:
    """Tags of the per-view child runs recorded in the copy's ``mlflow.db``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = []
    for exp in client.search_experiments():
        runs += client.search_runs([exp.experiment_id])
    return [r.data.tags for r in runs if "view" in r.data.tags]
