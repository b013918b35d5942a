"""The score node as Kedro runs it, against a straightforward per-question Python scorer.

Command (from the project root, after `make setup`; about 20 minutes on the 2-core machine, most of it the 1M size):

    .venv/bin/python benchmarks/bench_scoring.py --questions 10000 100000 460000 1000000 --repeats 3
    .venv/bin/python benchmarks/bench_scoring.py --view zh_decision_bench --questions 100000 --repeats 3

For each size (in its own subprocess, so memory figures do not mix) a synthetic view is written
the way a run leaves it: a snapshot (written as the ``--view`` view, so that family's report runs:
``typed_decisions`` by default — the reference-protocol report and the family's rules;
``zh_decision_bench`` adds upstream's per-group question bootstrap, 3 x 1,000 seeded draws of every
question; about 2 questions per request, noul/choice/score with 2-8 candidates, 43 domains x 3
difficulties x 2 languages) and a predictions log (answers rounded to 2 decimals as Jev does, so
some sums fall outside 1 ± 0.01; 0.5% adversarial answers: missing and foreign keys, booleans,
strings, NaN, 400-digit integers, level-name keys, keys out of order, list-shaped bodies,
repeated keys). Then, medians over ``--repeats``:

- ``log write`` / ``log open+compact``: every record appended to the predictions log in a
  shuffled order (one line, one write each), then the log opened (every line checked, indexed)
  and compacted into snapshot order;
- ``load``: ``load_snapshot`` + ``verify_snapshot_bytes`` (every line decoded, the layout built);
  ``sha256sum`` of the TSV in the same run (the ideal for the hashing part);
- ``log open``: ``PredictionLog(path)`` (every line checked, indexed), as the run's dataset loads it;
- ``score node``: ``steps.score(snapshot, plog, plog.checked_meta(), model)`` on a loaded snapshot and an opened log
  (records decoded from the log's bytes): validation, generic metrics with every slice, the
  bootstrap intervals, risk-coverage, the family's report (see ``--view``), the report and the
  per-question records;
- ``part: ...``: the node's parts timed one by one on the same inputs: validation (the question
  table), the overall metrics (together: what the baseline computes), every slice, the bootstrap
  intervals, risk-coverage, the family's report;
- ``questions save``: writing the per-question records (``questions.jsonl``);
- ``log read (json.loads)``: the straightforward reading of the log, a dict per line;
- ``side by side``: the score node and a straightforward scorer alternate ``--repeats`` times in
  the same process; the scorer gets the records already parsed (``json.loads``, before its clock
  starts), checks the common answer inline in plain Python floats (anything else goes to the rules
  of :mod:`jevkedro.nodes.validate`) and accumulates accuracy/NLL/Brier/ECE one question at a time.
  Its values must equal the node's overall metrics to 1e-9 (the run stops otherwise). Each ratio is
  the median of the runs' ratios; the reading is compared separately (``json.loads`` per line
  against ``log open``) and in the "both from the log's bytes" ratios.

With ``BENCH_SCORING_PROFILE=FILE`` one more run of the score node is profiled (cProfile, pstats
written to FILE: ``python -m pstats FILE``).

Each size runs in three fresh processes (writing the inputs; log write/compact; load and score),
so the memory figures of a stage are not those of the data generator. Per stage it prints the
median seconds, seconds per million questions, the peak RSS of the stage (``VmHWM``, reset before
each stage) and what the stage added over the RSS it started from, per request.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes import steps
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import generic_metrics, interval_summary, resampling_units, selective_summary
from jevkedro.nodes.snapshot import PreparedView, commit_dataset, load_snapshot, verify_snapshot_bytes
from jevkedro.nodes.validate import (
    EXACT_SUM_TOLERANCE,
    SUM_TOLERANCE,
    build_question_table,
    judge_request,
    question_records,
    row_questions,
)
from jevkedro.protocol import SnapshotRow, Target
from jevkedro.registry import family_of

# The view the synthetic rows are written as (``--view``; the phases run in subprocesses and read it
# from the environment): its family's report runs in the score node.
VIEWS = ("typed_decisions", "zh_decision_bench")
VIEW = os.environ.get("BENCH_SCORING_VIEW", VIEWS[0])
DOMAINS = [f"domain-{i:02d}" for i in range(43)]


def synthetic(n_questions: int, seed: int = 0) -> tuple[list[SnapshotRow], list[dict]]:
    """Rows and one prediction record per row (see the module docstring)."""
    rng = random.Random(seed)
    rows, records = [], []
    i = q_total = 0
    while q_total < n_questions:
        n_q = min(rng.choice((1, 2, 3)), n_questions - q_total)
        questions, cands, targets, answers = {}, {}, {}, {}
        for j in range(n_q):
            qid = f"q{j}"
            qtype = rng.choice(("noul", "choice", "score"))
            if qtype == "noul":
                keys = ["true", "false"]
                questions[qid] = {"type": "noul", "instructions": "Is it so?", "criteria": {"true": "yes", "false": "no"}}
                answer = {"type": "noul", "noul": round(rng.random(), 2)}
            else:
                k = rng.randint(2, 8)
                if qtype == "choice":
                    keys = [f"opt{c}" for c in range(k)]
                    questions[qid] = {"type": "choice", "instructions": "Which one?", "criteria": {c: f"option {c}" for c in keys}}
                else:
                    keys = [str(c) for c in range(k)]
                    questions[qid] = {"type": "score", "instructions": "How much?", "criteria": [f"level {c}" for c in range(k)]}
                w = [rng.random() for _ in keys]
                answer = {"type": qtype, "probabilities": {c: round(x / sum(w), 2) for c, x in zip(keys, w)}}
                if qtype == "choice":
                    answer["choice"] = max(answer["probabilities"], key=answer["probabilities"].get)
            if rng.random() < 0.005:
                answer = adversarial(rng, qtype, keys, answer)
            cands[qid], targets[qid], answers[qid] = keys, Target(label=rng.randrange(len(keys))), answer
        rid = f"r{i:07d}"
        rows.append(SnapshotRow(rid, {"state": f"Synthetic state {i}.", "questions": questions}, cands, targets,
                                {"domain": DOMAINS[i % 43], "difficulty": ("easy", "mid", "hard")[i % 3],
                                 "language": ("en", "zh")[i % 2]}, {"generator": "bench_scoring"}))
        body: dict = {"model": "bench-1", "answers": answers}
        if rng.random() < 0.001:  # the list-shaped /decide flavour
            body = {"model": "bench-1", "answers": [{"id": q, **a} for q, a in answers.items()]}
        record = {"request_id": rid, "status": "ok", "response": body, "latency_s": None, "model": "bench-1",
                  "usage": {"input_tokens": 120, "output_tokens": 0}, "error": None, "unsupported_questions": [],
                  "snapshot_sha256": None, "first": False, "probability_source": "native", "cost_usd": None}
        if rng.random() < 0.001:
            record["meta"] = {"duplicate_keys": [["answers", "q0", "probabilities", "x"]]}
        records.append(record)
        i += 1
        q_total += n_q
    return rows, records


def adversarial(rng: random.Random, qtype: str, keys: list[str], answer: dict) -> dict:
    kind = rng.randrange(8)
    probs = dict(answer.get("probabilities") or {"true": answer.get("noul", 0.5), "false": 1 - answer.get("noul", 0.5)})
    if kind == 0:
        probs.pop(next(iter(probs)))
    elif kind == 1:
        probs["foreign"] = 0.0
    elif kind == 2:
        probs[next(iter(probs))] = True
    elif kind == 3:
        probs[next(iter(probs))] = "0.5"
    elif kind == 4:
        probs[next(iter(probs))] = float("nan")
    elif kind == 5:
        probs[next(iter(probs))] = 10 ** 400
    elif kind == 6:
        probs = dict(reversed(list(probs.items())))  # valid, out of candidate order
    else:
        return {"type": qtype, "noul": rng.choice([None, 1.5, -0.1, "yes"])}
    return {"type": qtype, "probabilities": probs}


def read_records(log_path: Path) -> dict:
    """The log read the straightforward way: ``json.loads`` of every line into a dict."""
    records = {}
    with open(log_path, "rb") as fh:
        for line in fh:
            rec = json.loads(line)
            records[rec["request_id"]] = rec
    return records


class _Overall:
    """Accuracy, NLL, Brier and 15-bin ECE accumulated one question at a time (the baselines' metrics)."""

    def __init__(self) -> None:
        self.n_hard = self.hits = self.n_prob = 0
        self.nll = self.brier = 0.0
        self.bins_conf, self.bins_hit = [0.0] * 15, [0.0] * 15
        self.edges = np.linspace(0.0, 1.0, 16).tolist()

    def add(self, probs: list[float] | None, label: int) -> None:
        self.n_hard += 1
        if probs is None:
            return
        top = probs.index(max(probs))
        self.hits += top == label
        self.n_prob += 1
        self.nll += -math.log(max(probs[label], 1e-12))
        self.brier += sum((x - (1.0 if k == label else 0.0)) ** 2 for k, x in enumerate(probs))
        conf = probs[top]
        b = min(int(conf * 15), 14)
        while b > 0 and conf < self.edges[b]:  # the same left-closed edges as the vectorised ECE
            b -= 1
        while b < 14 and conf >= self.edges[b + 1]:
            b += 1
        self.bins_conf[b] += conf
        self.bins_hit[b] += top == label

    def result(self) -> dict:
        ece = sum(abs(h - c) for h, c in zip(self.bins_hit, self.bins_conf)) / self.n_prob
        return {"accuracy": self.hits / self.n_hard, "nll": self.nll / self.n_prob, "brier": self.brier / self.n_prob,
                "ece": ece}


def plain_baseline(snapshot, records: dict) -> dict:
    """Straightforward scoring of parsed records in plain Python floats, no numpy per answer: the
    common answer (a noul number; or a probabilities object keyed by exactly the candidates, float
    values in [0, 1] summing to 1 within the tolerance, a choice naming one of them) is checked
    inline, anything else goes through the rules (``judge_request``) for its whole request. Its
    verdicts are the rules': a sum is taken in numpy's order (sequential below 8 values, pairs of
    pairs at 8)."""
    acc = _Overall()
    band = SUM_TOLERANCE + 1e-12
    for row in snapshot.rows:
        rec = records.get(row.request_id)
        answers = None
        if rec and rec.get("status") == "ok" and not rec.get("unsupported_questions") \
                and not (rec.get("meta") or {}).get("duplicate_keys"):
            body = (rec.get("response") or {}).get("answers")
            answers = body if body.__class__ is dict else None
        verdicts = None
        for qi, (qid, question) in enumerate(row.request["questions"].items()):
            qtype, cands = question["type"], row.candidates[qid]
            answer = answers.get(qid) if answers is not None else None
            probs = None
            if answer.__class__ is dict and answer.get("type", qtype) == qtype:
                noul, given = answer.get("noul"), answer.get("probabilities")
                if qtype == "noul" and noul.__class__ is float:
                    if 0.0 <= noul <= 1.0:
                        probs = [noul, 1.0 - noul] if cands[0] == "true" else [1.0 - noul, noul]
                elif given.__class__ is dict and (qtype != "noul" or noul is None) and len(given) == len(cands) \
                        and len(cands) <= 8 and (qtype != "choice" or "choice" not in answer
                             or answer["choice"].__class__ is str and answer["choice"] in given):
                    values = [given.get(c) for c in cands]
                    if all(v.__class__ is float and 0.0 <= v <= 1.0 for v in values):
                        total = sum(values) if len(values) < 8 else \
                            ((values[0] + values[1]) + (values[2] + values[3])) + ((values[4] + values[5]) + (values[6] + values[7]))
                        if abs(total - 1.0) <= band:
                            divisor = 1.0 if abs(total - 1.0) <= EXACT_SUM_TOLERANCE else total
                            probs = [v / divisor for v in values]
            if probs is None:  # anything else: the rules decide (and may reject)
                verdicts = verdicts or judge_request(row_questions(row), rec)
                status, p, _ = verdicts[qi]
                probs = p if status == "ok" else None
            acc.add(probs, row.targets[qid].label)
    return acc.result()


# -- measuring ---------------------------------------------------------------------------------------

def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def stage(name: str, fn, repeats: int, results: dict, before=None):
    """Run ``fn`` ``repeats`` times; record the median seconds and the peak RSS of the runs."""
    times, cpu, out = [], [], None
    rss0 = _status_kb("VmRSS")
    _reset_peak()
    for _ in range(repeats):
        out = None  # the previous run's result is not kept alive through the next one
        if before:
            before()
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    results[name] = {"median_s": statistics.median(times), "runs_s": times, "median_cpu_s": statistics.median(cpu),
                     "peak_kb": _status_kb("VmHWM"), "start_kb": rss0}
    return out


def make(work: Path, n_questions: int) -> dict:
    """Phase 1 (own process): the snapshot and the predictions log on disk."""
    rows, records = synthetic(n_questions)
    commit_dataset(PreparedView(view=VIEW, family=family_of(VIEW).name, data="synthetic", rows=rows, sources=[],
                                scoring={"note": "bench_scoring synthetic view"}), work / "snap")
    plog = PredictionLog(work / "records.jsonl")  # the answers, in snapshot order: the input of phase 2
    for rec in records:
        plog.append(rec)
    plog.close()
    return {"questions": sum(len(r.request["questions"]) for r in rows), "requests": len(rows)}


def log_io(work: Path, repeats: int) -> dict:
    """Phase 2 (own process): writing the log as answers arrive, compacting it."""
    records = [json.loads(line) for line in (work / "records.jsonl").read_bytes().splitlines()]
    order = [r["request_id"] for r in records]
    random.Random(1).shuffle(records)  # answers arrive out of order, as they do at concurrency > 1
    log_path = work / "out" / "predictions.jsonl"
    res: dict = {}

    def write_log() -> None:
        log_path.unlink(missing_ok=True)
        plog = PredictionLog(log_path)
        for rec in records:
            plog.append(rec)
        plog.close()

    stage("log write", write_log, repeats, res)
    stage("log open+compact", lambda: PredictionLog(log_path).compact(order), repeats, res, before=write_log)
    PredictionLog(log_path).write_meta({"identity": {"adapter": "replay", "model": "bench"}, "probability_source": "native"})
    return res


def score(work: Path, repeats: int) -> dict:
    """Phase 3 (own process, started with nothing but the files): load, score, save, baseline."""
    log_path = work / "out" / "predictions.jsonl"
    tsv = work / "snap" / f"{VIEW}.tsv"
    res: dict = {}
    stage("sha256sum", lambda: subprocess.run(["sha256sum", str(tsv)], check=True, capture_output=True), repeats, res)
    snapshot = stage("load", lambda: verify_snapshot_bytes(load_snapshot(work / "snap", VIEW)), repeats, res)
    model = {"name": "bench", "adapter": "replay"}
    stage("log open", lambda: PredictionLog(log_path), repeats, res)
    plog = PredictionLog(log_path)  # opened (every line checked, indexed) once, as the run's dataset does
    report, official, qrecords = stage("score node", lambda: steps.score(snapshot, plog, plog.checked_meta(), model), repeats, res)
    # the node's parts, one stage each: what the baseline also does (validation, overall metrics), then the rest
    table = stage("part: validation", lambda: build_question_table(snapshot, plog.records), repeats, res)
    # the per-question terms are kept on the table for the slices after it: computed afresh each repeat
    stage("part: overall metrics", lambda: M.summarize_table(table), repeats, res,
          before=lambda: vars(table).pop("_row_stats", None))
    stage("part: every slice", lambda: generic_metrics(table), repeats, res)
    units, unit_name = resampling_units(snapshot, table)
    stage("part: intervals", lambda: interval_summary(table, units, unit_name), repeats, res)
    stage("part: risk-coverage", lambda: selective_summary(table), repeats, res)
    module = family_of(VIEW).module()
    stage("part: family report", lambda: module.evaluate(snapshot, table, plog.records), repeats, res)
    table = None
    stage("questions save", lambda: (work / "questions.jsonl").write_bytes(question_records(qrecords.table).jsonl()),
          repeats, res)
    qrecords = None  # not kept alive through the side-by-side runs
    if os.environ.get("BENCH_SCORING_PROFILE"):  # one profiled run of the score node, written as pstats
        import cProfile

        prof = cProfile.Profile()
        prof.runcall(steps.score, snapshot, plog, plog.checked_meta(), model)
        prof.dump_stats(os.environ["BENCH_SCORING_PROFILE"])
    # side by side: the score node and the baseline alternate, so a slower phase of a shared machine
    # falls on both; the baseline's snapshot rows are decoded and its records parsed before its clock starts
    rows_snapshot = load_snapshot(work / "snap", VIEW)
    list(rows_snapshot.rows)
    stage("log read (json.loads)", lambda: read_records(log_path), repeats, res)
    records: dict | None = None
    runs: dict[str, list[tuple[float, float]]] = {"node": [], "validation+overall": [], "plain": [], "open": [],
                                                  "read": []}

    def timed(name, fn):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        runs[name].append((time.perf_counter() - t0, time.process_time() - c0))
        return out

    for _ in range(repeats):
        timed("node", lambda: steps.score(snapshot, plog, plog.checked_meta(), model))
        timed("validation+overall", lambda: M.summarize_table(build_question_table(snapshot, plog.records)))
        timed("open", lambda: PredictionLog(log_path))  # what the run's dataset does before the node
        records = None
        records = timed("read", lambda: read_records(log_path))  # the straightforward scorer's reading
        plain = timed("plain", lambda parsed=records: plain_baseline(rows_snapshot, parsed))

    def ratio(name: str, k: int, base: str = "plain") -> float:
        return statistics.median(b[k] / x[k] for b, x in zip(runs[base], runs[name]))

    def from_bytes(base: str) -> float:  # json.loads + the scorer against log open + validation + overall
        return statistics.median((r[0] + b[0]) / (o[0] + v[0]) for r, b, o, v in zip(
            runs["read"], runs[base], runs["open"], runs["validation+overall"]))

    res["side by side"] = {"node_s": [w for w, _ in runs["node"]], "plain_s": [w for w, _ in runs["plain"]],
                           "runs": runs, "ratio": ratio("node", 0), "ratio_cpu": ratio("node", 1),
                           "ratio_vo": ratio("validation+overall", 0), "ratio_vo_cpu": ratio("validation+overall", 1),
                           "ratio_vo_bytes": from_bytes("plain")}
    overall = report["metrics"]["overall"]
    res["max_abs_diff"] = max(abs(plain[k] - overall[k]) for k in plain)
    if res["max_abs_diff"] > 1e-9:
        raise SystemExit(f"the plain scorer's metrics differ from the node's: {plain} / {overall}")
    res["coverage"] = report["coverage"]["by_status"]
    res["slices"] = sum(len(v) for k, v in report["metrics"].items() if k != "overall") + \
        sum(len(v) for k, v in official["groups"].items() if k != "overall")
    res["log_bytes"] = log_path.stat().st_size
    res["tsv_bytes"] = tsv.stat().st_size
    return res


def _phase(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, env={**os.environ})
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_size(n_questions: int, repeats: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench_scoring_"))
    try:
        res = _phase("--phase", "make", str(work), str(n_questions))
        res.update(_phase("--phase", "io", str(work), str(repeats)))
        res.update(_phase("--phase", "score", str(work), str(repeats)))
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, nargs="+", default=[10_000, 100_000, 460_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--view", choices=VIEWS, default=VIEW,
                    help="the view the rows are written as, hence the family report the node runs (default %(default)s)")
    ap.add_argument("--phase", nargs=3, help=argparse.SUPPRESS)  # one phase in this process: prints JSON
    args = ap.parse_args()
    if args.phase:
        name, work, arg = args.phase
        fn = {"make": make, "io": log_io, "score": score}[name]
        print(json.dumps(fn(Path(work), int(arg))))
        return
    os.environ["BENCH_SCORING_VIEW"] = args.view  # for the phases' subprocesses
    for n in args.questions:
        res = run_size(n, args.repeats)
        nq, nr = res["questions"], res["requests"]
        print(f"\n{args.view}: {nq:,} questions, {nr:,} requests (log {res['log_bytes'] / 1e6:.0f} MB, "
              f"TSV {res['tsv_bytes'] / 1e6:.0f} MB), "
              f"medians of {args.repeats}; {res['slices']} slice groups; statuses {res['coverage']}")
        print(f"  {'stage':<24}{'median s':>10}{'CPU s':>8}{'s / 1M q':>10}{'peak RSS MiB':>14}{'added B/request':>17}")
        for name, st in res.items():
            if not isinstance(st, dict) or "median_s" not in st:
                continue
            added = max(st["peak_kb"] - st["start_kb"], 0) * 1024 / nr
            print(f"  {name:<24}{st['median_s']:>10.3f}{st['median_cpu_s']:>8.2f}{st['median_s'] / nq * 1e6:>10.2f}"
                  f"{st['peak_kb'] / 1024:>14.0f}{added:>17.0f}")
        side = res["side by side"]
        read_s, open_s = res["log read (json.loads)"]["median_s"], res["log open"]["median_s"]
        print(f"  side by side, {args.repeats} alternating runs: score node {statistics.median(side['node_s']):.3f} s, "
              f"plain scorer over parsed records {statistics.median(side['plain_s']):.3f} s; plain / score node "
              f"{side['ratio']:.2f}x (median of the runs' ratios); overall metrics equal to {res['max_abs_diff']:.1e}")
        vo = statistics.median(w for w, _ in side["runs"]["validation+overall"])
        print(f"  CPU seconds, plain / score node {side['ratio_cpu']:.2f}x")
        print(f"  validation + overall metrics (what the plain scorer computes), in the same alternation: {vo:.3f} s; "
              f"plain / that {side['ratio_vo']:.2f}x wall, {side['ratio_vo_cpu']:.2f}x CPU")
        print(f"  both from the log's bytes, same alternation: (json.loads read + plain) / (log open + validation "
              f"+ overall metrics) {side['ratio_vo_bytes']:.2f}x wall")
        print(f"  reading the log: json.loads per line {read_s:.3f} s, PredictionLog open {open_s:.3f} s "
              f"({read_s / open_s:.1f}x); (read + plain) / (open + score node) "
              f"{(read_s + statistics.median(side['plain_s'])) / (open_s + statistics.median(side['node_s'])):.2f}x")
        print(f"  load / sha256sum: {res['load']['median_s'] / res['sha256sum']['median_s']:.2f}x")


if __name__ == "__main__":
    main()
