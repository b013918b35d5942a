"""MLflow as the comparison table, against a real sqlite store: two models on two views (one of
them rerun), a failed view, a gate that fails the run, the leaderboard and the paired comparison
of the two models. One module-scoped set of runs serves every assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jevkedro.testing import flattened_replay
from support import ROOT, copy_project, run_kedro

pytestmark = pytest.mark.e2e

VIEWS = ("zh_decision_bench", "jevalt_bench")
A = "sparrow-nano-general-v1.1"
B = "sparrow-flattened"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("store"), ["zh_decision_bench", "jevalt_bench"])
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        for view in VIEWS:
            run_kedro(project, view)
            replay = flattened_replay(project / "data" / "07_model_output" / A / view / "predictions.jsonl",
                                      project / f"{view}.replay.jsonl")
            run_kedro(project, view, params={"model": {"adapter": "replay", "path": str(replay), "name": B}})
        # a view whose inference fails (a replay file broken past its first line, which the
        # settings check reads): a FAILED run, clearly marked
        (project / "nothing.jsonl").write_text('{"request_id": "x", "response": {}}\nnot json\n', encoding="utf-8")
        with pytest.raises(Exception, match="nothing.jsonl:2"):
            run_kedro(project, "jevalt_bench", params={"model": {"adapter": "replay", "path": str(project / "nothing.jsonl"),
                                                                 "name": "broken"}})
    # the rerun, from the command line: answers reused (same result) and a gate that fails
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rerun = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench",
                            "--from-nodes=zh_decision_bench.verify_snapshot",
                            "--params=gates.zh_decision_bench.min_accuracy=0.99,gates.all.max_errors=0"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=300)
    from mlflow import MlflowClient

    return project, MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}"), rerun


def _runs(client, view, **kw):
    exp = client.get_experiment_by_name(f"jevkedro/{view}")
    return client.search_runs([exp.experiment_id], **kw)


def test_one_current_run_per_model_and_view_with_params_headline_input_and_plots(store):
    project, client, _ = store
    for view in VIEWS:
        exp = client.get_experiment_by_name(f"jevkedro/{view}")
        assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
        current = _runs(client, view, filter_string="tags.superseded = 'false' and attributes.status = 'FINISHED'")
        assert sorted(r.data.tags["model"] for r in current) == sorted([A, B])  # one row per model
        manifest = json.loads((project / f"data/02_snapshots/{view}.manifest.json").read_text())
        for run in current:
            model = run.data.tags["model"]
            # a result not on the benchmark's own data is marked in the runs table (issue 20, item 3)
            kind = manifest["data"] if "data" in manifest else run.data.tags["data"]
            name = run.info.run_name.split(" · ")[-1]  # after the headline rounded
            assert name == (model if kind == "official" else f"{model} [sample]")
            assert f"acc {run.data.metrics['accuracy']:.3f} · " in run.info.run_name
            assert run.data.tags["sample"] == str(kind != "official").lower()
            report = json.loads((project / f"data/08_reporting/{model}/{view}/report.json").read_text())
            assert run.data.tags["model"] == model and run.data.tags["view"] == view
            assert run.data.params["model.adapter"] == ("sparrow" if model == A else "replay")
            assert not any("key" in v.lower() and len(v) > 40 for v in run.data.params.values())
            for name in ("accuracy", "nll", "brier", "ece"):
                assert run.data.metrics[name] == pytest.approx(report["metrics"]["overall"][name])
                assert run.data.metrics[f"{name}_ci_low"] <= run.data.metrics[name] <= run.data.metrics[f"{name}_ci_high"]
            assert {"valid_fraction", "errors", "questions"} <= set(run.data.metrics)
            assert len(run.data.metrics) < 40  # the breakdowns are tables, not metrics
            if model == A:
                assert {"latency_p50_ms", "latency_p99_ms"} <= set(run.data.metrics)
            (ds,) = run.inputs.dataset_inputs
            assert ds.dataset.digest == manifest["snapshot"]["sha256"][:36]
            assert {t.key: t.value for t in ds.tags}["sha256"] == manifest["snapshot"]["sha256"]
            assert run.data.tags["version.numpy"] and run.data.tags["clean"] == "true"
            plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
            assert {"plots/reliability.png", "plots/slices.png", "plots/latency.png", "plots/risk_coverage.png"} <= plots
            local = client.download_artifacts(run.info.run_id, "plots/reliability.png", str(project / "dl" / run.info.run_id))
            assert open(local, "rb").read(8) == PNG
            tables = {a.path for a in client.list_artifacts(run.info.run_id, "tables")}
            assert "tables/breakdown.json" in tables
        if view == "jevalt_bench":
            official = json.loads((project / f"data/08_reporting/{A}/{view}/official.json").read_text())
            up = official["upstream_metrics"]
            assert up["settings"]["seed"] == 0 and up["settings"]["resamples"] == 1000
            assert up["intervals"]["accuracy"][0] <= up["accuracy"] <= up["intervals"]["accuracy"][1]
        else:
            official = json.loads((project / f"data/08_reporting/{A}/{view}/official.json").read_text())
            group = official["upstream_metrics"]["groups"]["voice_assistant_routing/route"]
            assert group["n"] == 323 and group["auroc_macro"] is not None
            assert group["accuracy_ci"][0] <= group["accuracy"] <= group["accuracy_ci"][1]


def test_the_track_step_logs_the_files_on_disk_and_its_dataset_loads_the_current_run(store, tmp_path):
    """What the run holds is what the view's files hold: report, official report, manifest, plots,
    the snapshot TSV as its input; ``{view}.mlflow_run`` loads the current run."""
    from jevkedro.datasets import project_catalog

    project, client, _ = store
    view = "jevalt_bench"  # not rerun by the fixture (a rerun keeps the current run, and its report of then)
    manifest = json.loads((project / f"data/02_snapshots/{view}.manifest.json").read_text())
    for model in (A, B):
        dataset = project_catalog(project, model).get(f"{view}.mlflow_run")
        dataset.bind(f"sqlite:///{project / 'mlflow.db'}")
        current = dataset.load()
        run = client.get_run(current["run_id"])
        assert (current["status"], current["metrics"], current["tags"]["model"]) == ("FINISHED", run.data.metrics, model)
        logged = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / model)))
        folder = project / f"data/08_reporting/{model}/{view}"
        for name in ("report.json", "official.json"):
            assert json.loads((logged / name).read_text()) == json.loads((folder / name).read_text())
        assert json.loads((logged / "manifest.json").read_text()) == manifest
        pngs = sorted(folder.glob("*.png"))
        assert len(pngs) == 4 and all((logged / "plots" / p.name).read_bytes() == p.read_bytes() for p in pngs)
        (ds,) = run.inputs.dataset_inputs
        assert json.loads(ds.dataset.source) == {"uri": (project / f"data/02_snapshots/{view}.tsv").resolve().as_uri()}


def test_rerun_with_the_same_result_adds_no_run_and_a_failed_gate_exits_3(store):
    project, client, rerun = store
    assert rerun.returncode == 3, rerun.stderr[-3000:]
    assert "zh_decision_bench (sparrow-nano-general-v1.1): gate min_accuracy: accuracy 0.3555 is below the threshold 0.99" \
        in rerun.stderr
    assert "Traceback" not in rerun.stderr and "INFO" not in rerun.stdout + rerun.stderr
    assert "Warning" not in rerun.stdout + rerun.stderr and len(rerun.stdout.splitlines()) <= 5  # quiet by default
    assert f"{A} zh_decision_bench" in rerun.stdout and "GATE FAILED" in rerun.stdout  # the summary line
    assert all(len(line) <= 100 for line in rerun.stdout.splitlines())
    runs = _runs(client, "zh_decision_bench", filter_string=f"tags.model = '{A}'")
    assert len(runs) == 1  # the unchanged rerun reused the current run
    (kedro_run,) = client.search_runs([client.get_experiment_by_name("jevkedro").experiment_id],
                                      order_by=["attributes.start_time DESC"], max_results=1)
    assert kedro_run.info.status == "FAILED"  # kedro-mlflow's record of a run that failed its gate (exit 3)
    assert runs[0].data.tags["gates"] == "failed"
    report = json.loads((project / f"data/08_reporting/{A}/zh_decision_bench/report.json").read_text())
    assert [g["gate"] for g in report["gates"]["failed"]] == ["min_accuracy"]
    assert (project / "logs" / "info.log").stat().st_size > 0  # Kedro's INFO log went to the file


def test_a_kept_run_takes_the_tags_of_the_current_result(store):
    """The same result again (so the current run is kept), now without a gate and with another
    resolved model id: the kept run's tags say so (no stale gates=failed, no old model_id)."""
    from jevkedro.nodes.tracking import log_view_run, view_run

    project, client, _ = store
    folder = project / f"data/08_reporting/{A}/zh_decision_bench"
    report, official = (json.loads((folder / f"{name}.json").read_text()) for name in ("report", "official"))
    manifest = json.loads((project / "data/02_snapshots/zh_decision_bench.manifest.json").read_text())
    (before,) = _runs(client, "zh_decision_bench", filter_string=f"tags.model = '{A}'")
    assert before.data.tags["gates"] == "failed"
    report.pop("gates")
    report["model_id"] = f"{A}@another-build"
    assert log_view_run(view_run(report, official, manifest), f"sqlite:///{project / 'mlflow.db'}") == before.info.run_id
    tags = client.get_run(before.info.run_id).data.tags
    assert "gates" not in tags and tags["model_id"] == f"{A}@another-build"


def test_a_failed_view_is_a_failed_run(store):
    _, client, _ = store
    (failed,) = _runs(client, "jevalt_bench", filter_string="tags.model = 'broken'")
    assert failed.info.status == "FAILED"
    assert "jevalt_bench.infer failed" in failed.data.tags["failure"]


def test_a_changed_result_supersedes_the_older_run(store, tmp_path):
    """Replay B with one answer changed: the new run becomes current, the old one is tagged and
    moved out of the default view."""
    project, client, _ = store
    from jevkedro.nodes.tracking import log_view_run, view_run

    report = json.loads((project / f"data/08_reporting/{B}/jevalt_bench/report.json").read_text())
    manifest = json.loads((project / "data/02_snapshots/jevalt_bench.manifest.json").read_text())
    (before,) = _runs(client, "jevalt_bench", filter_string=f"tags.model = '{B}' and tags.superseded = 'false'")
    report["metrics"]["overall"]["accuracy"] += 0.01
    new_id = log_view_run(view_run(report, None, manifest), f"sqlite:///{project / 'mlflow.db'}")
    (current,) = _runs(client, "jevalt_bench", filter_string=f"tags.model = '{B}' and tags.superseded = 'false'")
    assert current.info.run_id == new_id != before.info.run_id
    old = client.get_run(before.info.run_id)
    assert old.data.tags["superseded"] == "true" and old.data.tags["superseded_by"] == new_id
    assert old.info.lifecycle_stage == "deleted"  # hidden from the default (active) runs list, restorable


def test_compare_cli_on_the_two_models(store, capsys):
    project, _, _ = store
    from jevkedro.compare import main

    assert main(["--root", str(project), "--view", "zh_decision_bench", "--view", "jevalt_bench", A, B,
                 "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    assert "McNemar" in out and all(len(line) <= 100 for line in out.splitlines() if "flips" not in line)
    folder = project / "data/08_reporting/compare" / f"{A}__vs__{B}"
    doc = json.loads((folder / "zh_decision_bench.json").read_text())
    report_a = json.loads((project / f"data/08_reporting/{A}/zh_decision_bench/report.json").read_text())
    report_b = json.loads((project / f"data/08_reporting/{B}/zh_decision_bench/report.json").read_text())
    acc = doc["metrics"]["accuracy"]
    assert acc["a"] == pytest.approx(report_a["metrics"]["overall"]["accuracy"])
    assert acc["b"] == pytest.approx(report_b["metrics"]["overall"]["accuracy"])
    assert acc["diff"] == pytest.approx(acc["a"] - acc["b"]) and acc["ci_low"] <= acc["diff"] <= acc["ci_high"]
    mc = doc["mcnemar"]
    assert mc["a_only"] == doc["flips"]["a_only"]["count"] and mc["b_only"] == doc["flips"]["b_only"]["count"]
    assert mc["a_only"] - mc["b_only"] == round(acc["diff"] * acc["n"])
    assert mc["p_value"] <= mc["p_value_bh"] <= 1.0
    flip = doc["flips"]["a_only"]["items"][0]
    assert flip["a"]["choice"] == flip["label"] and flip["b"]["choice"] != flip["label"] and "domain" in flip["slices"]
    assert (folder / "zh_decision_bench.reliability.png").read_bytes()[:8] == PNG


def test_leaderboard_filters_and_fits_100_columns(store, capsys):
    project, _, _ = store
    from jevkedro.summary import main

    assert main(["--root", str(project), "--view", "zh_decision_bench", "--model", A, "--model", B]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 100 for line in out.splitlines() if str(project) not in line)
    assert "jevalt_bench" not in out and "broken" not in out
    csv_file = project / "data/08_reporting/leaderboard.csv"
    before = csv_file.read_bytes() if csv_file.exists() else None
    assert main(["--root", str(project), "--view", "zh_decision_bench"]) == 0
    assert (csv_file.read_bytes() if csv_file.exists() else None) == before  # a narrowed table is printed only
    assert main(["--root", str(project)]) == 0
    header = csv_file.read_text().splitlines()[0].split(",")
    assert header[:5] == ["model", "mean_rank", "jevalt_bench", "jevalt_bench.flags", "jevalt_bench.data"]
    assert "zh_decision_bench" in header and len(csv_file.read_text().splitlines()) == 3
    assert (project / "data/08_reporting/leaderboard.md").read_text().startswith("| model | jevalt_bench [sample] | zh_decision_bench |")


INTERRUPTED_RUN = r"""
import sys
from pathlib import Path
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from jevkedro.nodes import steps, tracking

def interrupt(*args, **kwargs):
    raise KeyboardInterrupt  # what Ctrl-C raises in the main thread

if sys.argv[2] == "infer":
    steps.infer = interrupt  # before the pipelines are built from the template
else:
    tracking._log_dataset = interrupt  # while the view's run is being logged
project = Path(sys.argv[1])
bootstrap_project(project)
with KedroSession.create(project_path=project) as session:
    session.run(pipeline_names=["zh_decision_bench"], **({"from_nodes": ["zh_decision_bench.verify_snapshot"]}
                                                         if sys.argv[2] != "infer" else {}))
"""


def test_a_run_stopped_by_ctrl_c_ends_killed_never_finished(tmp_path):
    """Ctrl-C (KeyboardInterrupt: Kedro calls no error hook for it) while a node runs: the `kedro
    run` record ends KILLED, the view has no run; while a view's run is logged: that run ends
    KILLED too, and the view keeps no FINISHED run of that result."""
    from mlflow import MlflowClient

    project = copy_project(tmp_path / "p", ["zh_decision_bench"])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    for where in ("infer", "tracking"):
        done = subprocess.run([sys.executable, "-c", INTERRUPTED_RUN, str(project), where], cwd=project, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr[-3000:]
        (kedro_run,) = client.search_runs([client.get_experiment_by_name("jevkedro").experiment_id],
                                          order_by=["attributes.start_time DESC"], max_results=1)
        assert kedro_run.info.status == "KILLED", where
        view = client.get_experiment_by_name("jevkedro/zh_decision_bench")
        runs = client.search_runs([view.experiment_id]) if view else []
        if where == "infer":
            assert runs == []
        else:
            (run,) = runs
            assert run.info.status == "KILLED" and run.data.tags["failure"] == "interrupted while tracking"
    assert (project / f"data/08_reporting/{A}/zh_decision_bench/report.json").is_file()  # the reports came first
