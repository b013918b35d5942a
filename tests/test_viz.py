"""`kedro viz build`, headless: every view's lineage starts at its raw release and ends at its
tracking step (the MLflow run), every dataset has a layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jevkedro.registry import VIEWS
from support import ROOT

pytestmark = pytest.mark.e2e

CHAIN = ["release", "prepare_snapshot", "snapshot", "verify_snapshot", "verified_snapshot", "infer", "inference_run",
         "score", "report", "track", "mlflow_run"]
LAYERS = {"release": "raw", "snapshot": "primary", "verified_snapshot": "primary", "predictions": "model_output",
          "inference_run": "model_output", "question_scores": "model_output", "report": "reporting",
          "official": "reporting", "plots": "reporting", "report_html": "reporting", "mlflow_run": "tracking"}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    project = tmp_path_factory.mktemp("viz")
    (project / "conf" / "local").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    subprocess.run(["cp", "-r", str(ROOT / "conf" / "base"), str(project / "conf" / "base")], check=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run([sys.executable, "-m", "kedro", "viz", "build"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((project / "build" / "api" / "main").read_text())


def test_every_view_starts_at_its_raw_release_and_runs_the_whole_chain(graph):
    names = {n["id"]: n.get("full_name") or n["name"] for n in graph["nodes"]}  # tasks: short name + full_name
    edges = {(names.get(e["source"]), names.get(e["target"])) for e in graph["edges"]}  # (collapsed namespaces too)
    for view in VIEWS:
        chain = [f"{view}.{step}" for step in CHAIN]
        for upstream, downstream in zip(chain, chain[1:]):
            assert (upstream, downstream) in edges, (view, upstream, downstream)
        for output in ("report", "official", "question_scores"):
            assert (f"{view}.score", f"{view}.{output}") in edges
        for upstream in ("report", "question_scores", "verified_snapshot"):
            assert (f"{view}.{upstream}", f"{view}.plot") in edges
        assert (f"{view}.plot", f"{view}.plots") in edges
        # one catalog entry for the predictions log: infer appends to it, score reads it
        assert {(f"{view}.predictions", f"{view}.infer"), (f"{view}.predictions", f"{view}.score")} <= edges
        assert not any(src == f"{view}.infer" and dst == f"{view}.predictions" for src, dst in edges)


def test_every_view_has_its_tracking_step(graph):
    tasks = {n.get("full_name") or n["name"] for n in graph["nodes"] if n["type"] == "task"}
    names = {n["id"]: n.get("full_name") or n["name"] for n in graph["nodes"]}
    edges = {(names.get(e["source"]), names.get(e["target"])) for e in graph["edges"]}
    for view in VIEWS:
        assert f"{view}.track" in tasks
        for upstream in ("verified_snapshot", "report", "official", "plots", "report_html"):  # what the MLflow run records
            assert (f"{view}.{upstream}", f"{view}.track") in edges, (view, upstream)
        for upstream in ("verified_snapshot", "report", "question_scores", "predictions", "plots"):  # the explorer page's inputs
            assert (f"{view}.{upstream}", f"{view}.explore") in edges, (view, upstream)
        assert (f"{view}.explore", f"{view}.report_html") in edges
        assert (f"{view}.track", f"{view}.mlflow_run") in edges


def test_every_dataset_has_its_layer(graph):
    datasets = [n for n in graph["nodes"] if n["type"] == "data"]
    assert len(datasets) == len(VIEWS) * len(LAYERS)
    for node in datasets:
        kind = node["name"].split(".", 1)[1]
        assert node["layer"] == LAYERS[kind], node["name"]
    assert graph["layers"] == ["raw", "primary", "model_output", "reporting", "tracking"]
