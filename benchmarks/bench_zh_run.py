"""`kedro run --pipelines=zh_decision_bench` with the embedded model: wall time and latency.

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_zh_run.py --repeats 5

Each repeat copies the project's config and shipped data into a fresh temporary folder and runs
the real CLI there from nothing (prepare -> verify -> infer -> score -> MLflow, a new SQLite
store each time), so every run is cold. Prints the median wall time and, from the reports, the
median per-request latency (p50/p95, one sample per request as docs/protocol.md §2 defines) and the
per-question figure (request latency summed over the view / questions).
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

ROOT = Path(__file__).resolve().parents[1]
VIEW = "zh_decision_bench"


def one_run() -> tuple[float, dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copy(ROOT / "pyproject.toml", tmp)
        shutil.copytree(ROOT / "conf" / "base", tmp / "conf" / "base")
        (tmp / "conf" / "local").mkdir()
        (tmp / "src").mkdir()
        shutil.copytree(ROOT / "data" / "01_raw" / VIEW, tmp / "data" / "01_raw" / VIEW)
        env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
        kedro = Path(sys.executable).with_name("kedro")
        t0 = time.perf_counter()
        subprocess.run([str(kedro), "run", f"--pipelines={VIEW}"], cwd=tmp, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        report = json.loads(next((tmp / "data" / "08_reporting").glob(f"*/{VIEW}/report.json")).read_text())
        preds = next((tmp / "data" / "07_model_output").glob(f"*/{VIEW}/predictions.jsonl")).read_text().splitlines()
        total = sum(json.loads(line)["latency_s"] or 0.0 for line in preds)
        return wall, report["latency"], total / report["coverage"]["questions"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    runs = [one_run() for _ in range(args.repeats)]
    walls = [r[0] for r in runs]
    print(f"kedro run --pipelines={VIEW} (cold, embedded model), {args.repeats} runs")
    print(f"  wall time        median {statistics.median(walls):.2f} s  (min {min(walls):.2f}, max {max(walls):.2f})")
    print(f"  request latency  p50 median {statistics.median(r[1]['p50'] for r in runs) * 1e3:.3f} ms, "
          f"p95 median {statistics.median(r[1]['p95'] for r in runs) * 1e3:.3f} ms")
    print(f"  per question     median {statistics.median(r[2] for r in runs) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
