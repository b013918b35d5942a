"""Write a SYNTHETIC Procedural Typed Decisions release in the upstream ``all`` Parquet format
(not benchmark data).

    python -m jevkedro.pipelines.procedural_typed_decisions.synthetic --out DIR            # 18,000 rows
    python -m jevkedro.pipelines.procedural_typed_decisions.synthetic --out DIR --sample   # shipped sample

Writes ``DIR/all/test-00000-of-00001.parquet`` with the ``all`` config's columns (``id``, ``task``,
``state``, ``questions``, ``answers``: string; ``level``: int64) and the ``jevkedro_data_kind``
marker in its Parquet metadata, plus the folder marker ``DIR/JEVKEDRO_DATA_KIND.json``, so it can
only be prepared as ``data: synthetic`` / ``sample``.

Layout: 18 tasks (the 13 known ones with their known question keys and types, plus
``placeholder_task_1..5`` standing in for the five unknown tasks) x ``rows_per_task`` rows, levels
cycling 0-4, ids ``task:test:i``. At full scale (1,000 rows per task) the question plan gives
exactly the published 57,016 questions: known tasks 40,700 (arithmetic 2-5 questions per row;
``nested_belief_location`` and ``count_filtered`` from level 2), placeholders 3 questions per row
plus a fourth on 1,316 of their 5,000 rows, spread evenly.

Answers are invented but well-formed; the pure-posterior nouls are exact: ``incident_real`` is the
Bayesian posterior from the state's prior and sensors, ``random_*`` are k/n over the state's lines
(0 and 1 included), ``policy_under_uncertainty.access_allowed`` the probability mass of allowed
roles. Deterministic for a given seed (Python's ``random.Random``).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jevkedro.nodes.parquet_source import write_release_parquet

FAMILY = "procedural_typed_decisions"
RELEASE_FILE = "all/test-00000-of-00001.parquet"
FULL_ROWS_PER_TASK = 1000
SAMPLE_ROWS_PER_TASK = 2
NOTE = ("Written by jevkedro in the format of tasksource/procedural-typed-decisions (config all, split "
        "test). Invented rows, NOT benchmark data: never report results on it as Procedural Typed "
        "Decisions results.")
LEVELS = 5
PLACEHOLDERS = tuple(f"placeholder_task_{i}" for i in range(1, 6))
# Placeholder rows with a fourth question: 1,316 of 5,000 (57,016 - 40,700 - 3 x 5,000).
PLACEHOLDER_FOURTH = (1316, 5000)

SEVERITY = ["minor", "moderate", "major", "critical"]
IMPACT = ["none", "slowed", "blocked", "halted"]
DIRECTION = ["lower", "unchanged", "higher"]
COUNT5 = ["0", "1", "2", "3", "4 or more"]
NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia",
         "Oto", "Pia", "Quin", "Rui", "Sol", "Tao"]
PLACES = ["attic", "basement", "garage", "kitchen", "office", "porch", "shed", "study", "hall", "pantry",
          "loft", "cellar", "den", "yard", "barn", "closet"]


def _opts(names: list[str]) -> dict[str, Any]:
    return {n: None for n in names}


def _choice(options: list[str], answer: str) -> dict[str, Any]:
    return {"type": "choice", "choice": answer, "probabilities": {o: float(o == answer) for o in options},
            "confidence": 1.0}


def _score(levels: list[str], index: int) -> dict[str, Any]:
    return {"type": "score", "score": float(index), "legend": {str(i): t for i, t in enumerate(levels)},
            "probabilities": {str(i): float(i == index) for i in range(len(levels))}, "confidence": 1.0}


def _noul(p: float) -> dict[str, Any]:
    return {"type": "noul", "noul": float(p)}


class Row:
    """Questions and answers of one row, filled by the task builders."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.questions, self.answers = rng, {}, {}
        self.fourth = False  # placeholder tasks: ask the optional fourth question

    def choice(self, key: str, text: str, options: list[str], answer: str | None = None) -> None:
        self.questions[key] = {"type": "choice", "instructions": text, "criteria": _opts(options)}
        self.answers[key] = _choice(options, answer if answer is not None else self.rng.choice(options))

    def score(self, key: str, text: str, levels: list[str], index: int | None = None) -> None:
        self.questions[key] = {"type": "score", "instructions": text, "criteria": list(levels)}
        self.answers[key] = _score(levels, index if index is not None else self.rng.randrange(len(levels)))

    def noul(self, key: str, text: str, p: float | None = None) -> None:
        self.questions[key] = {"type": "noul", "instructions": text}
        self.answers[key] = _noul(p if p is not None else float(self.rng.random() < 0.5))


# ---------------------------------------------------------------------------------------------
# task builders: (rng, level, i, row) -> state (JSON text or rendered text)


def _arithmetic(rng, level, i, row: Row) -> str:
    n_questions = 2 + i % 4
    theme = (i // 4) % 3
    n_lines = 3 + level * 2
    amounts = [round(rng.uniform(-250, 250), 2) for _ in range(n_lines)]
    lines = [f"day {d + 1}: {'deposit' if a > 0 else 'payment'} {abs(a):.2f}" for d, a in enumerate(amounts)]
    k_frac = lambda pred: sum(1 for a in amounts if pred(a)) / n_lines  # exact k/n  # noqa: E731
    value = round(sum(amounts), 2)
    wrong = [f"{value + d:.2f}" for d in (0, 10, -10, 100)]
    main, pool = [
        ("amount_due", [("within_budget", "noul"), ("random_line_bulk", "graded", lambda a: abs(a) > 100),
                        ("budget_use", "score"), ("lines_above", "score"), ("largest_line", "choice")]),
        ("final_balance", [("went_negative", "noul"), ("random_is_deposit", "graded", lambda a: a > 0),
                           ("net_change", "score"), ("withdrawal_count", "score"), ("lowest_day", "choice")]),
        ("finish_time", [("done_by_deadline", "noul"), ("random_is_long", "graded", lambda a: abs(a) > 150),
                         ("starts_before_noon", "score"), ("longest_task", "choice")]),
    ][theme]
    row.choice(main, f"What is the {main.replace('_', ' ')}?", wrong, wrong[0])
    for spec in rng.sample(pool, n_questions - 1):
        key, kind = spec[0], spec[1]
        text = f"{key.replace('_', ' ')}?"
        if kind == "graded":
            row.noul(key, f"If one line is picked at random: {text}", k_frac(spec[2]))
        elif kind == "noul":
            row.noul(key, text)
        elif kind == "score":
            row.score(key, text, COUNT5)
        else:
            row.choice(key, text, [f"day {d + 1}" for d in range(n_lines)])
    return "\n".join(lines)


def _entity_belief_tracking(rng, level, i, row: Row) -> str:
    places = PLACES[: 4 + 3 * level]
    moves = [{"who": rng.choice(NAMES[:4]), "moved": "key", "to": rng.choice(places),
              "seen_by": rng.sample(NAMES[:4], 2)} for _ in range(2 + level)]
    world = moves[-1]["to"]
    row.choice("world_location", "Where is the key now?", places, world)
    row.choice("agent_belief_location", f"Where does {NAMES[0]} think the key is?", places)
    row.noul("belief_matches_world", f"{NAMES[0]}'s belief matches where the key is.")
    if level >= 2:
        row.choice("nested_belief_location", f"Where does {NAMES[1]} think {NAMES[0]} thinks the key is?", places)
    return json.dumps({"locations": places, "events": moves})


def _simple(json_state: Callable[[random.Random, int], dict], questions: list[tuple]) -> Callable:
    """A task whose questions are fixed: (key, type, instructions, options-or-levels or None)."""

    def build(rng, level, i, row: Row) -> str:
        for key, qtype, text, spec in questions:
            if qtype == "choice":
                row.choice(key, text, spec(level) if callable(spec) else spec)
            elif qtype == "score":
                row.score(key, text, spec)
            else:
                row.noul(key, text)
        return json.dumps(json_state(rng, level))

    return build


def _records(rng, level) -> dict:
    return {"records": [{"id": f"R{rng.randrange(10**4):04d}", "owner": rng.choice(NAMES),
                         "status": rng.choice(["open", "closed"]), "t": rng.randrange(1000)}
                        for _ in range(3 + 2 * level)]}


def _partial_observation(rng, level, i, row: Row) -> str:
    prior = round(rng.uniform(0.02, 0.5), 2)
    sensors = [{"name": f"s{j + 1}", "hit_rate": round(rng.uniform(0.5, 0.99), 2),
                "false_alarm": round(rng.uniform(0.01, 0.4), 2), "fired": rng.random() < 0.5}
               for j in range(1 + (level + i) % 6)]
    like_real, like_false = prior, 1 - prior
    for s in sensors:  # P(real | observations) by Bayes' rule, sensors independent given the truth
        like_real *= s["hit_rate"] if s["fired"] else 1 - s["hit_rate"]
        like_false *= s["false_alarm"] if s["fired"] else 1 - s["false_alarm"]
    row.noul("incident_real", "What is the probability that the incident is real?", like_real / (like_real + like_false))
    return json.dumps({"prior": prior, "sensors": sensors})


def _policy_under_uncertainty(rng, level, i, row: Row) -> str:
    roles = ["admin", "analyst", "contractor", "guest"][: 2 + level % 3]
    weights = [rng.randint(0, 4) for _ in roles]
    if not any(weights):
        weights[0] = 1
    allowed = {r: rng.random() < 0.5 for r in roles}
    p_role = {r: w / sum(weights) for r, w in zip(roles, weights)}
    row.noul("access_allowed", "Is access allowed?", sum(p for r, p in p_role.items() if allowed[r]))
    row.choice("governing_policy", "Which policy governs this request?", [f"P{j}" for j in range(1, 4 + level)])
    row.choice("requester_role", "What is the requester's most likely role?", roles,
               max(roles, key=lambda r: p_role[r]))
    return json.dumps({"role_evidence": {r: w for r, w in zip(roles, weights)}, "policy": allowed})


def _needle(rng, level, i, row: Row) -> str:
    n = 6 + round(level * 3.5)
    ids = [f"K{rng.randrange(10**5):05d}" for _ in range(n)]
    values = [f"v{rng.randrange(1000)}" for _ in range(n)]
    row.choice("value_of_id", f"What value is stored for {ids[0]}?", list(dict.fromkeys(values)), values[0])
    row.noul("id_has_value", f"{ids[1]} has value {values[1]}.", 1.0)
    row.noul("id_listed", "K99999 is listed.", 0.0)
    return "\n".join(f"{k} = {v}" for k, v in zip(ids, values))


def _table_lookup(rng, level, i, row: Row) -> str:
    n = 6 + round(level * 8.5)
    people = list(dict.fromkeys(rng.sample(NAMES, min(n, len(NAMES))) + [f"P{j}" for j in range(n)]))[:n]
    row.choice("find_person", "Who started first?", people)
    row.choice("manager_of", f"Who manages {people[0]}?", people[1:] or people)
    row.noul("started_before", f"{people[0]} started before {people[-1]}.")
    row.score("count_matching", "How many people are in ops?", COUNT5)
    return "name,team,start\n" + "\n".join(f"{p},{rng.choice(['ops', 'sales', 'dev'])},{rng.randrange(2000, 2025)}"
                                           for p in people)


def _record_aggregation(rng, level, i, row: Row) -> str:
    row.score("count_in_category", "How many items are in category A?", COUNT5)
    row.choice("largest_quantity", "Which item has the largest quantity?", [f"item{j}" for j in range(4 + level)])
    row.noul("any_out_of_stock", "Some item is out of stock.")
    row.noul("total_above", "The total quantity is above 100.")
    if level >= 2:
        row.score("count_filtered", "How many items in category B have quantity over 10?", COUNT5)
    return "| item | category | qty |\n" + "\n".join(
        f"| item{j} | {rng.choice('AB')} | {rng.randrange(50)} |" for j in range(4 + level))


def _taxonomy(rng, level, i, row: Row) -> str:
    categories = [f"cat_{j:02d}" for j in range(4 + 14 * level)]
    row.choice("route", "Which category does this request belong to?", categories)
    row.noul("belongs_to", f"The request belongs to {categories[0]}.")
    row.score("conditions_met", "How many of the routing conditions are met?", COUNT5)
    return json.dumps({"request": {"text": rng.choice(["refund", "outage", "invoice", "password"]),
                                   "tags": rng.sample(["a", "b", "c", "d", "e"], 2)},
                       "rules": [{"if": f"tag {t}", "then": c} for t, c in zip("abcde", categories)]})


def _placeholder(rng, level, i, row: Row) -> str:
    row.choice("decision", "Which option applies?", ["alpha", "beta", "gamma"])
    row.noul("flag", "The flag condition holds.")
    row.score("grade", "How strong is the signal?", SEVERITY)
    if row.fourth:
        row.choice("detail", "Which detail matters most?", ["x", "y", "z", "w"])
    return json.dumps({"placeholder": True, "facts": [rng.randrange(100) for _ in range(3 + level)]})


TASKS: dict[str, Callable] = {
    "arithmetic": _arithmetic,
    "entity_belief_tracking": _entity_belief_tracking,
    "event_state_reconstruction": _simple(_records, [
        ("current_owner", "choice", "Who owns the ticket now?", NAMES[:5]),
        ("is_open", "noul", "The ticket is still open.", None),
        ("current_severity", "score", "What is the ticket's current severity?", SEVERITY)]),
    "evidence_sufficiency": _simple(_records, [
        ("claim_supported", "noul", "The evidence supports the claim.", None),
        ("has_conflict", "noul", "Two sources conflict.", None),
        ("strongest_support_origin", "choice", "Which source supports the claim most?",
         ["audit_log", "email", "interview", "ticket"])]),
    "multi_view_adjudication": _simple(_records, [
        ("intent", "choice", "What does the user intend?", ["cancel", "upgrade", "report", "ask"]),
        ("is_urgent", "noul", "The request is urgent.", None),
        ("workflow_impact", "score", "How much is the workflow affected?", IMPACT)]),
    "needle_retrieval": _needle,
    "partial_observation_calibration": _partial_observation,
    "policy_applicability": _simple(_records, [
        ("access_allowed", "noul", "Access is allowed.", None),
        ("governing_policy", "choice", "Which policy governs?", lambda level: [f"P{j}" for j in range(1, 4 + level)]),
        ("review_risk", "score", "How risky is granting access?", SEVERITY)]),
    "policy_under_uncertainty": _policy_under_uncertainty,
    "record_aggregation": _record_aggregation,
    "state_perturbation": _simple(_records, [
        ("material_change", "noul", "The change is material.", None),
        ("changed_dimension", "choice", "Which dimension changed?", ["owner", "status", "deadline", "budget"]),
        ("risk_direction", "score", "Which way did the risk move?", DIRECTION)]),
    "table_lookup": _table_lookup,
    "taxonomy_routing": _taxonomy,
    **{name: _placeholder for name in PLACEHOLDERS},
}


def generate_rows(rows_per_task: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of a synthetic ``all/test`` table: tasks in name order, ``rows_per_task`` each."""
    rng = random.Random(seed)
    out = []
    num, den = PLACEHOLDER_FOURTH
    for t, task in enumerate(sorted(TASKS)):
        for i in range(rows_per_task):
            level = (t * rows_per_task + i) % LEVELS
            row = Row(rng)
            if task in PLACEHOLDERS:  # spread floor(n * num / den) fourth questions evenly (Bresenham)
                g = PLACEHOLDERS.index(task) * rows_per_task + i
                row.fourth = (g + 1) * num // den != g * num // den
            state = TASKS[task](rng, level, i, row)
            out.append({"id": f"{task}:test:{i}", "task": task, "level": level, "state": state,
                        "questions": json.dumps(row.questions), "answers": json.dumps(row.answers)})
    return out


def write_release(out: str | Path, rows_per_task: int = FULL_ROWS_PER_TASK, seed: int = 0,
                  kind: str = "synthetic") -> Path:
    """Write ``out/all/test-00000-of-00001.parquet`` and the folder marker; returns the file's path."""
    import pyarrow as pa

    rows = generate_rows(rows_per_task, seed)
    schema = pa.schema([("id", pa.string()), ("task", pa.string()), ("level", pa.int64()),
                        ("state", pa.string()), ("questions", pa.string()), ("answers", pa.string())])
    return write_release_parquet(out, RELEASE_FILE, rows, schema, FAMILY, kind, NOTE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="release folder to write (all/test-00000-of-00001.parquet)")
    parser.add_argument("--sample", action="store_true", help="write the small shipped sample (data kind 'sample')")
    parser.add_argument("--rows-per-task", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    kind = "sample" if args.sample else "synthetic"
    n = args.rows_per_task or (SAMPLE_ROWS_PER_TASK if args.sample else FULL_ROWS_PER_TASK)
    path = write_release(args.out, n, args.seed, kind)
    print(f"wrote {path} ({kind}, {n * len(TASKS)} rows; synthetic, not benchmark data)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
