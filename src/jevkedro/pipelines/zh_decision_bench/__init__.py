"""zh-decision-bench v0.2 (``CodyQin/zh-decision-bench``): source mapping and ``official`` report.

Upstream rows (one JSON object per line): ``id, domain, source, state, questions, gold,
difficulty, notes, version``. Mapping (family spec §4, §7):

- one request per row, all of its questions together, in the file's row order
  (``voice_routing.jsonl`` then ``business_scenarios.jsonl``);
- the request holds ``state`` and the questions (``type``, ``instructions``, ``criteria``) only;
  ``id``, ``gold``, ``notes``, ``source``, ``difficulty`` and ``version`` go to other columns;
- choice candidates: criteria keys in insertion order; score: ``"0".."K-1"``, the gold level
  *name* mapped to its list position; noul: ``true``, ``false`` in that order (gold true -> 0),
  so argmax ties go to ``true`` as upstream's ``numpy.argmax``.

``official`` is the JevalKit reference-protocol report with a right-closed 15-bin ECE; ``task``
is the question id (``route``, ``urgency``, ``escalate``, ``scam``). No temperature is refit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare, wire_question
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SourceFormatError, check_source, read_jsonl
from jevkedro.nodes.validate import QuestionTable
from jevkedro.protocol import NOUL_ORDER_TRUE_FIRST, SnapshotRow, Target

FAMILY = "zh_decision_bench"
VIEWS = ("zh_decision_bench",)
ROW_KEYS = ("id", "domain", "source", "state", "questions", "gold", "difficulty", "notes", "version")
OFFICIAL_SLICES = {
    "task": "question",
    "domain": "domain",
    "language": "language",
    "difficulty": "difficulty",
    "version": "version",
    "domain_task": ("domain", "question"),
}


def _target(path: Path, lineno: int, qid: str, question: dict[str, Any], gold: Any) -> Target:
    qtype, criteria = question["type"], question.get("criteria")
    where = f"{path}:{lineno}: question {qid!r}"
    if qtype == "choice":
        keys = list(criteria)
        if gold not in keys:
            raise SourceFormatError(f"{where}: gold {gold!r} is not one of the options {keys}")
        return Target(label=keys.index(gold))
    if qtype == "score":
        if gold not in criteria:
            raise SourceFormatError(f"{where}: gold level {gold!r} is not one of the levels {criteria}")
        return Target(label=criteria.index(gold))
    if qtype == "noul":
        if not isinstance(gold, bool):
            raise SourceFormatError(f"{where}: noul gold must be a JSON boolean, got {gold!r}")
        return Target(label=NOUL_ORDER_TRUE_FIRST.index("true" if gold else "false"))
    raise SourceFormatError(f"{where}: unknown question type {qtype!r}")


def map_row(path: Path, lineno: int, obj: dict[str, Any]) -> SnapshotRow:
    """One upstream row -> one snapshot row (the request never sees gold or metadata)."""
    missing = [k for k in ROW_KEYS if k not in obj]
    if missing:
        raise SourceFormatError(f"{path}:{lineno}: missing field(s) {missing}")
    if not isinstance(obj["questions"], dict) or not obj["questions"]:
        raise SourceFormatError(f"{path}:{lineno}: questions must be a non-empty object")
    questions, candidates, targets = {}, {}, {}
    for qid, q in obj["questions"].items():
        if qid not in obj["gold"]:
            raise SourceFormatError(f"{path}:{lineno}: no gold for question {qid!r}")
        wire, candidates[qid] = wire_question(f"{path}:{lineno}", qid, q, NOUL_ORDER_TRUE_FIRST)
        questions[qid] = wire
        targets[qid] = _target(path, lineno, qid, wire, obj["gold"][qid])
    return SnapshotRow(
        request_id=str(obj["id"]),
        request={"state": obj["state"], "questions": questions},
        candidates=candidates,
        targets=targets,
        slices={"domain": obj["domain"], "difficulty": obj["difficulty"], "version": str(obj["version"]),
                "language": "zh", "file": path.stem},
        source={"id": obj["id"], "file": path.name, "line": lineno, "source": obj["source"], "notes": obj["notes"]},
    )


def read_release(options: PrepareOptions, view: str = "zh_decision_bench") -> Release:
    """The v0.2 release folder (``voice_routing.jsonl``, ``business_scenarios.jsonl``), each file
    checked against its pinned sha256 (official data) and read as ``(path, line, record)``."""
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    check_data_kind(source, FAMILY, data)
    pinned = data in manifest["sources"]
    pins = manifest["sources"][data] if pinned else [{"file": f} for f in manifest["files"]]
    files, records = [], []
    for pin in pins:
        path = source / pin["file"]
        files.append(check_source(path, pin if pinned else None))
        records.extend((path, lineno, obj) for lineno, obj in read_jsonl(path))
    return Release(FAMILY, data, source, tuple(files), records, options)


def build(release: Release, view: str = "zh_decision_bench") -> PreparedView:
    """Map the release's rows, in file order, to snapshot rows (pure)."""
    manifest = family_manifest(FAMILY)
    rows = [map_row(path, lineno, obj) for path, lineno, obj in release.content]
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data),
                        notes={"release": manifest["upstream"]["release"]})


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: the reference-protocol report, right-closed 15-bin ECE (family spec §7)."""
    return reference_report(table, OFFICIAL_SLICES, "equal_width_right_closed",
                            family=FAMILY, release=family_manifest(FAMILY)["upstream"]["release"],
                            temperature_refit=False)
