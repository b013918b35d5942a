"""JevAlt-Bench (``mertkayacs/jevalt-bench``): the en/tr/de test files, mapping and ``official``.

Upstream: ``<lang>/test.jsonl`` for ``en``, ``tr``, ``de`` (JevOss items ``id, lang, state,
questions, targets{label, dist}, tags`` plus optional ``abstain``, ``source``), and optionally
``SPLITS.sha256``. Mapping (decisions in README.md):

- every row of a test file is a test item (the split is the file); a placeholder ``train``
  field is ignored; ``request_id`` is ``<lang>/<id>`` (ids are unique per language only);
- the request holds ``state`` and the questions only; ``targets``, ``tags``, ``id``, ``source``
  and any other field go to other columns;
- ``noul``: candidates ``false, true`` (upstream's option order ``no, yes``, so argmax ties go
  to ``no``); criteria keys ``true/yes/1`` and ``false/no/0`` become ``true``/``false``;
- ``choice``: criteria keys in insertion order; ``score``: a list gives levels ``"0".."n-1"``, an
  object gives its keys in insertion order as levels (level i <- key i, the key map is kept with
  the target), its values (or the key, where a value is null) as the level texts;
- question fields beyond ``type``, ``instructions``, ``criteria`` are appended to the instruction
  as one line of compact JSON (:func:`instruction_with_fields`, reversible), except fields named
  like gold, rationale, ids or provenance (``FORBIDDEN_REQUEST_KEYS``, e.g. ``label``,
  ``answer``, ``id``, ``source``): those are withheld from the model and kept in the source column;
- the public abstain flag is the top-level ``"abstain": true``; it (never the targets, never the
  ``abstain`` tag) appends an ``unknown`` candidate at the end of every choice and score question.
  Gold ``unknown`` mass on a question without that candidate is dropped (the rest renormalised);
  a gold *label* ``unknown`` there leaves the question unscored.

``official``: the reference-protocol report with the equal-mass 15-bin ECE of JevOss, language,
type and abstain slices, and an abstain summary.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.config import PrepareOptions
from jevkedro.family import OUR_RECORD_SOURCE, Release, check_data_kind, check_record_stamp, expected_for, family_manifest, make_prepare
from jevkedro.files import check_file, present
from jevkedro.nodes import compare as stats
from jevkedro.nodes import metrics as M
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError, sha256_file
from jevkedro.nodes.sources import check_source, read_jsonl
from jevkedro.nodes.validate import QuestionTable
from jevkedro.protocol import (
    ABSTAIN_OPTION,
    ABSTAIN_OPTION_TEXTS,
    FORBIDDEN_REQUEST_KEYS,
    NOUL_ORDER_FALSE_FIRST,
    SnapshotRow,
    Target,
    dumps,
    offers_abstain_option,
)

FAMILY = "jevalt_bench"
VIEWS = ("jevalt_bench",)
LANGUAGES = ("en", "tr", "de")
SPLITS_FILE = "SPLITS.sha256"
# The appended "unknown" candidate and its text per language (our wording of upstream's meaning),
# shared with the System One adapter, which sends a JevAlt server "abstain": true for such requests.
UNKNOWN = ABSTAIN_OPTION
UNKNOWN_DESCRIPTION = ABSTAIN_OPTION_TEXTS
QUESTION_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
WIRE_FIELDS = ("type", "instructions", "criteria")
REQUIRED = ("id", "lang", "state", "questions", "targets")
NOUL_TRUE_KEYS, NOUL_FALSE_KEYS = ("true", "yes", "1"), ("false", "no", "0")
NOUL_VALUES = ("no", "yes")  # upstream option values, in candidate order (false, true)
DIST_SUM_TOLERANCE = 1e-3
OFFICIAL_SLICES = {
    "language": "language",
    "type": "type",
    "language_type": ("language", "type"),
    "abstain": "abstain",
    "unknown_candidate": "unknown_candidate",
    "domain": "source",
    "tag_prefixes": "tag_prefixes",
}


def release_files() -> list[str]:
    return [f"{lang}/test.jsonl" for lang in LANGUAGES]


# ---------------------------------------------------------------------------------------------
# instructions with extra fields


def instruction_with_fields(instructions: Any, fields: dict[str, Any]) -> Any:
    """The instruction a model sees for a question with extra upstream fields.

    No extra fields: ``instructions`` unchanged (string or structured). Otherwise the text
    (structured instructions as compact JSON, as upstream renders them) plus a newline and the
    extra fields as one line of compact JSON, keys in their source order. Compact JSON never
    contains a raw newline, so :func:`split_instruction` recovers both parts exactly.
    """
    if not fields:
        return instructions
    text = instructions if isinstance(instructions, str) else dumps(instructions)
    return f"{text}\n{dumps(fields)}"


def extra_question_fields(question: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fields serialised into the instruction, fields withheld from the model) of one question.

    Extra fields are those beyond ``type``, ``instructions``, ``criteria``. A field named like
    gold, rationale, an id or provenance (``FORBIDDEN_REQUEST_KEYS``, matched case-insensitively)
    never reaches the model (docs/protocol.md §6); it is withheld and kept with the row's source.
    """
    shown, withheld = {}, {}
    for key, value in question.items():
        if key in WIRE_FIELDS:
            continue
        (withheld if str(key).lower() in FORBIDDEN_REQUEST_KEYS else shown)[key] = value
    return shown, withheld


def split_instruction(text: str) -> tuple[str, dict[str, Any]]:
    """Inverse of :func:`instruction_with_fields` for a question that had extra fields."""
    head, _, tail = text.rpartition("\n")
    return head, json.loads(tail)


# ---------------------------------------------------------------------------------------------
# source mapping


def _option_values(where: str, qtype: str, criteria: Any) -> tuple[list[str], Any]:
    """Option values in prompt order and the wire criteria, for one question."""
    if qtype == "noul":
        if criteria is None:
            return list(NOUL_VALUES), None
        if not isinstance(criteria, dict):
            raise SourceFormatError(f"{where}: noul criteria must be an object, got {type(criteria).__name__}")
        wire = {}
        for key, text in criteria.items():
            k = str(key).lower()
            pole = "true" if k in NOUL_TRUE_KEYS else "false" if k in NOUL_FALSE_KEYS else None
            if pole is None or pole in wire:
                raise SourceFormatError(f"{where}: noul criteria keys must be one of true/yes/1 and false/no/0, got {list(criteria)}")
            wire[pole] = text
        return list(NOUL_VALUES), wire
    if qtype == "choice":
        if not isinstance(criteria, dict) or len(criteria) < 2:
            raise SourceFormatError(f"{where}: choice criteria must be an object with at least 2 options")
        if UNKNOWN in criteria:
            raise SourceFormatError(f"{where}: option {UNKNOWN!r} is reserved for the abstain candidate")
        return [str(k) for k in criteria], dict(criteria)
    if qtype == "score":
        if isinstance(criteria, list) and len(criteria) >= 2:
            return [str(i) for i in range(len(criteria))], list(criteria)
        if isinstance(criteria, dict) and len(criteria) >= 2:
            if UNKNOWN in criteria:
                raise SourceFormatError(f"{where}: level {UNKNOWN!r} is reserved for the abstain candidate")
            # dict form: keys are the levels in insertion order; a null text falls back to the key
            return [str(k) for k in criteria], [k if v is None else v for k, v in criteria.items()]
        raise SourceFormatError(f"{where}: score criteria must be a list or an object of at least 2 levels")
    raise SourceFormatError(f"{where}: unknown question type {qtype!r}; expected choice, score or noul")


def _is_prob(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 1.0


def _label_value(qtype: str, score_list: bool, label: Any) -> Any:
    if qtype == "score" and score_list and isinstance(label, int) and not isinstance(label, bool):
        return str(label)  # a list level given by position
    return label


def map_target(where: str, qtype: str, values: list[str], score_list: bool, target: Any,
               with_unknown: bool, level_keys: list[str] | None = None) -> Target:
    """One question's target over its candidates (``values`` plus ``unknown`` when offered).

    ``dist`` may be an object keyed by option value or a list in option order. Unknown mass on a
    question without the ``unknown`` candidate is dropped and the rest renormalised; a gold label
    ``unknown`` there makes the question unscored (the gold is outside what was asked).
    """
    if not isinstance(target, dict) or "label" not in target or "dist" not in target:
        raise SourceFormatError(f"{where}: target needs label and dist, got {target!r}")
    offered = values + [UNKNOWN] if with_unknown else list(values)
    label = _label_value(qtype, score_list, target["label"])
    dist = target["dist"]
    if isinstance(dist, list):
        if len(dist) not in (len(values), len(values) + 1):
            raise SourceFormatError(f"{where}: dist list has {len(dist)} values for {len(values)} options")
        dist = dict(zip(values + [UNKNOWN], dist))
    if not isinstance(dist, dict):
        raise SourceFormatError(f"{where}: dist must be an object or a list, got {type(dist).__name__}")
    dist = {str(k): v for k, v in dist.items()}
    stray = [k for k in dist if k not in values and k != UNKNOWN]
    if stray:
        raise SourceFormatError(f"{where}: dist keys {stray} are not option values {values}")
    if not all(_is_prob(v) for v in dist.values()):
        raise SourceFormatError(f"{where}: dist values must be numbers in [0, 1], got {list(dist.values())}")
    total = sum(dist.values())
    if abs(total - 1.0) > DIST_SUM_TOLERANCE:
        raise SourceFormatError(f"{where}: dist sums to {total:.6g}, not 1 within {DIST_SUM_TOLERANCE}")
    if label != UNKNOWN and label not in values:
        raise SourceFormatError(f"{where}: label {target['label']!r} is not an option value {values}")
    extra: dict[str, Any] = {"gold": label}
    if level_keys is not None:
        extra["level_keys"] = level_keys  # dict-form score: level i <- key i
    if with_unknown:
        extra["unknown_candidate"] = True
    elif dist.get(UNKNOWN, 0.0) > 0 or label == UNKNOWN:
        extra["dropped_unknown_mass"] = dist.get(UNKNOWN, 0.0)
        if label == UNKNOWN:
            extra["unscored_reason"] = "gold label is unknown, but the request offers no unknown candidate"
            return Target(unscored=True, extra=extra)
    kept = np.array([float(dist.get(v, 0.0)) for v in offered])
    if kept.sum() <= 0:
        raise SourceFormatError(f"{where}: dist puts no mass on the offered candidates {offered}")
    return Target(label=offered.index(label), probabilities=tuple((kept / kept.sum()).tolist()), extra=extra)


def public_abstain_flag(obj: dict[str, Any], where: str) -> bool:
    """The row's public abstain flag: the top-level boolean ``abstain`` (absent or null = false).

    Tags (including an ``abstain`` tag) are metadata and targets are gold: neither decides it.
    """
    flag = obj.get("abstain")
    if flag is None:
        return False
    if not isinstance(flag, bool):
        raise SourceFormatError(f"{where}: abstain must be true or false, got {flag!r}")
    return flag


def offers_unknown(request: dict[str, Any]) -> bool:
    """Whether a prepared request carries the abstain ``unknown`` candidate (README, Unknown 8).

    A JevAlt-style server may also be sent the top-level ``"abstain": true`` for such requests:
    the per-server setting ``model.send_abstain`` of the ``systemone`` adapter, which uses this
    same test (:func:`jevkedro.protocol.offers_abstain_option`), records ``send_abstain`` in the
    run identity and ``meta.abstain_flag_sent`` per request (official Jev has no such field).
    The request itself never carries the flag.
    """
    return offers_abstain_option(request)


def map_row(path: Path, lineno: int, obj: dict[str, Any], lang: str) -> SnapshotRow:
    """One JevOss item of ``<lang>/test.jsonl`` -> one snapshot row."""
    where = f"{path}:{lineno}"
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise SourceFormatError(f"{where}: missing field(s) {missing}")
    if obj["lang"] != lang:
        raise SourceFormatError(f"{where}: lang {obj['lang']!r} in the {lang!r} test file")
    rid = obj["id"]
    if not isinstance(rid, str) or not rid or any(c in rid for c in "\t\r\n"):
        raise SourceFormatError(f"{where}: id must be a non-empty string without tabs or newlines, got {rid!r}")
    questions_in, targets_in = obj["questions"], obj["targets"]
    if not isinstance(questions_in, dict) or not 1 <= len(questions_in) <= 6:
        raise SourceFormatError(f"{where}: questions must be an object of 1-6 questions")
    if not isinstance(targets_in, dict) or set(targets_in) != set(questions_in):
        raise SourceFormatError(f"{where}: targets {sorted(targets_in) if isinstance(targets_in, dict) else targets_in!r} "
                                f"do not match questions {sorted(questions_in)}")
    tags = obj.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise SourceFormatError(f"{where}: tags must be a list of strings")
    abstain = public_abstain_flag(obj, where)
    questions, candidates, targets, q_slices = {}, {}, {}, {}
    withheld_fields: dict[str, dict[str, Any]] = {}
    for qid, q in questions_in.items():
        qwhere = f"{where}: question {qid!r}"
        if not QUESTION_ID.match(qid):
            raise SourceFormatError(f"{qwhere}: id does not match {QUESTION_ID.pattern}")
        if not isinstance(q, dict):
            raise SourceFormatError(f"{qwhere}: must be an object")
        qtype, instructions = q.get("type"), q.get("instructions")
        if not isinstance(instructions, (str, dict, list)):
            raise SourceFormatError(f"{qwhere}: instructions must be a string or structured, got {instructions!r}")
        values, criteria = _option_values(qwhere, qtype, q.get("criteria"))
        with_unknown = abstain and qtype in ("choice", "score")
        if with_unknown:
            text = UNKNOWN_DESCRIPTION[lang]
            criteria = {**criteria, UNKNOWN: text} if qtype == "choice" else [*criteria, text]
        fields, withheld = extra_question_fields(q)
        if withheld:
            withheld_fields[qid] = withheld
        wire = {"type": qtype, "instructions": instruction_with_fields(instructions, fields)}
        if criteria is not None:
            wire["criteria"] = criteria
        questions[qid] = wire
        if qtype == "noul":
            candidates[qid] = list(NOUL_ORDER_FALSE_FIRST)
        elif qtype == "choice":
            candidates[qid] = list(criteria)
        else:
            candidates[qid] = [str(i) for i in range(len(criteria))]
        score_list = isinstance(q.get("criteria"), list)
        targets[qid] = map_target(qwhere, qtype, values, score_list, targets_in[qid], with_unknown,
                                  level_keys=values if qtype == "score" and not score_list else None)
        q_slices[qid] = {"unknown_candidate": "yes" if with_unknown else "no"}
    prefixes = sorted({t.split(":", 1)[0] for t in tags})
    source = obj.get("source")
    other = {k: v for k, v in obj.items() if k not in (*REQUIRED, "tags", "abstain", "source", "train")}
    return SnapshotRow(
        request_id=f"{lang}/{rid}",
        request={"state": obj["state"], "questions": questions},
        candidates=candidates,
        targets=targets,
        slices={"language": lang, "abstain": "yes" if abstain else "no",
                "source": source if isinstance(source, str) else "",
                "tag_prefixes": "+".join(prefixes) or "none", "questions": q_slices},
        source={"id": rid, "file": f"{lang}/test.jsonl", "line": lineno, "tags": tags, "source": source,
                **({"other_fields": other} if other else {}),
                **({"withheld_question_fields": withheld_fields} if withheld_fields else {})},
    )


def read_splits(path: Path) -> dict[str, str]:
    """``SPLITS.sha256`` lines ``<sha256>  <lang>/<split>.jsonl`` -> {relative path: sha256}."""
    out = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        m = re.fullmatch(r"([0-9a-f]{64}) [ *]?(\S.*)", line.strip())
        if not m:
            raise SourceFormatError(f"{path}:{lineno}: expected '<sha256>  <lang>/<split>.jsonl', got {line!r}")
        out[m.group(2)] = m.group(1)
    return out


def check_splits(source: Path) -> dict[str, str] | None:
    """Check each test file against ``SPLITS.sha256`` when the release has one."""
    path = source / SPLITS_FILE
    if not present(path):
        return None
    check_file(path, "checksum file", SnapshotError)
    listed = read_splits(path)
    for rel in release_files():
        if rel not in listed:
            raise SnapshotError(f"{path}: lists no sha256 for {rel}")
        check_file(source / rel, "source file", SnapshotError)
        digest = sha256_file(source / rel)
        if digest != listed[rel]:
            raise SnapshotError(f"source {source / rel}: sha256 {digest} does not match {SPLITS_FILE} ({listed[rel]})")
    return {rel: listed[rel] for rel in release_files()}


OUR_SOURCE = OUR_RECORD_SOURCE  # the ``source`` of every item jevkedro writes (synthetic.py)


def composition(rows: list[SnapshotRow], train_fields: int) -> dict[str, Any]:
    """Counts the release does not publish (per language, per type), recorded with the snapshot."""
    by_lang: dict[str, Counter[str]] = {}
    for r in rows:
        c = by_lang.setdefault(r.slices["language"], Counter())
        c["inputs"] += 1
        for q in r.request["questions"].values():
            c["questions"] += 1
            c[f"type:{q['type']}"] += 1
    targets = [t for r in rows for t in r.targets.values()]
    return {
        "by_language": {lang: {"inputs": c["inputs"], "questions": c["questions"],
                               "by_type": {k[5:]: v for k, v in sorted(c.items()) if k.startswith("type:")}}
                        for lang, c in sorted(by_lang.items())},
        "abstain_requests": sum(1 for r in rows if r.slices["abstain"] == "yes"),
        "unknown_candidates": sum(1 for t in targets if t.extra.get("unknown_candidate")),
        "dropped_unknown_mass": sum(1 for t in targets if "dropped_unknown_mass" in t.extra and not t.unscored),
        "unscored_gold_unknown": sum(1 for t in targets if t.unscored),
        "train_fields_ignored": train_fields,
        "questions_with_withheld_fields": sum(len(r.source.get("withheld_question_fields", {})) for r in rows),
    }


def read_release(options: PrepareOptions, view: str = "jevalt_bench") -> Release:
    """Read the three test files of a JevAlt-Bench release folder.

    Checks the folder's data-kind marker, each file against ``SPLITS.sha256`` (when the release
    has one) and the manifest's pins, ids unique per file and every record's provenance stamp;
    the content is ``(language, path, line, item)`` per item, files in the order en, tr, de.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    marker = check_data_kind(source, FAMILY, data)
    pins = {p["file"]: p for p in manifest["sources"].get(data, [])}
    splits = check_splits(source)
    files, records = [], []
    train_fields = 0
    for lang, rel in zip(LANGUAGES, release_files()):
        path = source / rel
        files.append(check_source(path, pins.get(rel)))
        seen: dict[str, int] = {}
        for lineno, obj in read_jsonl(path):
            if obj.get("id") in seen:
                raise SourceFormatError(f"{path}:{lineno}: id {obj['id']!r} repeats line {seen[obj['id']]}")
            seen[obj.get("id")] = lineno
            train_fields += "train" in obj
            check_record_stamp(f"{path}:{lineno}", obj.get("source"), data, field="source")
            records.append((lang, path, lineno, obj))
    notes: dict[str, Any] = {"splits_sha256": splits, "train_fields_ignored": train_fields}
    if marker:
        notes["synthetic"] = marker
    return Release(FAMILY, data, source, tuple(files), records, options, notes)


def build(release: Release, view: str = "jevalt_bench") -> PreparedView:
    """Map every item of the release, in file order (pure)."""
    manifest = family_manifest(FAMILY)
    rows = [map_row(path, lineno, obj, lang) for lang, path, lineno, obj in release.content]
    notes = {"release": manifest["upstream"]["release"], "splits_sha256": release.notes["splits_sha256"],
             "composition": composition(rows, release.notes["train_fields_ignored"])}
    if "synthetic" in release.notes:
        notes["synthetic"] = release.notes["synthetic"]
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data), notes=notes)


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


# ---------------------------------------------------------------------------------------------
# scoring


def abstain_summary(table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """How the ``unknown`` candidate fared: it is the last candidate of each marked question."""
    m = ~table.unscored
    offered = m & (table.slices.get("unknown_candidate", np.array([""] * len(table))) == "yes")
    last = table.K - 1
    pred, _ = M.top_label(table.P)
    valid = table.valid & offered
    gold_unknown = offered & (table.label == last)
    predicted_unknown = valid & (pred == last)
    sent = any(bool((r.get("meta") or {}).get("abstain_flag_sent")) for r in predictions.values())
    return {
        "questions_with_unknown_candidate": int(offered.sum()),
        "gold_unknown": int(gold_unknown.sum()),
        "predicted_unknown": int(predicted_unknown.sum()),
        "unknown_correct": int((predicted_unknown & gold_unknown).sum()),
        "unscored_gold_unknown_without_candidate": int(table.unscored.sum()),
        "abstain_flag_sent": sent,
        "rule": "the unknown candidate is offered only where the row's public abstain flag is true; "
                "predicting it is correct exactly when the gold label is unknown",
    }


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: the reference-protocol report with JevOss's equal-mass 15-bin ECE."""
    manifest = family_manifest(FAMILY)
    report = reference_report(
        table, OFFICIAL_SLICES, "equal_frequency", family=FAMILY, release=manifest["upstream"]["release"],
        data=getattr(snapshot, "data", None),
        slices_not_available={"task": "question ids are free per row; see the type slice",
                              "difficulty": "the release has no difficulty field"},
        domain_from="the row's top-level source field (empty when absent)",
        comparability="upstream comparisons drop rows needing unknown for models without abstain; "
                      "this report keeps every question and marks them (unknown_candidate slice)",
    )
    report["abstain"] = abstain_summary(table, predictions or {})
    report["upstream_metrics"] = upstream_metrics(table)
    return report


UPSTREAM_RESAMPLES, UPSTREAM_SEED = 1000, 0


def _upstream_values(P: np.ndarray, label: np.ndarray, conf: np.ndarray, correct: np.ndarray) -> dict[str, float | None]:
    """JevOss's overall figures of a set of decisions: accuracy, Brier and NLL against the hard
    label, 15-bin equal-mass ECE, selective AUROC (right above wrong by top probability, ties
    averaged) and coverage at 5 % risk."""
    rows = np.arange(len(label))
    p_gold = P[rows, label]
    return {
        "accuracy": float(correct.mean()),
        "brier": float(((P ** 2).sum(axis=1) - 2 * p_gold + 1).mean()),
        "nll": float(-np.log(np.maximum(p_gold, M.NLL_FLOOR)).mean()),
        "ece": M.ece_equal_frequency(conf, correct),
        "auroc": stats.selective_auroc(conf, correct),
        "coverage@5%": stats.coverage_at_risk(conf, correct, 0.05),
    }


def upstream_metrics(table: QuestionTable) -> dict[str, Any]:
    """JevOss's overall figures with its bootstrap intervals, reproduced with its settings: the
    decisions are the valid hard-label answers; whole items (requests) are drawn with replacement
    by ``random.Random(0).choices`` — the same stream as ``numpy.random.RandomState([0])``'s
    uniforms, ``floor(u * G)`` — 1,000 times, each resample's decisions kept in drawn order (the
    equal-mass ECE and coverage sort stably, as Python's ``sorted``), and the interval is the sorted
    values at ``int(0.025 n)`` and ``int(0.975 n) - 1`` (resamples where a metric is undefined dropped)."""
    rows = ~table.unscored & (table.label >= 0) & table.valid
    if not rows.any():
        return {"n": 0}
    P, label = table.P[rows], table.label[rows]
    pred, conf = M.top_label(P)
    correct = pred == label
    items, codes = np.unique(table.request_id[rows].astype(str), return_index=False, return_inverse=True)
    first = {c: i for i, c in reversed(list(enumerate(codes.tolist())))}  # items in order of first appearance
    rank = np.empty(len(items), dtype=np.intp)
    rank[sorted(first, key=first.get)] = np.arange(len(items))
    codes = rank[codes]
    order = np.argsort(codes, kind="stable")
    lens = np.bincount(codes, minlength=len(items))
    starts = np.cumsum(lens) - lens
    G = len(items)
    draws = np.floor(np.random.RandomState([UPSTREAM_SEED]).random_sample((UPSTREAM_RESAMPLES, G)) * G).astype(np.intp)
    values: dict[str, list[float]] = {}
    for d in draws:
        L = lens[d]
        idx = order[np.repeat(starts[d] - (np.cumsum(L) - L), L) + np.arange(L.sum())]
        for name, value in _upstream_values(P[idx], label[idx], conf[idx], correct[idx]).items():
            if value is not None:
                values.setdefault(name, []).append(value)
    point = _upstream_values(P, label, conf, correct)
    intervals = {}
    for name, vals in values.items():
        v = sorted(vals)
        intervals[name] = [v[int(0.025 * len(v))], v[int(0.975 * len(v)) - 1]]
    return {"n": int(rows.sum()), "items": G, **point, "intervals": intervals,
            "settings": {"resamples": UPSTREAM_RESAMPLES, "seed": UPSTREAM_SEED, "unit": "item (request)",
                         "interval": "sorted resamples at int(0.025 n) and int(0.975 n) - 1",
                         "decisions": "valid hard-label answers (argmax ties to the first candidate)"}}
