"""The HTTP guard of issue 19: the infer step of the full-scale Decision Index view through `kedro run`,
`model.adapter=systemone`, concurrency 32, against a loopback server that answers after a fixed 20 ms.

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_kedro_http.py --work /tmp/kedro_http_bench --repeats 1

Writes the full-scale synthetic Decision Index suite (140,178 requests) and prepares its snapshot
once in ``--work`` (a throw-away copy of the project, as ``bench_kedro_run.py`` makes it), starts
``benchmarks/fixed_delay_server.py`` and runs, in a fresh process per repeat,
``kedro run --pipelines=decision_index --from-nodes=decision_index.verify_snapshot
--to-nodes=decision_index.infer`` asking that server (a fresh ``model.name`` each time). With two or
more cores the kedro process is pinned to core 0 and the server to core 1 (``taskset``; ``--cores``).

Prints, per run: the infer step's rate (the engine's closing progress line) as a fraction of the
ideal ``32 / 20 ms`` = 1,600 requests per second, and the kedro process's CPU seconds (user +
system, verification and start-up included) per request. ``--src`` runs another checkout's code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_kedro_run import VIEW, make_project
from process_timing import time_command

ROOT = Path(__file__).resolve().parents[1]
RATE = re.compile(r"(\d+)/(\d+)\s+requests\s+\(100%\),\s+([\d.]+)\s+req/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/kedro_http_bench")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--delay-s", type=float, default=0.02)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the checkout's src/ whose code runs")
    ap.add_argument("--cores", type=int, nargs=2, default=[0, 1], metavar=("CLIENT", "SERVER"),
                    help="the cores of the kedro process and of the server (taskset)")
    args = ap.parse_args()
    src = args.src.resolve()
    import bench_kedro_run

    bench_kedro_run.SRC = src
    work = Path(args.work)
    suite = work / "suite"
    if not (suite / "added-rows.jsonl.gz").is_file():
        from jevkedro.pipelines.decision_index.synthetic import write_suite

        write_suite(suite, "synthetic")
    project = make_project(work)
    env = {**os.environ, "PYTHONPATH": str(src), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1",
           "COLUMNS": "250"}  # one console line per progress line
    source = f"{VIEW}.prepare.source={suite},{VIEW}.prepare.data=synthetic"
    subprocess.run([sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}", f"--to-nodes={VIEW}.prepare_snapshot",
                    f"--params={source}"], cwd=project, env=env, check=True, capture_output=True)
    pin = len(os.sched_getaffinity(0)) >= 2 and shutil.which("taskset") is not None
    server = subprocess.Popen([*(["taskset", "-c", str(args.cores[1])] if pin else []), sys.executable,
                               str(ROOT / "benchmarks" / "fixed_delay_server.py"), "--delay-s", str(args.delay_s)],
                              stdout=subprocess.PIPE, text=True, env=env)
    endpoint = (server.stdout.readline() if server.stdout else "").strip()
    ideal = args.concurrency / args.delay_s
    fractions, cpus = [], []
    try:
        for i in range(args.repeats):
            model = (f"model.adapter=systemone,model.endpoint={endpoint},model.api_key_env=none,model.model=jev-1.13.0,"
                     f"model.concurrency={args.concurrency},model.name=http-bench-{i}-{time.time_ns()}")
            log = work / f"run-{i}.log"
            cmd = [*(["taskset", "-c", str(args.cores[0])] if pin else []), sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}",
                   f"--from-nodes={VIEW}.verify_snapshot", f"--to-nodes={VIEW}.infer", f"--params={source},{model}"]
            wrapped = [sys.executable, "-c", f"import subprocess,sys; sys.exit(subprocess.run(sys.argv[1:], "
                       f"stdout=open({str(log)!r}, 'w'), stderr=subprocess.STDOUT).returncode)", *cmd]
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            wall, cpu, _ = time_command(wrapped, project, env)
            found = RATE.findall(log.read_text(encoding="utf-8", errors="replace"))
            if not found:
                raise SystemExit(f"no closing progress line in {log}")
            done, total, rate = found[-1]
            fractions.append(float(rate) / ideal)
            cpus.append(cpu / int(total))
            print(f"run {i + 1}: {done}/{total} requests, infer {float(rate):.0f} req/s = {fractions[-1]:.2f} of ideal "
                  f"{ideal:.0f}; kedro process {wall:.1f} s wall, {cpu:.1f} s CPU = {cpus[-1] * 1e3:.3f} ms per request "
                  f"(load before {load})", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(f"median over {args.repeats}: {statistics.median(fractions):.2f} of ideal, "
          f"{statistics.median(cpus) * 1e3:.3f} ms of kedro CPU per request")


if __name__ == "__main__":
    main()
