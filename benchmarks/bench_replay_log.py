"""Reading a replay file, writing and compacting the predictions log, at Decision Index scale.

Commands (from the project root, after `make setup`; about 4 minutes on the 2-core machine, and
about 15 more for the million, run once):

    .venv/bin/python benchmarks/bench_replay_log.py --requests 10000 100000 140178 --repeats 3
    .venv/bin/python benchmarks/bench_replay_log.py --requests 1000000 --repeats 1

For each size (in its own subprocess) a replay file of System One bodies is written (2 questions
per request: a 3-5 option choice with ``choice`` and ``confidence``, and a noul; ``model`` and
``usage`` as Jev returns them), then, medians over ``--repeats``:

- ``replay read``: what a replay run does with the file — ``ReplayAdapter.setup()`` (every line
  read and checked: JSON, request ids, repeated keys) and ``answer()`` for every request;
  baselines in the same run: ``json.loads`` line by line into a dict (a plain per-item loop),
  and the bytes read with ``sha256sum`` (the ideal for touching every byte once);
- ``log write``: every answer appended to the predictions log in completion order (one line,
  one write each, fsync once a second), as the engine does; baselines: ``json.dumps``, write and
  flush per record (a plain per-item loop), and the same bytes written at once (the ideal);
- ``log compact``: the log just written rewritten in snapshot order (``compact``, as the engine
  calls it at the end of a run: the index is in memory); baseline: ``cp`` of the file;
- ``replay run``: ``run_inference`` with the replay adapter on a snapshot of the same requests,
  from reading the file to the compacted log (what ``kedro run ... model.adapter=replay`` costs
  before scoring).

It prints, per size, the median seconds (wall, and CPU of the process and its children),
microseconds per request (constant across sizes when the
cost is linear), the rate, the peak RSS of the stage and what the stage added to the resident size
per request (peak minus the size before the stage, over the requests); then one line per stage
with its microseconds per request at every size. ``--src`` measures another checkout's code with
the same script (before/after).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scoring import stage  # noqa: E402
from jevkedro.models.replay import ReplayAdapter  # noqa: E402
from jevkedro.models.settings import EngineSettings  # noqa: E402
from jevkedro.nodes.engine import make_record  # noqa: E402
from jevkedro.nodes.infer import run_inference  # noqa: E402
from jevkedro.nodes.predictions_log import PredictionLog, encode_record  # noqa: E402
from jevkedro.nodes.snapshot import PreparedView, commit_dataset, load_snapshot, verify_snapshot_bytes  # noqa: E402
from jevkedro.protocol import SnapshotRow, Target  # noqa: E402


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it waited for (sha256sum, cp)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(name: str, fn, repeats: int, results: dict, before=None) -> None:
    """:func:`bench_scoring.stage` (median wall seconds, peak RSS), plus the median CPU seconds:
    on a shared machine the wall time grows with the others' load, the CPU time much less."""
    cpu: list[float] = []

    def run() -> None:
        t0 = _cpu_s()
        fn()
        cpu.append(_cpu_s() - t0)

    stage(name, run, repeats, results, before=before)
    results[name]["cpu_s"] = statistics.median(cpu)


def body(rng: random.Random, k: int) -> dict:
    options = [f"opt{c}" for c in range(k)]
    w = [rng.random() for _ in options]
    probs = {c: round(x / sum(w), 2) for c, x in zip(options, w)}
    return {"model": "jev-1.13.0", "answers": {
        "pick": {"type": "choice", "choice": max(probs, key=probs.get), "confidence": 0.5, "probabilities": probs},
        "flag": {"type": "noul", "noul": round(rng.random(), 2)}},
        "usage": {"input_tokens": 180, "output_tokens": 0}}


def write_inputs(work: Path, n: int) -> tuple[Path, list[str]]:
    rng = random.Random(0)
    rows, lines, ids = [], [], []
    for i in range(n):
        rid = f"di:{i // 1000}:{i:07d}"
        k = rng.randint(3, 5)
        qs = {"pick": {"type": "choice", "instructions": "Which?", "criteria": {f"opt{c}": None for c in range(k)}},
              "flag": {"type": "noul", "instructions": "Is it?"}}
        rows.append(SnapshotRow(rid, {"state": f"case {i}", "questions": qs},
                                {"pick": [f"opt{c}" for c in range(k)], "flag": ["true", "false"]},
                                {"pick": Target(label=0), "flag": Target(label=1)}, {"dataset": f"d{i % 43}"}, {}))
        lines.append(json.dumps({"request_id": rid, "response": body(rng, k)}))
        ids.append(rid)
    commit_dataset(PreparedView("replay_bench", "synthetic", "synthetic", rows, [], {}), work / "snap")
    path = work / "answers.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, ids


def run_size(n: int, repeats: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench_replay_"))
    try:
        path, ids = write_inputs(work, n)
        res: dict = {"requests": n, "replay_bytes": path.stat().st_size}

        def replay_read() -> None:
            adapter = ReplayAdapter(path=str(path))
            adapter.setup()
            for rid in ids:
                adapter.answer(rid, {})

        def per_item_loop() -> None:
            with open(path, encoding="utf-8") as fh:
                {(obj := json.loads(line))["request_id"]: obj["response"] for line in fh}  # noqa: B018

        timed("replay read", replay_read, repeats, res)
        timed("loads loop", per_item_loop, repeats, res)
        timed("sha256sum", lambda: subprocess.run(["sha256sum", str(path)], check=True, capture_output=True), repeats, res)
        adapter = ReplayAdapter(path=str(path))
        adapter.setup()
        completion_order = ids[:]
        random.Random(1).shuffle(completion_order)
        # made in completion order, as the engine makes each record just before appending it (a
        # shuffled list of records made in snapshot order would make every append touch cold memory)
        shuffled = [make_record(rid, adapter.answer(rid, {}), None, "0" * 64, False) for rid in completion_order]
        log_path = work / "out" / "predictions.jsonl"

        written: list[PredictionLog] = []

        def log_write() -> None:
            log_path.unlink(missing_ok=True)
            plog = PredictionLog(log_path)
            for rec in shuffled:
                plog.append(rec)
            plog.close()
            written[:] = [plog]

        lines_bytes = b"".join(map(encode_record, shuffled))

        def ideal_write() -> None:  # the same bytes, one write
            with open(work / "ideal.jsonl", "wb") as fh:
                fh.write(lines_bytes)

        def dumps_loop() -> None:  # per record: json.dumps, write, flush (the log's former writer)
            with open(work / "dumps.jsonl", "wb") as fh:
                for rec in shuffled:
                    fh.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
                    fh.flush()

        timed("log write", log_write, repeats, res)
        timed("ideal write", ideal_write, repeats, res)
        timed("dumps loop", dumps_loop, repeats, res)
        timed("log compact", lambda: written[0].compact(ids), repeats, res, before=log_write)  # as the engine does
        timed("cp", lambda: shutil.copyfile(log_path, work / "copy.jsonl"), repeats, res)
        shuffled.clear()
        snapshot = verify_snapshot_bytes(load_snapshot(work / "snap", "replay_bench"))

        def replay_run() -> None:
            plog = PredictionLog(work / "run" / "predictions.jsonl")
            run_inference(snapshot, ReplayAdapter(path=str(path)), plog, EngineSettings(progress=0))

        timed("replay run", replay_run, repeats, res)
        res["log_bytes"] = log_path.stat().st_size
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ratio(seconds: dict[str, float], a: str, b: str) -> str:
    return f"{seconds[a] / seconds[b]:.2f}x" if seconds[b] > 0 else "n/a"  # CPU seconds tick by 10 ms


STAGES = ("replay read", "loads loop", "sha256sum", "log write", "ideal write", "dumps loop", "log compact", "cp", "replay run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[10_000, 100_000, 140_178])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--src", help="the src folder of the code to measure (default: this checkout's)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_size(args.one, args.repeats)))
        return
    env = {**os.environ}
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src).resolve())
    per_request: dict[str, dict[int, float]] = {}
    for n in args.requests:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--repeats", str(args.repeats)],
                             check=True, capture_output=True, text=True, env=env)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"\n{n:,} requests (replay file {res['replay_bytes'] / 1e6:.0f} MB, log {res['log_bytes'] / 1e6:.0f} MB), "
              f"medians of {args.repeats}; load {os.getloadavg()[0]:.1f}")
        print(f"  {'stage':<14}{'median s':>10}{'CPU s':>8}{'us/request':>12}{'requests/s':>12}{'peak RSS MiB':>14}"
              f"{'added B/request':>17}")
        for name in STAGES:
            st = res[name]
            added = max(st["peak_kb"] - st["start_kb"], 0) * 1024 / n
            per_request.setdefault(name, {})[n] = st["median_s"] / n * 1e6
            print(f"  {name:<14}{st['median_s']:>10.3f}{st['cpu_s']:>8.3f}{st['median_s'] / n * 1e6:>12.2f}{n / st['median_s']:>12,.0f}"
                  f"{st['peak_kb'] / 1024:>14.0f}{added:>17.0f}")
        for what in ("median_s", "cpu_s"):
            r = {name: res[name][what] for name in STAGES}
            ratio = functools.partial(_ratio, r)
            print(f"  {'wall' if what == 'median_s' else 'CPU'}: replay read / loads loop {ratio('replay read', 'loads loop')}, "
                  f"/ sha256sum {ratio('replay read', 'sha256sum')};  log write / dumps loop {ratio('log write', 'dumps loop')}, "
                  f"/ ideal write {ratio('log write', 'ideal write')};  log compact / cp {ratio('log compact', 'cp')}")
    if len(args.requests) > 1:
        print("\nmicroseconds per request (linear cost: the same at every size)")
        print(f"  {'stage':<14}" + "".join(f"{n:>12,}" for n in args.requests))
        for name in STAGES:
            print(f"  {name:<14}" + "".join(f"{per_request[name][n]:>12.2f}" for n in args.requests))


if __name__ == "__main__":
    main()
