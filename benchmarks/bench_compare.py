"""Bootstrap speed at full scale: 140,000 requests x 3 questions, 1,000 resamples.

    PYTHONPATH=src python benchmarks/bench_compare.py [--requests 140000] [--resamples 1000] [--repeat 3]

Times, median of ``--repeat`` runs, in one process:

- ``headline_intervals`` — the report's 95% intervals of accuracy, NLL, Brier, ECE (count matrices
  over requests times unit totals, :mod:`jevkedro.nodes.compare`);
- ``report_intervals`` — what ``report.json`` computes: the same plus accuracy per slice value
  (three slices of 3, 5 and 12 values) from the same resamples;
- ``paired_metrics`` — the comparison's paired intervals of the same four metrics for two models;
- baseline *per-resample loop* — the textbook bootstrap: per resample draw request indices, gather
  their questions and recompute the four metrics (20 resamples timed, scaled to ``--resamples``);
- *ideal* — drawing the random integers alone (``default_rng.integers``, B x G): no bootstrap can
  draw its resamples faster.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from jevkedro.nodes import compare as C
from jevkedro.nodes import metrics as M


def synthetic_terms(n_requests: int, per_request: int, seed: int, shift: float = 0.0) -> C.Terms:
    rng = np.random.default_rng(seed)
    n = n_requests * per_request
    conf = rng.uniform(0.34, 1.0, n)
    correct = rng.uniform(size=n) < np.clip(conf - shift, 0, 1)
    return C.Terms(
        request_id=np.repeat(np.array([f"r{i:06d}" for i in range(n_requests)], dtype=object), per_request),
        question_id=np.tile(np.array([f"q{k}" for k in range(per_request)], dtype=object), n_requests),
        hard=np.ones(n, dtype=bool), correct=correct, prob=np.ones(n, dtype=bool),
        nll=-np.log(np.where(correct, conf, 1 - conf).clip(M.NLL_FLOOR)), brier=2 * (1 - np.where(correct, conf, 1 - conf)) ** 2,
        ece_rows=np.ones(n, dtype=bool), conf=conf, bin=M.bin_index(conf, 15), valid=np.ones(n, dtype=bool),
        pred=np.zeros(n, dtype=int),
    )


def loop_bootstrap(t: C.Terms, resamples: int, seed: int) -> None:
    """The per-resample loop: gather each resample's questions, recompute every metric."""
    codes, G = C.unit_codes(t.request_id)
    order = np.argsort(codes, kind="stable")
    lens = np.bincount(codes, minlength=G)
    starts = np.cumsum(lens) - lens
    rng = np.random.default_rng(seed)
    for _ in range(resamples):
        d = rng.integers(0, G, G)
        L = lens[d]
        idx = order[np.repeat(starts[d] - (np.cumsum(L) - L), L) + np.arange(L.sum())]
        t.correct[idx].mean(), t.nll[idx].mean(), t.brier[idx].mean(), M.ece(t.conf[idx], t.correct[idx])


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=140_000)
    parser.add_argument("--questions-per-request", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    a = synthetic_terms(args.requests, args.questions_per_request, 1)
    b = synthetic_terms(args.requests, args.questions_per_request, 2, shift=0.02)
    G = args.requests
    print(f"{args.requests:,} requests, {len(a):,} questions, {args.resamples} resamples; median of {args.repeat}")
    drawn = min(args.resamples, 50)
    ideal = timed(lambda: np.random.default_rng(0).integers(0, G, (drawn, G)), args.repeat) * args.resamples / drawn
    head = timed(lambda: C.headline_intervals(a, resamples=args.resamples), args.repeat)
    rng = np.random.default_rng(3)
    slices = {"type": rng.integers(0, 3, len(a)).astype(str), "tier": rng.integers(0, 5, len(a)).astype(str),
              "domain": rng.integers(0, 12, len(a)).astype(str)}
    report = timed(lambda: C.report_intervals(a, slices, resamples=args.resamples), args.repeat)
    paired = timed(lambda: C.paired_metrics(a, b, resamples=args.resamples), args.repeat)
    sample = 20
    loop = timed(lambda: loop_bootstrap(a, sample, 0), 1) * args.resamples / sample
    print(f"  headline_intervals (one model)        {head:8.2f} s")
    print(f"  report_intervals (+ 20 slice values)  {report:8.2f} s")
    print(f"  paired_metrics (two models)           {paired:8.2f} s")
    print(f"  baseline per-resample loop (scaled)   {loop:8.2f} s   -> {loop / head:.1f}x slower than headline_intervals")
    print(f"  ideal: drawing the integers only      {ideal:8.2f} s   -> headline_intervals is {head / ideal:.1f}x the ideal")


if __name__ == "__main__":
    main()
