"""``python -m jevkedro.compare`` on constructed predictions: hand-computed differences, McNemar
counts and p-value, intervals that contain the difference, flips, refusals; the plots are PNGs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from matplotlib.image import imread

from jevkedro.compare import main
from jevkedro.nodes.analytic import format_interval
from support import jevbench_snapshot_of, project_conf, task

PNG = b"\x89PNG\r\n\x1a\n"
# 8 JevBench tasks in 4 paraphrase groups, label "a" everywhere. P(a) per task:
A_P = [0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.3, 0.3]  # right on 0-5
B_P = [0.7, 0.7, 0.7, 0.4, 0.4, 0.4, 0.7, 0.4]  # right on 0, 1, 2, 6


def write_model(root, name, probs, snapshot, statuses=None):
    folder = root / "data" / "07_model_output" / name / "jevbench"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (row, p) in enumerate(zip(snapshot.rows, probs)):
        status = (statuses or {}).get(i, "ok")
        rec = {"request_id": row.request_id, "status": status, "latency_s": None, "first": False, "model": name,
               "response": {"answers": {"decision": {"type": "choice", "probabilities": {"a": p, "b": 1 - p}}}}
               if status == "ok" else None, "error": None if status == "ok" else "HTTP 500"}
        lines.append(json.dumps(rec))
    (folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    rep = root / "data" / "08_reporting" / name / "jevbench"
    rep.mkdir(parents=True, exist_ok=True)
    (rep / "report.json").write_text(json.dumps({"model": name, "view": "jevbench", "snapshot_sha256": snapshot.sha256,
                                                 "probability_source": "native", "model_id": name}))


@pytest.fixture
def root(tmp_path):
    project_conf(tmp_path)  # compare finds every file through the project's catalog
    tasks = [task(f"easy-{i}", "choice", ["a", "b"], "a", group=f"g{i // 2}") for i in range(8)]
    snapshot = jevbench_snapshot_of(tmp_path / "data" / "02_snapshots", tasks)
    write_model(tmp_path, "model-a", A_P, snapshot)
    write_model(tmp_path, "model-b", B_P, snapshot)
    return tmp_path


def test_hand_computed_comparison(root, capsys):
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", "400"]) == 0
    doc = json.loads((root / "data/08_reporting/compare/model-a__vs__model-b/jevbench.json").read_text())
    acc = doc["metrics"]["accuracy"]
    assert (acc["a"], acc["b"], acc["n"]) == (pytest.approx(0.75), pytest.approx(0.5), 8)
    assert acc["diff"] == pytest.approx(0.25) and acc["ci_low"] <= 0.25 <= acc["ci_high"]
    nll = doc["metrics"]["nll"]
    nll_a = (6 * -math.log(0.8) + 2 * -math.log(0.3)) / 8
    nll_b = (4 * -math.log(0.7) + 4 * -math.log(0.4)) / 8
    assert nll["a"] == pytest.approx(nll_a) and nll["b"] == pytest.approx(nll_b)
    assert nll["diff"] == pytest.approx(nll_a - nll_b) and nll["ci_low"] <= nll["diff"] <= nll["ci_high"]
    brier_a = (6 * 2 * 0.2**2 + 2 * 2 * 0.7**2) / 8
    assert doc["metrics"]["brier"]["a"] == pytest.approx(brier_a)
    for name in ("ece", "brier"):
        m = doc["metrics"][name]
        assert m["ci_low"] <= m["diff"] <= m["ci_high"]
    # McNemar: only A right on tasks 3, 4, 5; only B on 6: exact two-sided p = (1 + 4 + 4 + 1) / 16
    assert doc["mcnemar"]["a_only"] == 3 and doc["mcnemar"]["b_only"] == 1
    assert doc["mcnemar"]["p_value"] == pytest.approx(10 / 16) == doc["mcnemar"]["p_value_bh"]
    # resampled by JevBench paraphrase group (4 groups), settings recorded
    assert doc["resampling"]["units"] == 4 and doc["resampling"]["resamples"] == 400 and doc["resampling"]["seed"] == 0
    assert doc["resampling"]["unit"].startswith("paraphrase group")
    a_only = doc["flips"]["a_only"]
    assert a_only["count"] == 3 and [f["request_id"] for f in a_only["items"]] == ["easy-3", "easy-4", "easy-5"]
    assert a_only["items"][0]["a"] == {"status": "ok", "choice": "a", "confidence": 0.8}
    assert a_only["items"][0]["b"]["choice"] == "b" and a_only["items"][0]["slices"]["tier"] == "easy"
    assert doc["flips"]["b_only"]["items"][0]["request_id"] == "easy-6"
    out = capsys.readouterr().out
    assert "accuracy ↑" in out and "nll ↓" in out and "+0.250" in out
    # four paraphrase groups: no interval excludes zero, so no model is named better
    assert all(m["verdict"] == "none" for m in doc["metrics"].values())
    verdict = " ".join(line.strip() for line in out.splitlines() if "verdict:" in line or "significant" in line)
    assert "accuracy no significant difference" in verdict and "ece no significant difference" in verdict
    assert all(len(line) <= 100 for line in out.splitlines() if "flips" not in line)
    for png in ("jevbench.reliability.png", "jevbench.slices.png"):
        path = root / "data/08_reporting/compare/model-a__vs__model-b" / png
        assert path.read_bytes()[:8] == PNG and imread(path).shape[2] in (3, 4)


def test_swapping_the_models_negates_everything(root):
    assert main(["--root", str(root), "--view", "jevbench", "model-b", "model-a", "--resamples", "400", "--no-plots"]) == 0
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", "400", "--no-plots"]) == 0
    ab = json.loads((root / "data/08_reporting/compare/model-a__vs__model-b/jevbench.json").read_text())
    ba = json.loads((root / "data/08_reporting/compare/model-b__vs__model-a/jevbench.json").read_text())
    for name in ("accuracy", "nll", "brier", "ece"):
        assert ba["metrics"][name]["diff"] == pytest.approx(-ab["metrics"][name]["diff"])
        assert ba["metrics"][name]["ci_low"] == pytest.approx(-ab["metrics"][name]["ci_high"])
    assert (ba["mcnemar"]["a_only"], ba["mcnemar"]["b_only"]) == (ab["mcnemar"]["b_only"], ab["mcnemar"]["a_only"])


def test_an_error_answer_is_not_correct_and_probability_metrics_pair_valid_answers(root):
    snapshot_tasks = [task(f"easy-{i}", "choice", ["a", "b"], "a", group=f"g{i // 2}") for i in range(8)]
    from jevkedro.nodes.snapshot import load_snapshot

    snapshot = load_snapshot(root / "data" / "02_snapshots", "jevbench")
    assert len(snapshot.rows) == len(snapshot_tasks)
    write_model(root, "model-c", A_P, snapshot, statuses={0: "error"})  # an interleaved 5xx on task 0
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-c", "--no-plots"]) == 0
    doc = json.loads((root / "data/08_reporting/compare/model-a__vs__model-c/jevbench.json").read_text())
    assert doc["metrics"]["accuracy"]["b"] == pytest.approx(5 / 8) and doc["metrics"]["accuracy"]["n"] == 8
    assert doc["metrics"]["nll"]["n"] == 7 and doc["metrics"]["nll"]["diff"] == pytest.approx(0.0)
    assert doc["mcnemar"] == {**doc["mcnemar"], "a_only": 1, "b_only": 0}
    assert doc["flips"]["a_only"]["items"][0]["b"]["status"] == "error"


def test_refusals_name_the_file(root, capsys):
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-x"]) == 2
    assert "data/08_reporting/model-x/jevbench/report.json" in capsys.readouterr().err
    rep = root / "data/08_reporting/model-b/jevbench/report.json"
    rep.write_text(json.dumps({**json.loads(rep.read_text()), "snapshot_sha256": "0" * 64}))
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b"]) == 2
    assert "rerun both models on one snapshot" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--view", "no_such_view", "a", "b"])


def test_benjamini_hochberg_column_over_views(root, tmp_path):
    from jevkedro.nodes.compare import benjamini_hochberg

    p = [0.625, 0.01, 0.04]
    assert benjamini_hochberg(p) == pytest.approx([0.625, 0.03, 0.06])
    assert np.all(np.array(benjamini_hochberg(p)) >= np.array(p))


def test_compare_follows_outputs_moved_in_the_catalog(root, capsys):
    """A project that keeps its reports, predictions and comparisons elsewhere (conf/local/catalog.yml)
    is compared where they are; model names that are paths are refused."""
    import shutil

    (root / "conf/local/catalog.yml").write_text(
        '"{view}.report":\n  type: jevkedro.datasets.ReportDataset\n'
        '  filepath: elsewhere/${runtime_params:model.name}/{view}.report.json\n'
        '"{view}.predictions":\n  type: jevkedro.datasets.PredictionsDataset\n'
        '  filepath: elsewhere/${runtime_params:model.name}/{view}.jsonl\n'
        'comparisons:\n  type: jevkedro.datasets.ComparisonsDataset\n  folder: elsewhere/pairs\n')
    for name in ("model-a", "model-b"):
        (root / "elsewhere" / name).mkdir(parents=True)
        shutil.move(root / f"data/08_reporting/{name}/jevbench/report.json", root / f"elsewhere/{name}/jevbench.report.json")
        shutil.move(root / f"data/07_model_output/{name}/jevbench/predictions.jsonl", root / f"elsewhere/{name}/jevbench.jsonl")
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", "50", "--no-plots"]) == 0
    doc = json.loads((root / "elsewhere/pairs/model-a__vs__model-b/jevbench.json").read_text())
    assert doc["metrics"]["accuracy"]["diff"] == pytest.approx(0.25)
    assert "elsewhere/pairs/model-a__vs__model-b/jevbench.json" in capsys.readouterr().out
    assert not (root / "data/08_reporting/compare").exists()
    for name in ("../model-a", "model-a/"):
        assert main(["--root", str(root), "--view", "jevbench", name, "model-b"]) == 2
        assert f"model: {name!r} is not allowed" in capsys.readouterr().err


def test_markdown_summary_for_a_pull_request(root, tmp_path, capsys):
    md = tmp_path / "comment.md"
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", "200", "--no-plots",
                 "--markdown", str(md)]) == 0
    assert f"the comparison as Markdown: {md}" in capsys.readouterr().out
    doc = json.loads((root / "data/08_reporting/compare/model-a__vs__model-b/jevbench.json").read_text())
    lines = md.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60 and lines[0] == "### Paired comparison: A = `model-a`, B = `model-b`"
    assert "**jevbench** — 4 paraphrase groups resampled 200 times" in lines
    rows = [line for line in lines if line.startswith("| ") and ("↑" in line or "↓" in line)]
    acc = doc["metrics"]["accuracy"]
    assert rows[0] == (f"| accuracy ↑ | 0.750 | 0.500 | +0.250 | {format_interval(acc['ci_low'], acc['ci_high'])} | — |")
    assert [r.split(" | ")[0] for r in rows] == ["| accuracy ↑", "| nll ↓", "| brier ↓", "| ece ↓"]
    verdict = next(line for line in lines if line.startswith("*Verdict:*"))
    assert "accuracy no significant difference" in verdict and f"McNemar p = {doc['mcnemar']['p_value']:.3g}" in verdict


def test_markdown_summary_of_every_view_fits_60_lines():
    """Ten views do not fit a table each in 60 lines: one table of four rows per view, with the verdicts."""
    from jevkedro.compare import markdown_summary
    from jevkedro.registry import VIEWS

    def doc(view, k):
        metrics = {name: {"a": 0.5, "b": 0.4, "diff": 0.1, "ci_low": 0.05 if k % 2 else -0.1, "ci_high": 0.2,
                          "n": 100, "verdict": ("A" if name == "accuracy" else "B") if k % 2 else "none"}
                   for name in ("accuracy", "nll", "brier", "ece")}
        return {"view": view, "a": "new", "b": "old", "metrics": metrics,
                "resampling": {"unit": "request", "units": 100, "resamples": 1000, "seed": 0},
                "mcnemar": {"a_only": 3, "b_only": 1, "p_value": 0.5, "p_value_bh": 0.6}}

    for views in (VIEWS[:2], VIEWS):
        text = markdown_summary([doc(v, k) for k, v in enumerate(views)])
        lines = text.splitlines()
        assert len(lines) <= 60
        assert all(f"**{view}**" in text for view in views)
        better = [line.rsplit("|", 2)[1].strip() for line in lines if "accuracy ↑" in line]
        assert better == ["A" if k % 2 else "—" for k in range(len(views))]
    assert "| view | metric |" in text and text.count("| **") == len(VIEWS)
