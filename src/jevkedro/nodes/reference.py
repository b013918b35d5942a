"""The JevalKit reference-protocol report (``scorer: "jevalkit-decision-protocol-v1"``).

The ``official`` field of Typed-Decisions, DecisionBench, Procedural Typed Decisions,
zh-decision-bench, JevAlt-Bench and VisualDecisionBench holds this report (docs/protocol.md §7). It does
not claim that an upstream program ran. Per group of questions it gives:

- ``accuracy`` over hard-label questions (invalid/unsupported/unattempted count as wrong);
- ``hard_nll`` / ``hard_brier``: against the one-hot hard label, valid answers only;
- ``soft_kl`` / ``soft_brier``: against the full target distribution (one-hot where the source
  gives only a label), valid answers only;
- ``reference_ece``: the family's own binning (equal-width 15 bins, left- or right-closed, or
  equal-frequency 15 bins), over valid hard-label answers.

Groups: ``overall`` plus one entry per configured slice (task, domain, language, difficulty, ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.validate import QuestionTable

SCORER = "jevalkit-decision-protocol-v1"
ECE_METHODS = M.ECE_METHODS
REFERENCE_ECE_BINS = 15


def _reference_terms(table: QuestionTable, nll_floor: float) -> dict[str, np.ndarray]:
    """Per-question terms of the reference report, computed once for the whole view."""
    live = ~table.unscored
    P, Y, label, valid = table.P, table.Y, table.label, table.valid
    hard = live & (label >= 0)
    pred, conf = M.top_label(P)
    correct = valid & hard & (pred == label)
    hv = valid & hard
    rows = np.arange(len(P))
    p_gold = P[rows, np.where(hv, label, 0)]
    soft = live & valid & table.has_target
    return {
        "live": live, "hard": hard, "correct": correct, "hv": hv, "soft": soft, "conf": conf,
        # one-hot hard label: NLL = -ln max(p_gold, floor); Brier = sum p^2 - 2 p_gold + 1
        "hard_nll": np.where(hv, -np.log(np.maximum(p_gold, nll_floor)), 0.0),
        "hard_brier": np.where(hv, (P**2).sum(axis=1) - 2 * p_gold + 1, 0.0),
        "soft_kl": _soft_kl(P, Y, soft, nll_floor),
        "soft_brier": np.where(soft, M.brier(P, Y), 0.0),
    }


def _soft_kl(P: np.ndarray, Y: np.ndarray, soft: np.ndarray, floor: float) -> np.ndarray:
    """``KL(y || p)`` where ``soft`` (0 elsewhere). A one-hot row's KL is ``-ln max(p_label, floor)``
    (its other terms are 0 and ``ln 1 = 0``): the same number, without the log of every cell;
    only rows that are not one-hot take the full formula."""
    out = np.zeros(len(P))
    hot = soft & (Y.max(axis=1, initial=0.0) == 1.0) & ((Y != 0).sum(axis=1) == 1)
    rows = np.flatnonzero(hot)
    out[rows] = -np.log(np.maximum(P[rows, np.argmax(Y[rows], axis=1)], floor))
    rest = np.flatnonzero(soft & ~hot)
    if len(rest):
        out[rest] = M.kl_divergence(P[rest], Y[rest], floor)
    return out


def _grouped(terms: dict[str, np.ndarray], codes: np.ndarray, n_groups: int, ece_method: str) -> list[dict[str, Any]]:
    def total(x):
        return M.group_sums(codes, n_groups, x)

    n, n_hard, hits = total(terms["live"]), total(terms["hard"]), total(terms["correct"])
    n_hv, n_soft = total(terms["hv"]), total(terms["soft"])
    sums = {k: total(terms[k]) for k in ("hard_nll", "hard_brier", "soft_kl", "soft_brier")}
    # ECE_g = sum_b |hits_gb - conf_gb| / N_g over the method's bins (equal-mass bins within each group)
    hv = terms["hv"]
    bins = np.full(len(codes), -1, dtype=np.intp)
    bins[hv] = M.method_bins(terms["conf"][hv], ece_method, REFERENCE_ECE_BINS, codes[hv], n_groups)
    ece = M.binned_gaps(codes, n_groups, bins, terms["conf"], terms["correct"], REFERENCE_ECE_BINS, hv)

    def ratio(num, den, g):
        return float(num[g] / den[g]) if den[g] else None

    return [{
        "n": int(n[g]),
        "accuracy": ratio(hits, n_hard, g),
        "accuracy_n": int(n_hard[g]),
        "hard_nll": ratio(sums["hard_nll"], n_hv, g),
        "hard_brier": ratio(sums["hard_brier"], n_hv, g),
        "hard_n": int(n_hv[g]),
        "soft_kl": ratio(sums["soft_kl"], n_soft, g),
        "soft_brier": ratio(sums["soft_brier"], n_soft, g),
        "soft_n": int(n_soft[g]),
        "reference_ece": float(ece[g] / n_hv[g]) if n_hv[g] else None,
        "ece_n": int(n_hv[g]),
    } for g in range(n_groups)]


def _codes(table: QuestionTable, col: str) -> tuple[list[str], np.ndarray]:
    found = M.slice_codes(table, col)
    if found is None:
        raise KeyError(f"slice {col!r} is not a column of the question table")
    return found


def _joint_codes(table: QuestionTable, cols: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """Distinct ``"a/b"`` keys of one or more slice columns in sorted order, and each question's
    index into them (as ``np.unique`` over the joined strings), from the columns' integer codes:
    only the distinct combinations are joined and sorted, not a string per question."""
    values, codes = _codes(table, cols[0])
    for c in cols[1:]:
        more, more_codes = _codes(table, c)
        pair = codes.astype(np.int64) * len(more) + more_codes
        combos, codes = np.unique(pair, return_inverse=True)
        values = [f"{values[p // len(more)]}/{more[p % len(more)]}" for p in combos.tolist()]
    order = sorted(range(len(values)), key=values.__getitem__)
    if order != list(range(len(values))):  # joined keys sort differently from their parts
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        values, codes = [values[i] for i in order], rank[codes]
    return values, codes.reshape(-1)


def reference_report(
    table: QuestionTable,
    slices: dict[str, str | tuple[str, ...]],
    ece_method: str,
    nll_floor: float = M.NLL_FLOOR,
    **extra: Any,
) -> dict[str, Any]:
    """Build the report; ``slices`` maps a group name to a table slice column (or a tuple of
    columns, grouped jointly and keyed ``"a/b"``). Each group is one vectorised pass."""
    if ece_method not in ECE_METHODS:
        raise ValueError(f"unknown ECE method {ece_method!r}; one of {ECE_METHODS}")
    terms = _reference_terms(table, nll_floor)
    groups: dict[str, Any] = {"overall": _grouped(terms, np.zeros(len(table), dtype=np.intp), 1, ece_method)[0]}
    for name, cols in slices.items():
        cols = (cols,) if isinstance(cols, str) else tuple(cols)
        if any(c not in table.slices for c in cols):
            continue
        values, codes = _joint_codes(table, cols)
        stats = _grouped(terms, codes, len(values), ece_method)
        groups[name] = {v: st for v, st in zip(values, stats) if v.strip("/")}
    return {"scorer": SCORER, "upstream_program_ran": False, "ece_method": ece_method, "ece_bins": REFERENCE_ECE_BINS,
            "nll_floor": nll_floor, **extra, "groups": groups}
