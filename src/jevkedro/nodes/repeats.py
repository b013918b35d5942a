"""Figures across repeated answers (issue 22 item 4, ``model.repeats=K``): what a report says of a
model asked every request K times.

Given one row per (question, attempt) with the question's per-answer losses, :func:`across_repeats`
gives the headline metrics on each question's mean over its repeats (accuracy: the mean hit rate;
NLL and Brier: the mean loss), the standard deviation of each headline across repeats (the headline
of attempt k alone, k = 1..K; ``ddof=1``), the within-question variance (each question's variance
over its repeats, ``ddof=0``, averaged over questions) and the share of questions whose top answer
is the same in every repeat. A loss that is NaN (an answer not valid) is left out of that
question's mean; a question with no valid repeat is left out of the headline.

:func:`attempt_tables` judges every attempt of a predictions log as its own question table and
:func:`pooled_table` stacks them (one row per question and attempt): the report's metrics,
calibration, intervals and clustered errors are computed on it with each request (or family
group) as one cluster holding all its repeats, so accuracy is the mean hit rate, calibration pools
every repeat, and the intervals are those of the repeat-averaged per-question values (exactly,
for NLL and Brier, when every repeat of a question is valid). :func:`repeat_summary` is the
report's ``repeats`` section.

:func:`averaged_terms` gives the per-question terms a comparison pairs (``python -m
jevkedro.compare``, the baseline gates): each question's mean over its repeats, so two models with
their own K are paired question by question (the cluster stays the request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jevkedro.nodes import compare as C
from jevkedro.nodes import metrics as M
from jevkedro.nodes.layout import SliceColumn
from jevkedro.nodes.validate import QuestionTable, RequestColumns, build_question_table

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


def attempt_tables(snapshot: Any, first: QuestionTable, records: Any, repeats: int) -> list[QuestionTable]:
    """The question table of each attempt 0..``repeats``-1: ``first`` (attempt 0's, already built)
    and one judged from each further attempt's records (``records.attempt(k)``: a predictions
    log's :class:`~jevkedro.nodes.predictions_log.LogRecords`)."""
    return [first, *(build_question_table(snapshot, records.attempt(k)) for k in range(1, repeats))]


def pooled_table(tables: Sequence[QuestionTable]) -> QuestionTable:
    """Every attempt's rows in one table (attempt 0's questions, then attempt 1's, ...); the
    request columns count every (request, attempt)."""
    t0 = tables[0]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(t, name) for t in tables])

    cols = RequestColumns(requests=sum(t.requests.requests for t in tables if t.requests is not None),
                          attempted=sum(t.requests.attempted for t in tables if t.requests is not None))
    for t in tables:
        if t.requests is not None:
            for mine, theirs in zip(cols.columns(), t.requests.columns()):
                mine.extend(theirs)
    return QuestionTable(
        request_id=cat("request_id"), question_id=cat("question_id"), qtype=cat("qtype"), K=cat("K"), P=cat("P"),
        Y=cat("Y"), has_target=cat("has_target"), label=cat("label"), unscored=cat("unscored"), status=cat("status"),
        reason=[r for t in tables for r in t.reason],
        slices={name: np.concatenate([t.slices[name] for t in tables]) for name in t0.slices},
        level_order=None if t0.level_order is None else np.concatenate([t.level_order for t in tables]),
        slice_codes={name: SliceColumn(np.concatenate([t.slice_codes[name].codes for t in tables]), c.values)
                     for name, c in t0.slice_codes.items()},
        requests=cols if t0.requests is not None else None,
    )


def repeat_summary(tables: Sequence[QuestionTable]) -> dict[str, Any]:
    """``report.json``'s ``repeats``: :func:`across_repeats` of the attempts' tables (scored
    questions only; accuracy over hard-label questions, NLL and Brier over valid answers with a
    target, the top answer of a valid answer)."""
    question: list[Any] = []
    attempt: list[int] = []
    top: list[Any] = []
    losses: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
    for k, t in enumerate(tables):
        st = M.table_stats(t)
        keep = ~np.asarray(t.unscored, dtype=bool)
        question += list(zip(np.asarray(t.request_id)[keep].tolist(), np.asarray(t.question_id)[keep].tolist()))
        attempt += [k] * int(keep.sum())
        pred, _ = M.top_label(t.P)
        top += [int(p) if v else None for p, v in zip(pred[keep].tolist(), np.asarray(t.valid)[keep].tolist())]
        losses["accuracy"].append(np.where(st["hard"], st["correct"], np.nan)[keep])
        losses["nll"].append(np.where(st["prob"], st["nll"], np.nan)[keep])
        losses["brier"].append(np.where(st["prob"], st["brier"], np.nan)[keep])
    out = across_repeats(question, attempt, top, {m: np.concatenate(v) for m, v in losses.items()})
    return {"headline": "each question's mean over its repeats (accuracy: the hit rate; NLL, Brier: the loss)",
            "calibration": "every repeat's answer pooled (metrics, calibration)", **out}


def averaged_terms(tables: Sequence[QuestionTable], bins: int = M.ECE_BINS) -> C.Terms:
    """The :class:`~jevkedro.nodes.compare.Terms` of each question averaged over its repeats (one
    table per attempt, as :func:`attempt_tables` gives them): ``correct`` the hit rate over every
    repeat (an answer that is not valid is not correct), ``nll``/``brier`` the mean loss over the
    valid repeats (``prob``: at least one), ``gap`` the mean over the calibration-valid repeats
    (``ece_rows``: at least one) of ``hit - conf`` in each answer's bin, so ECE pools every repeat
    with each question weighing one. ``valid``, ``pred``, ``conf`` and ``bin`` are attempt 0's.
    One table: its terms unchanged."""
    terms = [C.terms_of(t) for t in tables]
    first = terms[0]
    if len(terms) == 1:
        return first
    for t in terms[1:]:
        C.aligned(first, t)
    n = len(first)
    prob = np.vstack([t.prob for t in terms])
    ece = np.vstack([t.ece_rows for t in terms])
    n_prob, n_ece = prob.sum(axis=0), ece.sum(axis=0)

    def over_valid(name: str) -> np.ndarray:
        total = np.sum([np.where(t.prob, getattr(t, name), 0.0) for t in terms], axis=0)
        return np.where(n_prob > 0, total / np.maximum(n_prob, 1), 0.0)

    gap = np.zeros((n, bins))
    for t in terms:
        gap[np.arange(n), t.bin] += np.where(t.ece_rows, t.correct.astype(float) - t.conf, 0.0)  # one cell per row
    return C.Terms(
        request_id=first.request_id, question_id=first.question_id, hard=first.hard,
        correct=np.mean([t.correct for t in terms], axis=0), prob=n_prob > 0, nll=over_valid("nll"),
        brier=over_valid("brier"), ece_rows=n_ece > 0, conf=first.conf, bin=first.bin, valid=first.valid,
        pred=first.pred, gap=gap / np.maximum(n_ece, 1)[:, None],
    )
