"""DecisionBench (``Hanno-Labs/decision-bench``, standard ``eval`` view): mapping and ``official``.

Upstream: one Parquet file, one row per decision (the family README). Mapping (the family README):

- one request per row with one question ``decision``; the request holds the decoded
  ``state_json`` and the question only. ``row_id``, gold fields, ``source_json``,
  ``reasoning_type`` and the taxonomy go to other columns;
- ``binary_classification`` -> ``noul``: criteria ``{"true": d(c0), "false": d(c1)}``, so the
  *first* candidate is ``true`` whatever its name (positional, as upstream); candidate keys
  ``true, false`` are the original order;
- ``candidate_selection`` -> ``choice`` with the original candidate ids, in the original order;
- ``ordinal_scoring`` -> ``score``: levels sorted ascending by ``ordinal_value`` (null -> 0.0,
  stable); the candidates column keeps the *original* order and holds each candidate's level key
  (e.g. ``["2", "0", "1"]``), the target keeps ``gold_probabilities`` in the original order and the
  inverse map (``level_ids``: level -> original id) with the ``ordinal_values``. The request never
  sees this map.

``d(c)`` is ``"label: description"``, or ``label`` when the description is null. Only the 15
standard columns are read, by name; compact columns of later revisions are never read.

Scoring works in the original candidate order (argmax ties go to the first original candidate);
RPS and ordinal error are taken in ``ordinal_value`` order. ``official`` is the reference-protocol
report with the upstream NLL floor 1e-15, equal-width 15-bin ECE ``min(int(conf*15), 14)``, and
the family block (all-sample accuracy, coverage, soft NLL at both floors, ordinal error).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jevkedro.config import PrepareOptions
from jevkedro.family import Release, check_data_kind, expected_for, family_manifest, make_prepare
from jevkedro.nodes import metrics as M
from jevkedro.nodes.parquet_source import DATA_KIND_KEY
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import PreparedView, Snapshot, SnapshotError, SourceFormatError
from jevkedro.nodes.sources import check_source, json_cell
from jevkedro.nodes.validate import QuestionTable
from jevkedro.protocol import NOUL_ORDER_TRUE_FIRST, SnapshotRow, Target

FAMILY = "decisionbench"
VIEWS = ("decisionbench",)
QUESTION_ID = "decision"
STANDARD_COLUMNS = (
    "row_id", "task_id", "task_name", "family", "domain", "primitive", "instruction", "state_json",
    "candidates_json", "gold_candidate_id", "gold_probabilities", "source_json", "candidate_count",
    "reasoning_required", "reasoning_type",
)
QUESTION_TYPE = {"binary_classification": "noul", "candidate_selection": "choice", "ordinal_scoring": "score"}
MIN_CANDIDATES, MAX_CANDIDATES = 2, 255
GOLD_SUM_TOLERANCE = 1e-6
REFERENCE_NLL_FLOOR = 1e-15  # upstream scoring.py; the generic metrics keep M.NLL_FLOOR (1e-12)
LANGUAGE = "eng"
OFFICIAL_SLICES = {
    "task": "task",
    "task_id": "task_id",
    "primitive": "primitive",
    "family": "family",
    "domain": "domain",
    "candidate_count": "candidate_count",
    "language": "language",
    "difficulty": "difficulty",
}


# ---------------------------------------------------------------------------------------------
# source mapping


def describe(candidate: dict[str, Any]) -> str:
    """Upstream's candidate text: ``"label: description"``, or ``label`` when description is null."""
    label = str(candidate["label"])
    return label if candidate.get("description") is None else f"{label}: {candidate['description']}"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _candidates(where: str, text: Any) -> list[dict[str, Any]]:
    cands = json_cell(where, "candidates_json", text)
    if not isinstance(cands, list) or not all(isinstance(c, dict) for c in cands):
        raise SourceFormatError(f"{where}: candidates_json must be a list of objects")
    if not MIN_CANDIDATES <= len(cands) <= MAX_CANDIDATES:
        raise SourceFormatError(f"{where}: {len(cands)} candidates, expected {MIN_CANDIDATES}-{MAX_CANDIDATES}")
    for j, c in enumerate(cands):
        for key in ("id", "label"):
            if not isinstance(c.get(key), (str, int)) or isinstance(c.get(key), bool):
                raise SourceFormatError(f"{where}: candidate {j} needs a string {key!r}, got {c.get(key)!r}")
    ids = [str(c["id"]) for c in cands]
    if len(set(ids)) != len(ids):
        dup = sorted(k for k, n in Counter(ids).items() if n > 1)
        raise SourceFormatError(f"{where}: candidate ids are not unique: {dup}")
    return cands


def _gold(where: str, ids: list[str], gold_id: Any, gold_probs: Any) -> tuple[int, tuple[float, ...]]:
    """Check the gold invariants (the family README) and return (gold index, distribution)."""
    if gold_probs is None or len(gold_probs) != len(ids):
        n = None if gold_probs is None else len(gold_probs)
        raise SourceFormatError(f"{where}: gold_probabilities has {n} values for {len(ids)} candidates")
    probs = tuple(float(p) if _is_number(p) else float("nan") for p in gold_probs)
    if not all(0.0 <= p <= 1.0 for p in probs):
        raise SourceFormatError(f"{where}: gold_probabilities must be numbers in [0, 1], got {list(gold_probs)}")
    if abs(sum(probs) - 1.0) > GOLD_SUM_TOLERANCE:
        raise SourceFormatError(f"{where}: gold_probabilities sum to {sum(probs):.9g}, not 1 within {GOLD_SUM_TOLERANCE}")
    if str(gold_id) not in ids:
        raise SourceFormatError(f"{where}: gold_candidate_id {gold_id!r} is not a candidate id {ids}")
    label = ids.index(str(gold_id))
    first_argmax = int(np.argmax(probs))
    if label != first_argmax:
        raise SourceFormatError(
            f"{where}: gold_candidate_id {gold_id!r} is not the first argmax of gold_probabilities "
            f"({ids[first_argmax]!r})"
        )
    return label, probs


def map_row(where: str, rec: dict[str, Any], file: str = "", row: int | None = None) -> SnapshotRow:
    """One standard-view record -> one snapshot row (the request never sees gold or metadata).

    ``where`` names the record in error messages; ``file`` (the release-relative file name) and
    ``row`` (its index there) are kept as provenance, so the snapshot does not depend on where
    the release folder lies.
    """
    primitive = rec["primitive"]
    if primitive not in QUESTION_TYPE:
        raise SourceFormatError(f"{where}: unknown primitive {primitive!r}; expected one of {sorted(QUESTION_TYPE)}")
    for key in ("row_id", "task_name", "family", "domain", "instruction"):
        if not isinstance(rec[key], str) or not rec[key]:
            raise SourceFormatError(f"{where}: {key} must be a non-empty string, got {rec[key]!r}")
    task_id = f"{rec['domain']}/{rec['family']}/{primitive}/{rec['task_name']}"
    if rec["task_id"] != task_id:
        raise SourceFormatError(f"{where}: task_id {rec['task_id']!r} is not <domain>/<family>/<primitive>/<task_name> ({task_id!r})")
    cands = _candidates(where, rec["candidates_json"])
    ids = [str(c["id"]) for c in cands]
    if rec["candidate_count"] != len(cands):
        raise SourceFormatError(f"{where}: candidate_count {rec['candidate_count']} but {len(cands)} candidates")
    label, probs = _gold(where, ids, rec["gold_candidate_id"], rec["gold_probabilities"])
    qtype = QUESTION_TYPE[primitive]
    extra: dict[str, Any] = {"gold_id": ids[label]}
    if qtype == "noul":
        if len(cands) != 2:
            raise SourceFormatError(f"{where}: a binary row needs exactly 2 candidates, found {len(cands)}")
        # positional, as upstream: candidates[0] is "true" whatever its name (README, Unknown 8)
        question = {"type": "noul", "instructions": rec["instruction"],
                    "criteria": {"true": describe(cands[0]), "false": describe(cands[1])}}
        keys = list(NOUL_ORDER_TRUE_FIRST)
        extra["candidate_ids"] = ids
    elif qtype == "choice":
        question = {"type": "choice", "instructions": rec["instruction"],
                    "criteria": {cid: describe(c) for cid, c in zip(ids, cands)}}
        keys = ids
    else:
        values = []
        for c in cands:
            v = c.get("ordinal_value")
            if v is not None and not _is_number(v):
                raise SourceFormatError(f"{where}: ordinal_value {v!r} of candidate {c['id']!r} is not a number")
            values.append(0.0 if v is None else v)  # null is 0.0, as upstream's sort key
        if len(set(values)) != len(values):
            raise SourceFormatError(f"{where}: ordinal values are not unique: {values}")
        level_of = np.argsort(np.argsort(values, kind="stable"), kind="stable")  # original j -> level
        by_level = sorted(range(len(cands)), key=lambda j: level_of[j])
        question = {"type": "score", "instructions": rec["instruction"],
                    "criteria": [describe(cands[j]) for j in by_level]}
        keys = [str(int(level_of[j])) for j in range(len(cands))]
        extra.update(candidate_ids=ids, ordinal_values=values, level_ids=[ids[j] for j in by_level])
    state = json_cell(where, "state_json", rec["state_json"])
    provenance = json_cell(where, "source_json", rec["source_json"])
    reasoning = bool(rec["reasoning_required"])
    return SnapshotRow(
        request_id=rec["row_id"],
        request={"state": state, "questions": {QUESTION_ID: question}},
        candidates={QUESTION_ID: keys},
        targets={QUESTION_ID: Target(label=label, probabilities=probs, extra=extra)},
        slices={"task": rec["task_name"], "task_id": task_id, "primitive": primitive,
                "family": rec["family"], "domain": rec["domain"], "candidate_count": str(len(cands)),
                "reasoning_required": "yes" if reasoning else "no",
                "difficulty": "reasoning" if reasoning else "standard", "language": LANGUAGE},
        source={"row_id": rec["row_id"], "task_id": task_id, "reasoning_type": rec["reasoning_type"],
                "provenance": provenance, "file": file, "row": row},
    )


def read_standard_rows(path: Path) -> list[dict[str, Any]]:
    """The standard columns of the Parquet file, selected by name (compact columns never read)."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # pyarrow raises several types for a non-Parquet file
        raise SourceFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in STANDARD_COLUMNS if c not in names]
    if missing:
        raise SourceFormatError(f"{path}: missing standard column(s) {missing}; found {names}")
    table = pq.read_table(path, columns=list(STANDARD_COLUMNS))
    columns = {c: table.column(c).to_pylist() for c in STANDARD_COLUMNS}
    return [dict(zip(STANDARD_COLUMNS, values)) for values in zip(*columns.values())]


def file_data_kind(path: Path) -> str | None:
    """The data kind jevkedro stamps in the Parquet schema metadata of files it writes (None for an
    upstream file); checked by the shared rule of :func:`jevkedro.family.check_data_kind`."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for a non-Parquet file
        raise SourceFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    stamp = meta.get(DATA_KIND_KEY.encode("utf-8"))
    return stamp.decode("utf-8", "replace") if stamp is not None else None


def other_columns(path: Path) -> list[str]:
    """Column names beyond the standard view (e.g. the compact columns); their data is not read."""
    import pyarrow.parquet as pq

    return [c for c in pq.read_schema(path).names if c not in STANDARD_COLUMNS]


def composition(rows: list[SnapshotRow]) -> dict[str, Any]:
    """Counts the release does not publish (README, Unknown 3), recorded with every snapshot."""
    def count(key: str) -> dict[str, int]:
        return dict(sorted(Counter(r.slices[key] for r in rows).items()))

    tasks = {(r.slices["task"], r.slices["primitive"], r.slices["family"], r.slices["domain"]) for r in rows}
    soft = sum(1 for r in rows if sum(1 for p in r.targets[QUESTION_ID].probabilities if p > 0) > 1)
    datasets: Counter[str] = Counter()
    for r in rows:
        prov = r.source.get("provenance")
        inner = prov.get("source") if isinstance(prov, dict) else None
        name = (inner or {}).get("dataset") if isinstance(inner, dict) else None
        datasets[str(name or (prov.get("repo") if isinstance(prov, dict) else None) or "unknown")] += 1
    return {
        "rows": len(rows),
        "tasks": len(tasks),
        "primitives": len({r.slices["primitive"] for r in rows}),
        "families": len({r.slices["family"] for r in rows}),
        "domains": len({r.slices["domain"] for r in rows}),
        "by_primitive": count("primitive"),
        "by_family": count("family"),
        "by_domain": count("domain"),
        "by_task_id": count("task_id"),
        "by_candidate_count": dict(sorted(Counter(int(r.slices["candidate_count"]) for r in rows).items())),
        "reasoning_required": sum(1 for r in rows if r.slices["reasoning_required"] == "yes"),
        "gold": {"soft": soft, "one_hot": len(rows) - soft},
        "by_source_dataset": dict(sorted(datasets.items())),
    }


def check_structure(comp: dict[str, Any], want: dict[str, Any], path: Path) -> None:
    """Compare the published structure (tasks, primitives, families, domains) with the pins."""
    diffs = [f"{k}: found {comp.get(k)}, expected {v}" for k, v in want.items() if comp.get(k) != v]
    if diffs:
        raise SnapshotError(f"{FAMILY} from {path}: structure differs from the manifest: " + "; ".join(diffs))


def read_release(options: PrepareOptions, view: str = "decisionbench") -> Release:
    """Read the standard ``eval`` Parquet file under the release folder (a Hugging Face download folder).

    Checks the folder's data-kind marker and the file's in-file stamp, its sha256 against the pin,
    and reads the 15 standard columns by name; the content is ``(path, release-relative file, row
    index, record)`` per row, in file order; ``notes.columns_not_read`` names the other columns.
    """
    manifest = family_manifest(FAMILY)
    source, data = Path(options.source), options.data
    marker = check_data_kind(source, FAMILY, data)
    pins = manifest["sources"].get(data) or [{"file": f} for f in manifest["files"]]
    files, records, extra_columns = [], [], {}
    for pin in pins:
        path = source / pin["file"]
        if path.is_file():  # the stamp first: it names the problem better than a hash mismatch
            check_data_kind(source, FAMILY, data, file_marker=(path, file_data_kind(path)))
        files.append(check_source(path, pin))
        extra_columns[pin["file"]] = other_columns(path)
        records.extend((path, pin["file"], i, rec) for i, rec in enumerate(read_standard_rows(path)))
    notes: dict[str, Any] = {"columns_not_read": extra_columns}
    if marker:
        notes["synthetic"] = marker
    return Release(FAMILY, data, source, tuple(files), records, options, notes)


def build(release: Release, view: str = "decisionbench") -> PreparedView:
    """Map every row of the release (pure) and check the published structure (tasks, primitives,
    families, domains) where the manifest pins it for this data kind."""
    manifest = family_manifest(FAMILY)
    rows = [map_row(f"{path}: row {i} (row_id {rec['row_id']!r})", rec, file, i) for path, file, i, rec in release.content]
    comp = composition(rows)
    structure = manifest["views"][view].get("structure", {}).get(release.data)
    if structure:
        check_structure(comp, structure, release.source)
    notes = {"release": manifest["upstream"]["release"], "revision": manifest["upstream"]["revision"],
             "composition": comp, "columns_not_read": release.notes["columns_not_read"]}
    if "synthetic" in release.notes:
        notes["synthetic"] = release.notes["synthetic"]
    return PreparedView(view=view, family=FAMILY, data=release.data, rows=rows, sources=list(release.files),
                        scoring=manifest["scoring"], expected=expected_for(FAMILY, view, release.data), notes=notes)


prepare = make_prepare(FAMILY, VIEWS, read_release, build)


# ---------------------------------------------------------------------------------------------
# scoring


def ordinal_values(rows: list[SnapshotRow], table, index: np.ndarray) -> np.ndarray:
    """Ordinal values in candidate (original) order for the table rows ``index`` (score
    questions), padded with NaN. ``rows`` are the snapshot's rows (one question each)."""
    extra = {r.request_id: r.targets[QUESTION_ID].extra for r in rows}
    V = np.full((len(index), table.P.shape[1]), np.nan)
    for n, i in enumerate(index):
        values = extra[table.request_id[i]]["ordinal_values"]
        V[n, : len(values)] = values
    return V


def ordinal_errors(P: np.ndarray, Y: np.ndarray, V: np.ndarray, label: np.ndarray) -> dict[str, np.ndarray]:
    """Ordinal metrics in ``ordinal_value`` terms (README, Unknown 5), per row.

    - ``ordinal_error``: ``|sum_k v_k p_k - sum_k v_k y_k|`` (expected value against the gold
      distribution's expected value);
    - ``ordinal_error_vs_gold_value``: ``|sum_k v_k p_k - v_gold|``;
    - ``rps``: over the candidates sorted by ``ordinal_value`` (K = candidate count, whatever the
      gaps between values): ``(1/(K-1)) sum_{k<K-1} (P_k - Y_k)^2`` on cumulative sums;
    - ``expected_value``: ``sum_k v_k p_k`` (upstream ``expected_ordinal_score``).
    """
    Vz = np.nan_to_num(V, nan=0.0)
    expected = (P * Vz).sum(axis=1)
    target = (Y * Vz).sum(axis=1)
    gold_value = Vz[np.arange(len(label)), label]
    order = np.argsort(np.where(np.isnan(V), np.inf, V), axis=1, kind="stable")
    K = (~np.isnan(V)).sum(axis=1)
    rps = M.ordinal_rps(np.take_along_axis(P, order, 1), np.take_along_axis(Y, order, 1), K)
    return {"ordinal_error": np.abs(expected - target), "ordinal_error_vs_gold_value": np.abs(expected - gold_value),
            "rps": rps, "expected_value": expected}


ORDINAL_KEYS = {"ordinal_error": "ordinal_error", "ordinal_error_vs_gold_value": "ordinal_error_vs_gold_value",
                "ordinal_rps": "rps", "expected_ordinal_score": "expected_value"}


def per_row(table, rows: list[SnapshotRow]) -> dict[str, np.ndarray]:
    """Everything the family numbers need, once per table row (NaN where a value does not
    apply), so each group only averages 1-D arrays. Every row has a hard label and a gold
    distribution; unscored rows do not occur in this family."""
    valid = table.status == "ok"
    pred, _ = M.top_label(table.P)
    out = {"status": table.status, "valid": valid, "correct": valid & (pred == table.label),
           "nll_reference": np.where(valid, M.nll(table.P, table.Y, REFERENCE_NLL_FLOOR), np.nan),
           "nll_generic": np.where(valid, M.nll(table.P, table.Y, M.NLL_FLOOR), np.nan),
           "is_score": table.qtype == "score"}
    ordinal = np.flatnonzero(valid & out["is_score"])
    errs = ordinal_errors(table.P[ordinal], table.Y[ordinal], ordinal_values(rows, table, ordinal), table.label[ordinal])
    for key, name in ORDINAL_KEYS.items():
        col = np.full(len(table), np.nan)
        col[ordinal] = errs[name]
        out[key] = col
    return out


def family_stats(values: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    """The upstream-style numbers of one group: all-sample accuracy, coverage, soft-gold NLL at
    both floors, ordinal error."""
    status, valid, correct = values["status"][mask], values["valid"][mask], values["correct"][mask]
    n = int(mask.sum())

    def mean(key):
        x = values[key][mask & values["valid"]]
        x = x[~np.isnan(x)]
        return float(x.mean()) if len(x) else None

    out: dict[str, Any] = {
        "rows": n,
        "primary_accuracy": float(correct.sum() / n) if n else None,
        "supported_accuracy": float(correct[valid].mean()) if valid.any() else None,
        "coverage": float(valid.mean()) if n else None,
        "successful_rows": int(valid.sum()),
        "invalid_rows": int((status == "invalid").sum()),
        "unsupported_rows": int((status == "unsupported").sum()),
        "error_rows": int((status == "error").sum()),
        "unattempted_rows": int((status == "unattempted").sum()),
        "nll_upstream_floor_1e-15": mean("nll_reference"),
        "nll_generic_floor_1e-12": mean("nll_generic"),
    }
    if values["is_score"][mask].any():
        out["ordinal_n"] = int((valid & values["is_score"][mask]).sum())
        out.update({key: mean(key) for key in ORDINAL_KEYS})
    return out


def evaluate(snapshot: Snapshot, table: QuestionTable, predictions: Mapping[str, Any]) -> dict[str, Any]:
    """``official``: reference-protocol report (NLL floor 1e-15, equal-width 15-bin ECE) plus the
    family's own numbers per group (the family README)."""
    manifest = family_manifest(FAMILY)
    report = reference_report(table, OFFICIAL_SLICES, "equal_width", nll_floor=REFERENCE_NLL_FLOOR,
                              family=FAMILY, release=manifest["upstream"]["release"],
                              dataset_revision=manifest["upstream"]["revision"],
                              data=getattr(snapshot, "data", None),
                              primary_metric="primary_accuracy (all rows; unsupported, invalid and error rows are misses)",
                              nll_floors={"reference": REFERENCE_NLL_FLOOR, "generic": M.NLL_FLOOR})
    values = per_row(table, snapshot.rows)
    report["groups"]["overall"].update(family_stats(values, np.ones(len(table), dtype=bool)))
    for name, col in OFFICIAL_SLICES.items():
        for key, stats in report["groups"].get(name, {}).items():
            stats.update(family_stats(values, table.slices[col] == key))
    valid = values["valid"]
    _, conf = M.top_label(table.P[valid])
    report["primary_accuracy"] = report["groups"]["overall"]["primary_accuracy"]
    report["ece_bins_overall"] = M.ece(conf, values["correct"][valid], 15, return_bins=True)[1] if valid.any() else []
    return report
