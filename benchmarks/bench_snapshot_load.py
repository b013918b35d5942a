"""Loading and verifying the full-scale Decision Index snapshot (140,178 requests), against sha256sum.

Command (from the project root, after `make setup`; the synthetic suite and its snapshot are
written into ``--work`` once, about a minute, then reused):

    .venv/bin/python benchmarks/bench_snapshot_load.py --work /tmp/di_bench --repeats 5

Times, medians over ``--repeats`` in one process:

- ``sha256sum``: the coreutils tool on the TSV (the ideal for reading and hashing it once);
- ``hashlib``: Python's sha256 of the same bytes (what load and verify each spend hashing);
- ``load+verify``: ``load_snapshot`` + ``verify_snapshot_bytes`` (every line decoded and checked,
  the question layout built from those rows; what every run of the view pays);
- ``one pass``: every row decoded once and dropped (``each_row``: what a family scorer pays);
- ``rows``: decoding every row into a kept ``SnapshotRow``;
- ``per-row loads``: the straightforward loader for comparison: ``json.loads`` of every cell of
  every line into rows.

Prints medians, the ratios to ``sha256sum`` and the peak RSS of each stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scoring import _reset_peak, _status_kb  # noqa: E402
from jevkedro.family import prepare_view  # noqa: E402
from jevkedro.nodes.snapshot import commit_dataset, each_row, load_snapshot, verify_snapshot_bytes  # noqa: E402
from jevkedro.pipelines.decision_index.synthetic import write_suite  # noqa: E402
from jevkedro.protocol import SnapshotRow, Target  # noqa: E402

VIEW = "decision_index"


def per_row_loads(path: Path) -> list[SnapshotRow]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            rid, *cells = line.rstrip("\n").split("\t")
            request, candidates, targets, slices, source = map(json.loads, cells)
            rows.append(SnapshotRow(rid, request, candidates, {q: Target(label=t.get("label")) for q, t in targets.items()},
                                    slices, source))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/di_bench")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    work = Path(args.work)
    snap_dir = work / "snap"
    tsv = snap_dir / f"{VIEW}.tsv"
    if not tsv.is_file():
        if not (work / "suite" / "selected-rows.jsonl.gz").is_file():
            write_suite(work / "suite", "synthetic")
        commit_dataset(prepare_view(VIEW, work / "suite", data="synthetic"), snap_dir)
    loaded = load_snapshot(snap_dir, VIEW)
    stages = {
        "sha256sum": (lambda: subprocess.run(["sha256sum", str(tsv)], check=True, capture_output=True), None),
        "hashlib": (lambda: hashlib.sha256(tsv.read_bytes()).hexdigest(), None),
        "load+verify": (lambda: verify_snapshot_bytes(load_snapshot(snap_dir, VIEW)), None),
        "one pass": (lambda: sum(1 for _ in each_row(loaded.rows)), None),
        "rows": (lambda: list(load_snapshot(snap_dir, VIEW).rows), None),
        "per-row loads": (lambda: per_row_loads(tsv), None),
    }
    results = {}
    for name, (fn, before) in stages.items():
        times = []
        _reset_peak()
        for _ in range(args.repeats):
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        results[name] = (statistics.median(times), _status_kb("VmHWM") / 1024)
    snap = load_snapshot(snap_dir, VIEW)
    print(f"{VIEW}: {len(snap.rows):,} requests, {len(snap.layout):,} questions, TSV {tsv.stat().st_size / 1e6:.0f} MB, "
          f"medians of {args.repeats}")
    base = results["sha256sum"][0]
    print(f"  {'stage':<18}{'median s':>10}{'x sha256sum':>13}{'peak RSS MiB':>14}")
    for name, (t, rss) in results.items():
        print(f"  {name:<18}{t:>10.3f}{t / base:>13.2f}{rss:>14.0f}")


if __name__ == "__main__":
    main()
