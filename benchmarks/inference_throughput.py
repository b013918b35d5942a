"""Throughput of the inference engine against a loopback System One server with a fixed answer time.

Command (from the repository root):

    KEDRO_DISABLE_TELEMETRY=true .venv/bin/python benchmarks/inference_throughput.py

(any environment with the package and the ``dask`` extra installed works the same way).

What it measures:

1. ``systemone`` adapter, local executor, at ``model.concurrency`` 1, 8 and 32: requests per
   second over a synthetic view, as a fraction of the ideal ``concurrency / answer_time`` (the
   server sleeps ``--delay-s``, 20 ms, per request and runs in its own process so it does not share
   the client's GIL; ``--server asyncio``, the default, is ``benchmarks/fixed_delay_server.py``, one
   event loop that costs ~0.1 ms of CPU per request, so 32 requests arriving together are all
   answered 20 ms later; ``--server threading`` is the tests' ``python -m jevkedro.testing``), and
   the client's CPU seconds per request (``time.process_time``, every thread of the client
   process; the server's from /proc). With two or more cores the client is pinned to core 0 and
   the server to core 1 (``taskset``; ``--no-pin`` leaves both free).
   Median of ``--repeats`` runs; every run starts from an empty predictions log
   and writes it as a real run does (append + flush per line, fsync at most once a second).
   Beside it, in the same run, the transport's own ceiling: a bare loop of the same POSTs through
   the adapter's :meth:`~jevkedro.models.http.HttpAdapter.post_async` (aiohttp; no engine, no log),
   ``concurrency`` at once.
2. The Dask executor on a LocalCluster of 2 worker processes (concurrency 1 in each) against the
   local executor at concurrency 1, same server: speed-up = local wall time / Dask wall time, on a
   cluster started beforehand (its start-up time is reported separately). Records come back as
   the tasks' results; the same runs with ``model.shard_store`` set to a local folder (each shard
   also written there and merged from there at the end) show what the store costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.testing import synthetic_rows, synthetic_snapshot

SERVERS = {  # --server: the fixed-delay asyncio server, or the tests' threaded fault-injecting one
    "asyncio": [str(Path(__file__).with_name("fixed_delay_server.py"))],
    "threading": ["-m", "jevkedro.testing"],
}


def start_server(delay_s: float, core: int | None, kind: str = "asyncio") -> tuple[subprocess.Popen, str]:
    pin = ["taskset", "-c", str(core)] if core is not None else []
    proc = subprocess.Popen([*pin, sys.executable, *SERVERS[kind], "--delay-s", str(delay_s)],
                            stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def timed_run(snapshot, settings: dict, workdir: Path) -> float:
    return timed_run_cpu(snapshot, settings, workdir)[0]


def timed_run_cpu(snapshot, settings: dict, workdir: Path) -> tuple[float, float]:
    """Wall seconds of one run and the CPU seconds this (client) process spent in it, all threads."""
    log_path = workdir / f"run-{time.perf_counter_ns()}" / "predictions.jsonl"
    plog = PredictionLog(log_path)
    adapter = make_adapter(settings)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = run_inference(snapshot, adapter, plog, EngineSettings.from_model(settings), settings)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert summary["statuses"] == {"ok": len(snapshot.rows)}, summary
    return wall, cpu


def bare_loop(endpoint: str, rows, concurrency: int) -> tuple[float, float]:
    """Wall and client CPU seconds of the same POSTs through the adapter's transport alone."""
    import asyncio

    from jevkedro.models.http import HttpReply

    adapter = make_adapter({"adapter": "systemone", "endpoint": endpoint, "api_key_env": ""})
    adapter.setup()
    bodies = [json.dumps({"model": "jev-1.13.0", **row.request}).encode() for row in rows]

    async def run() -> None:
        todo = iter(bodies)

        async def worker() -> None:
            for body in todo:
                reply = await adapter.post_async("/systemone", body, "application/json")
                assert isinstance(reply, HttpReply) and reply.body["answers"], reply
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await adapter.aclose()

    t0, c0 = time.perf_counter(), time.process_time()
    asyncio.run(run())
    return time.perf_counter() - t0, time.process_time() - c0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def compare_dask(args, base: dict, tmp: Path) -> dict:
    """The Dask executor (2 worker processes) against the local executor at concurrency 1."""
    from distributed import LocalCluster

    n = int(2 * args.seconds / args.delay_s)
    snapshot = synthetic_snapshot(tmp / "snapdask", synthetic_rows(n, prefix="d-"))
    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        startup = time.perf_counter() - t0
        dask = {**base, "concurrency": 1, "executor": "dask", "scheduler": cluster.scheduler_address,
                "shard_size": 25}
        local = [timed_run(snapshot, {**base, "concurrency": 1}, tmp) for _ in range(args.repeats)]
        dist = [timed_run(snapshot, dask, tmp) for _ in range(args.repeats)]
        stored = [timed_run(snapshot, {**dask, "shard_store": str(tmp / f"store{i}")}, tmp)
                  for i in range(args.repeats)]
    speedup = statistics.median(local) / statistics.median(dist)
    dask_result = {"requests": n, "workers": 2, "shard_size": 25, "cluster_startup_s": startup,
                       "local_median_s": statistics.median(local), "dask_median_s": statistics.median(dist),
                       "speedup": speedup, "dask_with_store_median_s": statistics.median(stored),
                       "speedup_with_store": statistics.median(local) / statistics.median(stored)}
    print(f"dask, 2 workers: {statistics.median(dist):.2f}s vs local {statistics.median(local):.2f}s "
          f"-> speed-up {speedup:.2f}x (n={n}; cluster start-up {startup:.1f}s not included); "
          f"with a shard store {statistics.median(stored):.2f}s "
          f"({dask_result['speedup_with_store']:.2f}x)", flush=True)
    return dask_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay-s", type=float, default=0.02)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="ideal duration of one run (sets its size)")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the client to core 0 and the server to core 1 (taskset)")
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask comparison")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--server", choices=sorted(SERVERS), default="asyncio",
                    help="asyncio: benchmarks/fixed_delay_server.py, which answers after the delay at little CPU; "
                         "threading: the tests' server (python -m jevkedro.testing), ~0.4 ms of CPU per request in threads")
    args = ap.parse_args()
    all_cores = os.sched_getaffinity(0)
    pin = not args.no_pin and len(all_cores) >= 2 and shutil.which("taskset") is not None
    server, endpoint = start_server(args.delay_s, 1 if pin else None, args.server)
    if pin:
        os.sched_setaffinity(0, {0})  # the client (this process, all its threads) on core 0, as taskset -c 0
    results: dict = {"delay_s": args.delay_s, "repeats": args.repeats, "pinned": pin, "server": args.server, "concurrency": {}}
    print(f"{args.server} server; client {'core 0, server core 1' if pin else 'and server unpinned'}; load average {load()}",
          flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            base = {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "",
                    "progress": 0}
            for c in args.concurrency:
                n = int(args.seconds * c / args.delay_s)
                rows = synthetic_rows(n, prefix=f"c{c}-")
                snapshot = synthetic_snapshot(tmp / f"snap{c}", rows)
                ideal = c / args.delay_s
                transports = ["bare", "engine"]
                runs: dict[str, list] = {t: [] for t in transports}
                server_cpu: dict[str, list] = {t: [] for t in transports}
                for _ in range(args.repeats):  # the transports take turns, so each repeat shares one load
                    for transport in transports:
                        s0 = process_cpu_s(server.pid)
                        runs[transport].append(bare_loop(endpoint, rows, c) if transport == "bare" else
                                               timed_run_cpu(snapshot, {**base, "concurrency": c}, tmp))
                        server_cpu[transport].append(process_cpu_s(server.pid) - s0)
                for transport in transports:
                    rates = [n / w for w, _ in runs[transport]]
                    cpu_ms = statistics.median(cpu for _, cpu in runs[transport]) / n * 1e3
                    server_ms = statistics.median(server_cpu[transport]) / n * 1e3
                    # the share of a core the client got: under other load it caps the rate (rate = share / CPU per request)
                    share = statistics.median(cpu / w for w, cpu in runs[transport])
                    row = {"requests": n, "ideal_req_s": ideal, "median_req_s": statistics.median(rates),
                           "fraction_of_ideal": statistics.median(rates) / ideal,
                           "client_cpu_ms_per_request": cpu_ms, "server_cpu_ms_per_request": server_ms,
                           "client_core_share": share, "runs_req_s": [round(r, 1) for r in rates], "load_average": load()}
                    results["concurrency"].setdefault(c, {})[transport] = row
                    print(f"concurrency {c:>2} {transport:>6}: {row['median_req_s']:7.1f} req/s of ideal {ideal:6.0f} "
                          f"= {row['fraction_of_ideal']:.3f}; CPU per request: client {cpu_ms:.3f} ms, server {server_ms:.3f} ms; "
                          f"client used {share:.0%} of its core (n={n}, runs {row['runs_req_s']}; load {load()})", flush=True)
            if pin:
                os.sched_setaffinity(0, all_cores)  # Dask's worker processes inherit this process's cores
            if not args.no_dask:
                results["dask"] = compare_dask(args, base, tmp)
    finally:
        server.terminate()
        server.wait()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
