"""Native metrics, coverage, chance correction and the weighted public index (pure numpy).

Every function takes plain arrays and returns plain numbers, so each rule is tested with
hand-computed values (``tests/test_decision_index_scoring.py``). The formulas:

- ``accuracy``: mean of ``correct``.
- ``macro_f1``: mean over classes of ``2 tp / (2 tp + fp + fn)``; the classes are the gold
  labels, and with ``conservative=True`` also every predicted label (a class predicted but never
  gold adds an F1 of 0, so spraying rare labels cannot raise the score).
- ``positive_f1``: ``2 tp / (2 tp + fp + fn)`` of one class (0 when that is 0 / 0).
- ``group_macro_accuracy``: mean over groups of the group's accuracy (song / user macro).
- ``case_exact_accuracy``: a case is right when every scored field of it is right.
- ``review_f1``: per review, F1 of the predicted-positive fields against the gold-positive ones
  (1 when both are empty), averaged over reviews.
- ``ndcg_at_k``: per query, fields ranked by score (higher first, ties in field order), DCG with
  linear gains ``sum gain_i / log2(rank_i + 1)`` over the top ``k``, divided by the DCG of the
  ideal order of the same gains; a query without a positive gain scores 0; mean over queries.
- ``raw_score = native * answered / requests`` (coverage first: anything not answered is wrong).
- ``skill = clip((raw - chance) / (1 - chance), 0, 1)``.
- ``public_index``: inside an area, the weighted mean of its benchmarks (gold 1.2, others 1.0);
  across areas, ``100 * sum(w_area * area) / sum(w_area)`` with the fixed area weights; the
  ``breadth`` variant is the weighted geometric mean of the areas (0 when an area is 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _codes(values: Sequence) -> np.ndarray:
    return np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)[1]


def accuracy(correct: np.ndarray) -> float:
    correct = np.asarray(correct, dtype=bool)
    return float(correct.mean()) if correct.size else 0.0


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, empty: float) -> np.ndarray:
    tp, fp, fn = (np.asarray(x, dtype=float) for x in (tp, fp, fn))
    den = 2 * tp + fp + fn
    return np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), empty)


def macro_f1(gold: Sequence, pred: Sequence, conservative: bool = False) -> float:
    gold = np.asarray(gold, dtype=object).astype(str)
    pred = np.asarray(pred, dtype=object).astype(str)
    if gold.size == 0:
        return 0.0
    classes = np.unique(np.concatenate([gold, pred]) if conservative else gold)
    is_gold = gold[None, :] == classes[:, None]
    is_pred = pred[None, :] == classes[:, None]
    tp = (is_gold & is_pred).sum(axis=1)
    fp = (~is_gold & is_pred).sum(axis=1)
    fn = (is_gold & ~is_pred).sum(axis=1)
    return float(_f1(tp, fp, fn, 0.0).mean())


def positive_f1(gold_positive: np.ndarray, pred_positive: np.ndarray) -> float:
    g = np.asarray(gold_positive, dtype=bool)
    p = np.asarray(pred_positive, dtype=bool)
    return float(_f1((g & p).sum(), (~g & p).sum(), (g & ~p).sum(), 0.0))


def group_macro_accuracy(correct: np.ndarray, groups: Sequence) -> float:
    correct = np.asarray(correct, dtype=float)
    if correct.size == 0:
        return 0.0
    codes = _codes(groups)
    hits = np.bincount(codes, weights=correct)
    sizes = np.bincount(codes)
    return float((hits / sizes).mean())


def case_exact_accuracy(correct: np.ndarray, cases: Sequence) -> float:
    correct = np.asarray(correct, dtype=bool)
    if correct.size == 0:
        return 0.0
    codes = _codes(cases)
    wrong = np.bincount(codes, weights=~correct)
    return float((wrong == 0).mean())


def review_f1(gold_positive: np.ndarray, pred_positive: np.ndarray, reviews: Sequence) -> float:
    g = np.asarray(gold_positive, dtype=bool)
    p = np.asarray(pred_positive, dtype=bool)
    if g.size == 0:
        return 0.0
    codes = _codes(reviews)
    tp = np.bincount(codes, weights=g & p)
    fp = np.bincount(codes, weights=~g & p)
    fn = np.bincount(codes, weights=g & ~p)
    return float(_f1(tp, fp, fn, 1.0).mean())


def ndcg_at_k(scores: np.ndarray, gains: np.ndarray, queries: Sequence, k: int = 10) -> float:
    scores = np.asarray(scores, dtype=float)
    gains = np.asarray(gains, dtype=float)
    if scores.size == 0:
        return 0.0
    codes = _codes(queries)
    position = np.arange(scores.size)
    # rank inside each query: by query, then score descending, then field order (stable)
    order = np.lexsort((position, -scores, codes))
    ideal = np.lexsort((position, -gains, codes))
    starts = np.searchsorted(codes[order], np.arange(codes.max() + 1))
    rank = np.empty(scores.size, dtype=int)
    rank[order] = position - starts[codes[order]]
    irank = np.empty(scores.size, dtype=int)
    irank[ideal] = position - starts[codes[ideal]]
    discount = lambda r: np.where(r < k, 1.0 / np.log2(r + 2.0), 0.0)  # noqa: E731 - rank 0 -> log2(2)
    dcg = np.bincount(codes, weights=gains * discount(rank))
    idcg = np.bincount(codes, weights=gains * discount(irank))
    return float(np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1), 0.0).mean())


def raw_score(native: float, answered: int, requests: int) -> float:
    return float(native) * answered / requests if requests else 0.0


def skill(raw: float, chance: float) -> float:
    if chance >= 1:
        return 0.0
    return float(np.clip((raw - chance) / (1.0 - chance), 0.0, 1.0))


def area_scores(values: Mapping[int, float], area_of: Mapping[int, str],
                weight: Mapping[int, float]) -> dict[str, float]:
    """Weighted mean of the benchmarks of each area (a missing benchmark counts 0)."""
    out: dict[str, float] = {}
    for area in dict.fromkeys(area_of.values()):
        ids = [b for b, a in area_of.items() if a == area]
        w = np.array([weight.get(b, 1.0) for b in ids])
        v = np.array([values.get(b, 0.0) for b in ids])
        out[area] = float((w * v).sum() / w.sum())
    return out


def public_index(values: Mapping[int, float], area_of: Mapping[int, str], weight: Mapping[int, float],
                 area_weight: Mapping[str, float]) -> dict[str, float]:
    """``index`` (100 x weighted arithmetic mean of areas) and ``breadth`` (weighted geometric)."""
    areas = area_scores(values, area_of, weight)
    w = np.array([area_weight[a] for a in areas])
    v = np.array([areas[a] for a in areas])
    arith = float((w * v).sum() / w.sum())
    geo = 0.0 if (v <= 0).any() else float(np.exp((w * np.log(v)).sum() / w.sum()))
    return {"index": 100.0 * arith, "breadth": 100.0 * geo, "areas": {a: 100.0 * s for a, s in areas.items()}}
