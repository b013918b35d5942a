"""Decision Index 0.3 at full scale: read-time rules, snapshot write and the official index.

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_decision_index.py --work /tmp/di_bench

Writes the full-scale synthetic suite (the edition's counts: 124,971 selected + 2,638 GSM8K +
30,419 added rows, 442 exclusions; invented rows) into ``--work``, then times (a) ``read_release``
(gzip read, uncompressed sha256, read-time rules and their step counts), (b) ``build`` (the pure
mapping of 140,178 requests), (c) the snapshot write, (d) loading the snapshot, (e) validation of
uniform answers into the question table and (f) the official public index. Prints each stage's
seconds and the peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from jevkedro.config import parse_prepare_options
from jevkedro.nodes.snapshot import commit_dataset, load_snapshot
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines.decision_index import build, read_release
from jevkedro.pipelines.decision_index.official import official_report
from jevkedro.pipelines.decision_index.synthetic import write_suite


def uniform(row, qid):
    cands = row.candidates[qid]
    if row.request["questions"][qid]["type"] == "noul":
        return {"type": "noul", "noul": 0.5}
    return {"type": "choice", "probabilities": {c: 1 / len(cands) for c in cands}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/di_bench")
    args = parser.parse_args()
    work = Path(args.work)
    suite = work / "suite"
    if not (suite / "selected-rows.jsonl.gz").is_file():
        write_suite(suite, "synthetic")
    times = {}
    t = time.perf_counter()
    release = read_release(parse_prepare_options("decision_index", {"source": str(suite), "data": "synthetic"}))
    times["read_release"] = time.perf_counter() - t
    t = time.perf_counter()
    prepared = build(release, "decision_index")
    times["build"] = time.perf_counter() - t
    t = time.perf_counter()
    commit_dataset(prepared, work / "snap")
    times["write"] = time.perf_counter() - t
    t = time.perf_counter()
    snap = load_snapshot(work / "snap", "decision_index")
    times["load"] = time.perf_counter() - t
    preds = {r.request_id: {"status": "ok", "response": {"answers": {q: uniform(r, q) for q in r.request["questions"]}}}
             for r in snap.rows}
    t = time.perf_counter()
    table = build_question_table(snap.rows, preds)
    times["validate"] = time.perf_counter() - t
    t = time.perf_counter()
    off = official_report(snap, table)
    times["official"] = time.perf_counter() - t
    print(f"requests {len(snap.rows):,}  questions {len(table.request_id):,}  datasets {len(prepared.notes['datasets'])}")
    print("  ".join(f"{k} {v:.2f}s" for k, v in times.items()))
    print(f"balanced_skill {off['balanced_skill']:.3f}  balanced_raw {off['balanced_raw']:.3f}  ({off['requests']['line']})")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
