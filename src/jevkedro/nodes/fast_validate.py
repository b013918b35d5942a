"""The fast path of answer validation: a whole view judged with typed decoding and numpy.

:func:`judge_view` gives the same statuses, reasons and probabilities as the reference rules of
:mod:`jevkedro.nodes.validate` (:func:`~jevkedro.nodes.validate.judge_request` on every request),
without walking each answer through them:

1. Each prediction record is decoded by msgspec into structs holding only what validation reads
   (``status``, ``error``, each answer's ``type``/``noul``/``probabilities``/``choice``);
   everything else in a record (usage, raw bodies, hashes) is skipped without being built.
   Records read from a predictions log are decoded straight from the log's bytes, in runs of
   lines (no dict per record); plain Python records are converted the same way.
2. The answers of a batch are checked as whole groups: types first (a value that is not a
   float — a boolean, an integer, a string, null, anything nested — leaves the fast path), then
   the answers of canonical shape — the declared type right, every candidate present (in
   candidate order, or remapped from another order), a choice that names one of them — are
   grouped by candidate count ``K`` and checked as ``(n, K)`` matrices: every value in [0, 1],
   row sum within the tolerance (row sums of a ``(n, K)`` matrix are bitwise the sums the
   reference takes of each answer). Those pass (normalised) or are rejected for their sum, with
   the reference's reason text (:func:`~jevkedro.nodes.validate.sum_reason`).
3. Everything else is judged by the reference on the generic record: requests whose record did
   not decode typed, that carry unsupported questions or repeated keys, list-shaped bodies that
   repeat an id, and answers that are missing, missing keys, keyed by level names, out of range,
   of a foreign type, with a foreign choice, ... The fast path never rejects on its own except
   for a sum, so the reference decides every other rejection and writes its reason.

``tests/test_fast_validate.py`` checks that both agree on random and adversarial answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, countOf, eq, is_, is_not, ne, truth
from typing import Any

import msgspec
import numpy as np

from jevkedro.nodes.gcpause import gc_paused
from jevkedro.nodes.jsonparse import parse_json
from jevkedro.nodes.layout import QTYPE_CODES, QuestionLayout
from jevkedro.nodes.validate import (
    NO_ANSWER,
    AnswersByQuestion,
    QuestionRecords,
    answers_by_question,
    judge_request,
    renormalising_divisor,
    sum_reason,
    validate_answer,
)
from jevkedro.protocol import SnapshotRow

BATCH_REQUESTS = 8192


# -- typed records ---------------------------------------------------------------------------------

class Answer(msgspec.Struct, gc=False):
    """What validation reads of one answer; anything else in it is skipped while decoding. The
    values are not typed (any JSON decodes, so one odd answer does not stop a line from decoding):
    the fast path accepts only floats and sends everything else to the reference."""

    type: Any = None
    noul: Any = None
    probabilities: Any = None
    choice: Any = msgspec.UNSET


class ListAnswer(Answer):
    """An entry of a list-shaped ``/decide`` body (matched to its question by ``id``)."""

    id: Any = None


class Response(msgspec.Struct, gc=False):
    answers: dict[str, Answer] | list[ListAnswer] | None = None


class RecordMeta(msgspec.Struct, gc=False):
    duplicate_keys: Any = None


class Record(msgspec.Struct, gc=False):
    """A prediction record as scoring reads it (the report's request-level fields included)."""

    request_id: Any = None
    status: Any = msgspec.UNSET  # judged as the reference does: a record without one is unattempted
    response: Response | None = None
    error: Any = None
    unsupported_questions: Any = None
    meta: RecordMeta | None = None
    latency_s: Any = None
    first: Any = None
    cost_usd: Any = None
    model: Any = None
    failure: Any = None


RECORD_DECODER = msgspec.json.Decoder(Record)
_TYPED_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, RecursionError, OverflowError)


def typed_record(record: Any) -> Record | None:
    """A record given as Python objects, typed (None when it does not fit the typed shape)."""
    try:
        return msgspec.convert(record, Record)
    except _TYPED_ERRORS:
        return None


# One prediction as the view judge consumes it: (request id, typed record or None, the record as
# generic objects or as its JSON line).
Item = tuple[str, "Record | None", Any]


def mapping_items(predictions: Mapping[str, Mapping[str, Any]]) -> Iterator[list[Item]]:
    """Batches of items of a plain mapping of records (typed by conversion)."""
    batch: list[Item] = []
    for rid, rec in predictions.items():
        batch.append((rid, typed_record(rec) if isinstance(rec, Mapping) else None, rec))
        if len(batch) >= BATCH_REQUESTS:
            yield batch
            batch = []
    if batch:
        yield batch


# -- request-level columns for the report ----------------------------------------------------------

@dataclass
class RequestColumns:
    """Request-level fields of every record judged (in the predictions' own order), for the report:
    status, latency, first-request flag, cost, resolved model and failure kind; ``unattempted``
    counts the snapshot requests without an attempted record (none, or status ``unattempted``)."""

    status: list[Any] = field(default_factory=list)
    latency_s: list[Any] = field(default_factory=list)
    first: list[Any] = field(default_factory=list)
    cost_usd: list[Any] = field(default_factory=list)
    model: list[Any] = field(default_factory=list)
    failure: list[Any] = field(default_factory=list)
    unattempted: int = 0

    def columns(self) -> tuple[list[Any], ...]:
        return self.status, self.latency_s, self.first, self.cost_usd, self.model, self.failure

    def add_generic(self, rec: Any) -> None:
        for col, value in zip(self.columns(), _generic_fields(rec)):
            col.append(value)

    @classmethod
    def of(cls, predictions: Mapping[str, Mapping[str, Any]], request_ids: Iterable[str]) -> RequestColumns:
        cols = cls()
        for rec in predictions.values():
            cols.add_generic(rec)
        cols.unattempted = sum(1 for rid in request_ids
                               if (predictions.get(rid) or {}).get("status", "unattempted") == "unattempted")
        return cols


# -- the view --------------------------------------------------------------------------------------

@dataclass
class JudgedView:
    P: np.ndarray
    status: np.ndarray
    reason: list[Any]
    requests: RequestColumns


@gc_paused()
def judge_view(layout: QuestionLayout, rows: Sequence[SnapshotRow], predictions: Any, tolerance: float) -> JudgedView:
    """Judge every question of the view laid out by ``layout`` (see the module docstring).

    ``predictions``: a mapping of records by request id, or anything with ``scoring_items()``
    (a predictions log's records) yielding batches of :data:`Item`.
    """
    n = len(layout)
    out = _Out(np.zeros((n, layout.kmax)), np.full(n, "unattempted", dtype=object), [None] * n)
    cols = RequestColumns()
    attempted = np.zeros(len(layout.request_ids), dtype=bool)
    batches = predictions.scoring_items() if hasattr(predictions, "scoring_items") else mapping_items(predictions)
    for batch in batches:
        _judge_batch(layout, rows, batch, tolerance, out, cols, attempted)
    cols.unattempted = int((~attempted).sum())
    return JudgedView(out.P, out.status, out.reason, cols)


@dataclass
class _Out:
    P: np.ndarray
    status: np.ndarray
    reason: list[Any]

    def invalid(self, g: int, reason: Any) -> None:
        self.status[g] = "invalid"
        self.reason[g] = reason

    def verdicts(self, start: int, verdicts: list) -> None:
        for j, (st, p, why) in enumerate(verdicts):
            self.status[start + j] = st
            self.reason[start + j] = why
            if p is not None:
                self.P[start + j, : len(p)] = p


def _generic(raw: Any) -> Any:
    """The record as generic objects: a JSON line is read by the exact parser."""
    return parse_json(raw).value if isinstance(raw, (bytes, bytearray, memoryview)) else raw


_EMPTY: dict[str, Any] = {}
_NO_FIELDS = Record()  # a stand-in while the columns are mapped; its fields are replaced
_get_latency, _get_first = attrgetter("latency_s"), attrgetter("first")
_get_cost, _get_model, _get_failure = attrgetter("cost_usd"), attrgetter("model"), attrgetter("failure")


_get_status, _get_unsupported, _get_meta = attrgetter("status"), attrgetter("unsupported_questions"), attrgetter("meta")
_get_response, _get_answers = attrgetter("response"), attrgetter("answers")


def _statuses(recs: list[Record]) -> list[Any]:
    """Each record's status (None where it has none)."""
    statuses = list(map(_get_status, recs))
    if any(map(is_, statuses, repeat(msgspec.UNSET))):
        statuses = [None if s is msgspec.UNSET else s for s in statuses]
    return statuses


def _generic_fields(rec: Any) -> tuple[Any, ...]:
    rec = rec if isinstance(rec, Mapping) else {}
    return (rec.get("status"), rec.get("latency_s"), rec.get("first"), rec.get("cost_usd"), rec.get("model"),
            rec.get("failure"))


def _generic_status(rec: Any) -> Any:
    return rec.get("status", "unattempted") if isinstance(rec, Mapping) else "unattempted"


def _plain_bodies(recs: list[Record], statuses: list[Any]) -> list[Any]:
    """For each typed record (with its status), the answers dict the fast path takes whole (status
    ok, nothing unsupported, no repeated keys, answers an object: no answers at all is an empty
    one), else None. C-level maps over the batch; a Python step only for records with meta or
    without a response."""
    n = len(recs)
    take = np.fromiter(map(eq, statuses, repeat("ok")), dtype=bool, count=n)
    unsupported = list(map(_get_unsupported, recs))
    if any(unsupported):
        take &= ~np.fromiter(map(truth, unsupported), dtype=bool, count=n)
    metas = list(map(_get_meta, recs))
    if not all(map(is_, metas, repeat(None))):
        take &= ~np.fromiter((m is not None and bool(m.duplicate_keys) for m in metas), dtype=bool, count=n)
    idx = np.flatnonzero(take).tolist()
    responses = list(map(_get_response, map(recs.__getitem__, idx)))
    if all(map(is_not, responses, repeat(None))):
        answers = list(map(_get_answers, responses))
    else:
        answers = [_EMPTY if r is None else r.answers for r in responses]
    if not all(map(is_, map(type, answers), repeat(dict))):
        answers = [a if a.__class__ is dict else (_EMPTY if a is None else None) for a in answers]
    out = np.full(n, None, dtype=object)
    out[idx] = answers
    return out.tolist()


def _judge_batch(layout: QuestionLayout, rows: Sequence[SnapshotRow], batch: list[Item], tol: float, out: _Out,
                 cols: RequestColumns, attempted: np.ndarray) -> None:
    position, q_start = layout.position, layout.q_start_list
    rids, recs, raws = (list(x) for x in zip(*batch))
    rs: list[Any] = list(map(position.get, rids))  # None for an id the snapshot lacks (set apart below)
    typed = all(map(is_not, recs, repeat(None)))
    generic = {} if typed else {i: _generic(raws[i]) for i, rec in enumerate(recs) if rec is None}
    # request-level columns, in the records' order: C-level maps over the typed records (a record
    # that did not decode typed, e.g. one holding NaN, is read from its generic form and patched in)
    as_typed = recs if typed else [_NO_FIELDS if rec is None else rec for rec in recs]
    statuses = _statuses(as_typed)
    bodies: list[Any] = _plain_bodies(as_typed, statuses)  # a record that did not decode typed: None
    columns = [statuses, list(map(_get_latency, as_typed)), list(map(_get_first, as_typed)), list(map(_get_cost, as_typed)),
               list(map(_get_model, as_typed)), list(map(_get_failure, as_typed))]
    if not typed:
        columns[0] = list(statuses)  # the report's column keeps a generic record's own status (or None) ...
        for i in generic:
            for col, value in zip(columns, _generic_fields(generic[i])):
                col[i] = value
            statuses[i] = _generic_status(generic[i])  # ... judging reads a record without one as unattempted
    for col, values in zip(cols.columns(), columns):
        col.extend(values)
    if not all(map(is_not, rs, repeat(None))):  # keep the records for requests the snapshot has
        known = [i for i, r in enumerate(rs) if r is not None]
        new_index = {old: new for new, old in enumerate(known)}
        rs, recs, raws, statuses, bodies = ([x[i] for i in known] for x in (rs, recs, raws, statuses, bodies))
        generic = {new_index[i]: v for i, v in generic.items() if i in new_index}
    if rs:
        attempted[rs] = (np.fromiter(map(is_not, statuses, repeat(None)), dtype=bool, count=len(statuses))
                         & np.fromiter(map(ne, statuses, repeat("unattempted")), dtype=bool, count=len(statuses)))
    plain = np.flatnonzero(np.fromiter(map(is_not, bodies, repeat(None)), dtype=bool, count=len(bodies))).tolist()
    fast_r = list(map(rs.__getitem__, plain))
    fast_raw = list(map(raws.__getitem__, plain))
    answers: list[Any] = []
    if plain:  # the common case, without a Python step per request
        fr = np.asarray(fast_r, dtype=np.int64)
        counts = (layout.q_start[fr + 1] - layout.q_start[fr]).tolist()  # (not a diff of the whole view per batch)
        answers = list(map(dict.get, chain.from_iterable(map(repeat, (bodies[i] for i in plain), counts)),
                           chain.from_iterable(map(layout.qids_by_request.__getitem__, fast_r))))
    list_r: list[int] = []
    slow: list[tuple[int, Any]] = []  # whole requests for the reference: (request, record)
    if len(plain) != len(rs):
        for i in [i for i, b in enumerate(bodies) if b is None]:
            r, rec, raw, status = rs[i], recs[i], raws[i], statuses[i]
            if rec is None:
                slow.append((r, generic[i]))
                continue
            if status != "ok":
                if status is None:
                    status = "unattempted"  # a record without a status, judged as the reference does
                elif not isinstance(status, str):  # not a status at all: the reference says what it makes of it
                    slow.append((r, raw))
                    continue
                qs, qe = q_start[r], q_start[r + 1]
                out.status[qs:qe] = status
                if rec.error is not None:
                    out.reason[qs:qe] = [rec.error] * (qe - qs)
                continue
            body = rec.response.answers if rec.response is not None else None
            if rec.unsupported_questions or (rec.meta is not None and rec.meta.duplicate_keys) or body.__class__ is not list:
                slow.append((r, raw))
                continue
            # list-shaped: by id; an id answered twice is for the reference to reject
            amap = {a.id: a for a in body if isinstance(a.id, str)}
            if len(amap) != sum(1 for a in body if isinstance(a.id, str)):
                slow.append((r, raw))
                continue
            list_r.append(r)
            fast_r.append(r)
            fast_raw.append(raw)
            answers.extend(map(amap.get, layout.qids_by_request[r]))
    if fast_r:
        r_arr = np.array(fast_r, dtype=np.int64)
        starts = layout.q_start[r_arr]
        lengths = layout.q_start[r_arr + 1] - starts
        g = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(int(lengths.sum()))
        listq = np.zeros(len(g), dtype=bool)
        if list_r:
            flat = np.zeros(len(out.status), dtype=bool)
            for r in list_r:
                flat[q_start[r]: q_start[r + 1]] = True
            listq = flat[g]
        to_reference = _judge_answers(layout, g, answers, listq, tol, out)
        if len(to_reference):
            _reference_questions(layout, rows, to_reference, dict(zip(fast_r, fast_raw)), tol, out)
    for r, raw in slow:
        out.verdicts(q_start[r], judge_request(rows[r], _generic(raw), tol))


_get_type, _get_noul = attrgetter("type"), attrgetter("noul")
_get_probs, _get_choice = attrgetter("probabilities"), attrgetter("choice")


def _judge_answers(layout: QuestionLayout, g: np.ndarray, answers: list[Any], listq: np.ndarray, tol: float,
                   out: _Out) -> np.ndarray:
    """Accept canonical valid answers and reject sums outside the band; returns the questions
    (global indices) left for the reference."""
    present = np.fromiter(map(is_not, answers, repeat(None)), dtype=bool, count=len(answers))
    for gi in g[~present]:
        out.invalid(int(gi), NO_ANSWER)
    if not present.all():
        keep = np.flatnonzero(present)
        answers = [answers[i] for i in keep.tolist()]
        g, listq = g[keep], listq[keep]
    if not len(g):
        return g
    types = list(map(_get_type, answers))
    nouls = list(map(_get_noul, answers))
    probs = list(map(_get_probs, answers))
    qt = layout.qtype_code[g]
    type_ok = _type_matches(types, qt, layout.qtype[g])
    noul_float = _is_type(nouls, float)
    has_noul = noul_float | ~_is_type(nouls, None)
    has_probs = _is_type(probs, dict)
    reference = ~type_ok
    is_noul = qt == 0

    # noul as one number: [p, 1 - p] in candidate order (the reference does not renormalise it)
    noul_num = type_ok & is_noul & has_noul
    if noul_num.any():
        idx = np.flatnonzero(noul_num & noul_float)
        v = np.fromiter((nouls[i] for i in idx.tolist()), dtype=float, count=len(idx))
        ok = (v >= 0.0) & (v <= 1.0)
        gv, v = g[idx[ok]], v[ok]
        true_first = layout.noul_true_first[gv]
        out.P[gv, 0] = np.where(true_first, v, 1.0 - v)
        out.P[gv, 1] = np.where(true_first, 1.0 - v, v)
        out.status[gv] = "ok"
        reference[idx[~ok]] = True
        reference |= noul_num & ~noul_float  # 1, true, "0.5", 10**400, ...: the reference decides
    # everything else must be a probabilities object over the candidates
    by_probs = type_ok & ~noul_num & has_probs & (qt >= 0)
    reference |= type_ok & ~noul_num & ~has_probs
    if qt.min() < 0:  # a question type the rules do not know: the reference says what it makes of it
        reference |= qt < 0
        by_probs &= qt >= 0
    idx = np.flatnonzero(by_probs)
    if len(idx):
        reference[idx[~_judge_probabilities(layout, g[idx], [probs[i] for i in idx.tolist()],
                                            [answers[i] for i in idx.tolist()], listq[idx], tol, out)]] = True
    return g[reference]


def _is_type(values: list[Any], kind: type | None) -> np.ndarray:
    """``type(v) is kind`` for each value (``kind`` None: ``v is None``), C-level for plain lists
    (counted first: a list all of one kind, or of none, needs no per-value array)."""
    want = type(None) if kind is None else kind
    n = len(values)
    hits = countOf(map(type, values), want)
    if hits == n or hits == 0:
        return np.full(n, hits == n, dtype=bool)
    return np.fromiter(map(is_, map(type, values), repeat(want)), dtype=bool, count=n)


_ANSWER_TYPE_CODES: dict[Any, int] = {None: -1, **QTYPE_CODES}  # no declared type: accepted for any question


def _type_matches(types: list[Any], qt: np.ndarray, qtypes: np.ndarray) -> np.ndarray:
    """Whether each answer's declared ``type`` is absent or equals its question's type, by integer
    codes (a question type the rules do not know, code -1, is for the reference whatever the
    answer declares). A declared type that cannot be a dict key (a list, an object) is compared
    one by one."""
    try:
        codes = np.fromiter(map(_ANSWER_TYPE_CODES.get, types, repeat(-2)), dtype=np.int8, count=len(types))
    except TypeError:
        ok = _is_type(types, None)
        return ok | _equals(types, qtypes) if not ok.all() else ok
    return (codes == -1) | (codes == qt)


def _equals(values: list[Any], strings: np.ndarray) -> np.ndarray:
    """``v == s`` elementwise where ``v`` is a string (anything else: False)."""
    is_str = _is_type(values, str)
    out = np.zeros(len(values), dtype=bool)
    idx = np.flatnonzero(is_str)
    out[idx] = np.array([values[i] for i in idx.tolist()], dtype=object) == strings[idx]
    return out


def _judge_probabilities(layout: QuestionLayout, g: np.ndarray, dicts: list[dict[str, Any]], answers: list[Any],
                         listq: np.ndarray, tol: float, out: _Out) -> np.ndarray:
    """Judge probabilities objects; returns a mask of the questions this path decided."""
    n = len(g)
    decided = np.zeros(n, dtype=bool)
    K = layout.K[g]
    lens = np.fromiter(map(len, dicts), dtype=np.int64, count=n)
    same = np.flatnonzero((lens == K) & (K > 0))
    if not len(same):
        return decided
    g2, K2 = g[same], K[same]
    d2 = dicts if len(same) == n else [dicts[i] for i in same.tolist()]
    local = np.zeros(len(same) + 1, dtype=np.int64)
    np.cumsum(K2, out=local[1:])
    total = int(local[-1])
    keys = np.array(list(chain.from_iterable(d2)), dtype=object)
    raw_vals = list(chain.from_iterable(map(dict.values, d2)))
    floats = _is_type(raw_vals, float)
    if not floats.all():  # a value that is not a float (an int, a bool, a string, null, ...) is for the reference
        for i in np.flatnonzero(~floats).tolist():
            raw_vals[i] = 0.0  # a stand-in, so the rest converts in one C-level pass
    vals = np.fromiter(raw_vals, dtype=float, count=total)
    expect_at = np.repeat(layout.cand_start[g2] - local[:-1], K2) + np.arange(total)
    usable = np.add.reduceat((keys != layout.cand_flat[expect_at]) | ~floats, local[:-1].astype(np.intp)) == 0
    for j in np.flatnonzero(~usable).tolist():  # same size, another order (or other keys, or other values)
        d, cands = d2[j], layout.candidates_of(int(g2[j]))
        remapped = [d.get(c) for c in cands]
        if all(type(v) is float for v in remapped):
            vals[local[j]: local[j + 1]] = remapped
            usable[j] = True
    # a choice answer naming its choice (or any choice entry of a list-shaped body) must name a candidate
    is_choice = layout.qtype_code[g2] == 1
    sel = np.flatnonzero(is_choice & usable)
    if len(sel):
        at = same[sel]
        choices = list(map(_get_choice, map(answers.__getitem__, at.tolist())))
        named = np.fromiter(map(is_not, choices, repeat(msgspec.UNSET)), dtype=bool, count=len(sel)) | listq[at]
        strings = np.flatnonzero(_is_type(choices, str))
        among = np.zeros(len(sel), dtype=bool)
        among[strings] = np.fromiter(map(dict.__contains__, map(d2.__getitem__, sel[strings].tolist()),
                                         map(choices.__getitem__, strings.tolist())), dtype=bool, count=len(strings))
        usable[sel[named & ~among]] = False
    for k in np.unique(K2[usable]).tolist():
        m = np.flatnonzero(usable & (K2 == k))
        V = vals[local[m][:, None] + np.arange(k)]
        in_range = ((V >= 0.0) & (V <= 1.0)).all(axis=1)
        sums = V.sum(axis=1)
        off = np.abs(sums - 1.0) > tol + 1e-12
        accept = in_range & ~off
        ga = g2[m[accept]]
        out.P[ga, :k] = V[accept] / np.asarray(renormalising_divisor(sums[accept]))[:, None]
        out.status[ga] = "ok"
        for j, total_j in zip(m[in_range & off].tolist(), sums[in_range & off].tolist()):
            out.invalid(int(g2[j]), sum_reason(total_j, tol))
        decided[same[m[in_range]]] = True
    return decided


def _reference_questions(layout: QuestionLayout, rows: Sequence[SnapshotRow], g: np.ndarray, raw_of: dict[int, Any],
                         tol: float, out: _Out) -> None:
    """Judge single questions of fast-path requests with the reference rules (answers read from
    the generic record, so reasons quote the values exactly as written)."""
    answers_of: dict[int, AnswersByQuestion] = {}
    for gi in g.tolist():
        r = int(layout.request_index[gi])
        amap = answers_of.get(r)
        if amap is None:
            generic = _generic(raw_of[r])
            amap = answers_of[r] = answers_by_question(generic.get("response"))
        qid = layout.question_ids[gi]
        p, why = validate_answer(layout.qtype[gi], layout.candidates_of(gi), amap.get(qid), layout.level_names.get(gi), tol,
                                 amap.list_entries(qid))
        if p is None:
            out.invalid(gi, why)
        else:
            out.status[gi] = "ok"
            out.P[gi, : len(p)] = p


# -- per-question records as JSON lines ------------------------------------------------------------

class QuestionLine(msgspec.Struct, omit_defaults=True, gc=False):
    """One line of ``questions.jsonl`` (the fields of :class:`~jevkedro.nodes.validate.QuestionRecords`)."""

    request_id: str
    question: str
    type: str
    status: Any
    reason: Any
    probabilities: list[float] | None
    label: int | None
    correct: bool | None
    unscored: bool = False


_LINES = msgspec.json.Encoder()


@gc_paused()
def question_records_jsonl(records: QuestionRecords) -> bytes:
    """Every record as a JSON line, built column-wise: one struct per question made by a C-level
    map over the columns, encoded by msgspec in one call (``json.dumps`` for a table whose
    values msgspec does not write, e.g. a lone surrogate in a reason)."""
    t = records.table
    n = len(t)
    if not n:
        return b""
    probs: list[Any] = [None] * n
    ok = records._ok
    for k in np.unique(t.K[ok]).tolist():
        rows_k = np.flatnonzero(ok & (t.K == k)).tolist()
        for i, row in zip(rows_k, records._rounded[rows_k, :k].tolist()):
            probs[i] = row
    hard = t.label >= 0
    label = np.where(hard, t.label, -1).tolist()
    correct = records._correct.tolist()
    lines = list(map(QuestionLine, t.request_id.tolist(), t.question_id.tolist(), t.qtype.tolist(), t.status.tolist(),
                     t.reason, probs, [v if v >= 0 else None for v in label],
                     [c if h else None for c, h in zip(correct, hard.tolist())], t.unscored.tolist()))
    try:
        return _LINES.encode_lines(lines)
    except (TypeError, ValueError, msgspec.EncodeError):
        from jevkedro.nodes.predictions_log import utf8_json_line

        return b"".join(map(utf8_json_line, records))
