"""Gates against a baseline as whole ``kedro run``s (issue 22 #3): the same answers under another
name pass; a clearly worse model fails with exit 3 naming view, metric, baseline, margin and bound;
a baseline without a report, or scored on another snapshot, is refused (exit 2) before anything
is asked. And the statistics: the bound and Holm's step-down against a direct computation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from jevkedro.nodes.snapshot import load_snapshot
from support import ROOT, make_project, replay_file, report

VIEW = "jevbench"
MARGINS = {"max_drop_accuracy": 0.05, "max_rise_nll": 0.1, "max_rise_brier": 0.05, "max_rise_ece": 0.05}


def run(project: Path, params: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    return subprocess.run([sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}", f"--params={params}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def gates(baseline: str, **margins: float) -> str:
    return ",".join([f"gates.{VIEW}.baseline={baseline}"] + [f"gates.{VIEW}.{k}={v}" for k, v in margins.items()])


def wrong_answers(project: Path, out: Path) -> Path:
    """Valid answers that put 0.97 on a wrong candidate of every hard-label question."""
    snap = load_snapshot(project / "data" / "02_snapshots", VIEW)
    with open(out, "w", encoding="utf-8") as fh:
        for row in snap.rows:
            answers = {}
            for qid, spec in row.request["questions"].items():
                cands, label = row.candidates[qid], row.targets[qid].label
                wrong = (0 if label is None else (label + 1) % len(cands))
                if spec["type"] == "noul":  # candidates (false, true): p is P(true)
                    answers[qid] = {"type": "noul", "noul": 0.97 if cands[wrong] == "true" else 0.03}
                    continue
                rest = 0.03 / (len(cands) - 1)
                answers[qid] = {"type": spec["type"], "probabilities": {c: (0.97 if i == wrong else rest) for i, c in enumerate(cands)}}
            fh.write(json.dumps({"request_id": row.request_id, "response": {"model": "worse", "answers": answers}}) + "\n")
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("baseline"), [VIEW])
    done = run(project, "model.name=base")
    assert done.returncode == 0, done.stderr[-3000:]
    return project


@pytest.mark.e2e
def test_the_same_answers_under_another_name_pass(project):
    answers = replay_file(project, "base", VIEW, project / "same.jsonl")
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=same," + gates("base", **MARGINS))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    checked = report(project, "same", VIEW)["gates"]["checked"]
    assert {c["gate"] for c in checked} == set(MARGINS) and all(c["passed"] for c in checked)
    for c in checked:  # identical answers: no change, no spread
        assert c["baseline"] == "base" and c["change"] == 0 and c["value"] == 0 and c["holm_gates"] == 4


@pytest.mark.e2e
def test_a_clearly_worse_model_fails_with_exit_3_naming_view_metric_baseline_margin_and_bound(project):
    answers = wrong_answers(project, project / "worse.jsonl")
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=worse," + gates("base", **MARGINS))
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-3000:]
    rep = report(project, "worse", VIEW)
    assert rep["coverage"]["by_status"]["ok"] == rep["coverage"]["questions"]  # valid answers, only wrong
    failed = {c["gate"]: c for c in rep["gates"]["failed"]}
    assert set(failed) == set(MARGINS)
    acc = failed["max_drop_accuracy"]
    base = report(project, "base", VIEW)
    assert acc["change"] == pytest.approx(base["metrics"]["overall"]["accuracy"] - rep["metrics"]["overall"]["accuracy"])
    assert acc["value"] > acc["change"] > MARGINS["max_drop_accuracy"]
    text = done.stdout + done.stderr
    for gate, margin in MARGINS.items():
        line = next(ln for ln in text.splitlines() if f"gate {gate}:" in ln and "vs baseline base" in ln)
        assert VIEW in line and f"margin {margin:g}" in line and "bound" in line, line
        assert f"{failed[gate]['value']:.4g}" in line


def with_attempts(out: Path, *per_attempt: Path) -> Path:
    """One replay file answering attempt k from the k-th file (each a line per request)."""
    lines = []
    for k, path in enumerate(per_attempt):
        for line in path.read_text(encoding="utf-8").splitlines():
            lines.append(json.dumps({**json.loads(line), "attempt": k}))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.mark.e2e
def test_a_run_with_repeats_is_gated_on_its_mean_hit_rate_not_attempt_0(project):
    """Attempt 0 gives the baseline's answers, attempts 1 and 2 wrong ones: the mean hit rate over
    the three repeats dropped (paired on attempt 0 alone the run would pass), so the gate fails."""
    same = replay_file(project, "base", VIEW, project / "rep-same.jsonl")
    wrong = wrong_answers(project, project / "rep-wrong.jsonl")
    answers = with_attempts(project / "rep.jsonl", same, wrong, wrong)
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=flaky,model.repeats=3,"
               + gates("base", max_drop_accuracy=0.05))
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-3000:]
    rep, base = report(project, "flaky", VIEW), report(project, "base", VIEW)
    (acc,) = rep["gates"]["failed"]
    assert acc["gate"] == "max_drop_accuracy" and acc["repeats"] == {"this": 3, "baseline": 1}
    # the change is the baseline's accuracy less this run's mean over its repeats (a third of attempt 0's)
    assert acc["change"] == pytest.approx(base["metrics"]["overall"]["accuracy"] - rep["repeats"]["accuracy"])
    assert rep["repeats"]["accuracy"] == pytest.approx(base["metrics"]["overall"]["accuracy"] / 3)
    assert "gate max_drop_accuracy: accuracy drop vs baseline base" in done.stdout + done.stderr


@pytest.mark.e2e
def test_a_run_repeating_the_baselines_answers_passes_every_gate(project):
    same = replay_file(project, "base", VIEW, project / "rep2-same.jsonl")
    answers = with_attempts(project / "rep2.jsonl", same, same)
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=steady,model.repeats=2,"
               + gates("base", **MARGINS))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    checked = report(project, "steady", VIEW)["gates"]["checked"]
    assert {c["gate"] for c in checked} == set(MARGINS)
    for c in checked:  # the same answers in every repeat: no change, no spread
        assert c["passed"] and c["change"] == 0 and c["value"] == 0 and c["repeats"] == {"this": 2, "baseline": 1}


@pytest.mark.e2e
def test_a_baseline_without_a_report_is_refused_before_anything_is_asked(project):
    answers = replay_file(project, "base", VIEW, project / "again.jsonl")
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=orphan," + gates("nobody", max_drop_accuracy=0.1))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"gates.{VIEW}.baseline=nobody: no report of the baseline" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / "data" / "07_model_output" / "orphan").exists()  # nothing asked, nothing written


@pytest.mark.e2e
def test_a_baseline_scored_on_another_snapshot_is_refused_naming_both_hashes(project):
    other = project / "data" / "08_reporting" / "elsewhere" / VIEW
    other.mkdir(parents=True)
    rep = report(project, "base", VIEW)
    forged = "0" * 64
    (other / "report.json").write_text(json.dumps({**rep, "model": "elsewhere", "snapshot_sha256": forged}))
    answers = replay_file(project, "base", VIEW, project / "again2.jsonl")
    done = run(project, f"model.adapter=replay,model.path={answers},model.name=moved," + gates("elsewhere", max_rise_nll=0.1))
    assert done.returncode == 2, done.stderr[-3000:]
    assert forged in done.stderr and rep["snapshot_sha256"] in done.stderr
    log = project / "data" / "07_model_output" / "moved" / VIEW / "predictions.jsonl"
    assert not log.exists() or not log.read_text().strip()  # refused before inference


# -- the statistics, directly ----------------------------------------------------------------------

def test_holm_step_down_and_bounds_against_a_direct_computation():
    from jevkedro.baseline import gate_statistics
    from test_compare_stats import terms

    rng = np.random.default_rng(5)
    n = 300
    rid = np.array([f"r{i // 3}" for i in range(n)], dtype=object)
    base_hit = rng.random(n) < 0.7
    this_hit = base_hit & (rng.random(n) < 0.97)  # a slightly worse model
    a, b = terms(this_hit, rid=rid), terms(base_hit, rid=rid)
    margins = {"max_drop_accuracy": 0.06, "max_rise_nll": 0.5, "max_rise_brier": 0.001}
    rows = {r["gate"]: r for r in gate_statistics(a, b, rid, margins, resamples=200)}
    # direct: clustered se of (base - this) per question, one-sided p of H0 drop >= margin
    d = base_hit.astype(float) - this_hit.astype(float)
    G = n // 3
    D = np.array([(d[3 * g: 3 * g + 3] - d.mean()).sum() for g in range(G)])
    se = np.sqrt(G / (G - 1) * (D ** 2).sum()) / n
    acc = rows["max_drop_accuracy"]
    assert acc["change"] == pytest.approx(d.mean()) and acc["se"] == pytest.approx(se)
    assert acc["p_value"] == pytest.approx(sps.t.sf((0.06 - d.mean()) / se, G - 1))
    ps = sorted((r["p_value"], g) for g, r in rows.items())
    k = len(ps)
    still = True
    for j, (_p, g) in enumerate(ps):
        r = rows[g]
        alpha = 0.05 / (k - j)
        assert r["holm_rank"] == j + 1 and r["bound_level"] == pytest.approx(1 - alpha)
        if g == "max_drop_accuracy":
            assert r["value"] == pytest.approx(d.mean() + sps.t.ppf(1 - alpha, G - 1) * se)
        within = r["value"] is not None and r["value"] < r["threshold"]
        assert r["passed"] == (still and within)
        still = still and within
        assert r["p_holm"] == pytest.approx(max(min(1, (k - i) * ps[i][0]) for i in range(j + 1)))
    assert rows["max_rise_brier"]["passed"] is False  # a margin too tight for this run


def test_identical_answers_pass_any_positive_margin_and_no_margin_of_zero():
    from jevkedro.baseline import gate_statistics
    from test_compare_stats import terms

    rng = np.random.default_rng(1)
    t = terms(rng.random(60) < 0.5)
    ok = gate_statistics(t, t, t.request_id, {"max_drop_accuracy": 0.001, "max_rise_ece": 0.001}, resamples=100)
    assert all(r["passed"] and r["value"] == 0 for r in ok)
    zero = gate_statistics(t, t, t.request_id, {"max_drop_accuracy": 0.0}, resamples=100)
    assert zero[0]["passed"] is False  # "not worse by more than 0" needs a bound below 0: shown better
