"""Figures across repeated answers (issue 22 item 4, ``model.repeats=K``): what a report says of a
model asked every request K times.

Given one row per (question, attempt) with the question's per-answer losses, :func:`across_repeats`
gives the headline metrics on each question's mean over its repeats (accuracy: the mean hit rate;
NLL and Brier: the mean loss), the standard deviation of each headline across repeats (the headline
of attempt k alone, k = 1..K; ``ddof=1``), the within-question variance (each question's variance
over its repeats, ``ddof=0``, averaged over questions) and the share of questions whose top answer
is the same in every repeat. A loss that is NaN (an answer not valid) is left out of that
question's mean; a question with no valid repeat is left out of the headline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

METRICS = ("accuracy", "nll", "brier")


def per_question_means(question: Sequence[Any], values: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Question ids in first-seen order and each one's mean over its repeats (NaN: none valid)."""
    order = list(dict.fromkeys(question))
    pos = {q: i for i, q in enumerate(order)}
    idx = np.fromiter((pos[q] for q in question), dtype=np.int64, count=len(question))
    values = np.asarray(values, dtype=float)
    ok = ~np.isnan(values)
    sums = np.bincount(idx[ok], weights=values[ok], minlength=len(order))
    counts = np.bincount(idx[ok], minlength=len(order))
    with np.errstate(invalid="ignore", divide="ignore"):
        return order, np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _within_variance(question: Sequence[Any], values: np.ndarray) -> float | None:
    order, means = per_question_means(question, values)
    pos = {q: i for i, q in enumerate(order)}
    idx = np.fromiter((pos[q] for q in question), dtype=np.int64, count=len(question))
    values = np.asarray(values, dtype=float)
    ok = ~np.isnan(values)
    dev = np.bincount(idx[ok], weights=(values[ok] - means[idx[ok]]) ** 2, minlength=len(order))
    counts = np.bincount(idx[ok], minlength=len(order))
    have = counts > 0
    return float(np.mean(dev[have] / counts[have])) if have.any() else None


def _std_across(attempt: np.ndarray, values: np.ndarray) -> float | None:
    per = [np.nanmean(values[attempt == k]) for k in np.unique(attempt)
           if not np.all(np.isnan(values[attempt == k]))]
    return float(np.std(per, ddof=1)) if len(per) > 1 else None


def across_repeats(question: Sequence[Any], attempt: Sequence[int], top: Sequence[Any],
                   losses: dict[str, np.ndarray]) -> dict[str, Any]:
    """The across-repeat figures of one view (see the module's docstring). ``losses`` maps each of
    :data:`METRICS` present to one value per row (accuracy: the 0/1 hit); ``top`` is each row's top
    answer (None: no valid answer)."""
    att = np.asarray(attempt, dtype=np.int64)
    out: dict[str, Any] = {"repeats": int(len(np.unique(att))) if len(att) else 0}
    for name, values in losses.items():
        values = np.asarray(values, dtype=float)
        _, means = per_question_means(question, values)
        valid = means[~np.isnan(means)]
        out[name] = float(valid.mean()) if len(valid) else None
        out[f"{name}_n"] = int(len(valid))
        out[f"{name}_std_across_repeats"] = _std_across(att, values)
        out[f"{name}_within_question_variance"] = _within_variance(question, values)
    tops: dict[Any, set[Any]] = {}
    for q, t in zip(question, top):
        tops.setdefault(q, set()).add(t)
    out["same_top_answer_share"] = (sum(len(s) == 1 and None not in s for s in tops.values()) / len(tops)
                                    if tops else None)
    return out
