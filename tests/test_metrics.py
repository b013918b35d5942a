"""Generic metrics against hand-computed values, plus properties (docs/protocol.md §4)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from jevkedro.nodes import metrics as M

P = np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]])
Y = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def test_nll_hand_values():
    assert M.nll(P, Y) == pytest.approx([-math.log(0.7), -math.log(0.5)])


def test_nll_floor_applies_to_zero_probability():
    got = M.nll(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))
    assert got[0] == pytest.approx(-math.log(1e-12))
    assert M.nll(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), floor=1e-15)[0] == pytest.approx(-math.log(1e-15))


def test_brier_is_sum_not_mean():
    # (0.7-1)^2 + 0.2^2 + 0.1^2 = 0.09 + 0.04 + 0.01 = 0.14 ; 0.25 + 0.25 + 0 = 0.5
    assert M.brier(P, Y) == pytest.approx([0.14, 0.5])


def test_kl_soft_target():
    p = np.array([[0.5, 0.5]])
    y = np.array([[0.8, 0.2]])
    want = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    assert M.kl_divergence(p, y)[0] == pytest.approx(want)
    # KL against a one-hot target equals the NLL
    assert M.kl_divergence(P, Y) == pytest.approx(M.nll(P, Y))


def test_top_label_ties_go_to_first_candidate():
    idx, conf = M.top_label(np.array([[0.5, 0.5, 0.0], [0.2, 0.4, 0.4]]))
    assert idx.tolist() == [0, 1]
    assert conf.tolist() == [0.5, 0.4]


def test_rps_hand_value():
    # K=3, p=(0.2,0.5,0.3), y=level 2: cumulative P=(0.2,0.7), Y=(0,0) over first K-1 levels
    # RPS = (0.2^2 + 0.7^2) / 2 = (0.04 + 0.49) / 2 = 0.265
    got = M.ordinal_rps(np.array([[0.2, 0.5, 0.3]]), np.array([[0.0, 0.0, 1.0]]), np.array([3]))
    assert got[0] == pytest.approx(0.265)


def test_rps_ignores_padding_for_smaller_k():
    # a K=2 row padded to width 4: only the first level counts, divided by K-1 = 1
    got = M.ordinal_rps(np.array([[0.3, 0.7, 0.0, 0.0]]), np.array([[1.0, 0.0, 0.0, 0.0]]), np.array([2]))
    assert got[0] == pytest.approx(0.49)


def test_ordinal_mae_hand_value():
    # expected level 0*0.2 + 1*0.5 + 2*0.3 = 1.1 ; target level 2 -> |1.1 - 2| = 0.9
    got = M.ordinal_mae(np.array([[0.2, 0.5, 0.3]]), np.array([[0.0, 0.0, 1.0]]))
    assert got[0] == pytest.approx(0.9)


def test_ece_hand_value_equal_width():
    conf = np.array([0.95, 0.95, 0.55, 0.55])
    correct = np.array([1, 0, 1, 1])
    # bin [0.9333,1]: acc 0.5 conf 0.95 gap 0.45 ; bin [0.5333,0.6): acc 1 conf 0.55 gap 0.45
    assert M.ece(conf, correct) == pytest.approx(0.45)


def test_ece_bin_edges_left_closed_vs_right_closed():
    conf = np.array([1 / 15 * 3])  # exactly an edge: 0.2
    # left-closed: [0.2, 0.2667) -> bin 3 ; right-closed: (0.1333, 0.2] -> bin 2
    _, left = M.ece(conf, np.array([1]), return_bins=True)
    _, right = M.ece(conf, np.array([1]), right_closed=True, return_bins=True)
    assert [b["n"] for b in left].index(1) == 3
    assert [b["n"] for b in right].index(1) == 2


def test_ece_confidence_one_is_in_the_last_bin_both_ways():
    for rc in (False, True):
        _, table = M.ece(np.array([1.0]), np.array([1]), right_closed=rc, return_bins=True)
        assert table[-1]["n"] == 1


def test_ece_right_closed_zero_confidence_in_no_bin():
    # zh Unknown 2: confidence 0 falls in no (lo, hi] bin; it adds nothing but still counts in N
    value, table = M.ece(np.array([0.0, 0.9]), np.array([0, 1]), right_closed=True, return_bins=True)
    assert sum(b["n"] for b in table) == 1
    assert value == pytest.approx(0.5 * abs(1 - 0.9))


def test_ece_equal_frequency_hand_value():
    conf = np.array([0.9, 0.6, 0.8, 0.7])
    correct = np.array([1, 0, 0, 1])
    # 2 bins of 2 after sorting: (0.6, 0.7) acc 0.5 conf 0.65 ; (0.8, 0.9) acc 0.5 conf 0.85
    assert M.ece_equal_frequency(conf, correct, n_bins=2) == pytest.approx(0.5 * 0.15 + 0.5 * 0.35)


def test_summarize_coverage_policy():
    P_ = np.array([[0.9, 0.1], [0.0, 0.0], [0.4, 0.6]])
    Y_ = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    out = M.summarize(P_, Y_, np.array([2, 2, 2]), label=np.array([0, 0, 0]),
                      valid=np.array([True, False, True]), has_target=np.array([True, True, True]),
                      qtype=np.array(["noul"] * 3, dtype=object))
    assert out["accuracy"] == pytest.approx(1 / 3)  # the invalid one counts as wrong
    assert out["accuracy_n"] == 3
    assert out["probability_n"] == 2  # ...but is left out of NLL/Brier
    assert out["nll"] == pytest.approx((-math.log(0.9) - math.log(0.4)) / 2)
    assert "rps" not in out


def test_soft_target_without_label_not_in_accuracy():
    out = M.summarize(np.array([[0.6, 0.4]]), np.array([[0.7, 0.3]]), np.array([2]), label=np.array([-1]),
                      valid=np.array([True]), has_target=np.array([True]), qtype=np.array(["noul"], dtype=object))
    assert out["accuracy"] is None and out["accuracy_n"] == 0
    assert out["brier"] == pytest.approx(0.01 + 0.01)
    assert out["ece_n"] == 0


def _simplex(draw, k):
    raw = draw(arrays(float, k, elements=st.floats(0.001, 1.0)))
    return raw / raw.sum()


@st.composite
def prob_rows(draw):
    k = draw(st.integers(2, 6))
    n = draw(st.integers(1, 20))
    P_ = np.stack([_simplex(draw, k) for _ in range(n)])
    Y_ = np.stack([_simplex(draw, k) for _ in range(n)])
    return P_, Y_


@settings(max_examples=60, deadline=None)
@given(prob_rows())
def test_properties(rows):
    P_, Y_ = rows
    assert (M.brier(P_, Y_) >= -1e-12).all() and (M.brier(P_, Y_) <= 2 + 1e-9).all()
    assert (M.kl_divergence(P_, Y_) >= -1e-9).all()
    assert np.allclose(M.kl_divergence(P_, P_), 0, atol=1e-9)
    # cross-entropy = entropy + KL
    ent = -(Y_ * np.log(Y_)).sum(axis=1)
    assert np.allclose(M.nll(P_, Y_), ent + M.kl_divergence(P_, Y_))
    K = np.full(len(P_), P_.shape[1])
    assert ((M.ordinal_rps(P_, Y_, K) >= 0) & (M.ordinal_rps(P_, Y_, K) <= 1 + 1e-9)).all()
    idx, conf = M.top_label(P_)
    e = M.ece(conf, idx == 0)
    assert 0 <= e <= 1
