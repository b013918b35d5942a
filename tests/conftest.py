"""Shared fixtures: a throw-away copy of the Kedro project, and running it in-process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ZH_RAW = ROOT / "data" / "01_raw" / "zh_decision_bench"

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project's config and shipped raw data in ``tmp_path``, made the cwd."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "conf" / "base", tmp_path / "conf" / "base")
    (tmp_path / "conf" / "local").mkdir()
    # MLflow caches one database engine per URI string; a relative sqlite URI would make every
    # in-process test write to the first project's store, so each copy gets an absolute one.
    mlflow_yml = tmp_path / "conf" / "base" / "mlflow.yml"
    mlflow_yml.write_text(mlflow_yml.read_text().replace("sqlite:///mlflow.db", f"sqlite:///{tmp_path}/mlflow.db"))
    (tmp_path / "src").mkdir()  # kedro wants a source dir; the package itself is installed
    shutil.copytree(ROOT / "data" / "01_raw", tmp_path / "data" / "01_raw")
    for sub in ("02_snapshots", "07_model_output", "08_reporting"):
        (tmp_path / "data" / sub).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_kedro(project: Path, pipeline: str, params: dict[str, Any] | None = None, **run_args: Any) -> dict:
    """Run one registered pipeline of the project copy in-process, as `kedro run` would."""
    import mlflow
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(project)
    try:
        with KedroSession.create(project_path=project, runtime_params=params or {}) as session:
            return session.run(pipeline_names=[pipeline], **run_args)
    finally:
        # kedro-mlflow closes its run in the store but can leave it on this process's run stack;
        # a second in-process session would then log into it. The CLI runs one session per process.
        while mlflow.active_run():
            mlflow.end_run()
