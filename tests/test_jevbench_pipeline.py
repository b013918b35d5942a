"""End to end: ``kedro run --pipelines=jevbench`` on the shipped sample, embedded model and replay.

The project is copied (conf, pyproject, the sample) into a temporary folder so the run writes its
snapshot, predictions, reports and its own MLflow SQLite store there, never into the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEDRO = Path(sys.executable).with_name("kedro")
REPLAY = "data/01_raw/jevbench/sample/replay_answers.jsonl"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    proj = tmp_path_factory.mktemp("jevbench_project")
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    shutil.copytree(ROOT / "conf", proj / "conf", ignore=shutil.ignore_patterns("credentials*.yml"))
    shutil.copytree(ROOT / "data" / "01_raw" / "jevbench" / "sample", proj / "data" / "01_raw" / "jevbench" / "sample")
    (proj / "src").mkdir()  # kedro wants the source folder; the package comes from PYTHONPATH
    (proj / "logs").mkdir()  # conf/logging.yml writes Kedro's INFO log to logs/info.log
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}

    def run(params: str | None = None) -> None:
        cmd = [str(KEDRO), "run", "--pipelines=jevbench"] + ([f"--params={params}"] if params else [])
        done = subprocess.run(cmd, cwd=proj, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run()  # embedded sparrow model (the default)
    run(f"model.adapter=replay,model.path={REPLAY},model.name=replay-sample")
    return proj


def _mlflow_official(proj: Path, model: str) -> tuple[list[str], dict]:
    from mlflow.artifacts import load_dict
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{proj / 'mlflow.db'}")
    exp = client.get_experiment_by_name("jevkedro/jevbench")  # one experiment per view
    runs = client.search_runs([exp.experiment_id], f"tags.view = 'jevbench' and tags.model = '{model}'")
    assert len(runs) == 1
    run = runs[0]
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    return names, load_dict(f"{run.info.artifact_uri}/official.json")


@pytest.mark.e2e
def test_replay_run_writes_and_logs_the_official_summary(project):
    path = project / "data" / "08_reporting" / "replay-sample" / "jevbench" / "official.json"
    official = json.loads(path.read_text(encoding="utf-8"))
    names, logged = _mlflow_official(project, "replay-sample")
    assert names == ["manifest.json", "official.json", "plots", "report.html", "report.json", "tables"]
    assert logged == official  # the artifact is the official summary itself, nothing else mixed in
    assert "metrics" not in logged and logged["benchmark"]["synthetic"] is True

    o = official["overall"]
    # hand count over replay_answers.jsonl: 22 planned, one unattempted, two unscorable;
    # invalid: routing-01-1 (sum 1.03), fact-01 (bool), extraction-01 (missing label), judge_hard (1.2)
    assert (o["n_planned"], o["n_attempted"], o["n_scorable"], o["n_valid"]) == (22, 21, 20, 17)
    assert (o["n_strict_valid"], o["n_renormalized"], o["n_correct"]) == (15, 2, 11)
    assert o["accuracy"] == pytest.approx(11 / 20) and o["schema_validity"] == pytest.approx(17 / 21)
    p = official["paraphrase"]
    assert (p["pairs"], p["both_valid"], p["agree"], p["both_correct"]) == (4, 3, 2, 2)
    items = {i["task_id"]: i for i in official["items"]}
    assert items["easy-intent-01"]["predicted"] == "cancel_order"  # four-way tie
    assert items["easy-intent-02"]["predicted"] == "refund"  # refund/shipping_status tie
    assert items["original-intent-01-1"]["renormalized"] and not items["original-intent-01-1"]["strict_valid"]
    assert not items["original-routing-01-1"]["valid"] and items["original-routing-01-1"]["correct"] is False
    axis = official["hard_calibration_axis"]
    assert axis["tvd_gold_probs"] == pytest.approx((0.1 + (0.2 - 1 / 6)) / 2)
    # hard ECE over the valid scorable hard tasks: (0.8, right) (0.6, right) x2 (0.5, right) (0.4, wrong)
    # -> (0.2 + 2 * 0.4 + 0.5 + 0.4) / 5 = 0.38; v1.3 terms 100 (1 - 0.76) and 100 (1 - 1/15)
    assert axis["ece"] == pytest.approx(0.38) and axis["ece_n"] == 5
    assert axis["axis"] == pytest.approx((24 + 100 * (1 - 1 / 15)) / 2)
    # easy: 1 of 6 scorable right (the unattempted tool_selection task counts wrong), 1 of 5 attempted
    easy = official["per_tier"]["easy"]
    assert easy["accuracy"] == pytest.approx(1 / 6) and easy["accuracy_attempted"] == pytest.approx(1 / 5)
    assert o["accuracy_attempted"] == pytest.approx(11 / 19)
    assert official["chance_corrected"]["easy"]["release"]["chance"] == pytest.approx(20.45 / 72)

    report = json.loads((path.parent / "report.json").read_text(encoding="utf-8"))
    assert report["metrics"]["overall"]["accuracy_n"] == 20  # generic metrics beside it
    assert set(report["metrics"]) >= {"by_tier", "by_family", "by_variant", "by_type"}
    # the 1.015 answer is outside the generic 0.01 band
    assert report["coverage"]["by_status"]["invalid"] == 5


@pytest.mark.e2e
def test_embedded_model_run_writes_and_logs_the_official_summary(project):
    path = project / "data" / "08_reporting" / "sparrow-nano-general-v1.1" / "jevbench" / "official.json"
    official = json.loads(path.read_text(encoding="utf-8"))
    names, logged = _mlflow_official(project, "sparrow-nano-general-v1.1")
    assert "official.json" in names and logged == official
    o = official["overall"]
    assert (o["n_planned"], o["n_attempted"], o["n_scorable"]) == (22, 22, 20)
    assert official["latency"]["first_s"] is not None and official["latency"]["n"] == 21
    assert official["benchmark"]["commit"] == "bb05a335bc809e61b20c0f745d25499a82b326fc"
