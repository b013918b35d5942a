"""Analytic clustered standard errors, verdicts and the Brier decomposition (docs/comparing.md).

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
from scipy import stats

LEVEL = 0.95
MIN_CLUSTERS = 30
# which way each headline metric is better (verdicts and the console's arrows)
HIGHER_IS_BETTER = {"accuracy": True, "nll": False, "brier": False, "ece": False}


def cluster_codes(keys: Any) -> tuple[np.ndarray, int]:
    """Codes ``0..G-1`` of each question's cluster, and ``G``."""
    values, codes = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
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
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    p = 1.0 if se == 0 else float(2 * stats.t.sf(abs(mean) / se, df))
    out.update(se=se, ci_low=mean - half, ci_high=mean + half, p_value=min(p, 1.0),
               mde_80=float(stats.norm.ppf(0.975) + stats.norm.ppf(0.80)) * se)
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in out.items()}


def paired_analytic(a: Any, b: Any, units: Any = None, level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """Clustered figures of ``A - B`` for accuracy, NLL and Brier on two aligned term sets
    (:class:`jevkedro.nodes.compare.Terms`), paired as the bootstrap pairs them: accuracy over every
    hard-label question (an answer that is not valid is not correct), NLL and Brier over the
    questions valid for both. ECE is not a per-question mean: bootstrap only."""
    keys = np.asarray(a.request_id if units is None else units, dtype=object)
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
    keys = np.asarray(t.request_id if units is None else units, dtype=object)
    hard, prob = np.asarray(t.hard, dtype=bool), np.asarray(t.prob, dtype=bool)
    return {"accuracy": clustered_mean(np.asarray(t.correct, dtype=float)[hard], keys[hard], level),
            "nll": clustered_mean(np.asarray(t.nll, dtype=float)[prob], keys[prob], level),
            "brier": clustered_mean(np.asarray(t.brier, dtype=float)[prob], keys[prob], level)}


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


def brier_decomposition(confidence: np.ndarray, correct: np.ndarray, bins: np.ndarray, n_bins: int) -> dict[str, Any]:
    """Murphy's decomposition of the top-label Brier score ``mean((confidence - hit)**2)`` over the
    given bins, with the two within-bin terms that make it exact for forecasts that vary inside a
    bin (Stephenson, Coelho and Jolliffe, 2008)::

        brier = reliability - resolution + uncertainty + within_bin_variance - 2 * within_bin_covariance

    ``reliability = sum_b n_b (f_b - o_b)**2 / N``, ``resolution = sum_b n_b (o_b - o)**2 / N``,
    ``uncertainty = o (1 - o)``, with ``f_b``/``o_b`` a bin's mean confidence and hit rate, ``o`` the
    overall hit rate."""
    f = np.asarray(confidence, dtype=float)
    o = np.asarray(correct, dtype=float)
    b = np.asarray(bins, dtype=np.intp)
    N = len(f)
    if N == 0:
        return {k: None for k in ("brier", "reliability", "resolution", "uncertainty", "within_bin_variance",
                                  "within_bin_covariance", "n")} | {"n": 0}
    n_b = np.bincount(b, minlength=n_bins).astype(float)
    safe = np.maximum(n_b, 1.0)
    f_b = np.bincount(b, weights=f, minlength=n_bins) / safe
    o_b = np.bincount(b, weights=o, minlength=n_bins) / safe
    o_all = float(o.mean())
    df, do = f - f_b[b], o - o_b[b]
    return {
        "brier": float(np.mean((f - o) ** 2)),
        "reliability": float(np.dot(n_b, (f_b - o_b) ** 2) / N),
        "resolution": float(np.dot(n_b, (o_b - o_all) ** 2) / N),
        "uncertainty": o_all * (1 - o_all),
        "within_bin_variance": float(np.dot(df, df) / N),
        "within_bin_covariance": float(np.dot(df, do) / N),
        "n": N,
    }
