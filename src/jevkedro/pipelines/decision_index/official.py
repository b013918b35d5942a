"""The ``official`` artefact of the Decision Index view: the edition 0.3 public index.

Input: the verified snapshot and the validated question table (``records``: every question of
every request in snapshot order, with its probabilities, status and target). Steps, per
benchmark (``catalog_id``) and, where its chance rule splits it, per track:

1. a request is *answered* when its status is ``ok`` and every scored question has a valid
   answer; a linked case (requests sharing ``_evaluation.group_id`` in one benchmark) is
   answered only when all of its requests are. Failing only on unscored diagnostic questions
   does not unanswer a request (the family README, decided);
2. the native metric (:data:`NATIVE_METRIC`) over the answered requests' scored fields; the
   predicted option is the argmax, ties to the first option in source order;
3. ``raw = native * answered / requests``;
4. chance correction by the benchmark's rule, read from ``chance[id].method`` of ``index-0.3.json``
   (:mod:`.edition`): pooled, ``skill = clip((raw - chance) / (1 - chance), 0, 1)``; per track
   (GSM8K), each option-count track corrected against ``1 / options`` and clipped, then
   ``skill`` = mean of the track skills and ``raw`` = mean of the track raws; headline track
   (iSarcasmEval), raw and skill of that track alone;
5. ``balanced_skill`` (headline) = 100 x area-weighted mean of gold-weighted area means of
   skills over the 37 counted benchmarks; ``balanced_raw`` the same with raw; ``breadth_skill``
   the weighted geometric mean of area skills. A counted benchmark without requests counts 0
   and is listed under ``missing_benchmarks`` (the index is then ``complete: false``).

The six shown-but-not-counted benchmarks are scored the same way and reported under
``shown_not_counted``; they never enter an index. Generic accuracy/NLL/ECE are in
``report.json`` and are diagnostic only.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from jevkedro.nodes.snapshot import Snapshot, SnapshotError, each_cell
from jevkedro.pipelines.decision_index import scoring as S
from jevkedro.pipelines.decision_index.edition import (
    TASK_TRACK,
    ChanceRule,
    HeadlineTrackCorrection,
    PerTrackCorrection,
    PooledCorrection,
    edition_03,
    run_datasets,
)

SCORER = ("decision-index-0.3 public index (kit rules of index02.py + index-0.3.json, reimplemented by "
          "jevkedro; not the kit's program)")
NATIVE_METRIC: dict[int, str] = {
    1: "case_exact_accuracy", 33: "case_exact_accuracy", 9: "case_exact_accuracy",
    31: "accepted_accuracy", 50: "accepted_accuracy",
    11: "macro_f1", 12: "macro_f1", 39: "macro_f1", 41: "macro_f1", 42: "macro_f1",
    4: "conservative_macro_f1", 5: "conservative_macro_f1", 37: "conservative_macro_f1",
    40: "positive_f1", 59: "positive_f1",
    22: "group_macro_accuracy", 23: "group_macro_accuracy",
    2: "ndcg@10", 36: "ndcg@10",
    38: "review_f1",
}  # every other benchmark: accuracy
POSITIVE_OPTION = {40: "sarcastic", 59: "true", 38: "yes"}  # unless scoring.positive_option says otherwise
MACRO_GROUP_KEY = {22: "song_id", 23: "user_id"}  # metadata key; falls back to the case group id
ACCEPTED_PAYLOAD = {31: ("chess_reference_value", "accepted"), 50: ("human_group_rank", "accepted")}


FIELDS = ("request", "group", "track", "query", "macro", "status", "valid", "scored", "label", "pred", "options",
          "correct", "positive", "score", "gain")  # one benchmark's per-question columns, in this order


def _payload(source: dict[str, Any], *path: str) -> Any:
    cur: Any = source.get("scoring") or {}
    for key in path:
        cur = cur.get(key) if isinstance(cur, dict) else None
    return cur


def _positive_index(source: dict[str, Any], cands: list[str], cid: int) -> int | None:
    key = _payload(source, "positive_option") or POSITIVE_OPTION.get(cid)
    return cands.index(key) if key in cands else None


def _relevant_index(source: dict[str, Any], cands: list[str]) -> int | None:
    key = _payload(source, "retrieval_ranking", "relevant_option")
    for k in ([key] if key else []) + ["true", "yes", "relevant"]:
        if k in cands:
            return cands.index(k)
    return None


def _check_in_step(snapshot: Snapshot, table) -> None:
    """Refuse a question table whose questions are not the snapshot's, in snapshot order (the
    first question out of step is named)."""
    layout = snapshot.layout
    n, m = len(table.request_id), len(layout)
    both = min(n, m)
    off = np.flatnonzero((np.asarray(table.request_id[:both], dtype=object) != layout.request_id[:both])
                         | (np.asarray(table.question_id[:both], dtype=object) != layout.question_id[:both]))
    at = int(off[0]) if len(off) else both
    if at < m:
        raise SnapshotError(f"{snapshot.path}: question table out of step with the snapshot at "
                            f"{layout.request_id[at]}/{layout.question_id[at]}")
    if n != m:
        raise SnapshotError(f"{snapshot.path}: question table has {n} questions, snapshot {m}")


def _request_slice(layout, name: str, first: np.ndarray) -> list[str]:
    """A request-level slice of every request, as text (:class:`~jevkedro.nodes.layout.SliceColumn`)."""
    column = layout.slice_columns[name]
    return np.array(column.values, dtype=object)[column.codes[first]].tolist()


SPECIAL_METRICS = ("positive_f1", "review_f1", "ndcg@10")  # metrics that read a question's candidates


def collect(snapshot: Snapshot, table) -> dict[int, dict[str, np.ndarray]]:
    """Each benchmark's per-question arrays (:data:`FIELDS`), in table order: the answers' columns
    from the table; questions, candidates and the request-level slices ``catalog_id`` and
    ``track`` (which the view's mapping writes for every request) from the snapshot's layout;
    each request's ``source`` cell decoded for this pass only (rows are not decoded again, nor
    kept). A question is visited alone only where its request's payloads or its benchmark's
    metric need its candidates (accepted options, positive option, retrieval ranking)."""
    _check_in_step(snapshot, table)
    layout = snapshot.layout
    n = len(table.request_id)
    label = np.asarray(table.label, dtype=np.int64)
    scored = table.has_target.astype(bool) & ~table.unscored.astype(bool)
    if n:  # argmax over each question's own options (first wins ties), -1 without options
        within = np.arange(table.P.shape[1])[None, :] < table.K[:, None]
        pred = np.where(table.K > 0, np.argmax(np.where(within, table.P, -np.inf), axis=1), -1).astype(np.int64)
    else:
        pred = np.zeros(0, dtype=np.int64)
    valid = np.asarray(table.status) == "ok"
    correct = scored & (pred == label)
    positive, score, gain = np.full(n, -1, dtype=np.int64), np.full(n, -1.0), np.zeros(n)
    cand_flat, cand_start, q_start = layout.cand_flat.tolist(), layout.cand_start.tolist(), layout.q_start_list
    if not n:
        return {}
    first = layout.q_start[:-1].clip(max=n - 1)  # each request's first question: its request-level slices
    cids = [int(v) for v in _request_slice(layout, "catalog_id", first)]
    tracks = _request_slice(layout, "track", first)
    groups: list[str] = []
    macros: list[str] = []
    for r, (rid, qids, cid, (source,)) in enumerate(zip(layout.request_ids, layout.qids_by_request, cids,
                                                        each_cell(snapshot.rows, "source"))):
        ev = source.get("_evaluation") or {}
        metadata = source.get("metadata") or {}
        group = str(ev.get("group_id", rid))
        groups.append(group)
        macros.append(str(metadata.get(MACRO_GROUP_KEY[cid], group)) if cid in MACRO_GROUP_KEY else group)
        qrels = _payload(source, "retrieval_ranking", "qrels") or {}
        field_doc = _payload(source, "retrieval_ranking", "field_to_document") or {}
        accepted_path = ACCEPTED_PAYLOAD.get(cid)
        accepted_keys = (_payload(source, *accepted_path) or {}) if accepted_path else {}
        metric = NATIVE_METRIC.get(cid)
        if not (accepted_keys or field_doc or metric in SPECIAL_METRICS):
            continue  # every question: correct = scored and pred == label, no positive, score or gain
        for i, qid in enumerate(qids, q_start[r]):
            cands = cand_flat[cand_start[i]: cand_start[i + 1]]
            accepted = {int(label[i])}
            if isinstance(accepted_keys, dict) and qid in accepted_keys:
                accepted |= {cands.index(a) for a in accepted_keys[qid] if a in cands}
            elif isinstance(accepted_keys, list):
                accepted |= {cands.index(a) for a in accepted_keys if a in cands}
            correct[i] = scored[i] and int(pred[i]) in accepted
            pos = _positive_index(source, cands, cid) if metric in ("positive_f1", "review_f1") else None
            positive[i] = pos if pos is not None else -1
            rel = _relevant_index(source, cands) if metric == "ndcg@10" else None
            doc = field_doc.get(qid) if isinstance(field_doc, dict) else None
            if doc is not None:
                gain[i] = float(qrels.get(doc, 0) or 0)
            else:
                gain[i] = float(scored[i] and rel is not None and label[i] == rel)
            score[i] = float(table.P[i, rel]) if (rel is not None and valid[i]) else -1.0
    by_request = {"request": np.array(layout.request_ids, dtype=object), "group": np.array(groups, dtype=object),
                  "track": np.array(tracks, dtype=object), "macro": np.array(macros, dtype=object)}
    by_request["query"] = by_request["group"]
    by_question = {"status": np.asarray(table.status, dtype=object), "valid": valid, "scored": scored, "label": label,
                   "pred": pred, "options": np.asarray(table.K, dtype=np.int64), "correct": correct,
                   "positive": positive, "score": score, "gain": gain}
    request_index = layout.request_index
    q_cid = np.array(cids, dtype=np.int64)[request_index]
    out = {}
    for cid in dict.fromkeys(cids):  # benchmarks in order of first appearance
        at = np.flatnonzero(q_cid == cid)
        if len(at):
            rows = request_index[at]
            out[cid] = {k: by_request[k][rows] if k in by_request else by_question[k][at] for k in FIELDS}
            out[cid]["status"] = np.array(out[cid]["status"].tolist())  # as text, like the table's statuses
    return out


def answered_requests(a: dict[str, np.ndarray]) -> dict[str, bool]:
    """Request -> answered: status ok, every scored field valid, and all of its linked case answered."""
    # a scored field without a valid answer (invalid, unsupported, errored, unattempted) unanswers its request
    bad_field = a["scored"].astype(bool) & ~a["valid"].astype(bool)
    req_bad: dict[str, bool] = defaultdict(bool)
    req_group: dict[str, str] = {}
    for r, g, b in zip(a["request"], a["group"], bad_field):
        req_bad[r] |= bool(b)
        req_group[r] = g
    group_bad: dict[str, bool] = defaultdict(bool)
    for r, b in req_bad.items():
        group_bad[req_group[r]] |= b
    return {r: not group_bad[req_group[r]] for r in req_bad}


def native_score(metric: str, a: dict[str, np.ndarray], use: np.ndarray) -> float:
    """The benchmark's native metric over the fields ``use`` (answered requests)."""
    scored = use & a["scored"].astype(bool)
    correct = a["correct"].astype(bool)
    if metric == "accuracy" or metric == "accepted_accuracy":
        return S.accuracy(correct[scored])
    if metric == "case_exact_accuracy":
        return S.case_exact_accuracy(correct[scored], a["request"][scored])
    if metric in ("macro_f1", "conservative_macro_f1"):
        return S.macro_f1(a["label"][scored], a["pred"][scored], conservative=metric.startswith("conservative"))
    if metric == "group_macro_accuracy":
        return S.group_macro_accuracy(correct[scored], a["macro"][scored])
    if metric in ("positive_f1", "review_f1"):
        pos = a["positive"].astype(int)
        if (pos[scored] < 0).any():
            raise SnapshotError("positive option not found among a question's options")
        gold_pos = a["label"][scored] == pos[scored]
        pred_pos = a["pred"][scored] == pos[scored]
        if metric == "positive_f1":
            return S.positive_f1(gold_pos, pred_pos)
        return S.review_f1(gold_pos, pred_pos, a["group"][scored])
    if metric == "ndcg@10":
        # every field of an answered query ranks, judged or not; queries are the case groups
        return S.ndcg_at_k(a["score"][use], a["gain"][use], a["query"][use], k=10)
    raise ValueError(f"unknown native metric {metric!r}")


def score_part(metric: str, a: dict[str, np.ndarray], answered: dict[str, bool]) -> dict[str, Any]:
    requests = list(dict.fromkeys(a["request"].tolist()))
    n_ans = sum(answered[r] for r in requests)
    use = np.array([answered[r] for r in a["request"]], dtype=bool)
    native = native_score(metric, a, use) if n_ans else 0.0
    return {"requests": len(requests), "answered": int(n_ans), "coverage": n_ans / len(requests) if requests else 0.0,
            "native": native, "raw": S.raw_score(native, n_ans, len(requests)),
            "scored_fields": int(a["scored"].astype(bool).sum())}


def _tracks(metric: str, a: dict[str, np.ndarray], answered: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """``score_part`` of every track of a benchmark, in data order."""
    out = {}
    for track in dict.fromkeys(a["track"].tolist()):
        m = a["track"] == track
        out[track] = score_part(metric, {k: v[m] for k, v in a.items()}, answered)
    return out


def _track_options(cid: int, track: str, a: dict[str, np.ndarray]) -> int:
    """The one option count of a track's scored questions."""
    m = (a["track"] == track) & a["scored"].astype(bool)
    counts = sorted(set(a["options"][m].astype(int).tolist()))
    if len(counts) != 1:
        raise SnapshotError(f"benchmark {cid} track {track!r}: its scored questions have {counts} options; "
                            "a per-track chance needs one option count per track")
    return counts[0]


def corrected(cid: int, rule: ChanceRule, metric: str, a: dict[str, np.ndarray], answered: dict[str, bool],
              whole: dict[str, Any] | None = None) -> dict[str, Any]:
    """``native``, ``raw``, ``coverage`` and ``skill`` of a counted benchmark under its chance rule
    (``whole``: ``score_part`` of all of its questions, when already computed)."""
    whole = whole or score_part(metric, a, answered)
    if isinstance(rule, PooledCorrection):
        return {"native": whole["native"], "raw": whole["raw"], "coverage": whole["coverage"],
                "chance_rule": "pooled", "skill": rule.skill(whole["raw"])}
    tracks = _tracks(metric, a, answered)
    if isinstance(rule, PerTrackCorrection):
        by_options: dict[int, str] = {}
        for track in tracks:
            k = _track_options(cid, track, a)
            if k not in rule.option_counts or k in by_options:
                raise SnapshotError(f"benchmark {cid}: track {track!r} has {k} options; the edition corrects one "
                                    f"track each of {list(rule.option_counts)} options ({rule.method!r})")
            by_options[k] = track
            tracks[track].update(options=k, chance=rule.track_chance(k), skill=S.skill(tracks[track]["raw"], rule.track_chance(k)))
        if set(by_options) != set(rule.option_counts):
            raise SnapshotError(f"benchmark {cid}: tracks {sorted(tracks)} cover {sorted(by_options)} options; the "
                                f"edition corrects one track each of {list(rule.option_counts)} options")
        parts = [tracks[by_options[k]] for k in rule.option_counts]
        return {"native": float(np.mean([t["native"] for t in parts])), "raw": float(np.mean([t["raw"] for t in parts])),
                "coverage": float(np.mean([t["coverage"] for t in parts])), "chance_rule": "per_track",
                "skill": rule.skill({k: tracks[by_options[k]]["raw"] for k in rule.option_counts}), "tracks": tracks}
    if isinstance(rule, HeadlineTrackCorrection):
        heads = [t for t in tracks if rule.is_headline(t)]
        if len(heads) == 1:
            head = tracks[heads[0]]
            return {"native": head["native"], "raw": head["raw"], "coverage": head["coverage"], "chance_rule": "headline_track",
                    "scored_track": heads[0], "skill": rule.skill(head["raw"]), "tracks": tracks}
        if heads or any(TASK_TRACK.search(t) for t in tracks):
            raise SnapshotError(f"benchmark {cid}: {len(heads)} tracks end in {rule.track_suffix!r} among {sorted(tracks)}; "
                                f"the edition scores exactly one ({rule.method!r})")
        # rows without task tracks (our synthetic sample): the benchmark is its only track
        return {"native": whole["native"], "raw": whole["raw"], "coverage": whole["coverage"], "chance_rule": "headline_track",
                "scored_track": None, "note": f"no task tracks in the rows; all of them scored as track {rule.task} {rule.language}",
                "skill": rule.skill(whole["raw"])}
    raise TypeError(f"unknown chance rule {rule!r}")


def score_benchmark(cid: int, a: dict[str, np.ndarray]) -> dict[str, Any]:
    edition = edition_03()
    metric = NATIVE_METRIC.get(cid, "accuracy")
    answered = answered_requests(a)
    out: dict[str, Any] = {"name": run_datasets().get(cid, edition.names.get(cid)), "metric": metric}
    rule = edition.rules.get(cid)
    try:
        whole = score_part(metric, a, answered)
        out.update(whole)  # requests and answered: every request of the benchmark
        if rule is not None:
            out.update(corrected(cid, rule, metric, a, answered, whole))
    except SnapshotError as exc:
        out.update({"error": str(exc), "native": 0.0, "raw": 0.0})
        if rule is not None:
            out["skill"] = 0.0
    if rule is not None:
        out["chance"] = edition.chance[cid]
    if cid in edition.area_of:
        out.update({"area": edition.area_of[cid], "weight": edition.weight(cid), "gold": cid in edition.gold_weight})
    return out


def _rule_line(rule: ChanceRule) -> str:
    if isinstance(rule, PerTrackCorrection):
        return (f"per track: the {' and '.join(map(str, rule.option_counts))}-option tracks each corrected against "
                "1/options and clipped, then skill and raw averaged over the tracks")
    if isinstance(rule, HeadlineTrackCorrection):
        return f"only track {rule.task} {rule.language} (track id ending {rule.track_suffix!r}), corrected once"
    return "pooled"


def official_report(snapshot: Snapshot, table) -> dict[str, Any]:
    edition = edition_03()
    parts = collect(snapshot, table)
    benchmarks = {cid: score_benchmark(cid, a) for cid, a in sorted(parts.items())}
    counted = {cid: b for cid, b in benchmarks.items() if cid in edition.area_of}
    shown = {cid: b for cid, b in benchmarks.items() if cid in edition.shown_only}
    skills = {cid: b["skill"] for cid, b in counted.items()}
    raws = {cid: b["raw"] for cid, b in counted.items()}
    idx_skill = S.public_index(skills, edition.area_of, edition.gold_weight, edition.area_weight)
    idx_raw = S.public_index(raws, edition.area_of, edition.gold_weight, edition.area_weight)
    missing = [cid for cid in edition.counted if cid not in benchmarks]
    n_req = sum(b["requests"] for b in benchmarks.values())
    n_ans = sum(b["answered"] for b in benchmarks.values())
    synthetic = snapshot.data != "official"
    return {
        "scorer": SCORER,
        "edition": {"label": edition.label, "panel_id": edition.panel_id, "headline": edition.headline,
                    "secondary": edition.secondary},
        "data": snapshot.data,
        "synthetic": synthetic,
        "note": ("synthetic data written by jevkedro in the suite's format; these numbers are not Decision "
                 "Index results") if synthetic else None,
        "snapshot_sha256": snapshot.sha256,
        "main_metric": {"name": "balanced_skill", "value": idx_skill["index"]},
        "balanced_skill": idx_skill["index"],
        "balanced_raw": idx_raw["index"],
        "breadth_skill": idx_skill["breadth"],
        "complete": not missing,
        "missing_benchmarks": [{"catalog_id": c, "name": edition.names.get(c)} for c in missing],
        "tie": edition.tie,
        "areas": {a: {"weight": edition.area_weight[a], "skill": idx_skill["areas"][a], "raw": idx_raw["areas"][a],
                      "benchmarks": [c for c, ar in edition.area_of.items() if ar == a]}
                  for a in idx_skill["areas"]},
        "requests": {"total": n_req, "answered": n_ans,
                     "line": f"Requests {n_ans:,} of {n_req:,} scoreable"},
        "benchmarks": {str(c): b for c, b in counted.items()},
        "shown_not_counted": {str(c): b for c, b in shown.items()},
        "rules": {
            "coverage": "raw = native x answered / requests; unanswered, unsupported, errored, invalid = wrong",
            "linked_cases": "requests sharing _evaluation.group_id in one benchmark count only if all are answered",
            "unscored_questions": "target unscored (expected null, or unscored_fields): in no metric; failing "
                                  "only on them leaves the request answered",
            "argmax_ties": "first option in source order",
            "chance": "index-0.3.json chance[catalog_id]: its method picks the rule, its chance the level; "
                      "skill = clip((raw - chance)/(1 - chance), 0, 1)",
            "chance_rules": {str(c): _rule_line(r) for c, r in edition.rules.items() if not isinstance(r, PooledCorrection)},
            "weights": "gold benchmarks 1.2 inside their area, others 1.0; fixed area weights",
            "areas_from": "index-0.3.json areas (WinoGrande 28 in knowledge; ACOS 38 counted in language)",
            "generic_accuracy": "diagnostic only (report.json); never replaces the index",
        },
    }
