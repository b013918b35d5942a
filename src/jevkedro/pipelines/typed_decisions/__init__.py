"""Typed-Decisions (``LocalLLaMA/typed-decisions``, config ``all``, split ``test``): source mapping
and ``official`` report. Decisions on the spec's Unknowns are listed in this package's README.md.

Upstream: one Parquet file, ``all/test-00000-of-00001.parquet``; a row is a case with JSON-text
cells ``state``, ``questions``, ``gold`` (plus ``factors``, ``label_agreement``) and ``id``,
``workflow``, ``split``, ``n_questions``. Mapping (the family README):

- one request per row, in file order: the decoded ``state`` object and all of the case's
  questions (``type``, ``instructions``, ``criteria``); ``gold``, ``factors``,
  ``label_agreement``, ``id``, ``split`` and ``workflow`` never reach the request;
- candidates: noul ``false``, ``true`` (the source's order, docs/protocol.md §1, so a P = 0.5 tie goes
  to ``false``); choice the criteria keys in order; score ``"0".."K-1"``;
- target: the explicit ``label`` (its index) *and* ``probabilities`` normalised to sum 1 in
  candidate order; ``reference_argmax`` (the first-key argmax of the gold distribution, the
  card's accuracy basis) is kept beside them for the secondary card-compatible accuracy; the
  number of questions where the two differ is checked against the published 31 (official and
  synthetic data) and recorded for every data kind.

``official`` is the JevalKit reference-protocol report (generic 15-bin equal-width ECE over the
explicit label) plus the family block ``teacher_agreement`` (label accuracy, KL to the reference,
Brier, cross-entropy), the card-compatible secondary metrics and the model's data exposure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare, wire_question
from jevkedro.files import present
from jevkedro.nodes import metrics as M
from jevkedro.nodes.parquet_source import read_parquet_rows, where
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError, each_row
from jevkedro.nodes.sources import check_source, json_cell
from jevkedro.nodes.validate import SUM_TOLERANCE, QuestionTable
from jevkedro.protocol import NOUL_ORDER_FALSE_FIRST, SnapshotRow, Target

FAMILY = "typed_decisions"
VIEWS = ("typed_decisions",)
RELEASE_FILE = "all/test-00000-of-00001.parquet"
REQUIRED_COLUMNS = ("id", "workflow", "split", "state", "questions", "gold", "n_questions")
OPTIONAL_COLUMNS = ("factors", "label_agreement")
# Reference-protocol groups: task = question id (Unknown 6), domain = workflow, difficulty has
# no source field and is the constant "unknown".
OFFICIAL_SLICES = {
    "task": "question",
    "type": "type",
    "domain": "domain",
    "language": "language",
    "difficulty": "difficulty",
    "domain_task": ("domain", "question"),
}
TEACHER_NOTE = ("All Typed-Decisions labels and reference distributions are outputs of a teacher "
                "model: these numbers measure agreement with the teacher, not correctness.")
LABEL_BASIS_NOTE = ("Accuracy and ECE use the explicit gold label; the dataset card's accuracy uses the "
                    "first-key argmax of the gold distribution instead, which differs on tied gold maxima "
                    "(31 of 2,000 questions in the pinned release). The card-compatible figure is in "
                    "card_compatible.")


# ---------------------------------------------------------------------------------------------
# source mapping


def decode_state(loc: str, text: Any) -> dict[str, Any]:
    """The decoded state object. A state that is not JSON text of an object is rejected
    (Unknown 7): the card describes it as the JSON of the state object, so anything else means a
    different file or a damaged row."""
    state = json_cell(loc, "state", text)
    if not isinstance(state, dict):
        raise SourceFormatError(f"{loc}: state must decode to a JSON object, got {type(state).__name__}")
    return state


def normalised_reference(loc: str, qid: str, probs: Any, candidates: list[str],
                         tolerance: float = SUM_TOLERANCE) -> tuple[float, ...]:
    """The gold distribution in candidate order, divided by its sum (Unknown 5).

    Keys must be exactly the candidate keys; values finite and >= 0; the sum within
    ``1 ± tolerance`` (the answers' band, docs/protocol.md §3) — beyond it the row is rejected, since a
    mean of three distributions cannot stray that far unless the cell is damaged.
    """
    if not isinstance(probs, Mapping):
        raise SourceFormatError(f"{loc}: question {qid!r}: gold probabilities must be an object")
    if set(probs) != set(candidates):
        raise SourceFormatError(f"{loc}: question {qid!r}: gold probability keys {sorted(probs)} "
                                f"are not the candidates {candidates}")
    values = [probs[c] for c in candidates]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
               for v in values):
        raise SourceFormatError(f"{loc}: question {qid!r}: gold probabilities must be finite and >= 0, got {values}")
    total = float(sum(values))
    if abs(total - 1.0) > tolerance + 1e-12:
        raise SourceFormatError(f"{loc}: question {qid!r}: gold probabilities sum to {total:.6g}, "
                                f"outside 1 ± {tolerance}")
    return tuple(float(v) / total for v in values)


def first_key_argmax(probs: Mapping[str, float], candidates: list[str]) -> int:
    """Candidate index of the gold distribution's maximum, ties to the first key *of the gold
    object* (the card's scorer), whatever the candidate order."""
    best = max(probs.values())
    first = next(k for k, v in probs.items() if v == best)
    return candidates.index(first)


def label_index(loc: str, qid: str, qtype: str, label: Any, candidates: list[str]) -> int:
    """Index of the explicit label: a choice id, a level (``"2"`` or 2) or ``"true"``/``"false"``
    (a JSON boolean is accepted for noul too)."""
    if qtype == "noul" and isinstance(label, bool):
        key = "true" if label else "false"
    elif qtype == "score" and isinstance(label, int) and not isinstance(label, bool):
        key = str(label)
    else:
        key = label
    if not isinstance(key, str) or key not in candidates:
        raise SourceFormatError(f"{loc}: question {qid!r}: gold label {label!r} is not one of {candidates}")
    return candidates.index(key)


def map_target(loc: str, qid: str, qtype: str, candidates: list[str], gold: Any) -> Target:
    if not isinstance(gold, Mapping):
        raise SourceFormatError(f"{loc}: question {qid!r}: gold must be an object")
    if gold.get("type") not in (None, qtype):
        raise SourceFormatError(f"{loc}: question {qid!r}: gold type {gold.get('type')!r} for a {qtype} question")
    if "label" not in gold or "probabilities" not in gold:
        raise SourceFormatError(f"{loc}: question {qid!r}: gold needs both 'label' and 'probabilities'")
    probs = normalised_reference(loc, qid, gold["probabilities"], candidates)
    return Target(
        label=label_index(loc, qid, qtype, gold["label"], candidates),
        probabilities=probs,
        extra={"reference_argmax": first_key_argmax(gold["probabilities"], candidates)},
    )


def map_row(path: Path, index: int, raw: Mapping[str, Any]) -> SnapshotRow:
    """One upstream row -> one snapshot row (the request never sees gold or metadata)."""
    loc = where(path, index)
    if raw.get("split") != "test":
        raise SourceFormatError(f"{loc}: split is {raw.get('split')!r}; the evaluation set is the 'test' split")
    rid, workflow = raw.get("id"), raw.get("workflow")
    if not isinstance(rid, str) or not isinstance(workflow, str) or not rid.startswith(f"{workflow}_"):
        raise SourceFormatError(f"{loc}: id {rid!r} is not '<workflow>_<NNNNNN>' for workflow {workflow!r}")
    state = decode_state(loc, raw["state"])
    questions = json_cell(loc, "questions", raw["questions"])
    gold = json_cell(loc, "gold", raw["gold"])
    if not isinstance(questions, dict) or not questions:
        raise SourceFormatError(f"{loc}: questions must be a non-empty object")
    if not isinstance(gold, dict) or set(gold) != set(questions):
        have = sorted(gold) if isinstance(gold, dict) else type(gold).__name__
        raise SourceFormatError(f"{loc}: gold keys {have} are not the question ids {sorted(questions)}")
    if raw["n_questions"] != len(questions):
        raise SourceFormatError(f"{loc}: n_questions is {raw['n_questions']}, but {len(questions)} questions")
    wire_questions, candidates, targets = {}, {}, {}
    for qid, q in questions.items():
        wire, candidates[qid] = wire_question(loc, qid, q, NOUL_ORDER_FALSE_FIRST)
        wire_questions[qid] = wire
        targets[qid] = map_target(loc, qid, wire["type"], candidates[qid], gold[qid])
    source: dict[str, Any] = {"id": rid, "file": RELEASE_FILE, "row": index + 1, "split": raw["split"]}
    for column in OPTIONAL_COLUMNS:
        if raw.get(column) is not None:
            source[column] = json_cell(loc, column, raw[column])
    return SnapshotRow(
        request_id=rid,
        request={"state": state, "questions": wire_questions},
        candidates=candidates,
        targets=targets,
        slices={"domain": workflow, "language": "en", "difficulty": "unknown"},
        source=source,
    )


def check_workflows(rows: list[SnapshotRow], path: Path, expected: Mapping[str, int]) -> None:
    """The release has a fixed number of cases per workflow; name every workflow that differs."""
    found = Counter(row.slices["domain"] for row in rows)
    diffs = [f"{w}: found {found.get(w, 0)}, expected {n}" for w, n in expected.items() if found.get(w, 0) != n]
    diffs += [f"{w}: found {n}, expected none (unknown workflow)" for w, n in found.items() if w not in expected]
    if diffs:
        raise SnapshotError(f"typed_decisions from {path}: cases per workflow differ from the manifest: "
                            + "; ".join(diffs))


def label_argmax_disagreements(rows: list[SnapshotRow]) -> int:
    """Questions whose explicit label is not the first-key argmax of the gold distribution."""
    return sum(t.label != t.extra["reference_argmax"] for row in rows for t in row.targets.values())


def check_disagreements(found: int, path: Path, expected: int) -> None:
    """The pinned release has a published number of label/argmax disagreements (README: 31, all
    on tied gold maxima). The file hash is pinned, so a different number means the mapping of
    ``label`` or of the first-key argmax is wrong: refuse, naming both numbers."""
    if found != expected:
        raise SnapshotError(f"typed_decisions from {path}: the explicit label differs from the first-key argmax "
                            f"of the gold distribution on {found} questions, expected {expected}")


def read_release(options: PrepareOptions, view: str = "typed_decisions") -> Release:
    """Read a release folder holding ``all/test-00000-of-00001.parquet`` (as downloaded from the Hub).

    Checks the folder's data-kind marker, the file's pinned sha256, that it is this release (not
    the Intern-Decision re-encoding) with every required column, and its in-file stamp; the
    content is ``(path, row index, row)`` per Parquet row, in file order.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    check_data_kind(source, FAMILY, data)
    path = source / RELEASE_FILE
    if not present(path):  # what is there is judged by check_source
        near = sorted(p.name for p in source.glob("*.jsonl")) if source.is_dir() else []
        hint = (f" (found {near}: the Intern-Decision accuracy-v1 JSONL re-encoding is not this release)"
                if near else "")
        raise SnapshotError(f"source file not found: {path}{hint}; download the release as README.md says")
    pins = manifest["sources"].get(data)
    try:
        source_file = check_source(path, pins[0] if pins else None)
    except SnapshotError as exc:
        raise SnapshotError(f"{exc} (the pinned revision is {manifest['upstream']['revision']})") from None
    parquet = read_parquet_rows(path)
    if "gold" not in parquet.columns and "targets" in parquet.columns:
        raise SourceFormatError(f"{path}: has 'targets' instead of 'gold': this looks like the Intern-Decision "
                                "re-encoding, which is not the upstream release")
    missing = [c for c in REQUIRED_COLUMNS if c not in parquet.columns]
    if missing:
        raise SourceFormatError(f"{path}: missing column(s) {missing}; found {parquet.columns}")
    check_data_kind(source, FAMILY, data, file_marker=parquet.file_marker)
    notes = {"ignored_columns": [c for c in parquet.columns if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS],
             "missing_optional_columns": [c for c in OPTIONAL_COLUMNS if c not in parquet.columns]}
    return Release(FAMILY, data, source, (source_file,), [(path, i, raw) for i, raw in enumerate(parquet.rows)],
                   options, notes)


def build(release: Release, view: str = "typed_decisions") -> PreparedView:
    """Map the release's rows, in file order, and check the release-wide counts that need the
    mapped rows (cases per workflow, label/argmax disagreements; official and synthetic data)."""
    manifest = family_manifest(FAMILY)
    rows = [map_row(path, index, raw) for path, index, raw in release.content]
    path = release.source / RELEASE_FILE
    disagreements = label_argmax_disagreements(rows)
    if release.data in ("official", "synthetic"):
        check_workflows(rows, path, manifest["release"]["cases_per_workflow"])
        check_disagreements(disagreements, path, manifest["release"]["label_argmax_disagreements"])
    return PreparedView(
        view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data),
        notes={"release": f"{manifest['upstream']['dataset']} @ {manifest['upstream']['revision']}",
               "data_kind": manifest["data_kinds"][release.data],
               "ignored_columns": release.notes["ignored_columns"],
               "label_argmax_disagreements": disagreements,
               "missing_optional_columns": release.notes["missing_optional_columns"]},
    )


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


# ---------------------------------------------------------------------------------------------
# scoring


def _mean(x: np.ndarray) -> float | None:
    return float(np.mean(x)) if len(x) else None


def _scored(table: QuestionTable, rows: np.ndarray) -> np.ndarray:
    """The scored questions among ``rows`` (a boolean mask over the table, or ascending indices),
    as ascending indices: both select the same questions in the same order, so every mean below
    sums the same values in the same order either way."""
    idx = np.flatnonzero(rows) if rows.dtype == bool else rows
    return idx[~table.unscored[idx]]


@dataclass(frozen=True)
class TeacherTerms:
    """Each question's terms of :func:`teacher_agreement`, computed once for the view: a group's
    figures are then means over its questions (every term is a function of its own row, so the
    same values, summed in the same order, as computing them group by group). All but KL are the
    generic metrics' per-question terms (:func:`jevkedro.nodes.metrics.table_stats`, kept on the
    table)."""

    hard: np.ndarray  # an explicit label
    hit: np.ndarray  # valid, labelled, argmax(p) == label
    soft: np.ndarray  # valid with a reference distribution: counted by the three below
    kl: np.ndarray
    brier: np.ndarray
    cross_entropy: np.ndarray

    @classmethod
    def of(cls, table: QuestionTable) -> TeacherTerms:
        stats = M.table_stats(table)
        soft = stats["prob"]
        kl = np.zeros(len(table))
        idx = np.flatnonzero(soft)
        kl[idx] = M.kl_divergence(table.P[idx], table.Y[idx])
        return cls(stats["hard"], stats["correct"], soft, kl, stats["brier"], stats["nll"])


def teacher_agreement(table: QuestionTable, mask: np.ndarray, terms: TeacherTerms | None = None) -> dict[str, Any]:
    """The family's metrics over one group of questions (``mask``: see :func:`_scored`).

    - ``label_accuracy``: argmax(p) == explicit label (first candidate on ties), every question
      in the denominator (invalid/unsupported/unattempted count as misses);
    - ``kl_to_reference``: KL(y || p) = sum_k y_k ln(y_k / max(p_k, 1e-12)), y the normalised
      reference; ``brier``: sum_k (p_k - y_k)^2; ``cross_entropy``: -sum_k y_k ln max(p_k, 1e-12);
      these three over valid answers only.

    ``terms``: :meth:`TeacherTerms.of` the table, when it serves several groups.
    """
    terms = TeacherTerms.of(table) if terms is None else terms
    m = _scored(table, mask)
    hard = terms.hard[m]
    soft = m[terms.soft[m]]
    return {
        "label_accuracy": float(terms.hit[m][hard].mean()) if hard.any() else None,
        "label_accuracy_n": int(hard.sum()),
        "kl_to_reference": _mean(terms.kl[soft]),
        "brier": _mean(terms.brier[soft]),
        "cross_entropy": _mean(terms.cross_entropy[soft]),
        "probability_n": len(soft),
    }


def reference_argmax_column(snapshot: Snapshot, table: QuestionTable) -> np.ndarray:
    """``reference_argmax`` of every question, aligned with ``table`` (same row/question order)."""
    out_list: list[int] = []
    qids: list[str] = []
    for row in each_row(snapshot.rows):
        for q in row.request["questions"]:
            out_list.append(row.targets[q].extra.get("reference_argmax", -1))
            qids.append(q)
    out = np.array(out_list, dtype=int)
    if len(out) != len(table) or qids != table.question_id.tolist():
        raise ValueError("question table and snapshot are not aligned")
    return out


def card_compatible(table: QuestionTable, mask: np.ndarray, reference_argmax: np.ndarray) -> dict[str, Any]:
    """Secondary, card-style metrics (Unknown 9, Unknown 3): accuracy = argmax(p) == first-key argmax
    of the gold distribution (misses as in our accuracy); ECE over 10 equal-width bins with that
    agreement as correctness, over valid answers (``mask``: see :func:`_scored`)."""
    m = _scored(table, mask)
    P, ref, valid = table.P[m], reference_argmax[m], table.valid[m]
    pred, conf = M.top_label(P)
    agree = valid & (pred == ref)
    return {
        "argmax_accuracy": float(agree.mean()) if len(agree) else None,
        "argmax_accuracy_n": int(len(agree)),
        "ece_10_bins": M.ece(conf[valid], agree[valid], 10),
        "ece_n": int(valid.sum()),
    }


def exposure(predictions: Mapping[str, Mapping[str, Any]], fitted: list[str], models: Iterable[Any] | None = None) -> dict[str, Any]:
    """The model's data-exposure class: ``fitted`` for models known to be fine-tuned on this
    dataset's train split, else ``general`` (no such exposure recorded). Never rank the two
    classes together without saying so. ``models``: the resolved model of every record, when the
    question table already read them (else each record of ``predictions`` is read for it)."""
    models = (r.get("model") for r in predictions.values()) if models is None else models
    ids = sorted({str(m) for m in models if m})
    is_fitted = any(f in i for i in ids for f in fitted)
    return {"model_ids": ids, "class": "fitted" if is_fitted else "general",
            "known_fitted_models": fitted,
            "note": "fitted models saw the train split; rank fitted and general models separately"}


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``official``: the reference-protocol report plus the Typed-Decisions family rules."""
    manifest = family_manifest(FAMILY)
    everything = np.ones(len(table), dtype=bool)
    ref = reference_argmax_column(snapshot, table)
    label_vs_ref = (table.label >= 0) & (ref >= 0) & (table.label != ref)

    groups = {}  # each slice value's questions as ascending indices (one stable sort, not a mask per value)
    for name, col in (("by_domain", "domain"), ("by_type", "type")):
        coded = M.slice_codes(table, col)  # the table's integer codes: no strings sorted
        if coded is None:
            raise KeyError(f"the question table has no {col!r} slice")
        values, codes = coded
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(values) + 1))
        groups[name] = {v: order[bounds[j]: bounds[j + 1]] for j, v in enumerate(values)}

    def grouped(fn, *args):
        out = {"overall": fn(table, everything, *args)}
        for name, by_value in groups.items():
            out[name] = {v: fn(table, rows, *args) for v, rows in by_value.items()}
        return out

    return reference_report(
        table, OFFICIAL_SLICES, manifest["scoring"]["reference_ece"],
        family=FAMILY, data=snapshot.data, data_kind=manifest["data_kinds"][snapshot.data],
        release=f"{manifest['upstream']['dataset']} @ {manifest['upstream']['revision']}",
        label_basis=LABEL_BASIS_NOTE,
        teacher_agreement={"note": TEACHER_NOTE, **grouped(teacher_agreement, TeacherTerms.of(table))},
        card_compatible={"secondary": True, **grouped(card_compatible, ref)},
        label_differs_from_reference_argmax=int(label_vs_ref.sum()),
        exposure=exposure(predictions, manifest["release"]["fitted_models"],
                          table.requests.model if getattr(table, "requests", None) is not None else None),
    )
