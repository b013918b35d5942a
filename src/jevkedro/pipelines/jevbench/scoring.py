"""JevBench's official per-item scorer and summary (the legacy ``public231`` rules at the pin).

Written from the rules of the release (the family README); no upstream code is reused.

Per item (:func:`score_item`), in this order:

1. **keys**: the answer maps exactly the task's label set (nothing missing, nothing extra);
2. **values**: every value is a real number (a bool is *not* a number here), finite, in [0, 1];
3. **sum**: ``s = sum(p)``; ``strict_valid`` iff ``|s - 1| <= SUM_TOL`` (1e-3); ``valid`` iff
   ``|s - 1| <= RENORM_TOL`` (2e-2). A valid answer outside the strict band is divided by ``s``
   and marked ``renormalized``; a strictly valid one is kept as returned. Outside 2e-2 the answer
   is invalid, never repaired, and counts wrong;
4. **prediction**: argmax over the labels in lexicographic (string) order with strict ``>``, so
   ties go to the smallest label string;
5. **correct**: ``predicted == str(expected)`` (score items: the argmax level, not the rounded
   mean); ``ordinal_ev = sum_k int(k) p_k`` is recorded for score items with the expected level;
   ``expected = None`` gives ``correct = None``.

The summary (:func:`summarize`) follows the release's field names: ``n_planned``,
``n_attempted``, ``n_scorable``, ``n_valid``, ``n_correct``, ``coverage``,
``operational_success``, ``accuracy`` (+ ``_attempted``), ``schema_validity`` (+ ``_strict``),
``majority_class_accuracy``, ``brier_mean``, ``ece`` (10 equal-width bins with its bin table),
``calibration_n``, ``ordinal_mae``, ``macro_accuracy``. Decisions on the spec's unknowns are
documented in the package README and pinned by tests.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M

SUM_TOL = 1e-3  # strict validity band
RENORM_TOL = 2e-2  # headline validity band (rounded answers are rescaled)
ECE_BINS = 10
NOUL_LABELS = ("no", "yes")


# ---------------------------------------------------------------------------------------------
# per item


def _is_number(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def check_distribution(probs: Any, labels: Sequence[str]) -> tuple[dict[str, float] | None, float | None, str | None]:
    """Key and value checks. Returns ``(probs as floats, their sum, None)`` or ``(None, None, reason)``."""
    if not isinstance(probs, Mapping):
        return None, None, "no probability map"
    keys = set(probs)
    if keys != set(labels):
        missing = [lab for lab in labels if lab not in keys]
        extra = sorted(str(k) for k in keys - set(labels))
        return None, None, f"label set differs (missing {missing}, extra {extra})"
    values = {}
    for lab in labels:
        v = probs[lab]
        if not _is_number(v):
            return None, None, f"probability of {lab!r} is not a number: {v!r}"
        v = float(v)
        if not math.isfinite(v) or not 0.0 <= v <= 1.0:
            return None, None, f"probability of {lab!r} is not a finite number in [0, 1]: {v!r}"
        values[lab] = v
    return values, math.fsum(values.values()), None


def argmax_lexicographic(probs: Mapping[str, float]) -> str:
    """The label with the highest probability; ties go to the lexicographically smallest label."""
    best_label, best_p = None, -math.inf
    for lab in sorted(probs):
        if probs[lab] > best_p:  # strict: an equal later label never wins
            best_label, best_p = lab, probs[lab]
    return best_label  # type: ignore[return-value]


def score_item(
    probs: Any,
    labels: Sequence[str],
    qtype: str,
    expected: Any,
    error: str | None = None,
) -> dict[str, Any]:
    """Score one answer (a ``{label: p}`` map, or None after a failure) against one task.

    Returns the release's item fields: ``valid``, ``strict_valid``, ``renormalized``, ``probs``
    (the scored distribution, None when invalid), ``predicted``, ``correct``, ``ordinal_ev``,
    ``expected_level`` (score items), ``sum`` and ``error``.
    """
    out: dict[str, Any] = {"valid": False, "strict_valid": False, "renormalized": False, "probs": None,
                           "predicted": None, "correct": None if expected is None else False,
                           "ordinal_ev": None, "sum": None, "error": error}
    if qtype == "score" and expected is not None:
        out["expected_level"] = int(expected)
    if error is not None or probs is None:
        out["error"] = error or "no answer"
        return out
    values, total, why = check_distribution(probs, labels)
    out["sum"] = total
    if values is None:
        out["error"] = why
        return out
    gap = abs(total - 1.0)
    if gap > RENORM_TOL:
        out["error"] = f"probabilities sum to {total:.6g}, outside 1 ± {RENORM_TOL}"
        return out
    out["valid"] = True
    out["strict_valid"] = gap <= SUM_TOL
    if not out["strict_valid"]:
        values = {k: v / total for k, v in values.items()}
        out["renormalized"] = True
    out["probs"] = values
    out["predicted"] = argmax_lexicographic(values)
    if expected is not None:
        out["correct"] = out["predicted"] == str(expected)
    if qtype == "score":
        out["ordinal_ev"] = math.fsum(int(k) * p for k, p in values.items())
    return out


def score_label(label: Any, labels: Sequence[str], expected: Any) -> dict[str, Any]:
    """A label-only system's answer: right or wrong on the label, no distribution.

    An abstention (``None``) or a label outside the set is ``valid=False`` and wrong (spec
    Unknown 4: we follow the release's newer test, not the older docs' "valid but wrong").
    """
    ok = isinstance(label, str) and label in labels
    return {"valid": ok, "strict_valid": ok, "renormalized": False, "probs": None,
            "predicted": label if ok else None,
            "correct": None if expected is None else (ok and label == str(expected)),
            "ordinal_ev": None, "sum": None,
            "error": None if ok else ("abstained" if label is None else f"label {label!r} not in {list(labels)}")}


def map_answer(qtype: str, answer: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The harness's wire mapping (docs/protocol.md §2): one System One answer -> ``{label: p}``.

    noul: ``noul`` = P(yes) -> ``{"no": 1 - p, "yes": p}`` (a bool or non-number is rejected);
    choice / score: the returned ``probabilities`` as they are (the key check comes later).
    """
    if not isinstance(answer, Mapping):
        return None, "no answer for question 'decision'"
    declared = answer.get("type")
    if declared is not None and declared != qtype:
        return None, f"answer type {declared!r} for a {qtype} task"
    if qtype == "noul":
        p = answer.get("noul")
        if not _is_number(p):
            return None, f"noul must be a number, got {p!r}"
        return {"no": 1.0 - float(p), "yes": float(p)}, None
    probs = answer.get("probabilities")
    if not isinstance(probs, Mapping):
        return None, "no probabilities object"
    return dict(probs), None


# ---------------------------------------------------------------------------------------------
# summaries


def ece_top_label(confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> dict[str, Any]:
    """Release ECE: bin ``min(int(conf * 10), 9)`` of the confidence's nominal value (the shared
    :func:`jevkedro.nodes.metrics.bin_index`), ``ece = sum_b (n_b / N) |acc_b - conf_b|``.

    Returns ``{ece, n, bins: [{lo, hi, n, mean_confidence, accuracy}]}`` with all ``n_bins`` bins
    (empty ones have ``n = 0`` and null means); ``ece`` is None when there are no pairs.
    """
    conf = np.asarray(confidence, dtype=float)
    if not len(conf):
        table = M.ece(np.zeros(1), np.zeros(1), n_bins, return_bins=True)[1]  # the empty bins' edges
        table = [{**b, "n": 0, "confidence": None, "accuracy": None} for b in table]
        value = None
    else:  # the shared equal-width bins: int(conf * 10) by the confidence's nominal value
        value, table = M.ece(conf, np.asarray(correct, dtype=float), n_bins, return_bins=True)
    bins = [{"lo": b["lo"], "hi": b["hi"], "n": b["n"], "mean_confidence": b["confidence"], "accuracy": b["accuracy"]}
            for b in table]
    return {"ece": value, "n": int(len(conf)), "bins": bins}


def brier_item(probs: Mapping[str, float], labels: Sequence[str], expected: Any) -> float:
    """``sum_k (p_k - y_k)^2`` over the label set, ``y`` one-hot on ``str(expected)`` (range [0, 2])."""
    p = np.array([probs[lab] for lab in labels], dtype=float)
    y = np.array([lab == str(expected) for lab in labels], dtype=float)
    return float(((p - y) ** 2).sum())


def total_variation(probs: Mapping[str, float], gold: Mapping[str, float], labels: Sequence[str]) -> float:
    """``TV(p, g) = 1/2 sum_k |p_k - g_k|`` over the label set (a label absent from ``gold`` has 0)."""
    p = np.array([probs[lab] for lab in labels], dtype=float)
    g = np.array([float(gold.get(lab, 0.0)) for lab in labels], dtype=float)
    return float(0.5 * np.abs(p - g).sum())


def percentile(values: np.ndarray, q: float) -> float | None:
    """Linear-interpolation percentile (``q`` in [0, 100]); None for no values."""
    return float(np.percentile(values, q)) if len(values) else None


@dataclass
class ItemTable:
    """The scored items of a run as aligned arrays (one entry per planned task).

    ``attempted``: a prediction record exists with a status other than ``unattempted``;
    ``scorable``: ``expected`` is not null and the task has no ``exclude_reason``;
    ``correct``: False where not scorable; ``conf``/``brier``/``abs_err``/``tvd``: NaN where the
    item does not contribute (invalid, not scorable, not a score item, no gold distribution).
    """

    task_id: np.ndarray
    tier: np.ndarray
    family: np.ndarray
    qtype: np.ndarray
    split: np.ndarray
    group: np.ndarray
    expected: np.ndarray  # str(expected) or ""
    predicted: np.ndarray  # label or ""
    attempted: np.ndarray
    ok: np.ndarray  # a response came back (status ok)
    scorable: np.ndarray
    valid: np.ndarray
    strict_valid: np.ndarray
    renormalized: np.ndarray
    correct: np.ndarray
    conf: np.ndarray
    brier: np.ndarray
    abs_err: np.ndarray
    tvd: np.ndarray

    def __len__(self) -> int:
        return len(self.task_id)

    @classmethod
    def from_items(cls, items: Sequence[Mapping[str, Any]]) -> ItemTable:
        def col(key: str, dtype: Any = object, default: Any = None) -> np.ndarray:
            return np.array([it.get(key, default) for it in items], dtype=dtype)

        def num(key: str) -> np.ndarray:
            return np.array([np.nan if it.get(key) is None else float(it[key]) for it in items], dtype=float)

        return cls(
            task_id=col("task_id"), tier=col("tier"), family=col("family"), qtype=col("type"),
            split=col("split"), group=np.array([it.get("group") or "" for it in items], dtype=object),
            expected=np.array(["" if it.get("expected") is None else str(it["expected"]) for it in items], dtype=object),
            predicted=np.array([it.get("predicted") or "" for it in items], dtype=object),
            attempted=col("attempted", bool, False), ok=col("ok", bool, False),
            scorable=col("scorable", bool, False), valid=col("valid", bool, False),
            strict_valid=col("strict_valid", bool, False), renormalized=col("renormalized", bool, False),
            correct=np.array([bool(it.get("correct")) for it in items], dtype=bool),
            conf=num("confidence"), brier=num("brier"), abs_err=num("ordinal_abs_error"), tvd=num("tvd_gold"),
        )

    def subset(self, mask: np.ndarray) -> ItemTable:
        return ItemTable(**{k: v[mask] for k, v in self.__dict__.items()})


def _ratio(num: int | float, den: int | float) -> float | None:
    return float(num) / float(den) if den else None


def _nanmean(x: np.ndarray) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.mean()) if len(x) else None


def majority_class_accuracy(expected: np.ndarray) -> dict[str, Any]:
    """Baseline: the share of scorable items whose gold equals the group's most frequent gold.

    Ties between equally frequent gold values go to the lexicographically smallest one. This is
    what always answering the majority class would score; it does not depend on the model.
    """
    if not len(expected):
        return {"accuracy": None, "label": None}
    counts = Counter(expected.tolist())
    top = max(counts.values())
    label = min(k for k, c in counts.items() if c == top)
    return {"accuracy": top / len(expected), "label": label}


def summarize(t: ItemTable) -> dict[str, Any]:
    """The release's summary of one group of items.

    - ``accuracy = n_correct / n_scorable``: every scorable planned task is in the denominator,
      so an unattempted, failed, unsupported or invalid task counts wrong (README, Unknown 2);
      ``accuracy_attempted = n_correct / n_scorable_attempted`` is the same over the tasks that have
      a record (the two agree on a complete run);
    - ``schema_validity = n_valid / n_attempted`` (``_strict`` likewise with the 1e-3 band);
    - Brier, ECE and ordinal MAE: only valid scorable items (an invalid item has no
      distribution, README, Unknown 3); ordinal MAE ``|ordinal_ev - expected|`` on score items.
    """
    scorable = t.scorable
    n_attempted = int(t.attempted.sum())
    use = t.valid & scorable
    ece = ece_top_label(t.conf[use], t.correct[use])
    fam_acc = [
        float(t.correct[scorable & (t.family == f)].mean())
        for f in sorted(set(t.family[scorable].tolist()))
    ]
    majority = majority_class_accuracy(t.expected[scorable])
    return {
        "n_planned": int(len(t)),
        "n_attempted": n_attempted,
        "n_scorable": int(scorable.sum()),
        "n_valid": int(t.valid.sum()),
        "n_strict_valid": int(t.strict_valid.sum()),
        "n_renormalized": int(t.renormalized.sum()),
        "n_correct": int((t.correct & scorable).sum()),
        "coverage": _ratio(n_attempted, len(t)),
        "operational_success": _ratio(int(t.ok.sum()), n_attempted),
        "accuracy": _ratio(int((t.correct & scorable).sum()), int(scorable.sum())),
        "n_scorable_attempted": int((scorable & t.attempted).sum()),
        "accuracy_attempted": _ratio(int((t.correct & scorable).sum()), int((scorable & t.attempted).sum())),
        "schema_validity": _ratio(int(t.valid.sum()), n_attempted),
        "schema_validity_strict": _ratio(int(t.strict_valid.sum()), n_attempted),
        "majority_class_accuracy": majority["accuracy"],
        "majority_class": majority["label"],
        "brier_mean": _nanmean(t.brier[use]),
        "ece": ece,
        "calibration_n": ece["n"],
        "ordinal_mae": _nanmean(t.abs_err[use & (t.qtype == "score")]),
        "ordinal_n": int((use & (t.qtype == "score")).sum()),
        "macro_accuracy": float(np.mean(fam_acc)) if fam_acc else None,
        "macro_accuracy_families": len(fam_acc),
    }


def by_group(t: ItemTable, column: str) -> dict[str, dict[str, Any]]:
    values = getattr(t, column)
    return {str(v): summarize(t.subset(values == v)) for v in sorted(set(values.tolist())) if v != ""}


def paraphrase_agreement(t: ItemTable) -> dict[str, Any]:
    """Consistency over paraphrase groups of exactly two tasks.

    ``agreement = agree / both_valid`` (both valid and the same predicted label), as the release;
    ``agreement_all_pairs = agree / pairs`` (the same-answer rate over every pair) and
    ``both_correct_rate_all_pairs = both correct / pairs``. ``pair_table`` lists every pair.
    """
    members: dict[str, list[int]] = {}
    for i, g in enumerate(t.group.tolist()):
        if g:
            members.setdefault(g, []).append(i)
    pairs = [(g, ix) for g, ix in members.items() if len(ix) == 2]
    table = []
    for g, (a, b) in pairs:
        both_valid = bool(t.valid[a] and t.valid[b])
        table.append({
            "group": g, "tasks": [t.task_id[a], t.task_id[b]],
            "predicted": [t.predicted[a] or None, t.predicted[b] or None],
            "expected": [t.expected[a] or None, t.expected[b] or None],
            "both_valid": both_valid,
            "agree": both_valid and t.predicted[a] == t.predicted[b],
            "both_correct": bool(t.correct[a] and t.correct[b] and t.scorable[a] and t.scorable[b]),
        })
    n = len(table)
    both_valid = sum(r["both_valid"] for r in table)
    agree = sum(r["agree"] for r in table)
    both_correct = sum(r["both_correct"] for r in table)
    return {"pairs": n, "both_valid": both_valid, "agree": agree, "both_correct": both_correct,
            "agreement": _ratio(agree, both_valid), "agreement_all_pairs": _ratio(agree, n),
            "both_correct_rate_all_pairs": _ratio(both_correct, n), "pair_table": table}


def chance_corrected(accuracy: float | None, chance: float | None) -> dict[str, Any]:
    """``(accuracy - chance) / (1 - chance)``, raw and clipped at 0 as the v1.3 tier axis."""
    if accuracy is None or chance is None or chance >= 1:
        return {"accuracy": accuracy, "chance": chance, "chance_corrected": None, "chance_corrected_raw": None}
    raw = (accuracy - chance) / (1.0 - chance)
    return {"accuracy": accuracy, "chance": chance, "chance_corrected": max(0.0, raw), "chance_corrected_raw": raw}


def uniform_chance(label_counts: Iterable[int]) -> float | None:
    """Expected accuracy of a uniform random guess: ``mean_i 1 / K_i`` over scorable items."""
    k = np.asarray(list(label_counts), dtype=float)
    return float((1.0 / k).mean()) if len(k) else None


def chance_from_option_counts(histogram: Mapping[Any, int]) -> float | None:
    """Uniform-guess chance from an option-count histogram ``{K: items}``: ``sum_K (n_K / K) / sum_K n_K``.

    This is how the release states its v1.3 tier baselines (over every frozen item, public and
    held out) without publishing the held-out items.
    """
    total = sum(int(n) for n in histogram.values())
    return sum(int(n) / int(k) for k, n in histogram.items()) / total if total else None


def calibration_axis(ece: float | None, mean_tvd: float | None) -> dict[str, Any]:
    """The v1.3 calibration axis (0-100) from a tier's 10-bin ECE and mean TV distance to ``gold_probs``.

    ``ece_term = max(0, 100 (1 - ece / 0.5))`` (ECE 0.5 or worse scores 0), ``tvd_term = 100 (1 - tvd)``,
    ``axis`` = their mean, or ``ece_term`` alone without gold distributions; None without an ECE
    (no distribution, e.g. a label-only system).
    """
    ece_term = None if ece is None else max(0.0, 100.0 * (1.0 - ece / 0.5))
    tvd_term = None if mean_tvd is None else 100.0 * (1.0 - mean_tvd)
    if ece_term is None:
        axis = None
    else:
        axis = ece_term if tvd_term is None else (ece_term + tvd_term) / 2.0
    return {"ece_term": ece_term, "tvd_term": tvd_term, "axis": axis}


def latency(latencies: Sequence[float | None], first: Sequence[bool]) -> dict[str, Any]:
    """p50/p95 (linear interpolation) over timed requests, the first request reported apart.

    Under a distributed run every worker marks its own first request: all of them are left out of
    the percentiles (``first_n``), ``first_s`` is the first of them in plan order.
    """
    lat = np.array([np.nan if x is None else float(x) for x in latencies], dtype=float)
    is_first = np.asarray(first, dtype=bool)
    timed = ~np.isnan(lat)
    rest = lat[timed & ~is_first]
    first_s = lat[timed & is_first]
    return {"unit": "s", "network_included": True, "n": int(len(rest)),
            "first_s": float(first_s[0]) if len(first_s) else None, "first_n": int(len(first_s)),
            "p50_s": percentile(rest, 50), "p95_s": percentile(rest, 95),
            "mean_s": float(rest.mean()) if len(rest) else None}
