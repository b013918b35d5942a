"""VisualDecisionBench 1.0 (``Valen-Team/VisualDecisionBench``): mapping of ``eval.jsonl`` and ``official``.

Upstream (the family README): ``eval.jsonl`` holds every record (image subset first, then video),
one JSON object per line: ``request{state, questions}``, ``targets{qid: {probabilities}}``,
``assets[{path, sha256}]``, ``group_id``, ``meta{benchmark, benchmark_subset, benchmark_record_id,
...}``; media live under ``assets/…`` beside it (``assets.zip`` unpacked), listed in
``assets_manifest.jsonl``; ``statistics.json`` gives the per-subset counts. Mapping (decisions in
README.md):

- one request per record with all of its questions, in source order; ``request_id`` is
  ``meta.benchmark_record_id``; views ``visual_decision_bench`` (all), ``_image`` and ``_video``
  select records by ``meta.benchmark_subset``;
- the request is ``state`` + questions (``type``, ``instructions``, ``criteria``; a noul's criteria
  are dropped, upstream ignores them) + ``media``: the record's assets as ``{path, sha256,
  modality}`` (never the bytes). ``targets``, ``group_id`` and ``meta`` never reach the request;
- candidates: choice = criteria keys in insertion order, score = ``"0".."K-1"``, noul = ``true,
  false``; a target is hard iff one candidate has probability 1 (label = that index), else soft
  (no label); ``"probabilities": null`` (Valen's unlabelled question) is unscored;
- media: URLs must be relative and name one of the record's assets; asset hashes are checked
  against ``assets_manifest.jsonl`` and, for media files present on disk, against their bytes
  (``verify_media``); a mismatch rejects the snapshot.

``official``: the JevalKit reference-protocol report (equal-width 15-bin ECE) with modality, type,
type x modality, domain, language, subset and target-kind groups, plus ``valen``: the Valen
evaluator's summary (NLL, Brier, hard accuracy, expected-score MAE, RPS, noul macro-F1 and
confusion) for its groups ``overall``, ``task/<type>``, ``modality/<m>``,
``task_modality/<type>/<m>``, ``language/<b>``, ``domain/<d>`` and per subset.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, get_args

import numpy as np
from pydantic import Field

from jevkedro import config
from jevkedro.family import OUR_RECORD_SOURCE, Release, check_data_kind, check_record_stamp, expected_for, family_manifest, make_prepare
from jevkedro.files import check_file, present
from jevkedro.nodes import metrics as M
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError, count_rows, sha256_file
from jevkedro.nodes.sources import check_source, read_jsonl, read_source_document
from jevkedro.nodes.validate import QuestionTable
from jevkedro.protocol import NOUL_ORDER_TRUE_FIRST, QUESTION_FIELDS, SnapshotRow, Target

FAMILY = "visual_decision_bench"
VIEWS = ("visual_decision_bench", "visual_decision_bench_image", "visual_decision_bench_video")
SUBSETS = ("visualdecisionbench_image", "visualdecisionbench_video")
VIEW_SUBSETS = {
    "visual_decision_bench": SUBSETS,
    "visual_decision_bench_image": ("visualdecisionbench_image",),
    "visual_decision_bench_video": ("visualdecisionbench_video",),
}
EVAL_FILE, ASSETS_MANIFEST, STATISTICS = "eval.jsonl", "assets_manifest.jsonl", "statistics.json"
RECORD_KEYS = ("request", "targets", "assets", "group_id", "meta")
RECORD_ID = re.compile(r"^(visualdecisionbench_(?:image|video)):(\d{6})$")
MEDIA_PARTS = {"image_url": "image", "video_url": "video"}
ROLES = ("user", "assistant", "system")
MAX_OPTIONS = 255  # choice options and score levels (packager check)
TARGET_SUM_TOLERANCE = 1e-6
UNKNOWN_SLICE = "unknown"  # domain / language bucket when meta lacks them (README, Unknown 2)
OUR_SOURCE = OUR_RECORD_SOURCE  # meta.source of every record jevkedro writes (synthetic.py)
VerifyMedia = Literal["present", "all", "none"]
VERIFY_MEDIA: tuple[str, ...] = get_args(VerifyMedia)
OFFICIAL_SLICES = {
    "modality": "modality",
    "type": "type",
    "type_modality": ("type", "modality"),
    "domain": "domain",
    "language": "language",
    "subset": "subset",
    "target": "target",
}
# Valen evaluator groups: name prefix -> slice column(s) of the question table
VALEN_GROUPS = {
    "task": ("type",),
    "modality": ("modality",),
    "task_modality": ("type", "modality"),
    "language": ("language",),
    "domain": ("domain",),
}


# ---------------------------------------------------------------------------------------------
# state and media


def media_urls(where: str, state: Any) -> list[tuple[str, str]]:
    """``(url, modality)`` of every media part of a state, in order; checks the state's shape.

    A state is a string or ``{"messages": [{"role", "content"}]}`` with string content or a
    list of ``text`` / ``image_url`` / ``video_url`` parts. URLs must be relative.
    """
    if isinstance(state, str):
        return []
    if not isinstance(state, dict) or not isinstance(state.get("messages"), list) or set(state) != {"messages"}:
        raise SourceFormatError(f"{where}: state must be a string or an object {{messages: [...]}}")
    out = []
    for i, msg in enumerate(state["messages"]):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES or "content" not in msg:
            raise SourceFormatError(f"{where}: message {i} needs a role in {ROLES} and content")
        content = msg["content"]
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise SourceFormatError(f"{where}: message {i} content must be a string or a list of parts")
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    raise SourceFormatError(f"{where}: message {i}: a text part needs a string text")
                continue
            if kind not in MEDIA_PARTS:
                raise SourceFormatError(f"{where}: message {i}: part type {kind!r} is not text, image_url or video_url")
            inner = part.get(kind)
            url = inner.get("url") if isinstance(inner, dict) else None
            if not isinstance(url, str) or not url:
                raise SourceFormatError(f"{where}: message {i}: {kind} part needs {{{kind}: {{url}}}}")
            if "://" in url:
                raise SourceFormatError(f"{where}: media URL {url!r} is not a relative asset path")
            out.append((url, MEDIA_PARTS[kind]))
    return out


def record_assets(where: str, assets: Any) -> dict[str, str]:
    """A record's ``assets`` as ``{path: sha256}`` in source order: each a path and a lowercase
    hex sha256, no path listed twice."""
    if not isinstance(assets, list):
        raise SourceFormatError(f"{where}: assets must be a list of {{path, sha256}}")
    listed: dict[str, str] = {}
    for a in assets:
        if (not isinstance(a, dict) or not isinstance(a.get("path"), str)
                or not re.fullmatch(r"[0-9a-f]{64}", str(a.get("sha256")))):
            raise SourceFormatError(f"{where}: asset {a!r} needs a path and a lowercase hex sha256")
        if a["path"] in listed:
            raise SourceFormatError(f"{where}: asset {a['path']!r} is listed twice")
        listed[a["path"]] = a["sha256"]
    return listed


def request_media(where: str, state: Any, assets: Any) -> list[dict[str, str]]:
    """The request's ``media`` field: each asset as ``{path, sha256, modality}`` (no bytes).

    Every media URL of the state must equal one asset path (the family README). An asset no part
    references keeps the modality its folder names (``assets/visualdecisionbench_<m>/``).
    """
    listed = record_assets(where, assets)
    modality_of = {}
    for url, modality in media_urls(where, state):
        if url not in listed:
            raise SourceFormatError(f"{where}: media URL {url!r} is not one of the record's assets {sorted(listed)}")
        modality_of.setdefault(url, modality)
    out = []
    for path, digest in listed.items():
        folder = re.match(r"assets/visualdecisionbench_(image|video)/", path)
        out.append({"path": path, "sha256": digest,
                    "modality": modality_of.get(path) or (folder.group(1) if folder else "unknown")})
    return out


# ---------------------------------------------------------------------------------------------
# questions and targets


def wire_question(where: str, qid: str, q: Any) -> tuple[dict[str, Any], list[str]]:
    """One question as the model sees it and its candidate keys (README shape rules)."""
    if not isinstance(q, dict):
        raise SourceFormatError(f"{where}: question {qid!r} must be an object")
    extra = sorted(set(q) - QUESTION_FIELDS)
    if extra:
        raise SourceFormatError(f"{where}: question {qid!r} has fields beyond type/instructions/criteria: {extra}")
    qtype, instructions, criteria = q.get("type"), q.get("instructions"), q.get("criteria")
    if not isinstance(instructions, str) or not instructions.strip():
        raise SourceFormatError(f"{where}: question {qid!r}: instructions must be a non-empty string")
    if qtype == "noul":  # criteria are ignored upstream; the wire question leaves them out
        return {"type": "noul", "instructions": instructions}, list(NOUL_ORDER_TRUE_FIRST)
    if qtype == "choice":
        if not isinstance(criteria, dict) or not 1 <= len(criteria) <= MAX_OPTIONS:
            raise SourceFormatError(f"{where}: question {qid!r}: choice criteria must be an object of 1-{MAX_OPTIONS} options")
        return {"type": "choice", "instructions": instructions, "criteria": criteria}, [str(k) for k in criteria]
    if qtype == "score":
        if not isinstance(criteria, list) or not 2 <= len(criteria) <= MAX_OPTIONS:
            raise SourceFormatError(f"{where}: question {qid!r}: score criteria must be a list of 2-{MAX_OPTIONS} levels")
        return {"type": "score", "instructions": instructions, "criteria": criteria}, [str(i) for i in range(len(criteria))]
    raise SourceFormatError(f"{where}: question {qid!r}: unknown type {qtype!r}; expected choice, noul or score")


def map_target(where: str, qid: str, candidates: list[str], target: Any) -> Target:
    """``{"probabilities": {key: p}}`` over exactly the candidate keys -> :class:`Target`.

    Hard iff exactly one candidate has probability 1 and the others 0 (label = its index); any
    other distribution is soft (no label: it stays out of hard-label accuracy, docs/protocol.md §4).
    ``probabilities: null`` is Valen's unlabelled question: unscored. Extra keys
    (``label_source``, ``votes``) are kept with the target.
    """
    if not isinstance(target, dict) or "probabilities" not in target:
        raise SourceFormatError(f"{where}: target of {qid!r} needs a probabilities field, got {target!r}")
    extra = {k: v for k, v in target.items() if k != "probabilities"}
    probs = target["probabilities"]
    if probs is None:
        return Target(unscored=True, extra={**extra, "target_kind": "unlabelled"})
    if not isinstance(probs, dict) or set(probs) != set(candidates) or len(probs) != len(candidates):
        got = sorted(probs) if isinstance(probs, dict) else probs
        raise SourceFormatError(f"{where}: target of {qid!r} must have exactly the candidate keys {candidates}, got {got!r}")
    values = [probs[c] for c in candidates]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values):
        raise SourceFormatError(f"{where}: target of {qid!r}: probabilities must be finite numbers >= 0, got {values}")
    total = sum(values)
    if abs(total - 1.0) > TARGET_SUM_TOLERANCE:
        raise SourceFormatError(f"{where}: target of {qid!r}: probabilities sum to {total:.9g}, not 1 within 1e-6")
    dist = tuple(float(v) for v in values)
    ones = [i for i, v in enumerate(dist) if v == 1.0]
    if len(ones) == 1 and all(v == 0.0 for i, v in enumerate(dist) if i != ones[0]):
        return Target(label=ones[0], probabilities=dist, extra={**extra, "target_kind": "hard"})
    return Target(probabilities=dist, extra={**extra, "target_kind": "soft"})


# ---------------------------------------------------------------------------------------------
# records


def record_subset(where: str, meta: Any) -> tuple[str, str]:
    """``(benchmark_subset, benchmark_record_id)`` of a record, checked against each other."""
    if not isinstance(meta, dict):
        raise SourceFormatError(f"{where}: meta must be an object")
    subset, rid = meta.get("benchmark_subset"), meta.get("benchmark_record_id")
    if subset not in SUBSETS:
        raise SourceFormatError(f"{where}: meta.benchmark_subset {subset!r} is not one of {SUBSETS}")
    m = RECORD_ID.match(rid) if isinstance(rid, str) else None
    if not m or m.group(1) != subset:
        raise SourceFormatError(f"{where}: meta.benchmark_record_id {rid!r} is not '{subset}:<index:06d>'")
    if meta.get("benchmark", "VisualDecisionBench") != "VisualDecisionBench":
        raise SourceFormatError(f"{where}: meta.benchmark {meta['benchmark']!r} is not 'VisualDecisionBench'")
    return subset, rid


def _slice_value(meta: dict[str, Any], key: str) -> str:
    value = meta.get(key)
    return str(value) if value not in (None, "") else UNKNOWN_SLICE


def map_record(path: Path, lineno: int, obj: dict[str, Any]) -> SnapshotRow:
    """One ``eval.jsonl`` record -> one snapshot row (gold, group and meta never in the request)."""
    where = f"{path}:{lineno}"
    missing = [k for k in RECORD_KEYS if k not in obj]
    if missing:
        raise SourceFormatError(f"{where}: missing field(s) {missing}")
    subset, rid = record_subset(where, obj["meta"])
    meta = obj["meta"]
    request_in = obj["request"]
    if not isinstance(request_in, dict) or set(request_in) != {"state", "questions"}:
        got = sorted(request_in) if isinstance(request_in, dict) else request_in
        raise SourceFormatError(f"{where}: request must hold exactly state and questions, got {got!r}")
    questions_in, targets_in = request_in["questions"], obj["targets"]
    if not isinstance(questions_in, dict) or not questions_in:
        raise SourceFormatError(f"{where}: request.questions must be a non-empty object")
    if not isinstance(targets_in, dict) or set(targets_in) != set(questions_in):
        got = sorted(targets_in) if isinstance(targets_in, dict) else targets_in
        raise SourceFormatError(f"{where}: targets {got!r} do not match questions {sorted(questions_in)}")
    media = request_media(where, request_in["state"], obj["assets"])
    modality = meta.get("modality") or subset.rsplit("_", 1)[1]
    if modality not in ("image", "video"):
        raise SourceFormatError(f"{where}: meta.modality {modality!r} is not image or video")
    questions, candidates, targets, q_slices = {}, {}, {}, {}
    for qid, q in questions_in.items():
        questions[qid], candidates[qid] = wire_question(where, qid, q)
        targets[qid] = map_target(where, qid, candidates[qid], targets_in[qid])
        q_slices[qid] = {"target": targets[qid].extra["target_kind"]}
    request: dict[str, Any] = {"state": request_in["state"], "questions": questions}
    if media:
        request["media"] = media
    return SnapshotRow(
        request_id=rid,
        request=request,
        candidates=candidates,
        targets=targets,
        slices={"modality": modality, "subset": subset, "domain": _slice_value(meta, "domain"),
                "language": _slice_value(meta, "language_bucket"), "questions": q_slices},
        source={"file": path.name, "line": lineno, "group_id": obj["group_id"], "meta": meta,
                "noul_criteria_dropped": sorted(q for q, spec in questions_in.items()
                                                if spec.get("type") == "noul" and spec.get("criteria") is not None)},
    )


# ---------------------------------------------------------------------------------------------
# release-level checks: assets manifest, media bytes, statistics.json


def read_assets_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """``assets_manifest.jsonl`` -> {path: entry}; each line ``{path, sha256, subset, modality, bytes}``."""
    out: dict[str, dict[str, Any]] = {}
    for lineno, obj in read_jsonl(path):
        if not isinstance(obj.get("path"), str) or not isinstance(obj.get("sha256"), str):
            raise SourceFormatError(f"{path}:{lineno}: an asset entry needs path and sha256")
        if obj["path"] in out:
            raise SourceFormatError(f"{path}:{lineno}: asset {obj['path']!r} listed twice")
        out[obj["path"]] = {**obj, "line": lineno}
    return out


def check_media(source: Path, assets: Iterable[tuple[str, dict[str, str]]],
                listed: dict[str, dict[str, Any]] | None, verify_media: str) -> dict[str, Any]:
    """Check every asset of the view's records (README, Unknown 8): a record hash that differs from
    the assets manifest, or from the bytes of a media file present on disk, rejects the snapshot.

    ``assets``: ``(where, {path: sha256})`` per record (:func:`record_assets`), ``where`` naming
    its line. ``verify_media``: ``present`` (default) hashes the files that exist and counts the
    missing ones (a text-only model needs none); ``all`` also rejects a missing file; ``none``
    hashes nothing (the manifest is still compared).
    """
    if verify_media not in VERIFY_MEDIA:
        raise ValueError(f"verify_media must be one of {VERIFY_MEDIA}, got {verify_media!r}")
    seen: dict[str, str] = {}
    missing, hashed = [], 0
    for where, record in assets:
        for p, digest in record.items():
            if listed is not None:
                entry = listed.get(p)
                if entry is None:
                    raise SnapshotError(f"{where}: asset {p!r} is not in {ASSETS_MANIFEST}")
                if entry["sha256"] != digest:
                    raise SnapshotError(f"{where}: asset {p!r} sha256 {digest} differs from {ASSETS_MANIFEST}:"
                                        f"{entry['line']} ({entry['sha256']})")
            if p in seen or verify_media == "none":
                seen.setdefault(p, digest)
                continue
            seen[p] = digest
            file = source / p
            if not present(file):
                if verify_media == "all":
                    raise SnapshotError(f"{where}: media file not found: {file}")
                missing.append(p)
                continue
            check_file(file, f"{where}: media file", SnapshotError)  # a folder or FIFO there is no missing file
            on_disk = sha256_file(file)
            hashed += 1
            if on_disk != digest:
                raise SnapshotError(f"{file}: sha256 {on_disk} does not match the record's asset sha256 {digest} ({where})")
    return {"assets": len(seen), "files_hashed": hashed, "files_missing": len(missing),
            "missing_examples": missing[:5], "verify_media": verify_media,
            "assets_manifest": listed is not None}


def subset_statistics(rows: list[SnapshotRow]) -> dict[str, dict[str, Any]]:
    """Per-subset counts in the shape of the release's ``statistics.json``."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        s = out.setdefault(row.slices["subset"], {"states": 0, "questions": 0, "types": Counter(),
                                                  "hard_label_questions": 0, "hard_label_types": Counter(),
                                                  "assets": set(), "multi_question_states": 0,
                                                  "max_questions_per_state": 0})
        n = len(row.request["questions"])
        s["states"] += 1
        s["questions"] += n
        s["multi_question_states"] += n > 1
        s["max_questions_per_state"] = max(s["max_questions_per_state"], n)
        s["assets"].update(a["path"] for a in row.request.get("media", []))
        for qid, q in row.request["questions"].items():
            s["types"][q["type"]] += 1
            if row.targets[qid].label is not None:
                s["hard_label_questions"] += 1
                s["hard_label_types"][q["type"]] += 1
    return {k: {**v, "types": dict(sorted(v["types"].items())), "hard_label_types": dict(sorted(v["hard_label_types"].items())),
                "assets": len(v["assets"])} for k, v in sorted(out.items())}


def read_statistics(path: Path) -> dict[str, Any] | None:
    """``statistics.json`` as published (None when the release has none)."""
    if not present(path):
        return None
    listed = read_source_document(str(check_file(path, "statistics file", SnapshotError)), path.read_bytes())
    if not isinstance(listed, dict):
        raise SourceFormatError(f"{path}: expected an object of per-subset counts, got {type(listed).__name__}")
    return listed


def check_statistics(path: Path, listed: dict[str, Any] | None, found: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Compare our per-subset counts with ``statistics.json`` (``listed``, as read from ``path``)
    when the release has it (Unknown 5).

    Every count the file gives for a subset that we can count must agree; a difference rejects
    the snapshot naming the file, the key and both values.
    """
    if listed is None:
        return None
    diffs = []
    for subset, ours in found.items():
        theirs = listed.get(subset)
        if not isinstance(theirs, dict):
            diffs.append(f"{subset}: not listed")
            continue
        for key, value in ours.items():
            if key in theirs and theirs[key] != value:
                diffs.append(f"{subset}.{key}: found {value}, listed {theirs[key]}")
    if diffs:
        raise SnapshotError(f"{path}: counts differ from the release statistics: " + "; ".join(diffs))
    return {s: listed[s] for s in found}


# ---------------------------------------------------------------------------------------------
# reading the release, and the mapping


class PrepareOptions(config.PrepareOptions):
    """``<view>.prepare`` of the three views: where the release is, its data kind, and how far the
    media files are checked."""

    verify_media: VerifyMedia = Field(
        "present", description="present: hash the media files that exist; all: a missing file is an error too; none: hash none")


@dataclass(frozen=True)
class EvalRecords:
    """What :func:`read_release` hands :func:`build`: every ``eval.jsonl`` record as ``(path, line,
    record)`` in file order, and ``statistics.json`` as published (None when absent)."""

    records: list[tuple[Path, int, dict[str, Any]]]
    statistics: dict[str, Any] | None


def _check_view(view: str) -> None:
    if view not in VIEW_SUBSETS:
        raise ValueError(f"unknown view {view!r}; one of {VIEWS}")


def read_release(options: config.PrepareOptions, view: str = "visual_decision_bench") -> Release:
    """Read ``<source>/eval.jsonl`` (plus the optional assets manifest and statistics) for one view.

    Checks the folder's data-kind marker, the files' pins, each record's subset, id (unique) and
    provenance stamp, and the media of the *view's* records (their hashes against the assets
    manifest and, as ``verify_media`` says, against the files on disk).
    """
    _check_view(view)
    if not isinstance(options, PrepareOptions):  # the common options only: verify_media keeps its default
        options = PrepareOptions(**options.model_dump())
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    marker = check_data_kind(source, FAMILY, data)
    pins = {p["file"]: p for p in manifest["sources"].get(data, [])}
    eval_path = source / EVAL_FILE
    files = [check_source(eval_path, pins.get(EVAL_FILE))]
    listed = None
    if present(source / ASSETS_MANIFEST):  # optional; a folder or FIFO in its place is refused
        files.append(check_source(source / ASSETS_MANIFEST, pins.get(ASSETS_MANIFEST)))
        listed = read_assets_manifest(source / ASSETS_MANIFEST)
    records, in_view = [], []
    seen: dict[str, int] = {}
    for lineno, obj in read_jsonl(eval_path):
        where = f"{eval_path}:{lineno}"
        subset, rid = record_subset(where, obj.get("meta"))
        if rid in seen:
            raise SourceFormatError(f"{where}: benchmark_record_id {rid!r} repeats line {seen[rid]}")
        seen[rid] = lineno
        check_record_stamp(where, obj["meta"].get("source"), data, field="meta.source")
        records.append((eval_path, lineno, obj))
        if subset in VIEW_SUBSETS[view]:
            in_view.append((where, obj))
    media = check_media(source, ((where, record_assets(where, obj.get("assets"))) for where, obj in in_view),
                        listed, options.verify_media)
    notes: dict[str, Any] = {"view": view, "media": media}
    if marker:
        notes["synthetic"] = marker
    content = EvalRecords(records, read_statistics(source / STATISTICS))
    return Release(FAMILY, data, source, tuple(files), content, options, notes)


def build(release: Release, view: str = "visual_decision_bench") -> PreparedView:
    """Map every record of the release (pure), check the per-subset counts against
    ``statistics.json`` and the view's hard-label count against the manifest, and keep the view's
    records. ``release`` must have been read for ``view`` (its media were checked for that view)."""
    _check_view(view)
    if release.notes.get("view") != view:
        raise ValueError(f"a release read for view {release.notes.get('view')!r} cannot be built as {view!r}: "
                         "its media were checked for that view only")
    manifest = family_manifest(FAMILY)
    eval_path = release.source / EVAL_FILE
    all_rows = [map_record(path, lineno, obj) for path, lineno, obj in release.content.records]
    found = subset_statistics(all_rows)
    statistics = check_statistics(release.source / STATISTICS, release.content.statistics, found)
    rows = [r for r in all_rows if r.slices["subset"] in VIEW_SUBSETS[view]]
    want_hard = manifest["views"].get(view, {}).get("hard_label_questions", {}).get(release.data)
    hard = sum(found[s]["hard_label_questions"] for s in VIEW_SUBSETS[view] if s in found)
    expected = expected_for(FAMILY, view, release.data)
    shape = count_rows(rows)
    # checked once inputs and questions agree; otherwise the writer reports those differences first
    same_shape = all(shape[k] == v for k, v in expected.get("counts", {}).items() if k in ("inputs", "questions"))
    if want_hard is not None and hard != want_hard and same_shape:
        raise SnapshotError(f"{view} from {eval_path}: counts differ from the manifest: "
                            f"hard_label_questions: found {hard}, expected {want_hard}")
    notes: dict[str, Any] = {
        "release": manifest["upstream"]["release"],
        "subsets": {s: found[s] for s in VIEW_SUBSETS[view] if s in found},
        "hard_label_questions": hard,
        "unlabelled_questions": sum(t.unscored for r in rows for t in r.targets.values()),
        "noul_criteria_dropped": sum(len(r.source["noul_criteria_dropped"]) for r in rows),
        "media": release.notes["media"],
        "statistics_json": "checked" if statistics is not None else "absent",
    }
    if "synthetic" in release.notes:
        notes["synthetic"] = release.notes["synthetic"]
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected, notes=notes)


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


# ---------------------------------------------------------------------------------------------
# scoring: the Valen evaluator's summary


def noul_outcomes(table) -> dict[str, np.ndarray]:
    """Per-question noul confusion indicators over hard-label noul questions.

    Candidates are ``true, false``; the prediction is the argmax (a tie goes to ``true``, the
    first candidate). A question without a valid answer predicts neither class: it is a missed
    gold class (counted in ``unanswered`` and as a false negative of its gold class), so it
    lowers recall, as docs/protocol.md §3 counts unsupported answers as not correct.
    """
    noul = (table.qtype == "noul") & (table.label >= 0) & ~table.unscored
    gold_true = noul & (table.label == 0)
    gold_false = noul & (table.label == 1)
    answered = noul & table.valid
    p_false = table.P[:, 1] if table.P.shape[1] > 1 else np.zeros(len(table.P))  # a view of 1-option choices only
    pred_true = answered & (table.P[:, 0] >= p_false)
    pred_false = answered & ~pred_true
    return {"noul": noul, "tp": gold_true & pred_true, "fn_pred": gold_true & pred_false,
            "fp": gold_false & pred_true, "tn": gold_false & pred_false,
            "unanswered_true": gold_true & ~answered, "unanswered_false": gold_false & ~answered}


def f1(tp: float, fp: float, fn: float) -> float:
    """``2 TP / (2 TP + FP + FN)``; a zero denominator gives 0 (upstream's rule)."""
    den = 2 * tp + fp + fn
    return float(2 * tp / den) if den else 0.0


def macro_f1(counts: dict[str, int]) -> dict[str, float]:
    """Noul macro-F1 = mean of the true-class and false-class F1 (the family README).

    True class: TP = ``true_positive``; FP = ``false_positive``; FN = ``false_negative`` +
    ``unanswered_true``. False class: TP = ``true_negative``; FP = ``false_negative``; FN =
    ``false_positive`` + ``unanswered_false``.
    """
    f_true = f1(counts["true_positive"], counts["false_positive"],
                counts["false_negative"] + counts["unanswered_true"])
    f_false = f1(counts["true_negative"], counts["false_negative"],
                 counts["false_positive"] + counts["unanswered_false"])
    return {"macro_f1": (f_true + f_false) / 2, "f1_true": f_true, "f1_false": f_false}


def valen_summaries(table, codes: np.ndarray, n_groups: int) -> list[dict[str, Any]]:
    """The Valen evaluator's metrics per group (``codes``: group of each question), one pass.

    nll = -sum y ln max(p, 1e-12); brier = sum (p - y)^2; accuracy over hard targets (argmax,
    ties to the first candidate; unsupported/invalid count as wrong); expected_score_mae and rps
    over score questions, hard and soft; macro_f1 and confusion over hard noul questions. NLL,
    Brier, MAE and RPS use valid answers only; ``metric_counts`` gives every denominator.
    """
    live = ~table.unscored
    stats = M.row_stats(table.P, table.Y, table.K, table.label, table.valid, table.has_target, table.qtype)
    outcomes = noul_outcomes(table)

    def total(x: np.ndarray) -> np.ndarray:
        return M.group_sums(codes, n_groups, x & live if x.dtype == bool else np.where(live, x, 0.0))

    n = total(live)
    sums = {k: total(stats[k]) for k in ("hard", "correct", "prob", "nll", "brier", "ordinal", "rps", "mae")}
    conf = {k: total(v) for k, v in outcomes.items()}

    def ratio(num, den, g):
        return float(num[g] / den[g]) if den[g] else None

    out = []
    for g in range(n_groups):
        confusion = {"true_positive": int(conf["tp"][g]), "false_negative": int(conf["fn_pred"][g]),
                     "false_positive": int(conf["fp"][g]), "true_negative": int(conf["tn"][g]),
                     "unanswered_true": int(conf["unanswered_true"][g]),
                     "unanswered_false": int(conf["unanswered_false"][g])}
        f1s = macro_f1(confusion) if conf["noul"][g] else {"macro_f1": None, "f1_true": None, "f1_false": None}
        out.append({
            "n": int(n[g]),
            "accuracy": ratio(sums["correct"], sums["hard"], g),
            "nll": ratio(sums["nll"], sums["prob"], g),
            "brier": ratio(sums["brier"], sums["prob"], g),
            "expected_score_mae": ratio(sums["mae"], sums["ordinal"], g),
            "rps": ratio(sums["rps"], sums["ordinal"], g),
            **f1s,
            "confusion": confusion if conf["noul"][g] else None,
            "metric_counts": {"accuracy": int(sums["hard"][g]), "nll": int(sums["prob"][g]),
                              "brier": int(sums["prob"][g]), "expected_score_mae": int(sums["ordinal"][g]),
                              "rps": int(sums["ordinal"][g]), "macro_f1": int(conf["noul"][g])},
        })
    return out


def _keys(table, cols: tuple[str, ...]) -> np.ndarray:
    keys = table.slices[cols[0]].astype(str)
    for c in cols[1:]:
        keys = np.char.add(np.char.add(keys, "/"), table.slices[c].astype(str))
    return keys


def masked_table(table, mask: np.ndarray) -> SimpleNamespace:
    """The arrays of the question table that the Valen summary reads, restricted to ``mask``."""
    return SimpleNamespace(
        P=table.P[mask], Y=table.Y[mask], K=table.K[mask], label=table.label[mask], valid=table.valid[mask],
        has_target=table.has_target[mask], qtype=table.qtype[mask], unscored=table.unscored[mask],
        slices={k: v[mask] for k, v in table.slices.items()},
    )


def valen_groups(table, mask: np.ndarray) -> dict[str, Any]:
    """``overall`` plus ``<prefix>/<value>`` groups (Valen's names) over the masked questions."""
    sub = masked_table(table, mask)
    n = int(mask.sum())
    groups = {"overall": valen_summaries(sub, np.zeros(n, dtype=np.intp), 1)[0]}
    for prefix, cols in VALEN_GROUPS.items():
        if not n or any(c not in sub.slices for c in cols):
            continue
        values, inverse = np.unique(_keys(sub, cols), return_inverse=True)
        for value, summary in zip(values, valen_summaries(sub, inverse, len(values))):
            groups[f"{prefix}/{value}"] = summary
    return groups


def valen_report(table) -> dict[str, Any]:
    """The Valen-evaluator-equivalent summary: groups over all questions and per subset, and the
    headline (hard-label accuracy per subset, per-type accuracy, score MAE)."""
    everything = np.ones(len(table), dtype=bool)
    subsets = table.slices.get("subset", np.array([""] * len(table), dtype=object))
    per_subset = {str(s): valen_groups(table, subsets == s) for s in sorted(set(subsets.tolist())) if s}
    groups = valen_groups(table, everything)
    return {
        "groups": groups,
        "subsets": per_subset,
        "headline": {
            "hard_label_accuracy": {s: {"accuracy": g["overall"]["accuracy"], "n": g["overall"]["metric_counts"]["accuracy"]}
                                    for s, g in per_subset.items()},
            "accuracy_by_type": {k.split("/", 1)[1]: v["accuracy"] for k, v in groups.items() if k.startswith("task/")},
            "expected_score_mae": groups["overall"]["expected_score_mae"],
            "noul_macro_f1": groups["overall"]["macro_f1"],
        },
    }


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official`` (docs/protocol.md §7): the reference-protocol report with modality, type,
    type x modality, domain, language, subset and target-kind groups, plus ``valen``."""
    manifest = family_manifest(FAMILY)
    report = reference_report(
        table, OFFICIAL_SLICES, "equal_width", family=FAMILY, release=manifest["upstream"]["release"],
        data=getattr(snapshot, "data", None),
        slices_not_available={"task": "question ids are free per record; see the type slice",
                              "difficulty": "the release has no difficulty field"},
        domain_from="meta.domain ('unknown' when absent; the packager does not add it)",
        assumptions={
            "nll_floor": "upstream's epsilon is undocumented; ours is 1e-12 (README, Unknown 3)",
            "argmax_ties": "upstream's accuracy tie rule is undocumented; ties go to the first candidate "
                           "(noul: true) as upstream's answers do (README, Unknown 4)",
            "unsupported": "unsupported/invalid/unattempted answers count in accuracy as not correct and, "
                           "for noul macro-F1, as a missed gold class",
        },
    )
    valen = valen_report(table)
    report["noul_macro_f1"] = {k: v["macro_f1"] for k, v in valen["groups"].items() if v["macro_f1"] is not None}
    report["valen"] = valen
    return report
