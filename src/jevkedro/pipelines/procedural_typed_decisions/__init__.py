"""Procedural Typed Decisions (``tasksource/procedural-typed-decisions``, 18-task release, config
``all``, split ``test``): source mapping and ``official`` report. Decisions on the spec's Unknowns
are listed in this package's README.md.

Upstream: ``all/test-*.parquet``; a row has ``id`` (``task:split:index``), ``task``, ``level``
(0-4), ``state`` (JSON text or rendered text), ``questions`` and ``answers`` (JSON text, System
One shapes). Mapping (the family README):

- one request per row, in file order, with every question of the row; nothing is filtered by
  task, level or option count; ``answers``, ``id``, ``task`` and ``level`` never reach the request;
- state: text that is the JSON of an object is sent decoded; anything else (tables, CSV,
  ``key=value`` lines, prose, other JSON values) is sent as the original string;
- candidates: noul ``true``, ``false`` (the source fixes no order, docs/protocol.md §1); choice the
  criteria keys in order; score ``"0".."K-1"`` by list position;
- targets: choice and score one-hot (``label``); rule nouls 0.0/1.0 -> ``label``; the documented
  pure-posterior nouls (``graded_nouls`` in manifest.json, by task and question key, never by
  value) stay soft, ``Target(label=None, probabilities=(p, 1 - p))``, so they count in probability
  loss and posterior MAE only, never in hard accuracy or ECE.

``official`` is the JevalKit reference-protocol report (generic 15-bin equal-width ECE over hard
targets) with task, level, task x level, question and target-kind groups, plus ``posterior_mae``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare, wire_question
from jevkedro.nodes.parquet_source import read_parquet_rows, where
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError
from jevkedro.nodes.sources import SourceJSONError, check_source, json_cell, read_source_json
from jevkedro.nodes.validate import QuestionTable
from jevkedro.protocol import NOUL_ORDER_TRUE_FIRST, SnapshotRow, Target

FAMILY = "procedural_typed_decisions"
VIEWS = ("procedural_typed_decisions",)
RELEASE_GLOB = "all/test-*.parquet"
REQUIRED_COLUMNS = ("id", "task", "level", "state", "questions", "answers")
LEVELS = range(5)
OFFICIAL_SLICES = {
    "task": "task",
    "type": "type",
    "domain": "domain",
    "language": "language",
    "difficulty": "difficulty",
    "task_difficulty": ("task", "difficulty"),
    "task_question": ("task", "question"),
    "target_kind": "target_kind",
}
POSTERIOR_NOTE = ("Pure-posterior nouls are soft targets {true: p, false: 1 - p}: scored by probability loss "
                  "(NLL/Brier/KL) and posterior MAE |P(true) - p| only, never by hard accuracy or ECE. The "
                  "dataset card rounds them to yes/no instead, so card numbers are not comparable; nor are "
                  "RSI-Jev's scores on an earlier snapshot.")


# ---------------------------------------------------------------------------------------------
# source mapping


def decode_state(loc: str, text: Any) -> tuple[Any, str]:
    """``(state to send, "json" | "text")`` (Unknown 7): JSON text of an object is decoded, like
    the other JSON-state families; everything else is sent exactly as the source wrote it."""
    if not isinstance(text, str):
        raise SourceFormatError(f"{loc}: state must be a string, got {type(text).__name__}")
    if text.lstrip().startswith("{"):
        try:
            value = read_source_json(text)  # a repeated key or a number no double holds is refused
        except SourceJSONError as exc:
            if exc.syntax:
                return text, "text"
            raise SourceFormatError(f"{loc}: state {exc}") from None
        if isinstance(value, dict):
            return value, "json"
    return text, "text"


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _one_hot_check(where_: str, probs: Any, candidates: list[str], index: int) -> None:
    """An answer's ``probabilities`` (when present) must be the one-hot of its label."""
    if probs is None:
        return
    want = {c: float(i == index) for i, c in enumerate(candidates)}
    if not isinstance(probs, Mapping) or set(probs) != set(candidates) or any(
            not _number(probs[c]) or float(probs[c]) != want[c] for c in candidates):
        raise SourceFormatError(f"{where_}: probabilities {probs!r} are not the one-hot of {candidates[index]!r}")


def map_target(loc: str, task: str, qid: str, qtype: str, candidates: list[str], answer: Any,
               graded: frozenset[tuple[str, str]]) -> tuple[Target, str]:
    """``(target, target kind "rule" | "posterior")`` of one answer."""
    at = f"{loc}: question {qid!r}"
    if not isinstance(answer, Mapping):
        raise SourceFormatError(f"{at}: answer must be an object")
    if answer.get("type") not in (None, qtype):
        raise SourceFormatError(f"{at}: answer type {answer.get('type')!r} for a {qtype} question")
    if qtype == "choice":
        choice = answer.get("choice")
        if choice not in candidates:
            raise SourceFormatError(f"{at}: choice {choice!r} is not one of the options {candidates}")
        index = candidates.index(choice)
        _one_hot_check(at, answer.get("probabilities"), candidates, index)
        return Target(label=index), "rule"
    if qtype == "score":
        # Unknown 4: a score must be an integer-valued level index; anything else is refused,
        # never rounded.
        score = answer.get("score")
        if not _number(score) or float(score) != int(score) or not 0 <= int(score) < len(candidates):
            raise SourceFormatError(f"{at}: score {score!r} is not an integer level in 0..{len(candidates) - 1}")
        _one_hot_check(at, answer.get("probabilities"), candidates, int(score))
        return Target(label=int(score)), "rule"
    p = answer.get("noul")
    if not _number(p) or not 0.0 <= p <= 1.0:
        raise SourceFormatError(f"{at}: noul {p!r} is not a probability in [0, 1]")
    p = float(p)
    by_key = {"true": p, "false": 1.0 - p}
    if (task, qid) in graded:  # soft, whatever the value (k/n can be exactly 0 or 1)
        return Target(probabilities=tuple(by_key[c] for c in candidates)), "posterior"
    if p not in (0.0, 1.0):
        raise SourceFormatError(
            f"{at}: noul {p!r} of task {task!r} is fractional, but ({task!r}, {qid!r}) is not a listed "
            "pure-posterior question; add it to graded_nouls in manifest.json if it is one")
    return Target(label=candidates.index("true" if p == 1.0 else "false")), "rule"


def map_row(path: Path, index: int, raw: Mapping[str, Any], graded: frozenset[tuple[str, str]]) -> SnapshotRow:
    """One upstream row -> one snapshot row (the request never sees answers or metadata)."""
    loc = where(path, index)
    rid, task, level = raw.get("id"), raw.get("task"), raw.get("level")
    if not isinstance(task, str) or not isinstance(rid, str) or not rid.startswith(f"{task}:test:"):
        raise SourceFormatError(f"{loc}: id {rid!r} is not '<task>:test:<index>' for task {task!r}")
    if not isinstance(level, int) or isinstance(level, bool) or level not in LEVELS:
        raise SourceFormatError(f"{loc}: level {level!r} is not one of 0-4")
    state, state_format = decode_state(loc, raw["state"])
    questions = json_cell(loc, "questions", raw["questions"])
    answers = json_cell(loc, "answers", raw["answers"])
    if not isinstance(questions, dict) or not questions:
        raise SourceFormatError(f"{loc}: questions must be a non-empty object")
    if not isinstance(answers, dict) or set(answers) != set(questions):
        have = sorted(answers) if isinstance(answers, dict) else type(answers).__name__
        raise SourceFormatError(f"{loc}: answer keys {have} are not the question keys {sorted(questions)}")
    wire_questions, candidates, targets, kinds = {}, {}, {}, {}
    for qid, q in questions.items():
        wire, candidates[qid] = wire_question(loc, qid, q, NOUL_ORDER_TRUE_FIRST)
        wire_questions[qid] = wire
        targets[qid], kind = map_target(loc, task, qid, wire["type"], candidates[qid], answers[qid], graded)
        kinds[qid] = {"target_kind": kind}
    return SnapshotRow(
        request_id=rid,
        request={"state": state, "questions": wire_questions},
        candidates=candidates,
        targets=targets,
        slices={"task": task, "difficulty": str(level), "domain": "unknown", "language": "en",
                "state_format": state_format, "questions": kinds},
        source={"id": rid, "file": path.name, "row": index + 1, "task": task, "level": level},
    )


def graded_nouls() -> frozenset[tuple[str, str]]:
    return frozenset((g["task"], g["question"]) for g in family_manifest(FAMILY)["release"]["graded_nouls"])


def check_tasks(rows: list[SnapshotRow], where_: str, release: Mapping[str, Any]) -> None:
    """The 18-task release: name any known task that is missing and a wrong number of tasks."""
    found = Counter(row.slices["task"] for row in rows)
    diffs = [f"task {t}: missing" for t in release["known_tasks"] if t not in found]
    if len(found) != release["tasks"]:
        diffs.append(f"tasks: found {len(found)}, expected {release['tasks']}")
    if diffs:
        raise SnapshotError(f"procedural_typed_decisions from {where_}: tasks differ from the manifest: "
                            + "; ".join(diffs))


def read_release(options: PrepareOptions, view: str = "procedural_typed_decisions") -> Release:
    """Read a release folder holding ``all/test-*.parquet`` (as downloaded from the Hub).

    Checks the folder's data-kind marker, the file names and sha256 against the pins (where the
    manifest pins them), every required column and each file's in-file stamp; the content is
    ``(path, row index, row)`` per Parquet row, files in name order, rows in file order.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    check_data_kind(source, FAMILY, data)
    paths = sorted(source.glob(RELEASE_GLOB))
    if not paths:
        raise SnapshotError(f"source files not found: {source / RELEASE_GLOB}; download the release as README.md says")
    pins = {p["file"]: p for p in manifest["sources"].get(data, [])}
    if pins and sorted(pins) != [str(p.relative_to(source)) for p in paths]:
        raise SnapshotError(f"{source}: files {[str(p.relative_to(source)) for p in paths]} "
                            f"are not the pinned {sorted(pins)}")
    files, records = [], []
    for path in paths:
        files.append(check_source(path, pins.get(str(path.relative_to(source)))))
        parquet = read_parquet_rows(path, REQUIRED_COLUMNS)
        check_data_kind(source, FAMILY, data, file_marker=parquet.file_marker)
        records.extend((path, i, raw) for i, raw in enumerate(parquet.rows))
    return Release(FAMILY, data, source, tuple(files), records, options, notes={"files_pinned": bool(pins)})


def build(release: Release, view: str = "procedural_typed_decisions") -> PreparedView:
    """Map the release's rows in order and check the 18-task release's tasks (official and
    synthetic data)."""
    manifest = family_manifest(FAMILY)
    graded = graded_nouls()
    rows = [map_row(path, index, raw, graded) for path, index, raw in release.content]
    if release.data in ("official", "synthetic"):
        check_tasks(rows, str(release.source / RELEASE_GLOB), manifest["release"])
    tasks = Counter(row.slices["task"] for row in rows)
    levels = Counter(row.slices["difficulty"] for row in rows)
    return PreparedView(
        view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data),
        notes={"release": manifest["upstream"]["release"], "data_kind": manifest["data_kinds"][release.data],
               "files_pinned": release.notes["files_pinned"], "rows_by_task": dict(sorted(tasks.items())),
               "rows_by_level": dict(sorted(levels.items())),
               "graded_nouls": sorted(f"{t}/{q}" for t, q in graded)},
    )


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


# ---------------------------------------------------------------------------------------------
# scoring


def posterior_mae(table: QuestionTable, mask: np.ndarray) -> dict[str, Any]:
    """Mean |P(true) - p| over the valid answers to pure-posterior nouls in ``mask``.

    ``questions`` counts every posterior question of the group; ``n`` those with a valid answer
    (the MAE's denominator); the rest are in the report's coverage.
    """
    posterior = mask & ~table.unscored & (table.slices["target_kind"] == "posterior")
    rows = posterior & table.valid
    # candidates of a noul are ["true", "false"] here, so column 0 is P(true) and the target p
    err = np.abs(table.P[rows, 0] - table.Y[rows, 0])
    return {"mae": float(err.mean()) if len(err) else None, "n": int(rows.sum()), "questions": int(posterior.sum())}


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: the reference-protocol report plus posterior MAE by task, level and question."""
    manifest = family_manifest(FAMILY)
    mae: dict[str, Any] = {"overall": posterior_mae(table, np.ones(len(table), dtype=bool))}
    for name, cols in (("by_task", ("task",)), ("by_difficulty", ("difficulty",)),
                       ("by_task_question", ("task", "question"))):
        keys = np.array(["/".join(v) for v in zip(*(table.slices[c] for c in cols))], dtype=object)
        posterior_keys = sorted(set(keys[table.slices["target_kind"] == "posterior"].tolist()))
        mae[name] = {k: posterior_mae(table, keys == k) for k in posterior_keys}
    return reference_report(
        table, OFFICIAL_SLICES, manifest["scoring"]["reference_ece"],
        family=FAMILY, data=snapshot.data, data_kind=manifest["data_kinds"][snapshot.data], release=manifest["upstream"]["release"],
        posterior_note=POSTERIOR_NOTE, posterior_mae=mae,
    )
