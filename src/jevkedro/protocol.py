"""The request and target model shared by every family (docs/protocol.md §1).

A *request* is exactly what a model may see: a state and typed questions (plus media references).
A *target* is what the scorer compares answers with. They are kept in separate snapshot columns,
so gold answers cannot leak into an inference input by construction.

Question types and their candidate keys, in order:

- ``noul``   -- ``"true"``, ``"false"`` (or the source's fixed order, e.g. ``false, true``)
- ``choice`` -- the option ids, in source order
- ``score``  -- ``"0"`` ... ``"K-1"`` (criteria list position, low to high)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

QUESTION_TYPES = ("noul", "choice", "score")
REQUEST_FIELDS = frozenset({"state", "questions", "media"})  # everything a request may hold
QUESTION_FIELDS = frozenset({"type", "instructions", "criteria"})  # everything a wire question may hold
NOUL_ORDER_TRUE_FIRST = ("true", "false")
NOUL_ORDER_FALSE_FIRST = ("false", "true")

# Fields that must never appear inside a request: gold, rationale, ids and provenance.
FORBIDDEN_REQUEST_KEYS = frozenset(
    {"gold", "label", "labels", "answer", "answers", "rationale", "reasoning", "notes",
     "id", "item_id", "source", "provenance", "difficulty", "version", "meta", "target"}
)

# What a snapshot's data is: the upstream release, or data written by us (never benchmark data).
DataKind = Literal["official", "sample", "synthetic"]
DATA_KINDS: tuple[str, ...] = get_args(DataKind)
OWN_DATA_KINDS = ("sample", "synthetic")


# The explicit abstain option of JevAlt-style servers (docs/protocol.md §2): appended last to choice
# and score questions of rows that allow abstention, with these descriptions (by language).
ABSTAIN_OPTION = "unknown"
ABSTAIN_OPTION_TEXTS = {
    "en": "The state does not contain enough information to decide.",
    "tr": "Durum, karar vermek için yeterli bilgi içermiyor.",
    "de": "Der Zustand enthält nicht genug Informationen für eine Entscheidung.",
}


def offers_abstain_option(request: dict[str, Any]) -> bool:
    """Whether a request offers the explicit abstain option: a choice question with the option
    ``unknown``, or a score question whose last level is one of ``ABSTAIN_OPTION_TEXTS``."""
    texts = set(ABSTAIN_OPTION_TEXTS.values())
    for q in (request.get("questions") or {}).values():
        if not isinstance(q, dict):
            continue
        criteria = q.get("criteria")
        if q.get("type") == "choice" and isinstance(criteria, dict) and ABSTAIN_OPTION in criteria:
            return True
        if q.get("type") == "score" and isinstance(criteria, list) and criteria and criteria[-1] in texts:
            return True
    return False


def level_names_of(question: dict[str, Any]) -> list[str] | None:
    """The level names a score answer may be keyed by (every level a string), else None."""
    levels = question.get("criteria") if question.get("type") == "score" else None
    if not levels or not isinstance(levels, list) or not all(isinstance(c, str) for c in levels):
        return None
    return list(levels)


class ProtocolError(ValueError):
    """A request or target that breaks the protocol's shape rules."""


def candidates_for(question: dict[str, Any], noul_order: tuple[str, str] = NOUL_ORDER_TRUE_FIRST) -> list[str]:
    """Candidate keys of one wire question, in candidate order (docs/protocol.md §1)."""
    qtype = question.get("type")
    criteria = question.get("criteria")
    if qtype == "noul":
        return list(noul_order)
    if qtype == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise ProtocolError("a choice question needs criteria: an object option id -> description")
        return [str(k) for k in criteria]
    if qtype == "score":
        if not isinstance(criteria, list) or len(criteria) < 2:
            raise ProtocolError("a score question needs criteria: a list of at least two levels")
        return [str(i) for i in range(len(criteria))]
    raise ProtocolError(f"unknown question type {qtype!r}; expected one of {QUESTION_TYPES}")


@dataclass(frozen=True)
class Target:
    """What one question is scored against.

    ``label`` is the index of the hard label in candidate order (None when the source has none);
    ``probabilities`` the soft target distribution in candidate order (None when hard only);
    ``unscored`` marks diagnostic questions that count in no metric.
    """

    label: int | None = None
    probabilities: tuple[float, ...] | None = None
    unscored: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.unscored:
            out["unscored"] = True
        if self.label is not None:
            out["label"] = self.label
        if self.probabilities is not None:
            out["probabilities"] = list(self.probabilities)
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class SnapshotRow:
    """One shared request with its questions, targets, slices and provenance.

    - ``request``: ``{"state": ..., "questions": {qid: {type, instructions, criteria}}}`` and
      optionally ``media``; exactly what may reach a model.
    - ``candidates``: per question, candidate keys in candidate order.
    - ``targets``: per question, a :class:`Target`.
    - ``slices``: per-request slice values (domain, difficulty, language, ...), plus
      ``questions``: per-question slice values (e.g. ``task``).
    - ``source``: provenance (source id, file, line, notes); never sent to a model.
    """

    request_id: str
    request: dict[str, Any]
    candidates: dict[str, list[str]]
    targets: dict[str, Target]
    slices: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raise :class:`ProtocolError` when the row breaks a shape rule (:func:`check_row`)."""
        check_row(self.request_id, self.request, self.candidates, self.targets)


def check_row(request_id: str, request: dict[str, Any], candidates: dict[str, list[str]],
              targets: dict[str, Target]) -> None:
    """Raise :class:`ProtocolError` when a row's parts break a shape rule: the one row check, of a
    :class:`SnapshotRow` and of the cells the snapshot reader decodes (before any row is built)."""
    questions = request.get("questions")
    if "state" not in request or not isinstance(questions, dict) or not questions:
        raise ProtocolError(f"{request_id}: a request needs a state and at least one question")
    if not REQUEST_FIELDS.issuperset(request):
        raise ProtocolError(f"{request_id}: request has fields beyond state/questions/media: "
                            f"{sorted(set(request) - REQUEST_FIELDS)}")
    for qid, q in questions.items():
        if not QUESTION_FIELDS.issuperset(q):  # the question fields and the forbidden keys are disjoint
            if not FORBIDDEN_REQUEST_KEYS.isdisjoint(q):
                raise ProtocolError(f"{request_id}/{qid}: question carries {sorted(FORBIDDEN_REQUEST_KEYS & set(q))}")
            raise ProtocolError(f"{request_id}/{qid}: question fields beyond type/instructions/criteria")
        if qid not in candidates or qid not in targets:
            raise ProtocolError(f"{request_id}/{qid}: no candidates or target")
        t = targets[qid]
        k = len(candidates[qid])
        if t.label is not None and not 0 <= t.label < k:
            raise ProtocolError(f"{request_id}/{qid}: label index {t.label} outside {k} candidates")
        if t.probabilities is not None and len(t.probabilities) != k:
            raise ProtocolError(f"{request_id}/{qid}: target distribution length != {k}")


# dumps(obj): compact, deterministic JSON for TSV cells (no raw tabs or newlines, non-ASCII kept),
# json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False) with one encoder.
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
