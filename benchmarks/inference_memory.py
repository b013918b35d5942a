"""Memory of the inference engine over a large view: resident size while 140k requests are answered.

Command (from the repository root):

    KEDRO_DISABLE_TELEMETRY=true .venv/bin/python benchmarks/inference_memory.py

What it measures: a remote-style adapter that answers instantly with a System One body (three
questions, the loopback server's answers; parsed body and raw text both recorded, as the HTTP
adapters do) is run by ``run_inference`` at concurrency 8 over ``--n`` synthetic requests (140,000
by default, the size of the largest view). The resident set size (``/proc/self/statm``) is sampled
every ``--every`` answers and at the end, together with the peak (``ru_maxrss``) and the log size.
The snapshot rows themselves are built before the first sample; what grows after it is what the
engine keeps per request. No network: this isolates the engine and the predictions log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from jevkedro.models.base import Adapter, AdapterResult
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.snapshot import Snapshot
from jevkedro.testing import synthetic_rows, system_one_answers


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class InstantSystemOne(Adapter):
    kind = "instant"
    remote = True

    def answer(self, request_id: str, request: dict) -> AdapterResult:
        body = {"model": "jev-1.13.0", "answers": system_one_answers(request["questions"]),
                "usage": {"input_tokens": 200, "output_tokens": 0}}
        text = json.dumps(body)
        return AdapterResult(status="ok", response=json.loads(text), raw=text, model="jev-1.13.0",
                             usage=body["usage"], http_status=200, server_request_id=f"srv-{request_id}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=140_000)
    parser.add_argument("--every", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = synthetic_rows(args.n)
        snap = Snapshot(view="memory", path=Path(tmp) / "memory.tsv", manifest={}, rows=rows,
                        sha256="0" * 64, verified=True)
        plog = PredictionLog(Path(tmp) / "out" / "predictions.jsonl")
        base = rss_mb()
        samples: list[int] = []
        append = plog.append

        def sampled_append(rec: dict) -> None:
            append(rec)
            if len(plog.index) % args.every == 0:
                samples.append(round(rss_mb() - base))

        plog.append = sampled_append  # type: ignore[method-assign]
        t0 = time.perf_counter()
        summary = run_inference(snap, InstantSystemOne(), plog,
                                EngineSettings(concurrency=8, progress=0.0, fsync="never"))
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{args.n} requests in {wall:.1f}s, statuses {summary['statuses']}")
        print(f"rows built: RSS {base:.0f} MB; growth every {args.every} answers (MB): {samples}")
        print(f"after compaction: +{rss_mb() - base:.0f} MB; peak RSS {peak:.0f} MB; "
              f"log {plog.path.stat().st_size / 2**20:.0f} MB")


if __name__ == "__main__":
    main()
