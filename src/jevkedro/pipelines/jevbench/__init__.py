"""JevBench (``fstandhartinger/jevbench`` @ ``bb05a335…``): source mapping and ``official`` scorer.

Only this JevBench: other projects of the same name (e.g. the PyPI package ``jevbench`` 0.1.0)
have different tasks, a different record shape (rejected by :func:`map_row`) and are never
scored or reported here. Every ``official`` summary names the repository and commit.

Upstream rows (one JSON object per line in ``datasets/public/<tier>.jsonl``): ``id, family,
state, question, labels, expected, split, group, provenance``. Mapping (the family README):

- one request per task, in the load order ``original, easy, hard`` (file row order within);
  request id = task id;
- the request is ``{"state": state, "questions": {"decision": {type, instructions, criteria}}}``
  with ``criteria`` omitted when null, noul criteria ``{"true", "false"}`` exactly as written;
  ``expected``, ``labels``, ``group``, ``split``, ``provenance`` and the id stay out of it;
- candidates: choice and score = ``labels`` in source order; noul = ``["false", "true"]``, the
  source's label order ``["no", "yes"]`` (docs/protocol.md §1: the source fixes an order). So the
  generic argmax tie (first candidate) and the official tie (smallest label) both give ``no``;
- target: the label index of ``expected``; ``probability`` items also carry ``gold_probs`` as
  the target distribution (generic NLL/Brier use it, accuracy/ECE the label); ``expected =
  null`` or ``provenance.exclude_reason`` -> unscored. The official scorer's own inputs
  (``labels``, raw ``expected``, ``gold_probs``, exclusion) live in the target's ``official``.

``evaluate`` returns the official summary (:mod:`.official`), saved by the catalog as
``official.json`` and logged to MLflow as its own artifact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare
from jevkedro.files import present
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError
from jevkedro.nodes.sources import check_source, read_jsonl
from jevkedro.nodes.validate import QuestionTable
from jevkedro.pipelines.jevbench.scoring import NOUL_LABELS
from jevkedro.protocol import NOUL_ORDER_FALSE_FIRST, SnapshotRow, Target

FAMILY = "jevbench"
VIEWS = ("jevbench",)
QUESTION_ID = "decision"
REQUIRED_KEYS = ("id", "family", "state", "question", "labels", "expected", "split")
# A structured state holding one of these keys would leak the answer; the release's loader refuses it.
LEAKY_STATE_KEYS = frozenset({"expected", "label", "ground_truth", "answer_key"})
NOUL_LABEL_TO_CANDIDATE = {"no": "false", "yes": "true"}


def _fail(path: Path, lineno: int, message: str) -> SourceFormatError:
    return SourceFormatError(f"{path}:{lineno}: {message}")


def _check_labels(path: Path, lineno: int, qtype: str, labels: Any, criteria: Any) -> list[str]:
    if not isinstance(labels, list) or len(labels) < 2 or not all(isinstance(x, str) and x for x in labels):
        raise _fail(path, lineno, f"labels must be a list of at least two non-empty strings, got {labels!r}")
    if len(set(labels)) != len(labels):
        raise _fail(path, lineno, f"labels repeat: {labels}")
    if qtype == "noul":
        if labels != list(NOUL_LABELS):
            raise _fail(path, lineno, f"noul labels must be {list(NOUL_LABELS)}, got {labels}")
        if criteria is not None and (not isinstance(criteria, dict) or not set(criteria) <= {"true", "false"}):
            raise _fail(path, lineno, "noul criteria must be an object with keys 'true' and/or 'false'")
    elif qtype == "choice":
        if criteria is not None and (not isinstance(criteria, dict) or set(criteria) != set(labels)):
            raise _fail(path, lineno, f"choice criteria keys {sorted(criteria) if isinstance(criteria, dict) else criteria!r} "
                                      f"differ from the labels {labels}")
    elif qtype == "score":
        if criteria is not None and (not isinstance(criteria, list) or len(criteria) != len(labels)):
            raise _fail(path, lineno, f"score criteria must be a list with one level per label ({len(labels)})")
        if labels != [str(i) for i in range(len(labels))]:
            raise _fail(path, lineno, f"score labels must be '0'..'{len(labels) - 1}', got {labels}")
    else:
        raise _fail(path, lineno, f"unknown question type {qtype!r}")
    return labels


def _check_expected(path: Path, lineno: int, qtype: str, labels: list[str], expected: Any) -> None:
    if expected is None:
        return
    if qtype == "score":
        if isinstance(expected, bool) or not isinstance(expected, int):
            raise _fail(path, lineno, f"score expected must be an integer level, got {expected!r}")
        if not 0 <= expected < len(labels):
            raise _fail(path, lineno, f"score expected {expected} outside 0..{len(labels) - 1}")
    elif not isinstance(expected, str) or expected not in labels:
        raise _fail(path, lineno, f"expected {expected!r} is not one of the labels {labels}")


def _gold_probs(path: Path, lineno: int, gold: Any, labels: list[str]) -> dict[str, float]:
    if (not isinstance(gold, dict) or not gold or not set(gold) <= set(labels)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1
                       for v in gold.values())):
        raise _fail(path, lineno, f"provenance.gold_probs must map labels {labels} to probabilities, got {gold!r}")
    if abs(math.fsum(gold.values()) - 1.0) > 1e-6:
        raise _fail(path, lineno, f"provenance.gold_probs sums to {math.fsum(gold.values())}, not 1")
    return {lab: float(gold.get(lab, 0.0)) for lab in labels}


def map_row(path: Path, lineno: int, obj: dict[str, Any], tier: str) -> SnapshotRow:
    """One task of ``<tier>.jsonl`` -> one snapshot row (the request never sees gold or metadata)."""
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise _fail(path, lineno, f"missing field(s) {missing}: not a JevBench (fstandhartinger) task")
    task_id = obj["id"]
    if not isinstance(task_id, str) or not task_id.startswith(f"{tier}-"):
        raise _fail(path, lineno, f"id {task_id!r} does not belong to the {tier} tier")
    question = obj["question"]
    if not isinstance(question, dict) or "instructions" not in question:
        raise _fail(path, lineno, "question must be an object with type, instructions and criteria")
    qtype, criteria = question.get("type"), question.get("criteria")
    labels = _check_labels(path, lineno, qtype, obj["labels"], criteria)
    _check_expected(path, lineno, qtype, labels, obj["expected"])
    state = obj["state"]
    if isinstance(state, dict) and LEAKY_STATE_KEYS & set(state):
        raise _fail(path, lineno, f"structured state carries {sorted(LEAKY_STATE_KEYS & set(state))}")
    provenance = obj.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise _fail(path, lineno, "provenance must be an object")
    group = obj.get("group")
    if group is not None and not isinstance(group, str):
        raise _fail(path, lineno, f"group must be a string or null, got {group!r}")

    wire: dict[str, Any] = {"type": qtype, "instructions": question["instructions"]}
    if criteria is not None:
        wire["criteria"] = criteria
    candidates = list(NOUL_ORDER_FALSE_FIRST) if qtype == "noul" else list(labels)
    expected = obj["expected"]
    excluded = provenance.get("exclude_reason")
    gold = _gold_probs(path, lineno, provenance["gold_probs"], labels) if "gold_probs" in provenance else None
    official = {"labels": labels, "expected": expected}
    if gold is not None:
        official["gold_probs"] = gold
    if excluded:
        official["exclude_reason"] = excluded
    if expected is None or excluded:
        target = Target(unscored=True, extra={"official": official})
    else:
        key = NOUL_LABEL_TO_CANDIDATE[expected] if qtype == "noul" else str(expected)
        dist = None
        if gold is not None:
            by_candidate = {(NOUL_LABEL_TO_CANDIDATE[k] if qtype == "noul" else k): v for k, v in gold.items()}
            dist = tuple(by_candidate[c] for c in candidates)
        target = Target(label=candidates.index(key), probabilities=dist, extra={"official": official})
    variant = task_id.rsplit("-", 1)[-1] if tier == "original" and group else ""
    return SnapshotRow(
        request_id=task_id,
        request={"state": state, "questions": {QUESTION_ID: wire}},
        candidates={QUESTION_ID: candidates},
        targets={QUESTION_ID: target},
        slices={"tier": tier, "family": obj["family"], "split": obj["split"], "variant": variant},
        source={"id": task_id, "file": path.name, "line": lineno, "group": group, "provenance": provenance},
    )


TaskRecord = tuple[str, Path, int, dict[str, Any]]  # (tier, file, line, task as read)


def read_tiers(files: list[tuple[str, Path]]) -> tuple[list[TaskRecord], dict[str, int]]:
    """Read ``(tier, path)`` files in the given order: every task as ``(tier, path, line, record)``
    and the number of tasks per tier (a malformed line names file and line)."""
    records: list[TaskRecord] = []
    per_tier: dict[str, int] = {}
    for tier, path in files:
        per_tier[tier] = 0
        for lineno, obj in read_jsonl(path):
            records.append((tier, path, lineno, obj))
            per_tier[tier] += 1
    return records, per_tier


def map_tasks(records: list[TaskRecord]) -> list[SnapshotRow]:
    """Map tasks in the given order; a task id may appear only once in all of them."""
    rows: list[SnapshotRow] = []
    seen: dict[str, str] = {}
    for tier, path, lineno, obj in records:
        row = map_row(path, lineno, obj, tier)
        if row.request_id in seen:
            raise _fail(path, lineno, f"task id {row.request_id!r} repeats (first at {seen[row.request_id]})")
        seen[row.request_id] = f"{path}:{lineno}"
        rows.append(row)
    return rows


def read_release(options: PrepareOptions, view: str = "jevbench") -> Release:
    """Read the three tier files in the release folder (``original.jsonl``, ``easy.jsonl``,
    ``hard.jsonl``, in that load order).

    ``data="official"`` checks every file against the pinned upstream sha256, size and row count;
    ``data="sample"`` against the pins of the synthetic sample shipped in ``data/01_raw/jevbench``.
    The content is every task as ``(tier, path, line, record)``.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    if data not in manifest["sources"]:
        raise SnapshotError(f"jevbench: no pinned source for data kind {data!r}; known: {sorted(manifest['sources'])}")
    check_data_kind(source, FAMILY, data)
    pins = manifest["sources"][data]  # listed in the load order: original, easy, hard
    for pin in pins:
        if data == "official" and not present(source / pin["file"]):  # what is there is judged by check_source
            raise SnapshotError(f"source file not found: {source / pin['file']}; fetch the release with "
                                f"`python -m jevkedro.pipelines.jevbench.download --dest {source}`")
    files = tuple(check_source(source / pin["file"], pin) for pin in pins)
    records, per_tier = read_tiers([(pin["tier"], source / pin["file"]) for pin in pins])
    for pin in pins:
        if pin.get("rows") is not None and per_tier[pin["tier"]] != pin["rows"]:
            raise SnapshotError(f"{source / pin['file']}: {per_tier[pin['tier']]} tasks, pinned {pin['rows']}")
    return Release(FAMILY, data, source, files, records, options,
                   notes={"load_order": [pin["tier"] for pin in pins], "tasks_by_tier": per_tier})


def build(release: Release, view: str = "jevbench") -> PreparedView:
    """Map every task of the release, in load order (pure); notes list the tasks without a
    scorable answer (``expected: null``) and the excluded ones."""
    manifest = family_manifest(FAMILY)
    rows = map_tasks(release.content)
    unscorable = [r.request_id for r in rows if r.targets[QUESTION_ID].extra["official"]["expected"] is None]
    excluded = [r.request_id for r in rows if "exclude_reason" in r.targets[QUESTION_ID].extra["official"]]
    up = manifest["upstream"]
    notes = {
        "benchmark": f"JevBench {up['repository']} @ {up['commit']}",
        "load_order": release.notes["load_order"],
        "tasks_by_tier": release.notes["tasks_by_tier"],
        "expected_null": unscorable,
        "excluded": excluded,
        "synthetic": release.data != "official",
    }
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data), notes=notes)


prepare = make_prepare(FAMILY, VIEWS, read_release, build)

# Bootstrap intervals and paired comparisons resample paraphrases of one task together.
RESAMPLING_UNIT = "paraphrase group (a task's group; the task itself when it has none)"


def resampling_unit(row: SnapshotRow) -> str:
    return str(row.source.get("group") or row.request_id)


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``official``: the release's per-item scorer and summary (see :mod:`.official`); it scores the
    raw prediction records with the release's own rules, not the generic question table."""
    from jevkedro.pipelines.jevbench.official import official_summary

    return official_summary(snapshot, predictions)
