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
_NO_ANSWER = ("unattempted", None, None, None)


def _latency_ms(record: Mapping[str, Any] | None) -> float | None:
    lat = (record or {}).get("latency_s")
    return round(float(lat) * 1000, 3) if isinstance(lat, int | float) and math.isfinite(lat) else None


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


_MSGSPEC = msgspec.json.Encoder().encode


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


def judged_columns(questions: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The fields the page reads of every question record, as columns: the score node's
    :class:`~jevkedro.nodes.validate.QuestionRecords` gives its own, rows of ``questions.jsonl``
    are read one by one."""
    if isinstance(questions, QuestionRecords):
        return questions.columns()
    cols: dict[str, list[Any]] = {k: [] for k in JUDGED_FIELDS}
    for rec in questions:
        for k in JUDGED_FIELDS:
            cols[k].append(rec.get(k))
    return cols


JUDGED_FIELDS = ("request_id", "question", "status", "reason", "probabilities", "correct")


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
        self.ins: list[int] = []
        self.request_json: list[str] = []  # the request, its questions object coded into qsets
        self.excerpts: list[str] = []
        for _, request in requests:
            request = dict(request)
            questions = request.get("questions") or {}
            request["questions"] = self.qsets(questions, _key(questions))
            self.request_json.append(_request_text(request))
            self.ins.extend(self.instr(_text(spec.get("instructions"))) for spec in questions.values())
            state = state_text(request.get("state"))
            self.excerpts.append(state if len(state) <= EXCERPT_CHARS else state[:EXCERPT_CHARS] + "…")

    def side(self, questions: Iterable[Mapping[str, Any]], predictions: Mapping[str, Any]) -> Side:
        """One model's question records (``questions.jsonl`` rows) and prediction records, aligned
        to the page's questions; a question without a record reads ``unattempted``. The records
        are read once, in order (:func:`stored_records`)."""
        cols = judged_columns(questions)
        rids, qids = self.layout.request_id.tolist(), self.layout.question_ids
        where: Sequence[int] = range(self.n)
        if cols["request_id"] != rids or cols["question"] != qids:  # not in snapshot order, or some missing
            at = {key: j for j, key in enumerate(zip(cols["request_id"], cols["question"]))}
            where = [at.get(key, -1) for key in zip(rids, qids)]
        side = Side()
        status_of = self.statuses
        st_col, why_col, p_col, ok_col = cols["status"], cols["reason"], cols["probabilities"], cols["correct"]
        labels, hard = self.label, self.hard.tolist()
        for i, j in enumerate(where):
            if j < 0:
                status, reason, probs, correct = _NO_ANSWER
            else:
                status, reason, probs, correct = _text(st_col[j]), why_col[j], p_col[j], ok_col[j]
            side.status.append(status_of(status))
            side.reason.append(-1 if reason is None else self.reasons(_text(reason)))
            probs = probs if status == "ok" else None
            side.probs.append(_scaled(probs))
            if not probs:
                side.loss.append(None)
            else:
                lab = labels[i]
                gold = self.golds.get(i) if lab < 0 else None
                side.loss.append(_loss4(loss_of(probs, gold or Gold(lab if lab >= 0 else None, None, False))))
            side.correct.append(-1 if not hard[i] else int(bool(correct and status == "ok")))
        seen, side.shared, side.order = stored_records(predictions, self.statuses)
        unattempted = (self.statuses("unattempted"), None, "null")
        for rid in self.request_ids:
            status, latency, text = seen.get(rid, unattempted)
            side.request_status.append(status)
            side.latency_ms.append(latency)
            side.records.append(text)
        return side

    def columns(self) -> dict[str, Any]:
        return {
            "n": self.n, "requests": len(self.request_ids),
            "strings": {**self.strings, "statuses": self.statuses.values, "reasons": self.reasons.values,
                        "cands": self.cand_values, "instr": self.instr.values},
            "r": self.r, "q": self.q, "t": self.t, "c": self.c, "ins": self.ins, "lab": self.label,
            "soft": self.soft, "slices": dict(sorted(self.slices.items())), "request_ids": self.request_ids,
        }

    def detail(self, r: int, sides: Mapping[str, Side]) -> str:
        """The JSON text of request ``r``'s detail: the request (its questions coded into ``qsets``:
        requests share few of them) and each side's stored record without its shared fields."""
        parts = [f'"req":{self.request_json[r]}'] + [f'"{name}":{side.records[r]}' for name, side in sides.items()]
        return "{" + ",".join(parts) + "}"


def stored_records(predictions: Mapping[str, Any], statuses: Codes) -> tuple[dict[str, tuple[int, float | None, str]],
                                                                             dict[str, Any], list[str]]:
    """One pass over the prediction records: per request id its status code, latency (ms) and the
    record as JSON without the fields every record holds with one value (the model, the run's
    identity, ``usage: null``...), which are returned once, with the first record's key order.

    A field stays shared while every record so far holds it with one value; when a record differs,
    the records before it all held that value, so it is added back to their texts."""
    seen: dict[str, tuple[int, float | None, str]] = {}
    shared: dict[str, Any] | None = None
    order: list[str] = []
    keys: tuple[str, ...] = ()
    for rid, record in predictions.items():
        if shared is None:
            shared = {k: v for k, v in record.items() if k not in RECORD_OMIT}
            order = list(shared)
        else:
            values = tuple(map(record.get, keys))
            if not (record.keys() >= shared.keys() and values == tuple(shared.values())
                    and tuple(map(type, values)) == tuple(map(type, shared.values()))):
                gone = [k for k, v in shared.items() if not _same(record.get(k, _ABSENT), v)]
                piece = ",".join(f"{dumps(k)}:{dumps(shared.pop(k))}" for k in gone)
                for key, (st, lat, text) in seen.items():
                    seen[key] = (st, lat, "{" + piece + "}" if text == "{}" else text[:-1] + "," + piece + "}")
        keys = tuple(shared)
        own = {k: v for k, v in record.items() if k not in RECORD_OMIT and k not in shared}
        seen[rid] = (statuses(_text(record.get("status"))), _latency_ms(record), dumps(own))
    return seen, shared or {}, order


def side_columns(side: Side) -> dict[str, Any]:  # what the page's script reads of one side
    return {"st": side.status, "why": side.reason, "ok": side.correct, "p": side.probs, "loss": side.loss,
            "rst": side.request_status, "lat": side.latency_ms}


@dataclass
class PageData:
    """The embedded document of one page: ``columns`` (always complete) and per request a detail
    text or None (left out for the byte budget), with the counts the page's note states."""

    columns: dict[str, Any]
    details: list[str | None]
    excerpts: list[str | None]
    kept: int
    total: int

    def json(self) -> str:
        """The document as one JSON text, escaped for its element (:func:`script_json`)."""
        body = dumps({**self.columns, "kept": self.kept, "total": self.total})
        details = ",".join("null" if d is None else d for d in self.details)
        return script_json("".join((body[:-1], ',"details":[', details, '],"excerpts":', dumps(self.excerpts), "}")))


def _select(asm: Assembly, columns: dict[str, Any], ranks: list[int], sides: Mapping[str, Side], budget: int | None) -> PageData:
    """``columns`` with a detail for every request when the whole document fits ``budget`` bytes,
    else details for the most important requests first (lowest rank, then snapshot order) while
    they fit; the others keep a state excerpt."""
    R = len(asm.request_ids)
    details: list[str | None] = [asm.detail(r, sides) for r in range(R)]
    asm.request_json = []  # held once, in the details
    for side in sides.values():
        side.records = []
    columns["qsets"] = asm.qsets.values
    columns["records"] = {name: {"shared": side.shared, "order": side.order} for name, side in sides.items()}
    if budget is not None:
        sizes = [_size(d) + 1 for d in details]  # type: ignore[arg-type]
        room = budget - len(dumps(columns).encode("utf-8"))
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
    return PageData(columns, details, excerpts, sum(d is not None for d in details), R)


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
    out = []
    for ca, cb in zip(a.correct, b.correct):
        out.append(-1 if ca < 0 or cb < 0 else (0 if ca and cb else 1 if ca else 2 if cb else 3))
    return out


def comparison_data(questions_a: Iterable[Mapping[str, Any]], questions_b: Iterable[Mapping[str, Any]], snapshot: Any,
                    predictions_a: Mapping[str, Any], predictions_b: Mapping[str, Any], budget: int | None = None) -> PageData:
    """Every question of the snapshot with both models' judgements, side by side, and its flip."""
    asm = Assembly(snapshot)
    a, b = asm.side(questions_a, predictions_a), asm.side(questions_b, predictions_b)
    flips = flips_of(a, b)
    columns = {**asm.columns(), "a": side_columns(a), "b": side_columns(b), "flip": flips}
    return _select(asm, columns, _request_ranks(asm, [a, b], flips), {"raw_a": a, "raw_b": b}, budget)
