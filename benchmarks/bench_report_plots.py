"""What the report's additions and the plots cost at full scale: 140,000 requests x 3 questions.

    PYTHONPATH=src python benchmarks/bench_report_plots.py [--requests 140000]

Builds a synthetic view (``jevkedro.testing.synthetic_rows``: a noul, a choice and a score question
per request) with random valid answers, lays it out as the question table, then times, once each:
the baseline ``build_question_table`` (validation of every answer, which scoring does anyway) and
``summarize_table`` (the generic metrics), then the additions — ``interval_summary`` (95% bootstrap
intervals, 1,000 resamples, overall and per slice), ``selective_summary`` (risk–coverage),
``view_plots`` (four figures, including the smooth calibration band's 200 resamples) and rendering
them to PNG.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.plots import figure_png, view_plots
from jevkedro.nodes.report import interval_summary, selective_summary
from jevkedro.nodes.validate import build_question_table, question_records
from jevkedro.testing import synthetic_rows


def answers(rows, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for row in rows:
        ans = {}
        for qid, cands in row.candidates.items():
            kind = row.request["questions"][qid]["type"]
            if kind == "noul":
                ans[qid] = {"type": "noul", "noul": float(rng.uniform())}
            else:
                p = rng.dirichlet(np.ones(len(cands)))
                ans[qid] = {"type": kind, "probabilities": {c: float(v) for c, v in zip(cands, p)}}
        out[row.request_id] = {"status": "ok", "response": {"answers": ans}, "latency_s": float(rng.gamma(2, 0.01))}
    return out


def clock(label: str, fn):
    start = time.perf_counter()
    value = fn()
    print(f"  {label:<44} {time.perf_counter() - start:7.2f} s")
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=140_000)
    args = parser.parse_args()
    rows = synthetic_rows(args.requests)
    for i, row in enumerate(rows):  # a few slices of realistic size
        row.slices.update({"tier": f"t{i % 5}", "domain": f"d{i % 12}"})
    preds = answers(rows)
    print(f"{args.requests:,} requests, {3 * args.requests:,} questions")
    table = clock("baseline: build_question_table (validation)", lambda: build_question_table(rows, preds))
    clock("baseline: summarize_table (generic metrics)", lambda: M.summarize_table(table))
    clock("interval_summary (1,000 resamples, slices)", lambda: interval_summary(table, table.request_id, "request"))
    clock("selective_summary (risk-coverage)", lambda: selective_summary(table))
    records = question_records(table)
    report = {"model": "m", "view": "synthetic", "latency": {"p50": 0.02, "p95": 0.05, "p99": 0.08, "first": None},
              "intervals": interval_summary(table, table.request_id, "request", resamples=50)}
    figures = clock("view_plots (4 figures, band: 200 resamples)", lambda: view_plots(None, report, records))
    clock("render the 4 figures to PNG", lambda: [figure_png(f) for f in figures.values()])


if __name__ == "__main__":
    main()
