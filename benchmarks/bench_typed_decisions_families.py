"""Prepare and score times on the full-scale SYNTHETIC releases of Typed-Decisions (400 inputs /
2,000 questions) and Procedural Typed Decisions (18,000 inputs / 57,016 questions).

    .venv/bin/python benchmarks/bench_typed_decisions_families.py [--repeat 3] [--work DIR]

Per family: write the synthetic release (timed as ``generate``), then ``repeat`` times:
``prepare`` = read the Parquet release, map it and commit the snapshot through the shared writer
(counts checked); ``score`` = validate every answer into the question table, generic metrics
report and the family's ``official`` report. Answers come from a seeded random answerer (Dirichlet
probabilities per question), made once before timing. Prints the median and min in seconds.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import load_snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table

FAMILIES = ("typed_decisions", "procedural_typed_decisions")


def random_predictions(snapshot, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for row in snapshot.rows:
        answers = {}
        for qid, q in row.request["questions"].items():
            cands = row.candidates[qid]
            p = rng.dirichlet(np.ones(len(cands)))
            answers[qid] = ({"noul": float(p[cands.index("true")])} if q["type"] == "noul"
                            else {"probabilities": {c: float(x) for c, x in zip(cands, p)}})
        out[row.request_id] = {"request_id": row.request_id, "status": "ok", "model": "bench-random",
                               "response": {"answers": answers}, "latency_s": 0.001}
    return out


def bench(family: str, work: Path, repeat: int) -> dict:
    module = importlib.import_module(f"jevkedro.pipelines.{family}")
    synthetic = importlib.import_module(f"jevkedro.pipelines.{family}.synthetic")
    t0 = time.perf_counter()
    synthetic.write_release(work / family / "release")
    generate = time.perf_counter() - t0
    prepare_s, score_s = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        (manifest,) = module.prepare(work / family / "snap", work / family / "release", data="synthetic")
        prepare_s.append(time.perf_counter() - t0)
    snapshot = verify_snapshot_bytes(load_snapshot(work / family / "snap", family))
    preds = random_predictions(snapshot)
    for _ in range(repeat):
        t0 = time.perf_counter()
        table = build_question_table(snapshot.rows, preds)
        official = module.evaluate(snapshot, table, preds)
        build_report(snapshot, table, preds, {"name": "bench-random"}, None, official)
        score_s.append(time.perf_counter() - t0)
    return {"family": family, "inputs": manifest["counts"]["inputs"], "questions": manifest["counts"]["questions"],
            "generate_s": generate, "prepare_median_s": statistics.median(prepare_s), "prepare_min_s": min(prepare_s),
            "score_median_s": statistics.median(score_s), "score_min_s": min(score_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        for family in FAMILIES:
            r = bench(family, work, args.repeat)
            print(f"{r['family']:<28} {r['inputs']:>6} inputs {r['questions']:>6} questions  "
                  f"generate {r['generate_s']:.2f}s  prepare {r['prepare_median_s']:.2f}s (min {r['prepare_min_s']:.2f})  "
                  f"score {r['score_median_s']:.2f}s (min {r['score_min_s']:.2f})")


if __name__ == "__main__":
    main()
