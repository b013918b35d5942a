"""zh-decision-bench v0.2 (``CodyQin/zh-decision-bench``): source mapping and ``official`` report.

Upstream rows (one JSON object per line): ``id, domain, source, state, questions, gold,
difficulty, notes, version``. Mapping (the family README):

- one request per row, all of its questions together, in the file's row order
  (``voice_routing.jsonl`` then ``business_scenarios.jsonl``);
- the request holds ``state`` and the questions (``type``, ``instructions``, ``criteria``) only;
  ``id``, ``gold``, ``notes``, ``source``, ``difficulty`` and ``version`` go to other columns;
- choice candidates: criteria keys in insertion order; score: ``"0".."K-1"``, the gold level
  *name* mapped to its list position; noul: ``true``, ``false`` in that order (gold true -> 0),
  so argmax ties go to ``true`` as upstream's ``numpy.argmax``.

``official`` is the JevalKit reference-protocol report with a right-closed 15-bin ECE; ``task``
is the question id (``route``, ``urgency``, ``escalate``, ``scam``). No temperature is refit.
``official.upstream_metrics`` reproduces what upstream's report publishes per (domain, question),
(ALL, question) and (ALL, ALL) group, with upstream's own settings: accuracy and ECE with bootstrap
95% intervals (1,000 resamples of the group's questions, ``numpy.random.default_rng(42)`` afresh per
group and metric, numpy's linear percentiles), macro AUROC (two candidates: column 1 — ``false``
for noul — is the positive class; more: one-vs-rest mean; only in groups whose questions share
their candidates), base-rate gap and accuracy at 50 % coverage.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare, wire_question
from jevkedro.nodes import compare as stats
from jevkedro.nodes import metrics as M
from jevkedro.nodes.layout import question_layout
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SourceFormatError
from jevkedro.nodes.sources import check_source, read_jsonl
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


UPSTREAM_RESAMPLES, UPSTREAM_SEED = 1000, 42


def _upstream_bootstrap(conf: np.ndarray, correct: np.ndarray) -> dict[str, list[float]]:
    """Upstream's ``bootstrap_ci`` of accuracy and of the right-closed 15-bin ECE: per metric a
    fresh ``default_rng(42)``, 1,000 draws of ``integers(0, N, N)`` (draws made a chunk at a time give
    the same stream), ``np.percentile(stats, [2.5, 97.5])``."""
    bins = M.bin_index(conf, 15, right_closed=True)  # (lo, hi]; a confidence of 0 is in no bin
    acc, ece = stats.question_bootstrap(conf, correct, bins, 15, UPSTREAM_RESAMPLES, UPSTREAM_SEED)
    return {"accuracy_ci": np.percentile(acc, [2.5, 97.5]).tolist(), "ece_ci": np.percentile(ece, [2.5, 97.5]).tolist()}


def upstream_metrics(snapshot: Snapshot | None, table: QuestionTable) -> dict[str, Any]:
    """Upstream's report groups and figures (module docstring), over the questions with a valid
    answer — upstream's prediction records; ``not_valid`` counts the questions left out."""
    live = ~table.unscored & (table.label >= 0)
    valid = live & table.valid
    pred, conf = M.top_label(table.P)
    correct = valid & (pred == table.label)
    layout = None if snapshot is None else getattr(snapshot, "layout", None) or question_layout(list(snapshot.rows))
    if layout is not None and len(layout) == len(table):  # upstream's "same structure": the same candidate labels
        structure = layout.candidate_list_codes()
    else:  # without the snapshot: question id and candidate count (the same partition on v0.2)
        structure = pd.factorize(pd.MultiIndex.from_arrays([np.asarray(table.question_id, dtype=object),
                                                            np.asarray(table.K)]))[0]
    domain, question = table.slices["domain"], table.question_id
    keys = {("ALL", "ALL"): live}
    for q in sorted(set(question[live].tolist())):
        keys[("ALL", q)] = live & (question == q)
        for d in sorted(set(domain[live & (question == q)].tolist())):
            keys[(d, q)] = live & (question == q) & (domain == d)
    groups = {}
    for (d, q), members in keys.items():
        rows = members & valid
        n = int(rows.sum())
        if not n:
            continue
        c, hit = conf[rows], correct[rows]
        same = bool(structure[rows].min() == structure[rows].max())
        k = int(table.K[np.flatnonzero(rows)[0]])
        order = np.argsort(-c)  # upstream: np.argsort(-conf), first round(n/2) kept
        groups[f"{d}/{q}"] = {
            "n": n, "not_valid": int((members & ~valid).sum()),
            "accuracy": float(hit.mean()), "ece": M.ece(c, hit, right_closed=True),
            **_upstream_bootstrap(c, hit),
            "brier": float(M.brier(table.P[rows, :k], table.Y[rows, :k]).mean()) if same else None,
            "nll": float(M.nll(table.P[rows, :k], table.Y[rows, :k]).mean()) if same else None,
            "auroc_macro": stats.macro_auroc(table.P[rows, :k], table.label[rows]) if same else None,
            "base_rate_gap": float(abs(c.mean() - hit.mean())), "mean_confidence": float(c.mean()),
            "coverage_accuracy_50": float(hit[order[: max(1, int(round(0.5 * n)))]].mean()),
        }
    return {"settings": {"resamples": UPSTREAM_RESAMPLES, "seed": UPSTREAM_SEED, "unit": "question",
                         "interval": "numpy percentile [2.5, 97.5], linear", "ece": "15 bins, right-closed",
                         "auroc": "macro; two candidates: column 1 (noul: false) positive; more: one-vs-rest mean",
                         "groups": "(domain, question), (ALL, question), (ALL, ALL); mixed-candidate groups: accuracy/ECE only"},
            "groups": groups}


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: the reference-protocol report, right-closed 15-bin ECE (the family README), and
    upstream's own report figures with their intervals (:func:`upstream_metrics`)."""
    report = reference_report(table, OFFICIAL_SLICES, "equal_width_right_closed",
                              family=FAMILY, release=family_manifest(FAMILY)["upstream"]["release"],
                              temperature_refit=False)
    report["upstream_metrics"] = upstream_metrics(snapshot, table)
    return report
