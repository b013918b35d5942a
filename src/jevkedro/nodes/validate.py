"""Validating answers (PROTOCOL §4) and laying a whole view out as arrays for the metrics.

Validity is judged per question, at scoring time, from the raw response saved at inference.
A valid answer is a probability for every candidate: finite numbers in [0, 1] (booleans are not
numbers here) whose sum is within ``SUM_TOLERANCE`` of 1. The raw answer is never changed; only
the copy used by the generic metrics is renormalised.

Decisions recorded here (and tested):

- A choice/score answer must cover exactly the candidate set: a missing or an extra key is
  invalid (wire_protocol Unknown 2: a missing option is *not* read as 0).
- A score answer keyed by level names instead of ``"0".."K-1"`` is accepted when its keys are
  exactly the level names and those names are distinct (zh-decision-bench Unknown 5: this is what
  the upstream adapter does). Mixed keying is invalid.
- ``noul`` is P(true) for every flavour; a ``probabilities`` object over ``true``/``false`` is
  accepted when ``noul`` is absent.
- A choice answer whose ``choice`` names no candidate is invalid; in the list-shaped ``/decide``
  flavour a choice answer must carry ``choice`` (wire_protocol §5: missing or foreign -> invalid).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from jevkedro.protocol import SnapshotRow

SUM_TOLERANCE = 0.01
LIST_FLAVOUR_KEY = "_list_flavour"  # set on answers that came from a list-shaped body
# Statuses of one question at scoring time. ``ok``/``invalid`` exist only for answered questions.
QUESTION_STATUSES = ("ok", "invalid", "unsupported", "unattempted", "error")


def _is_prob(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 1.0


def answers_by_question(response: Any) -> dict[str, Any]:
    """The answers of a System One body, keyed by question id (dict or list-shaped ``/decide``)."""
    if not isinstance(response, Mapping):
        return {}
    answers = response.get("answers")
    if isinstance(answers, Mapping):
        return dict(answers)
    if isinstance(answers, list):
        # the list-shaped /decide flavour: entries matched by id; marked so that validation can
        # apply that flavour's rule (a choice entry must name its choice, see validate_answer)
        return {a["id"]: {**a, LIST_FLAVOUR_KEY: True} for a in answers
                if isinstance(a, Mapping) and isinstance(a.get("id"), str)}
    return {}


def validate_answer(
    qtype: str,
    candidates: list[str],
    answer: Any,
    level_names: list[str] | None = None,
    tolerance: float = SUM_TOLERANCE,
) -> tuple[np.ndarray | None, str | None]:
    """Map one answer onto ``candidates``.

    Returns ``(probabilities normalised to sum 1, None)`` when valid, else ``(None, reason)``.
    """
    if not isinstance(answer, Mapping):
        return None, "no answer for this question"
    declared = answer.get("type")
    if declared is not None and declared != qtype:
        return None, f"answer type {declared!r} for a {qtype} question"
    if qtype == "noul":
        p = answer.get("noul")
        if p is None and isinstance(answer.get("probabilities"), Mapping):
            probs = answer["probabilities"]
            if set(probs) != {"true", "false"}:
                return None, "noul probabilities must be keyed true/false"
            values = [probs[c] for c in candidates]
        else:
            if not _is_prob(p):
                return None, f"noul must be a number in [0, 1], got {p!r}"
            by_key = {"true": float(p), "false": 1.0 - float(p)}
            return np.array([by_key[c] for c in candidates], dtype=float), None
    else:
        if qtype == "choice" and ("choice" in answer or answer.get(LIST_FLAVOUR_KEY)):
            if answer.get("choice") not in candidates:
                return None, f"choice {answer.get('choice')!r} is not one of the options"
        probs = answer.get("probabilities")
        if not isinstance(probs, Mapping):
            return None, "no probabilities object"
        keys = set(probs)
        if keys != set(candidates):
            if (qtype == "score" and level_names and len(set(level_names)) == len(level_names)
                    and keys == set(level_names)):
                probs = {str(i): probs[name] for i, name in enumerate(level_names)}
            else:
                missing = [c for c in candidates if c not in keys]
                extra = sorted(str(k) for k in keys - set(candidates))
                return None, f"candidate keys differ (missing {missing}, extra {extra})"
        values = [probs[c] for c in candidates]
    if not all(_is_prob(v) for v in values):
        return None, f"probabilities must be finite numbers in [0, 1], got {values!r}"
    arr = np.array(values, dtype=float)
    total = float(arr.sum())
    if abs(total - 1.0) > tolerance + 1e-12:
        return None, f"probabilities sum to {total:.6g}, outside 1 ± {tolerance}"
    return arr / total, None


@dataclass
class QuestionTable:
    """Every question of a view as aligned arrays (padded to the widest candidate set).

    ``P``: validated, normalised probabilities (zeros where invalid/absent); ``Y``: target
    distribution (one-hot of the label for hard targets); ``label``: hard label index or -1;
    ``K``: candidate count; ``status``: one of ``QUESTION_STATUSES``; ``slices``: name -> array.
    ``level_order``: ``(N, Kmax)`` column index of score level ``k`` in each row, for views whose
    score candidates are not laid out in level order (keys ``"0".."K-1"`` name the level, so a
    family may keep its source's candidate order, e.g. DecisionBench); None when every score
    question is already in level order.
    """

    request_id: np.ndarray
    question_id: np.ndarray
    qtype: np.ndarray
    K: np.ndarray
    P: np.ndarray
    Y: np.ndarray
    has_target: np.ndarray
    label: np.ndarray
    unscored: np.ndarray
    status: np.ndarray
    reason: list[str | None]
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    level_order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.request_id)

    @property
    def valid(self) -> np.ndarray:
        return self.status == "ok"


def build_question_table(
    rows: Iterable[SnapshotRow],
    predictions: Mapping[str, Mapping[str, Any]],
    tolerance: float = SUM_TOLERANCE,
) -> QuestionTable:
    """Validate every question of a view against its prediction and lay the view out as arrays."""
    rids, qids, qtypes, ks, probs, targets, labels, unscored, statuses, reasons = ([] for _ in range(10))
    has_target: list[bool] = []
    candidate_lists: list[list[str]] = []
    slice_cols: dict[str, list[Any]] = {}
    n = 0
    for row in rows:
        pred = predictions.get(row.request_id)
        req_status = pred.get("status", "unattempted") if pred else "unattempted"
        answers = answers_by_question(pred.get("response")) if pred and req_status == "ok" else {}
        unsupported_q = set(pred.get("unsupported_questions") or ()) if pred else set()
        req_slices = {k: v for k, v in row.slices.items() if k != "questions"}
        q_slices = row.slices.get("questions", {})
        for qid, question in row.request["questions"].items():
            cands = row.candidates[qid]
            target = row.targets[qid]
            if req_status != "ok":
                status, p, why = req_status, None, (pred or {}).get("error")
            elif qid in unsupported_q:
                status, p, why = "unsupported", None, "adapter cannot represent this question"
            else:
                levels = question.get("criteria") if question["type"] == "score" else None
                names = [c if isinstance(c, str) else None for c in levels] if levels else None
                p, why = validate_answer(question["type"], cands, answers.get(qid),
                                         names if names and None not in names else None, tolerance)
                status = "ok" if p is not None else "invalid"
            rids.append(row.request_id)
            candidate_lists.append(cands)
            qids.append(qid)
            qtypes.append(question["type"])
            ks.append(len(cands))
            probs.append(p)
            if target.probabilities is not None:
                y = np.asarray(target.probabilities, dtype=float)
            elif target.label is not None:
                y = np.zeros(len(cands))
                y[target.label] = 1.0
            else:
                y = None
            targets.append(y)
            has_target.append(y is not None and not target.unscored)
            labels.append(-1 if target.label is None or target.unscored else target.label)
            unscored.append(target.unscored)
            statuses.append(status)
            reasons.append(why)
            merged = {"type": question["type"], "question": qid, **req_slices, **q_slices.get(qid, {})}
            for key in merged.keys() - slice_cols.keys():
                slice_cols[key] = [None] * n  # a slice first seen here: earlier questions lack it
            for key, col in slice_cols.items():
                col.append(merged.get(key))
            n += 1
    kmax = max(ks, default=1)
    P = np.zeros((n, kmax))
    Y = np.zeros((n, kmax))
    level_order = None
    for i, qtype in enumerate(qtypes):
        if qtype != "score":
            continue
        keys = candidate_lists[i]
        natural = [str(k) for k in range(len(keys))]
        if keys != natural and sorted(keys) == sorted(natural):  # a permutation of the level keys
            if level_order is None:
                level_order = np.tile(np.arange(kmax, dtype=np.int32), (n, 1))
            level_order[i, : len(keys)] = np.argsort([int(k) for k in keys])
    for i, (p, y) in enumerate(zip(probs, targets)):
        if p is not None:
            P[i, : len(p)] = p
        if y is not None:
            Y[i, : len(y)] = y
    return QuestionTable(
        request_id=np.array(rids, dtype=object),
        question_id=np.array(qids, dtype=object),
        qtype=np.array(qtypes, dtype=object),
        K=np.array(ks, dtype=int),
        P=P,
        Y=Y,
        has_target=np.array(has_target, dtype=bool),
        label=np.array(labels, dtype=int),
        unscored=np.array(unscored, dtype=bool),
        status=np.array(statuses, dtype=object),
        reason=reasons,
        slices={k: np.array([("" if v is None else str(v)) for v in col], dtype=object)
                for k, col in slice_cols.items()},
        level_order=level_order,
    )


def question_records(table: QuestionTable) -> list[dict[str, Any]]:
    """One record per question as scored: its status (``ok``/``invalid``/``unsupported``/
    ``unattempted``/``error``), why it is not ``ok``, the normalised probabilities the generic
    metrics used (None unless ``ok``), the label index and whether the argmax hit it.

    The raw answer stays in the predictions log; this is the per-item view of what was judged.
    """
    pred = np.argmax(table.P, axis=1)
    out = []
    for i in range(len(table)):
        ok = table.status[i] == "ok"
        label = int(table.label[i])
        out.append({
            "request_id": table.request_id[i],
            "question": table.question_id[i],
            "type": table.qtype[i],
            "status": table.status[i],
            "reason": table.reason[i],
            "probabilities": table.P[i, : table.K[i]].round(6).tolist() if ok else None,
            "label": label if label >= 0 else None,
            "correct": (bool(ok and pred[i] == label) if label >= 0 else None),
            **({"unscored": True} if table.unscored[i] else {}),
        })
    return out
