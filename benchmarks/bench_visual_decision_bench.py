"""Prepare and score times of VisualDecisionBench's three views on a full-scale synthetic release.

Command (from the project root)::

    .venv/bin/python benchmarks/bench_visual_decision_bench.py [--repeat 3]

Writes a synthetic release at the published scale (1,696 records, 9,143 questions, one tiny
media file per record) into a temporary folder, then per view times ``prepare`` (``build`` with
``verify_media=present``, i.e. every media file hashed, plus ``commit_dataset``), ``load+verify``
and ``score`` (question table, ``evaluate`` with the Valen summary, generic report) on seeded
random valid answers. Best and median wall times are printed as a table and as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_text_families import random_answers, timed

from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import commit_dataset, load_snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import visual_decision_bench as vdb
from jevkedro.pipelines.visual_decision_bench import synthetic as syn


def bench(view: str, release: Path, snapshots: Path, repeat: int) -> dict:
    manifest, prep = timed(lambda: commit_dataset(vdb.build(release, view=view, data="synthetic"), snapshots), repeat)
    snapshot, load = timed(lambda: verify_snapshot_bytes(load_snapshot(snapshots, view)), repeat)
    predictions = random_answers(snapshot)

    def score():
        table = build_question_table(snapshot.rows, predictions)
        official = vdb.evaluate(snapshot, table, predictions, None)
        return build_report(snapshot, table, predictions, {"name": "random"}, None, official)

    report, sc = timed(score, repeat)
    return {"view": view, "inputs": manifest["counts"]["inputs"], "questions": manifest["counts"]["questions"],
            "snapshot_bytes": manifest["snapshot"]["bytes"], "prepare": prep, "load_verify": load, "score": sc,
            "accuracy_random": report["metrics"]["overall"]["accuracy"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="VisualDecisionBench prepare/score times at full scale")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        t0 = time.perf_counter()
        syn.write_release(*syn.generate_release(), release, "synthetic")
        generate_s = round(time.perf_counter() - t0, 3)
        results = [bench(view, release, Path(tmp) / "snapshots", args.repeat) for view in vdb.VIEWS]
    print(f"generate release: {generate_s} s")
    print(f"{'view':<30}{'inputs':>8}{'questions':>11}{'prepare s':>11}{'load+verify s':>15}{'score s':>9}")
    for r in results:
        print(f"{r['view']:<30}{r['inputs']:>8}{r['questions']:>11}{r['prepare']['median_s']:>11}"
              f"{r['load_verify']['median_s']:>15}{r['score']['median_s']:>9}")
    json.dump({"generate_s": generate_s, "views": results}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
