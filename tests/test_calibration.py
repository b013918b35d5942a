"""Calibration decomposed (jevkedro.nodes.calibration): the Murphy decomposition of the top-label
Brier score with its within-bin terms, and ECE over equal-width and equal-mass bins, per group,
against plain per-question Python on random data (hypothesis), and as report.json carries them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevkedro.nodes import calibration as CAL
from jevkedro.nodes import metrics as M


def plain(conf: list[float], hit: list[bool], n_bins: int = 15) -> dict[str, float]:
    """One question at a time: bins by the nominal edge (M.bin_index's rule written out), the
    decomposition's sums, equal-mass bins by sorted position (ties in input order)."""
    N = len(conf)

    def bin_of(c: float) -> int:
        x = c * n_bins
        if abs(x - round(x)) <= 1e-9 * n_bins:
            x = round(x)
        return min(int(math.floor(x)), n_bins - 1)

    cells: dict[int, list[int]] = {}
    for i, c in enumerate(conf):
        cells.setdefault(bin_of(c), []).append(i)
    o = sum(hit) / N
    rel = res = wv = wc = ece_w = 0.0
    for members in cells.values():
        fb = sum(conf[i] for i in members) / len(members)
        ob = sum(hit[i] for i in members) / len(members)
        rel += len(members) * (fb - ob) ** 2
        res += len(members) * (ob - o) ** 2
        wv += sum((conf[i] - fb) ** 2 for i in members)
        wc += sum((conf[i] - fb) * (hit[i] - ob) for i in members)
        ece_w += abs(sum(hit[i] for i in members) - sum(conf[i] for i in members))
    order = sorted(range(N), key=lambda i: conf[i])  # stable: ties keep their order
    mass: dict[int, list[int]] = {}
    for pos, i in enumerate(order):
        mass.setdefault(((pos + 1) * n_bins - 1) // N, []).append(i)
    ece_m = sum(abs(sum(hit[i] for i in m) - sum(conf[i] for i in m)) for m in mass.values())
    return {"n": N, "top_label_brier": sum((c - h) ** 2 for c, h in zip(conf, hit)) / N, "reliability": rel / N,
            "resolution": res / N, "uncertainty": o * (1 - o), "within_bin_variance": wv / N,
            "within_bin_covariance": wc / N, "ece_equal_width": ece_w / N, "ece_equal_mass": ece_m / N}


grouped = st.lists(st.tuples(st.sampled_from([0.0, 1 / 15, 0.2, 0.5, 0.8, 1.0]) | st.floats(0, 1), st.booleans(),
                             st.integers(0, 3)), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(grouped)
def test_each_groups_figures_equal_the_plain_per_question_ones(rows):
    conf = np.array([r[0] for r in rows])
    hit = np.array([r[1] for r in rows])
    codes = np.array([r[2] for r in rows])
    got = CAL.calibration_groups(conf, hit, codes, 4)
    for g in range(4):
        members = [i for i, r in enumerate(rows) if r[2] == g]
        if not members:
            assert got[g]["n"] == 0 and got[g]["reliability"] is None
            continue
        want = plain([rows[i][0] for i in members], [rows[i][1] for i in members])
        for key, value in want.items():
            assert got[g][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (g, key)


@settings(max_examples=150, deadline=None)
@given(grouped)
def test_the_identity_with_within_bin_terms_holds_exactly(rows):
    conf = np.array([r[0] for r in rows])
    hit = np.array([r[1] for r in rows])
    (d,) = CAL.calibration_groups(conf, hit, np.zeros(len(rows), dtype=int), 1)
    total = d["reliability"] - d["resolution"] + d["uncertainty"] + d["within_bin_variance"] - 2 * d["within_bin_covariance"]
    assert total == pytest.approx(d["top_label_brier"], abs=1e-12)
    assert d["reliability"] >= 0 and d["resolution"] >= 0 and 0 <= d["uncertainty"] <= 0.25
    assert d["within_bin_variance"] >= 0
    assert d["ece_equal_width"] == pytest.approx(M.ece(conf, hit), abs=1e-12)
    assert d["ece_equal_mass"] == pytest.approx(M.ece_equal_frequency(conf, hit), abs=1e-12)


def test_the_three_term_identity_holds_only_with_one_forecast_per_bin():
    conf = np.array([0.05, 0.05, 0.55, 0.55, 0.95, 0.95, 0.95])
    hit = np.array([0, 0, 1, 0, 1, 1, 0], dtype=float)
    (d,) = CAL.calibration_groups(conf, hit, np.zeros(7, dtype=int), 1)
    assert d["within_bin_variance"] == pytest.approx(0, abs=1e-15) and d["within_bin_covariance"] == pytest.approx(0, abs=1e-15)
    assert d["reliability"] - d["resolution"] + d["uncertainty"] == pytest.approx(d["top_label_brier"], abs=1e-15)
    # forecasts that vary inside a bin: the three terms alone miss by the within-bin terms
    conf2 = np.array([0.54, 0.599, 0.535, 0.595])  # one bin: [8/15, 9/15)
    hit2 = np.array([0, 1, 0, 1], dtype=float)
    (e,) = CAL.calibration_groups(conf2, hit2, np.zeros(4, dtype=int), 1)
    three = e["reliability"] - e["resolution"] + e["uncertainty"]
    assert len(set(M.bin_index(conf2, 15).tolist())) == 1 and abs(three - e["top_label_brier"]) > 1e-3
    assert three + e["within_bin_variance"] - 2 * e["within_bin_covariance"] == pytest.approx(e["top_label_brier"], abs=1e-15)


def test_report_json_carries_the_decomposition_overall_and_per_slice(tmp_path):
    from jevkedro.nodes import compare as C
    from jevkedro.nodes.report import build_report
    from test_analytic import _jevbench_run

    snap, table, preds, _ = _jevbench_run(tmp_path, 12, seed=4)
    report = build_report(snap, table, preds, {"name": "m", "adapter": "replay"}, {}, None)
    cal = report["calibration"]
    assert cal["bins"] == 15 and cal["identity"] == CAL.IDENTITY
    assert cal["overall"]["ece_equal_width"] == pytest.approx(report["metrics"]["overall"]["ece"], abs=1e-12)
    t = C.terms_of(table)
    rows = t.ece_rows
    want = plain(list(t.conf[rows]), list(t.correct[rows]))
    for key, value in want.items():
        assert cal["overall"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    for group in (g for g in report["metrics"] if g != "overall"):  # every breakdown of metrics, same groups
        assert set(cal[group]) == {v for v, m in report["metrics"][group].items()}, group
        for value, m in report["metrics"][group].items():
            assert cal[group][value]["n"] == m["ece_n"]
            if m["ece_n"]:
                assert cal[group][value]["ece_equal_width"] == pytest.approx(m["ece"], abs=1e-12)


def test_the_mlflow_breakdown_table_has_the_decomposition_per_group(tmp_path):
    from jevkedro.nodes.report import build_report
    from jevkedro.nodes.tracking import run_tables
    from test_analytic import _jevbench_run

    snap, table, preds, _ = _jevbench_run(tmp_path, 6, seed=2)
    report = build_report(snap, table, preds, {"name": "m", "adapter": "replay"}, {}, None)
    breakdown = run_tables(report)["tables/breakdown.json"]
    assert breakdown["slice"][0] == "overall"
    for column in ("ece_equal_mass", "top_label_brier", "reliability", "resolution", "uncertainty"):
        assert breakdown[column][0] == report["calibration"]["overall"][column]
        for i, (group, value) in enumerate(zip(breakdown["slice"], breakdown["value"])):
            if i:
                assert breakdown[column][i] == report["calibration"][f"by_{group}"][value][column], (column, group, value)
    assert len({len(v) for v in breakdown.values()}) == 1  # one row per group in every column
