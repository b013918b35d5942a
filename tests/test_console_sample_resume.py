"""Issue 20 (the first hour), items 3 and 6, as a user sees them: real `kedro run` subprocesses.

A view on data we ship (not the benchmark's) is marked ``[sample]`` in its summary line and in its
MLflow run's name and tags, and the run says once what the mark means; a single-view run keeps
p50 in its summary line; a resumed run says in one console line how many requests already have an
answer and how many it asks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jevkedro.sample import is_sample, note, view_label
from support import ROOT, copy_project

pytestmark = pytest.mark.e2e

VIEW = "jevalt_bench"
MODEL = "sparrow-nano-general-v1.1"


def kedro(project, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run([sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_sample_results_are_marked_single_view_keeps_p50_and_a_resumed_run_says_so(tmp_path):
    from mlflow import MlflowClient

    project = copy_project(tmp_path / "p", [VIEW])
    first = kedro(project)
    summary = [line for line in first.stdout.splitlines() if line.startswith(MODEL)]
    assert len(summary) == 1, first.stdout
    assert summary[0].startswith(f"{MODEL} {VIEW} [sample] ") and " p50 " in summary[0], summary
    assert first.stdout.count(note()) == 1 and "resumed" not in first.stdout
    assert all(len(line) <= 100 for line in first.stdout.splitlines())  # the note wrapped too

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(f"jevkedro/{VIEW}").experiment_id])
    assert run.info.run_name.endswith(f" · {MODEL} [sample]") and run.data.tags["sample"] == "true"
    assert run.data.tags["model"] == MODEL and run.data.tags["data"] == "sample"

    # a run killed part-way leaves part of the log: the rerun says, in one line, what it resumes
    log = project / f"data/07_model_output/{MODEL}/{VIEW}/predictions.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = len(lines) // 2
    log.write_text("".join(lines[:kept]), encoding="utf-8")
    again = kedro(project)
    said = [line for line in again.stdout.splitlines() if "already answered" in line]
    assert said == [f"{VIEW}: resumed: {kept} already answered, {len(lines) - kept} to ask "
                    f"(of {len(lines)} requests)"], again.stdout
    (current,) = client.search_runs([client.get_experiment_by_name(f"jevkedro/{VIEW}").experiment_id])
    assert current.info.run_name.endswith(f" · {MODEL} [sample]")  # one current run (new latencies: a new result), marked


def test_only_official_data_is_unmarked():
    assert not is_sample({"data": "official", "view": "zh_decision_bench"})
    assert view_label({"data": "official", "view": "zh_decision_bench"}) == "zh_decision_bench"
    assert view_label({"data": "sample", "view": "decision_index"}) == "decision_index [sample]"
    assert view_label({"data": "synthetic", "view": "jevbench"}) == "jevbench [sample]"
    assert is_sample({"view": "x"}) and view_label({"view": "x"}) == "x [sample]"  # a report that does not say
