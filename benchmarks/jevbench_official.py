"""Time JevBench's official scorer on a synthetic 231-task view (the public release's shape).

Command (from the repository root):

    .venv/bin/python benchmarks/jevbench_official.py

Builds 231 invented tasks (original 72 as 36 pairs, easy 48, hard 111; noul/choice/score mixed),
random answers (some rounded off by up to 0.03), then times ``official_summary`` (per-item
scoring + every summary and report) over several repeats and prints the best and median.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from jevkedro.pipelines.jevbench.official import official_summary  # noqa: E402
from support import choice, noul, record, task  # noqa: E402
from support import jevbench_snapshot_of as snapshot_of  # noqa: E402


def tasks(rng: random.Random) -> list[dict]:
    out = []
    for i in range(36):
        labels = ["a", "b", "c", "d"]
        gold = rng.choice(labels)
        out += [task(f"original-intent-{i:02d}-{v}", "choice", labels, gold, family="intent",
                     group=f"original-intent-{i:02d}") for v in (0, 1)]
    for i in range(48):
        out.append(task(f"easy-fact-{i:02d}", "noul", ["no", "yes"], rng.choice(["no", "yes"]), family="fact"))
    for i in range(111):
        if i % 10 == 0:
            out.append(task(f"hard-opus-a-temporal_numeric-{i:03d}", "score", ["0", "1", "2", "3"], rng.randrange(4),
                            family="temporal_numeric"))
        else:
            labels = [f"opt_{k}" for k in range(rng.randint(3, 7))]
            prov = {"gold_probs": {lab: 1 / len(labels) for lab in labels}} if i % 11 == 0 else {}
            out.append(task(f"hard-sol-b-multi_hop-{i:03d}", "choice", labels, rng.choice(labels), family="multi_hop",
                            provenance=prov))
    return out


def answer(t: dict, rng: random.Random) -> dict:
    if t["question"]["type"] == "noul":
        return noul(round(rng.random(), 2))
    w = [rng.random() for _ in t["labels"]]
    scale = 1 + rng.uniform(-0.03, 0.03)
    return choice(**{lab: round(x / sum(w) * scale, 3) for lab, x in zip(t["labels"], w)})


def main(repeats: int = 20) -> None:
    rng = random.Random(7)
    ts = tasks(rng)
    with tempfile.TemporaryDirectory() as tmp:
        snap = snapshot_of(Path(tmp), ts)
        preds = {t["id"]: record(answer(t, rng), latency=rng.uniform(0.05, 0.5)) for t in ts}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = official_summary(snap, preds)
            times.append(time.perf_counter() - t0)
    o = out["overall"]
    print(f"{len(ts)} tasks, valid {o['n_valid']}, renormalised {o['n_renormalized']}: "
          f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms over {repeats} runs")


if __name__ == "__main__":
    main()
