"""The statistics of nodes/compare.py: hand-computed cases and properties (hypothesis)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from jevkedro.nodes import compare as C
from jevkedro.nodes import metrics as M


def terms(correct, conf=None, valid=None, rid=None, nll=None):
    """Terms of n hard-label questions, one per request unless ``rid`` says otherwise."""
    correct = np.asarray(correct, dtype=bool)
    n = len(correct)
    conf = np.full(n, 0.8) if conf is None else np.asarray(conf, dtype=float)
    valid = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    rid = np.array([f"r{i}" for i in range(n)], dtype=object) if rid is None else np.asarray(rid, dtype=object)
    nll = -np.log(np.maximum(np.where(correct, conf, 1 - conf), M.NLL_FLOOR)) if nll is None else np.asarray(nll, dtype=float)
    return C.Terms(
        request_id=rid, question_id=np.array([f"q{i}" for i in range(n)], dtype=object),
        hard=np.ones(n, dtype=bool), correct=correct & valid, prob=valid, nll=np.where(valid, nll, 0.0),
        brier=np.where(valid, 2 * (1 - np.where(correct, conf, 1 - conf)) ** 2, 0.0), ece_rows=valid,
        conf=np.where(valid, conf, 0.0), bin=np.where(valid, M.bin_index(conf, 15), 0), valid=valid,
        pred=np.zeros(n, dtype=int),
    )


outcomes = st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(0.34, 1.0), st.integers(0, 5)), min_size=1, max_size=40)


def pair_of(rows):
    ca = [r[0] for r in rows]
    cb = [r[1] for r in rows]
    conf = [r[2] for r in rows]
    rid = [f"r{r[3]}" for r in rows]
    return terms(ca, conf, rid=rid), terms(cb, [min(1.0, c + 0.05) for c in conf], rid=rid)


# -- hand-computed -----------------------------------------------------------------------------------

def test_paired_accuracy_difference_and_mcnemar_by_hand():
    # 10 questions: both right on 4, only A on 3, only B on 1, both wrong on 2
    a = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    b = [1, 1, 1, 1, 0, 0, 0, 1, 0, 0]
    ta, tb = terms(a), terms(b)
    res = C.paired_metrics(ta, tb, resamples=500, seed=3)
    acc = res["accuracy"]
    assert acc["a"] == pytest.approx(0.7) and acc["b"] == pytest.approx(0.5) and acc["diff"] == pytest.approx(0.2)
    assert acc["ci_low"] <= 0.2 <= acc["ci_high"] and acc["n"] == 10
    test = C.mcnemar(ta.correct, tb.correct)
    assert (test["a_only"], test["b_only"]) == (3, 1)
    # exact two-sided binomial: P(X <= 1 or X >= 3 | n=4, p=1/2) = (1 + 4 + 4 + 1) / 16
    assert test["p_value"] == pytest.approx(10 / 16)


def test_invalid_answers_are_not_correct_and_probability_metrics_pair_valid_for_both():
    valid_b = [True, True, False, True]
    ta = terms([1, 1, 1, 0], [0.9, 0.9, 0.9, 0.6])
    tb = terms([1, 0, 1, 0], [0.7, 0.7, 0.7, 0.6], valid=valid_b)
    res = C.paired_metrics(ta, tb, resamples=200)
    assert res["accuracy"]["b"] == pytest.approx(0.25)  # the invalid (would-be right) answer counts as wrong
    assert res["nll"]["n"] == 3
    nll_a = -np.log([0.9, 0.9, 0.4]).mean()
    nll_b = -np.log([0.7, 0.3, 0.4]).mean()
    assert res["nll"]["a"] == pytest.approx(nll_a) and res["nll"]["b"] == pytest.approx(nll_b)
    assert res["nll"]["diff"] == pytest.approx(nll_a - nll_b)


def test_requests_are_resampled_whole():
    # two requests of 50 questions each: A right on all of r0, wrong on all of r1. Resampling
    # requests gives accuracies in {0, 0.5, 1} only; resampling questions would give a narrow interval.
    t = terms([1] * 50 + [0] * 50, rid=["r0"] * 50 + ["r1"] * 50)
    ci = C.headline_intervals(t, resamples=400, seed=1)["accuracy"]
    assert ci == [0.0, 1.0]


def test_benjamini_hochberg_by_hand():
    # p sorted 0.01, 0.02, 0.03, 0.5 (m=4): 0.04, 0.04, 0.04, 0.5
    assert C.benjamini_hochberg([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.04, 0.5, 0.04, 0.04])
    assert C.benjamini_hochberg([]) == []


def test_auroc_against_pairs_and_ties():
    # positives 0.9, 0.5; negatives 0.5, 0.1 -> pairs: (0.9>0.5) (0.9>0.1) (0.5=0.5 -> 1/2) (0.5>0.1) = 3.5/4
    assert C.auroc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875)
    assert C.auroc([0.2, 0.3], [1, 1]) is None
    P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    assert C.macro_auroc(P, np.array([0, 1, 2, 1])) == pytest.approx(np.mean([C.auroc(P[:, k], np.array([0, 1, 2, 1]) == k)
                                                                                for k in range(3)]))
    assert C.macro_auroc(P, np.array([0, 0, 1, 1])) is None  # class 2 never occurs


def test_auroc_matches_scikit_learn_where_available():
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    P = rng.dirichlet([1, 1, 1, 1], size=200)
    y = rng.integers(0, 4, 200)
    assert C.macro_auroc(P, y) == pytest.approx(skm.roc_auc_score(y, P, multi_class="ovr", average="macro", labels=[0, 1, 2, 3]))
    P2 = rng.dirichlet([1, 1], size=100).round(2)  # rounded: ties
    y2 = rng.integers(0, 2, 100)
    assert C.macro_auroc(P2, y2) == pytest.approx(skm.roc_auc_score(y2, P2[:, 1]))


def test_risk_coverage_and_selective_accuracy():
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 0, 1, 1], dtype=bool)
    rc = C.risk_coverage(conf, correct)
    assert rc["coverage"].tolist() == [0.25, 0.5, 0.75, 1.0]
    assert rc["risk"] == pytest.approx([0, 0.5, 1 / 3, 0.25])
    assert rc["aurc"] == pytest.approx((0 + 0.5 + 1 / 3 + 0.25) / 4)
    assert C.selective_accuracy(conf, correct, 0.5) == 0.5
    assert C.coverage_at_risk(conf, correct, 0.0) == 0.25
    assert C.coverage_at_risk(conf, correct, 0.3) == 1.0


def test_smooth_calibration_of_a_calibrated_model_follows_the_diagonal():
    rng = np.random.default_rng(5)
    conf = rng.uniform(0.2, 1.0, 20000)
    correct = rng.uniform(size=conf.size) < conf
    h = C.smooth_bandwidth(conf, correct)
    grid = np.linspace(0.3, 0.9, 7)
    acc, _ = C.smooth_calibration(conf, correct, grid, h)
    assert np.abs(acc - grid).max() < 0.05
    assert C.smooth_ece(conf, correct, h) < 0.03
    over = C.smooth_ece(conf, rng.uniform(size=conf.size) < conf - 0.2, h)
    assert over > 0.15  # 20 points overconfident


def test_smooth_band_contains_the_curve():
    rng = np.random.default_rng(2)
    conf = rng.uniform(0.3, 1.0, 600)
    correct = rng.uniform(size=600) < conf
    units = np.arange(600) // 2
    grid = np.linspace(0.4, 0.9, 6)
    acc, _ = C.smooth_calibration(conf, correct, grid, 0.1)
    lo, hi = C.smooth_calibration_band(conf, correct, units, grid, 0.1, resamples=100)
    assert np.all(lo <= acc + 1e-9) and np.all(acc <= hi + 1e-9)


# -- upstream random streams ------------------------------------------------------------------------

def test_python_random_choices_stream_is_reproduced_by_numpy():
    """JevAlt-Bench's bootstrap draws ``random.Random(seed).choices``; the legacy Mersenne Twister
    seeded with ``[seed]`` gives the same uniform numbers (this is what jevalt_bench relies on)."""
    keys = list(range(37))
    rng = random.Random(0)
    ours = np.floor(np.random.RandomState([0]).random_sample((3, 37)) * 37).astype(int)
    assert ours.tolist() == [rng.choices(keys, k=37) for _ in range(3)]


# -- properties ---------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(outcomes)
def test_identical_models_have_a_zero_interval(rows):
    ta, _ = pair_of(rows)
    res = C.paired_metrics(ta, ta, resamples=50, seed=1)
    for name in C.HEADLINE:
        assert res[name]["diff"] in (0.0, None)
        assert res[name]["ci_low"] in (0.0, None) and res[name]["ci_high"] in (0.0, None)
    assert C.mcnemar(ta.correct, ta.correct)["p_value"] == 1.0


@settings(max_examples=40, deadline=None)
@given(outcomes)
def test_swapping_models_negates_the_difference(rows):
    ta, tb = pair_of(rows)
    ab = C.paired_metrics(ta, tb, resamples=50, seed=2)
    ba = C.paired_metrics(tb, ta, resamples=50, seed=2)
    for name in C.HEADLINE:
        if ab[name]["diff"] is None:
            continue
        assert ba[name]["diff"] == pytest.approx(-ab[name]["diff"], abs=1e-12)
        assert ba[name]["ci_low"] == pytest.approx(-ab[name]["ci_high"], abs=1e-9)
        assert ba[name]["ci_high"] == pytest.approx(-ab[name]["ci_low"], abs=1e-9)
    m_ab, m_ba = C.mcnemar(ta.correct, tb.correct), C.mcnemar(tb.correct, ta.correct)
    assert (m_ab["a_only"], m_ab["b_only"]) == (m_ba["b_only"], m_ba["a_only"])
    assert m_ab["p_value"] == pytest.approx(m_ba["p_value"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60))
def test_mcnemar_is_the_two_sided_binomial_test(pairs):
    ca = np.array([p[0] for p in pairs])
    cb = np.array([p[1] for p in pairs])
    res = C.mcnemar(ca, cb)
    n = res["a_only"] + res["b_only"]
    expected = binomtest(res["a_only"], n, 0.5).pvalue if n else 1.0
    assert res["p_value"] == pytest.approx(expected)
    assert 0.0 <= res["p_value"] <= 1.0


@settings(max_examples=40, deadline=None)
@given(outcomes)
def test_point_values_match_the_report_metrics_and_lie_in_their_interval(rows):
    ta, tb = pair_of(rows)
    res = C.paired_metrics(ta, tb, resamples=200, seed=4)
    assert res["accuracy"]["a"] == pytest.approx(ta.correct.mean())
    assert res["ece"]["a"] == pytest.approx(M.ece(ta.conf, ta.correct))
    ci = C.headline_intervals(ta, resamples=200, seed=4)
    lo, hi = ci["accuracy"]
    assert lo - 1e-12 <= max(0.0, min(1.0, ta.correct.mean())) or hi >= ta.correct.mean()
    assert 0.0 <= lo <= hi <= 1.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_benjamini_hochberg_is_monotone_and_bounded(p):
    q = C.benjamini_hochberg(p)
    assert all(pi <= qi + 1e-12 <= 1.0 + 1e-12 for pi, qi in zip(p, q))
    order = np.argsort(p, kind="stable")
    assert all(np.diff(np.asarray(q)[order]) >= -1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=2, max_size=40))
def test_auroc_is_the_probability_a_positive_outranks_a_negative(rows):
    s = np.array([r[0] for r in rows])
    y = np.array([r[1] for r in rows])
    value = C.auroc(s, y)
    if y.all() or not y.any():
        assert value is None
        return
    pos, neg = s[y], s[~y]
    brute = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert value == pytest.approx(brute)


def test_question_bootstrap_in_chunks_equals_the_one_shot_draws_bit_for_bit():
    rng = np.random.default_rng(3)
    n = 301
    conf = rng.uniform(0.0, 1.0, n).round(2)  # rounded: some on bin edges, some 0 (in no right-closed bin)
    conf[:5] = 0.0
    correct = rng.uniform(size=n) < conf
    bins = M.bin_index(conf, 15, right_closed=True)
    # the one-shot version: every draw at once, one (draw, bin) cell per drawn question
    idx = np.random.default_rng(42).integers(0, n, (50, n))
    acc = correct[idx].mean(axis=1)
    draw = np.repeat(np.arange(50), n)
    ece = M.binned_gaps(draw, 50, bins[idx].ravel(), conf[idx].ravel(), correct[idx].ravel(), 15) / n
    for chunk_cells in (1, n * 7, 10 ** 9):
        got_acc, got_ece = C.question_bootstrap(conf, correct, bins, 15, 50, 42, chunk_cells=chunk_cells)
        assert np.array_equal(got_acc, acc)
        assert np.array_equal(got_ece, ece)


def test_headline_unit_totals_equal_the_segment_sums_of_the_per_question_block():
    rng = np.random.default_rng(5)
    n = 400
    t = terms(rng.uniform(size=n) < 0.6, conf=rng.uniform(0.3, 1.0, n).round(2), valid=rng.uniform(size=n) < 0.9,
              rid=np.array([f"r{i // 3:03d}" for i in rng.permutation(n)], dtype=object))
    codes, G = C.unit_codes(t.request_id)
    expected = C.unit_totals(codes, G, C._headline_block(t, t.hard, t.prob, t.ece_rows))
    got = C._headline_unit_totals(t, codes, G)
    assert np.abs(got - expected).max() < 1e-12, np.abs(got - expected).max()


def test_slice_intervals_through_signatures_equal_a_units_by_values_product():
    """Per-slice resampled totals through signatures equal the straightforward dense
    units x values product, bit for bit, with units whose questions take several slice values."""
    rng = np.random.default_rng(11)
    n = 600
    t = terms(rng.uniform(size=n) < 0.55, conf=rng.uniform(0.3, 1.0, n).round(2), valid=rng.uniform(size=n) < 0.9,
              rid=np.array([f"r{i // 4:03d}" for i in rng.permutation(n)], dtype=object))
    t = C.Terms(**{**t.__dict__, "hard": rng.uniform(size=n) < 0.9})  # some questions without a hard label
    slices = {"domain": rng.choice(["a", "b", "c", "d"], n).astype(object),  # varies within a request
              "level": rng.choice(["easy", "hard"], n).astype(object)}
    codes, G = C.unit_codes(t.request_id)
    member, keys = C._slice_members(t, slices, 50)
    k = len(keys)
    dense = np.zeros((G, 2 * k))  # unit x (hits per value, hard questions per value)
    for i in np.flatnonzero(t.hard):
        for j in member[i]:
            dense[codes[i], j] += float(t.correct[i])
            dense[codes[i], k + j] += 1.0
    by_signature = C.SliceTotals.of(t, member, k, codes, G)
    for W in C.resample_counts(G, 30, 0, chunk_cells=G * 7):
        assert np.array_equal(by_signature.resampled(W), W @ dense)
    _, per_slice = C.report_intervals(t, slices, resamples=40)
    W = np.vstack([w.copy() for w in C.resample_counts(G, 40, C.SEED)])
    boot = W @ dense
    for j, (name, value) in enumerate(keys):
        expected = C.percentile_interval(boot[:, j] / boot[:, k + j])
        assert per_slice[name][value]["accuracy_ci"] == list(expected)
    # slices given already coded (sorted values, index of each question's), as the report passes
    # the table's integer codes, give the same intervals as the strings themselves
    coded = {name: tuple(np.unique(col.astype(str), return_inverse=True)) for name, col in slices.items()}
    coded = {name: ([str(v) for v in values], inv) for name, (values, inv) in coded.items()}
    assert C.report_intervals(t, coded, resamples=40) == C.report_intervals(t, slices, resamples=40)
