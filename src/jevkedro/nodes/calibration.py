"""Calibration, decomposed: the Murphy decomposition of the top-label Brier score and ECE over
equal-width and equal-mass bins, per group of questions (overall, by type, by slice).

Over the valid hard-label answers of a group (ECE's questions), with ``f_i`` the top-label
confidence, ``o_i`` 1 when that answer is right, ``N`` questions and the 15 equal-width bins of
ECE (:func:`jevkedro.nodes.metrics.bin_index`), ``n_b``, ``f_b``, ``o_b`` a bin's size, mean
confidence and hit rate and ``o`` the group's hit rate::

    top_label_brier      = sum_i (f_i - o_i)**2 / N
    reliability          = sum_b n_b (f_b - o_b)**2 / N
    resolution           = sum_b n_b (o_b - o)**2 / N
    uncertainty          = o (1 - o)
    within_bin_variance  = sum_i (f_i - f_b(i))**2 / N
    within_bin_covariance = sum_i (f_i - f_b(i)) (o_i - o_b(i)) / N

    top_label_brier = reliability - resolution + uncertainty + within_bin_variance - 2 within_bin_covariance

exactly (Stephenson, Coelho and Jolliffe, 2008). Murphy's three-term identity
``brier = reliability - resolution + uncertainty`` holds only when the confidence is constant inside
each bin; the two within-bin terms are what binning leaves over. This is the *top-label* Brier score
(one probability per question against right/wrong), not the report's multi-class ``brier``
(``sum_k (p_k - y_k)**2`` against the target distribution).

``ece_equal_width`` is the report's ``ece``; ``ece_equal_mass`` uses 15 bins of equal size in
confidence order (:func:`jevkedro.nodes.metrics.equal_mass_bins`), which no sparse bin dominates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M

FIELDS = ("n", "ece_equal_width", "ece_equal_mass", "top_label_brier", "reliability", "resolution", "uncertainty",
          "within_bin_variance", "within_bin_covariance")
IDENTITY = ("top_label_brier = reliability - resolution + uncertainty + within_bin_variance "
            "- 2 * within_bin_covariance")


def calibration_groups(confidence: np.ndarray, correct: np.ndarray, codes: np.ndarray, n_groups: int,
                       n_bins: int = M.ECE_BINS) -> list[dict[str, Any]]:
    """The module's figures for each group ``0..n_groups-1`` (``codes``: each question's group), in
    a few ``bincount`` passes over (group, bin) cells; a group without questions gets None figures."""
    f = np.asarray(confidence, dtype=float)
    o = np.asarray(correct, dtype=float)
    g = np.asarray(codes, dtype=np.intp)
    bins = M.bin_index(f, n_bins)
    cell = g * n_bins + bins
    cells = n_groups * n_bins
    n_gb = np.bincount(cell, minlength=cells).astype(float)
    safe = np.maximum(n_gb, 1.0)
    f_gb = np.bincount(cell, weights=f, minlength=cells) / safe
    o_gb = np.bincount(cell, weights=o, minlength=cells) / safe
    N = np.bincount(g, minlength=n_groups).astype(float)
    o_g = np.bincount(g, weights=o, minlength=n_groups) / np.maximum(N, 1.0)
    df, do = f - f_gb[cell], o - o_gb[cell]
    per_group = {
        "top_label_brier": np.bincount(g, weights=(f - o) ** 2, minlength=n_groups),
        "reliability": (n_gb * (f_gb - o_gb) ** 2).reshape(n_groups, n_bins).sum(axis=1),
        "resolution": (n_gb * (o_gb - np.repeat(o_g, n_bins)) ** 2).reshape(n_groups, n_bins).sum(axis=1),
        "within_bin_variance": np.bincount(g, weights=df * df, minlength=n_groups),
        "within_bin_covariance": np.bincount(g, weights=df * do, minlength=n_groups),
        "ece_equal_width": M.binned_gaps(g, n_groups, bins, f, o, n_bins),
        "ece_equal_mass": M.binned_gaps(g, n_groups, M.equal_mass_bins(f, n_bins, g, n_groups), f, o, n_bins),
    }
    out = []
    for k in range(n_groups):
        if not N[k]:
            out.append({name: None for name in FIELDS} | {"n": 0})
            continue
        row: dict[str, Any] = {"n": int(N[k])}
        for name in FIELDS[1:]:
            row[name] = float(o_g[k] * (1 - o_g[k])) if name == "uncertainty" else float(per_group[name][k] / N[k])
        out.append(row)
    return out


def calibration_summary(table: Any, terms: Any, not_slices: frozenset[str] = frozenset({"type"}),
                        n_bins: int = M.ECE_BINS) -> dict[str, Any]:
    """``report.json``'s ``calibration``: the figures overall, by type and by each slice (as
    ``metrics`` has them; empty slice values skipped), over each group's valid hard-label answers."""
    keep = ~np.asarray(table.unscored, dtype=bool)
    rows = np.asarray(terms.ece_rows, dtype=bool)
    conf, hit = np.asarray(terms.conf)[rows], np.asarray(terms.correct)[rows]
    out: dict[str, Any] = {"bins": n_bins, "binning": "equal width (decomposition); equal width and equal mass (ECE)",
                           "confidence": "top label", "identity": IDENTITY,
                           "overall": calibration_groups(conf, hit, np.zeros(len(conf), dtype=np.intp), 1, n_bins)[0]}
    for name in ["type", *sorted(n for n in table.slices if n not in not_slices)]:
        coded = M.slice_codes(table, name, keep)
        if coded is None:
            continue
        values, codes = coded
        groups = calibration_groups(conf, hit, np.asarray(codes)[rows], len(values), n_bins)
        out[f"by_{name}"] = {v: row for v, row in zip(values, groups) if v != ""}
    return out
