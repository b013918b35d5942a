"""Generic metrics (docs/protocol.md §4): small pure functions over whole views, vectorised with numpy.

Conventions: ``P`` and ``Y`` are ``(N, K)`` arrays of predicted and target distributions, rows
padded with zeros past each question's own candidate count ``K_i``; padded cells contribute
nothing to any formula below. Per-row functions return an ``(N,)`` array; aggregation (means,
slices, coverage policy) happens in :func:`summarize`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import rel_entr

NLL_FLOOR = 1e-12
ECE_BINS = 15


def nll(P: np.ndarray, Y: np.ndarray, floor: float = NLL_FLOOR) -> np.ndarray:
    """Cross-entropy against the target distribution: ``-sum_k y_k ln max(p_k, floor)``."""
    return -(Y * np.log(np.maximum(P, floor))).sum(axis=1)


def kl_divergence(P: np.ndarray, Y: np.ndarray, floor: float = NLL_FLOOR) -> np.ndarray:
    """``KL(y || p) = sum_k y_k (ln y_k - ln max(p_k, floor))`` with ``0 ln 0 = 0`` (``scipy.special.rel_entr``)."""
    return rel_entr(Y, np.maximum(P, floor)).sum(axis=1)


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


# -- binning and grouped sums: the one implementation every ECE and every per-slice figure uses ----

ECE_METHODS = ("equal_width", "equal_width_right_closed", "equal_frequency")
# A confidence within this distance of a bin edge is placed by the edge's nominal value: the top
# probability of a renormalised answer can be a few units in the last place off (0.8 -> 0.7999999999999998).
EDGE_TOLERANCE = 1e-9


def group_sums(codes: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """``sum`` of a per-question value within each group (booleans count 1), in one ``bincount``."""
    return np.bincount(codes, weights=np.asarray(values, dtype=float), minlength=n_groups)


def bin_index(confidence: np.ndarray, n_bins: int = ECE_BINS, right_closed: bool = False) -> np.ndarray:
    """Equal-width bin of each confidence, by its nominal value.

    ``x = conf * n_bins``, snapped to the nearest integer when within ``EDGE_TOLERANCE * n_bins``
    of it; left-closed bins ``[k/n, (k+1)/n)`` give ``floor(x)`` (the last bin closed at 1);
    right-closed bins ``(k/n, (k+1)/n]`` give ``ceil(x) - 1``, so a confidence of exactly 0 is in no
    bin (``-1``)."""
    x = np.asarray(confidence, dtype=float) * n_bins
    near = np.rint(x)
    x = np.where(np.abs(x - near) <= EDGE_TOLERANCE * n_bins, near, x)
    idx = (np.ceil(x) - 1 if right_closed else np.floor(x)).astype(np.intp)
    return np.minimum(idx, n_bins - 1)


def equal_mass_bins(confidence: np.ndarray, n_bins: int = ECE_BINS, codes: np.ndarray | None = None,
                    n_groups: int = 1) -> np.ndarray:
    """Equal-mass bin of each confidence within its group (``codes``; one group when None).

    A group's questions are sorted by confidence (ties keep their input order, as upstream's stable
    sort; answers whose sum is 1 up to rounding are not rescaled, see
    :func:`jevkedro.nodes.validate.renormalising_divisor`, so equal answers tie) and bin ``b`` holds sorted positions
    ``[b*N // n_bins, (b+1)*N // n_bins)`` (JevAlt-Bench's reference), i.e. position ``i`` is in
    bin ``((i+1) * n_bins - 1) // N``: when ``N`` is not a multiple of ``n_bins`` the larger bins
    are the later ones, and with ``N < n_bins`` some bins are empty."""
    conf = np.asarray(confidence, dtype=float)
    codes = np.zeros(len(conf), dtype=np.intp) if codes is None else np.asarray(codes, dtype=np.intp)
    order = np.lexsort((conf, codes))  # by group, then confidence; stable
    size = np.bincount(codes, minlength=n_groups)
    start = np.concatenate(([0], np.cumsum(size)[:-1]))
    position = np.empty(len(conf), dtype=np.intp)
    position[order] = np.arange(len(conf)) - start[codes[order]]
    return ((position + 1) * n_bins - 1) // np.maximum(size[codes], 1)


def binned_gaps(codes: np.ndarray, n_groups: int, bins: np.ndarray, confidence: np.ndarray, correct: np.ndarray,
                n_bins: int, rows: np.ndarray | None = None) -> np.ndarray:
    """``sum_b |hits_gb - conf_gb|`` per group over the (group, bin) cells of the questions in
    ``rows`` (a question in no bin, ``bin == -1``, adds nothing): ECE_g is this divided by N_g."""
    inside = bins >= 0 if rows is None else rows & (bins >= 0)
    cell = codes[inside] * n_bins + bins[inside]
    hits = group_sums(cell, n_groups * n_bins, np.asarray(correct)[inside])
    conf = group_sums(cell, n_groups * n_bins, np.asarray(confidence)[inside])
    return np.abs(hits - conf).reshape(n_groups, n_bins).sum(axis=1)


def method_bins(confidence: np.ndarray, method: str, n_bins: int = ECE_BINS, codes: np.ndarray | None = None,
                n_groups: int = 1) -> np.ndarray:
    """The bins of one of :data:`ECE_METHODS` (equal-mass bins are per group)."""
    if method == "equal_width":
        return bin_index(confidence, n_bins)
    if method == "equal_width_right_closed":
        return bin_index(confidence, n_bins, right_closed=True)
    if method == "equal_frequency":
        return equal_mass_bins(confidence, n_bins, codes, n_groups)
    raise ValueError(f"unknown ECE method {method!r}; one of {ECE_METHODS}")


def ece(
    confidence: np.ndarray,
    correct: np.ndarray,
    n_bins: int = ECE_BINS,
    right_closed: bool = False,
    return_bins: bool = False,
    method: str | None = None,
) -> Any:
    """Expected calibration error ``sum_b (n_b / N) |acc_b - conf_b| = sum_b |hits_b - conf_b| / N``.

    Equal-width bins (:func:`bin_index`): left-closed ``[lo, hi)`` with the last bin closed at 1
    (generic); ``right_closed=True`` gives ``(lo, hi]`` bins (zh-decision-bench reference), where a
    confidence of exactly 0 falls in no bin and is left out of the sum while N still counts it, as
    upstream's ``np.digitize``-style binning does. ``method="equal_frequency"``: equal-mass bins
    (:func:`equal_mass_bins`). ``return_bins`` adds the table of bins (equal-width edges)."""
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    n = len(conf)
    if n == 0:
        return (None, []) if return_bins else None
    method = method or ("equal_width_right_closed" if right_closed else "equal_width")
    bins = method_bins(conf, method, n_bins)
    zeros = np.zeros(n, dtype=np.intp)
    value = float(binned_gaps(zeros, 1, bins, conf, hit, n_bins)[0] / n)
    if not return_bins:
        return value
    inside = bins >= 0
    counts = np.bincount(bins[inside], minlength=n_bins)
    conf_sum, acc_sum = (group_sums(bins[inside], n_bins, x[inside]) for x in (conf, hit))
    table = [
        {"lo": b / n_bins, "hi": (b + 1) / n_bins, "n": int(counts[b]),
         "confidence": float(conf_sum[b] / counts[b]) if counts[b] else None,
         "accuracy": float(acc_sum[b] / counts[b]) if counts[b] else None}
        for b in range(n_bins)
    ]
    return value, table


def row_stats(P, Y, K, label, valid, has_target, qtype, ece_bins: int = ECE_BINS,
              level_order: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-question terms of every generic metric, computed once for the whole view.

    Groups (overall, by type, by slice) are then sums of these terms (:func:`aggregate`), so
    slicing never recomputes a formula. RPS and ordinal MAE need levels in level order: where
    ``level_order`` is given (``(N, K)``: column of level ``k``), score columns are gathered into
    level order first; accuracy and ECE keep the candidate order (argmax ties).
    """
    hard = label >= 0
    pred, conf = top_label(P)
    correct = valid & hard & (pred == label)
    prob = valid & has_target
    ordinal = prob & (qtype == "score")
    ece_rows = valid & hard
    zeros = np.zeros(len(label))
    P_lv, Y_lv = P, Y
    if level_order is not None and ordinal.any():
        P_lv = np.take_along_axis(P, level_order, axis=1)
        Y_lv = np.take_along_axis(Y, level_order, axis=1)
    return {
        "hard": hard,
        "correct": correct,
        "prob": prob,
        "nll": np.where(prob, nll(P, Y), 0.0),
        "brier": np.where(prob, brier(P, Y), 0.0),
        "ece_rows": ece_rows,
        "conf": np.where(ece_rows, conf, 0.0),
        "bin": np.where(ece_rows, bin_index(conf, ece_bins), 0),
        "is_score": qtype == "score",
        "ordinal": ordinal,
        "rps": np.where(ordinal, ordinal_rps(P_lv, Y_lv, K), 0.0) if ordinal.any() else zeros,
        "mae": np.where(ordinal, ordinal_mae(P_lv, Y_lv), 0.0) if ordinal.any() else zeros,
    }


def aggregate(stats: dict[str, np.ndarray], codes: np.ndarray, n_groups: int, ece_bins: int = ECE_BINS) -> list[dict[str, Any]]:
    """Generic metrics per group from :func:`row_stats`, with the coverage policy applied.

    - accuracy: over every hard-label question; an invalid, unsupported or unattempted answer
      is not correct (``accuracy_n`` is the denominator);
    - NLL, Brier, ECE, RPS, ordinal MAE: only over valid answers with a target (``*_n`` counts);
      ECE as in :func:`ece` (left-closed equal-width bins), computed per group with one
      ``bincount`` over (group, bin) cells: ``ECE_g = sum_b |hits_gb - conf_gb| / N_g``;
    - RPS and ordinal MAE only over ``score`` questions, reported where the group has any.
    """
    def total(weights):
        return group_sums(codes, n_groups, weights)

    n = np.bincount(codes, minlength=n_groups)
    n_hard, hits = total(stats["hard"]), total(stats["correct"])
    n_prob, n_ece, n_ord = total(stats["prob"]), total(stats["ece_rows"]), total(stats["ordinal"])
    has_score = total(stats["is_score"]) > 0
    nll_sum, brier_sum = total(stats["nll"]), total(stats["brier"])
    rps_sum, mae_sum = total(stats["rps"]), total(stats["mae"])
    ece_gap = binned_gaps(codes, n_groups, stats["bin"], stats["conf"], stats["correct"], ece_bins, stats["ece_rows"])

    def ratio(num, den, g):
        return float(num[g] / den[g]) if den[g] else None

    out = []
    for g in range(n_groups):
        row: dict[str, Any] = {
            "n": int(n[g]),
            "accuracy": ratio(hits, n_hard, g),
            "accuracy_n": int(n_hard[g]),
            "nll": ratio(nll_sum, n_prob, g),
            "brier": ratio(brier_sum, n_prob, g),
            "probability_n": int(n_prob[g]),
            "ece": ratio(ece_gap, n_ece, g),
            "ece_n": int(n_ece[g]),
        }
        if has_score[g]:
            row.update(rps=ratio(rps_sum, n_ord, g), ordinal_mae=ratio(mae_sum, n_ord, g), ordinal_n=int(n_ord[g]))
        out.append(row)
    return out


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
    """The generic metrics of one group of questions (see :func:`aggregate` for the policy)."""
    stats = row_stats(P, Y, K, label, valid, has_target, np.asarray(qtype, dtype=object), ece_bins, level_order)
    return aggregate(stats, np.zeros(len(label), dtype=np.intp), 1, ece_bins)[0]


def table_stats(table) -> dict[str, np.ndarray]:
    """:func:`row_stats` of a question table, computed once and kept on the table."""
    cached = getattr(table, "_row_stats", None)
    if cached is None:
        cached = row_stats(table.P, table.Y, table.K, table.label, table.valid, table.has_target, table.qtype,
                           level_order=getattr(table, "level_order", None))
        table._row_stats = cached  # the table is immutable once built; slices reuse the terms
    return cached


def summarize_table(table, mask: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`summarize` over a :class:`~jevkedro.nodes.validate.QuestionTable` (or a masked part);
    unscored (diagnostic) questions count in nothing."""
    m = np.ones(len(table), dtype=bool) if mask is None else mask
    m = m & ~table.unscored
    stats = {k: v[m] for k, v in table_stats(table).items()}
    return aggregate(stats, np.zeros(int(m.sum()), dtype=np.intp), 1)[0]


def slice_codes(table, name: str, mask: np.ndarray | None = None) -> tuple[list[str], np.ndarray] | None:
    """``(values, codes)`` of a slice column over the questions in ``mask``: the distinct values
    in sorted order and each question's index into them (``np.unique(..., return_inverse=True)``
    of the column as ``str``). Uses the table's integer codes when it has them (no strings
    sorted); values absent from ``mask`` are dropped either way."""
    codes = (getattr(table, "slice_codes", None) or {}).get(name)
    if codes is None:
        col = table.slices.get(name)
        if col is None:
            return None
        values, inverse = np.unique((col if mask is None else col[mask]).astype(str), return_inverse=True)
        return [str(v) for v in values], inverse.reshape(-1)
    c = codes.codes if mask is None else codes.codes[mask]
    present = np.bincount(c, minlength=len(codes.values)) > 0
    if present.all():
        return list(codes.values), c
    renumber = np.cumsum(present) - 1
    return [v for v, p in zip(codes.values, present) if p], renumber[c]


def by_slice(table, name: str) -> dict[str, dict[str, Any]]:
    """Generic metrics per value of one slice column (empty values are skipped), in one pass."""
    keep = ~table.unscored
    coded = slice_codes(table, name, keep)
    if coded is None:
        return {}
    values, codes = coded
    stats = {k: v[keep] for k, v in table_stats(table).items()}
    groups = aggregate(stats, codes, len(values))
    return {v: g for v, g in zip(values, groups) if v != ""}


def ece_equal_frequency(confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float | None:
    """ECE over ``n_bins`` equal-mass bins (:func:`equal_mass_bins`; JevAlt-Bench reference, the family README)."""
    return ece(confidence, correct, n_bins, method="equal_frequency")
