"""Analytic clustered errors, verdicts and interval printing (jevkedro.nodes.analytic), and the
single-run figures in report.json, against plain per-question Python on random data (hypothesis)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jevkedro.nodes import analytic as A


def plain_clustered(d: list[float], clusters: list[str]) -> dict[str, float]:
    """The issue's formulas, one question and one cluster at a time."""
    N = len(d)
    mean = sum(d) / N
    by: dict[str, float] = {}
    for x, c in zip(d, clusters):
        by[c] = by.get(c, 0.0) + (x - mean)
    G = len(by)
    se = math.sqrt(G / (G - 1) * sum(v * v for v in by.values())) / N
    t = stats.t.ppf(0.975, G - 1)
    p = 1.0 if se == 0 else 2 * (1 - stats.t.cdf(abs(mean) / se, G - 1))
    return {"mean": mean, "se": se, "ci_low": mean - t * se, "ci_high": mean + t * se, "df": G - 1, "p_value": p,
            "mde_80": (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * se}


@st.composite
def clustered_values(draw):
    sizes = draw(st.lists(st.integers(1, 5), min_size=2, max_size=40))
    values = draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 0.25, -0.5, 2.0]) | st.floats(-3, 3),
                           min_size=sum(sizes), max_size=sum(sizes)))
    clusters = [f"r{i}" for i, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(values))))  # clusters need not be contiguous
    return [values[i] for i in order], [clusters[i] for i in order]


@settings(max_examples=200, deadline=None)
@given(clustered_values())
def test_clustered_mean_equals_the_plain_formulas(data):
    d, clusters = data
    got = A.clustered_mean(np.array(d), clusters)
    want = plain_clustered(d, clusters)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    assert got["clusters"] == len(set(clusters)) and got["n"] == len(d)
    assert got["small_sample"] == (len(set(clusters)) < 30)


def test_identical_models_have_zero_se_and_p_value_one():
    rng = np.random.default_rng(1)
    t = SimpleNamespace(request_id=np.repeat([f"r{i}" for i in range(50)], 2), hard=np.ones(100, bool),
                        prob=np.ones(100, bool), correct=rng.random(100) < 0.6, nll=rng.random(100), brier=rng.random(100))
    out = A.paired_analytic(t, t)
    for name in ("accuracy", "nll", "brier"):
        assert out[name]["mean"] == 0 and out[name]["se"] == 0 and out[name]["p_value"] == 1.0
        assert out[name]["mde_80"] == 0 and out[name]["ci_low"] == out[name]["ci_high"] == 0
        assert out[name]["small_sample"] is False


def test_pairing_follows_the_bootstrap_accuracy_over_hard_labels_losses_over_valid_for_both():
    a = SimpleNamespace(request_id=np.array(["r1", "r1", "r2", "r3"]), hard=np.array([1, 1, 1, 0], bool),
                        prob=np.array([1, 1, 0, 1], bool), correct=np.array([1, 0, 0, 0], bool),
                        nll=np.array([0.1, 0.2, 9.0, 0.3]), brier=np.array([0.1, 0.2, 9.0, 0.3]))
    b = SimpleNamespace(**{**vars(a), "prob": np.array([1, 0, 1, 1], bool), "correct": np.array([0, 0, 1, 0], bool),
                           "nll": np.array([0.2, 0.2, 0.2, 0.2])})
    out = A.paired_analytic(a, b)
    assert out["accuracy"]["n"] == 3 and out["accuracy"]["mean"] == pytest.approx((1 + 0 - 1) / 3)
    assert out["nll"]["n"] == 2 and out["nll"]["mean"] == pytest.approx((-0.1 + 0.1) / 2)
    assert out["nll"]["clusters"] == 2


def test_one_cluster_gives_no_standard_error():
    out = A.clustered_mean(np.array([1.0, 0.0]), ["r", "r"])
    assert out["mean"] == 0.5 and out["se"] is None and out["p_value"] is None and out["small_sample"]


@pytest.mark.parametrize("metric, lo, hi, want", [
    ("accuracy", 0.01, 0.2, "A"), ("accuracy", -0.2, -0.01, "B"), ("accuracy", -0.1, 0.1, "none"),
    ("nll", 0.01, 0.2, "B"), ("brier", -0.2, -0.01, "A"), ("ece", -0.1, 0.0, "none"), ("nll", None, 0.1, "none"),
])
def test_verdict_follows_the_interval_and_the_metrics_direction(metric, lo, hi, want):
    assert A.verdict(metric, lo, hi) == want


def test_an_interval_excluding_zero_never_prints_touching_it():
    assert A.format_interval(-0.265, -0.0004) == "[-0.265, -0.0004]"
    assert A.format_interval(-0.265, 0.0) == "[-0.265, +0.000]"
    assert A.format_bound(0.00000123) == "+0.000001"
    assert A.format_bound(None) == "n/a"


def test_the_paired_comparison_carries_verdicts_and_the_analytic_figures():
    from jevkedro.nodes import compare as C
    from test_compare_stats import terms

    rng = np.random.default_rng(3)
    n = 400
    rid = np.array([f"r{i // 2}" for i in range(n)], dtype=object)
    good = terms(rng.random(n) < 0.8, rid=rid)
    bad = terms(rng.random(n) < 0.4, rid=rid)
    out = C.paired_metrics(good, bad, resamples=200)
    acc = out["accuracy"]
    assert acc["verdict"] == "A" and out["nll"]["verdict"] == "A" and out["brier"]["verdict"] == "A"
    assert acc["analytic"]["clusters"] == 200 and acc["analytic"]["small_sample"] is False
    assert acc["analytic"]["ci_low"] > 0 and acc["analytic"]["p_value"] < 0.05
    assert acc["analytic"]["ci_low"] < acc["diff"] < acc["analytic"]["ci_high"]
    # the analytic interval and the bootstrap's agree closely at this size
    assert abs(acc["analytic"]["ci_low"] - acc["ci_low"]) < 0.03 and abs(acc["analytic"]["ci_high"] - acc["ci_high"]) < 0.03
    assert "analytic" not in out["ece"]
    swapped = C.paired_metrics(bad, good, resamples=200)
    assert swapped["accuracy"]["verdict"] == "B" and swapped["nll"]["verdict"] == "B"
    same = C.paired_metrics(good, good, resamples=200)
    assert {m["verdict"] for m in same.values()} == {"none"} and same["accuracy"]["analytic"]["se"] == 0


def test_the_console_verdict_names_the_better_model_per_metric():
    from jevkedro.compare import verdict_line

    doc = {"a": "x", "b": "y", "metrics": {"accuracy": {"verdict": "A"}, "nll": {"verdict": "B"},
                                           "brier": {"verdict": "none"}, "ece": {"verdict": "none"}}}
    assert verdict_line(doc) == ("verdict: accuracy A better, nll B better, brier no significant difference, "
                                 "ece no significant difference")


def _jevbench_run(tmp_path, n_groups: int, seed: int = 0):
    """A JevBench snapshot of ``n_groups`` paraphrase pairs (plus one ungrouped task) with seeded answers."""
    from jevkedro.nodes.validate import build_question_table
    from support import choice, jevbench_snapshot_of, record, task

    rng = np.random.default_rng(seed)
    tasks = [task(f"easy-t{g}-{k}", "choice", ["a", "b", "c"], "a", group=f"g{g}") for g in range(n_groups) for k in range(2)]
    tasks.append(task("easy-lone", "choice", ["a", "b", "c"], "b"))
    snap = jevbench_snapshot_of(tmp_path, tasks)
    preds = {}
    for t in tasks:
        p = rng.dirichlet([1, 1, 1])
        preds[t["id"]] = record(choice(a=float(p[0]), b=float(p[1]), c=float(1 - p[0] - p[1])))
    table = build_question_table(snap.rows, preds)
    return snap, table, preds, tasks


@pytest.mark.parametrize("n_groups", [5, 40])
def test_the_reports_analytic_errors_cluster_by_paraphrase_group(tmp_path, n_groups):
    from jevkedro.nodes.report import build_report

    snap, table, preds, tasks = _jevbench_run(tmp_path, n_groups)
    report = build_report(snap, table, preds, {"name": "m", "adapter": "replay"}, {}, None)
    an = report["analytic"]
    clusters = [t["group"] or t["id"] for t in tasks]  # the bootstrap's units: paraphrase groups
    assert an["clusters"] == n_groups + 1 == report["intervals"]["units"] and an["unit"] == report["intervals"]["unit"]
    o = report["metrics"]["overall"]
    from jevkedro.nodes import compare as C

    t = C.terms_of(table)
    for metric, values in (("accuracy", t.correct.astype(float)), ("nll", t.nll), ("brier", t.brier)):
        want = plain_clustered(list(values), clusters)
        got = an["overall"][metric]
        assert got["mean"] == pytest.approx(o[metric], rel=1e-12)
        for key in ("se", "ci_low", "ci_high", "df"):
            assert got[key] == pytest.approx(want[key], rel=1e-9), (metric, key)
    assert an["small_sample"] == (n_groups + 1 < 30) and ("note" in an) == an["small_sample"]
    if an["small_sample"]:
        assert "intervals.overall" in an["note"]
