"""The JevalKit reference-protocol report (``scorer: "jevalkit-decision-protocol-v1"``).

The ``official`` field of Typed-Decisions, DecisionBench, Procedural Typed Decisions,
zh-decision-bench, JevAlt-Bench and VisualDecisionBench holds this report (PROTOCOL §6). It does
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
ECE_METHODS = ("equal_width", "equal_width_right_closed", "equal_frequency")


def reference_ece(conf: np.ndarray, correct: np.ndarray, method: str, n_bins: int = 15) -> float | None:
    if method == "equal_width":
        return M.ece(conf, correct, n_bins)
    if method == "equal_width_right_closed":
        return M.ece(conf, correct, n_bins, right_closed=True)
    if method == "equal_frequency":
        return M.ece_equal_frequency(conf, correct, n_bins)
    raise ValueError(f"unknown ECE method {method!r}; one of {ECE_METHODS}")


def reference_stats(table: QuestionTable, mask: np.ndarray, ece_method: str, nll_floor: float = M.NLL_FLOOR) -> dict[str, Any]:
    m = mask & ~table.unscored
    width = int(table.K[m].max()) if m.any() else 1  # drop padding columns: zeros add nothing
    P, Y, label, valid = table.P[m, :width], table.Y[m, :width], table.label[m], table.valid[m]
    hard = label >= 0
    pred, conf = M.top_label(P)
    correct = valid & hard & (pred == label)
    hv = valid & hard
    onehot = np.zeros_like(P[hv])
    onehot[np.arange(hv.sum()), label[hv]] = 1.0
    soft = valid & table.has_target[m]

    def mean(x):
        return float(np.mean(x)) if len(x) else None

    return {
        "n": int(m.sum()),
        "accuracy": float(correct[hard].mean()) if hard.any() else None,
        "accuracy_n": int(hard.sum()),
        "hard_nll": mean(M.nll(P[hv], onehot, nll_floor)),
        "hard_brier": mean(M.brier(P[hv], onehot)),
        "hard_n": int(hv.sum()),
        "soft_kl": mean(M.kl_divergence(P[soft], Y[soft], nll_floor)),
        "soft_brier": mean(M.brier(P[soft], Y[soft])),
        "soft_n": int(soft.sum()),
        "reference_ece": reference_ece(conf[hv], correct[hv], ece_method),
        "ece_n": int(hv.sum()),
    }


def reference_report(
    table: QuestionTable,
    slices: dict[str, str | tuple[str, ...]],
    ece_method: str,
    nll_floor: float = M.NLL_FLOOR,
    **extra: Any,
) -> dict[str, Any]:
    """Build the report; ``slices`` maps a group name to a table slice column (or a tuple of
    columns, grouped jointly and keyed ``"a/b"``)."""
    everything = np.ones(len(table), dtype=bool)
    groups: dict[str, Any] = {"overall": reference_stats(table, everything, ece_method, nll_floor)}
    for name, cols in slices.items():
        cols = (cols,) if isinstance(cols, str) else tuple(cols)
        if any(c not in table.slices for c in cols):
            continue
        keys = np.array(["/".join(parts) for parts in zip(*(table.slices[c] for c in cols))], dtype=object)
        groups[name] = {k: reference_stats(table, keys == k, ece_method, nll_floor)
                        for k in sorted(set(keys.tolist())) if k.strip("/")}
    return {"scorer": SCORER, "upstream_program_ran": False, "ece_method": ece_method, "ece_bins": 15,
            "nll_floor": nll_floor, **extra, "groups": groups}
