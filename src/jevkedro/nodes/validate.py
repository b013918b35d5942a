"""Validating answers (docs/protocol.md §3) and laying a whole view out as arrays for the metrics.

Validity is judged per question, at scoring time, from the raw response saved at inference.
A valid answer is a probability for every candidate: finite numbers in [0, 1] (booleans are not
numbers here) whose sum is within ``SUM_TOLERANCE`` of 1. The raw answer is never changed; only
the copy used by the generic metrics is renormalised.

The rules live here once, in plain Python over the decoded records: :func:`answer_probabilities`
(one answer) and :func:`judge_request` (every question of one request: its status, the request's
unsupported questions and repeated keys).
:func:`build_question_table` applies them to every record of a view, in the records' order, and
assembles the arrays the metrics read; :class:`QuestionRecords` is what ``questions.jsonl`` holds.

Decisions recorded here (and tested):

- A choice/score answer must cover exactly the candidate set: a missing or an extra key is
  invalid (docs/protocol.md §3: a missing option is *not* read as 0).
- A score answer keyed by level names instead of ``"0".."K-1"`` is accepted when its keys are
  exactly the level names and those names are distinct (zh-decision-bench Unknown 5: this is what
  the upstream adapter does). Mixed keying is invalid.
- ``noul`` is P(true) for every flavour; a ``probabilities`` object over ``true``/``false`` is
  accepted when ``noul`` is absent.
- A choice answer whose ``choice`` names no candidate is invalid; in the list-shaped ``/decide``
  flavour a choice answer must carry ``choice`` (docs/protocol.md §2: missing or foreign -> invalid).
- A list-shaped body that answers one question id in several entries answers it ambiguously:
  invalid (no entry silently wins).
- A key repeated inside the response body (found where the body was parsed, carried in the
  record's ``meta.duplicate_keys``, see :mod:`jevkedro.nodes.jsonparse`) makes the answers it
  touches invalid: the question under ``answers/<id>``, or every question of the request when the
  repeat is elsewhere (a repeated ``answers``, ``model``, ...).
- Numbers are judged exactly: an integer too large for a float is not a probability (it never
  reaches a float conversion), and reasons quote at most ``REASON_VALUE_CHARS`` characters of
  the offending values.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, NamedTuple, TypeGuard

import msgspec
import numpy as np

from jevkedro.nodes.jsonparse import describe_path, dumps_utf8
from jevkedro.nodes.layout import question_layout
from jevkedro.protocol import SnapshotRow, level_names_of

SUM_TOLERANCE = 0.01
# A sum this close to 1 is 1 up to floating-point rounding: the answer is used as given. Dividing by
# 0.9999999999999999 would turn 0.8 into 0.8000000000000002 (and 1.0000000000000002 into
# 0.7999999999999998), moving a confidence across a calibration bin edge it sits on.
EXACT_SUM_TOLERANCE = 1e-12


def renormalising_divisor(total: float) -> float:
    """What an answer is divided by for the generic metrics: its sum, or 1 when the sum is
    already 1 within :data:`EXACT_SUM_TOLERANCE` (so exact answers stay exact)."""
    return 1.0 if abs(total - 1.0) <= EXACT_SUM_TOLERANCE else total


# Statuses of one question at scoring time. ``ok``/``invalid`` exist only for answered questions.
QUESTION_STATUSES = ("ok", "invalid", "unsupported", "unattempted", "error")
NO_ANSWER = "no answer for this question"
UNSUPPORTED_QUESTION = "adapter cannot represent this question"
REASON_VALUE_CHARS = 200

Verdict = tuple[str, "list[float] | None", Any]  # (status, normalised probabilities or None, reason)


def _is_mapping(x: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(x, Mapping)``, a plain dict (what decoded records hold) answered first: the
    abstract-class check costs several times more, and it is asked of every answer."""
    return x.__class__ is dict or isinstance(x, Mapping)


def _is_prob(x: Any) -> bool:
    if x.__class__ is float:  # the common case; NaN and infinities fail the range
        return 0.0 <= x <= 1.0
    if isinstance(x, bool) or not isinstance(x, Real):
        return False
    if isinstance(x, int):  # exact: a 400-digit integer never meets a float conversion
        return 0 <= x <= 1
    return math.isfinite(x) and 0.0 <= float(x) <= 1.0


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= REASON_VALUE_CHARS else text[:REASON_VALUE_CHARS] + f"… ({len(text)} characters)"


# The kind of each reason the rules below give, by how its text starts (the report counts
# invalid answers per kind: ``coverage.invalid_by_reason``).
REASON_KINDS = (
    (NO_ANSWER, "no answer"),
    ("the list-shaped body answers this question in", "answered in several list entries"),
    ("the response repeats the key", "repeated key in the response"),
    ("answer type ", "answer of another type"),
    ("noul probabilities must be keyed", "noul probabilities not keyed true/false"),
    ("noul must be a number", "noul not a number in [0, 1]"),
    ("choice ", "choice names no option"),
    ("no probabilities object", "no probabilities object"),
    ("candidate keys differ", "candidate keys differ"),
    ("probabilities must be finite numbers", "probability not a finite number in [0, 1]"),
    ("probabilities sum to", "probabilities sum outside 1 ± tolerance"),
)


def reason_kind(reason: Any) -> str:
    """The kind of an ``invalid`` reason (see ``REASON_KINDS``); ``other`` for any other text."""
    if isinstance(reason, str):
        for prefix, kind in REASON_KINDS:
            if reason.startswith(prefix):
                return kind
    return "other"


class AnswersByQuestion(dict[str, Any]):
    """The answers of one body keyed by question id, as the model wrote them. ``entries``: for a
    list-shaped body, how many of its entries name each id (None for a dict-shaped body). Kept
    beside the answers, never inside them: a key in an answer is the model's, so nothing a model
    writes can pass for what this module derived."""

    entries: Counter[str] | None = None

    def list_entries(self, qid: str) -> int:
        """How many entries of a list-shaped body answer ``qid`` (0 for a dict-shaped body)."""
        return self.entries[qid] if self.entries is not None else 0


def answers_by_question(response: Any) -> AnswersByQuestion:
    """The answers of a System One body, keyed by question id (dict or list-shaped ``/decide``)."""
    out = AnswersByQuestion()
    answers = response.get("answers") if _is_mapping(response) else None
    if _is_mapping(answers):
        out.update(answers)
    elif isinstance(answers, list):
        # the list-shaped /decide flavour: entries matched by id (the last of repeated ones; the
        # counts let validation reject an id answered twice and require each choice entry's choice)
        entries = [a for a in answers if _is_mapping(a) and isinstance(a.get("id"), str)]
        out.update((a["id"], a) for a in entries)
        out.entries = Counter(a["id"] for a in entries)
    return out


def sum_as_numpy(values: Sequence[float]) -> float:
    """``float(np.array(values).sum())`` in Python floats, in numpy's order of additions: from 0.0,
    sequentially below 8 values; from 8, numpy's pairwise sum (:func:`_pairwise`). An answer's sum
    decides whether it is valid and what it is divided by, so it must be numpy's to the last bit."""
    if len(values) < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    return 0.0 + _pairwise(values, 0, len(values))


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    """numpy's pairwise sum of ``a[lo:lo+n]`` (``n`` >= 8): blocks of up to 128 values summed in 8
    accumulators, combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), the remainder added after; a
    longer run is split in two at a multiple of 8 below its half."""
    if n < 8:
        res = -0.0
        for v in a[lo: lo + n]:
            res += v
        return res
    if n <= 128:
        r = list(a[lo: lo + 8])
        end = lo + n - n % 8
        for i in range(lo + 8, end, 8):
            for j in range(8):
                r[j] += a[i + j]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in a[end: lo + n]:
            res += v
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(a, lo, half) + _pairwise(a, lo + half, n - half)


def answer_probabilities(
    qtype: str,
    candidates: list[str],
    answer: Any,
    level_names: list[str] | None = None,
    tolerance: float = SUM_TOLERANCE,
    list_entries: int = 0,
) -> tuple[list[float] | None, str | None]:
    """The rules for one answer: map it onto ``candidates``. ``list_entries``: how many entries of
    a list-shaped body answer this question (0: the body is dict-shaped; see
    :meth:`AnswersByQuestion.list_entries`).

    Returns ``(probabilities normalised to sum 1, None)`` when valid, else ``(None, reason)``;
    the probabilities are Python floats, in candidate order.
    """
    if not _is_mapping(answer):
        return None, NO_ANSWER
    if list_entries > 1:
        return None, f"the list-shaped body answers this question in {list_entries} entries"
    declared = answer.get("type")
    if declared is not None and declared != qtype:
        return None, f"answer type {_short_repr(declared)} for a {qtype} question"
    if qtype == "noul":
        p = answer.get("noul")
        if p is None and _is_mapping(answer.get("probabilities")):
            probs = answer["probabilities"]
            if set(probs) != {"true", "false"}:
                return None, "noul probabilities must be keyed true/false"
            values = [probs[c] for c in candidates]
        else:
            if not _is_prob(p):
                return None, f"noul must be a number in [0, 1], got {_short_repr(p)}"
            by_key = {"true": float(p), "false": 1.0 - float(p)}  # type: ignore[arg-type]  # _is_prob: a real number
            return [by_key[c] for c in candidates], None
    else:
        if qtype == "choice" and ("choice" in answer or list_entries):
            if answer.get("choice") not in candidates:
                return None, f"choice {_short_repr(answer.get('choice'))} is not one of the options"
        probs = answer.get("probabilities")
        if not _is_mapping(probs):
            return None, "no probabilities object"
        keys = set(probs)
        if keys != set(candidates):
            if (qtype == "score" and level_names and len(set(level_names)) == len(level_names)
                    and keys == set(level_names)):
                probs = {str(i): probs[name] for i, name in enumerate(level_names)}
            else:
                missing = [c for c in candidates if c not in keys]
                extra = sorted(str(k) for k in keys - set(candidates))
                return None, _short_repr_keys(missing, extra)
        values = [probs[c] for c in candidates]
    if not all(map(_is_prob, values)):
        return None, f"probabilities must be finite numbers in [0, 1], got {_short_repr(values)}"
    floats = [v if v.__class__ is float else float(v) for v in values]
    total = sum_as_numpy(floats)
    if abs(total - 1.0) > tolerance + 1e-12:
        return None, f"probabilities sum to {total:.6g}, outside 1 ± {tolerance}"
    divisor = renormalising_divisor(total)
    return (floats if divisor == 1.0 else [v / divisor for v in floats]), None


def _short_repr_keys(missing: list[str], extra: list[str]) -> str:
    text = f"candidate keys differ (missing {missing}, extra {extra})"
    return text if len(text) <= 2 * REASON_VALUE_CHARS else text[: 2 * REASON_VALUE_CHARS] + "…)"


def duplicate_keys_of(record: Mapping[str, Any]) -> list[list[Any]]:
    """The repeated keys the parser found in a record's response body (``meta.duplicate_keys``)."""
    meta = record.get("meta")
    paths = meta.get("duplicate_keys") if _is_mapping(meta) else None
    if not isinstance(paths, list):
        return []
    return [p for p in paths if isinstance(p, list) and p]


def repeated_key_reasons(paths: list[list[Any]], response: Any, question_ids: Iterable[str]) -> dict[str, str]:
    """Question id -> why its answer is invalid, for the repeated keys of one body.

    A repeat under ``answers/<id>`` (or, in a list-shaped body, under the entry whose ``id`` is
    ``<id>``) touches that question; a repeat anywhere else touches every question.
    """
    qids = list(question_ids)
    out: dict[str, str] = {}
    answers = response.get("answers") if _is_mapping(response) else None
    for path in paths:
        touched = qids
        if len(path) >= 2 and path[0] == "answers":
            ref = path[1]
            if isinstance(ref, int) and isinstance(answers, list) and 0 <= ref < len(answers):
                entry = answers[ref]
                ref = entry.get("id") if _is_mapping(entry) else None
            touched = [ref] if ref in qids else []
        reason = (f"the response repeats the key {_short_repr(path[-1])} at {describe_path(tuple(path[:-1]))}; "
                  "a repeated key is ambiguous")
        for qid in touched:
            out.setdefault(qid, reason)
    return out


class Question(NamedTuple):
    """What the rules read of one question: its id, type, candidate keys in candidate order and
    the level names a score answer may be keyed by (:func:`~jevkedro.protocol.level_names_of`)."""

    id: str
    type: str
    candidates: list[str]
    level_names: list[str] | None


def row_questions(row: SnapshotRow) -> list[Question]:
    """The questions of one snapshot row, in its question order."""
    return [Question(qid, q["type"], row.candidates[qid], level_names_of(q)) for qid, q in row.request["questions"].items()]


def judge_request(questions: Sequence[Question], record: Mapping[str, Any] | None,
                  tolerance: float = SUM_TOLERANCE) -> list[Verdict]:
    """The verdict of every question of one request, in question order.

    A request that was not answered (``unsupported``/``error``/``unattempted``, or no record:
    ``unattempted``) gives its status to every question, with the record's ``error`` as reason.
    """
    status = record.get("status", "unattempted") if record else "unattempted"
    if status != "ok":
        why = record.get("error") if record else None
        return [(status, None, why)] * len(questions)
    assert record is not None  # status "ok" comes only from a record
    response = record.get("response")
    answers = answers_by_question(response)
    unsupported = set(record.get("unsupported_questions") or ())
    paths = duplicate_keys_of(record)
    repeated = repeated_key_reasons(paths, response, [q.id for q in questions]) if paths else {}
    out: list[Verdict] = []
    for q in questions:
        if q.id in unsupported:
            out.append(("unsupported", None, UNSUPPORTED_QUESTION))
        elif q.id in repeated:
            out.append(("invalid", None, repeated[q.id]))
        else:
            p, why = answer_probabilities(q.type, q.candidates, answers.get(q.id), q.level_names, tolerance,
                                          answers.list_entries(q.id))
            out.append(("ok" if p is not None else "invalid", p, why))
    return out


@dataclass
class RequestColumns:
    """Request-level fields of every record judged, in the records' order, for the report: status,
    latency, first-request flag, cost, resolved model and failure kind. ``unattempted``: the
    view's requests without an attempted record (none, or status ``unattempted``)."""

    status: list[Any] = field(default_factory=list)
    latency_s: list[Any] = field(default_factory=list)
    first: list[Any] = field(default_factory=list)
    cost_usd: list[Any] = field(default_factory=list)
    model: list[Any] = field(default_factory=list)
    failure: list[Any] = field(default_factory=list)
    requests: int = 0  # the view's requests
    attempted: int = 0  # of those, how many have an attempted record

    @property
    def unattempted(self) -> int:
        return self.requests - self.attempted

    def columns(self) -> tuple[list[Any], ...]:
        return self.status, self.latency_s, self.first, self.cost_usd, self.model, self.failure

    def add(self, record: Any, in_view: bool) -> None:
        """One record's fields (``in_view``: its request is one of the view's)."""
        rec = record if _is_mapping(record) else {}
        status = rec.get("status")
        self.status.append(status)
        self.latency_s.append(rec.get("latency_s"))
        self.first.append(rec.get("first"))
        self.cost_usd.append(rec.get("cost_usd"))
        self.model.append(rec.get("model"))
        self.failure.append(rec.get("failure"))
        if in_view and status is not None and status != "unattempted":
            self.attempted += 1

    @classmethod
    def of(cls, records: Mapping[str, Mapping[str, Any]], request_ids: Iterable[str]) -> RequestColumns:
        """The columns of ``records`` for a view of ``request_ids``."""
        known = set(request_ids)
        cols = cls(requests=len(known))
        for rid, rec in records.items():
            cols.add(rec, rid in known)
        return cols


@dataclass
class QuestionTable:
    """Every question of a view as aligned arrays (padded to the widest candidate set).

    ``P``: validated, normalised probabilities (zeros where invalid/absent); ``Y``: target
    distribution (one-hot of the label for hard targets); ``label``: hard label index or -1;
    ``K``: candidate count; ``status``: one of ``QUESTION_STATUSES``; ``slices``: name -> array.
    ``level_order``: ``(N, Kmax)`` column index of score level ``k`` in each row, for views whose
    score candidates are not laid out in level order (keys ``"0".."K-1"`` name the level, so a
    family may keep its source's candidate order, e.g. DecisionBench); None when every score
    question is already in level order. ``slice_codes``: the same slices as integer codes into
    sorted values (:class:`jevkedro.nodes.layout.SliceColumn`), for grouping without sorting
    strings; ``requests``: the request-level fields of the records judged (:class:`RequestColumns`,
    for the report). Both are absent from tables built by hand.
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
    reason: list[Any]
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    level_order: np.ndarray | None = None
    slice_codes: dict[str, Any] = field(default_factory=dict)
    requests: RequestColumns | None = None

    def __len__(self) -> int:
        return len(self.request_id)

    @property
    def valid(self) -> np.ndarray:
        """``status == "ok"``, computed once per status array (asked for by every metric and
        group of a report)."""
        cached = self.__dict__.get("_valid")
        if cached is None or cached[0] is not self.status:
            mask = self.status == "ok"
            mask.flags.writeable = False
            cached = self.__dict__["_valid"] = (self.status, mask)
        return cached[1]


def build_question_table(
    snapshot: Any,
    records: Mapping[str, Mapping[str, Any]],
    tolerance: float = SUM_TOLERANCE,
) -> QuestionTable:
    """Judge every question of a view against its record and lay the view out as arrays.

    ``snapshot``: a :class:`~jevkedro.nodes.snapshot.Snapshot` (its layout is reused) or a
    sequence of rows; ``records``: records by request id (a plain mapping or a predictions log's
    records), read once, in their order, for the verdicts and the report's request columns alike.
    A record whose request the view does not have counts in the columns only.
    """
    layout = getattr(snapshot, "layout", None)
    if layout is None:
        layout = question_layout(list(snapshot))
    bounds, position = layout.q_start_list, layout.position
    qids, qtypes, level_names = layout.question_ids, layout.qtypes, layout.level_names
    cands, cand_at = layout.cand_flat.tolist(), layout.cand_start.tolist()
    n = len(layout)
    status: list[Any] = ["unattempted"] * n
    reason: list[Any] = [None] * n
    ok_rows: list[int] = []  # the questions with probabilities, and those probabilities end to end
    flat: list[float] = []
    requests = RequestColumns(requests=len(layout.request_ids))
    for rid, record in records.items():
        r = position.get(rid)
        requests.add(record, r is not None)
        if r is None:
            continue
        start, end = bounds[r], bounds[r + 1]
        questions = [Question(qids[i], qtypes[i], cands[cand_at[i]: cand_at[i + 1]], level_names.get(i))
                     for i in range(start, end)]
        for g, (st, p, why) in enumerate(judge_request(questions, record, tolerance), start):
            status[g], reason[g] = st, why
            if p is not None:
                ok_rows.append(g)
                flat.extend(p)
    return QuestionTable(
        request_id=layout.request_id,
        question_id=layout.question_id,
        qtype=layout.qtype,
        K=layout.K,
        P=_probability_matrix(n, layout.kmax, np.diff(layout.cand_start), ok_rows, flat),
        Y=layout.Y,
        has_target=layout.has_target,
        label=layout.label,
        unscored=layout.unscored,
        status=np.array(status, dtype=object),
        reason=reason,
        slices=layout.slices(),
        level_order=layout.level_order,
        slice_codes=layout.slice_columns,
        requests=requests,
    )


def _probability_matrix(n: int, kmax: int, widths: np.ndarray, rows: list[int], flat: list[float]) -> np.ndarray:
    """The ``(n, kmax)`` table of probabilities, zeros but in ``rows``, whose values are ``flat``
    end to end (row ``g`` holds ``widths[g]`` of them, from column 0), filled in one assignment."""
    P = np.zeros((n, kmax))
    if rows:
        g = np.asarray(rows, dtype=np.intp)
        w = widths[g]
        starts = np.cumsum(w) - w  # where each row's values start in flat
        col = np.arange(len(flat)) - np.repeat(starts, w)
        P.reshape(-1)[np.repeat(g * kmax, w) + col] = flat
    return P


_LINES = msgspec.json.Encoder()


class QuestionRecords(Sequence):
    """One record per question as scored (a read-only sequence of dicts, made on access): its
    status (``ok``/``invalid``/``unsupported``/``unattempted``/``error``), why it is not ``ok``,
    the normalised probabilities the generic metrics used (None unless ``ok``, rounded to 6
    decimals), the label index and whether the argmax hit it.

    The raw answer stays in the predictions log; this is the per-item view of what was judged,
    and :meth:`jsonl` is how ``questions.jsonl`` is written.
    """

    def __init__(self, table: QuestionTable) -> None:
        self.table = table
        self._columns: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return len(self.table)

    def _fields(self) -> tuple[Any, ...]:
        """Each field of the records as a list of scalars, made once (the probabilities as the
        rounded table and the count of each row's candidates; ``None`` where the answer is not ``ok``)."""
        if self._columns is None:
            t = self.table
            ok = t.status == "ok"
            pred = np.argmax(t.P, axis=1) if len(t) else np.zeros(0, dtype=np.int64)
            hard = t.label >= 0
            label = [v if h else None for v, h in zip(t.label.tolist(), hard.tolist())]
            correct = [c if h else None for c, h in zip((ok & (pred == t.label)).tolist(), hard.tolist())]
            width = np.where(ok, t.K, -1).tolist()
            self._columns = (t.request_id.tolist(), t.question_id.tolist(), t.qtype.tolist(), t.status.tolist(),
                             t.reason, t.P.round(6), width, label, correct, t.unscored.tolist())
        return self._columns

    def columns(self) -> dict[str, list[Any]]:
        """The records' ``request_id``, ``question``, ``status``, ``reason``, ``probabilities`` and
        ``correct`` as lists, one item per question (what :meth:`__iter__` gives, by field)."""
        rid, qid, _, status, reason, rounded, width, _, correct, _ = self._fields()
        rows = rounded.tolist()
        probs = [row[:w] if w >= 0 else None for row, w in zip(rows, width)]
        return {"request_id": rid, "question": qid, "status": status, "reason": list(reason), "probabilities": probs,
                "correct": correct}

    def _one(self, i: int) -> dict[str, Any]:
        rid, qid, qtype, status, reason, rounded, width, label, correct, unscored = self._fields()
        return {"request_id": rid[i], "question": qid[i], "type": qtype[i], "status": status[i], "reason": reason[i],
                "probabilities": rounded[i, : width[i]].tolist() if width[i] >= 0 else None,
                "label": label[i], "correct": correct[i], **({"unscored": True} if unscored[i] else {})}

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._one(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._one(i)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, QuestionRecords)) else NotImplemented

    def jsonl(self) -> bytes:
        """``questions.jsonl``'s bytes (:func:`question_lines`)."""
        return question_lines(self)


def question_lines(records: Sequence[Mapping[str, Any]]) -> bytes:
    """``questions.jsonl``: every record as one compact JSON line (UTF-8). When a record holds
    what has no UTF-8 form (a lone surrogate in an error text), every line is written by
    :func:`~jevkedro.nodes.jsonparse.dumps_utf8` instead, which reads back as the same strings."""
    try:
        return _LINES.encode_lines(iter(records))
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return b"".join(dumps_utf8(rec) + b"\n" for rec in records)


def question_records(table: QuestionTable) -> QuestionRecords:
    """The per-question records of ``table`` (see :class:`QuestionRecords`)."""
    return QuestionRecords(table)
