"""Scoring speed and memory on a Decision-Index-sized synthetic view.

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_scoring.py --requests 140178 --repeats 5

Builds ``--requests`` synthetic requests (1-3 questions each, mixed noul/choice/score, K up to 6)
and uniform-noise answers in memory, then times, over ``--repeats`` runs, (a) validation into the
question table, (b) the generic metrics with all slices, (c) the reference-protocol report; and,
for comparison, the same overall metrics computed by a plain per-question Python loop. Prints
medians, the vectorised/loop ratio and the peak RSS.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time

import numpy as np

from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.report import generic_metrics
from jevkedro.nodes.validate import build_question_table
from jevkedro.protocol import SnapshotRow, Target


def synthetic_view(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows, preds = [], {}
    for i in range(n):
        questions, cands, targets, answers = {}, {}, {}, {}
        for j in range(int(rng.integers(1, 4))):
            qtype = ("noul", "choice", "score")[int(rng.integers(0, 3))]
            qid = f"q{j}"
            if qtype == "noul":
                keys = ["true", "false"]
                questions[qid] = {"type": "noul", "instructions": "?"}
                p = float(rng.random())
                answers[qid] = {"type": "noul", "noul": round(p, 2)}
            else:
                k = int(rng.integers(2, 7))
                keys = [f"o{c}" for c in range(k)] if qtype == "choice" else [str(c) for c in range(k)]
                crit = {key: None for key in keys} if qtype == "choice" else [f"level {c}" for c in range(k)]
                questions[qid] = {"type": qtype, "instructions": "?", "criteria": crit}
                raw = rng.random(k)
                answers[qid] = {"type": qtype, "probabilities": dict(zip(keys, np.round(raw / raw.sum(), 2).tolist()))}
            cands[qid] = keys
            targets[qid] = Target(label=int(rng.integers(0, len(keys))))
        rid = f"r{i}"
        rows.append(SnapshotRow(rid, {"state": f"state {i}", "questions": questions}, cands, targets,
                                {"domain": f"d{i % 43}", "difficulty": ("easy", "mid", "hard")[i % 3]}, {}))
        preds[rid] = {"status": "ok", "response": {"answers": answers}}
    return rows, preds


def loop_metrics(table) -> dict:
    """The overall accuracy/NLL/Brier computed one question at a time (the baseline)."""
    hits = n_hard = 0
    nll_sum = brier_sum = 0.0
    n_prob = 0
    for i in range(len(table)):
        k = table.K[i]
        p = table.P[i, :k].tolist()
        y = table.Y[i, :k].tolist()
        if table.label[i] >= 0:
            n_hard += 1
            hits += table.status[i] == "ok" and p.index(max(p)) == table.label[i]
        if table.status[i] == "ok":
            n_prob += 1
            nll_sum += -sum(yy * math.log(max(pp, 1e-12)) for pp, yy in zip(p, y))
            brier_sum += sum((pp - yy) ** 2 for pp, yy in zip(p, y))
    return {"accuracy": hits / n_hard, "nll": nll_sum / n_prob, "brier": brier_sum / n_prob}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=140_178)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows, preds = synthetic_view(args.requests)
    times: dict[str, list[float]] = {"validate": [], "generic": [], "reference": [], "overall_vectorised": [], "overall_loop": []}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        table = build_question_table(rows, preds)
        t1 = time.perf_counter()
        generic = generic_metrics(table)
        t2 = time.perf_counter()
        reference_report(table, {"domain": "domain", "difficulty": "difficulty", "task": "question"}, "equal_width")
        t3 = time.perf_counter()
        from jevkedro.nodes.metrics import summarize_table
        overall = summarize_table(table)
        t4 = time.perf_counter()
        loop = loop_metrics(table)
        t5 = time.perf_counter()
        for key, val in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            times[key].append(val)
    assert abs(loop["accuracy"] - overall["accuracy"]) < 1e-12 and abs(loop["nll"] - overall["nll"]) < 1e-9
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"requests {args.requests}, questions {len(table)}, repeats {args.repeats}")
    for key, val in med.items():
        print(f"  {key:<20} median {val * 1000:9.1f} ms")
    print(f"  loop / vectorised overall metrics: {med['overall_loop'] / med['overall_vectorised']:.0f}x")
    print(f"  slices in generic metrics: {sum(len(v) for k, v in generic.items() if k != 'overall')}")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
