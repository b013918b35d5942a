"""The plain-Python scorer of ``benchmarks/bench_scoring.py`` computes what the score node
computes: a speed ratio against it means something only if both give the same numbers."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jevkedro.nodes import metrics as M
from jevkedro.nodes.validate import build_question_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scoring as B  # noqa: E402


@pytest.mark.parametrize("seed", [0, 1])
def test_the_plain_scorer_equals_the_nodes_overall_metrics(seed):
    rows, records = B.synthetic(4000, seed=seed)
    by_id = {rec["request_id"]: rec for rec in records}
    # answers the plain loop must hand to the rules: an integer, an upper-case type, a
    # choice naming no candidate, an unhashable choice, a key the model added, a noul out of range
    odd = [{"type": "choice", "probabilities": {"opt0": 1, "opt1": 0.0}},
           {"type": "CHOICE", "probabilities": {"opt0": 0.5, "opt1": 0.5}},
           {"type": "choice", "probabilities": {"opt0": 0.5, "opt1": 0.5}, "choice": "opt7"},
           {"type": "choice", "probabilities": {"opt0": 0.5, "opt1": 0.5}, "choice": ["opt0"]},
           {"type": "choice", "probabilities": {"opt0": 0.5, "opt1": 0.5}, "_list_entries": 2}]
    for i, row in enumerate(rows[:200]):
        answers = by_id[row.request_id]["response"]["answers"]
        if not isinstance(answers, dict):  # a list-shaped body: left as it is
            continue
        for qid, question in row.request["questions"].items():
            if question["type"] == "choice" and len(row.candidates[qid]) == 2:
                answers[qid] = odd[i % len(odd)]
            elif question["type"] == "noul":
                answers[qid] = {"noul": 1.5}
    node = M.summarize_table(build_question_table(rows, by_id))
    snapshot = SimpleNamespace(rows=rows)
    got = B.plain_baseline(snapshot, by_id)
    assert all(abs(got[k] - node[k]) <= 1e-12 for k in got), (got, node)
