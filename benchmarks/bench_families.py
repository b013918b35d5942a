"""Prepare and score times of every family with a full-scale synthetic release.

Command (from the project root)::

    .venv/bin/python benchmarks/bench_families.py [--repeat 3] [--families typed_decisions ...]

Per family: write its synthetic release at the published scale into a temporary folder (timed
once as ``generate``), then per view, ``--repeat`` times each:

- ``hash``: the plain baseline -- sha256 of every file of the release folder, streamed in 1 MiB
  blocks (what ``sha256sum`` does; reading a release cannot cost less than hashing its bytes);
- ``read``: the family's ``read_release`` (marker and pin checks, parsing, media hashing);
- ``build``: the family's ``build`` (the pure mapping and the checks on mapped rows);
- ``write``: ``commit_dataset`` (render, hash, write the snapshot);
- ``load+verify``: ``load_snapshot`` and ``verify_snapshot_bytes``;
- ``score``: what the score node does -- ``build_question_table`` over every question, the
  family's ``evaluate`` (``official``) and ``build_report`` (generic metrics) -- on seeded random
  valid answers for every question (no model runs; inference is not timed).

Prints best and median wall times per step with the counts, as a table and as JSON.
Decision Index has its own script (``bench_decision_index.py``): its suite is 140k requests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from jevkedro.config import parse_prepare_options
from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import commit_dataset, load_snapshot, sha256_file, verify_snapshot_bytes
from jevkedro.nodes.validate import build_question_table
from jevkedro.registry import FAMILY_BY_NAME


def _synthetic(family: str):
    return importlib.import_module(f"jevkedro.pipelines.{family}.synthetic")


# family -> how to write its full-scale synthetic release into a folder (the generators differ)
WRITERS = {
    "typed_decisions": lambda out: _synthetic("typed_decisions").write_release(out),
    "procedural_typed_decisions": lambda out: _synthetic("procedural_typed_decisions").write_release(out),
    "decisionbench": lambda out: _synthetic("decisionbench").write_release(
        _synthetic("decisionbench").generate_rows(), out, "synthetic"),
    "jevalt_bench": lambda out: _synthetic("jevalt_bench").write_release(
        _synthetic("jevalt_bench").generate_items(), out, "synthetic"),
    "visual_decision_bench": lambda out: _synthetic("visual_decision_bench").write_release(
        *_synthetic("visual_decision_bench").generate_release(), out, "synthetic"),
}


def random_answers(snapshot, seed: int = 0) -> dict[str, dict]:
    """Seeded valid System One answers for every question (Dirichlet over its candidates)."""
    rng = np.random.default_rng(seed)
    records = {}
    for row in snapshot.rows:
        answers = {}
        for qid, q in row.request["questions"].items():
            cands = row.candidates[qid]
            p = rng.dirichlet(np.ones(len(cands)))
            answers[qid] = ({"type": "noul", "noul": float(p[cands.index("true")])} if q["type"] == "noul"
                            else {"type": q["type"], "probabilities": dict(zip(cands, p.tolist()))})
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


def hash_folder(folder: Path) -> int:
    """sha256 of every file under ``folder`` (the baseline); returns the bytes hashed."""
    files = [f for f in sorted(folder.rglob("*")) if f.is_file()]
    for f in files:
        sha256_file(f)
    return sum(f.stat().st_size for f in files)


def bench_view(module, view: str, release_dir: Path, snapshots: Path, repeat: int) -> dict:
    options = parse_prepare_options(view, {"source": str(release_dir), "data": "synthetic"})
    release_bytes, hashing = timed(lambda: hash_folder(release_dir), repeat)
    release, read = timed(lambda: module.read_release(options, view), repeat)
    prepared, build = timed(lambda: module.build(release, view), repeat)
    manifest, write = timed(lambda: commit_dataset(prepared, snapshots), repeat)
    snapshot, load = timed(lambda: verify_snapshot_bytes(load_snapshot(snapshots, view)), repeat)
    predictions = random_answers(snapshot)

    def score():
        table = build_question_table(snapshot.rows, predictions)
        official = module.evaluate(snapshot, table, predictions)
        return build_report(snapshot, table, predictions, {"name": "random"}, None, official)

    report, sc = timed(score, repeat)
    return {"view": view, "inputs": manifest["counts"]["inputs"], "questions": manifest["counts"]["questions"],
            "release_bytes": release_bytes, "snapshot_bytes": manifest["snapshot"]["bytes"],
            "hash": hashing, "read": read, "build": build, "write": write, "load_verify": load, "score": sc,
            "read_over_hash": round(read["median_s"] / max(hashing["median_s"], 1e-3), 1),
            "accuracy_random": report["metrics"]["overall"]["accuracy"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="prepare/score times on full-scale synthetic releases")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--families", nargs="+", default=list(WRITERS), choices=list(WRITERS))
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            release = Path(tmp) / family / "release"
            _, generate = timed(lambda f=family, r=release: WRITERS[f](r), 1)
            module = FAMILY_BY_NAME[family].module()
            for view in FAMILY_BY_NAME[family].views:
                results.append({"family": family, "generate": generate,
                                **bench_view(module, view, release, Path(tmp) / family / "snapshots", args.repeat)})
    steps = ("hash", "read", "build", "write", "load_verify", "score")
    print(f"{'view':<30}{'inputs':>8}{'questions':>11}" + "".join(f"{k + ' s':>15}" for k in steps) + f"{'read/hash':>11}")
    for r in results:
        print(f"{r['view']:<30}{r['inputs']:>8}{r['questions']:>11}" + "".join(f"{r[k]['median_s']:>15}" for k in steps)
              + f"{r['read_over_hash']:>11}")
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
