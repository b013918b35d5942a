"""The ``official`` artefact of the JevBench view: items scored by the release's rules, summarised.

Input is the verified snapshot and the raw prediction records (never the generic validated
copy): every answer goes through the harness's wire mapping and :func:`scoring.score_item` with
the release's own tolerances. Output (``official.json``, its own MLflow artifact):

- ``benchmark``: which JevBench this is (repository, commit, files) and the data kind; a
  synthetic sample says so and its numbers are not JevBench results;
- ``rules``: the tolerances and decisions applied;
- ``overall``, ``per_tier``, ``per_family``, ``per_type``, ``per_split``: :func:`scoring.summarize`;
- ``chance_corrected``: per tier, ``(accuracy - chance) / (1 - chance)`` with ``chance`` the
  expected accuracy of a uniform guess on that tier's scorable tasks (``mean 1/K``), and under
  ``release`` the same with the release's v1.3 tier baseline (its option-count histogram over
  every frozen item of the tier, public and held out);
- ``hard_calibration_axis``: hard-tier 10-bin ECE and the mean total-variation distance to
  ``gold_probs`` over valid ``probability`` items, and the v1.3 axis terms computed from them
  (``ece_term``, ``tvd_term``, ``axis``); the composite score is not reproduced;
- ``latency``: p50/p95 per request, network included, the first request apart;
- ``reports``: ``calibration`` (10-bin reliability tables overall / per tier / per type),
  ``task_family`` (one row per family), ``paraphrase`` (36 original pairs, per-pair table);
- ``items``: the per-item fields of the release for every planned task.

Only official-scorer numbers are in here; the generic metrics (docs/protocol.md §4: NLL, Brier, 15-bin
ECE, RPS, by tier / family / type / variant) are in ``report.json``'s ``metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jevkedro.family import family_manifest
from jevkedro.nodes.snapshot import Snapshot, SnapshotError
from jevkedro.nodes.validate import answers_by_question
from jevkedro.pipelines.jevbench import scoring as S

SCORER = "jevbench-public231 (legacy per-item scorer of jevbench/scoring.py at the pinned commit)"
QUESTION_ID = "decision"


def check_identity(snapshot: Snapshot) -> dict[str, Any]:
    """Refuse a snapshot that is not this JevBench (another project's tasks are never scored here)."""
    manifest = family_manifest("jevbench")
    up = manifest["upstream"]
    snap = snapshot.manifest
    if snap.get("family") != "jevbench":
        raise SnapshotError(f"{snapshot.path}: family {snap.get('family')!r} is not jevbench")
    if snapshot.data == "official":
        for src in snap.get("sources", []):
            if src.get("repo") != up["repo"] or src.get("commit") != up["commit"]:
                raise SnapshotError(
                    f"{snapshot.path}: source {src.get('file')} comes from {src.get('repo')}@{src.get('commit')}, "
                    f"not {up['repo']}@{up['commit']}; other JevBench projects are never mixed in")
    return up


def score_row(row, record: Mapping[str, Any] | None) -> dict[str, Any]:
    """One planned task and its prediction record -> the release's item fields plus our context."""
    question = row.request["questions"][QUESTION_ID]
    qtype = question["type"]
    off = row.targets[QUESTION_ID].extra["official"]
    labels, expected = off["labels"], off["expected"]
    excluded = off.get("exclude_reason")
    status = (record or {}).get("status", "unattempted")
    error = None
    probs = None
    if status == "ok":
        if QUESTION_ID in set(record.get("unsupported_questions") or ()):
            error = "unsupported: the adapter cannot represent this task"
        else:
            probs, error = S.map_answer(qtype, answers_by_question(record.get("response")).get(QUESTION_ID))
    else:
        error = f"{status}: {record.get('error')}" if record else "unattempted"
    item = S.score_item(probs, labels, qtype, expected, error)
    scorable = expected is not None and not excluded
    item.update({
        "task_id": row.request_id,
        "tier": row.slices["tier"],
        "family": row.slices["family"],
        "type": qtype,
        "split": row.slices["split"],
        "group": row.source.get("group"),
        "expected": expected,
        "status": status,
        "attempted": status != "unattempted",
        "ok": status == "ok",
        "scorable": scorable,
        "n_labels": len(labels),
        "latency_s": (record or {}).get("latency_s"),
        "first": bool((record or {}).get("first")),
    })
    if excluded:
        item["exclude_reason"] = excluded
    if item["valid"]:
        item["confidence"] = max(item["probs"].values())
        if scorable:
            item["brier"] = S.brier_item(item["probs"], labels, expected)
            if qtype == "score":
                item["ordinal_abs_error"] = abs(item["ordinal_ev"] - int(expected))
        if "gold_probs" in off:
            item["tvd_gold"] = S.total_variation(item["probs"], off["gold_probs"], labels)
    return item


def _reliability(t: S.ItemTable) -> dict[str, Any]:
    use = t.valid & t.scorable
    return S.ece_top_label(t.conf[use], t.correct[use])


def official_summary(snapshot: Snapshot, predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    up = check_identity(snapshot)
    manifest = family_manifest("jevbench")
    unknown = sorted(set(predictions) - {row.request_id for row in snapshot.rows})
    if unknown:  # answers to tasks this snapshot does not plan: another task set, never mixed in
        raise SnapshotError(f"{snapshot.path}: predictions for {len(unknown)} unknown task id(s), e.g. {unknown[:3]}")
    items = [score_row(row, predictions.get(row.request_id)) for row in snapshot.rows]
    t = S.ItemTable.from_items(items)
    n_labels = np.array([it["n_labels"] for it in items])
    per_tier = S.by_group(t, "tier")
    variant = np.array([row.slices.get("variant", "") for row in snapshot.rows], dtype=object)

    chance = {}
    for tier in per_tier:
        mask = (t.tier == tier) & t.scorable
        accuracy = per_tier[tier]["accuracy"]
        chance[tier] = S.chance_corrected(accuracy, S.uniform_chance(n_labels[mask]))
        release = manifest["tiers"].get(tier, {}).get("release_chance")
        if release:  # the release's own v1.3 baseline for the tier, beside the one of the tasks run here
            hist = release["option_counts_all_frozen_items"]
            chance[tier]["release"] = {
                "upstream_tier": release["upstream_tier"], "items": sum(hist.values()),
                **{k: v for k, v in S.chance_corrected(accuracy, S.chance_from_option_counts(hist)).items()
                   if k != "accuracy"}}

    hard = t.subset(t.tier == "hard")
    hard_valid_gold = hard.valid & ~np.isnan(hard.tvd)
    hard_ece = _reliability(hard)
    hard_tvd = float(hard.tvd[hard_valid_gold].mean()) if hard_valid_gold.any() else None
    calibration_axis = {
        "ece": hard_ece["ece"], "ece_n": hard_ece["n"],
        "tvd_gold_probs": hard_tvd,
        "tvd_n": int(hard_valid_gold.sum()),
        "tvd_items_planned": sum(1 for row in snapshot.rows if row.slices["tier"] == "hard"
                                 and "gold_probs" in row.targets[QUESTION_ID].extra["official"]),
        **S.calibration_axis(hard_ece["ece"], hard_tvd),
    }

    per_family = S.by_group(t, "family")
    family_rows = [
        {"family": fam, "tier": sorted(set(t.tier[t.family == fam].tolist())), "n_scorable": s["n_scorable"],
         "accuracy": s["accuracy"], "schema_validity": s["schema_validity"], "brier_mean": s["brier_mean"],
         "ece": s["ece"]["ece"], "majority_class_accuracy": s["majority_class_accuracy"]}
        for fam, s in per_family.items()
    ]
    paraphrase = S.paraphrase_agreement(t)
    lat = S.latency([it["latency_s"] for it in items], [it["first"] for it in items])
    return {
        "scorer": SCORER,
        "benchmark": {
            "name": "JevBench",
            "repository": up["repository"],
            "commit": up["commit"],
            "files": [f"{s['path']}" for s in manifest["sources"]["official"]],
            "data": snapshot.data,
            "synthetic": snapshot.data != "official",
            "note": (None if snapshot.data == "official" else
                     "synthetic sample written by jevkedro in the JevBench task format; not the upstream "
                     "tasks — these numbers are not JevBench results"),
            "not_the_same_as": up["name_clash"],
        },
        "snapshot_sha256": snapshot.sha256,
        "rules": {
            "sum_tol": S.SUM_TOL, "renorm_tol": S.RENORM_TOL, "ece_bins": S.ECE_BINS,
            "argmax_ties": "lexicographically smallest label",
            "accuracy_denominator": "all scorable planned tasks (unattempted, failed, unsupported, invalid = wrong)",
            "invalid_probs": "null: invalid items are left out of Brier, ECE and ordinal MAE",
            "noul_mapping": "noul P(yes) -> {'no': 1 - p, 'yes': p}",
            "chance": "per tier, mean over scorable tasks of 1 / number of labels (uniform guess); "
                      "'release' holds the release's v1.3 tier baseline (all frozen items, public and held out)",
            "calibration_axis": "v1.3 formula on the hard tier: mean of max(0, 100 (1 - ECE / 0.5)) and "
                                "100 (1 - mean TV distance to gold_probs)",
            "price_per_1000_decisions_usd": "not computed: no tariff is configured (the release reports it only "
                                            "when every record has a cost)",
        },
        "overall": S.summarize(t),
        "per_tier": per_tier,
        "per_family": per_family,
        "per_type": S.by_group(t, "qtype"),
        "per_split": S.by_group(t, "split"),
        "chance_corrected": chance,
        "hard_calibration_axis": calibration_axis,
        "paraphrase": {k: v for k, v in paraphrase.items() if k != "pair_table"},
        "latency": lat,
        "price_per_1000_decisions_usd": None,
        "reports": {
            "calibration": {
                "bins": S.ECE_BINS,
                "overall": _reliability(t),
                "per_tier": {k: _reliability(t.subset(t.tier == k)) for k in per_tier},
                "per_type": {k: _reliability(t.subset(t.qtype == k)) for k in sorted(set(t.qtype.tolist()))},
            },
            "task_family": family_rows,
            "paraphrase": {
                "variant": {v: S.summarize(t.subset((t.tier == "original") & (variant == v))) for v in ("0", "1")},
                "pairs": paraphrase["pair_table"],
            },
        },
        "items": [{k: it.get(k) for k in (
            "task_id", "tier", "family", "type", "status", "valid", "strict_valid", "renormalized", "probs",
            "predicted", "expected", "expected_level", "correct", "ordinal_ev", "sum", "error", "latency_s")}
            for it in items],
    }
