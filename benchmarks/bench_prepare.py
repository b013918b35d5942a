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

# One repeat of the three stages in a fresh process; prints one JSON line.
STAGES = """
import json, resource, sys, time
from jevkedro.config import parse_prepare_options
from jevkedro.nodes.snapshot import commit_dataset
from jevkedro.pipelines.decision_index import build, read_release
suite, out = sys.argv[1], sys.argv[2]
res = {}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/prepare_bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-kedro", action="store_true", help="time the functions only")
    parser.add_argument("--src", default=SRC[0], help="the src folder of the code to time (e.g. main's, as a baseline)")
    args = parser.parse_args()
    SRC[0] = str(Path(args.src).resolve())
    work = Path(args.work)
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
        out = subprocess.run([sys.executable, "-c", STAGES, str(suite), str(work / "snap")], env=env(),
                             capture_output=True, text=True, check=True).stdout
        stages.append(json.loads(out.strip().splitlines()[-1]))
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
