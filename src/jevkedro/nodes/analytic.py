"""Analytic clustered standard errors and verdicts (docs/comparing.md).

Beside the bootstrap of :mod:`jevkedro.nodes.compare`, the paired difference of a per-question
metric has a closed-form standard error that respects clustering (Miller, "Adding Error Bars to
Evals", 2024). For values ``d_i`` over ``N`` questions in ``G`` clusters (the bootstrap's
resampling units: requests; JevBench: paraphrase groups)::

    mean = sum(d) / N
    D_c  = sum over cluster c of (d_i - mean)
    se   = sqrt(G / (G - 1) * sum_c D_c**2) / N,   df = G - 1
    95% interval  mean -/+ t(0.975, df) * se
    p_value       2 * (1 - T_df(|mean| / se))        (1 when se is 0)
    mde_80        (z_0.975 + z_0.80) * se            (the smallest true difference detected with
                                                      80% power at the 5% level)

Fewer than :data:`MIN_CLUSTERS` clusters: the figures are given with ``small_sample: true`` and the
bootstrap interval is the one to read.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special  # scipy.stats.t/norm are these functions (a second of start-up less)

LEVEL = 0.95
MIN_CLUSTERS = 30
# which way each headline metric is better (verdicts and the console's arrows)
HIGHER_IS_BETTER = {"accuracy": True, "nll": False, "brier": False, "ece": False}


def cluster_codes(keys: Any) -> tuple[np.ndarray, int]:
    """Codes ``0..G-1`` of each question's cluster, and ``G`` (keys as text; integer keys, e.g.
    codes already made for a larger set, are renumbered without turning them into text)."""
    keys = np.asarray(keys)
    if keys.dtype.kind not in "iu":
        keys = keys.astype(object).astype(str)
    values, codes = np.unique(keys, return_inverse=True)
    return codes.astype(np.intp).ravel(), len(values)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def clustered_mean(values: np.ndarray, clusters: Any, level: float = LEVEL) -> dict[str, Any]:
    """``{mean, se, ci_low, ci_high, df, p_value, mde_80, n, clusters, small_sample}`` of the mean
    of ``values`` (one per question) with the clustered standard error of the module docstring.
    With one cluster (or none) the standard error is undefined: None throughout."""
    d = np.asarray(values, dtype=float)
    codes, G = cluster_codes(clusters)
    if len(codes) != len(d):
        raise ValueError(f"{len(d)} values but {len(codes)} cluster keys")
    N = len(d)
    out: dict[str, Any] = {"mean": None, "se": None, "ci_low": None, "ci_high": None, "df": G - 1 if G else 0,
                           "p_value": None, "mde_80": None, "n": N, "clusters": G, "small_sample": G < MIN_CLUSTERS}
    if N == 0:
        return out
    mean = float(d.sum() / N)
    out["mean"] = mean
    if G < 2:
        return out
    D = np.bincount(codes, weights=d - mean, minlength=G)
    se = math.sqrt(G / (G - 1) * float(np.dot(D, D))) / N
    df = G - 1
    half = float(special.stdtrit(df, 0.5 + level / 2)) * se
    p = 1.0 if se == 0 else float(2 * special.stdtr(df, -abs(mean) / se))
    out.update(se=se, ci_low=mean - half, ci_high=mean + half, p_value=min(p, 1.0),
               mde_80=float(special.ndtri(0.975) + special.ndtri(0.80)) * se)
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in out.items()}


def paired_analytic(a: Any, b: Any, units: Any = None, level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """Clustered figures of ``A - B`` for accuracy, NLL and Brier on two aligned term sets
    (:class:`jevkedro.nodes.compare.Terms`), paired as the bootstrap pairs them: accuracy over every
    hard-label question (an answer that is not valid is not correct), NLL and Brier over the
    questions valid for both. ECE is not a per-question mean: bootstrap only."""
    keys = cluster_codes(a.request_id if units is None else units)[0]  # once; the subsets renumber integers
    hard = np.asarray(a.hard, dtype=bool)
    prob = np.asarray(a.prob, dtype=bool) & np.asarray(b.prob, dtype=bool)
    d_acc = np.asarray(a.correct, dtype=float) - np.asarray(b.correct, dtype=float)
    out = {"accuracy": clustered_mean(d_acc[hard], keys[hard], level)}
    for name in ("nll", "brier"):
        d = np.asarray(getattr(a, name), dtype=float) - np.asarray(getattr(b, name), dtype=float)
        out[name] = clustered_mean(d[prob], keys[prob], level)
    return out


def headline_analytic(t: Any, units: Any = None, level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """Clustered figures of one run's accuracy (hard-label questions), NLL and Brier (valid ones)."""
    keys = cluster_codes(t.request_id if units is None else units)[0]
    hard, prob = np.asarray(t.hard, dtype=bool), np.asarray(t.prob, dtype=bool)
    return {"accuracy": clustered_mean(np.asarray(t.correct, dtype=float)[hard], keys[hard], level),
            "nll": clustered_mean(np.asarray(t.nll, dtype=float)[prob], keys[prob], level),
            "brier": clustered_mean(np.asarray(t.brier, dtype=float)[prob], keys[prob], level)}


SINGLE_RUN_FIELDS = ("mean", "se", "ci_low", "ci_high", "df", "n", "clusters")


def report_analytic(t: Any, units: Any, unit_name: str, level: float = LEVEL) -> dict[str, Any]:
    """``report.json``'s ``analytic``: the clustered standard error and t interval of each headline
    mean of one run (accuracy, NLL, Brier; ECE is not a mean of per-question terms: bootstrap
    only), clustered by the bootstrap's units. Fewer than :data:`MIN_CLUSTERS` clusters: a note
    says to read the bootstrap interval (``intervals.overall``)."""
    codes, G = cluster_codes(units) if len(t) else (np.zeros(0, dtype=np.intp), 0)
    figures = headline_analytic(t, codes, level)  # integer codes: the keys are turned to text once
    out: dict[str, Any] = {"level": level, "method": "clustered standard error, t interval with clusters - 1 df",
                           "unit": unit_name, "clusters": G, "small_sample": G < MIN_CLUSTERS,
                           "overall": {m: {k: f[k] for k in SINGLE_RUN_FIELDS} for m, f in figures.items()}}
    if G < MIN_CLUSTERS:
        out["note"] = (f"{G} clusters ({unit_name}), fewer than {MIN_CLUSTERS}: the standard error rests on few "
                       "clusters; read the bootstrap interval (intervals.overall)")
    return out


def verdict(metric: str, ci_low: float | None, ci_high: float | None) -> str:
    """``"A"``, ``"B"`` or ``"none"``: which model the interval of ``A - B`` favours, by the metric's
    direction; ``"none"`` when the interval holds zero or is unknown."""
    if ci_low is None or ci_high is None:
        return "none"
    higher = HIGHER_IS_BETTER[metric]
    if ci_low > 0:
        return "A" if higher else "B"
    if ci_high < 0:
        return "B" if higher else "A"
    return "none"


def format_bound(x: float | None, digits: int = 3) -> str:
    """A signed bound with ``digits`` decimals, more where rounding would show a non-zero bound as
    zero (so an interval that excludes zero never reads as touching it: ``-0.0004``, not ``+0.000``)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    d = digits
    while x != 0 and round(x, d) == 0 and d < 12:
        d += 1
    return f"{x:+.{d}f}"


def format_interval(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return f"[{format_bound(lo, digits)}, {format_bound(hi, digits)}]"
