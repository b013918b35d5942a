"""Decision Index prepare at full scale: the three stages, the `kedro run` command, and plain baselines.

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_prepare.py --work /tmp/prepare_bench --repeats 3

Writes the full-scale synthetic suite (124,971 selected + 2,638 GSM8K + 30,419 added rows; invented)
into ``--work`` once, then ``--repeats`` times, each in a fresh process:

1. the functions: ``read_release`` (gzip, uncompressed sha256, read-time rules), ``build`` (mapping
   to 140,178 rows) and ``commit_dataset`` (TSV render, sha256, atomic write with fsync), wall and
   CPU seconds each, and the process's peak RSS;
2. ``kedro run --pipelines=decision_index --to-nodes=decision_index.prepare_snapshot`` in a throw-away
   copy of the project (framework start-up included), wall and CPU seconds (user + system) and peak RSS.

Baselines in the same run: ``gzip -dc <the three row files> | sha256sum`` (decompressing and hashing
the source, the least any reader does) and ``sha256sum`` of the written TSV. Prints the medians, the
ratios to the baselines, the snapshot's sha256 (it must not change with the code's speed), the load
average before and after, and the target (prepare under 8 s). ``--src <other checkout>/src`` times
another version of the code on the same suite (the before/after comparison in docs/benchmarks.md).

Scaling (``--scale 10000 100000 1000000``): the Decision Index's counts and hashes are pinned, so
the synthetic suite is written again with every count of its plan multiplied by ``N / 140,178``
(the same invented records and read-time rules; ``--work``/scale-N, written once), and the three
stages run on it with the pins relaxed inside the benchmark's stage process only (nothing in the
package changes). Per size: medians of ``--repeats`` of each stage in microseconds per request
(wall / CPU), peak RSS and its growth per request beyond the interpreter and imports, TSV bytes per
request, and in the same run ``gzip -dc | sha256sum`` of the row files and ``sha256sum`` of the TSV.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from process_timing import time_command

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kedro_run import make_project  # noqa: E402 -- a sibling script, not a package

VIEW = "decision_index"
STAGE_NAMES = ("read_release", "build", "commit_dataset")
ROW_FILES = ("selected-rows.jsonl.gz", "gsm8k-rows.jsonl.gz", "added-rows.jsonl.gz")
FULL_REQUESTS = 140_178  # requests of the pinned full-scale synthetic suite

# One repeat of the three stages in a fresh process; prints one JSON line.
STAGES = """
import json, resource, sys, time
from jevkedro.config import parse_prepare_options
from jevkedro.nodes.snapshot import commit_dataset
from jevkedro.pipelines.decision_index import build, read_release
suite, out = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3 and sys.argv[3] == "--unpinned":  # a scaled suite: the edition's count and hash pins relaxed here only
    import jevkedro.pipelines.decision_index as di
    pinned = di.family_manifest
    def unpinned(family):
        m = pinned(family)
        m["sources"]["synthetic"] = [{k: v for k, v in p.items() if k not in ("rows", "uncompressed_sha256")}
                                     for p in m["sources"]["synthetic"]]
        m["read_counts"].pop("synthetic", None)
        return m
    di.family_manifest = unpinned
    di.expected_for = lambda family, view, data: {}
res = {"rss_before": int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()}
def timed(name, f, *a):
    w, c = time.perf_counter(), time.process_time()
    r = f(*a)
    res[name] = (time.perf_counter() - w, time.process_time() - c)
    return r
release = timed("read_release", read_release, parse_prepare_options("decision_index", {"source": suite, "data": "synthetic"}))
prepared = timed("build", build, release)
manifest = timed("commit_dataset", commit_dataset, prepared, out)
res["rows"] = manifest["snapshot"]["rows"]
res["sha256"] = manifest["snapshot"]["sha256"]
res["bytes"] = manifest["snapshot"]["bytes"]
res["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(res))
"""



SRC = [str(ROOT / "src")]  # the package timed; --src points at another checkout's src (a baseline)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC[0], "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}


def shell_seconds(cmd: str) -> float:
    t = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, capture_output=True)
    return time.perf_counter() - t


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def write_scaled_suite(folder: Path, requests: int) -> Path:
    """The full-scale synthetic suite's plan with every count multiplied by ``requests / 140,178``
    (each benchmark kept, at least one row), streamed to gzip (level 1: writing 1M rows at level 9
    would take minutes; reading speed barely depends on the level). Same records and read-time
    rules as the pinned suite; only the counts differ, so the pins are relaxed when it is read."""
    import gzip
    import random

    from jevkedro.family import write_data_kind_marker
    from jevkedro.pipelines.decision_index import synthetic

    if all((folder / f).is_file() for f in ROW_FILES) and (folder / "excluded-questions.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    plan = synthetic.suite_plan(full=True)
    f = requests / FULL_REQUESTS

    def scaled(n: int) -> int:
        return max(1, round(n * f))

    rng = random.Random(20260919)
    subsets: dict[int, list[str]] = {c: [] for c in plan["kept"]}
    exclusions: dict[str, object] = {}

    def line(rec: dict) -> bytes:
        return (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")

    with (gzip.open(folder / ROW_FILES[0], "wb", compresslevel=1) as selected,
          gzip.open(folder / ROW_FILES[1], "wb", compresslevel=1) as gsm8k):
        for cid, (dataset, n_rows) in plan["selected"].items():
            kept_n = scaled(plan["kept"][cid]) if cid in plan["kept"] else None
            excluded_n = min(scaled(plan["excluded"][cid]), kept_n or scaled(n_rows)) if cid in plan["excluded"] else 0
            for n in range(scaled(n_rows)):
                track = (f"GSM8K-{'4' if n % 2 == 0 else '10'}") if cid == 30 else None
                group = f"GSM8K:test:{n // 2}" if cid == 30 else None
                rec = synthetic._record(rng, cid, dataset, n, track=track, group=group)
                selected.write(line(rec))
                if kept_n is not None and n < kept_n:
                    subsets[cid].append(rec["_evaluation"]["run_id"])
                if cid == 30:
                    gsm8k.write(line(synthetic._record(rng, cid, dataset, n, run_prefix="v0.3-gsm8k:", track=track, group=group)))
                if (kept_n is None or n < kept_n) and n < excluded_n:
                    ev = rec["_evaluation"]
                    exclusions[f"{cid}:{ev['track']}:{ev['group_id']}"] = {next(iter(rec["questions"])): "duplicate_options"}
    with gzip.open(folder / ROW_FILES[2], "wb", compresslevel=1) as added:
        for cid, (dataset, n_rows) in plan["added"].items():
            prefix = "calibration-v1:" if cid == 56 else "candidates-v3:"
            for n in range(scaled(n_rows)):
                added.write(line(synthetic._record(rng, cid, dataset, n, run_prefix=prefix)))
    docs = {"excluded-questions.json": [{"id": k, "reasons": v} for k, v in exclusions.items()],
            "acos-subset.json": {"run_ids": subsets[38]}, "toolret-subset.json": {"run_ids": subsets[2]},
            "bright-subset.json": {"run_ids": subsets[36]}, "home-appliances-subset.json": {"run_ids": subsets[9]}}
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    write_data_kind_marker(folder, "decision_index", "synthetic",
                           f"Written by bench_prepare.py: the synthetic suite scaled to about {requests} requests. Invented rows.")
    return folder


def run_stages(suite: Path, out: Path, unpinned: bool) -> dict:
    extra = ["--unpinned"] if unpinned else []
    done = subprocess.run([sys.executable, "-c", STAGES, str(suite), str(out), *extra], env=env(),
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the stages failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def scaling(work: Path, sizes: list[int], repeats: int) -> None:
    """Each stage at each size (medians of ``repeats``), per request, against the baselines."""
    med = statistics.median
    print(f"code: {SRC[0]}; scaled synthetic suites (pins relaxed inside this benchmark only); load average before: {load()}")
    table = []
    for size in sizes:
        t = time.perf_counter()
        suite = write_scaled_suite(work / f"scale-{size}" / "suite", size)
        print(f"suite for {size}: {suite} ({time.perf_counter() - t:.1f} s to write or find)", flush=True)
        files = " ".join(str(suite / f) for f in ROW_FILES)
        runs, gz_sha, tsv_sha = [], [], []
        for _ in range(repeats):
            gz_sha.append(shell_seconds(f"gzip -dc {files} | sha256sum"))
            runs.append(run_stages(suite, work / f"scale-{size}" / "snap", unpinned=True))
            tsv_sha.append(shell_seconds(f"sha256sum {work / f'scale-{size}' / 'snap' / (VIEW + '.tsv')}"))
            r = runs[-1]
            print(f"  {r['rows']} requests: " + ", ".join(f"{k} {r[k][0]:.2f} s (cpu {r[k][1]:.2f})" for k in STAGE_NAMES)
                  + f"; peak RSS {r['peak_rss'] / 2**30:.2f} GiB; gzip -dc|sha256sum {gz_sha[-1]:.2f} s; "
                  f"sha256sum TSV {tsv_sha[-1]:.2f} s", flush=True)
        table.append((runs, med(gz_sha), med(tsv_sha)))
    print(f"load average after: {load()}")
    print(f"\nmedians over {repeats}; per request in microseconds (wall / cpu)")
    head = "  requests   " + "".join(f"{k:>22s}" for k in STAGE_NAMES) + f"{'the three':>22s}{'gzip|sha256':>13s}{'sha256 TSV':>12s}"
    print(head + f"{'peak RSS':>10s}{'(peak-start)/req':>18s}{'TSV/req':>10s}")
    for runs, gz, tsv in table:
        n = runs[0]["rows"]
        cells = []
        for k in (*STAGE_NAMES, None):
            wall = med(sum(r[s][0] for s in STAGE_NAMES) if k is None else r[k][0] for r in runs)
            cpu = med(sum(r[s][1] for s in STAGE_NAMES) if k is None else r[k][1] for r in runs)
            cells.append(f"{wall / n * 1e6:9.1f} / {cpu / n * 1e6:6.1f} µs")
        rss = med(r["peak_rss"] for r in runs)
        grown = med(r["peak_rss"] - r["rss_before"] for r in runs)  # beyond the interpreter and imports
        print(f"  {n:>9d}  " + "".join(f"{c:>22s}" for c in cells) + f"{gz / n * 1e6:9.1f} µs{tsv / n * 1e6:9.1f} µs"
              + f"{rss / 2**30:7.2f} GiB{grown / n / 1024:14.1f} KiB{runs[0]['bytes'] / n:7.0f} B")
    for runs, gz, tsv in table:
        n = runs[0]["rows"]
        total = med(sum(r[s][0] for s in STAGE_NAMES) for r in runs)
        total_cpu = med(sum(r[s][1] for s in STAGE_NAMES) for r in runs)
        print(f"  {n:>9d} requests: the three stages {total:.2f} s wall / {total_cpu:.2f} s cpu; "
              f"{total / gz:.1f}x gzip -dc|sha256sum ({gz:.2f} s), sha256sum of the TSV {tsv:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/prepare_bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-kedro", action="store_true", help="time the functions only")
    parser.add_argument("--src", default=SRC[0], help="the src folder of the code to time (e.g. main's, as a baseline)")
    parser.add_argument("--scale", type=int, nargs="+", metavar="REQUESTS",
                        help="instead: the three stages on the synthetic suite scaled to about these many requests "
                             "(e.g. 10000 100000 1000000), pins relaxed inside this benchmark only")
    args = parser.parse_args()
    SRC[0] = str(Path(args.src).resolve())
    work = Path(args.work)
    if args.scale:
        scaling(work, args.scale, args.repeats)
        return
    suite = work / "suite"
    if not all((suite / f).is_file() for f in ROW_FILES):
        from jevkedro.pipelines.decision_index.synthetic import write_suite

        write_suite(suite, "synthetic")
    project = make_project(work)
    source = f"{VIEW}.prepare.source={suite},{VIEW}.prepare.data=synthetic"
    print(f"code: {SRC[0]}; load average before: {load()}")
    stages, kedro, gz_sha, tsv_sha = [], [], [], []
    for i in range(args.repeats):
        gz_sha.append(shell_seconds("gzip -dc " + " ".join(str(suite / f) for f in ROW_FILES) + " | sha256sum"))
        stages.append(run_stages(suite, work / "snap", unpinned=False))
        tsv_sha.append(shell_seconds(f"sha256sum {work / 'snap' / (VIEW + '.tsv')}"))
        s = stages[-1]
        line = (f"repeat {i + 1}: " + ", ".join(f"{k} {s[k][0]:.2f} s (cpu {s[k][1]:.2f})" for k in STAGE_NAMES)
                + f"; peak RSS {s['peak_rss'] / 2**30:.2f} GiB; gzip -dc|sha256sum {gz_sha[-1]:.2f} s; sha256sum TSV {tsv_sha[-1]:.2f} s")
        if not args.no_kedro:
            kedro.append(time_command([sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}",
                                       f"--to-nodes={VIEW}.prepare_snapshot", f"--params={source}"], project, env()))
            line += f"; kedro run {kedro[-1][0]:.1f} s (cpu {kedro[-1][1]:.1f})"
        print(line, flush=True)
    print(f"load average after: {load()}")
    med = statistics.median
    rows = stages[0]["rows"]
    total = [sum(s[k][0] for k in STAGE_NAMES) for s in stages]
    total_cpu = [sum(s[k][1] for k in STAGE_NAMES) for s in stages]
    print(f"\nmedians over {args.repeats} ({rows} requests, {stages[0]['bytes']} bytes, sha256 {stages[0]['sha256']}):")
    for k in STAGE_NAMES:
        print(f"  {k:15s} {med(s[k][0] for s in stages):6.2f} s wall, {med(s[k][1] for s in stages):6.2f} s cpu")
    print(f"  functions       {med(total):6.2f} s wall, {med(total_cpu):6.2f} s cpu "
          f"({med(total) / med(gz_sha):.1f}x gzip -dc|sha256sum at {med(gz_sha):.2f} s; target < 8 s: "
          f"{'met' if med(total) < 8 else 'not met'})")
    print(f"  peak RSS        {med(s['peak_rss'] for s in stages) / 2**30:.2f} GiB "
          f"({med(s['peak_rss'] for s in stages) / rows / 1024:.1f} KiB per request)")
    print(f"  sha256sum TSV   {med(tsv_sha):6.2f} s")
    if kedro:
        print(f"  kedro run       {med(k[0] for k in kedro):6.1f} s wall, {med(k[1] for k in kedro):6.1f} s cpu, "
              f"peak RSS {med(k[2] for k in kedro) / 2**30:.2f} GiB "
              f"(framework and start-up: {med(k[1] for k in kedro) - med(total_cpu):.1f} s cpu beyond the functions)")
    if len({s["sha256"] for s in stages}) != 1:
        raise SystemExit("the snapshot's sha256 changed between repeats")


if __name__ == "__main__":
    main()
