"""The inference engine's own cost per request, against a plain per-request loop, with an instant adapter.

Command (from the repository root):

    .venv/bin/python benchmarks/bench_engine_loop.py --n 6000 --repeats 3

An adapter that answers at once with a System One body (``inference_memory.InstantSystemOne``: the
body encoded and parsed, as the HTTP adapters do) is run over ``--n`` synthetic requests:

- baseline: a plain loop in one thread, ``answer`` then ``PredictionLog.append`` per request;
- ``run_inference`` at ``model.concurrency`` 1, 8 and 32 (thread pool, stop rules, records,
  progress, the same log with its default flush and fsync policy).

Prints the CPU milliseconds per request of this process (all threads; ``time.process_time``) and the
wall time, medians of ``--repeats`` runs, and the engine's ratio to the plain loop. No network: what
is left beyond the loop is the engine's hand-off between threads and its bookkeeping.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inference_memory import InstantSystemOne  # noqa: E402 -- a sibling script, not a package
from jevkedro.models.settings import EngineSettings  # noqa: E402
from jevkedro.nodes.infer import run_inference  # noqa: E402
from jevkedro.nodes.predictions_log import PredictionLog  # noqa: E402
from jevkedro.nodes.snapshot import Snapshot  # noqa: E402
from jevkedro.testing import synthetic_rows  # noqa: E402


def plain_loop(rows, adapter, plog: PredictionLog) -> None:
    for row in rows:
        result = adapter.answer(row.request_id, row.request)
        plog.append({"request_id": row.request_id, "status": result.status, "response": result.response})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = synthetic_rows(args.n)
    adapter = InstantSystemOne()
    with tempfile.TemporaryDirectory() as tmp:
        def measure(run) -> tuple[float, float]:
            cpu, wall = [], []
            for _ in range(args.repeats):
                plog = PredictionLog(Path(tmp) / f"r{time.perf_counter_ns()}" / "predictions.jsonl")
                c0, t0 = time.process_time(), time.perf_counter()
                run(plog)
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - t0)
            return statistics.median(cpu) / args.n * 1e3, statistics.median(wall) / args.n * 1e3

        base_cpu, base_wall = measure(lambda plog: plain_loop(rows, adapter, plog))
        print(f"plain loop      : cpu {base_cpu:.3f} ms/request, wall {base_wall:.3f} ms/request")
        for c in (1, 8, 32):
            def engine(plog, c=c) -> None:
                snap = Snapshot(view="engine", path=Path(tmp) / "engine.tsv", manifest={}, rows=rows,
                                sha256="0" * 64, verified=True)
                run_inference(snap, adapter, plog, EngineSettings(concurrency=c, progress=0.0))

            cpu, wall = measure(engine)
            print(f"engine c={c:<2}     : cpu {cpu:.3f} ms/request, wall {wall:.3f} ms/request "
                  f"({cpu / base_cpu:.2f}x the loop's CPU; engine's own share {cpu - base_cpu:+.3f} ms)")


if __name__ == "__main__":
    main()
