"""Decision Index 0.3 public suite (kit ``apolinario/decision-index``, edition ``release-v3``).

Source: the suite files as rebuilt by the kit (``python -m decision_index suite rebuild
--edition 0.3``), one folder holding ``selected-rows.jsonl.gz``, ``added-rows.jsonl.gz``,
``gsm8k-rows.jsonl.gz``, ``excluded-questions.json`` and the subset files (README.md: usage).
Gzip files are pinned by the sha256 of their *uncompressed* content (rebuilt gzip headers differ).

Read-time rules, in this order (the family README):

1. ``selected-rows``: ForecastBench (48, retired) skipped; GSM8K (30) rows skipped and the
   ``gsm8k-rows`` file read in their place (at the position of the first skipped GSM8K row);
2. ACOS (38) cut to the reviews of ``acos-subset.json``; ToolRet (2), BRIGHT (36) and Home
   appliances (9) cut to their answerable / kept rows (``*-subset.json``, by run id);
3. the 442 rows of ``excluded-questions.json`` dropped (matched by
   ``<catalog_id>:<track>:<group_id>``; ids and reasons kept in the snapshot manifest's notes);
4. ``added-rows`` appended.

Each step's count is pinned (official: 124,971 -> 114,832 -> 110,918 -> 110,201 -> 109,759 ->
+30,419 = 140,178 requests over 43 datasets); a difference fails naming the step and file.

Mapping of one row: request id = ``_evaluation.run_id``; request = ``{state, questions}`` with
each question's ``type``, ``instructions`` (string or object, untouched) and ``criteria`` only,
options in source order (noul candidates ``true, false``); ``expected``, ``metadata``,
``provenance``, ``scoring``, ``_evaluation`` and ids stay in the ``source`` column. A question whose
gold is null or missing, or that the row's ``candidate_decisions`` / ``calibration_decisions`` list
in ``unscored_fields``, gets ``Target(unscored=True)`` and stays in the request.

``evaluate`` returns the edition's own public index (:mod:`.official`).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare, wire_question
from jevkedro.files import check_file, present
from jevkedro.nodes.jsonparse import JSONTextError, parse_json
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFile, SourceFormatError, collector_paused
from jevkedro.nodes.sources import check_source, read_source_document, read_source_object
from jevkedro.nodes.validate import QuestionTable
from jevkedro.pipelines.decision_index.edition import GSM8K, RETIRED, edition_03, run_datasets
from jevkedro.protocol import NOUL_ORDER_TRUE_FIRST, SnapshotRow, Target

FAMILY = "decision_index"
VIEWS = ("decision_index",)
ROW_KEYS = ("id", "state", "questions", "_evaluation")
EVAL_KEYS = ("run_id", "catalog_id", "dataset", "group_id", "track")
# catalog id -> subset file holding the run ids kept at read time
SUBSET_FILES = {38: "acos-subset.json", 2: "toolret-subset.json", 36: "bright-subset.json",
                9: "home-appliances-subset.json"}
DECISION_PAYLOADS = ("candidate_decisions", "calibration_decisions")


# ------------------------------------------------------------------------------------------
# reading

def read_jsonl_gz(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], str, int]:
    """All ``(line, object)`` of a gzipped JSON-lines file, the sha256 and size of its uncompressed
    bytes. Each line is read by the one strict reader (:func:`~jevkedro.nodes.jsonparse.parse_json`);
    a line it does not take as an exact object is refused by the source reader, naming file and line
    (repeated keys and numbers no double holds included). Lines end only at ``\\n``; blank lines are skipped."""
    digest, out, size, name = hashlib.sha256(), [], 0, str(path)
    try:
        with gzip.open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                digest.update(raw)
                size += len(raw)
                if raw.strip():
                    try:
                        parsed = parse_json(raw)
                    except JSONTextError:
                        parsed = None
                    if parsed is not None and parsed.exact and type(parsed.value) is dict:
                        out.append((lineno, parsed.value))
                    else:  # refused: the source reader says why, naming file and line
                        out.append((lineno, read_source_object(f"{name}:{lineno}", raw)))
    except (OSError, EOFError) as exc:
        raise SourceFormatError(f"{path}: not a readable gzip file ({exc})") from None
    return out, digest.hexdigest(), size


def read_run_ids(path: Path) -> set[str]:
    """A subset file: a JSON list of run ids, or an object with a ``run_ids`` list."""
    obj = read_source_document(str(path), path.read_bytes())
    ids = obj.get("run_ids") if isinstance(obj, dict) else obj
    if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
        raise SourceFormatError(f"{path}: expected a list of run ids (or an object with 'run_ids')")
    return set(ids)


def read_exclusions(path: Path) -> dict[str, Any]:
    """``excluded-questions.json``: exclusion id -> per-question reasons.

    Accepted shapes: an object ``{id: {question: reason}}``, or a list of ``{"id": ..., "reasons" |
    "questions": ...}`` objects (or bare id strings).
    """
    obj = read_source_document(str(path), path.read_bytes())
    if isinstance(obj, dict) and "excluded" in obj:
        obj = obj["excluded"]
    if isinstance(obj, dict):
        return dict(obj)
    if not isinstance(obj, list):
        raise SourceFormatError(f"{path}: expected an object or a list of excluded questions")
    out: dict[str, Any] = {}
    for i, item in enumerate(obj):
        if isinstance(item, str):
            out[item] = None
        elif isinstance(item, dict) and isinstance(item.get("id"), str):
            out[item["id"]] = item.get("reasons", item.get("questions"))
        else:
            raise SourceFormatError(f"{path}: entry {i} has no string 'id'")
    return out


# ------------------------------------------------------------------------------------------
# mapping

def _fail(where: str, message: str) -> SourceFormatError:
    return SourceFormatError(f"{where}: {message}")


def unscored_fields(scoring: Any) -> set[str]:
    """Fields the added rows' decision payloads mark unscored (e.g. PhishNChips ``sig_*``)."""
    out: set[str] = set()
    if scoring and isinstance(scoring, dict):
        for key in DECISION_PAYLOADS:
            payload = scoring.get(key)
            if isinstance(payload, dict):
                out.update(payload.get("unscored_fields") or ())
    return out


# Targets are frozen: one object per hard label (and one for "unscored") serves every question.
_LABEL_TARGETS = tuple(Target(label=k) for k in range(256))
_UNSCORED = Target(unscored=True)
_SOURCE_KEYS = ("metadata", "provenance", "scoring", "_evaluation")
_ROW_KEY_SET, _EVAL_KEY_SET = frozenset(ROW_KEYS), frozenset(EVAL_KEYS)
# noul gold -> target: the candidates of every noul question are NOUL_ORDER_TRUE_FIRST
_NOUL_TARGETS = {True: _LABEL_TARGETS[NOUL_ORDER_TRUE_FIRST.index("true")],
                 False: _LABEL_TARGETS[NOUL_ORDER_TRUE_FIRST.index("false")]}


def _target(where: str, qid: str, qtype: str, candidates: list[str], gold: Any) -> Target:
    if qtype == "noul":
        if not isinstance(gold, bool):
            raise _fail(where, f"question {qid!r}: noul gold must be a JSON boolean, got {gold!r}")
        return _LABEL_TARGETS[candidates.index("true" if gold else "false")]
    if qtype == "choice":
        if not isinstance(gold, str) or gold not in candidates:
            raise _fail(where, f"question {qid!r}: gold {gold!r} is not one of the options {candidates[:8]}")
        return _LABEL_TARGETS[candidates.index(gold)]
    raise _fail(where, f"question {qid!r}: type {qtype!r} is not used by the Decision Index")


def map_row(where: str, obj: dict[str, Any]) -> SnapshotRow:
    """One suite record -> one snapshot row; only ``state`` and the questions reach the request."""
    if not _ROW_KEY_SET <= obj.keys():
        raise _fail(where, f"missing field(s) {[k for k in ROW_KEYS if k not in obj]}")
    ev = obj["_evaluation"]
    if not isinstance(ev, dict) or not _EVAL_KEY_SET <= ev.keys():
        raise _fail(where, f"_evaluation must hold {list(EVAL_KEYS)}")
    questions = obj["questions"]
    if not isinstance(questions, dict) or not questions:
        raise _fail(where, "questions must be a non-empty object")
    expected = obj.get("expected") or {}
    if not isinstance(expected, dict):
        raise _fail(where, "expected must be an object (question -> gold or null)")
    if not expected.keys() <= questions.keys():
        unknown = expected.keys() - questions.keys()
        raise _fail(where, f"expected names question(s) not in the request: {sorted(unknown)}")
    scoring = obj.get("scoring")
    skip = unscored_fields(scoring) if scoring else ()
    wire_qs, candidates, targets = {}, {}, {}
    for qid, q in questions.items():
        wire, cands = wire_question(where, qid, q, NOUL_ORDER_TRUE_FIRST)
        qtype = wire["type"]
        if qtype == "choice" and not 2 <= len(cands) <= 255:
            raise _fail(where, f"question {qid!r}: {len(cands)} options (the kit allows 2 to 255)")
        wire_qs[qid] = wire
        candidates[qid] = cands
        gold = expected.get(qid)
        if gold is None or qid in skip:
            targets[qid] = _UNSCORED
        elif qtype == "noul" and type(gold) is bool:
            targets[qid] = _NOUL_TARGETS[gold]
        else:
            targets[qid] = _target(where, qid, qtype, cands, gold)
    cid = int(ev["catalog_id"])
    area = edition_03().area_of.get(cid)
    metadata = obj.get("metadata")
    split = obj.get("split")
    source = {"line": file_line(where), "id": obj["id"], "family": obj.get("family"), "split": split}
    for k in _SOURCE_KEYS:
        if k in obj:
            source[k] = obj[k]
    return SnapshotRow(
        str(ev["run_id"]),
        {"state": obj["state"], "questions": wire_qs},
        candidates,
        targets,
        {"catalog_id": cid, "dataset": ev["dataset"], "track": str(ev["track"]),
         "area": "shown_only" if area is None else area, "in_index": area is not None,
         "domain": metadata.get("domain") if isinstance(metadata, dict) else None, "split": split},
        # the case group id stays out of the generic slices (one group per case: 100k+ groups);
        # the official scorer reads it from _evaluation. ``line``: file name and line, no local path.
        source,
    )


def file_line(where: str) -> str:
    """``Path(where).name`` (``<file>:<line>`` without the folder), without making a Path per row."""
    tail = where.rpartition("/")[2]
    return tail if tail not in ("", ".", "..") else Path(where).name


def exclusion_key(ev: dict[str, Any]) -> str:
    return f"{ev['catalog_id']}:{ev['track']}:{ev['group_id']}"


# ------------------------------------------------------------------------------------------
# the read-time rules

def apply_read_rules(selected: list[tuple[str, dict]], gsm8k: list[tuple[str, dict]],
                     added: list[tuple[str, dict]], subsets: dict[int, set[str]],
                     excluded: dict[str, Any]) -> tuple[list[tuple[str, dict]], dict[str, Any]]:
    """The suite's read-time rules in order; returns the kept ``(where, record)`` and step counts.

    ``subsets``: catalog id -> run ids kept (ACOS, ToolRet, BRIGHT, Home appliances).
    """
    steps = {"selected_rows": len(selected)}
    kept: list[tuple[str, dict]] = []
    dropped = {"retired": 0, "subset": {str(c): 0 for c in subsets}, "gsm8k_replaced": 0}
    gsm8k_at = None
    for where, obj in selected:
        ev = obj.get("_evaluation") or {}
        cid = int(ev.get("catalog_id", -1))
        if cid in RETIRED:
            dropped["retired"] += 1
        elif cid == GSM8K:
            dropped["gsm8k_replaced"] += 1
            gsm8k_at = len(kept) if gsm8k_at is None else gsm8k_at
        elif cid in subsets and ev.get("run_id") not in subsets[cid]:
            dropped["subset"][str(cid)] += 1
        else:
            kept.append((where, obj))
    if gsm8k_at is None:
        gsm8k_at = len(kept)
    kept[gsm8k_at:gsm8k_at] = gsm8k
    steps["after_retired"] = steps["selected_rows"] - dropped["retired"]
    steps["after_acos"] = steps["after_retired"] - dropped["subset"].get("38", 0)
    steps["after_subsets"] = steps["after_acos"] - sum(v for k, v in dropped["subset"].items() if k != "38")
    steps["gsm8k_skipped"] = dropped["gsm8k_replaced"]
    steps["gsm8k_rows"] = len(gsm8k)
    matched: dict[str, int] = {}
    survivors = []
    for where, obj in kept:
        ev = obj.get("_evaluation")
        key = (exclusion_key(ev) if isinstance(ev, dict) and "catalog_id" in ev and "track" in ev and "group_id" in ev
               else None)
        if key is not None and key in excluded:
            matched[key] = matched.get(key, 0) + 1
        else:
            survivors.append((where, obj))
    steps["excluded_rows"] = len(kept) - len(survivors)
    steps["exclusion_ids_unmatched"] = sorted(set(excluded) - set(matched))
    steps["after_exclusions"] = len(survivors)
    steps["added_rows"] = len(added)
    steps["requests"] = len(survivors) + len(added)
    steps["subset_drops"] = dropped["subset"]
    return survivors + added, steps


COUNTED_STEPS = ("selected_rows", "after_retired", "after_acos", "after_subsets", "gsm8k_skipped", "gsm8k_rows",
                 "excluded_rows", "after_exclusions", "added_rows", "requests", "datasets")


def check_steps(steps: dict[str, Any], pinned: dict[str, Any], source: Path) -> None:
    diffs = [f"{k}: found {steps.get(k)}, pinned {pinned[k]}" for k in COUNTED_STEPS
             if k in pinned and steps.get(k) != pinned[k]]
    if steps.get("exclusion_ids_unmatched"):
        diffs.append(f"{len(steps['exclusion_ids_unmatched'])} excluded id(s) match no kept row, e.g. "
                     f"{steps['exclusion_ids_unmatched'][:3]}")
    if diffs:
        raise SnapshotError(f"{source}: the read-time rules give other counts than the edition pins: "
                            + "; ".join(diffs))


def _source_file(folder: Path, pin: dict[str, Any], data: str) -> tuple[SourceFile, Any]:
    """Check one suite file against its pin; gzip files by their uncompressed sha256."""
    path = check_file(folder / pin["file"], "suite file", SnapshotError,
                      "; rebuild the suite with the kit (see src/jevkedro/pipelines/decision_index/README.md)")
    info = {k: v for k, v in pin.items() if k not in {"file", "sha256", "uncompressed_sha256", "bytes"}}
    if pin["file"].endswith(".gz"):
        rows, digest, size = read_jsonl_gz(path)
        want = pin.get("uncompressed_sha256")
        if want and digest != want:
            raise SnapshotError(f"source {path}: uncompressed sha256 {digest} does not match the pinned {want}")
        if pin.get("rows") is not None and len(rows) != pin["rows"]:
            raise SnapshotError(f"source {path}: {len(rows)} rows, pinned {pin['rows']}")
        return SourceFile(path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), bytes=path.stat().st_size,
                          info={**info, "uncompressed_sha256": digest, "uncompressed_bytes": size}), rows
    return check_source(path, pin if pin.get("sha256") else None), None


@collector_paused()
def read_release(options: PrepareOptions, view: str = "decision_index") -> Release:
    """Read a suite folder and apply the 0.3 read-time rules.

    Checks the folder's data-kind marker and every suite file against its pin (gzip files by
    their uncompressed sha256 and row count), applies the rules in order and checks each step's
    count against the edition's pins (every step but ``datasets``, which :func:`build` counts on
    the mapped rows). The content is the kept ``(file:line, record)`` pairs, in order.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    if data not in manifest["sources"]:
        raise SnapshotError(f"decision_index: no source pins for data kind {data!r}; known: {sorted(manifest['sources'])}")
    check_data_kind(source, FAMILY, data)
    pins = {p["file"]: p for p in manifest["sources"][data]}
    files, loaded = [], {}
    for name, pin in pins.items():
        if pin.get("optional") and not present(source / name):  # a folder in its place is refused
            continue
        sf, rows = _source_file(source, pin, data)
        files.append(sf)
        loaded[name] = rows
    records = {name: [(prefix + str(ln), obj) for ln, obj in loaded[name]]
               for name in ("selected-rows.jsonl.gz", "gsm8k-rows.jsonl.gz", "added-rows.jsonl.gz")
               for prefix in (f"{source / name}:",)}
    subsets = {cid: read_run_ids(source / name) for cid, name in SUBSET_FILES.items()}
    excluded = read_exclusions(source / "excluded-questions.json")
    kept, steps = apply_read_rules(records["selected-rows.jsonl.gz"], records["gsm8k-rows.jsonl.gz"],
                                   records["added-rows.jsonl.gz"], subsets, excluded)
    pinned = manifest["read_counts"].get(data, {})
    check_steps(steps, {k: v for k, v in pinned.items() if k != "datasets"}, source)
    return Release(FAMILY, data, source, tuple(files), kept, options,
                   notes={"read_steps": steps, "excluded_ids": excluded})


@collector_paused()
def build(release: Release, view: str = "decision_index") -> PreparedView:
    """Map every kept record (pure); run ids must be unique, and the datasets found must be the
    ones edition 0.3 runs (and as many as it pins)."""
    manifest = family_manifest(FAMILY)
    rows = [map_row(where, obj) for where, obj in release.content]
    seen: dict[str, str] = {}
    for row in rows:
        if row.request_id in seen:
            raise SourceFormatError(f"{release.source / row.source['line']}: run id {row.request_id!r} repeats "
                                    f"(first at {seen[row.request_id]})")
        seen[row.request_id] = row.source["line"]
    datasets = sorted({r.slices["catalog_id"] for r in rows})
    steps = {**release.notes["read_steps"], "datasets": len(datasets)}
    pinned = manifest["read_counts"].get(release.data, {})
    check_steps(steps, {k: v for k, v in pinned.items() if k == "datasets"}, release.source)
    unknown = sorted(set(datasets) - set(run_datasets()))
    if unknown:
        raise SnapshotError(f"{release.source}: rows of catalog id(s) {unknown} that edition 0.3 does not run")
    up = manifest["upstream"]
    notes = {
        "edition": up["edition"], "panel_id": up["panel_id"], "kit": up["kit"],
        "synthetic": release.data != "official",
        "read_steps": steps,
        "datasets": {str(c): run_datasets()[c] for c in datasets},
        "exclusions": {"rule": "rows matching <catalog_id>:<track>:<group_id> dropped before the snapshot",
                       "ids": release.notes["excluded_ids"]},
    }
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data), notes=notes)


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: the edition's chance-corrected weighted public index (see :mod:`.official`)."""
    from jevkedro.pipelines.decision_index.official import official_report

    return official_report(snapshot, table)
