"""Generic metrics (PROTOCOL §5): small pure functions over whole views, vectorised with numpy.

Conventions: ``P`` and ``Y`` are ``(N, K)`` arrays of predicted and target distributions, rows
padded with zeros past each question's own candidate count ``K_i``; padded cells contribute
nothing to any formula below. Per-row functions return an ``(N,)`` array; aggregation (means,
slices, coverage policy) happens in :func:`summarize`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NLL_FLOOR = 1e-12
ECE_BINS = 15


def nll(P: np.ndarray, Y: np.ndarray, floor: float = NLL_FLOOR) -> np.ndarray:
    """Cross-entropy against the target distribution: ``-sum_k y_k ln max(p_k, floor)``."""
    return -(Y * np.log(np.maximum(P, floor))).sum(axis=1)


def kl_divergence(P: np.ndarray, Y: np.ndarray, floor: float = NLL_FLOOR) -> np.ndarray:
    """``KL(y || p) = sum_k y_k (ln y_k - ln max(p_k, floor))`` with ``0 ln 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(Y > 0, Y * (np.log(np.where(Y > 0, Y, 1.0)) - np.log(np.maximum(P, floor))), 0.0)
    return terms.sum(axis=1)


def brier(P: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Multi-class Brier score ``sum_k (p_k - y_k)^2`` (not divided by K)."""
    return ((P - Y) ** 2).sum(axis=1)


def top_label(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Argmax (first maximum in candidate order, so ties go to the earlier candidate) and its p."""
    idx = np.argmax(P, axis=1)
    return idx, P[np.arange(len(P)), idx]


def _level_mask(K: np.ndarray, width: int, upto: int = 0) -> np.ndarray:
    """``mask[i, k]`` is True for ``k < K_i - upto``."""
    return np.arange(width)[None, :] < (np.asarray(K)[:, None] - upto)


def ordinal_rps(P: np.ndarray, Y: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Ranked probability score ``(1/(K-1)) sum_{k<K-1} (P_k - Y_k)^2`` over cumulative P, Y."""
    cum = np.cumsum(P, axis=1) - np.cumsum(Y, axis=1)
    sq = np.where(_level_mask(K, P.shape[1], upto=1), cum**2, 0.0)
    return sq.sum(axis=1) / np.maximum(np.asarray(K) - 1, 1)


def ordinal_mae(P: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """``|sum_k k p_k - sum_k k y_k|``: expected level against the target's expected level."""
    levels = np.arange(P.shape[1])
    return np.abs(P @ levels - Y @ levels)


def ece(
    confidence: np.ndarray,
    correct: np.ndarray,
    n_bins: int = ECE_BINS,
    right_closed: bool = False,
    return_bins: bool = False,
) -> Any:
    """Expected calibration error over equal-width bins: ``sum_b (n_b / N) |acc_b - conf_b|``.

    Left-closed bins ``[lo, hi)`` with the last bin closed at 1 (generic). ``right_closed=True``
    gives ``(lo, hi]`` bins over ``n_bins + 1`` edges from 0 to 1 (zh-decision-bench reference);
    there a confidence of exactly 0 falls in no bin and is left out of the sum, while N still
    counts it, as upstream's ``np.digitize``-style binning does.
    """
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    n = len(conf)
    if n == 0:
        return (None, []) if return_bins else None
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    if right_closed:  # (lo, hi]; conf == 0 -> index -1, in no bin
        idx = np.minimum(np.digitize(conf, edges, right=True) - 1, n_bins - 1)
    else:  # [lo, hi), the last bin closed at 1
        idx = np.digitize(conf, edges[1:-1], right=False)
    inside = idx >= 0
    counts = np.bincount(idx[inside], minlength=n_bins)
    conf_sum = np.bincount(idx[inside], weights=conf[inside], minlength=n_bins)
    acc_sum = np.bincount(idx[inside], weights=hit[inside], minlength=n_bins)
    nz = counts > 0
    gap = np.zeros(n_bins)
    gap[nz] = np.abs(acc_sum[nz] - conf_sum[nz]) / counts[nz]
    value = float((counts * gap).sum() / n)
    if not return_bins:
        return value
    table = [
        {"lo": float(edges[b]), "hi": float(edges[b + 1]), "n": int(counts[b]),
         "confidence": float(conf_sum[b] / counts[b]) if counts[b] else None,
         "accuracy": float(acc_sum[b] / counts[b]) if counts[b] else None}
        for b in range(n_bins)
    ]
    return value, table


def _mean(x: np.ndarray) -> float | None:
    return float(np.mean(x)) if len(x) else None


def summarize(
    P: np.ndarray,
    Y: np.ndarray,
    K: np.ndarray,
    label: np.ndarray,
    valid: np.ndarray,
    has_target: np.ndarray,
    qtype: np.ndarray,
    ece_bins: int = ECE_BINS,
    level_order: np.ndarray | None = None,
) -> dict[str, Any]:
    """The generic metrics of one group of questions, with the coverage policy applied.

    - accuracy: over every hard-label question; an invalid, unsupported or unattempted answer
      is not correct (``accuracy_n`` is the denominator);
    - NLL, Brier, ECE, RPS, ordinal MAE: only over valid answers with a target (``*_n`` counts);
    - RPS and ordinal MAE only over ``score`` questions, over levels in level order: where
      ``level_order`` is given (``(N, K)`` column of level ``k``), columns are gathered into
      level order first; accuracy and ECE keep the candidate order (argmax ties).
    """
    hard = label >= 0
    pred, conf = top_label(P)
    correct = valid & hard & (pred == label)
    prob_rows = valid & has_target
    ece_rows = valid & hard
    out: dict[str, Any] = {
        "n": int(len(label)),
        "accuracy": float(correct[hard].mean()) if hard.any() else None,
        "accuracy_n": int(hard.sum()),
        "nll": _mean(nll(P[prob_rows], Y[prob_rows])),
        "brier": _mean(brier(P[prob_rows], Y[prob_rows])),
        "probability_n": int(prob_rows.sum()),
        "ece": ece(conf[ece_rows], correct[ece_rows], ece_bins),
        "ece_n": int(ece_rows.sum()),
    }
    ordinal = prob_rows & (qtype == "score")
    if (qtype == "score").any():
        P_lv, Y_lv = P[ordinal], Y[ordinal]
        if level_order is not None:
            P_lv = np.take_along_axis(P_lv, level_order[ordinal], axis=1)
            Y_lv = np.take_along_axis(Y_lv, level_order[ordinal], axis=1)
        out["rps"] = _mean(ordinal_rps(P_lv, Y_lv, K[ordinal]))
        out["ordinal_mae"] = _mean(ordinal_mae(P_lv, Y_lv))
        out["ordinal_n"] = int(ordinal.sum())
    return out


def summarize_table(table, mask: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`summarize` over a :class:`~jevkedro.nodes.validate.QuestionTable` (or a masked part)."""
    m = np.ones(len(table), dtype=bool) if mask is None else mask
    m = m & ~table.unscored
    width = int(table.K[m].max()) if m.any() else 1  # drop padding columns: zeros add nothing
    level_order = getattr(table, "level_order", None)
    return summarize(table.P[m, :width], table.Y[m, :width], table.K[m], table.label[m], table.valid[m],
                     table.has_target[m], table.qtype[m],
                     level_order=None if level_order is None else level_order[m, :width])


def by_slice(table, name: str) -> dict[str, dict[str, Any]]:
    """Generic metrics per value of one slice column (empty values are skipped)."""
    col = table.slices.get(name)
    if col is None:
        return {}
    return {str(v): summarize_table(table, col == v) for v in sorted(set(col.tolist())) if v != ""}


def ece_equal_frequency(confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float | None:
    """ECE over ``n_bins`` equal-mass bins: ``sum_b (|B_b| / n) |mean conf_b - acc_b|``.

    Questions are sorted by confidence (ascending; ties keep their input order) and bin ``b``
    holds sorted positions ``[b*n // n_bins, (b+1)*n // n_bins)`` (JevAlt-Bench reference, family
    spec §6), so when ``n`` is not a multiple of ``n_bins`` the larger bins are the later ones;
    with ``n < n_bins`` some bins are empty and add nothing.
    """
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    n = len(conf)
    if n == 0:
        return None
    order = np.argsort(conf, kind="stable")
    bounds = (np.arange(n_bins + 1) * n) // n_bins
    bin_of = np.repeat(np.arange(n_bins), np.diff(bounds))
    # (|B_b|/n) * |mean conf - acc| == |sum conf - sum hit| / n per bin
    conf_sum = np.bincount(bin_of, weights=conf[order], minlength=n_bins)
    acc_sum = np.bincount(bin_of, weights=hit[order], minlength=n_bins)
    return float(np.abs(conf_sum - acc_sum).sum() / n)
