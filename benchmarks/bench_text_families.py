"""Prepare and score times of DecisionBench and JevAlt-Bench on full-scale synthetic releases.

Command (from the project root)::

    .venv/bin/python benchmarks/bench_text_families.py [--repeat 3] [--families decisionbench jevalt_bench]

For each family: write a synthetic release at the full published scale (DecisionBench 23,900
rows; JevAlt-Bench 3,116 inputs / 8,434 questions) into a temporary folder, then time

- ``prepare``: ``build`` (read + map + checks) and ``commit_dataset`` (render, hash, write);
- ``load+verify``: ``load_snapshot`` and ``verify_snapshot_bytes``;
- ``score``: what the pipeline's score node does (``build_question_table`` over every question,
  the family's ``evaluate`` for ``official``, ``build_report`` for the generic metrics), on
  seeded random valid answers for every question (no model runs; inference is not timed).

Each step is run ``--repeat`` times; the best and the median wall times are printed, with the
row and question counts, as a table and as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import commit_dataset, load_snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import decisionbench, jevalt_bench
from jevkedro.pipelines.decisionbench import synthetic as db_syn
from jevkedro.pipelines.jevalt_bench import synthetic as ja_syn

FAMILIES = {
    "decisionbench": (decisionbench, lambda out: db_syn.write_release(db_syn.generate_rows(), out, "synthetic")),
    "jevalt_bench": (jevalt_bench, lambda out: ja_syn.write_release(ja_syn.generate_items(), out, "synthetic")),
}


def random_answers(snapshot, seed: int = 0) -> dict[str, dict]:
    """Seeded valid System One answers for every question (as a replay would record them)."""
    rng = np.random.default_rng(seed)
    records = {}
    for row in snapshot.rows:
        answers = {}
        for qid, q in row.request["questions"].items():
            if q["type"] == "noul":
                answers[qid] = {"type": "noul", "noul": float(rng.random())}
            else:
                keys = list(q["criteria"]) if q["type"] == "choice" else [str(i) for i in range(len(q["criteria"]))]
                p = rng.dirichlet(np.ones(len(keys)))
                answers[qid] = {"type": q["type"], "probabilities": dict(zip(keys, p.tolist()))}
        records[row.request_id] = {"request_id": row.request_id, "status": "ok", "model": "random",
                                   "response": {"model": "random", "answers": answers}, "latency_s": None}
    return records


def timed(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3)}


def bench(family: str, repeat: int, work: Path) -> dict:
    module, write = FAMILIES[family]
    release, snapshots = work / family / "release", work / family / "snapshots"
    _, gen = timed(lambda: write(release), 1)
    manifest, prep = timed(lambda: commit_dataset(module.build(release, data="synthetic"), snapshots), repeat)
    snapshot, load = timed(lambda: verify_snapshot_bytes(load_snapshot(snapshots, family)), repeat)
    predictions = random_answers(snapshot)

    def score():
        table = build_question_table(snapshot.rows, predictions)
        official = module.evaluate(snapshot, table, predictions, None)
        return build_report(snapshot, table, predictions, {"name": "random"}, None, official)

    report, sc = timed(score, repeat)
    return {"family": family, "inputs": manifest["counts"]["inputs"], "questions": manifest["counts"]["questions"],
            "snapshot_bytes": manifest["snapshot"]["bytes"], "generate": gen, "prepare": prep,
            "load_verify": load, "score": sc, "accuracy_random": report["metrics"]["overall"]["accuracy"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="prepare/score times on full-scale synthetic releases")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = [bench(f, args.repeat, Path(tmp)) for f in args.families]
    print(f"{'family':<15}{'inputs':>8}{'questions':>11}{'prepare s':>11}{'load+verify s':>15}{'score s':>9}")
    for r in results:
        print(f"{r['family']:<15}{r['inputs']:>8}{r['questions']:>11}{r['prepare']['median_s']:>11}"
              f"{r['load_verify']['median_s']:>15}{r['score']['median_s']:>9}")
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
