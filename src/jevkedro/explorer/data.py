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

from jevkedro.nodes.snapshot import each_row

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
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
        return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str)


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


@dataclass(frozen=True)
class Row:
    """What the explorer reads of a snapshot row (a :class:`~jevkedro.protocol.SnapshotRow` or its dict)."""

    request_id: str
    request: Mapping[str, Any]
    candidates: Mapping[str, list[str]]
    targets: Mapping[str, Any]
    slices: Mapping[str, Any]


def _row(row: Any) -> Row:
    if isinstance(row, Mapping):
        return Row(row["request_id"], row["request"], row["candidates"], row.get("targets") or {}, row.get("slices") or {})
    return Row(row.request_id, row.request, row.candidates, row.targets, row.slices or {})


def snapshot_rows(snapshot: Any) -> Iterable[Row]:
    """The rows of a snapshot (anything with ``rows``) or of a sequence of rows, for one pass (a
    loaded snapshot's rows decoded for it are not kept on the snapshot)."""
    for row in each_row(getattr(snapshot, "rows", snapshot)):
        yield _row(row)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def request_slices(row: Row) -> dict[str, str]:
    """A request's own slice values as text (``type`` and ``question`` are columns of their own)."""
    return {k: _text(v) for k, v in row.slices.items() if k not in ("questions", "type", "question")}


def question_slices(row: Row, qid: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """A question's slice values as the report groups them: its request's slices (``base``, when
    already made), then its own (``slices.questions.<id>``), as text."""
    base = request_slices(row) if base is None else base
    own = (row.slices.get("questions") or {}).get(qid)
    if not own:
        return base
    out = {**base, **{k: _text(v) for k, v in own.items()}}
    out.pop("type", None)
    out.pop("question", None)
    return out


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


def shared_fields(records: Iterable[Mapping[str, Any] | None]) -> tuple[dict[str, Any], list[str]]:
    """The fields every record holds with one value (the model, the run's identity, ``usage: null``…)
    and the key order of the first record: the page stores them once, each record without them,
    and shows every record whole again (:func:`stored_record` is the other half)."""
    common: dict[str, Any] | None = None
    order: list[str] = []
    for rec in records:
        if rec is None:
            continue
        if common is None:
            common = {k: v for k, v in rec.items() if k not in RECORD_OMIT}
            order = [k for k in rec if k not in RECORD_OMIT]
            continue
        for k in [k for k, v in common.items() if not _same(rec.get(k, _ABSENT), v)]:
            del common[k]
        if not common:
            break
    return common or {}, order


_ABSENT = object()
_NO_ANSWER = ("unattempted", None, None, None)


def stored_record(record: Mapping[str, Any] | None, common: Mapping[str, Any]) -> dict[str, Any] | None:
    """``record`` without the fields the page stores once (``common``) and those it shows elsewhere."""
    return None if record is None else {k: v for k, v in record.items() if k not in RECORD_OMIT and k not in common}


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


class Assembly:
    """Builds the columns of one page over a snapshot (questions in snapshot order)."""

    def __init__(self) -> None:
        self.qids, self.types, self.reasons, self.cands, self.instr = Codes(), Codes(), Codes(), Codes(), Codes()
        self.statuses = Codes()
        for s in STATUSES:
            self.statuses(s)
        self.qsets = Codes()
        self.slice_codes: dict[str, Codes] = {}
        self.slice_cols: dict[str, list[int]] = {}
        self.request_ids: list[str] = []
        self.request_json: list[str] = []  # the request, its questions object coded into qsets
        self.excerpts: list[str] = []
        self.r: list[int] = []
        self.q: list[int] = []
        self.t: list[int] = []
        self.c: list[int] = []
        self.ins: list[int] = []
        self.label: list[int] = []
        self.hard: list[bool] = []
        self.soft: dict[str, list[int]] = {}
        self.golds: list[Gold] = []
        self.n = 0

    def add_rows(self, rows: Iterable[Row]) -> None:
        for row in rows:
            r = len(self.request_ids)
            self.request_ids.append(row.request_id)
            request = dict(row.request)
            questions = request.get("questions") or {}
            request["questions"] = self.qsets(questions, dumps(questions))
            self.request_json.append(dumps(request))
            text = state_text(request.get("state"))
            self.excerpts.append(text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…")
            base = request_slices(row)
            for qid, spec in (row.request.get("questions") or {}).items():
                i = self.n
                gold = _gold(row.targets.get(qid, {}))
                self.golds.append(gold)
                self.r.append(r)
                self.q.append(self.qids(qid))
                self.t.append(self.types(str(spec.get("type", ""))))
                cands = list(row.candidates.get(qid) or [])
                self.c.append(self.cands(cands, tuple(cands)))
                self.ins.append(self.instr(_text(spec.get("instructions"))))
                self.label.append(-1 if gold.label is None else gold.label)
                self.hard.append(gold.label is not None and not gold.unscored)
                if gold.soft is not None:
                    self.soft[str(i)] = _scaled(gold.soft) or []
                for name, value in question_slices(row, qid, base).items():
                    col = self.slice_cols.get(name)
                    if col is None:
                        col = self.slice_cols[name] = [-1] * i
                        self.slice_codes[name] = Codes()
                    col.append(self.slice_codes[name](value))
                self.n += 1
                for col in self.slice_cols.values():  # a slice this question lacks
                    if len(col) < self.n:
                        col.append(-1)

    def side(self, questions: Iterable[Mapping[str, Any]], predictions: Mapping[str, Any]) -> Side:
        """One model's question records (``questions.jsonl`` rows) and prediction records, aligned
        to the page's questions; a question without a record reads ``unattempted``. The records are
        read twice, one at a time (their shared fields, then each without them, as JSON text)."""
        by_key = {(rec["request_id"], rec["question"]): (_text(rec.get("status")), rec.get("reason"), rec.get("probabilities"),
                                                         rec.get("correct")) for rec in questions}
        side = Side()
        qid_of = self.qids.values
        for i in range(self.n):
            status, reason, probs, correct = by_key.get((self.request_ids[self.r[i]], qid_of[self.q[i]]), _NO_ANSWER)
            side.status.append(self.statuses(status))
            side.reason.append(-1 if reason is None else self.reasons(_text(reason)))
            probs = probs if status == "ok" else None
            side.probs.append(_scaled(probs))
            side.loss.append(_loss4(loss_of(probs, self.golds[i])))
            side.correct.append(-1 if not self.hard[i] else int(bool(correct and status == "ok")))
        del by_key
        side.shared, side.order = shared_fields(predictions.values())
        seen: dict[str, tuple[int, float | None, str]] = {}
        for rid, record in predictions.items():
            seen[rid] = (self.statuses(_text(record.get("status"))), _latency_ms(record), dumps(stored_record(record, side.shared)))
        unattempted = (self.statuses("unattempted"), None, "null")
        for rid in self.request_ids:
            status, latency, text = seen.get(rid, unattempted)
            side.request_status.append(status)
            side.latency_ms.append(latency)
            side.records.append(text)
        return side

    def columns(self) -> dict[str, Any]:
        slices = {name: {"values": self.slice_codes[name].values, "codes": col} for name, col in sorted(self.slice_cols.items())}
        return {
            "n": self.n, "requests": len(self.request_ids),
            "strings": {"qids": self.qids.values, "types": self.types.values, "statuses": self.statuses.values,
                        "reasons": self.reasons.values, "cands": self.cands.values, "instr": self.instr.values},
            "r": self.r, "q": self.q, "t": self.t, "c": self.c, "ins": self.ins, "lab": self.label,
            "soft": self.soft, "slices": slices, "request_ids": self.request_ids,
        }

    def detail(self, r: int, sides: Mapping[str, Side]) -> str:
        """The JSON text of request ``r``'s detail: the request (its questions coded into ``qsets``:
        requests share few of them) and each side's stored record without its shared fields."""
        parts = [f'"req":{self.request_json[r]}'] + [f'"{name}":{side.records[r]}' for name, side in sides.items()]
        return "{" + ",".join(parts) + "}"


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
        """The document as one JSON text, escaped for its element (:func:`script_json`) part by part."""
        body = script_json(dumps({**self.columns, "kept": self.kept, "total": self.total}))
        parts = [body[:-1], ',"details":[']
        parts += [",".join("null" if d is None else script_json(d) for d in self.details)]
        parts += ['],"excerpts":', script_json(dumps(self.excerpts)), "}"]
        return "".join(parts)


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
        sizes = [len(d.encode("utf-8")) + 1 for d in details]  # type: ignore[union-attr]
        room = budget - len(dumps(columns).encode("utf-8"))
        if sum(sizes) > room:
            excerpt = [len(asm.excerpts[r].encode("utf-8")) + 3 for r in range(R)]
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


def _request_ranks(asm: Assembly, sides: Sequence[Side], flips: list[int] | None = None) -> list[int]:
    """0: a flip (comparison) or an answer that is not ``ok``; 1: a wrong answer; 2: the rest."""
    ranks = [2] * len(asm.request_ids)
    ok = asm.statuses.index["ok"]
    for i in range(asm.n):
        r = asm.r[i]
        if any(s.status[i] != ok for s in sides) or (flips is not None and flips[i] in (1, 2)):
            ranks[r] = 0
        elif any(s.correct[i] == 0 for s in sides):
            ranks[r] = min(ranks[r], 1)
    return ranks


def run_data(questions: Iterable[Mapping[str, Any]], snapshot: Any, predictions: Mapping[str, Any],
             budget: int | None = None) -> PageData:
    """Every question of one run: the snapshot's questions with the run's judgement of each."""
    asm = Assembly()
    asm.add_rows(snapshot_rows(snapshot))
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
    asm = Assembly()
    asm.add_rows(snapshot_rows(snapshot))
    a, b = asm.side(questions_a, predictions_a), asm.side(questions_b, predictions_b)
    flips = flips_of(a, b)
    columns = {**asm.columns(), "a": side_columns(a), "b": side_columns(b), "flip": flips}
    return _select(asm, columns, _request_ranks(asm, [a, b], flips), {"raw_a": a, "raw_b": b}, budget)
