"""The explorer's data: every question of a run (or of two runs paired) as compact columns.

A page embeds one JSON document. Per question it holds small integer codes into shared value
lists (question id, type, status, reason, candidate list, instructions, each slice), the label
index, the probabilities in units of 1e-4 and the loss; per request its id, request status and
latency. The request as the model saw it and the prediction record as stored (the *detail*) are
JSON texts kept per request while they fit a byte budget, the requests that matter most first
(invalid or failed answers, wrong answers, flips); a request whose detail is left out keeps its id
and the first characters of its state, so every question stays reachable through paging, filters
and search. Everything here is built from files the run already wrote (predictions are redacted
when they are logged), so nothing secret can reach a page.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.layout import QuestionLayout, question_layout
from jevkedro.nodes.snapshot import Snapshot
from jevkedro.nodes.validate import QuestionRecords
from jevkedro.protocol import SnapshotRow, Target

STATUSES = ("ok", "invalid", "unsupported", "unattempted", "error")
NLL_FLOOR = 1e-12  # as the generic metrics (protocol §4)
PROB_SCALE = 10_000  # probabilities are stored as integers in units of 1e-4
EXCERPT_CHARS = 240  # of a state whose detail is left out
# record fields the page shows elsewhere (the header), left out of each stored record
RECORD_OMIT = frozenset({"request_id", "snapshot_sha256"})
# flip codes of a paired question (comparison pages); -1: no hard label (not paired for accuracy)
FLIPS = ("both_right", "a_only", "b_only", "both_wrong")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def script_json(text: str) -> str:
    """JSON text made safe inside ``<script type="application/json">``: every ``<`` becomes
    ``\\u003c`` (so neither ``</script>`` nor ``<!--`` can end or bend the element) and a lone
    surrogate becomes its ``\\u`` escape (the page stays valid UTF-8). Only strings of a JSON text
    can hold either, so the text parses to the same value."""
    text = text.replace("<", "\\u003c")
    return text if text.isascii() else _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (``JSON.parse`` knows no NaN or Infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Compact JSON of ``obj``, ASCII only (the page's data then costs one byte a character in
    memory, and a lone surrogate is an escape); non-finite numbers and unknown types as text."""
    try:
        return _ENCODE(obj)
    except ValueError:
        return _ENCODE(_finite(obj))


_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str).encode
_MSGSPEC = msgspec.json.Encoder().encode


class Codes:
    """Dictionary encoding: each distinct value gets the next integer; ``values`` lists them."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any, key: Any = None) -> int:
        key = value if key is None else key
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.values)
            self.values.append(value)
        return code

    def many(self, items: Sequence[Any]) -> list[int]:
        """The code of each item, as calling this on each in turn gives."""
        for value in dict.fromkeys(items):
            self(value)
        return list(map(self.index.__getitem__, items))


@dataclass(frozen=True)
class Gold:
    label: int | None
    soft: list[float] | None
    unscored: bool


def _gold(target: Any) -> Gold:
    if isinstance(target, Mapping):
        label, soft, unscored = target.get("label"), target.get("probabilities"), target.get("unscored", False)
    else:  # jevkedro.protocol.Target
        label, soft, unscored = target.label, target.probabilities, target.unscored
    return Gold(None if label is None else int(label), None if soft is None else [float(x) for x in soft], bool(unscored))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def state_text(state: Any) -> str:
    return state if isinstance(state, str) else dumps(state)


def loss_of(probabilities: Sequence[float] | None, gold: Gold) -> float | None:
    """The question's log loss: ``-ln max(p_label, 1e-12)``, or the cross-entropy against the soft
    target where there is no hard label; None without a valid answer or a target."""
    if not probabilities:
        return None
    if gold.label is not None and 0 <= gold.label < len(probabilities):
        return -math.log(max(float(probabilities[gold.label]), NLL_FLOOR))
    if gold.soft is not None and len(gold.soft) == len(probabilities):
        return -sum(t * math.log(max(float(p), NLL_FLOOR)) for t, p in zip(gold.soft, probabilities) if t > 0)
    return None


def _scaled(probabilities: Sequence[float] | None) -> list[int] | None:
    return None if not probabilities else [int(float(p) * PROB_SCALE + 0.5) for p in probabilities]


def _loss4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


_ABSENT = object()


@dataclass
class Side:
    """One model's answers, question by question, in page order."""

    status: list[int] = field(default_factory=list)
    reason: list[int] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)  # 1 right, 0 wrong (invalid counts as wrong), -1 no hard label
    probs: list[list[int] | None] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    request_status: list[int] = field(default_factory=list)
    latency_ms: list[float | None] = field(default_factory=list)
    records: list[str] = field(default_factory=list)  # per request: its record without the shared fields, as JSON
    shared: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


def _key(value: Any) -> bytes | str:
    """A key equal for equal JSON values with their keys in one order: msgspec's encoding, or the
    page's own text for what msgspec cannot encode (a lone surrogate, a huge integer)."""
    try:
        return _MSGSPEC(value)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return dumps(value)


def _request_text(request: Mapping[str, Any]) -> str:
    """A request as JSON text: msgspec's (a snapshot's requests hold no non-finite number: its
    writer refuses them), the page's :func:`dumps` for what msgspec cannot encode."""
    try:
        return _MSGSPEC(request).decode("utf-8")
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return dumps(request)


def _coded(items: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """Dictionary encoding of a whole column: codes in first-seen order and the distinct values."""
    values = list(dict.fromkeys(items))
    code = {v: i for i, v in enumerate(values)}
    return list(map(code.__getitem__, items)), values


def _snapshot_row(row: Any) -> SnapshotRow:
    """A row given as a dict (tests, callers holding JSON) as a :class:`~jevkedro.protocol.SnapshotRow`."""
    if isinstance(row, SnapshotRow):
        return row
    targets = {q: Target(label=g.label, probabilities=None if g.soft is None else tuple(g.soft), unscored=g.unscored)
               for q, g in ((q, _gold(t)) for q, t in (row.get("targets") or {}).items())}
    return SnapshotRow(row["request_id"], row["request"], row["candidates"], targets, row.get("slices") or {})


def view_of(snapshot: Any) -> tuple[QuestionLayout, Iterable[tuple[str, Mapping[str, Any]]]]:
    """The question layout of a snapshot (a loaded one's own; else laid out from its rows) and
    its requests in order (a loaded snapshot decodes each request cell as it is read)."""
    if isinstance(snapshot, Snapshot):
        return snapshot.layout, snapshot.requests()
    rows = [_snapshot_row(r) for r in getattr(snapshot, "rows", snapshot)]
    return question_layout(rows), [(r.request_id, r.request) for r in rows]


@dataclass
class Judged:
    """The fields the page reads of every question record, as columns in the records' order:
    ``P`` the probabilities as the records state them (zero padded), ``width`` how many a record
    holds when it is ``ok`` (0 otherwise: none is shown), ``correct`` whether an ``ok`` record is
    right."""

    request_id: list[Any]
    question: list[Any]
    status: list[str]
    reason: list[Any]
    P: np.ndarray
    width: np.ndarray
    correct: np.ndarray


def judged_columns(questions: Iterable[Mapping[str, Any]]) -> Judged:
    """:class:`Judged` of the score node's :class:`~jevkedro.nodes.validate.QuestionRecords`
    (from its table: the records' probabilities are the table's rounded to 6 decimals) or of
    rows of ``questions.jsonl`` (read one by one)."""
    if isinstance(questions, QuestionRecords):
        t = questions.table
        ok = np.asarray(t.status == "ok", dtype=bool)
        return Judged(t.request_id.tolist(), t.question_id.tolist(), t.status.tolist(), list(t.reason), t.P.round(6),
                      np.where(ok, t.K, 0), np.asarray(M.table_stats(t)["correct"], dtype=bool))
    rids, qids, status, reason, probs, correct = [], [], [], [], [], []
    for rec in questions:
        st, p = _text(rec.get("status")), rec.get("probabilities")
        rids.append(rec.get("request_id"))
        qids.append(rec.get("question"))
        status.append(st)
        reason.append(rec.get("reason"))
        probs.append(p if st == "ok" and p else ())
        correct.append(bool(rec.get("correct")) and st == "ok")
    width = np.array([len(p) for p in probs], dtype=np.int64)
    P = np.zeros((len(probs), int(width.max(initial=0))))
    P[np.arange(P.shape[1]) < width[:, None]] = [float(x) for p in probs for x in p]
    return Judged(rids, qids, status, reason, P, width, np.array(correct, dtype=bool))


class Assembly:
    """Builds the columns of one page over a snapshot's layout (questions in snapshot order)."""

    def __init__(self, snapshot: Any) -> None:
        layout, requests = view_of(snapshot)
        self.layout = layout
        self.n = len(layout)
        self.request_ids = list(layout.request_ids)
        self.statuses = Codes()
        for s in STATUSES:
            self.statuses(s)
        self.reasons = Codes()
        self.r = layout.request_index.tolist()
        self.q, qids = _coded(layout.question_ids)
        self.t, types = _coded(layout.qtypes)
        cand_codes = layout.candidate_list_codes()
        first = np.unique(cand_codes, return_index=True)[1].tolist()
        self.cand_values = [layout.candidates_of(i) for i in first]
        self.c = cand_codes.tolist()
        self.strings = {"qids": qids, "types": types}
        self.label = layout.target_label.tolist()
        self.hard = layout.label >= 0
        soft = np.flatnonzero(layout.soft_target).tolist()
        self.soft = {str(i): _scaled(layout.Y[i, : layout.K[i]].tolist()) or [] for i in soft}
        self.golds = {i: Gold(None, layout.Y[i, : layout.K[i]].tolist(), False) for i in soft
                      if layout.target_label[i] < 0}
        self.slices = {}
        for name, col in layout.slice_columns.items():
            if name in ("type", "question"):
                continue
            absent = col.values.index("") if "" in col.values else -2
            self.slices[name] = {"values": col.values, "codes": np.where(col.codes == absent, -1, col.codes).tolist()}
        self.qsets, self.instr = Codes(), Codes()
        self.request_json: list[str] = []  # the request, its questions object coded into qsets
        self.excerpts: list[str] = []
        instructions: list[Any] = []
        for _, request in requests:
            request = dict(request)  # one read of a lazily decoded request
            questions = request.get("questions") or {}
            request["questions"] = self.qsets(questions, _key(questions))
            self.request_json.append(_request_text(request))
            instructions.extend(spec.get("instructions") for spec in questions.values())
            state = state_text(request.get("state"))
            self.excerpts.append(state if len(state) <= EXCERPT_CHARS else state[:EXCERPT_CHARS] + "…")
        self.ins = self.instr.many([_text(x) for x in instructions])

    def side(self, questions: Iterable[Mapping[str, Any]], predictions: Mapping[str, Any]) -> Side:
        """One model's question records (``questions.jsonl`` rows) and prediction records, aligned
        to the page's questions; a question without a record reads ``unattempted``. The records
        are read once, in order (:func:`stored_records`)."""
        cols = judged_columns(questions)
        rids, qids = self.layout.request_id.tolist(), self.layout.question_ids
        status, reason = cols.status, cols.reason
        P, width, correct = cols.P, cols.width, cols.correct
        if cols.request_id != rids or cols.question != qids:  # not in snapshot order, or some missing
            at = {key: j for j, key in enumerate(zip(cols.request_id, cols.question))}
            where = np.array([at.get(key, -1) for key in zip(rids, qids)], dtype=np.int64)
            found, take = where >= 0, np.maximum(where, 0)
            status = [status[j] if j >= 0 else "unattempted" for j in where.tolist()]
            reason = [reason[j] if j >= 0 else None for j in where.tolist()]
            if len(width):
                P, width, correct = P[take], np.where(found, width[take], 0), found & correct[take]
            else:  # no record at all
                P, width, correct = np.zeros((self.n, 0)), np.zeros(self.n, dtype=np.int64), found
        side = Side()
        side.status = self.statuses.many(status)
        texts = [None if why is None else _text(why) for why in reason]
        self.reasons.many([t for t in texts if t is not None])
        side.reason = [-1 if t is None else self.reasons.index[t] for t in texts]
        given = np.arange(P.shape[1]) < width[:, None]
        scaled = np.trunc(P[given] * PROB_SCALE + 0.5).astype(np.int64).tolist()  # int(p * PROB_SCALE + 0.5), p >= 0
        ends = np.cumsum(width).tolist()
        side.probs = [scaled[end - w: end] if w else None for end, w in zip(ends, width.tolist())]
        side.loss = self._losses(P, width)
        side.correct = np.where(self.hard, correct, -1).tolist()
        stored = stored_records(predictions)
        side.shared, side.order = stored.shared, stored.order
        codes = self.statuses.many(stored.status)
        position = {rid: k for k, rid in enumerate(stored.request_ids)}
        unattempted = self.statuses("unattempted")
        for rid in self.request_ids:
            k = position.get(rid)
            side.request_status.append(unattempted if k is None else codes[k])
            side.latency_ms.append(None if k is None else stored.latency_ms[k])
            side.records.append("null" if k is None else stored.texts[k])
        return side

    def _losses(self, P: np.ndarray, width: np.ndarray) -> list[float | None]:
        """:func:`loss_of` of each question's probabilities (``P[i, :width[i]]``, none where
        ``width`` is 0), rounded to 4 decimals: against the hard label where there is one within
        them, else against the soft target of the same width; None otherwise."""
        loss: list[float | None] = [None] * self.n
        lab = np.asarray(self.layout.target_label)
        hard = np.flatnonzero((width > 0) & (lab >= 0) & (lab < width))
        p = np.maximum(P[hard, lab[hard]], NLL_FLOOR)
        for i, x in zip(hard.tolist(), p.tolist()):
            loss[i] = round(-math.log(x), 4)
        for i, gold in self.golds.items():
            if width[i]:
                loss[i] = _loss4(loss_of(P[i, : width[i]].tolist(), gold))
        return loss

    def columns(self) -> dict[str, Any]:
        return {
            "n": self.n, "requests": len(self.request_ids),
            "strings": {**self.strings, "statuses": self.statuses.values, "reasons": self.reasons.values,
                        "cands": self.cand_values, "instr": self.instr.values},
            "r": self.r, "q": self.q, "t": self.t, "c": self.c, "ins": self.ins, "lab": self.label,
            "soft": self.soft, "slices": dict(sorted(self.slices.items())), "request_ids": self.request_ids,
        }

    def details(self, sides: Mapping[str, Side]) -> list[str]:
        """The JSON text of each request's detail: the request (its questions coded into ``qsets``:
        requests share few of them) and each side's stored record without its shared fields."""
        out = ['{"req":' + text for text in self.request_json]
        for name, side in sides.items():
            head = f',"{name}":'
            out = [d + head + text for d, text in zip(out, side.records)]
        return [d + "}" for d in out]


@dataclass
class Stored:
    """The prediction records of one pass, in log order: per record its request id, status,
    latency (ms) and text (:func:`stored_records`)."""

    request_ids: list[str]
    status: list[str]
    latency_ms: list[float | None]
    texts: list[str]
    shared: dict[str, Any]
    order: list[str]


def stored_records(predictions: Mapping[str, Any]) -> Stored:
    """One pass over the prediction records: per request its status, latency (ms) and the record
    as JSON without the fields every record holds with one value (the model, the run's identity,
    ``usage: null``...), which are returned once, with the first record's key order.

    A field stays shared while every record so far holds it with one value (of one type); when a
    record differs, the records before it all held that value, so it is added back to their texts."""
    rids: list[str] = []
    status: list[Any] = []
    latency: list[Any] = []
    texts: list[str] = []
    shared: dict[str, Any] | None = None
    order: list[str] = []
    for rid, record in predictions.items():
        if shared is None:
            shared = {k: v for k, v in record.items() if k not in RECORD_OMIT}
            order = list(shared)
            keys, types, skip = tuple(shared), tuple(map(type, shared.values())), RECORD_OMIT | shared.keys()
        elif not (shared.items() <= record.items() and tuple(map(type, map(record.__getitem__, keys))) == types):
            gone = [k for k, v in shared.items() if not _same(record.get(k, _ABSENT), v)]
            piece = ",".join(f"{dumps(k)}:{dumps(shared.pop(k))}" for k in gone)
            texts = ["{" + piece + "}" if text == "{}" else text[:-1] + "," + piece + "}" for text in texts]
            keys, types, skip = tuple(shared), tuple(map(type, shared.values())), RECORD_OMIT | shared.keys()
        rids.append(rid)
        status.append(record.get("status"))
        latency.append(record.get("latency_s"))
        texts.append(dumps({k: v for k, v in record.items() if k not in skip}))
    latency_ms = [round(float(x) * 1000, 3) if isinstance(x, int | float) and math.isfinite(x) else None for x in latency]
    return Stored(rids, [_text(x) for x in status], latency_ms, texts, shared or {}, order)


def side_columns(side: Side) -> dict[str, Any]:  # what the page's script reads of one side
    return {"st": side.status, "why": side.reason, "ok": side.correct, "p": side.probs, "loss": side.loss,
            "rst": side.request_status, "lat": side.latency_ms}


@dataclass
class PageData:
    """The embedded document of one page: ``columns`` (always complete) and per request a detail
    text or None (left out for the byte budget), with the counts the page's note states."""

    columns: dict[str, Any]
    body: str  # the columns as JSON text (:func:`dumps`)
    details: list[str | None]
    excerpts: list[str | None]
    kept: int
    total: int

    def json(self) -> str:
        """The document as one JSON text, escaped for its element (:func:`script_json`)."""
        details = ",".join("null" if d is None else d for d in self.details)
        return script_json("".join((self.body[:-1], f',"kept":{self.kept},"total":{self.total},"details":[', details,
                                    '],"excerpts":', dumps(self.excerpts), "}")))


def _select(asm: Assembly, columns: dict[str, Any], ranks: list[int], sides: Mapping[str, Side], budget: int | None) -> PageData:
    """``columns`` with a detail for every request when the whole document fits ``budget`` bytes,
    else details for the most important requests first (lowest rank, then snapshot order) while
    they fit; the others keep a state excerpt."""
    R = len(asm.request_ids)
    details: list[str | None] = list(asm.details(sides))
    asm.request_json = []  # held once, in the details
    for side in sides.values():
        side.records = []
    columns["qsets"] = asm.qsets.values
    columns["records"] = {name: {"shared": side.shared, "order": side.order} for name, side in sides.items()}
    body = dumps(columns)
    if budget is not None:
        sizes = [_size(d) + 1 for d in details]  # type: ignore[arg-type]
        room = budget - _size(body)
        if sum(sizes) > room:
            excerpt = [_size(asm.excerpts[r]) + 3 for r in range(R)]
            room -= sum(excerpt)  # as if every detail were left out: a detail kept saves its excerpt
            spent, keep = 0, [False] * R
            for r in sorted(range(R), key=lambda r: (ranks[r], r)):
                cost = sizes[r] - excerpt[r]
                if spent + cost <= room:
                    spent += cost
                    keep[r] = True
            details = [d if keep[r] else None for r, d in enumerate(details)]
    excerpts = [None if details[r] is not None else asm.excerpts[r] for r in range(R)]
    return PageData(columns, body, details, excerpts, sum(d is not None for d in details), R)


def _size(text: str) -> int:
    """UTF-8 bytes of ``text`` (its length when ASCII, as every :func:`dumps` text is)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _request_ranks(asm: Assembly, sides: Sequence[Side], flips: list[int] | None = None) -> list[int]:
    """0: a flip (comparison) or an answer that is not ``ok``; 1: a wrong answer; 2: the rest."""
    ok = asm.statuses.index["ok"]
    bad = np.zeros(asm.n, dtype=bool)
    wrong = np.zeros(asm.n, dtype=bool)
    for s in sides:
        bad |= np.array(s.status) != ok
        wrong |= np.array(s.correct) == 0
    if flips is not None:
        bad |= np.isin(np.array(flips), (1, 2))
    r = np.array(asm.r, dtype=np.int64)
    R = len(asm.request_ids)
    ranks = np.full(R, 2, dtype=np.int64)
    ranks[np.bincount(r, weights=wrong, minlength=R) > 0] = 1
    ranks[np.bincount(r, weights=bad, minlength=R) > 0] = 0
    return ranks.tolist()


def run_data(questions: Iterable[Mapping[str, Any]], snapshot: Any, predictions: Mapping[str, Any],
             budget: int | None = None) -> PageData:
    """Every question of one run: the snapshot's questions with the run's judgement of each."""
    asm = Assembly(snapshot)
    side = asm.side(questions, predictions)
    return _select(asm, {**asm.columns(), **side_columns(side)}, _request_ranks(asm, [side]), {"raw": side}, budget)


def flips_of(a: Side, b: Side) -> list[int]:
    """Per question: -1 without a hard label, else the index in :data:`FLIPS`."""
    ca, cb = np.array(a.correct, dtype=np.int64), np.array(b.correct, dtype=np.int64)
    flips = np.where(ca == 1, np.where(cb == 1, 0, 1), np.where(cb == 1, 2, 3))
    return np.where((ca < 0) | (cb < 0), -1, flips).tolist()


def comparison_data(questions_a: Iterable[Mapping[str, Any]], questions_b: Iterable[Mapping[str, Any]], snapshot: Any,
                    predictions_a: Mapping[str, Any], predictions_b: Mapping[str, Any], budget: int | None = None) -> PageData:
    """Every question of the snapshot with both models' judgements, side by side, and its flip."""
    asm = Assembly(snapshot)
    a, b = asm.side(questions_a, predictions_a), asm.side(questions_b, predictions_b)
    flips = flips_of(a, b)
    columns = {**asm.columns(), "a": side_columns(a), "b": side_columns(b), "flip": flips}
    return _select(asm, columns, _request_ranks(asm, [a, b], flips), {"raw_a": a, "raw_b": b}, budget)
