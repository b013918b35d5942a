"""The Kedro project end to end, in-process: kedro run on zh-decision-bench, MLflow, replay, refusal.

One run of the view is shared by the module's tests (module-scoped); a test that changes files works
on its own copy of that run.
"""

import json
import shutil

import pytest

from support import copy_project, project_conf, run_kedro

pytestmark = pytest.mark.e2e

VIEW = "zh_decision_bench"
DEFAULT_MODEL = "sparrow-nano-general-v1.1"


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("ran"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        run_kedro(project, VIEW)
    return project


@pytest.fixture
def ran_copy(ran, tmp_path, monkeypatch):
    """A copy of the shared run (snapshot, predictions, reports, MLflow store), made the cwd."""
    copy = tmp_path / "copy"
    shutil.copytree(ran, copy)
    mlflow_yml = copy / "conf" / "base" / "mlflow.yml"
    mlflow_yml.write_text(mlflow_yml.read_text().replace(f"sqlite:///{ran}/", f"sqlite:///{copy}/"))
    monkeypatch.chdir(copy)
    return copy


def test_default_run_writes_snapshot_predictions_report(ran):
    manifest = json.loads((ran / "data/02_snapshots/zh_decision_bench.manifest.json").read_text())
    assert manifest["counts"]["questions"] == 467 and manifest["data"] == "official"
    preds = (ran / f"data/07_model_output/{DEFAULT_MODEL}/{VIEW}/predictions.jsonl").read_text().splitlines()
    assert len(preds) == 378
    report = json.loads((ran / f"data/08_reporting/{DEFAULT_MODEL}/{VIEW}/report.json").read_text())
    assert report["model"] == DEFAULT_MODEL and report["data"] == "official"
    assert report["snapshot_sha256"] == manifest["snapshot"]["sha256"]
    for group in (report["metrics"]["overall"], *report["metrics"]["by_type"].values()):
        for key in ("accuracy", "accuracy_n", "nll", "brier", "ece"):
            assert key in group
    assert set(report["metrics"]["by_type"]) == {"choice", "noul", "score"}
    assert "rps" in report["metrics"]["by_type"]["score"] and "ordinal_mae" in report["metrics"]["overall"]
    assert report["metrics"]["overall"]["accuracy_n"] == 467
    assert {"p50", "p95", "mean", "first"} <= set(report["latency"]) and report["latency"]["p50"] > 0
    assert report["coverage"]["by_status"]["ok"] == 467
    assert report["official"]["scorer"] == "jevalkit-decision-protocol-v1"
    assert {"by_domain", "by_difficulty", "by_question", "by_language"} <= set(report["metrics"])
    official = json.loads((ran / f"data/08_reporting/{DEFAULT_MODEL}/{VIEW}/official.json").read_text())
    assert official == report["official"]


def test_mlflow_run_recorded_with_tags_metrics_artifacts(ran):
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{ran / 'mlflow.db'}")
    exp = client.get_experiment_by_name(f"jevkedro/{VIEW}")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs table
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string=f"tags.view = '{VIEW}'")
    assert len(runs) == 1
    run = runs[0]
    manifest = json.loads((ran / "data/02_snapshots/zh_decision_bench.manifest.json").read_text())
    assert run.data.tags["model"] == DEFAULT_MODEL
    assert run.data.tags["benchmark"] == "zh_decision_bench"
    assert run.data.tags["snapshot_sha256"] == manifest["snapshot"]["sha256"]
    assert run.data.tags["data"] == "official"
    report = json.loads((ran / f"data/08_reporting/{DEFAULT_MODEL}/{VIEW}/report.json").read_text())
    acc, ece = report["metrics"]["overall"]["accuracy"], report["metrics"]["overall"]["ece"]
    # the runs table's first column shows the headline rounded (MLflow opens it without metric columns)
    assert run.info.run_name == f"acc {acc:.3f} · ECE {ece:.3f} · {DEFAULT_MODEL}"
    assert run.info.experiment_id == exp.experiment_id
    assert run.data.metrics["accuracy"] == pytest.approx(report["metrics"]["overall"]["accuracy"])
    lo, hi = report["intervals"]["overall"]["accuracy"]
    assert run.data.metrics["accuracy_ci_low"] == pytest.approx(lo) and run.data.metrics["accuracy_ci_high"] == pytest.approx(hi)
    assert len(run.data.metrics) < 40 and not any(m.startswith(("cost/", "coverage/", "metrics/")) for m in run.data.metrics)
    assert run.data.params["model.adapter"] == "sparrow"
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"manifest.json", "report.json", "official.json", "plots", "tables"} <= arts
    (dataset_input,) = run.inputs.dataset_inputs
    assert dataset_input.dataset.digest == manifest["snapshot"]["sha256"][:36]
    assert {t.key: t.value for t in dataset_input.tags}["sha256"] == manifest["snapshot"]["sha256"]
    mlflow.set_tracking_uri("")  # leave no global store behind for other tests


def test_rerun_reuses_answers_and_replay_scores_a_file(ran_copy, caplog):
    ran = ran_copy
    preds_path = ran / f"data/07_model_output/{DEFAULT_MODEL}/{VIEW}/predictions.jsonl"
    before = preds_path.read_text()
    caplog.set_level("INFO")
    run_kedro(ran, VIEW, from_nodes=[f"{VIEW}.verify_snapshot"])
    assert "378 already answered, 0 to ask" in caplog.text
    assert preds_path.read_text() == before  # same answers, same latencies: nothing asked again

    lines = [json.loads(x) for x in before.splitlines()][:10]
    answers = ran / "answers.jsonl"
    answers.write_text("".join(json.dumps({"request_id": x["request_id"], "response": x["response"]}) + "\n"
                               for x in lines), encoding="utf-8")
    run_kedro(ran, VIEW, params={"model": {"adapter": "replay", "path": str(answers), "name": "my-replay"}})
    report = json.loads((ran / f"data/08_reporting/my-replay/{VIEW}/report.json").read_text())
    assert report["model"] == "my-replay" and report["adapter"] == "replay"
    assert report["coverage"]["requests_by_status"] == {"ok": 10, "unattempted": 368}
    assert report["metrics"]["overall"]["accuracy_n"] == 467  # unattempted count as not correct
    assert report["metrics"]["overall"]["probability_n"] == 10 + sum(
        1 for x in lines for _ in x["response"]["answers"]) - 10


def test_changed_snapshot_refused_before_inference(ran_copy):
    ran = ran_copy
    tsv = ran / "data/02_snapshots/zh_decision_bench.tsv"
    tsv.write_bytes(tsv.read_bytes().replace("五点提醒我".encode(), "六点提醒我".encode()))
    out = ran / "data/07_model_output/other/zh_decision_bench"
    with pytest.raises(Exception, match="does not match its manifest"):
        run_kedro(ran, VIEW, params={"model": {"name": "other"}}, from_nodes=[f"{VIEW}.verify_snapshot"])
    assert not out.exists()


def test_summary_names_the_official_headline_and_unsupported(tmp_path):
    from jevkedro.datasets import read_reports
    from jevkedro.nodes.report import summary_line

    report = {"model": "m", "view": "decision_index", "data": "sample",
              "metrics": {"overall": {"accuracy": 0.5, "accuracy_n": 4, "nll": 0.7, "ece": 0.1}},
              "coverage": {"by_status": {"ok": 3, "unsupported": 1}, "questions": 4},
              "latency": {"p50": None}, "official": {"main_metric": {"name": "balanced_skill", "value": 24.6659}}}
    path = project_conf(tmp_path) / "data" / "08_reporting" / "m" / "decision_index" / "report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(report))
    (found,), problems = read_reports(tmp_path)
    line = summary_line(found)
    assert problems == [] and found == report
    assert "balanced_skill 24.67" in line and "valid 3/4 (1 unsupported)" in line and "p50" not in line
    assert all(len(x) <= 100 for x in line.splitlines())


def test_a_damaged_report_is_named_and_the_others_are_still_read(tmp_path, capsys):
    from jevkedro.summary import main as summary_main

    good = {"model": "m", "view": "zh_decision_bench", "data": "official",
            "metrics": {"overall": {"accuracy": 0.5, "accuracy_n": 4, "nll": 0.7, "ece": 0.1}},
            "coverage": {"by_status": {"ok": 4}, "questions": 4}, "latency": {"p50": None}, "official": None}
    reporting = project_conf(tmp_path) / "data" / "08_reporting"
    for model, text in (("m", json.dumps(good)), ("half", json.dumps(good)[:40]), ("odd", "[1, 2]"),
                        ("copy", json.dumps(good))):  # m's report copied under another model's name
        path = reporting / model / "zh_decision_bench" / "report.json"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    assert summary_main(["--root", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "m  " in out and "0.500" in out  # the readable report is in the table
    assert f"skipped {reporting / 'half' / 'zh_decision_bench' / 'report.json'}: not valid JSON" in err
    assert f"skipped {reporting / 'odd' / 'zh_decision_bench' / 'report.json'}: not a report" in err
    assert f"skipped {reporting / 'copy' / 'zh_decision_bench' / 'report.json'}: the report of model 'm' on " \
           "view 'zh_decision_bench' is not in its place" in err
    assert (reporting / "leaderboard.csv").read_text().splitlines() == [
        "model,mean_rank,zh_decision_bench,zh_decision_bench.flags,zh_decision_bench.data", "m,1.00,0.5,,official"]


def test_summary_follows_reports_moved_in_the_catalog(tmp_path, capsys):
    """Reports kept elsewhere (conf/local/catalog.yml) are found there; the leaderboard goes where
    the catalog says."""
    from jevkedro.summary import main as summary_main

    project_conf(tmp_path)
    (tmp_path / "conf/local/catalog.yml").write_text(
        '"{view}.report":\n  type: jevkedro.datasets.ReportDataset\n'
        '  filepath: results/{view}/${runtime_params:model.name}.json\n'
        'leaderboard_csv:\n  type: jevkedro.datasets.TextDataset\n  filepath: results/board.csv\n')
    report = {"model": "m", "view": "zh_decision_bench", "data": "official",
              "metrics": {"overall": {"accuracy": 0.25, "accuracy_n": 4, "nll": 0.7, "ece": 0.1}},
              "coverage": {"by_status": {"ok": 4}, "questions": 4}, "latency": {"p50": None}, "official": None}
    (tmp_path / "results/zh_decision_bench").mkdir(parents=True)
    (tmp_path / "results/zh_decision_bench/m.json").write_text(json.dumps(report))
    assert summary_main(["--root", str(tmp_path), "--model", "m"]) == 0
    assert "0.250" in capsys.readouterr().out
    assert not (tmp_path / "results/board.csv").exists()  # a narrowed table is printed only
    assert summary_main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / "results/board.csv").read_text().splitlines() == [
        "model,mean_rank,zh_decision_bench,zh_decision_bench.flags,zh_decision_bench.data", "m,1.00,0.25,,official"]
    assert (tmp_path / "data/08_reporting/leaderboard.md").is_file()  # not moved: where conf/base puts it
    assert summary_main(["--root", str(tmp_path), "--model", "../m"]) == 2
    assert "--model: '../m' is not allowed" in capsys.readouterr().err
