"""`kedro run --pipelines=decision_index` at full scale, as a user runs it (the CLI, framework included).

Command (from the project root, after `make setup`):

    .venv/bin/python benchmarks/bench_kedro_run.py --work /tmp/kedro_run_bench --repeats 3

Writes the full-scale synthetic Decision Index suite (140,178 requests; invented rows) once, makes a
throw-away copy of the project (``pyproject.toml``, ``conf/base``, an empty ``conf/local``) in
``--work``, and times, ``--repeats`` times each, two commands in fresh processes:

1. **prepare**: ``kedro run --pipelines=decision_index --to-nodes=decision_index.prepare_snapshot``
   (release dataset -> mapping -> snapshot TSV + manifest);
2. **verify -> infer -> score -> track**: ``kedro run --pipelines=decision_index
   --from-nodes=decision_index.verify_snapshot`` with the replay adapter on a file answering every
   request (uniform probabilities), a fresh ``model.name`` per repeat so nothing is reused.

Prints each command's wall time, CPU seconds (user + system) and peak RSS (the kedro process; from ``getrusage`` of a wrapper that
runs only that command) and their medians. The baseline in the same run is
``benchmarks/plain_scorer.py`` (standard-library ``csv`` + ``json``, overall accuracy/NLL/Brier in
Python floats) over the same snapshot and answers: command 2 should stay within 8x it, peak RSS
under 1.5 GB. ``--src`` runs another checkout's code (before/after a change, back to back).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from process_timing import time_command

ROOT = Path(__file__).resolve().parents[1]
VIEW = "decision_index"



def make_project(work: Path) -> Path:
    project = work / "project"
    if project.exists():
        shutil.rmtree(project)
    (project / "conf" / "local").mkdir(parents=True)
    checkout = SRC.parent  # the configuration of the checkout whose code runs
    shutil.copy(checkout / "pyproject.toml", project / "pyproject.toml")
    shutil.copytree(checkout / "conf" / "base", project / "conf" / "base")
    (project / "src").mkdir()
    return project


SRC = ROOT / "src"  # the code that runs (--src: another checkout's)


def timed(project: Path, args: list[str]) -> tuple[float, int, float]:
    """``(wall s, peak RSS bytes, CPU s)`` of one ``kedro run``."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    wall, cpu, rss = time_command([sys.executable, "-m", "kedro", "run", *args], project, env)
    return wall, rss, cpu


def timed_plain(project: Path, answers: Path) -> tuple[float, int, float]:
    """benchmarks/plain_scorer.py (csv + json, Python floats) over the same snapshot and answers."""
    tsv = project / "data" / "02_snapshots" / f"{VIEW}.tsv"
    wall, cpu, rss = time_command([sys.executable, str(ROOT / "benchmarks" / "plain_scorer.py"), str(tsv), str(answers)],
                                  project, dict(os.environ))
    return wall, rss, cpu


def write_replay(project: Path, out: Path) -> int:
    """A replay file answering every question of the prepared snapshot with uniform probabilities."""
    tsv = project / "data" / "02_snapshots" / f"{VIEW}.tsv"
    n = 0
    with open(tsv, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        header = next(src).rstrip("\n").split("\t")
        i_id, i_req, i_cand = header.index("request_id"), header.index("request"), header.index("candidates")
        for line in src:
            cells = line.rstrip("\n").split("\t")
            questions = json.loads(cells[i_req])["questions"]
            candidates = json.loads(cells[i_cand])
            answers = {}
            for qid, q in questions.items():
                cands = candidates[qid]
                if q["type"] == "noul":
                    answers[qid] = {"type": "noul", "noul": 0.5}
                else:
                    answers[qid] = {"type": q["type"], "probabilities": {c: 1 / len(cands) for c in cands}}
            dst.write(json.dumps({"request_id": cells[i_id], "response": {"answers": answers}}) + "\n")
            n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/kedro_run_bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the checkout's src/ whose code runs")
    args = parser.parse_args()
    global SRC
    SRC = args.src.resolve()
    work = Path(args.work)
    suite = work / "suite"
    if not (suite / "added-rows.jsonl.gz").is_file():
        from jevkedro.pipelines.decision_index.synthetic import write_suite

        write_suite(suite, "synthetic")
    project = make_project(work)
    source = f"{VIEW}.prepare.source={suite},{VIEW}.prepare.data=synthetic"
    prepare, rest, plain = [], [], []
    for i in range(args.repeats):
        prepare.append(timed(project, [f"--pipelines={VIEW}", f"--to-nodes={VIEW}.prepare_snapshot", f"--params={source}"]))
        if i == 0:
            answers = work / "answers.jsonl"
            print(f"replay file: {write_replay(project, answers)} requests")
        rest.append(timed(project, [f"--pipelines={VIEW}", f"--from-nodes={VIEW}.verify_snapshot",
                                    f"--params={source},model.adapter=replay,model.path={answers},model.name=bench-{i}-{time.time_ns()}"]))
        plain.append(timed_plain(project, answers))
        print(f"repeat {i + 1}: prepare {prepare[-1][0]:.1f} s ({prepare[-1][1] / 2**30:.2f} GiB), "
              f"verify->track {rest[-1][0]:.1f} s ({rest[-1][1] / 2**30:.2f} GiB), plain scorer {plain[-1][0]:.1f} s; "
              f"CPU s: verify->track {rest[-1][2]:.1f}, plain scorer {plain[-1][2]:.1f} ({rest[-1][2] / plain[-1][2]:.2f}x)")
    p_wall = statistics.median(w for w, _, _ in prepare)
    r_wall = statistics.median(w for w, _, _ in rest)
    print(f"\nmedians over {args.repeats}: prepare {p_wall:.1f} s, verify->infer->score->track {r_wall:.1f} s "
          f"(ratio {r_wall / p_wall:.2f}x)")
    q_wall = statistics.median(w for w, _, _ in plain)
    print(f"plain-Python scorer of the same answers {q_wall:.1f} s: verify->track is {r_wall / q_wall:.2f}x it (guard: <= 8x)")
    r_cpu, q_cpu = statistics.median(c for _, _, c in rest), statistics.median(c for _, _, c in plain)
    print(f"CPU seconds (user + system; steadier than wall time on a shared machine): verify->track {r_cpu:.1f}, "
          f"plain scorer {q_cpu:.1f}: {r_cpu / q_cpu:.2f}x")
    print(f"peak RSS: prepare {max(m for _, m, _ in prepare) / 2**30:.2f} GiB, "
          f"verify->track {max(m for _, m, _ in rest) / 2**30:.2f} GiB (target < 1.5 GB)")


if __name__ == "__main__":
    main()
